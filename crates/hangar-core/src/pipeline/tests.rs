use super::*;

fn ok(yaml: &str) -> Validated {
    match parse_pipeline(yaml) {
        Ok(v) => v,
        Err(e) => panic!("refused {yaml}\n{e}"),
    }
}

fn errors(yaml: &str) -> Vec<String> {
    match parse_pipeline(yaml) {
        Ok(v) => panic!("accepted {yaml}: {v:?}"),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

fn warnings(yaml: &str) -> Vec<String> {
    ok(yaml).warnings.into_iter().map(|w| w.message).collect()
}

/// One job `j` getting resource `r`, with `extra` appended to the job's
/// plan (indented as plan items).
fn with_steps(steps: &str) -> String {
    format!(
        "resources:\n- name: r\n  type: git\n  source: {{uri: u}}\njobs:\n- name: j\n  plan:\n  - get: r\n{steps}"
    )
}

const GATED: &str = r#"
jobs:
  - name: build-it
    plan:
      - get: my-repo
        trigger: true
  - name: test-it
    plan:
      - get: my-repo
        trigger: true
        passed: [ build-it ]
      - put: email-release-manager
        params:
          subject: "Ready to ship"
  - name: ship-it
    plan:
      - get: my-repo
        trigger: false
        passed: [ test-it ]

resources:
  - name: my-repo
    type: git
    source:
      uri: https://github.com/concourse/examples.git
  - name: email-release-manager
    type: email
    source:
      from: pipeline@example.com
      to: release-manager@example.com

resource_types:
  - name: email
    type: registry-image
    source:
      repository: pcfseceng/email-resource
"#;

const IMAGE_FROM_GET: &str = r#"
resources:
  - name: busybox
    type: registry-image
    source:
      repository: busybox
      username: ((docker.user))
      password: ((docker.password))

jobs:
  - name: job
    plan:
      - get: busybox
      - task: simple-task
        image: busybox
        config:
          platform: linux
          run:
            path: echo
            args: [ "Hello world!" ]
"#;

const PUT_INPUTS: &str = r#"
resources:
- {name: apples, type: git, source: {}}
- {name: apple-basket, type: git, source: {}}
- {name: monkeys, type: git, source: {}}
- {name: apples-in-basket, type: s3, source: {}}
jobs:
  - name: the-job
    plan:
      - in_parallel:
          - get: apples
          - get: apple-basket
          - get: monkeys
      - put: apples-in-basket
        inputs: [ apples, apple-basket ]
        params:
          apples-location: apples/location
          basket: apple-basket
      - put: apples-in-basket
        inputs: detect
"#;

const TASK_FILE: &str = r#"
resources:
  - name: ci
    type: git
    source:
      uri: https://github.com/concourse/examples.git

jobs:
  - name: the-best-job
    plan:
      - get: ci
      - task: today
        file: ci/tasks/print-date.yml
"#;

/// From Concourse's docs of the load_var step.
const LOAD_VAR: &str = r#"
jobs:
  - name: loading-vars
    plan:
      - get: examples
      - load_var: version
        file: examples/misc/simple-value.txt
      - put: img
        params:
          version: ((.:version))


resources:
  - name: examples
    type: git
    icon: github
    source:
      uri: https://github.com/concourse/examples.git
  - name: img
    type: mock
"#;

/// From Concourse's docs of the in_parallel step.
const IN_PARALLEL: &str = r#"
jobs:
  - name: get-in-parallel
    plan:
      - in_parallel:
          limit: 2
          fail_fast: false
          steps:
            - get: ci
            - get: repo
            - get: code


resources:
  - name: repo
    type: mock
  - name: code
    type: mock
  - name: ci
    type: mock
"#;

/// From Concourse's docs of the set_pipeline step.
const SET_PIPELINE: &str = r#"
jobs:
  - name: set-pipeline
    plan:
      - get: examples
        trigger: true
      - set_pipeline: hello-world  # pipeline's name
        file: examples/pipelines/hello-world.yml  # pipeline's config

resources:
  - name: examples
    type: git
    icon: github
    source:
      uri: https://github.com/concourse/examples.git
"#;

/// From Concourse's docs of the put step.
const PUT_METHODS: &str = r#"
jobs:
  - name: put-input-methods
    plan:
      - in_parallel:
          - get: repo-dev
          - get: repo-master
          - get: app-image
          - get: ci
      - put: detect-inputs
        resource: repo
        inputs: detect # default, will only stream the "ci" artifact
        params:
          file: ci/version.txt
      - put: all-inputs
        resource: repo
        inputs: all # will stream all artifacts
        params:
          file: ci/version.txt
      - put: explicit-inputs
        resource: repo
        inputs: # explicitly list artifacts to stream to put step
          - ci
        params:
          file: ci/version.txt

resources:
  - name: repo
    type: mock
  - name: repo-dev
    type: mock
  - name: repo-master
    type: mock
  - name: app-image
    type: mock
  - name: ci
    type: mock
    source:
      create_files:
        version.txt: "42"
"#;

#[test]
fn examples_from_concourse_docs_are_accepted_without_warnings() {
    for yaml in [
        GATED,
        IMAGE_FROM_GET,
        PUT_INPUTS,
        TASK_FILE,
        LOAD_VAR,
        IN_PARALLEL,
        SET_PIPELINE,
        PUT_METHODS,
    ] {
        let v = ok(yaml);
        assert_eq!(v.warnings, vec![], "{yaml}");
    }
}

#[test]
fn the_gated_pipeline_reads_into_its_parts() {
    let c = ok(GATED).config;
    let names: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["build-it", "test-it", "ship-it"]);
    let Action::Get(get) = &c.jobs[1].plan[0].action else {
        panic!("not a get: {:?}", c.jobs[1].plan[0]);
    };
    assert_eq!(get.name, "my-repo");
    assert_eq!(get.resource_name(), "my-repo");
    assert_eq!(get.passed, ["build-it"]);
    assert!(get.trigger);
    let Action::Put(put) = &c.jobs[1].plan[1].action else {
        panic!("not a put");
    };
    assert_eq!(put.params.as_ref().unwrap()["subject"], "Ready to ship");
    assert_eq!(c.resource_types[0].name, "email");
    assert_eq!(c.resources[1].resource_type, "email");
}

#[test]
fn vars_stay_in_place_for_later() {
    let c = ok(IMAGE_FROM_GET).config;
    assert_eq!(c.resources[0].source["username"], "((docker.user))");
}

const FULL: &str = r#"
groups:
- name: main
  jobs: [unit, "deploy-*"]
  resources: [repo]
var_sources:
- name: fixed
  type: dummy
  config: {vars: {token: secret}}
resources:
- name: repo
  old_name: code
  public: true
  webhook_token: ((token))
  type: git
  source: {uri: "https://example.com/repo.git", branch: main}
  check_every: 10m
  check_timeout: 1h
  tags: [linux]
  version: {ref: abc123}
  icon: git
- name: image
  type: registry-image
  source: {repository: busybox}
  check_every: never
resource_types:
- name: slack
  type: registry-image
  source: {repository: cfcommunity/slack-notification-resource}
  params: {format: rootfs}
  defaults: {url: "((slack_url))"}
  check_every: 24h
  tags: [linux]
  privileged: true
jobs:
- name: unit
  old_name: test
  public: true
  serial_groups: [deploys]
  build_log_retention: {builds: 10, days: 2, minimum_succeeded_builds: 1}
  disable_manual_trigger: true
  interruptible: true
  on_failure:
    put: notify
    resource: repo
    no_get: true
  plan:
  - in_parallel:
      limit: 2
      fail_fast: true
      steps:
      - get: repo
        trigger: true
        version: every
      - get: image
        params: {format: oci}
  - task: test
    privileged: true
    image: image
    input_mapping: {source: repo}
    output_mapping: {out: built}
    params: {DEBUG: true}
    vars: {x: 1}
    container_limits: {cpu: 512, memory: 1GB}
    attempts: 3
    timeout: 1h30m
    tags: [linux]
    config:
      platform: linux
      inputs: [{name: source}]
      outputs: [{name: out}]
      run: {path: make, args: [test]}
    on_success:
      try:
        load_var: version
        file: built/version
        format: trim
        reveal: true
    ensure:
      do:
      - put: repo
        inputs: [built]
        get_params: {depth: 1}
        params: {repository: built}
- name: deploy-prod
  serial: true
  plan:
  - get: repo
    passed: [unit]
  - set_pipeline: child
    file: repo/ci/child.yml
    team: other
    vars: {env: prod}
    var_files: [repo/ci/vars.yml]
    instance_vars: {branch: main}
display:
  background_image: https://example.com/bg.png
  background_filter: opacity(30%)
"#;

#[test]
fn every_field_is_read() {
    let c = ok(FULL).config;
    assert_eq!(
        c.groups,
        vec![Group {
            name: "main".into(),
            jobs: vec!["unit".into(), "deploy-*".into()],
            resources: vec!["repo".into()],
        }]
    );
    assert_eq!(c.var_sources[0].source_type, "dummy");
    let repo = &c.resources[0];
    assert_eq!(repo.old_name.as_deref(), Some("code"));
    assert!(repo.public);
    assert_eq!(repo.webhook_token.as_deref(), Some("((token))"));
    assert_eq!(
        repo.check_every,
        Some(CheckEvery::Interval(GoDuration {
            text: "10m".into(),
            duration: Duration::from_secs(600)
        }))
    );
    assert_eq!(
        repo.check_timeout.as_ref().unwrap().duration,
        Duration::from_secs(3600)
    );
    assert_eq!(repo.version.as_ref().unwrap()["ref"], "abc123");
    assert_eq!(repo.icon.as_deref(), Some("git"));
    assert_eq!(c.resources[1].check_every, Some(CheckEvery::Never));
    let slack = &c.resource_types[0];
    assert_eq!(slack.params.as_ref().unwrap()["format"], "rootfs");
    assert_eq!(slack.defaults.as_ref().unwrap()["url"], "((slack_url))");
    // Concourse's `privileged` on a resource type reaches the build's type.
    assert!(slack.privileged);
    assert!(slack.to_build_type().privileged);

    let unit = &c.jobs[0];
    assert_eq!(unit.old_name.as_deref(), Some("test"));
    assert_eq!(unit.max_in_flight(), 1);
    assert_eq!(
        unit.build_log_retention,
        Some(BuildLogRetention {
            builds: 10,
            minimum_succeeded_builds: 1,
            days: 2
        })
    );
    assert!(unit.disable_manual_trigger && unit.interruptible && unit.public);
    let Action::Put(notify) = &unit.on_failure.as_ref().unwrap().action else {
        panic!("on_failure is not a put");
    };
    assert_eq!(notify.resource_name(), "repo");
    assert!(notify.no_get);

    let Action::InParallel(p) = &unit.plan[0].action else {
        panic!("not in_parallel");
    };
    assert_eq!((p.limit, p.fail_fast, p.steps.len()), (Some(2), true, 2));
    let Action::Get(g) = &p.steps[0].action else {
        panic!()
    };
    assert_eq!(g.version, Some(GetVersion::Every));

    let task_step = &unit.plan[1];
    assert_eq!(task_step.attempts, Some(3));
    assert_eq!(
        task_step.timeout.as_ref().unwrap().duration,
        Duration::from_secs(5400)
    );
    assert_eq!(task_step.tags, ["linux"]);
    let Action::Task(t) = &task_step.action else {
        panic!()
    };
    assert_eq!(t.image.as_deref(), Some("image"));
    // Concourse's `privileged` is a field of the task step.
    assert!(t.privileged);
    assert_eq!(t.input_mapping["source"], "repo");
    assert_eq!(t.output_mapping["out"], "built");
    let limits = t.container_limits.as_ref().unwrap();
    assert_eq!(
        (limits.cpu, limits.memory.map(|m| m.0)),
        (Some(512), Some(1 << 30))
    );
    assert_eq!(
        t.parse_config().unwrap().unwrap().run.args,
        vec!["test".to_string()]
    );
    let Action::Try(inner) = &task_step.on_success.as_ref().unwrap().action else {
        panic!()
    };
    assert_eq!(
        inner.action,
        Action::LoadVar(LoadVarStep {
            name: "version".into(),
            file: "built/version".into(),
            format: Some(LoadVarFormat::Trim),
            reveal: true,
        })
    );
    let Action::Do(ensure) = &task_step.ensure.as_ref().unwrap().action else {
        panic!()
    };
    let Action::Put(put) = &ensure[0].action else {
        panic!()
    };
    assert_eq!(put.inputs, Some(PutInputs::Names(vec!["built".into()])));

    let deploy = &c.jobs[1];
    assert!(deploy.serial);
    assert_eq!(
        deploy.plan[1].action,
        Action::SetPipeline(SetPipelineStep {
            name: "child".into(),
            file: "repo/ci/child.yml".into(),
            team: Some("other".into()),
            vars: Some(
                serde_json::json!({"env": "prod"})
                    .as_object()
                    .unwrap()
                    .clone()
            ),
            var_files: vec!["repo/ci/vars.yml".into()],
            instance_vars: Some(
                serde_json::json!({"branch": "main"})
                    .as_object()
                    .unwrap()
                    .clone()
            ),
        })
    );
    assert_eq!(
        c.display,
        Some(Display {
            background_image: Some("https://example.com/bg.png".into()),
            background_filter: Some("opacity(30%)".into()),
        })
    );
}

#[test]
fn the_config_round_trips_through_json() {
    let c = ok(FULL).config;
    let json = serde_json::to_value(&c).unwrap();
    let back: PipelineConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, c);
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    // The top level keeps Concourse's order of sections.
    let small = ok(r#"
display: {background_image: bg.png}
jobs: [{name: j, plan: [{get: r}]}]
resource_types: [{name: t, type: registry-image, source: {}}]
resources: [{name: r, type: t}]
var_sources: [{name: v, type: dummy, config: {}}]
groups: [{name: g, jobs: [j]}]
"#)
    .config;
    assert_eq!(
        serde_json::to_string(&small).unwrap(),
        r#"{"groups":[{"name":"g","jobs":["j"]}],"var_sources":[{"name":"v","type":"dummy","config":{}}],"resources":[{"name":"r","type":"t","source":{}}],"resource_types":[{"name":"t","type":"registry-image","source":{}}],"jobs":[{"name":"j","plan":[{"get":"r"}]}],"display":{"background_image":"bg.png"}}"#
    );
}

#[test]
fn steps_are_written_as_concourse_writes_them() {
    let c = ok(&with_steps(
        "  - in_parallel:\n    - task: t\n      file: r/t.yml\n      attempts: 2\n      timeout: 90s\n",
    ))
    .config;
    assert_eq!(
        serde_json::to_value(&c.jobs[0]).unwrap(),
        serde_json::json!({
            "name": "j",
            "plan": [
                {"get": "r"},
                {"in_parallel": {"steps": [
                    {"attempts": 2, "file": "r/t.yml", "task": "t", "timeout": "90s"}
                ]}}
            ]
        })
    );
    // A resource keeps its source and type even when empty.
    assert_eq!(
        serde_json::to_value(&c.resources[0]).unwrap(),
        serde_json::json!({"name": "r", "type": "git", "source": {"uri": "u"}})
    );
}

#[test]
fn a_stored_config_that_breaks_the_rules_is_not_read_back() {
    let err = serde_json::from_value::<PipelineConfig>(serde_json::json!({"jobs": []}))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid pipeline config:\n  jobs: pipeline must contain at least one job"
    );
}

