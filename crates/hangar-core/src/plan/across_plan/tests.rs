use serde_json::json;

use crate::pipeline::parse_pipeline;
use crate::plan::planner::plan_job;
use crate::plan::{leaf_steps, parse_build_plan, parse_plan, Step};

const MULTI_BRANCH: &str = r#"
resources:
- name: r
  type: mock
  source: {}
jobs:
- name: j
  plan:
  - get: r
  - load_var: branches
    file: r/branches.json
  - across:
    - var: b
      values: ((.:branches))
      max_in_flight: all
    - var: env
      values: [dev, prod]
    set_pipeline: branch
    file: r/p.yml
    instance_vars: {branch: ((.:b.name)), env: ((.:env))}
    fail_fast: true
"#;

fn stored() -> serde_json::Value {
    let config = parse_pipeline(MULTI_BRANCH)
        .expect("a valid pipeline")
        .config;
    plan_job(&config, &config.jobs[0]).unwrap().stored
}

#[test]
fn an_across_whose_values_come_from_a_var_is_stored_unexpanded() {
    let stored = stored();
    assert_eq!(
        stored[2],
        json!({
            "across": [
                {"var": "b", "values": "((.:branches))", "max_in_flight": "all"},
                {"var": "env", "values": ["dev", "prod"], "max_in_flight": 1}
            ],
            "fail_fast": true,
            "step": {"set_pipeline": "branch", "file": "r/p.yml",
                     "instance_vars": {"branch": "((.:b.name))", "env": "((.:env))"}}
        })
    );
    let plan = parse_build_plan(&stored).unwrap();
    let ids: Vec<String> = leaf_steps(&plan.steps)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["0", "1", "2", "2.*"]);
}

#[test]
fn filled_in_it_runs_every_combination_with_its_values() {
    let plan = parse_build_plan(&stored()).unwrap();
    let Step::Across(a) = &plan.steps[2] else {
        panic!("not an across: {:?}", plan.steps[2]);
    };
    let filled = json!([[{"name": "main"}, {"name": "dev"}, {"name": "v2"}], ["dev", "prod"]]);
    let expanded = a.expand(&filled, "plan[2]").unwrap();
    let leaves: Vec<(String, serde_json::Value)> = leaf_steps(std::slice::from_ref(&expanded))
        .into_iter()
        .map(|(id, s)| match s {
            Step::SetPipeline(p) => (id, json!(p.instance_vars)),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(leaves.len(), 6);
    assert_eq!(
        leaves[0],
        ("0.0.0".into(), json!({"branch": "main", "env": "dev"}))
    );
    assert_eq!(
        leaves[5],
        ("0.2.1".into(), json!({"branch": "v2", "env": "prod"}))
    );
    let Step::InParallel(outer) = &expanded else {
        panic!("{expanded:?}")
    };
    assert_eq!((outer.limit, outer.fail_fast), (Some(3), true));
}

#[test]
fn values_that_are_no_list_fail_the_step_saying_which() {
    let plan = parse_build_plan(&stored()).unwrap();
    let Step::Across(a) = &plan.steps[2] else {
        panic!()
    };
    let many: Vec<serde_json::Value> = (0..300).map(|i| json!({"name": i})).collect();
    for (filled, why) in [
        (
            json!(["main", ["dev"]]),
            "across var b: its values (\"((.:branches))\") are string, not a list",
        ),
        (json!([[], ["dev"]]), "are an empty list"),
        (
            json!([many, ["dev"]]),
            "300 combinations of values: across runs at most 256",
        ),
        (json!([["x"]]), "did not fill in"),
    ] {
        let e = a.expand(&filled, "plan[2]").expect_err(why);
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn malformed_stored_acrosses_are_refused_naming_where() {
    let step = json!({"task": "t", "file": "r/t.yml"});
    for (across, why) in [
        (
            json!({"across": [], "step": step}),
            "plan[0].across: expected a list of vars",
        ),
        (
            json!({"across": [{"var": "x", "values": "a ((b))"}], "step": step}),
            "plan[0].across[0].values: expected a list, or one ((var)) giving it",
        ),
        (
            json!({"across": [{"var": "x", "values": [1]}, {"var": "x", "values": [2]}], "step": step}),
            "x is named twice",
        ),
        (
            json!({"across": [{"var": "x", "values": [1], "max_in_flight": 0}], "step": step}),
            "max_in_flight: 0 is not all",
        ),
        (
            json!({"across": [{"var": "x", "values": [1]}]}),
            "missing field `step`",
        ),
        (
            json!({"across": [{"var": "x", "values": [1]}], "step": step, "limit": 2}),
            "unknown field `limit` of an across",
        ),
        (
            json!({"across": [{"var": "x", "values": [1]}], "step": {"bogus": 1}}),
            "plan[0].step: a step needs one of",
        ),
    ] {
        let e = parse_plan(&json!([across])).expect_err(why).to_string();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn its_values_and_step_need_their_local_vars_defined() {
    let undefined = MULTI_BRANCH.replace("values: ((.:branches))", "values: ((.:nope))");
    let e = parse_pipeline(&undefined).unwrap_err().to_string();
    assert!(e.contains("local var ((.:nope)) is not defined"), "{e}");
    let outside =
        format!("{MULTI_BRANCH}  - task: after\n    file: r/t.yml\n    params: {{B: ((.:b))}}\n");
    let e = parse_pipeline(&outside).unwrap_err().to_string();
    assert!(e.contains("local var ((.:b)) is not defined"), "{e}");
    let text = MULTI_BRANCH.replace("values: ((.:branches))", "values: x ((.:branches))");
    let e = parse_pipeline(&text).unwrap_err().to_string();
    assert!(e.contains("exactly one ((var))"), "{e}");
}
