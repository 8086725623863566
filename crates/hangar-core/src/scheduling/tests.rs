//! Table tests of input resolution, the build decision and build starts.
//! Resources are 10, 20, 30…; versions of resource 10 are 11, 12…; jobs
//! are 1, 2, 3; builds 100 and up.

use std::collections::{BTreeMap, BTreeSet};

use super::resolve::NeedMore;
use super::*;

fn input(name: &str, resource: ResourceId, passed: &[JobId]) -> Input {
    Input {
        name: name.into(),
        resource,
        passed: passed.iter().copied().collect(),
        version: InputVersion::Latest,
        trigger: true,
    }
}

fn every(mut i: Input) -> Input {
    i.version = InputVersion::Every;
    i
}

fn pinned(mut i: Input, v: Option<VersionId>) -> Input {
    i.version = InputVersion::Pinned(v);
    i
}

fn build(id: BuildId, versions: &[(ResourceId, VersionId)]) -> PassedBuild {
    PassedBuild {
        id,
        versions: versions.to_vec(),
    }
}

fn builds(list: &[PassedBuild], complete: bool) -> BuildList {
    BuildList {
        builds: list.to_vec(),
        complete,
    }
}

fn window(latest: &[(ResourceId, VersionId)], passed: &[(JobId, BuildList)]) -> Window {
    Window {
        latest: latest.iter().copied().collect(),
        passed_builds: passed.iter().cloned().collect(),
        ..Window::default()
    }
}

/// The versions chosen, or the reason, per input.
fn versions(r: &Resolution) -> BTreeMap<String, Result<VersionId, Unresolved>> {
    r.inputs
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_ref().map(|r| r.version).map_err(Clone::clone),
            )
        })
        .collect()
}

