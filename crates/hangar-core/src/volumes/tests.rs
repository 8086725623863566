use super::*;
use VolumeState::*;

fn row(handle: &str, state: VolumeState, parent: Option<&str>, missing: bool) -> VolumeRow {
    VolumeRow {
        handle: handle.into(),
        state,
        parent: parent.map(str::to_string),
        missing_since: missing.then_some(1),
        young: false,
    }
}

#[test]
fn a_young_volume_the_worker_did_not_list_is_left_for_a_later_report() {
    let mut young = row("new", Created, None, false);
    young.young = true;
    let rows = [young, row("old", Created, None, false)];
    let p = plan(&rows, &[]);
    assert_eq!(p.mark_missing, strings(&["old"]));
    assert_eq!(p.deferred, 1);
    // Listed, a young volume is simply present.
    let p = plan(&rows, &["new", "old"]);
    assert_eq!((p.deferred, p.is_empty()), (0, true));
}

fn plan(rows: &[VolumeRow], reported: &[&str]) -> ReportPlan {
    let reported: Vec<String> = reported.iter().map(|s| s.to_string()).collect();
    plan_report(rows, &reported)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_report_matching_the_rows_changes_nothing() {
    let rows = [
        row("a", Created, None, false),
        row("b", Created, Some("a"), false),
    ];
    assert!(plan(&rows, &["a", "b"]).is_empty());
}

#[test]
fn reports_are_diffed_both_ways_by_the_table() {
    // (rows, reported) => (mark missing, clear missing, destroy on worker, delete rows)
    type Case = (Vec<VolumeRow>, Vec<&'static str>, [Vec<&'static str>; 4]);
    let cases: Vec<Case> = vec![
        // unknown handles are destroyed on the worker
        (vec![], vec!["x"], [vec![], vec![], vec!["x"], vec![]]),
        // an unreported created row goes missing; a creating one does not
        (
            vec![
                row("a", Created, None, false),
                row("c", Creating, None, false),
            ],
            vec![],
            [vec!["a"], vec![], vec![], vec![]],
        ),
        // already missing stays missing without a new mark
        (
            vec![row("a", Created, None, true)],
            vec![],
            [vec![], vec![], vec![], vec![]],
        ),
        // reported again: no longer missing
        (
            vec![row("a", Created, None, true)],
            vec!["a"],
            [vec![], vec!["a"], vec![], vec![]],
        ),
        // destroying and failed rows still on disk: destroy them there
        (
            vec![
                row("d", Destroying, None, false),
                row("f", Failed, None, false),
            ],
            vec!["d", "f"],
            [vec![], vec![], vec!["d", "f"], vec![]],
        ),
        // destroying and failed rows gone from disk: delete the rows
        (
            vec![
                row("d", Destroying, None, false),
                row("f", Failed, None, false),
            ],
            vec![],
            [vec![], vec![], vec![], vec!["d", "f"]],
        ),
        // a destroyed parent row waits while its child row stays
        (
            vec![
                row("p", Destroying, None, false),
                row("c", Created, Some("p"), false),
            ],
            vec!["c"],
            [vec![], vec![], vec![], vec![]],
        ),
        // parent and child both gone: child first
        (
            vec![
                row("p", Destroying, None, false),
                row("c", Destroying, Some("p"), false),
            ],
            vec![],
            [vec![], vec![], vec![], vec!["c", "p"]],
        ),
        // on the worker, children are destroyed before parents
        (
            vec![
                row("p", Destroying, None, false),
                row("c", Destroying, Some("p"), false),
                row("g", Destroying, Some("c"), false),
            ],
            vec!["p", "c", "g"],
            [vec![], vec![], vec!["g", "c", "p"], vec![]],
        ),
    ];
    for (i, (rows, reported, [missing, cleared, destroy, delete])) in cases.into_iter().enumerate()
    {
        let got = plan(&rows, &reported);
        let want = ReportPlan {
            mark_missing: strings(&missing),
            clear_missing: strings(&cleared),
            destroy_on_worker: strings(&destroy),
            delete_rows: strings(&delete),
            deferred: 0,
        };
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn a_parent_cycle_in_corrupt_rows_does_not_hang_the_planner() {
    let rows = [
        row("a", Destroying, Some("b"), false),
        row("b", Destroying, Some("a"), false),
    ];
    let got = plan(&rows, &[]);
    assert_eq!(got.delete_rows.len(), 2);
}

#[test]
fn volume_states_and_owner_kinds_round_trip() {
    for s in VolumeState::ALL {
        assert_eq!(s.as_str().parse::<VolumeState>(), Ok(s));
    }
    for k in OwnerKind::ALL {
        assert_eq!(k.as_str().parse::<OwnerKind>(), Ok(k));
    }
    assert!("nope".parse::<OwnerKind>().is_err());
}
