//! Which worker a step runs on: the workers that fit a step, and the
//! chain of Concourse's placement strategies ([`strategies`]) that picks
//! one of them.

mod strategies;

use std::collections::BTreeSet;

pub use strategies::{Placement, StepClass, Strategy, DEFAULT_CHAIN};

use crate::resource_types::ResourceType;
use crate::WorkerState;

/// What placement needs to know of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub state: WorkerState,
    pub platform: String,
    pub tags: BTreeSet<String>,
    pub team: Option<String>,
    /// Containers the worker said it runs, at its last heartbeat.
    pub active_containers: i64,
    /// What the database has placed on the worker and not seen finish.
    pub load: Load,
    /// The cache keys (resource caches, task caches, artifacts) the worker
    /// holds right now: created and not missing.
    pub has: BTreeSet<String>,
    /// False while the worker says it is under pressure or unhealthy.
    pub accepting_work: bool,
    /// Memory the worker has not promised to running containers, when it
    /// said.
    pub memory_free: Option<u64>,
    /// Started with `--allow-privileged`: it runs privileged containers.
    pub allow_privileged: bool,
    /// A step failed there for the worker's fault a moment ago: what it
    /// claims (free memory, room, health) is not taken at its word, and it
    /// gets work only when no other worker fits.
    pub distrusted: bool,
}

/// A worker's active work as the database knows it at placement: what
/// the strategies of a chain count (a step placed a moment ago counts at
/// once, not at the worker's next heartbeat).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Build steps placed on the worker whose build runs and which have
    /// not finished (`fewest-build-containers`).
    pub build_steps: i64,
    /// Those of them that are tasks (`limit-active-tasks`).
    pub tasks: i64,
    /// Volumes on the worker, made or being made
    /// (`limit-active-volumes`).
    pub volumes: i64,
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
    /// The step runs a privileged container (a privileged task, or an
    /// action of a privileged resource type): only a worker that allows
    /// them will do.
    pub privileged: bool,
}

/// What a resource action (a check, a get, a put) requires of its worker,
/// for a resource of a type whose custom types are `chain` (outermost
/// first, empty for a base type) and a step (or resource) tagged
/// `own_tags`. One rule for all three:
///
/// - a base type runs on its worker's own platform (any); a custom type's
///   image is a Linux container;
/// - every image of the chain is fetched on that worker, so it carries
///   each type's tags beside the step's own;
/// - every type of the chain runs an action there (each image is fetched
///   in a container of the one below), so one privileged type makes the
///   whole action privileged.
pub fn resource_requirement<'a>(
    chain: &[&'a ResourceType],
    own_tags: impl IntoIterator<Item = &'a String>,
    avoid: &BTreeSet<String>,
) -> Requirement {
    Requirement {
        platform: if chain.is_empty() {
            String::new()
        } else {
            "linux".into()
        },
        tags: own_tags
            .into_iter()
            .chain(chain.iter().flat_map(|t| t.tags.iter()))
            .cloned()
            .collect(),
        team: None,
        wants: vec![],
        avoid: avoid.clone(),
        memory: None,
        privileged: chain.iter().any(|t| t.privileged),
    }
}

/// The base type that runs a resource action: the step's own type when it
/// is a base type, else the type that fetches the chain's innermost image.
pub fn resource_base_type(chain: &[&ResourceType], step_type: &str) -> String {
    chain
        .last()
        .map_or(step_type.to_string(), |t| t.resource_type.clone())
}

/// Why no worker was chosen, in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoWorker(pub String);

/// Why a privileged step waits when no running worker allows privileged
/// containers.
pub const NO_PRIVILEGED_WORKER: &str =
    "privileged step: no worker allows privileged containers (start a worker with --allow-privileged)";

/// Picks a worker by hangar's default chain ([`DEFAULT_CHAIN`]: the one
/// holding most of the wanted caches, then the fewest active build
/// steps), ties broken by name, among the workers that fit (see
/// [`pool`]). The engine places by the operator's chain
/// ([`Placement::place`]), over the candidates by name as here.
pub fn place(candidates: &[Candidate], req: &Requirement) -> Result<String, NoWorker> {
    Placement::default().place(&by_name(candidates), req, StepClass::Other, 0)
}

