//! `across`: what is read, and what is refused with which message.

use serde_json::json;

use super::*;

fn task_across(across: &str, extra: &str) -> String {
    with_steps(&format!(
        "  - task: t\n    file: r/t.yml\n    params: {{X: ((.:x))}}\n    across: {across}\n{extra}"
    ))
}

#[test]
fn across_is_read_with_its_vars_and_the_step_it_runs() {
    let v = ok(&task_across(
        "[{var: x, values: [a, 1, {k: v}], max_in_flight: all}, {var: w, values: [[1]], max_in_flight: 2}, {var: z, values: [q]}]",
        "    fail_fast: true\n    attempts: 2\n    ensure: {task: e, file: r/e.yml}\n",
    ));
    let steps = &v.config.jobs[0].plan;
    let Action::Across(a) = &steps[1].action else {
        panic!("not an across: {:?}", steps[1]);
    };
    assert!(a.fail_fast);
    let vars: Vec<(&str, usize, Option<u32>)> = a
        .vars
        .iter()
        .map(|v| (v.var.as_str(), v.values.len(), v.max_in_flight))
        .collect();
    assert_eq!(vars, [("x", 3, None), ("w", 1, Some(2)), ("z", 1, Some(1))]);
    assert_eq!(a.vars[0].values[2], json!({"k": "v"}));
    // Attempts go with each combination; the hook runs once, after all.
    assert_eq!(a.step.attempts, Some(2));
    assert!(a.step.ensure.is_none());
    assert!(steps[1].ensure.is_some());
    assert_eq!(steps[1].attempts, None);
    // Written back as read.
    let written = serde_json::to_value(&steps[1]).unwrap();
    assert_eq!(written["across"][0]["max_in_flight"], json!("all"));
    assert_eq!(written["across"][2]["max_in_flight"], json!(1));
    assert_eq!(written["fail_fast"], json!(true));
    assert_eq!(written["attempts"], json!(2));
    assert_eq!(written["task"], json!("t"));
}

#[test]
fn across_is_refused_when_its_vars_are_wrong() {
    let big: Vec<String> = (0..17).map(|i| i.to_string()).collect();
    let big = big.join(", ");
    let cases: Vec<(String, &[&str])> = vec![
        (
            task_across("[]", ""),
            &["jobs.j.plan.do[1].across: no vars: across needs at least one var"],
        ),
        (
            task_across("{var: x}", ""),
            &["jobs.j.plan.do[1].across: expected a list of vars ({var, values, max_in_flight}), got a mapping"],
        ),
        (
            task_across("[{values: [1]}]", ""),
            &["jobs.j.plan.do[1].across[0]: no var: each entry of across names its var"],
        ),
        (
            task_across("[{var: x}]", ""),
            &["jobs.j.plan.do[1].across[0]: no values: each var of across lists its values"],
        ),
        (
            task_across("[{var: x, values: [1]}, {var: x, values: [2]}]", ""),
            &["jobs.j.plan.do[1].across[1].var: 'x' is named twice in this across"],
        ),
        (
            task_across("[{var: 'a b', values: [1]}]", ""),
            &["jobs.j.plan.do[1].across[0].var: 'a b' is not a var name (a letter or _, then letters, digits, _ or -)"],
        ),
        (
            task_across("[{var: x, values: [1], max_in_flight: 0}]", ""),
            &["jobs.j.plan.do[1].across[0].max_in_flight: must be greater than 0 (or all)"],
        ),
        (
            task_across("[{var: x, values: [1], max_in_flight: -3}]", ""),
            &["jobs.j.plan.do[1].across[0].max_in_flight: must be greater than 0 (or all)"],
        ),
        (
            task_across("[{var: x, values: [1], max_in_flight: some}]", ""),
            &["jobs.j.plan.do[1].across[0].max_in_flight: expected a whole number or all, got a string"],
        ),
        (
            task_across("[{var: x, values: 'a ((list))'}]", ""),
            &["jobs.j.plan.do[1].across[0].values: a string of values must be exactly one ((var)) giving the whole list"],
        ),
        (
            task_across("[{var: x, values: [1], limit: 2}]", ""),
            &["jobs.j.plan.do[1].across[0]: unknown field \"limit\""],
        ),
        (
            task_across(
                &format!("[{{var: x, values: [{big}]}}, {{var: w, values: [{big}]}}]"),
                "",
            ),
            &["jobs.j.plan.do[1].across: 289 combinations of values: across runs at most 256"],
        ),
        // The step inside is validated as any other.
        (
            with_steps("  - get: nope\n    across: [{var: x, values: [1]}]\n"),
            &["jobs.j.plan.do[1].get(nope): unknown resource 'nope'"],
        ),
        (
            with_steps("  - task: t\n    across: [{var: x, values: [1]}]\n    bogus: 1\n"),
            &["jobs.j.plan.do[1]: unknown fields [\"bogus\"]"],
        ),
        (
            with_steps("  - task: t\n    file: r/t.yml\n    fail_fast: true\n"),
            &["jobs.j.plan.do[1].fail_fast: fail_fast on a step belongs with across (in_parallel takes its own)"],
        ),
    ];
    for (yaml, want) in cases {
        let got = errors(&yaml);
        for w in want {
            assert!(
                got.iter().any(|g| g == w),
                "for {yaml}\nwanted {w}\ngot {got:#?}"
            );
        }
    }
}

