//! `across` in a build's plan: the planner writes the step once per
//! combination of its vars' values, each copy with that combination's
//! `((.:var))`s filled in, nested one `in_parallel` per var (the first var
//! outermost) whose `limit` is the var's `max_in_flight` and whose
//! `fail_fast` is the across step's. The engine runs it as any other
//! `in_parallel`, so a combination's steps have step ids of their own and
//! the build's events name which one ran what.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::pipeline::AcrossVar;
use crate::vars::{interpolate_leaving_undefined, take_fields, Lookup, VarLookup, VarRef};

/// The values of one combination, by var name.
struct Combination<'a>(Vec<(&'a str, &'a Value)>);

impl VarLookup for Combination<'_> {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        if !r.is_local() {
            return Lookup::Undefined;
        }
        match self.0.iter().rev().find(|(name, _)| *name == r.path) {
            None => Lookup::Undefined,
            Some((_, value)) => match take_fields(value, r) {
                Ok(v) => Lookup::Found(Cow::Borrowed(v)),
                Err(e) => Lookup::Invalid(e),
            },
        }
    }
}

/// The plan of an across over `vars` of the planned step `step` (a step
/// of the plan, as JSON): an `in_parallel` step (as an object's fields).
pub fn expand(
    vars: &[AcrossVar],
    fail_fast: bool,
    step: &Value,
    at: &str,
) -> Result<Map<String, Value>, String> {
    let mut chosen = Vec::with_capacity(vars.len());
    level(vars, fail_fast, step, at, &mut chosen)
}

