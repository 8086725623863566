//! The benchmark's pipeline and its history: 100 jobs in a fan-out /
//! fan-in graph over 20 resources, and a consistent past (build `t` of
//! every job used version `t * step` of each of its resources, so every
//! `passed` constraint held when it ran).

use std::fmt::Write as _;

use hangar_store::{HistoricBuild, Store};
use serde_json::json;

pub const RESOURCES: usize = 20;

/// One `get` of a job: resource index and the jobs it must have passed.
#[derive(Debug, Clone)]
pub struct Get {
    pub resource: usize,
    pub passed: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub gets: Vec<Get>,
}

pub fn resource_name(i: usize) -> String {
    format!("r{i:02}")
}

/// The 100 jobs: 20 `unit` jobs (one resource each), 40 `int` jobs (two
/// resources, each passed through its unit job), 30 `sys` jobs (fan-in:
/// one resource passed through two int jobs, or two resources passed
/// through one int job, which must then come from the same build) and 10
/// `ship` jobs (two resources through two sys jobs).
pub fn jobs() -> Vec<Job> {
    let mut jobs = Vec::new();
    let get = |resource: usize, passed: Vec<String>| Get { resource, passed };
    for i in 0..RESOURCES {
        jobs.push(Job {
            name: format!("unit-{i:02}"),
            gets: vec![get(i, vec![])],
        });
    }
    let int_resources = |k: usize| (k % RESOURCES, (k + 7) % RESOURCES);
    for k in 0..40 {
        let (a, b) = int_resources(k);
        jobs.push(Job {
            name: format!("int-{k:02}"),
            gets: vec![
                get(a, vec![format!("unit-{a:02}")]),
                get(b, vec![format!("unit-{b:02}")]),
            ],
        });
    }
    for m in 0..30 {
        let gets = if m < 20 {
            // int-m and int-(m+20) both read resource m.
            vec![get(
                m,
                vec![format!("int-{m:02}"), format!("int-{:02}", m + 20)],
            )]
        } else {
            let k = m - 20;
            let (a, b) = int_resources(k);
            let via = format!("int-{k:02}");
            vec![get(a, vec![via.clone()]), get(b, vec![via])]
        };
        jobs.push(Job {
            name: format!("sys-{m:02}"),
            gets,
        });
    }
    for n in 0..10 {
        jobs.push(Job {
            name: format!("ship-{n:02}"),
            gets: vec![
                get(n, vec![format!("sys-{n:02}")]),
                get(n + 10, vec![format!("sys-{:02}", n + 10)]),
            ],
        });
    }
    jobs
}

/// The pipeline's YAML. Resources are never checked (`check_every:
/// never`): the benchmark adds versions itself.
pub fn pipeline_yaml() -> String {
    let mut y = String::from("resources:\n");
    for i in 0..RESOURCES {
        let _ = writeln!(
            y,
            "- {{name: {}, type: mock, source: {{bench: {i}}}, check_every: never}}",
            resource_name(i)
        );
    }
    y.push_str("jobs:\n");
    for job in jobs() {
        let _ = writeln!(y, "- name: {}\n  plan:", job.name);
        for g in &job.gets {
            let passed = if g.passed.is_empty() {
                String::new()
            } else {
                format!(", passed: [{}]", g.passed.join(", "))
            };
            let _ = writeln!(
                y,
                "  - {{get: {}, trigger: true{passed}}}",
                resource_name(g.resource)
            );
        }
    }
    y
}

/// What [`fill`] made: each resource's version ids in check order.
pub struct Filled {
    pub versions: Vec<Vec<i64>>,
    pub builds: usize,
}

/// Inserts `versions_per_resource` versions of every resource and
/// `builds_per_job` succeeded builds of every job.
pub async fn fill(
    store: &Store,
    team: &str,
    pipeline: &str,
    versions_per_resource: usize,
    builds_per_job: usize,
    now: i64,
) -> anyhow::Result<Filled> {
    let mut versions = Vec::with_capacity(RESOURCES);
    let mut resource_ids = Vec::with_capacity(RESOURCES);
    for i in 0..RESOURCES {
        let r = store.resource(team, pipeline, &resource_name(i)).await?;
        let values: Vec<_> = (0..versions_per_resource)
            .map(|v| json!({"v": v.to_string()}))
            .collect();
        versions.push(store.insert_versions(r.id, &values, now).await?);
        resource_ids.push(r.id);
    }
    // Build `t` takes version `(t + 1) * step - 1`, so the last build took
    // the newest version: nothing is due when web starts.
    let step = (versions_per_resource / builds_per_job.max(1)).max(1);
    let mut builds = 0;
    for job in jobs() {
        let j = store.job(team, pipeline, &job.name).await?;
        let history: Vec<HistoricBuild> = (0..builds_per_job)
            .map(|t| {
                let at = if t + 1 == builds_per_job {
                    versions_per_resource.saturating_sub(1)
                } else {
                    ((t + 1) * step - 1).min(versions_per_resource.saturating_sub(1))
                };
                HistoricBuild {
                    inputs: job
                        .gets
                        .iter()
                        .map(|g| {
                            (
                                resource_name(g.resource),
                                resource_ids[g.resource],
                                versions[g.resource][at],
                            )
                        })
                        .collect(),
                    outputs: vec![],
                }
            })
            .collect();
        let name = format!("{pipeline}/{}", job.name);
        builds += store
            .insert_succeeded_job_builds(j.id, &name, &history, now)
            .await?
            .len();
    }
    Ok(Filled { versions, builds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_has_100_jobs_and_is_valid() {
        assert_eq!(jobs().len(), 100);
        let parsed = hangar_core::pipeline::parse_pipeline(&pipeline_yaml()).unwrap();
        assert_eq!(parsed.config.jobs.len(), 100);
        assert_eq!(parsed.config.resources.len(), RESOURCES);
    }
}