/// The candidates in name order: the order placement breaks ties by.
pub fn by_name(candidates: &[Candidate]) -> Vec<Candidate> {
    let mut sorted = candidates.to_vec();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
}

/// The workers a step may go to, in the given order: running workers
/// that fit (platform, tags, team, privileged containers allowed if the
/// step needs them, accepting work, memory for its limit), without those
/// to avoid, then without those distrusted, unless nothing else fits.
fn pool<'a>(candidates: &'a [Candidate], req: &Requirement) -> Vec<&'a Candidate> {
    let fits = |c: &&Candidate| {
        c.state == WorkerState::Running
            && c.accepting_work
            && is_made_for(c, req)
            && crate::pressure::has_room(c.memory_free, req.memory)
    };
    let fitting: Vec<&Candidate> = candidates.iter().filter(fits).collect();
    let not_avoided: Vec<&Candidate> = fitting
        .iter()
        .copied()
        .filter(|c| !req.avoid.contains(&c.name))
        .collect();
    let trusted: Vec<&Candidate> = not_avoided
        .iter()
        .copied()
        .filter(|c| !c.distrusted)
        .collect();
    [trusted, not_avoided]
        .into_iter()
        .find(|tier| !tier.is_empty())
        .unwrap_or(fitting)
}

/// Whether the worker is of the kind the step asks for, whatever its
/// state and load: its platform, tags, team and privileged containers.
fn is_made_for(c: &Candidate, req: &Requirement) -> bool {
    // An empty platform asks for none in particular (resource types run on
    // their worker's own platform).
    (req.platform.is_empty() || c.platform == req.platform)
        && tags_match(&c.tags, &req.tags)
        // A team worker serves only its team; a shared worker serves all.
        && (c.team.is_none() || c.team == req.team)
        && (!req.privileged || c.allow_privileged)
}

/// Concourse's tag rule: a step goes only to workers with every one of
/// its tags, and a worker with tags takes only steps with tags (an
/// untagged step, or check, runs on untagged workers only).
pub fn tags_match(worker: &BTreeSet<String>, step: &BTreeSet<String>) -> bool {
    step.is_subset(worker) && (worker.is_empty() || !step.is_empty())
}