fn level<'a>(
    vars: &'a [AcrossVar],
    fail_fast: bool,
    step: &Value,
    at: &str,
    chosen: &mut Vec<(&'a str, &'a Value)>,
) -> Result<Map<String, Value>, String> {
    let Some((var, rest)) = vars.split_first() else {
        let filled = interpolate_leaving_undefined(step, &Combination(chosen.clone()))
            .map_err(|e| format!("{at}: {e}"))?;
        return match filled {
            Value::Object(o) => Ok(o),
            _ => Err(format!("{at}: a step is an object")),
        };
    };
    let mut steps = Vec::with_capacity(var.values.len());
    for value in &var.values {
        chosen.push((&var.var, value));
        let inner = level(rest, fail_fast, step, at, chosen);
        chosen.pop();
        steps.push(Value::Object(inner?));
    }
    let mut body = Map::new();
    let limit = var
        .max_in_flight
        .map_or(var.values.len(), |n| n as usize)
        .max(1);
    body.insert("steps".into(), Value::Array(steps));
    body.insert("limit".into(), json!(limit));
    if fail_fast {
        body.insert("fail_fast".into(), json!(true));
    }
    let mut o = Map::new();
    o.insert("in_parallel".into(), Value::Object(body));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::pipeline::parse_pipeline;
    use crate::plan::planner::plan_job;
    use crate::plan::{leaf_steps, Step};

    fn planned(yaml: &str) -> serde_json::Value {
        let config = parse_pipeline(yaml).expect("a valid pipeline").config;
        plan_job(&config, &config.jobs[0]).unwrap().stored
    }

    const PIPELINE: &str = r#"
resources:
- name: r
  type: mock
  source: {}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    file: r/((.:x)).yml
    vars: {w: ((.:w)), whole: ((.:x)), field: ((.:m.k))}
    params: {X: "x=((.:x)) w=((.:w))", G: ((global))}
    across:
    - var: x
      values: [a, b]
      max_in_flight: all
    - var: w
      values: [1, 2, 3]
    - var: m
      values: [{k: v}]
    fail_fast: true
    attempts: 2
    on_failure: {task: f, file: r/f.yml}
"#;

    #[test]
    fn each_combination_is_a_step_of_its_own_with_its_values_filled_in() {
        let stored = planned(PIPELINE);
        let across = &stored[1];
        // The hook stays outside, once; the first var is outermost.
        assert_eq!(across["on_failure"]["task"], json!("f"));
        let xs = &across["in_parallel"];
        assert_eq!(xs["limit"], json!(2));
        assert_eq!(xs["fail_fast"], json!(true));
        assert_eq!(xs["steps"].as_array().unwrap().len(), 2);
        let ws = &xs["steps"][1]["in_parallel"];
        assert_eq!(ws["limit"], json!(1));
        assert_eq!(ws["fail_fast"], json!(true));
        assert_eq!(ws["steps"].as_array().unwrap().len(), 3);
        let leaf = &ws["steps"][2]["in_parallel"]["steps"][0];
        assert_eq!(leaf["task"], json!("t"));
        assert_eq!(leaf["file"], json!("r/b.yml"));
        assert_eq!(leaf["attempts"], json!(2));
        assert_eq!(
            leaf["vars"],
            json!({"w": 3, "whole": "b", "field": "v"}),
            "a whole-string var keeps its type"
        );
        assert_eq!(
            leaf["params"],
            json!({"X": "x=b w=3", "G": "((global))"}),
            "other vars stay for the build to fill in"
        );
    }

    #[test]
    fn the_plan_reads_back_with_a_step_id_per_combination() {
        let config = parse_pipeline(PIPELINE).unwrap().config;
        let plan = plan_job(&config, &config.jobs[0]).unwrap().plan;
        let tasks: Vec<(String, String)> = leaf_steps(&plan.steps)
            .into_iter()
            .filter_map(|(id, s)| match s {
                Step::Task(t) if t.task == "t" => Some((id, t.file.clone().unwrap_or_default())),
                _ => None,
            })
            .collect();
        assert_eq!(tasks.len(), 6, "{tasks:?}");
        let ids: std::collections::BTreeSet<&String> = tasks.iter().map(|(id, _)| id).collect();
        assert_eq!(
            ids.len(),
            6,
            "each combination has its own step id: {tasks:?}"
        );
        let files: Vec<&str> = tasks.iter().map(|(_, f)| f.as_str()).collect();
        assert_eq!(
            files,
            ["r/a.yml", "r/a.yml", "r/a.yml", "r/b.yml", "r/b.yml", "r/b.yml"]
        );
    }

    #[test]
    fn local_vars_reach_set_pipeline_get_and_put_and_nested_steps() {
        let stored = planned(
            r#"
resources:
- name: r
  type: mock
  source: {}
jobs:
- name: j
  plan:
  - get: r
  - across: [{var: env, values: [dev, prod]}]
    do:
    - set_pipeline: p
      file: r/((.:env)).yml
      vars: {env: ((.:env))}
    - put: r
      params: {env: ((.:env))}
      get_params: {e: ((.:env))}
    - load_var: later
      file: r/((.:env)).txt
    - task: uses-later
      file: r/t.yml
      params: {L: ((.:later)), E: ((.:env))}
"#,
        );
        let second = &stored[1]["in_parallel"]["steps"][1]["do"];
        assert_eq!(second[0]["file"], json!("r/prod.yml"));
        assert_eq!(second[0]["vars"], json!({"env": "prod"}));
        assert_eq!(second[1]["params"], json!({"env": "prod"}));
        assert_eq!(second[1]["get_params"], json!({"e": "prod"}));
        assert_eq!(second[2]["file"], json!("r/prod.txt"));
        assert_eq!(
            second[3]["params"],
            json!({"L": "((.:later))", "E": "prod"})
        );
    }

    #[test]
    fn a_local_var_of_an_across_is_unknown_outside_it() {
        let yaml = r#"
resources:
- name: r
  type: mock
  source: {}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    file: r/t.yml
    across: [{var: x, values: [1]}]
  - task: after
    file: r/t.yml
    params: {X: ((.:x))}
"#;
        let err = parse_pipeline(yaml).unwrap_err().to_string();
        assert!(
            err.contains("local var ((.:x)) is not defined before it (by a load_var step, or a get or put step of that name)"),
            "{err}"
        );
    }
}
