//! Concourse's `build_log_retention` (and the deprecated
//! `build_logs_to_retain`): which of a job's finished builds lose their
//! logs on a collection pass.
//!
//! As Concourse's docs define it, the policies keep logs independently
//! and a build is reaped only when none keeps it: `days` keeps the builds
//! that finished within that many days; `builds` keeps the newest that
//! many finished builds; `minimum_succeeded_builds` (with `builds` only)
//! keeps the newest that many succeeded builds within the `builds` count
//! even when newer failures would push them out (so with `builds: 5` and
//! one succeeded build kept, a history `7f 6f 5f 4f 3f 2f 1s` keeps 7, 6,
//! 5, 4 and 1). With both `days` and `builds`, a build is reaped only once
//! it is older than `days` *and* outside the count. A build still running
//! (or pending) is never reaped and takes no place. Zero (or absent) is
//! no limit; a policy with neither `builds` nor `days` reaps nothing.

use super::Job;
use crate::build::BuildStatus;
use crate::UnixMillis;

const DAY_MS: i64 = 24 * 3600 * 1000;

/// A job's log retention, from either of its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogRetention {
    pub builds: u32,
    pub days: u32,
    pub minimum_succeeded_builds: u32,
}

impl LogRetention {
    /// The job's policy; none when it keeps every log.
    pub fn of_job(job: &Job) -> Option<LogRetention> {
        let policy = match (&job.build_log_retention, job.build_logs_to_retain) {
            (Some(r), _) => LogRetention {
                builds: r.builds,
                days: r.days,
                minimum_succeeded_builds: r.minimum_succeeded_builds,
            },
            (None, Some(n)) => LogRetention {
                builds: n,
                ..LogRetention::default()
            },
            (None, None) => return None,
        };
        (policy.builds > 0 || policy.days > 0).then_some(policy)
    }
}

impl LogRetention {
    /// The policy of a job as stored (the job's config in
    /// `get-pipeline`'s JSON, checked when it was set); none when it keeps
    /// every log.
    pub fn of_job_json(job: &serde_json::Value) -> Option<LogRetention> {
        let count = |v: Option<&serde_json::Value>| {
            v.and_then(serde_json::Value::as_u64)
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        let policy = match job.get("build_log_retention") {
            Some(r) => LogRetention {
                builds: count(r.get("builds")),
                days: count(r.get("days")),
                minimum_succeeded_builds: count(r.get("minimum_succeeded_builds")),
            },
            None => LogRetention {
                builds: count(job.get("build_logs_to_retain")),
                ..LogRetention::default()
            },
        };
        (policy.builds > 0 || policy.days > 0).then_some(policy)
    }
}

/// One build of the job as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetainedBuild {
    pub id: i64,
    pub status: BuildStatus,
    pub finished_at: Option<UnixMillis>,
}

/// The ids of the builds (given newest first) whose logs `policy` reaps at
/// `now`, newest first. Builds already reaped may be given: they are
/// answered again, and the caller skips them.
pub fn builds_to_reap(
    builds_newest_first: &[RetainedBuild],
    policy: &LogRetention,
    now: UnixMillis,
) -> Vec<i64> {
    if policy.builds == 0 && policy.days == 0 {
        return vec![];
    }
    let kept_by_days = |b: &RetainedBuild| {
        policy.days > 0
            && b.finished_at
                .is_some_and(|at| at.saturating_add(i64::from(policy.days) * DAY_MS) >= now)
    };
    let finished: Vec<&RetainedBuild> = builds_newest_first
        .iter()
        .filter(|b| b.status.is_final())
        .collect();
    // The newest succeeded builds take their places in the count first
    // (only where a count is set).
    let reserved: Vec<i64> = if policy.builds > 0 {
        finished
            .iter()
            .filter(|b| b.status == BuildStatus::Succeeded)
            .take(policy.minimum_succeeded_builds as usize)
            .map(|b| b.id)
            .collect()
    } else {
        vec![]
    };
    let mut others_left = (policy.builds as usize).saturating_sub(reserved.len());
    let mut reap = vec![];
    for b in finished {
        let kept_by_count = if reserved.contains(&b.id) {
            true
        } else if others_left > 0 {
            others_left -= 1;
            true
        } else {
            false
        };
        if !kept_by_count && !kept_by_days(b) {
            reap.push(b.id);
        }
    }
    reap
}

#[cfg(test)]
mod tests {
    use super::*;
    use BuildStatus::*;

    const NOW: i64 = 100 * DAY_MS;