/// Whether no candidate, in whatever state and under whatever load, is
/// of the kind the step asks for (none at all: none is). Waiting for a
/// worker to come back, get room or heal then places nothing; only a
/// worker that joins (or registers again with other tags) would, which is
/// why such a wait is bounded.
pub fn lacking(candidates: &[Candidate], req: &Requirement) -> bool {
    !candidates.iter().any(|c| is_made_for(c, req))
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
    if req.privileged && !running.iter().any(|c| c.allow_privileged) {
        return NO_PRIVILEGED_WORKER.into();
    }
    let fitting: Vec<_> = running.iter().filter(|c| is_made_for(c, req)).collect();
    if fitting.is_empty() {
        let tags = if !req.tags.is_empty() {
            format!(
                " with tags {}",
                req.tags.iter().cloned().collect::<Vec<_>>().join(",")
            )
        } else if running.iter().any(|c| !c.tags.is_empty()) {
            " without tags (a worker with tags takes only steps with tags)".to_string()
        } else {
            String::new()
        };
        let team = req
            .team
            .as_ref()
            .map(|t| format!(" for team {t}"))
            .unwrap_or_default();
        let privileged = if req.privileged {
            " that allows privileged containers (--allow-privileged)"
        } else {
            ""
        };
        let platform = if req.platform.is_empty() {
            String::new()
        } else {
            format!(" platform {}", req.platform)
        };
        return format!("no running worker fits{platform}{tags}{team}{privileged}");
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
mod resource_tests {
    use super::*;

    fn custom(name: &str, of: &str, tags: &[&str], privileged: bool) -> ResourceType {
        ResourceType {
            name: name.into(),
            resource_type: of.into(),
            source: Default::default(),
            params: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            defaults: None,
            privileged,
        }
    }

    #[test]
    fn a_resource_action_wants_its_chain_s_platform_tags_privilege_and_base_type() {
        let image = custom("image", "registry-image", &["gpu"], false);
        let priv_image = custom("dind", "registry-image", &[], true);
        let outer = custom("pr", "image", &["east"], false);
        let step_tags = vec!["own".to_string()];
        // (chain, platform, tags, privileged, base type)
        type Row<'a> = (Vec<&'a ResourceType>, &'a str, Vec<&'a str>, bool, &'a str);
        let table: Vec<Row> = vec![
            (vec![], "", vec!["own"], false, "git"),
            (
                vec![&image],
                "linux",
                vec!["gpu", "own"],
                false,
                "registry-image",
            ),
            (
                vec![&outer, &image],
                "linux",
                vec!["east", "gpu", "own"],
                false,
                "registry-image",
            ),
            (
                vec![&priv_image],
                "linux",
                vec!["own"],
                true,
                "registry-image",
            ),
        ];
        let avoid: BTreeSet<String> = ["w1".to_string()].into();
        for (chain, platform, tags, privileged, base) in table {
            let r = resource_requirement(&chain, &step_tags, &avoid);
            let names: Vec<&str> = chain.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(r.platform, platform, "{names:?}");
            assert_eq!(
                r.tags,
                tags.iter().map(|t| t.to_string()).collect::<BTreeSet<_>>(),
                "{names:?}"
            );
            assert_eq!(r.privileged, privileged, "{names:?}");
            assert_eq!(r.avoid, avoid);
            assert_eq!((r.team, r.memory, r.wants.len()), (None, None, 0));
            assert_eq!(resource_base_type(&chain, "git"), base, "{names:?}");
        }
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
            active_containers: 0,
            load: Load {
                build_steps: busy,
                ..Load::default()
            },
            has: has.iter().map(|s| s.to_string()).collect(),
            accepting_work: true,
            memory_free: None,
            allow_privileged: false,
            distrusted: false,
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
        let privileged = Candidate {
            allow_privileged: true,
            ..c("root", 7, &[])
        };
        let needs_root = Requirement {
            privileged: true,
            ..req(&["k"])
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
            // A distrusted worker, however idle and however much it holds,
            // gets work only when nothing else fits.
            (
                vec![
                    Candidate {
                        distrusted: true,
                        ..c("a", 0, &["k"])
                    },
                    c("b", 9, &[]),
                ],
                req(&["k"]),
                Ok("b"),
            ),
            (
                vec![Candidate {
                    distrusted: true,
                    ..c("a", 0, &["k"])
                }],
                req(&["k"]),
                Ok("a"),
            ),
            // Avoided for this step beats distrusted in general.
            (
                vec![
                    Candidate {
                        distrusted: true,
                        ..c("a", 0, &[])
                    },
                    c("b", 0, &[]),
                ],
                Requirement {
                    avoid: ["b".to_string()].into(),
                    ..req(&[])
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
        let privileged_cases: Vec<(Vec<Candidate>, Requirement, Result<&str, &str>)> = vec![
            // Only the worker that allows privileged containers takes a
            // privileged step, though another holds its cache and is idle.
            (
                vec![c("a", 0, &["k"]), privileged.clone()],
                needs_root.clone(),
                Ok("root"),
            ),
            // An unprivileged step goes anywhere (here: to the cache).
            (
                vec![c("a", 0, &["k"]), privileged.clone()],
                req(&["k"]),
                Ok("a"),
            ),
            // Even a worker to avoid is better than one that refuses.
            (
                vec![c("a", 0, &["k"]), privileged.clone()],
                Requirement {
                    avoid: ["root".to_string()].into(),
                    ..needs_root.clone()
                },
                Ok("root"),
            ),
            (
                vec![c("a", 0, &["k"]), c("b", 0, &[])],
                needs_root.clone(),
                Err(NO_PRIVILEGED_WORKER),
            ),
            (
                vec![
                    Candidate {
                        tags: ["gpu".to_string()].into(),
                        ..c("gpu", 5, &[])
                    },
                    privileged.clone(),
                ],
                Requirement {
                    tags: ["gpu".to_string()].into(),
                    ..needs_root.clone()
                },
                Err("no running worker fits platform linux with tags gpu that allows privileged containers (--allow-privileged)"),
            ),
            (
                vec![Candidate {
                    accepting_work: false,
                    ..privileged.clone()
                }],
                needs_root,
                Err("every running worker that fits is under pressure or unhealthy"),
            ),
        ];
        // Concourse's tag rule: a tagged worker takes only tagged steps; a
        // tagged step goes only where every one of its tags is.
        let gpu_arm = Candidate {
            tags: ["gpu".to_string(), "arm".to_string()].into(),
            ..c("gpu-arm", 0, &["k"])
        };
        let tagged_step = |tags: &[&str]| Requirement {
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..req(&["k"])
        };
        let tag_cases: Vec<(Vec<Candidate>, Requirement, Result<&str, &str>)> = vec![
            // Untagged: the busy untagged worker, not the idle tagged one
            // holding the cache.
            (
                vec![gpu_arm.clone(), c("a", 9, &[])],
                req(&["k"]),
                Ok("a"),
            ),
            (
                vec![gpu_arm.clone()],
                req(&["k"]),
                Err("no running worker fits platform linux without tags (a worker with tags takes only steps with tags)"),
            ),
            // Tagged: a worker with all its tags (and more), never an
            // untagged one.
            (
                vec![c("a", 0, &["k"]), gpu_arm.clone()],
                tagged_step(&["gpu"]),
                Ok("gpu-arm"),
            ),
            (
                vec![c("a", 0, &["k"]), gpu_arm.clone()],
                tagged_step(&["gpu", "arm"]),
                Ok("gpu-arm"),
            ),
            (
                vec![c("a", 0, &["k"]), gpu_arm.clone()],
                tagged_step(&["gpu", "x86"]),
                Err("no running worker fits platform linux with tags gpu,x86"),
            ),
            (
                vec![c("a", 0, &["k"])],
                tagged_step(&["gpu"]),
                Err("no running worker fits platform linux with tags gpu"),
            ),
        ];
        let cases = cases.into_iter().chain(privileged_cases).chain(tag_cases);
        for (i, (cands, r, expected)) in cases.enumerate() {
            let got = place(&cands, &r);
            match expected {
                Ok(name) => assert_eq!(got, Ok(name.to_string()), "case {i}"),
                Err(why) => assert_eq!(got, Err(NoWorker(why.to_string())), "case {i}"),
            }
        }
    }

    #[test]
    fn a_step_lacks_a_worker_only_when_none_of_its_kind_is_registered() {
        let gpu = Requirement {
            tags: ["gpu".to_string()].into(),
            ..req(&[])
        };
        let tagged = Candidate {
            tags: ["gpu".to_string()].into(),
            ..c("gpu", 0, &[])
        };
        // Down, busy or under pressure, a worker of the step's kind may
        // take it later: no bound on that wait.
        for unavailable in [
            Candidate {
                state: WorkerState::Stalled,
                ..tagged.clone()
            },
            Candidate {
                accepting_work: false,
                ..tagged.clone()
            },
            Candidate {
                memory_free: Some(0),
                ..tagged.clone()
            },
        ] {
            assert!(!lacking(&[unavailable], &gpu));
        }
        assert!(lacking(&[], &req(&[])));
        assert!(lacking(&[c("a", 0, &[])], &gpu));
        // An untagged step lacks a worker where every worker is tagged.
        assert!(lacking(std::slice::from_ref(&tagged), &req(&[])));
        assert!(!lacking(&[tagged.clone(), c("a", 0, &[])], &req(&[])));
        let windows = Candidate {
            platform: "windows".into(),
            ..c("win", 0, &[])
        };
        assert!(lacking(std::slice::from_ref(&windows), &req(&[])));
        let anywhere = Requirement {
            platform: String::new(),
            ..req(&[])
        };
        assert!(!lacking(&[windows], &anywhere));
        let needs_root = Requirement {
            privileged: true,
            ..req(&[])
        };
        assert!(lacking(&[c("a", 0, &[])], &needs_root));
        let red = Candidate {
            team: Some("red".into()),
            ..c("red", 0, &[])
        };
        assert!(lacking(&[red], &req(&[])));
        // Without a platform, the reason leaves it out.
        assert_eq!(
            place(
                &[c("a", 0, &[])],
                &Requirement {
                    platform: String::new(),
                    ..gpu
                }
            ),
            Err(NoWorker("no running worker fits with tags gpu".into()))
        );
    }
}
