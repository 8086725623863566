//! Whether a job needs deciding again: everything its decision reads,
//! reduced to stamps the store answers with a few indexed queries per
//! pipeline. A job whose stamp is the one it had at its last decision
//! would be decided the same way, so the scheduler skips it; an idle
//! pipeline costs its stamps' queries and nothing per job.

use std::collections::BTreeMap;

use super::config::{job_inputs, NamedVersion};
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

/// A job's builds as the decisions that read them see them: its newest
/// build's number and status (what the job's own decision reads), and its
/// newest *succeeded* build's number (all a downstream job's `passed`
/// constraint reads: a build that is created, starts, fails or errors
/// changes no candidate downstream).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildStamp {
    pub number: i64,
    pub status: String,
    pub newest_succeeded: i64,
}

/// A pipeline's stamps, by resource and job name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipelineStamps {
    pub resources: BTreeMap<String, ResourceStamp>,
    pub jobs: BTreeMap<String, BuildStamp>,
}

/// Everything `job`'s decision reads, as one comparable value: its own
/// newest build, and for each input its resource's stamp and the newest
/// succeeded build of each job it must have passed.
///
/// An input with `passed` takes its candidates from those jobs' succeeded
/// builds only, so its resource's newest version is left out: a version no
/// passed job has built yet cannot be chosen (unless the input is pinned by
/// config, whose pin is matched against the resource's versions). Without
/// this, every new version and every build start would decide the whole
/// fan-out below it again, which on PostgreSQL costs a round trip per
/// statement of each of those decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStamp {
    own: (i64, String),
    inputs: Vec<(ResourceStamp, Vec<i64>)>,
}

pub fn job_stamp(config: &PipelineConfig, job: &Job, stamps: &PipelineStamps) -> JobStamp {
    let build = |name: &str| stamps.jobs.get(name).cloned().unwrap_or_default();
    let own = build(&job.name);
    JobStamp {
        own: (own.number, own.status),
        inputs: job_inputs(config, job)
            .iter()
            .map(|i| {
                let mut resource = stamps
                    .resources
                    .get(&i.resource)
                    .copied()
                    .unwrap_or_default();
                let pinned_by_config = matches!(i.version, NamedVersion::Pinned(_));
                if !i.passed.is_empty() && !pinned_by_config {
                    resource.newest_check_order = 0;
                }
                (
                    resource,
                    i.passed.iter().map(|p| build(p).newest_succeeded).collect(),
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
- {name: pinned, plan: [{get: a, passed: [up], version: {v: '7'}}]}
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
        for j in ["up", "down", "unrelated", "pinned"] {
            s.jobs.insert(
                j.into(),
                BuildStamp {
                    number: 3,
                    status: "succeeded".into(),
                    newest_succeeded: 3,
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
        let cases: [(&str, Change, bool); 13] = [
            ("nothing", |_| {}, false),
            (
                "a new version of its input with passed: none has passed yet",
                |s| s.resources.get_mut("a").unwrap().newest_check_order += 1,
                false,
            ),
            (
                "a new version of its input without passed",
                |s| s.resources.get_mut("b").unwrap().newest_check_order += 1,
                true,
            ),
            (
                "a version of it disabled",
                |s| s.resources.get_mut("b").unwrap().disabled = (1, 7),
                true,
            ),
            (
                "a version of its passed input disabled",
                |s| s.resources.get_mut("a").unwrap().disabled = (1, 7),
                true,
            ),
            (
                "a pin",
                |s| s.resources.get_mut("a").unwrap().api_pin = Some(4),
                true,
            ),
            (
                "a build of the passed job succeeded",
                |s| {
                    let up = s.jobs.get_mut("up").unwrap();
                    up.number += 1;
                    up.newest_succeeded = up.number;
                },
                true,
            ),
            (
                "a build of the passed job was created",
                |s| {
                    let up = s.jobs.get_mut("up").unwrap();
                    up.number += 1;
                    up.status = "pending".into();
                },
                false,
            ),
            (
                "a build of the passed job failed",
                |s| {
                    let up = s.jobs.get_mut("up").unwrap();
                    up.number += 1;
                    up.status = "failed".into();
                },
                false,
            ),
            (
                "its own next build",
                |s| s.jobs.get_mut("down").unwrap().number += 1,
                true,
            ),
            (
                "its own build finished",
                |s| s.jobs.get_mut("down").unwrap().status = "failed".into(),
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

    #[test]
    fn an_input_pinned_by_config_reads_new_versions_even_with_passed() {
        // The pin is matched against the resource's versions: the version
        // it names may only now have been checked.
        let config = parse_pipeline(PIPELINE).unwrap().config;
        let pinned = config.job("pinned").unwrap();
        let before = job_stamp(&config, pinned, &stamps());
        let mut s = stamps();
        s.resources.get_mut("a").unwrap().newest_check_order += 1;
        assert_ne!(job_stamp(&config, pinned, &s), before);
    }
}