    /// Builds numbered from `history.len()` down to 1 (newest first), from
    /// `"7f 6s 5r"`-like text: s succeeded, f failed, e errored, a aborted,
    /// r running, p pending; each finished `n` days before now where the
    /// letter is followed by `@n` (else just now).
    fn history(text: &str) -> Vec<RetainedBuild> {
        text.split_whitespace()
            .map(|word| {
                let (head, days) = word.split_once('@').unwrap_or((word, "0"));
                let status = match head.chars().last().unwrap() {
                    's' => Succeeded,
                    'f' => Failed,
                    'e' => Errored,
                    'a' => Aborted,
                    'r' => Started,
                    'p' => Pending,
                    other => panic!("status {other}"),
                };
                let id = head[..head.len() - 1].parse().unwrap();
                let days: i64 = days.parse().unwrap();
                RetainedBuild {
                    id,
                    status,
                    finished_at: status.is_final().then_some(NOW - days * DAY_MS - 1),
                }
            })
            .collect()
    }

    fn policy(builds: u32, days: u32, minimum_succeeded_builds: u32) -> LogRetention {
        LogRetention {
            builds,
            days,
            minimum_succeeded_builds,
        }
    }

    #[test]
    fn which_builds_lose_their_logs() {
        let cases: &[(&str, LogRetention, &str, &[i64])] = &[
            ("no limit", policy(0, 0, 0), "3f 2f 1f", &[]),
            ("count", policy(2, 0, 0), "4f 3s 2f 1s", &[2, 1]),
            ("count over all", policy(5, 0, 0), "2f 1s", &[]),
            (
                "Concourse's example: the newest success kept beyond the count",
                policy(5, 0, 1),
                "7f 6f 5f 4f 3f 2f 1s",
                &[3, 2],
            ),
            (
                "a success among the newest needs no extra place",
                policy(3, 0, 1),
                "5s 4s 3f 2f 1f",
                &[2, 1],
            ),
            (
                "fewer successes than the minimum: the count decides",
                policy(2, 0, 2),
                "4f 3f 2s 1f",
                &[3, 1],
            ),
            (
                "running and pending builds take no place and are kept",
                policy(1, 0, 0),
                "5p 4r 3f 2f 1f",
                &[2, 1],
            ),
            ("days", policy(0, 2, 0), "4f@0 3s@1 2f@3 1s@9", &[2, 1]),
            (
                "days and count: reaped only when neither keeps it",
                policy(2, 2, 0),
                "4f@0 3s@1 2f@1 1s@9",
                &[1],
            ),
            (
                "Concourse's example: builds spanning more than `days` kept by the count",
                policy(3, 2, 0),
                "4f@0 3f@5 2f@6 1f@7",
                &[1],
            ),
            (
                "an old success is kept by the minimum, all policies being independent",
                policy(1, 2, 1),
                "3f@0 2f@1 1s@9",
                &[],
            ),
            (
                "an old failure outside the count and the days is reaped",
                policy(1, 2, 1),
                "4f@0 3f@1 2f@8 1s@9",
                &[2],
            ),
            (
                "the minimum without a count keeps nothing more",
                policy(0, 1, 1),
                "2f@0 1s@5",
                &[1],
            ),
            (
                "errored and aborted builds count as failures",
                policy(2, 0, 1),
                "4e 3a 2s 1f",
                &[3, 1],
            ),
        ];
        for (what, policy, builds, want) in cases {
            let got = builds_to_reap(&history(builds), policy, NOW);
            assert_eq!(got, *want, "{what}: {builds} with {policy:?}");
        }
    }

    #[test]
    fn a_job_s_policy_from_either_field() {
        let job = |retention: &str| -> Job {
            let text = format!(
                "jobs:\n- name: j\n{retention}  plan:\n  - task: t\n    config: \
                 {{platform: linux, run: {{path: x}}}}\n"
            );
            crate::pipeline::parse_pipeline(&text)
                .unwrap()
                .config
                .jobs
                .remove(0)
        };
        assert_eq!(LogRetention::of_job(&job("")), None);
        // As stored: the job's config as JSON reads the same.
        for retention in [
            "",
            "  build_logs_to_retain: 3\n",
            "  build_log_retention: {builds: 4, days: 2, minimum_succeeded_builds: 1}\n",
            "  build_log_retention: {days: 2}\n",
        ] {
            let j = job(retention);
            let stored = serde_json::to_value(&j).unwrap();
            assert_eq!(
                LogRetention::of_job_json(&stored),
                LogRetention::of_job(&j),
                "{retention}"
            );
        }
        assert_eq!(
            LogRetention::of_job(&job("  build_logs_to_retain: 3\n")),
            Some(policy(3, 0, 0))
        );
        assert_eq!(
            LogRetention::of_job(&job(
                "  build_log_retention: {builds: 4, days: 2, minimum_succeeded_builds: 1}\n"
            )),
            Some(policy(4, 2, 1))
        );
        assert_eq!(
            LogRetention::of_job(&job(
                "  build_log_retention: {minimum_succeeded_builds: 1}\n"
            )),
            None,
            "neither builds nor days: every log kept"
        );
    }
}
