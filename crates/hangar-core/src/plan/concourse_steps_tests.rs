//! Concourse's modifiers, hooks, `try` and `in_parallel`'s options in a
//! plan, and the steps refused for now.

use super::outcome::Hook;
use super::*;
use serde_json::json;

fn task(name: &str) -> Value {
    json!({"task": name, "config": {}})
}

#[test]
fn modifiers_and_hooks_wrap_the_step_with_ids_for_each_hook() {
    let plan = json!([
        {"task": "unit", "config": {}, "attempts": 3, "timeout": "1m30s",
         "on_failure": task("notify"), "ensure": {"do": [task("clean")]},
         "on_success": task("yay")},
        {"try": task("flaky")},
    ]);
    let steps = parse_plan(&plan).unwrap();
    let Step::Modified(m) = &steps[0] else {
        panic!("{:?}", steps[0])
    };
    assert_eq!(m.attempts, 3);
    assert_eq!(m.timeout, Some(Duration::from_secs(90)));
    let order: Vec<Hook> = m.hooks.iter().map(|(h, _)| *h).collect();
    assert_eq!(order, [Hook::OnSuccess, Hook::OnFailure, Hook::Ensure]);
    assert!(matches!(&m.step, Step::Task(t) if t.task == "unit"));
    assert!(matches!(&steps[1], Step::Try(inner) if matches!(**inner, Step::Task(_))));
    let ids: Vec<String> = leaf_steps(&steps).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        ["0", "0.on_success", "0.on_failure", "0.ensure.0", "1"]
    );
    assert_eq!(attempt_id("0", 1), "0");
    assert_eq!(attempt_id("0", 2), "0#2");
}

#[test]
fn in_parallel_takes_a_list_or_steps_limit_and_fail_fast() {
    let list = parse_plan(&json!([{"in_parallel": [task("a"), task("b")]}])).unwrap();
    assert!(matches!(&list[0], Step::InParallel(p)
        if p.steps.len() == 2 && p.limit.is_none() && !p.fail_fast));
    let full = parse_plan(&json!([{"in_parallel":
        {"steps": [task("a"), task("b"), task("c")], "limit": 2, "fail_fast": true}}]))
    .unwrap();
    assert!(matches!(&full[0], Step::InParallel(p)
        if p.steps.len() == 3 && p.limit == Some(2) && p.fail_fast));
    let ids: Vec<String> = leaf_steps(&full).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["0.0", "0.1", "0.2"]);
}

#[test]
fn bad_concourse_steps_are_refused_saying_where_and_why() {
    let cases = [
        (
            json!([{"put": "r", "params": {}}]),
            "plan: plan[0]: missing field `type`",
        ),
        (
            json!([{"load_var": "v", "file": "b"}]),
            "plan: plan[0].file: \"b\" does not say which artifact",
        ),
        (
            json!([{"load_var": "v", "file": "a/b", "format": "toml"}]),
            "plan: plan[0].format: \"toml\" is not one of json, yaml, yml, trim, raw",
        ),
        (
            json!([{"load_var": "v", "file": "a/b", "reveal": "yes"}]),
            "plan: plan[0].reveal: invalid type",
        ),
        (
            json!([{"load_var": "a b", "file": "a/b"}]),
            "plan: plan[0].load_var: invalid name",
        ),
        (
            json!([{"set_pipeline": "p", "file": "a/b", "instance_vars": {"x,y": 1}}]),
            "plan: plan[0].instance_vars: instance var key \"x,y\"",
        ),
        (
            json!([{"set_pipeline": "self", "file": "a/b", "instance_vars": {"x": 1}}]),
            "plan: plan[0].instance_vars: `self` is the build's own pipeline",
        ),
        (
            json!([{"set_pipeline": "p", "file": "a/b", "instance_vars": [1]}]),
            "plan: plan[0].instance_vars: invalid type",
        ),
        (
            json!([{"set_pipeline": "p", "file": "a/b", "var_files": ["v.yml"]}]),
            "plan: plan[0].var_files: \"v.yml\" does not say which artifact",
        ),
        (
            json!([{"set_pipeline": "../p", "file": "a/b"}]),
            "plan: plan[0].set_pipeline: pipeline",
        ),
        (
            json!([{"set_pipeline": "p"}]),
            "plan: plan[0]: missing field `file`",
        ),
        (
            json!([{"task": "t", "config": {}, "file": "a/t.yml"}]),
            "plan: plan[0]: give one of `config` or `file`, not both",
        ),
        (
            json!([{"task": "t"}]),
            "plan: plan[0]: a task needs `config` or `file`",
        ),
        (
            json!([{"task": "t", "config": {}, "vars": {"a": 1}}]),
            "plan: plan[0].vars: fill the vars of a task `file`",
        ),
        (
            json!([{"task": "t", "file": "a/t.yml", "container_limits": 5}]),
            "plan: plan[0].container_limits: expected a mapping",
        ),
        (
            json!([{"do": [{"put": "r", "type": "git", "source": {}, "inputs": "some"}]}]),
            "plan: plan[0].do[0].inputs: \"some\": expected \"all\", \"detect\" or a list",
        ),
        (
            json!([{"task": "t", "config": {}, "across": []}]),
            "plan: plan[0]: an across in a plan holds the step it runs under `step`",
        ),
        (
            json!([{"task": "t", "file": "t.yml"}]),
            "plan: plan[0].file: \"t.yml\" does not say which artifact",
        ),
        (
            json!([{"task": "t", "config": {}, "retry_failures": true}]),
            "plan: plan[0].retry_failures: replaced by Concourse's `attempts`",
        ),
        (
            json!([{"task": "t", "config": {}, "attempts": 0}]),
            "plan: plan[0].attempts: 0 is not a whole number from 1 to 10",
        ),
        (
            json!([{"task": "t", "config": {}, "attempts": 11}]),
            "plan: plan[0].attempts: 11 is not",
        ),
        (
            json!([{"task": "t", "config": {}, "attempts": "2"}]),
            "plan: plan[0].attempts: \"2\" is not",
        ),
        (
            json!([{"task": "t", "config": {}, "timeout": 5}]),
            "plan: plan[0].timeout: expected a duration",
        ),
        (
            json!([{"task": "t", "config": {}, "timeout": "5 minutes"}]),
            "plan: plan[0].timeout:",
        ),
        (
            json!([{"task": "t", "config": {}, "timeout": "0s"}]),
            "plan: plan[0].timeout: 0s is not between",
        ),
        (
            json!([{"task": "t", "config": {}, "timeout": "200h"}]),
            "plan: plan[0].timeout: 200h is not between",
        ),
        (
            json!([{"task": "t", "config": {}, "ensure": []}]),
            "plan: plan[0].ensure: expected a step",
        ),
        (
            json!([{"task": "t", "config": {}, "on_error": {"load_var": "x"}}]),
            "plan: plan[0].on_error: missing field `file`",
        ),
        (
            json!([{"try": task("a"), "x": 1}]),
            "plan: plan[0]: try takes nothing but its step(s)",
        ),
        (
            json!([{"try": [task("a")]}]),
            "plan: plan[0].try: expected a step",
        ),
        (
            json!([{"in_parallel": {"steps": [], "limit": 0}}]),
            "plan: plan[0].in_parallel.limit: 0 is not",
        ),
        (
            json!([{"in_parallel": {"steps": [], "fail_fast": "yes"}}]),
            "plan: plan[0].in_parallel.fail_fast: expected true or false",
        ),
        (
            json!([{"in_parallel": {"limit": 2}}]),
            "plan: plan[0].in_parallel: missing field `steps`",
        ),
        (
            json!([{"in_parallel": {"steps": [], "max": 1}}]),
            "plan: plan[0].in_parallel: unknown field `max`",
        ),
        (
            json!([{"in_parallel": {"steps": [{"put": "x", "type": "git", "source": {}, "inputs": ["a b"]}]}}]),
            "plan: plan[0].in_parallel.steps[0].inputs: invalid name",
        ),
    ];
    for (plan, expected) in cases {
        let got = parse_plan(&plan).unwrap_err().to_string();
        assert!(got.starts_with(expected), "{plan}: {got}");
    }
}

