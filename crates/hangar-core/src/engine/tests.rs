use super::*;
use crate::build::StepFailure as F;

const T0: i64 = 1_000_000;

#[test]
fn a_volume_is_usable_only_created_and_reported() {
    let cases = [
        (VolumeState::Created, None, true),
        (VolumeState::Created, Some(T0), false),
        (VolumeState::Creating, None, false),
        (VolumeState::Failed, None, false),
        (VolumeState::Destroying, None, false),
    ];
    for (state, missing, want) in cases {
        assert_eq!(volume_usable(state, missing), want, "{state:?} {missing:?}");
    }
}

#[test]
fn input_checks_from_volume_and_worker() {
    let vol = |state, missing_since| {
        Observed::Present(VolumeSeen {
            state,
            missing_since,
            worker: "w1",
        })
    };
    let lost_on_w1 = InputCheck::Lost {
        worker: Some("w1".into()),
    };
    let cases = [
        // what is unknown is not lost: the step finds out when it asks
        (Observed::Unknown, Observed::Unknown, InputCheck::Usable),
        (
            Observed::Absent,
            Observed::Present(WorkerState::Running),
            InputCheck::Lost { worker: None },
        ),
        (
            vol(VolumeState::Created, None),
            Observed::Present(WorkerState::Running),
            InputCheck::Usable,
        ),
        (
            vol(VolumeState::Created, None),
            Observed::Present(WorkerState::Landing),
            InputCheck::Usable,
        ),
        (
            vol(VolumeState::Created, None),
            Observed::Unknown,
            InputCheck::Usable,
        ),
        (
            vol(VolumeState::Created, Some(T0)),
            Observed::Present(WorkerState::Running),
            lost_on_w1.clone(),
        ),
        (
            vol(VolumeState::Destroying, None),
            Observed::Present(WorkerState::Running),
            lost_on_w1.clone(),
        ),
        (
            vol(VolumeState::Created, None),
            Observed::Present(WorkerState::Stalled),
            lost_on_w1.clone(),
        ),
        (
            vol(VolumeState::Created, None),
            Observed::Absent,
            lost_on_w1,
        ),
    ];
    for (i, (volume, worker, want)) in cases.into_iter().enumerate() {
        assert_eq!(input_check(volume, worker), want, "case {i}");
    }
}

#[test]
fn call_errors_are_classified_once() {
    let unreachable = |reason: &str| F::WorkerUnreachable {
        worker: "w1".into(),
        reason: reason.into(),
    };
    let cases = [
        (
            CallError::unreachable("connection refused"),
            unreachable("connection refused"),
        ),
        (
            CallError::refused(400, "bad_request", "bad mount path"),
            F::Invalid {
                reason: "bad mount path".into(),
            },
        ),
        (
            CallError::refused(507, "insufficient_storage", "no room"),
            F::DiskFull {
                worker: "w1".into(),
            },
        ),
        (
            CallError::refused(503, "unavailable", "too many stream-ins"),
            unreachable("too many stream-ins (503)"),
        ),
        (
            CallError::refused(404, "not_found", "no volume x"),
            unreachable("no volume x (404)"),
        ),
        (
            CallError::refused(401, "unauthorized", "bad token"),
            unreachable("bad token (401)"),
        ),
    ];
    for (e, want) in cases {
        assert_eq!(call_failure("w1", &e), want, "{e:?}");
    }
}

#[test]
fn an_input_its_holder_does_not_have_is_lost_at_once() {
    let nf = CallError::refused(404, "not_found", "no such volume");
    let cases = [
        (
            "w1",
            nf.clone(),
            F::VolumeLost {
                worker: "w1".into(),
                handle: "h".into(),
            },
            true,
        ),
        // the step's own worker said 404 (a parent it was never given): not
        // a proof the holder lost it
        (
            "w2",
            nf.clone(),
            F::WorkerUnreachable {
                worker: "w2".into(),
                reason: "no such volume (404)".into(),
            },
            false,
        ),
        (
            "w1",
            CallError::unreachable("timed out"),
            F::WorkerUnreachable {
                worker: "w1".into(),
                reason: "timed out".into(),
            },
            false,
        ),
    ];
    for (called, e, want, mark) in cases {
        assert_eq!(input_call_failure("w1", "h", called, &e), (want, mark));
    }
}

#[test]
fn a_file_the_worker_cannot_give_is_the_step_s_a_lost_volume_the_infrastructure_s() {
    let cases = [
        (
            CallError::refused(422, FILE_UNREADABLE, "path \"t.yml\" not found"),
            F::Invalid {
                reason: "out/t.yml: path \"t.yml\" not found".into(),
            },
            false,
        ),
        (
            CallError::refused(404, "not_found", "volume \"h\" not found"),
            F::VolumeLost {
                worker: "w1".into(),
                handle: "h".into(),
            },
            true,
        ),
        (
            CallError::unreachable("connection refused"),
            F::WorkerUnreachable {
                worker: "w1".into(),
                reason: "connection refused".into(),
            },
            false,
        ),
        (
            CallError::refused(500, "internal", "boom"),
            F::WorkerUnreachable {
                worker: "w1".into(),
                reason: "boom (500)".into(),
            },
            false,
        ),
    ];
    for (e, want, mark) in cases {
        assert_eq!(
            read_file_failure("w1", "h", "out/t.yml", &e),
            (want, mark),
            "{e:?}"
        );
    }
}