fn expect(
    pairs: &[(&str, Result<VersionId, Unresolved>)],
) -> BTreeMap<String, Result<VersionId, Unresolved>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn resolution_table() {
    let not_passed = |jobs: &[JobId]| Err(Unresolved::NotPassed(jobs.to_vec()));
    let mut disabled_window = window(
        &[],
        &[(
            1,
            builds(&[build(102, &[(10, 13)]), build(101, &[(10, 12)])], true),
        )],
    );
    disabled_window.disabled.insert((10, 13));
    let mut every_window = window(&[(10, 15)], &[]);
    every_window.every_next.insert(
        "src".into(),
        EveryNext {
            version: 12,
            has_next: true,
        },
    );
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<Input>,
        Window,
        Vec<(&str, Result<VersionId, Unresolved>)>,
    )> = vec![
        (
            "latest takes the newest enabled version",
            vec![input("src", 10, &[])],
            window(&[(10, 15)], &[]),
            vec![("src", Ok(15))],
        ),
        (
            "a resource without versions waits",
            vec![input("src", 10, &[])],
            window(&[], &[]),
            vec![("src", Err(Unresolved::NoVersion))],
        ),
        (
            "a pin wins over newer versions",
            vec![pinned(input("src", 10, &[]), Some(12))],
            window(&[(10, 15)], &[]),
            vec![("src", Ok(12))],
        ),
        (
            "a pin no version matches waits",
            vec![pinned(input("src", 10, &[]), None)],
            window(&[(10, 15)], &[]),
            vec![("src", Err(Unresolved::PinnedVersionNotFound))],
        ),
        (
            "every takes the version after the last one used",
            vec![every(input("src", 10, &[]))],
            every_window,
            vec![("src", Ok(12))],
        ),
        (
            "passed takes the newest succeeded build's version",
            vec![input("src", 10, &[1])],
            window(
                &[(10, 19)],
                &[(
                    1,
                    builds(&[build(102, &[(10, 13)]), build(101, &[(10, 12)])], true),
                )],
            ),
            vec![("src", Ok(13))],
        ),
        (
            "passed [a, b] takes a version both jobs had",
            vec![input("src", 10, &[1, 2])],
            window(
                &[],
                &[
                    (
                        1,
                        builds(&[build(103, &[(10, 13)]), build(101, &[(10, 12)])], true),
                    ),
                    (
                        2,
                        builds(&[build(202, &[(10, 12)]), build(201, &[(10, 11)])], true),
                    ),
                ],
            ),
            vec![("src", Ok(12))],
        ),
        (
            "fan-in: inputs sharing a passed job come from one build of it",
            vec![input("x", 10, &[1]), input("y", 20, &[1])],
            window(
                &[],
                &[(
                    1,
                    builds(
                        &[
                            build(103, &[(10, 13), (20, 22)]),
                            build(101, &[(10, 11), (20, 21)]),
                        ],
                        true,
                    ),
                )],
            ),
            vec![("x", Ok(13)), ("y", Ok(22))],
        ),
        (
            "fan-in with a second passed job goes back to the build both agree on",
            vec![input("x", 10, &[1]), input("y", 20, &[1, 2])],
            window(
                &[],
                &[
                    (
                        1,
                        builds(
                            &[
                                build(103, &[(10, 13), (20, 22)]),
                                build(101, &[(10, 11), (20, 21)]),
                            ],
                            true,
                        ),
                    ),
                    (2, builds(&[build(201, &[(20, 21)])], true)),
                ],
            ),
            vec![("x", Ok(11)), ("y", Ok(21))],
        ),
        (
            "diamond: two jobs fed by one root agree on its version",
            vec![
                input("src", 10, &[1, 2]),
                input("a-out", 20, &[1]),
                input("b-out", 30, &[2]),
            ],
            window(
                &[],
                &[
                    // Job 1 ran on src 12 (newest) and 11; job 2 only on 11.
                    (
                        1,
                        builds(
                            &[
                                build(102, &[(10, 12), (20, 22)]),
                                build(101, &[(10, 11), (20, 21)]),
                            ],
                            true,
                        ),
                    ),
                    (2, builds(&[build(201, &[(10, 11), (30, 31)])], true)),
                ],
            ),
            vec![("src", Ok(11)), ("a-out", Ok(21)), ("b-out", Ok(31))],
        ),
        (
            "a version disabled after it passed is skipped",
            vec![input("src", 10, &[1])],
            disabled_window,
            vec![("src", Ok(12))],
        ),
        (
            "passed and pinned: only a build with the pinned version counts",
            vec![pinned(input("src", 10, &[1]), Some(12))],
            window(
                &[],
                &[(
                    1,
                    builds(
                        &[
                            build(103, &[(10, 13)]),
                            build(102, &[(10, 12)]),
                            build(101, &[(10, 11)]),
                        ],
                        true,
                    ),
                )],
            ),
            vec![("src", Ok(12))],
        ),
        (
            "no build of the passed job had the resource: not passed",
            vec![input("src", 10, &[1])],
            window(
                &[(10, 15)],
                &[(1, builds(&[build(101, &[(20, 21)])], true))],
            ),
            vec![("src", not_passed(&[1]))],
        ),
        (
            "the whole group waits when its jobs never agree",
            vec![input("x", 10, &[1]), input("y", 20, &[1, 2])],
            window(
                &[],
                &[
                    (1, builds(&[build(101, &[(10, 11), (20, 21)])], true)),
                    (2, builds(&[build(201, &[(20, 22)])], true)),
                ],
            ),
            vec![("x", not_passed(&[1, 2])), ("y", not_passed(&[1, 2]))],
        ),
        (
            "inputs with unrelated passed jobs resolve apart",
            vec![
                input("x", 10, &[1]),
                input("y", 20, &[2]),
                input("z", 30, &[]),
            ],
            window(
                &[(30, 33)],
                &[
                    (1, builds(&[build(101, &[(10, 11)])], true)),
                    (2, builds(&[], true)),
                ],
            ),
            vec![("x", Ok(11)), ("y", not_passed(&[2])), ("z", Ok(33))],
        ),
        (
            "every with passed tries builds in the store's order",
            vec![every(input("src", 10, &[1]))],
            window(
                &[],
                // The store lists unused builds oldest first for `every`.
                &[(
                    1,
                    builds(&[build(102, &[(10, 12)]), build(103, &[(10, 13)])], true),
                )],
            ),
            vec![("src", Ok(12))],
        ),
    ];
    for (what, inputs, window, want) in cases {
        let got = resolve(&inputs, &window).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(versions(&got), expect(&want), "{what}");
    }
}

#[test]
fn the_builds_that_vouched_are_reported() {
    let inputs = vec![input("src", 10, &[1, 2])];
    let w = window(
        &[],
        &[
            (
                1,
                builds(&[build(103, &[(10, 13)]), build(101, &[(10, 12)])], true),
            ),
            (2, builds(&[build(202, &[(10, 12)])], true)),
        ],
    );
    let got = resolve(&inputs, &w).unwrap();
    let r = got.inputs["src"].as_ref().unwrap();
    assert_eq!(r.version, 12);
    assert_eq!(r.passed_builds, vec![101, 202]);
}

