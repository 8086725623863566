//! Which worker a step runs on.

use std::collections::BTreeSet;

use crate::WorkerState;

/// What placement needs to know of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub state: WorkerState,
    pub platform: String,
    pub tags: BTreeSet<String>,
    pub team: Option<String>,
    pub active_containers: i64,
    /// The cache keys (resource caches, task caches, artifacts) the worker
    /// holds right now: created and not missing.
    pub has: BTreeSet<String>,
    /// False while the worker says it is under pressure or unhealthy.
    pub accepting_work: bool,
    /// Memory the worker has not promised to running containers, when it
    /// said.
    pub memory_free: Option<u64>,
}

/// What a step asks of its worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirement {
    pub platform: String,
    pub tags: BTreeSet<String>,
    pub team: Option<String>,
    /// Cache keys the step would reuse if the worker has them.
    pub wants: Vec<String>,
    /// Workers not to use (they just failed this step).
    pub avoid: BTreeSet<String>,
    /// The step's memory limit, if it has one.
    pub memory: Option<u64>,
}

/// Why no worker was chosen, in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoWorker(pub String);

/// Picks a worker: among running workers that fit (platform, tags, team,
/// accepting work), the one holding most of the wanted caches, then the least
/// busy, then by name. Workers to avoid are used only if nothing else fits.
pub fn place(candidates: &[Candidate], req: &Requirement) -> Result<String, NoWorker> {
    let fits = |c: &&Candidate| {
        c.state == WorkerState::Running
            && c.accepting_work
            // An empty platform asks for none in particular (resource types
            // run on their worker's own platform).
            && (req.platform.is_empty() || c.platform == req.platform)
            && req.tags.is_subset(&c.tags)
            // A team worker serves only its team; a shared worker serves all.
            && (c.team.is_none() || c.team == req.team)
            && crate::pressure::has_room(c.memory_free, req.memory)
    };
    let fitting: Vec<&Candidate> = candidates.iter().filter(fits).collect();
    let preferred: Vec<&Candidate> = fitting
        .iter()
        .copied()
        .filter(|c| !req.avoid.contains(&c.name))
        .collect();
    let pool = if preferred.is_empty() {
        fitting
    } else {
        preferred
    };
    pool.into_iter()
        .max_by(|a, b| {
            let hits = |c: &Candidate| req.wants.iter().filter(|k| c.has.contains(*k)).count();
            hits(a)
                .cmp(&hits(b))
                .then(b.active_containers.cmp(&a.active_containers))
                .then(b.name.cmp(&a.name))
        })
        .map(|c| c.name.clone())
        .ok_or_else(|| NoWorker(explain(candidates, req)))
}

