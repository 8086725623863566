use super::*;

const NOW: i64 = 1_000_000_000;
const MIN: i64 = 60_000;
const H: i64 = 60 * MIN;

fn vol(handle: &str, kind: OwnerKind, owner: Option<&str>, age: i64) -> GcVolume {
    GcVolume {
        handle: handle.into(),
        worker: "w1".into(),
        state: VolumeState::Created,
        owner_kind: kind,
        owner_id: owner.map(str::to_string),
        created_at: NOW - age,
        last_used_at: None,
        missing_since: None,
        live_children: 0,
    }
}

fn with(mut v: GcVolume, f: impl FnOnce(&mut GcVolume)) -> GcVolume {
    f(&mut v);
    v
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn container(handle: &str, state: ContainerState, build: Option<i64>) -> GcContainer {
    GcContainer {
        handle: handle.into(),
        state,
        build_id: build,
        missing_since: None,
        created_at: 0,
        kept_until: None,
    }
}

#[test]
fn failed_rows_are_collected_and_nothing_else() {
    use VolumeState::*;
    let volumes: Vec<GcVolume> = [Creating, Created, Destroying, Failed]
        .into_iter()
        .map(|s| {
            with(vol(s.as_str(), OwnerKind::Container, None, 0), |v| {
                v.state = s
            })
        })
        .collect();
    assert_eq!(plan_failed_volumes(&volumes), ["failed"]);
    let containers: Vec<GcContainer> = ContainerState::ALL
        .into_iter()
        .map(|s| container(s.as_str(), s, Some(1)))
        .collect();
    assert_eq!(plan_failed_containers(&containers), ["failed"]);
}

#[test]
fn creations_older_than_the_abandon_age_are_abandoned_and_nothing_else() {
    use VolumeState::*;
    let config = GcConfig::default();
    let age = config.abandoned_creation_ms;
    // (state, age, abandoned?)
    let cases = [
        (Creating, age, true),
        (Creating, age + H, true),
        (Creating, age - 1, false),
        (Creating, 0, false),
        (Created, age + H, false),
        (Failed, age + H, false),
        (Destroying, age + H, false),
    ];
    let volumes: Vec<GcVolume> = cases
        .iter()
        .enumerate()
        .map(|(i, (state, age, _))| {
            with(
                vol(&format!("v{i}"), OwnerKind::Container, None, *age),
                |v| v.state = *state,
            )
        })
        .collect();
    let expected: Vec<String> = cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.2)
        .map(|(i, _)| format!("v{i}"))
        .collect();
    assert_eq!(plan_abandoned_volumes(&volumes, NOW, &config), expected);
    let never = GcConfig {
        abandoned_creation_ms: i64::MAX,
        ..GcConfig::default()
    };
    assert!(plan_abandoned_volumes(&volumes, NOW, &never).is_empty());
}

#[test]
fn containers_of_final_builds_are_collected_by_the_table() {
    use ContainerState::*;
    let builds: HashMap<i64, GcBuild> = [
        (1, BuildStatus::Started),
        (2, BuildStatus::Succeeded),
        (3, BuildStatus::Errored),
        (4, BuildStatus::Pending),
        (5, BuildStatus::Aborted),
    ]
    .into_iter()
    .map(|(id, status)| {
        (
            id,
            GcBuild {
                status,
                finished_at: None,
                superseded: false,
            },
        )
    })
    .collect();
    // (state, build) => collected
    let cases = [
        (Created, Some(1), false),
        (Created, Some(2), true),
        (Creating, Some(3), true),
        (Created, Some(4), false),
        (Created, Some(5), true),
        (Created, Some(99), true), // the build row is gone
        (Created, None, false),    // not a build's: not ours to judge
        (Destroying, Some(2), false),
        (Failed, Some(2), false), // the failed collector's
    ];
    for (i, (state, build, collected)) in cases.into_iter().enumerate() {
        let got = plan_build_containers(&[container("c", state, build)], &builds, NOW);
        assert_eq!(!got.is_empty(), collected, "case {i}: {state} of {build:?}");
    }
}