#[test]
fn every_reports_that_another_version_follows() {
    let mut w = window(&[], &[]);
    for (has_next, want) in [(true, true), (false, false)] {
        w.every_next.insert(
            "src".into(),
            EveryNext {
                version: 12,
                has_next,
            },
        );
        let got = resolve(&[every(input("src", 10, &[]))], &w).unwrap();
        assert_eq!(got.has_next_every, want);
    }
}

#[test]
fn a_window_that_ran_out_asks_for_more_of_that_job() {
    // Job 2's newest builds do not have job 1's version; older ones might.
    let inputs = vec![input("src", 10, &[1, 2])];
    let w = window(
        &[],
        &[
            (1, builds(&[build(101, &[(10, 11)])], true)),
            (
                2,
                builds(&[build(203, &[(10, 13)]), build(202, &[(10, 12)])], false),
            ),
        ],
    );
    assert_eq!(
        resolve(&inputs, &w),
        Err(NeedMore {
            jobs: BTreeSet::from([2])
        })
    );
    // A passed job the window did not load at all.
    let w = window(&[], &[(1, builds(&[build(101, &[(10, 11)])], true))]);
    assert_eq!(
        resolve(&inputs, &w),
        Err(NeedMore {
            jobs: BTreeSet::from([2])
        })
    );
    // With the rest loaded, it resolves.
    let w = window(
        &[],
        &[
            (1, builds(&[build(101, &[(10, 11)])], true)),
            (
                2,
                builds(
                    &[
                        build(203, &[(10, 13)]),
                        build(202, &[(10, 12)]),
                        build(201, &[(10, 11)]),
                    ],
                    true,
                ),
            ),
        ],
    );
    assert_eq!(
        versions(&resolve(&inputs, &w).unwrap()),
        expect(&[("src", Ok(11))])
    );
}

#[test]
fn a_long_history_of_disagreeing_builds_ends_without_blowing_up() {
    // Three inputs over two jobs whose builds never agree: the search must
    // end (memoised failures), not try every combination.
    let inputs = vec![
        input("x", 10, &[1, 2]),
        input("y", 20, &[1, 2]),
        input("z", 30, &[1, 2]),
    ];
    let a: Vec<PassedBuild> = (0..300)
        .map(|i| build(1000 - i, &[(10, 1000 + i), (20, 2000 + i), (30, 3000 + i)]))
        .collect();
    let b: Vec<PassedBuild> = (0..300)
        .map(|i| build(5000 - i, &[(10, 1000 + i), (20, 2000 + i), (30, 9000 + i)]))
        .collect();
    let w = window(&[], &[(1, builds(&a, true)), (2, builds(&b, true))]);
    let got = resolve(&inputs, &w).unwrap();
    assert_eq!(got.inputs["x"], Err(Unresolved::NotPassed(vec![1, 2])));
}

fn resolution(pairs: &[(&str, Result<VersionId, Unresolved>)]) -> Resolution {
    Resolution {
        inputs: pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.clone().map(|version| Resolved {
                        version,
                        passed_builds: vec![],
                    }),
                )
            })
            .collect(),
        has_next_every: false,
    }
}

#[test]
fn decision_table() {
    let mut quiet = input("lib", 20, &[]);
    quiet.trigger = false;
    let inputs = vec![input("src", 10, &[]), quiet];
    let both = resolution(&[("src", Ok(11)), ("lib", Ok(21))]);
    let none_used = BTreeSet::new();
    let src_used: BTreeSet<String> = ["src".to_string()].into();
    let lib_used: BTreeSet<String> = ["lib".to_string()].into();
    let gate = JobGate::default();
    let manual = JobGate {
        manual: true,
        ..gate
    };
    let wait = |w: Waiting| NextBuild::Wait(w);
    let create = || {
        NextBuild::Create(
            both.inputs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap()))
                .collect(),
        )
    };
    let cases: Vec<(&str, JobGate, &Resolution, &BTreeSet<String>, NextBuild)> = vec![
        (
            "a new trigger version builds",
            gate,
            &both,
            &none_used,
            create(),
        ),
        (
            "a new version of a non-trigger input alone does not",
            gate,
            &both,
            &src_used,
            wait(Waiting::NoNewVersions),
        ),
        (
            "the trigger input counts, not the other",
            gate,
            &both,
            &lib_used,
            create(),
        ),
        (
            "a manual trigger builds on used versions",
            manual,
            &both,
            &src_used,
            create(),
        ),
        (
            "a paused pipeline waits first",
            JobGate {
                pipeline_paused: true,
                job_paused: true,
                manual: true,
            },
            &both,
            &none_used,
            wait(Waiting::PipelinePaused),
        ),
        (
            "a paused job waits",
            JobGate {
                job_paused: true,
                ..gate
            },
            &both,
            &none_used,
            wait(Waiting::JobPaused),
        ),
    ];
    for (what, gate, res, used, want) in cases {
        assert_eq!(decide(gate, &inputs, res, used), want, "{what}");
    }
    // An input without a version holds even a manual trigger, naming it.
    let missing = resolution(&[
        ("src", Ok(11)),
        ("lib", Err(Unresolved::NotPassed(vec![3]))),
    ]);
    let got = decide(manual, &inputs, &missing, &none_used);
    let NextBuild::Wait(w) = got else {
        panic!("expected a wait, got {got:?}")
    };
    assert_eq!(
        w.describe(&|id| if id == 3 { "unit".into() } else { "?".into() }),
        "input lib: no version has passed unit"
    );
    assert_eq!(w.reason(), ("not_passed", Some("lib")));
}

