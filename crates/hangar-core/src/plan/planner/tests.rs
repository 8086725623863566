use super::*;
use crate::pipeline::parse_pipeline;
use crate::plan::outcome::Hook;
use crate::plan::{leaf_steps, Step as PlanStep};

fn job_plan(yaml: &str) -> Result<JobPlan, PlannerError> {
    let config = parse_pipeline(yaml).expect("a valid pipeline").config;
    let job = config.jobs[0].clone();
    plan_job(&config, &job)
}

#[test]
fn resources_become_type_source_tags_and_pinned_versions() {
    let plan = job_plan(
        r#"
resources:
- name: repo
  type: git
  source: {uri: "https://example.com/r.git", branch: main}
  tags: [linux]
- name: pinned
  type: mock
  source: {}
  version: {ref: abc}
jobs:
- name: unit
  plan:
  - get: repo
    trigger: true
    params: {depth: 1}
    tags: [big]
  - get: code
    resource: pinned
  - get: old
    resource: repo
    version: {ref: "123"}
  - task: test
    config:
      platform: linux
      inputs: [{name: repo}]
      params: {A: "1", B: "2"}
      run: {path: make}
    params: {B: "3"}
    input_mapping: {repo: code}
"#,
    )
    .unwrap();
    let steps = plan
        .stored
        .as_array()
        .expect("a plan without custom types is a list");
    assert_eq!(
        steps[0],
        json!({"get": "repo", "resource": "repo", "type": "git",
               "source": {"uri": "https://example.com/r.git", "branch": "main"},
               "params": {"depth": 1}, "tags": ["linux", "big"]})
    );
    assert_eq!(
        steps[1],
        json!({"get": "code", "resource": "pinned", "type": "mock", "source": {},
               "version": {"ref": "abc"}})
    );
    assert_eq!(steps[2]["version"], json!({"ref": "123"}));
    // The artifact is named after the step, the recorded input after the
    // resource it came from.
    assert_eq!(steps[2]["get"], json!("old"));
    assert_eq!(steps[2]["resource"], json!("repo"));
    // The step's params override the config's, as in Concourse.
    assert_eq!(steps[3]["config"]["params"], json!({"A": "1", "B": "3"}));
    assert_eq!(steps[3]["input_mapping"], json!({"repo": "code"}));
    assert_eq!(leaf_steps(&plan.plan.steps).len(), 4);
}

#[test]
fn job_hooks_wrap_the_whole_plan_and_step_modifiers_carry_over() {
    let plan = job_plan(
        r#"
jobs:
- name: j
  on_failure: {task: alert, config: {platform: linux, run: {path: alert}}}
  ensure: {task: clean, config: {platform: linux, run: {path: clean}}}
  plan:
  - try:
      task: flaky
      config: {platform: linux, run: {path: flaky}}
  - in_parallel:
      limit: 2
      fail_fast: true
      steps:
      - task: a
        attempts: 3
        timeout: 10m
        config: {platform: linux, run: {path: a}}
      - do:
        - task: b
          config: {platform: linux, run: {path: b}}
"#,
    )
    .unwrap();
    let [PlanStep::Modified(job)] = plan.plan.steps.as_slice() else {
        panic!("{:?}", plan.plan.steps)
    };
    let hooks: Vec<Hook> = job.hooks.iter().map(|(h, _)| *h).collect();
    assert_eq!(hooks, [Hook::OnFailure, Hook::Ensure]);
    let PlanStep::Do(inner) = &job.step else {
        panic!()
    };
    assert!(matches!(&inner[0], PlanStep::Try(_)));
    let PlanStep::InParallel(p) = &inner[1] else {
        panic!()
    };
    assert_eq!((p.limit, p.fail_fast), (Some(2), true));
    let PlanStep::Modified(a) = &p.steps[0] else {
        panic!()
    };
    assert_eq!(
        (a.attempts, a.timeout),
        (3, Some(std::time::Duration::from_secs(600)))
    );
    let ids: Vec<String> = leaf_steps(&plan.plan.steps)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["0.0", "0.1.0", "0.1.1.0", "0.on_failure", "0.ensure"]);
}