#[test]
fn thousands_of_nested_hooks_are_refused_by_the_bounds() {
    // A chain of hooks, each a step with a hook of its own, as deep as
    // JSON read by web can be (serde_json stops at 128 levels).
    let mut deep = task("t");
    for _ in 0..120 {
        deep = json!({"task": "t", "config": {}, "ensure": deep});
    }
    let got = parse_plan(&json!([deep])).unwrap_err().to_string();
    assert!(got.contains("nested deeper than 8 levels"), "{got}");
    // Thousands of hooks side by side: the step count bounds them.
    let wide: Vec<Value> = (0..3000)
        .map(|_| json!({"task": "t", "config": {}, "on_success": task("h"), "ensure": task("e")}))
        .collect();
    let got = parse_plan(&Value::Array(wide)).unwrap_err().to_string();
    assert!(got.contains("at most 256 steps"), "{got}");
}

#[test]
fn a_put_parses_with_concourse_s_fields() {
    let steps = parse_plan(&json!([{"put": "repo", "type": "git", "source": {"uri": "u", "branch": "main"},
        "params": {"repository": "repo"}, "inputs": ["repo"], "get_params": {"depth": 1}, "no_get": true,
        "attempts": 2}])).unwrap();
    let Step::Modified(m) = &steps[0] else {
        panic!()
    };
    let Step::Put(put) = &m.step else { panic!() };
    assert_eq!(put.inputs, PutInputs::Names(vec!["repo".into()]));
    assert!(put.no_get);
    assert_eq!(
        put.get_params,
        Some(json!({"depth": 1}).as_object().unwrap().clone())
    );
    let ids: Vec<String> = leaf_steps(&steps).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["0"]);
}

#[test]
fn a_step_without_modifiers_is_not_wrapped() {
    let steps = parse_plan(&json!([task("a")])).unwrap();
    assert!(matches!(&steps[0], Step::Task(_)));
}

#[test]
fn privileged_is_a_task_step_field_and_no_other_step_s() {
    let steps = parse_plan(&json!([
        {"task": "root", "config": {}, "privileged": true},
        task("user"),
    ]))
    .unwrap();
    let privileged: Vec<bool> = steps
        .iter()
        .map(|s| match s {
            Step::Task(t) => t.privileged,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(privileged, [true, false]);
    for (plan, expected) in [
        (
            json!([{"task": "t", "config": {}, "privileged": "yes"}]),
            "plan: plan[0].privileged: invalid type: string \"yes\", expected a boolean",
        ),
        (
            json!([{"get": "r", "type": "git", "source": {}, "privileged": true}]),
            "plan: plan[0].privileged: unknown field `privileged`",
        ),
    ] {
        let got = parse_plan(&plan).unwrap_err().to_string();
        assert!(got.starts_with(expected), "{plan}: {got}");
    }
}