#[test]
fn a_huge_values_list_is_refused_without_building_it() {
    let values: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
    let yaml = task_across(&format!("[{{var: x, values: [{}]}}]", values.join(",")), "");
    assert_eq!(
        errors(&yaml),
        ["jobs.j.plan.do[1].across: 5000 combinations of values: across runs at most 256"]
    );
}

#[test]
fn nested_acrosses_are_bounded_by_the_step_depth() {
    let mut step = "task: t\nfile: r/t.yml\n".to_string();
    for i in 0..20 {
        step = format!(
            "across: [{{var: v{i}, values: [1]}}]\ndo:\n- {}",
            step.replace('\n', "\n  ")
        );
    }
    let yaml = with_steps(&format!("  - {}", step.replace('\n', "\n    ")));
    let got = errors(&yaml);
    assert!(
        got.iter()
            .any(|e| e.contains("steps are nested deeper than 16 levels")),
        "{got:#?}"
    );
}

#[test]
fn a_job_whose_combinations_overflow_a_build_plan_is_refused_when_set() {
    // 16 x 16 = 256 combinations pass the reading bound, but with their
    // in_parallel steps they make more than a build plan holds.
    let values: Vec<String> = (0..16).map(|i| i.to_string()).collect();
    let values = values.join(", ");
    let got = errors(&task_across(
        &format!("[{{var: x, values: [{values}]}}, {{var: v, values: [{values}]}}]"),
        "",
    ));
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(
        got[0].starts_with("jobs.j: its across steps, every combination written out, make a build plan hangar cannot run: ")
            && got[0].contains("a plan holds at most 256 steps"),
        "{got:#?}"
    );
    // 8 x 8 fits.
    let values: Vec<String> = (0..8).map(|i| i.to_string()).collect();
    let values = values.join(", ");
    ok(&task_across(
        &format!("[{{var: x, values: [{values}]}}, {{var: v, values: [{values}]}}]"),
        "",
    ));
}

#[test]
fn a_mapping_inside_a_longer_string_is_refused_when_set() {
    let got = errors(&with_steps(
        "  - task: t\n    file: r/((.:x)).yml\n    across: [{var: x, values: [a, {k: v}]}]\n",
    ));
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(
        got[0].starts_with("jobs.j: its across steps")
            && got[0].contains("cannot interpolate non-primitive value (map) from var: .:x"),
        "{got:#?}"
    );
}

#[test]
fn a_deeply_nested_value_is_refused_by_the_reader_without_overflowing() {
    let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    let yaml = task_across(&format!("[{{var: x, values: [{deep}]}}]"), "");
    let got = errors(&yaml);
    assert!(
        got.len() == 1 && got[0].contains("recursion limit exceeded"),
        "{got:#?}"
    );
}