#[test]
fn a_kept_container_stays_until_its_time_or_its_jobs_next_build() {
    let build = |status, superseded| GcBuild {
        status,
        finished_at: Some(NOW - 1),
        superseded,
    };
    let kept = |until: Option<UnixMillis>| GcContainer {
        kept_until: until,
        ..container("c", ContainerState::Created, Some(1))
    };
    // (keep-until, build status, a next build started) => collected
    let cases = [
        (Some(NOW + 1), BuildStatus::Failed, false, false),
        (Some(NOW), BuildStatus::Failed, false, true), // its time has come
        (Some(NOW - 1), BuildStatus::Failed, false, true),
        (Some(NOW + 1), BuildStatus::Failed, true, true), // the next build started
        (None, BuildStatus::Failed, false, true),         // never kept
        (Some(NOW + 1), BuildStatus::Errored, false, false),
        (Some(NOW + 1), BuildStatus::Aborted, false, false),
        // The failure was in a `try` (or retried): nothing to debug.
        (Some(NOW + 1), BuildStatus::Succeeded, false, true),
        // A kept row of a build that has not finished (a step failed, the
        // build runs its hooks) stays like any running build's.
        (Some(NOW + 1), BuildStatus::Started, false, false),
        (Some(NOW - 1), BuildStatus::Started, true, false),
    ];
    for (i, (until, status, superseded, collected)) in cases.into_iter().enumerate() {
        let builds = HashMap::from([(1, build(status, superseded))]);
        let got = plan_build_containers(&[kept(until)], &builds, NOW);
        assert_eq!(!got.is_empty(), collected, "case {i}");
    }
    // Its build row gone, a kept row goes too.
    assert_eq!(
        plan_build_containers(&[kept(Some(NOW + 1))], &HashMap::new(), NOW),
        ["c"]
    );
}

#[test]
fn orphans_are_old_unowned_unreferenced_childless_scratch() {
    let config = GcConfig::default();
    let old = config.orphan_min_age_ms;
    let live: HashSet<String> = ["live-c".to_string()].into();
    let outputs = vec![
        r#"{"out":"running-output"}"#.to_string(),
        r#"not json but names "garbled-ref""#.to_string(),
    ];
    let cases = [
        (vol("a", OwnerKind::Container, None, old), true),
        (vol("b", OwnerKind::Container, Some("gone-c"), old), true),
        // its container row is still there
        (vol("c", OwnerKind::Container, Some("live-c"), old), false),
        // too young: its container row may not exist yet
        (
            vol("d", OwnerKind::Container, Some("gone-c"), old - 1),
            false,
        ),
        // a running step's output
        (
            vol("running-output", OwnerKind::Container, None, old),
            false,
        ),
        (vol("garbled-ref", OwnerKind::Container, None, old), false),
        // children that live
        (
            with(vol("e", OwnerKind::Container, None, old), |v| {
                v.live_children = 1
            }),
            false,
        ),
        // missing: the missing collector's
        (
            with(vol("f", OwnerKind::Container, None, old), |v| {
                v.missing_since = Some(NOW)
            }),
            false,
        ),
        // not created
        (
            with(vol("g", OwnerKind::Container, None, old), |v| {
                v.state = VolumeState::Creating
            }),
            false,
        ),
        // not scratch
        (vol("h", OwnerKind::TaskCache, Some("k"), old), false),
        (vol("i", OwnerKind::Artifact, Some("upload"), old), false),
        // a container row on its worker made soon after it may be using it
        (vol("j", OwnerKind::Container, None, 3 * old), false),
        (vol("k", OwnerKind::Container, None, 5 * old), false),
        // ... but not one made long after, or before, or on another worker
        (vol("l", OwnerKind::Container, None, 5 * old + 1), true),
        (
            with(vol("m", OwnerKind::Container, None, 5 * old), |v| {
                v.worker = "w2".into()
            }),
            true,
        ),
        (vol("n", OwnerKind::Container, None, 2 * old), true),
    ];
    // Container rows on w1 made 3 and 4 windows ago.
    let made: HashMap<String, Vec<i64>> = [("w1".to_string(), vec![NOW - 3 * old, NOW - 4 * old])]
        .into_iter()
        .collect();
    for (v, collected) in cases {
        let got = plan_orphan_volumes(
            std::slice::from_ref(&v),
            &live,
            &made,
            &outputs,
            NOW,
            &config,
        );
        assert_eq!(!got.is_empty(), collected, "{}", v.handle);
    }
}

