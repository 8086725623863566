//! Which pending builds of a pipeline's jobs may start: `serial`,
//! `serial_groups` and `max_in_flight`, as Concourse applies them.

use std::collections::{BTreeMap, BTreeSet};

use super::{BuildId, JobId};

/// A job's limits on running builds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartLimits {
    /// `max_in_flight`; `serial: true` and any serial group make it 1, as
    /// in Concourse.
    pub max_in_flight: Option<u32>,
    pub serial_groups: BTreeSet<String>,
}

impl StartLimits {
    pub fn new(serial: bool, serial_groups: &[String], max_in_flight: Option<u32>) -> Self {
        let serial_groups: BTreeSet<String> = serial_groups.iter().cloned().collect();
        let max_in_flight = if serial || !serial_groups.is_empty() {
            Some(1)
        } else {
            max_in_flight.filter(|n| *n > 0)
        };
        StartLimits {
            max_in_flight,
            serial_groups,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningBuild {
    pub id: BuildId,
    pub job: JobId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingBuild {
    pub id: BuildId,
    pub job: JobId,
}

/// The pending builds (oldest first in `pending`) that may start now.
/// Builds start in order of creation: within a job, and across the jobs of
/// a serial group, a build never overtakes an older one still held.
pub fn startable(
    limits: &BTreeMap<JobId, StartLimits>,
    running: &[RunningBuild],
    pending: &[PendingBuild],
) -> Vec<BuildId> {
    let none = StartLimits::default();
    let limits_of = |job: JobId| limits.get(&job).unwrap_or(&none);
    let mut per_job: BTreeMap<JobId, u32> = BTreeMap::new();
    let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
    for r in running {
        *per_job.entry(r.job).or_default() += 1;
        for g in &limits_of(r.job).serial_groups {
            *per_group.entry(g.as_str()).or_default() += 1;
        }
    }
    let mut held_jobs: BTreeSet<JobId> = BTreeSet::new();
    let mut held_groups: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    for p in pending {
        let l = limits_of(p.job);
        let job_full = l
            .max_in_flight
            .is_some_and(|max| per_job.get(&p.job).copied().unwrap_or(0) >= max);
        let group_blocked = l.serial_groups.iter().any(|g| {
            held_groups.contains(g.as_str()) || per_group.get(g.as_str()).copied().unwrap_or(0) >= 1
        });
        if held_jobs.contains(&p.job) || job_full || group_blocked {
            held_jobs.insert(p.job);
            held_groups.extend(l.serial_groups.iter().map(String::as_str));
            continue;
        }
        out.push(p.id);
        *per_job.entry(p.job).or_default() += 1;
        for g in &l.serial_groups {
            *per_group.entry(g.as_str()).or_default() += 1;
        }
    }
    out
}