#[test]
fn import_failures_name_the_task_or_the_worker() {
    type Expect = fn(&F) -> bool;
    let cases: [(CallError, Expect); 4] = [
        (
            CallError::refused(403, "forbidden", "not allowed"),
            |f| matches!(f, F::Invalid { reason } if reason.contains("cannot be imported")),
        ),
        (
            CallError::refused(404, "not_found", "no dir"),
            |f| matches!(f, F::Invalid { reason } if reason.contains("does not exist")),
        ),
        (
            CallError::refused(507, "insufficient_storage", "full"),
            |f| matches!(f, F::DiskFull { .. }),
        ),
        (CallError::unreachable("refused"), |f| {
            matches!(f, F::WorkerUnreachable { .. })
        }),
    ];
    for (e, ok) in cases {
        let f = import_failure("raw:///img", "w1", &e);
        assert!(ok(&f), "{e:?} gave {f:?}");
    }
}

#[test]
fn after_a_failure_the_worker_is_avoided_and_an_unreachable_one_judged() {
    let cases = [
        (
            F::WorkerUnreachable {
                worker: "w1".into(),
                reason: "x".into(),
            },
            Some("w1"),
            Some("w1"),
        ),
        (
            F::WorkerStalled {
                worker: "w1".into(),
            },
            Some("w1"),
            None,
        ),
        (F::Exited { code: 1 }, None, None),
    ];
    for (f, avoid, settle) in cases {
        let a = after_failure(&f);
        assert_eq!(a.avoid.as_deref(), avoid, "{f:?}");
        assert_eq!(a.settle.as_deref(), settle, "{f:?}");
    }
}

#[test]
fn settling_about_an_unreachable_worker() {
    let judge = Settle::judge_ms(15_000, 1_000);
    assert_eq!(judge, 17_000);
    let beat = |state, generation, last| {
        Observed::Present(WorkerBeat {
            state,
            generation,
            last_heartbeat_at: last,
        })
    };
    // (row, now, settled)
    let cases = [
        (beat(WorkerState::Running, 7, T0 - 1), T0 + 1, false),
        (beat(WorkerState::Running, 7, T0 + 5), T0 + 6, true),
        (beat(WorkerState::Stalled, 7, T0 - 1), T0 + 1, true),
        (beat(WorkerState::Running, 8, T0 - 1), T0 + 1, true),
        (Observed::Absent, T0 + 1, true),
        (beat(WorkerState::Running, 7, T0 - 1), T0 + judge, true),
        (Observed::Unknown, T0 + 1, false),
    ];
    for (i, (row, now, want)) in cases.into_iter().enumerate() {
        let mut s = Settle::new(7, T0, judge);
        assert_eq!(s.observe(row, now), want, "case {i}");
    }
}

#[test]
fn a_database_that_did_not_answer_restarts_the_judging_time() {
    let mut s = Settle::new(7, T0, 10_000);
    let quiet = Observed::Present(WorkerBeat {
        state: WorkerState::Running,
        generation: 7,
        last_heartbeat_at: T0 - 1,
    });
    assert!(!s.observe(Observed::Unknown, T0 + 9_000));
    // the old deadline passed, but heartbeats could not land meanwhile
    assert!(!s.observe(quiet, T0 + 12_000));
    assert!(s.observe(quiet, T0 + 19_000));
}

#[test]
fn the_first_unsuccessful_step_decides_the_build() {
    use StepState::*;
    let cases: [(&[StepState], BuildStatus); 6] = [
        (&[], BuildStatus::Succeeded),
        (&[Succeeded, Succeeded], BuildStatus::Succeeded),
        (&[Succeeded, Failed, Errored], BuildStatus::Failed),
        (&[Errored, Failed], BuildStatus::Errored),
        (&[Succeeded, Running], BuildStatus::Errored),
        (&[Pending], BuildStatus::Errored),
    ];
    for (ends, want) in cases {
        let status = deciding_step(ends).map_or(BuildStatus::Succeeded, |i| build_status(ends[i]));
        assert_eq!(status, want, "{ends:?}");
    }
}

#[test]
fn final_lines() {
    assert_eq!(
        final_status_line(BuildStatus::Succeeded, Some("ignored")),
        "succeeded"
    );
    assert_eq!(
        final_status_line(BuildStatus::Failed, Some("task t: exit 1")),
        "failed: task t: exit 1"
    );
    assert_eq!(final_status_line(BuildStatus::Errored, None), "errored");
}