#[test]
fn privileged_tasks_and_resource_types_reach_the_build_plan() {
    let plan = job_plan(
        r#"
resource_types:
- name: dind
  type: registry-image
  source: {repository: example/dind}
  privileged: true
- name: plain
  type: registry-image
  source: {repository: example/plain}
resources:
- name: r
  type: dind
  source: {}
jobs:
- name: j
  plan:
  - get: r
  - task: root
    privileged: true
    config: {platform: linux, run: {path: docker}}
  - task: from-file
    privileged: true
    file: r/task.yml
  - task: user
    privileged: false
    config: {platform: linux, run: {path: make}}
"#,
    )
    .unwrap();
    let steps = plan.stored["steps"].as_array().unwrap();
    assert_eq!(steps[1]["privileged"], json!(true));
    assert_eq!(steps[2]["privileged"], json!(true));
    // Unprivileged is the default, left out as Concourse leaves it out.
    assert!(steps[3].get("privileged").is_none(), "{}", steps[3]);
    assert_eq!(plan.stored["resource_types"][0]["privileged"], json!(true));
    assert!(plan.stored["resource_types"][1].get("privileged").is_none());
    let tasks: Vec<(String, bool)> = leaf_steps(&plan.plan.steps)
        .into_iter()
        .filter_map(|(_, s)| match s {
            PlanStep::Task(t) => Some((t.task.clone(), t.privileged)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tasks,
        [
            ("root".to_string(), true),
            ("from-file".to_string(), true),
            ("user".to_string(), false)
        ]
    );
    // A task read from its file keeps the step's privilege.
    let leaves = leaf_steps(&plan.plan.steps);
    let PlanStep::Task(from_file) = leaves[2].1 else {
        panic!()
    };
    assert!(
        from_file
            .with_config(json!({"platform": "linux", "run": {"path": "x"}}))
            .privileged
    );
    let types: Vec<(&str, bool)> = plan
        .plan
        .resource_types
        .iter()
        .map(|t| (t.name.as_str(), t.privileged))
        .collect();
    assert_eq!(types, [("dind", true), ("plain", false)]);
}

#[test]
fn custom_resource_types_travel_with_the_plan() {
    let plan = job_plan(
        r##"
resource_types:
- name: slack
  type: registry-image
  source: {repository: example/slack}
  defaults: {channel: "#ci"}
resources:
- name: notify
  type: slack
  source: {url: "https://hooks.example.com"}
jobs:
- name: j
  plan:
  - get: notify
"##,
    )
    .unwrap();
    assert_eq!(plan.plan.resource_types.len(), 1);
    assert_eq!(plan.plan.resource_types[0].name, "slack");
    assert_eq!(
        plan.stored["resource_types"][0]["defaults"],
        json!({"channel": "#ci"})
    );
}

#[test]
fn file_steps_carry_over_as_written_to_run_with_the_build_s_artifacts() {
    let plan = job_plan(
        r#"
resources: [{name: r, type: mock, source: {}}]
jobs:
- name: j
  plan:
  - get: r
  - load_var: version
    file: r/version.json
    format: json
    reveal: true
  - task: t
    file: r/t.yml
    vars: {image: busybox}
    params: {V: ((.:version.n))}
    container_limits: {memory: 1000}
    input_mapping: {src: r}
  - set_pipeline: self
    file: r/p.yml
    vars: {v: ((.:version))}
    var_files: [r/vars.yml]
"#,
    )
    .unwrap();
    let steps = plan.stored.as_array().unwrap();
    assert_eq!(
        steps[1],
        json!({"load_var": "version", "file": "r/version.json", "format": "json", "reveal": true})
    );
    assert_eq!(
        steps[2],
        json!({"task": "t", "file": "r/t.yml", "vars": {"image": "busybox"},
               "params": {"V": "((.:version.n))"}, "container_limits": {"memory": 1000},
               "input_mapping": {"src": "r"}})
    );
    assert_eq!(
        steps[3],
        json!({"set_pipeline": "self", "file": "r/p.yml", "vars": {"v": "((.:version))"},
               "var_files": ["r/vars.yml"]})
    );
    assert!(matches!(plan.plan.steps[1], PlanStep::LoadVar(_)));
}

#[test]
fn a_set_pipeline_of_an_instance_carries_its_vars() {
    let plan = job_plan(
        r#"
resources: [{name: r, type: mock, source: {}}]
jobs:
- name: j
  plan:
  - get: r
  - set_pipeline: branches
    file: r/p.yml
    instance_vars: {branch: main, shard: 2}
"#,
    )
    .unwrap();
    let steps = plan.stored.as_array().unwrap();
    assert_eq!(
        steps[1],
        json!({"set_pipeline": "branches", "instance_vars": {"branch": "main", "shard": 2},
               "file": "r/p.yml"})
    );
    match &plan.plan.steps[1] {
        PlanStep::SetPipeline(s) => {
            assert_eq!(
                s.instance_vars,
                json!({"branch": "main", "shard": 2}).as_object().cloned()
            )
        }
        other => panic!("not a set_pipeline: {other:?}"),
    }
}

#[test]
fn file_steps_that_cannot_run_are_refused_naming_where() {
    let cases = [
        (
            "resources: [{name: r, type: mock, source: {}}]\njobs:\n- name: j\n  plan:\n  - get: r\n  - task: t\n    config: {platform: linux, run: {path: x}}\n    vars: {a: 1}\n",
            "job plan: jobs.j.plan[1].task(t).vars: fill the vars of a task `file`",
        ),
        (
            "resources: [{name: r, type: mock, source: {}}]\njobs:\n- name: j\n  plan:\n  - get: r\n    params: {a: ((.:v))}\n  - load_var: v\n    file: r/v\n",
            "job plan: plan step 0: local var ((.:v)) is not defined before it (by a load_var step, or a get or put step of that name)",
        ),
    ];
    for (yaml, expected) in cases {
        let got = job_plan(yaml).unwrap_err().to_string();
        assert!(got.starts_with(expected), "{yaml}\n{got}");
    }
}

#[test]
fn a_put_resolves_its_resource_and_keeps_its_fields() {
    let plan = job_plan(
        r#"
resources:
- name: repo
  type: git
  source: {uri: "https://example.com/r.git", branch: main}
jobs:
- name: j
  plan:
  - get: repo
  - put: repo
    inputs: [repo]
    params: {repository: repo}
    get_params: {depth: 1}
  - put: bump
    resource: repo
    no_get: true
    params: {repository: repo}
"#,
    )
    .unwrap();
    let steps = plan.stored.as_array().unwrap();
    assert_eq!(
        steps[1],
        json!({"put": "repo", "resource": "repo", "type": "git",
               "source": {"uri": "https://example.com/r.git", "branch": "main"},
               "params": {"repository": "repo"}, "inputs": ["repo"], "get_params": {"depth": 1}})
    );
    assert_eq!(steps[2]["no_get"], json!(true));
    assert_eq!(steps[2]["resource"], json!("repo"));
    assert!(matches!(plan.plan.steps[1], PlanStep::Put(_)));
}

#[test]
fn the_scheduler_s_versions_go_to_their_gets_hooks_included() {
    let config = parse_pipeline(
        r#"
resources:
- {name: repo, type: mock, source: {}}
- {name: other, type: mock, source: {}}
jobs:
- name: unit
  plan:
  - get: repo
  - get: other
  on_failure:
    get: again
    resource: repo
"#,
    )
    .expect("a valid pipeline")
    .config;
    let mut chosen = Map::new();
    chosen.insert("ref".into(), json!("v7"));
    let mut hook = Map::new();
    hook.insert("ref".into(), json!("v8"));
    let versions = InputVersions::from([("repo".to_string(), chosen), ("again".to_string(), hook)]);
    let planned = plan_job_with_versions(&config, &config.jobs[0], &versions).unwrap();
    let text = planned.stored.to_string();
    // The plan's get and the hook's each take theirs; `other` takes none.
    assert_eq!(
        text.matches(r#""version":{"ref":"v7"}"#).count(),
        1,
        "{text}"
    );
    assert_eq!(
        text.matches(r#""version":{"ref":"v8"}"#).count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches(r#""version""#).count(), 2, "{text}");
}