#[test]
fn caches_unused_past_the_retention_go_and_the_newest_stay() {
    let config = GcConfig {
        cache_retention_ms: 24 * H,
        cache_keep_per_owner: 1,
        cache_duplicate_grace_ms: H,
        ..GcConfig::default()
    };
    let cache = |h: &str, key: &str, age: i64, used_ago: Option<i64>| {
        with(vol(h, OwnerKind::TaskCache, Some(key), age), |v| {
            v.last_used_at = used_ago.map(|a| NOW - a)
        })
    };
    // (volumes, collected)
    let cases: Vec<(Vec<GcVolume>, Vec<&str>)> = vec![
        // one cache, used recently or made recently: kept
        (vec![cache("a", "k", 48 * H, Some(H))], vec![]),
        (vec![cache("a", "k", 2 * H, None)], vec![]),
        // unused for the retention: gone, even if it is the only one
        (vec![cache("a", "k", 48 * H, Some(24 * H))], vec!["a"]),
        (vec![cache("a", "k", 24 * H, None)], vec!["a"]),
        // a duplicate unused for the grace goes; the most recently used stays
        (
            vec![
                cache("old", "k", 10 * H, Some(MIN)),
                cache("dup", "k", 2 * H, None),
            ],
            vec!["dup"],
        ),
        // a young duplicate (a concurrent step made it) stays
        (
            vec![
                cache("old", "k", 10 * H, Some(MIN)),
                cache("dup", "k", 10 * MIN, None),
            ],
            vec![],
        ),
        // other owners, kinds and workers are ranked apart
        (
            vec![
                cache("a", "k1", 2 * H, None),
                cache("b", "k2", 2 * H, None),
                with(cache("c", "k1", 2 * H, None), |v| {
                    v.owner_kind = OwnerKind::ResourceCache
                }),
                with(cache("d", "k1", 2 * H, None), |v| v.worker = "w2".into()),
            ],
            vec![],
        ),
        // a cache with live children is kept but still ranks
        (
            vec![
                with(cache("busy", "k", 30 * H, Some(MIN)), |v| {
                    v.live_children = 2
                }),
                cache("dup", "k", 2 * H, None),
                with(cache("stale", "k", 30 * H, None), |v| v.live_children = 1),
            ],
            vec!["dup"],
        ),
        // missing caches are the missing collector's and do not rank
        (
            vec![
                with(cache("gone", "k", H, Some(0)), |v| {
                    v.missing_since = Some(NOW)
                }),
                cache("only", "k", 2 * H, None),
            ],
            vec![],
        ),
        // not a cache
        (vec![vol("x", OwnerKind::Container, None, 48 * H)], vec![]),
    ];
    for (i, (volumes, collected)) in cases.into_iter().enumerate() {
        assert_eq!(
            plan_caches(&volumes, NOW, &config),
            strings(&collected),
            "case {i}"
        );
    }
}