#[test]
fn reason_codes_name_the_input_when_there_is_one() {
    let input = |why| Waiting::Input {
        name: "src".into(),
        why,
    };
    let cases = [
        (Waiting::PipelinePaused, ("pipeline_paused", None)),
        (Waiting::JobPaused, ("job_paused", None)),
        (Waiting::NoNewVersions, ("no_new_versions", None)),
        (input(Unresolved::NoVersion), ("no_version", Some("src"))),
        (
            input(Unresolved::PinnedVersionNotFound),
            ("pinned_version_not_found", Some("src")),
        ),
        (
            input(Unresolved::TooManyBuilds),
            ("too_many_builds", Some("src")),
        ),
    ];
    for (w, want) in cases {
        assert_eq!(w.reason(), want, "{w}");
    }
}

fn limits(pairs: &[(JobId, StartLimits)]) -> BTreeMap<JobId, StartLimits> {
    pairs.iter().cloned().collect()
}

#[test]
fn start_table() {
    let serial = StartLimits::new(true, &[], None);
    let two = StartLimits::new(false, &[], Some(2));
    let group = |g: &[&str]| {
        StartLimits::new(
            false,
            &g.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            Some(5),
        )
    };
    let p = |id, job| PendingBuild { id, job };
    let r = |id, job| RunningBuild { id, job };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        BTreeMap<JobId, StartLimits>,
        Vec<RunningBuild>,
        Vec<PendingBuild>,
        Vec<BuildId>,
    )> = vec![
        (
            "no limits start everything",
            limits(&[]),
            vec![r(1, 1)],
            vec![p(2, 1), p(3, 1)],
            vec![2, 3],
        ),
        (
            "serial starts one at a time",
            limits(&[(1, serial.clone())]),
            vec![],
            vec![p(2, 1), p(3, 1)],
            vec![2],
        ),
        (
            "serial waits for the running one",
            limits(&[(1, serial.clone())]),
            vec![r(1, 1)],
            vec![p(2, 1)],
            vec![],
        ),
        (
            "max_in_flight 2 with one running",
            limits(&[(1, two)]),
            vec![r(1, 1)],
            vec![p(2, 1), p(3, 1)],
            vec![2],
        ),
        (
            "a serial group holds jobs sharing a tag",
            limits(&[
                (1, group(&["deploy"])),
                (2, group(&["deploy", "db"])),
                (3, group(&["db"])),
            ]),
            vec![],
            vec![p(10, 1), p(11, 2), p(12, 3)],
            // job 2 shares `deploy` with 1; job 3 shares `db` with job 2,
            // whose held build is older: creation order holds across the group.
            vec![10],
        ),
        (
            "jobs in different groups run together",
            limits(&[(1, group(&["a"])), (3, group(&["b"]))]),
            vec![r(5, 1)],
            vec![p(10, 1), p(12, 3)],
            vec![12],
        ),
        (
            "serial_groups force one build of the job, max_in_flight aside",
            limits(&[(1, group(&["a"]))]),
            vec![],
            vec![p(10, 1), p(11, 1)],
            vec![10],
        ),
    ];
    for (what, limits, running, pending, want) in cases {
        assert_eq!(startable(&limits, &running, &pending), want, "{what}");
    }
}
