//! Whether a job's next build is due, and if not, why it waits.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::resolve::{Resolution, Resolved, Unresolved};
use super::{Input, JobId};

/// What besides its inputs holds a job back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobGate {
    pub pipeline_paused: bool,
    pub job_paused: bool,
    /// A user asked for a build (`trigger-job`): it is due as soon as every
    /// input resolves, new versions or not.
    pub manual: bool,
}

/// The scheduler's answer for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextBuild {
    /// Create a build with these input versions.
    Create(BTreeMap<String, Resolved>),
    Wait(Waiting),
}

/// Why a job does not run: what `hangar jobs` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    PipelinePaused,
    JobPaused,
    /// An input has no version; the job names resolve the ids of
    /// [`Unresolved::NotPassed`].
    Input {
        name: String,
        why: Unresolved,
    },
    /// Every `trigger: true` input's version was used by an earlier build
    /// (or the job has no trigger inputs): nothing new to build.
    NoNewVersions,
}

impl Waiting {
    /// A stable code for the reason (the `reason` field of a job's
    /// `waiting` in the API), and the input it is about.
    pub fn reason(&self) -> (&'static str, Option<&str>) {
        match self {
            Waiting::PipelinePaused => ("pipeline_paused", None),
            Waiting::JobPaused => ("job_paused", None),
            Waiting::NoNewVersions => ("no_new_versions", None),
            Waiting::Input { name, why } => (
                match why {
                    Unresolved::NoVersion => "no_version",
                    Unresolved::PinnedVersionNotFound => "pinned_version_not_found",
                    Unresolved::NotPassed(_) => "not_passed",
                    Unresolved::TooManyBuilds => "too_many_builds",
                },
                Some(name),
            ),
        }
    }

    /// The reason in words, with job ids named by `job_name`.
    pub fn describe(&self, job_name: &dyn Fn(JobId) -> String) -> String {
        match self {
            Waiting::PipelinePaused => "the pipeline is paused".into(),
            Waiting::JobPaused => "the job is paused".into(),
            Waiting::NoNewVersions => "no new versions of its trigger inputs".into(),
            Waiting::Input { name, why } => match why {
                Unresolved::NoVersion => format!("input {name}: no version yet"),
                Unresolved::PinnedVersionNotFound => {
                    format!("input {name}: no version matches its pin")
                }
                Unresolved::NotPassed(jobs) => format!(
                    "input {name}: no version has passed {}",
                    jobs.iter()
                        .map(|j| job_name(*j))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
                Unresolved::TooManyBuilds => format!(
                    "input {name}: too many builds of its passed jobs to search; pin a version"
                ),
            },
        }
    }
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&|id| format!("job {id}")))
    }
}

/// Decides on a job's next build from its resolution. `used_before` names
/// the inputs whose resolved version an earlier build of the job already
/// had for that input: Concourse builds again only when a trigger input's
/// version is a first occurrence, however long ago the other was used.
pub fn decide(
    gate: JobGate,
    inputs: &[Input],
    resolution: &Resolution,
    used_before: &BTreeSet<String>,
) -> NextBuild {
    if gate.pipeline_paused {
        return NextBuild::Wait(Waiting::PipelinePaused);
    }
    if gate.job_paused {
        return NextBuild::Wait(Waiting::JobPaused);
    }
    let mut chosen = BTreeMap::new();
    for input in inputs {
        match resolution.inputs.get(&input.name) {
            Some(Ok(r)) => {
                chosen.insert(input.name.clone(), r.clone());
            }
            Some(Err(why)) => {
                return NextBuild::Wait(Waiting::Input {
                    name: input.name.clone(),
                    why: why.clone(),
                })
            }
            None => {
                return NextBuild::Wait(Waiting::Input {
                    name: input.name.clone(),
                    why: Unresolved::NoVersion,
                })
            }
        }
    }
    let new_trigger = inputs
        .iter()
        .any(|i| i.trigger && !used_before.contains(&i.name));
    if gate.manual || new_trigger {
        NextBuild::Create(chosen)
    } else {
        NextBuild::Wait(Waiting::NoNewVersions)
    }
}
