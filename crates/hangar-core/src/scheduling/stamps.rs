//! Whether a job needs deciding again: everything its decision reads,
//! reduced to stamps the store answers with a few indexed queries per
//! pipeline. A job whose stamp is the one it had at its last decision
//! would be decided the same way, so the scheduler skips it; an idle
//! pipeline costs its stamps' queries and nothing per job.

use std::collections::BTreeMap;

use super::config::job_inputs;
use crate::pipeline::{Job, PipelineConfig};

/// What of a resource a decision reads: its scope's newest version (by
/// check order), its disabled versions and its API pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceStamp {
    pub newest_check_order: i64,
    /// How many versions are disabled, and the sum of their ids: a
    /// version enabled and another disabled changes the sum.
    pub disabled: (i64, i64),
    pub api_pin: Option<i64>,
}

/// A job's newest build: its number and whether it has finished (and
/// how), so a build that ends or starts changes the stamp.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildStamp {
    pub number: i64,
    pub status: String,
}

/// A pipeline's stamps, by resource and job name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipelineStamps {
    pub resources: BTreeMap<String, ResourceStamp>,
    pub jobs: BTreeMap<String, BuildStamp>,
}

/// Everything `job`'s decision reads, as one comparable value: its own
/// newest build, and for each input its resource's stamp and the newest
/// build of each job it must have passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStamp {
    own: BuildStamp,
    inputs: Vec<(ResourceStamp, Vec<BuildStamp>)>,
}

pub fn job_stamp(config: &PipelineConfig, job: &Job, stamps: &PipelineStamps) -> JobStamp {
    let build = |name: &str| stamps.jobs.get(name).cloned().unwrap_or_default();
    JobStamp {
        own: build(&job.name),
        inputs: job_inputs(config, job)
            .iter()
            .map(|i| {
                (
                    stamps
                        .resources
                        .get(&i.resource)
                        .copied()
                        .unwrap_or_default(),
                    i.passed.iter().map(|p| build(p)).collect(),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::parse_pipeline;

    const PIPELINE: &str = "
resources:
- {name: a, type: mock, source: {}}
- {name: b, type: mock, source: {}}
- {name: other, type: mock, source: {}}
jobs:
- {name: up, plan: [{get: a, trigger: true}]}
- {name: down, plan: [{get: a, passed: [up], trigger: true}, {get: b}]}
- {name: unrelated, plan: [{get: other, trigger: true}]}
";

    fn stamps() -> PipelineStamps {
        let mut s = PipelineStamps::default();
        for r in ["a", "b", "other"] {
            s.resources.insert(
                r.into(),
                ResourceStamp {
                    newest_check_order: 10,
                    ..Default::default()
                },
            );
        }
        for j in ["up", "down", "unrelated"] {
            s.jobs.insert(
                j.into(),
                BuildStamp {
                    number: 3,
                    status: "succeeded".into(),
                },
            );
        }
        s
    }

    #[test]
    fn a_job_is_decided_again_exactly_when_something_it_reads_changed() {
        let config = parse_pipeline(PIPELINE).unwrap().config;
        let down = config.job("down").unwrap();
        let before = job_stamp(&config, down, &stamps());
        type Change = fn(&mut PipelineStamps);
        // (what changed, whether `down` must be decided again)
        let cases: [(&str, Change, bool); 9] = [
            ("nothing", |_| {}, false),
            (
                "a new version of its input",
                |s| s.resources.get_mut("a").unwrap().newest_check_order += 1,
                true,
            ),
            (
                "a new version of its non-trigger input",
                |s| s.resources.get_mut("b").unwrap().newest_check_order += 1,
                true,
            ),
            (
                "a version of it disabled",
                |s| s.resources.get_mut("b").unwrap().disabled = (1, 7),
                true,
            ),
            (
                "a pin",
                |s| s.resources.get_mut("a").unwrap().api_pin = Some(4),
                true,
            ),
            (
                "a build of the passed job finished",
                |s| s.jobs.get_mut("up").unwrap().status = "failed".into(),
                true,
            ),
            (
                "its own next build",
                |s| s.jobs.get_mut("down").unwrap().number += 1,
                true,
            ),
            (
                "an unrelated resource",
                |s| s.resources.get_mut("other").unwrap().newest_check_order += 1,
                false,
            ),
            (
                "an unrelated job",
                |s| s.jobs.get_mut("unrelated").unwrap().number += 1,
                false,
            ),
        ];
        for (what, change, again) in cases {
            let mut s = stamps();
            change(&mut s);
            assert_eq!(job_stamp(&config, down, &s) != before, again, "{what}");
        }
    }
}