fn explain(candidates: &[Candidate], req: &Requirement) -> String {
    if candidates.is_empty() {
        return "no workers are registered".into();
    }
    let running: Vec<_> = candidates
        .iter()
        .filter(|c| c.state == WorkerState::Running)
        .collect();
    if running.is_empty() {
        return "no worker is running".into();
    }
    if !req.platform.is_empty() && !running.iter().any(|c| c.platform == req.platform) {
        return format!("no running worker has platform {}", req.platform);
    }
    let fitting: Vec<_> = running
        .iter()
        .filter(|c| {
            (req.platform.is_empty() || c.platform == req.platform)
                && req.tags.is_subset(&c.tags)
                && (c.team.is_none() || c.team == req.team)
        })
        .collect();
    if fitting.is_empty() {
        let tags = if req.tags.is_empty() {
            String::new()
        } else {
            format!(
                " with tags {}",
                req.tags.iter().cloned().collect::<Vec<_>>().join(",")
            )
        };
        let team = req
            .team
            .as_ref()
            .map(|t| format!(" for team {t}"))
            .unwrap_or_default();
        return format!(
            "no running worker fits platform {}{tags}{team}",
            req.platform
        );
    }
    if !fitting.iter().any(|c| c.accepting_work) {
        return "every running worker that fits is under pressure or unhealthy".into();
    }
    match req.memory {
        Some(need) => format!(
            "no running worker that fits has {} of memory free",
            crate::build::human_bytes(need)
        ),
        None => "no running worker fits".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, busy: i64, has: &[&str]) -> Candidate {
        Candidate {
            name: name.into(),
            state: WorkerState::Running,
            platform: "linux".into(),
            tags: BTreeSet::new(),
            team: None,
            active_containers: busy,
            has: has.iter().map(|s| s.to_string()).collect(),
            accepting_work: true,
            memory_free: None,
        }
    }

    fn req(wants: &[&str]) -> Requirement {
        Requirement {
            platform: "linux".into(),
            wants: wants.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn placement_follows_the_table() {
        let stalled = Candidate {
            state: WorkerState::Stalled,
            ..c("s", 0, &["k"])
        };
        let landing = Candidate {
            state: WorkerState::Landing,
            ..c("l", 0, &["k"])
        };
        let windows = Candidate {
            platform: "windows".into(),
            ..c("win", 0, &["k"])
        };
        let tagged = Candidate {
            tags: ["gpu".to_string()].into(),
            ..c("gpu", 5, &[])
        };
        let team = Candidate {
            team: Some("red".into()),
            ..c("red", 0, &["k"])
        };
        let pressured = Candidate {
            accepting_work: false,
            ..c("p", 0, &["k"])
        };
        let cases: Vec<(Vec<Candidate>, Requirement, Result<&str, &str>)> = vec![
            (
                vec![c("a", 0, &[]), c("b", 0, &["k"])],
                req(&["k"]),
                Ok("b"),
            ),
            (vec![c("a", 3, &[]), c("b", 1, &[])], req(&[]), Ok("b")),
            (vec![c("b", 0, &[]), c("a", 0, &[])], req(&[]), Ok("a")),
            (
                vec![stalled.clone(), landing.clone(), c("a", 9, &[])],
                req(&["k"]),
                Ok("a"),
            ),
            (vec![windows.clone(), c("a", 9, &[])], req(&["k"]), Ok("a")),
            (
                vec![windows.clone()],
                Requirement {
                    platform: String::new(),
                    ..req(&[])
                },
                Ok("win"),
            ),
            (vec![team.clone(), c("a", 9, &[])], req(&["k"]), Ok("a")),
            (
                vec![pressured.clone(), c("a", 9, &[])],
                req(&["k"]),
                Ok("a"),
            ),
            (
                vec![tagged.clone(), c("a", 0, &[])],
                Requirement {
                    tags: ["gpu".to_string()].into(),
                    ..req(&[])
                },
                Ok("gpu"),
            ),
            (
                vec![c("a", 0, &["k"]), c("b", 5, &[])],
                Requirement {
                    avoid: ["a".to_string()].into(),
                    ..req(&["k"])
                },
                Ok("b"),
            ),
            (
                vec![c("a", 0, &["k"])],
                Requirement {
                    avoid: ["a".to_string()].into(),
                    ..req(&["k"])
                },
                Ok("a"),
            ),
            (vec![], req(&[]), Err("no workers are registered")),
            (vec![stalled], req(&[]), Err("no worker is running")),
            (
                vec![windows],
                req(&[]),
                Err("no running worker has platform linux"),
            ),
            (
                vec![pressured],
                req(&[]),
                Err("every running worker that fits is under pressure or unhealthy"),
            ),
            (
                vec![
                    Candidate {
                        memory_free: Some(1 << 30),
                        ..c("small", 0, &["k"])
                    },
                    Candidate {
                        memory_free: Some(8 << 30),
                        ..c("big", 9, &[])
                    },
                ],
                Requirement {
                    memory: Some(2 << 30),
                    ..req(&["k"])
                },
                Ok("big"),
            ),
            (
                vec![Candidate {
                    memory_free: Some(1 << 30),
                    ..c("small", 0, &[])
                }],
                Requirement {
                    memory: Some(2 << 30),
                    ..req(&[])
                },
                Err("no running worker that fits has 2 GiB of memory free"),
            ),
            (
                vec![tagged],
                Requirement {
                    tags: ["arm".to_string()].into(),
                    ..req(&[])
                },
                Err("no running worker fits platform linux with tags arm"),
            ),
        ];
        for (i, (cands, r, expected)) in cases.into_iter().enumerate() {
            let got = place(&cands, &r);
            match expected {
                Ok(name) => assert_eq!(got, Ok(name.to_string()), "case {i}"),
                Err(why) => assert_eq!(got, Err(NoWorker(why.to_string())), "case {i}"),
            }
        }
    }
}