#[test]
fn artifacts_of_finished_builds_and_old_uploads_are_collected_by_the_table() {
    let config = GcConfig::default();
    let r = config.artifact_retention_ms;
    let builds: HashMap<i64, GcBuild> = [
        (1, BuildStatus::Succeeded, Some(NOW - r)),
        (2, BuildStatus::Failed, Some(NOW - r + 1)),
        (3, BuildStatus::Started, None),
    ]
    .into_iter()
    .map(|(id, status, finished_at)| {
        (
            id,
            GcBuild {
                status,
                finished_at,
                superseded: false,
            },
        )
    })
    .collect();
    let running = vec![r#"{"src":"named-by-running"}"#.to_string()];
    let cases = [
        (vol("a", OwnerKind::Artifact, Some("build/1"), 2 * r), true),
        // finished too recently
        (vol("b", OwnerKind::Artifact, Some("build/2"), 2 * r), false),
        // still running
        (vol("c", OwnerKind::Artifact, Some("build/3"), 2 * r), false),
        // the build row is gone: by the volume's age
        (vol("d", OwnerKind::Artifact, Some("build/9"), r), true),
        (vol("e", OwnerKind::Artifact, Some("build/9"), r - 1), false),
        // uploads by age, unless a running build names them
        (
            vol(
                "f",
                OwnerKind::Artifact,
                Some("upload"),
                config.upload_retention_ms,
            ),
            true,
        ),
        (
            vol(
                "g",
                OwnerKind::Artifact,
                Some("upload"),
                config.upload_retention_ms - 1,
            ),
            false,
        ),
        (
            vol(
                "named-by-running",
                OwnerKind::Artifact,
                Some("upload"),
                10 * r,
            ),
            false,
        ),
        // owners we do not know, or none: kept
        (
            vol("h", OwnerKind::Artifact, Some("build/x"), 10 * r),
            false,
        ),
        (vol("i", OwnerKind::Artifact, Some("team/x"), 10 * r), false),
        (vol("j", OwnerKind::Artifact, None, 10 * r), false),
        // live children: a later step's copy-on-write input
        (
            with(vol("k", OwnerKind::Artifact, Some("build/1"), 2 * r), |v| {
                v.live_children = 1
            }),
            false,
        ),
        // not an artifact
        (
            vol("l", OwnerKind::TaskCache, Some("build/1"), 2 * r),
            false,
        ),
    ];
    for (v, collected) in cases {
        let got = plan_artifacts(std::slice::from_ref(&v), &builds, &running, NOW, &config);
        assert_eq!(!got.is_empty(), collected, "{}", v.handle);
    }
}

fn doomed(rows: &[(&str, Option<&str>)]) -> Vec<DoomedVolume> {
    rows.iter()
        .map(|(h, p)| DoomedVolume {
            handle: h.to_string(),
            parent: p.map(str::to_string),
        })
        .collect()
}

/// The batches as (root, handles) lists.
fn shape(batches: &[MissingBatch]) -> Vec<Vec<(String, Vec<String>)>> {
    batches
        .iter()
        .map(|b| {
            b.parts
                .iter()
                .map(|p| (p.root.clone(), p.handles.clone()))
                .collect()
        })
        .collect()
}

fn part(root: &str, handles: &[&str]) -> (String, Vec<String>) {
    (root.to_string(), strings(handles))
}

#[test]
fn missing_rows_are_batched_by_subtree_children_first() {
    // (doomed rows, batch size) => batches of (root, handles)
    type Case = (
        Vec<(&'static str, Option<&'static str>)>,
        usize,
        Vec<Vec<(String, Vec<String>)>>,
    );
    let cases: Vec<Case> = vec![
        (vec![], 10, vec![]),
        // a chain, whatever order it comes in: deepest first
        (
            vec![("b", Some("a")), ("a", Some("base")), ("c", Some("b"))],
            10,
            vec![vec![part("a", &["c", "b", "a"])]],
        ),
        // the wedge: a missing base with live children; and an unrelated one
        (
            vec![
                ("base", None),
                ("k1", Some("base")),
                ("k2", Some("base")),
                ("g", Some("k1")),
                ("other", None),
            ],
            10,
            vec![vec![
                part("base", &["g", "k1", "k2", "base"]),
                part("other", &["other"]),
            ]],
        ),
        // whole subtrees are packed; one that does not fit starts a batch
        (
            vec![
                ("a", None),
                ("a1", Some("a")),
                ("b", None),
                ("b1", Some("b")),
                ("c", None),
            ],
            3,
            vec![
                vec![part("a", &["a1", "a"])],
                vec![part("b", &["b1", "b"]), part("c", &["c"])],
            ],
        ),
        // a subtree bigger than a batch is cut deepest first
        (
            vec![
                ("r", None),
                ("x", Some("r")),
                ("y", Some("x")),
                ("z", Some("y")),
                ("s", None),
            ],
            2,
            vec![
                vec![part("r", &["z", "y"])],
                vec![part("r", &["x", "r"])],
                vec![part("s", &["s"])],
            ],
        ),
        // a missing row under another one's subtree belongs to the top one;
        // duplicates (from overlapping walks) count once
        (
            vec![
                ("top", None),
                ("mid", Some("top")),
                ("inner", Some("mid")),
                ("leaf", Some("inner")),
                ("inner", Some("mid")),
            ],
            10,
            vec![vec![part("top", &["leaf", "inner", "mid", "top"])]],
        ),
        // a cycle in corrupt data does not hang the planner
        (
            vec![("p", Some("q")), ("q", Some("p"))],
            10,
            vec![vec![part("q", &["p", "q"])]],
        ),
    ];
    for (i, (rows, size, expected)) in cases.into_iter().enumerate() {
        let got = plan_missing_volumes(&doomed(&rows), size);
        assert_eq!(shape(&got), expected, "case {i}");
    }
}

#[test]
fn every_missing_batch_deletes_children_before_parents_and_stays_bounded() {
    // A broad, deep forest: every row's children are in its batch or an
    // earlier one, and no batch is over the size.
    let mut rows = Vec::new();
    for t in 0..7 {
        rows.push((format!("t{t}"), None));
        for i in 0..(t * 13 + 1) {
            let parent = if i == 0 {
                format!("t{t}")
            } else {
                format!("t{t}-{}", (i - 1) / 2)
            };
            rows.push((format!("t{t}-{i}"), Some(parent)));
        }
    }
    let input: Vec<DoomedVolume> = rows
        .iter()
        .rev()
        .map(|(h, p)| DoomedVolume {
            handle: h.clone(),
            parent: p.clone(),
        })
        .collect();
    for size in [1, 2, 5, 16, 1000] {
        let batches = plan_missing_volumes(&input, size);
        let mut deleted: HashSet<String> = HashSet::new();
        for b in &batches {
            assert!(b.len() <= size && !b.is_empty());
            let this: HashSet<&String> = b.parts.iter().flat_map(|p| &p.handles).collect();
            for h in &this {
                for (child, parent) in &rows {
                    if parent.as_ref() == Some(*h) {
                        assert!(
                            deleted.contains(child) || this.contains(child),
                            "size {size}: {h} before its child {child}"
                        );
                    }
                }
            }
            deleted.extend(this.into_iter().cloned());
        }
        assert_eq!(deleted.len(), rows.len(), "size {size}");
    }
}

#[test]
fn missing_containers_go_after_the_grace_in_batches() {
    let config = GcConfig {
        batch_size: 2,
        ..GcConfig::default()
    };
    let cutoff = config.missing_cutoff(NOW);
    let rows: Vec<GcContainer> = [
        ("a", Some(cutoff)),
        ("b", Some(cutoff - 1)),
        ("c", Some(cutoff + 1)),
        ("d", None),
        ("e", Some(0)),
    ]
    .into_iter()
    .map(|(h, m)| GcContainer {
        kept_until: None,
        missing_since: m,
        ..container(h, ContainerState::Created, None)
    })
    .collect();
    assert_eq!(
        plan_missing_containers(&rows, NOW, &config),
        vec![strings(&["a", "b"]), strings(&["e"])]
    );
}

#[test]
fn collector_names_are_stable_and_distinct() {
    let names: HashSet<&str> = Collector::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names.len(), Collector::ALL.len());
    assert_eq!(Collector::MissingVolumes.to_string(), "missing-volumes");
    assert_eq!(artifact_build("build/42"), Some(42));
    assert_eq!(artifact_build("upload"), None);
}

#[test]
fn only_caches_unused_for_the_shorter_age_can_go() {
    let hour = 60 * 60_000;
    let cases = [
        // (grace, retention, cutoff before NOW)
        (hour, 24 * hour, hour),
        (2 * hour, hour, hour),
        (0, 24 * hour, 0),
    ];
    for (grace, retention, before) in cases {
        let config = GcConfig {
            cache_duplicate_grace_ms: grace,
            cache_retention_ms: retention,
            ..GcConfig::default()
        };
        assert_eq!(
            config.cache_idle_cutoff(NOW),
            NOW - before,
            "{grace} {retention}"
        );
    }
    let forever = GcConfig {
        cache_duplicate_grace_ms: i64::MAX,
        cache_retention_ms: i64::MAX,
        ..GcConfig::default()
    };
    assert_eq!(forever.cache_idle_cutoff(-1), i64::MIN);
}