#[test]
fn a_job_lists_its_steps_inputs_and_outputs() {
    let c = ok(FULL).config;
    let unit = c.job("unit").unwrap();
    let paths: Vec<String> = unit.steps().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "jobs.unit.plan.do[0]",
            "jobs.unit.plan.do[0].in_parallel.steps[0]",
            "jobs.unit.plan.do[0].in_parallel.steps[1]",
            "jobs.unit.plan.do[1]",
            "jobs.unit.plan.do[1].on_success",
            "jobs.unit.plan.do[1].on_success.try",
            "jobs.unit.plan.do[1].ensure",
            "jobs.unit.plan.do[1].ensure.do[0]",
            "jobs.unit.plan.on_failure",
        ]
    );
    let inputs: Vec<&str> = unit.inputs().iter().map(|g| g.name.as_str()).collect();
    assert_eq!(inputs, ["repo", "image"]);
    let outputs: Vec<(&str, &str)> = unit
        .outputs()
        .iter()
        .map(|p| (p.name.as_str(), p.resource_name()))
        .collect();
    assert_eq!(outputs, [("repo", "repo"), ("notify", "repo")]);
    assert_eq!(c.resource("image").unwrap().resource_type, "registry-image");
    assert_eq!(c.resource_type("slack").unwrap().tags, ["linux"]);
    assert_eq!(c.build_resource_types()[0].name, "slack");
    assert!(c.job("nope").is_none());
}

mod across;
mod diff;
mod globs;
mod hostile;
mod rules;
