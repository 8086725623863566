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
- name: vault
  type: vault
  config: {url: "https://vault", path_prefix: /concourse}
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
    privileged: false
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
    assert_eq!(c.var_sources[0].source_type, "vault");
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
fn broken_configs_are_refused_with_every_problem_named() {
    let cases: &[(&str, &[&str])] = &[
        (
            "jobs: []",
            &["jobs: pipeline must contain at least one job"],
        ),
        (
            "- a list",
            &["expected a pipeline config (a mapping), got a list"],
        ),
        (
            &with_steps("  - get: nope\n"),
            &["jobs.j.plan.do[1].get(nope): unknown resource 'nope'"],
        ),
        (
            &with_steps("  - put: r\n  - put: out\n    resource: missing\n"),
            &["jobs.j.plan.do[2].put(out): unknown resource 'missing'"],
        ),
        (
            &with_steps("  - get: r\n"),
            &["jobs.j.plan.do[1].get(r): repeated name"],
        ),
        (
            &with_steps("  - get: other\n    resource: r\n    passed: [nobody, j]\n"),
            &[
                "jobs.j.plan.do[1].get(other).passed: no matching job(s) for 'nobody'",
                "jobs: pipeline contains a cycle that starts at Job 'j'",
            ],
        ),
        (
            &with_steps("  - task: t\n"),
            &["jobs.j.plan.do[1].task(t): must specify either `file:` or `config:`"],
        ),
        (
            &with_steps(
                "  - task: t\n    file: r/t.yml\n    config: {platform: linux, run: {path: x}}\n",
            ),
            &["jobs.j.plan.do[1].task(t): must specify one of `file:` or `config:`, not both"],
        ),
        (
            &with_steps("  - task: t\n    config: {platform: linux, run: {}}\n"),
            &["jobs.j.plan.do[1].task(t).config.run.path: missing field"],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    privileged: true\n"),
            &["jobs.j.plan.do[1].task(t).privileged: not supported: hangar runs task containers unprivileged only"],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    hermetic: true\n"),
            &["jobs.j.plan.do[1].task(t).hermetic: not supported: hangar cannot cut a task off the network yet (Concourse does so on containerd workers only, and warns otherwise)"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    put: r\n"),
            &["jobs.j.plan.do[1]: a step has one of get, put, task, set_pipeline, load_var, in_parallel, do, try; this one has put, get. Concourse would read it as a put step with unknown fields [\"get\"]"],
        ),
        (
            &with_steps("  - attempts: 2\n"),
            &["jobs.j.plan.do[1]: no core step type declared (e.g. get, put, task, etc.)"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    bogus: 1\n    also: 2\n"),
            &["jobs.j.plan.do[1]: unknown fields [\"also\" \"bogus\"]"],
        ),
        (
            &with_steps("  - load_var: v\n    file: r/v\n    tags: [x]\n"),
            &["jobs.j.plan.do[1]: unknown fields [\"tags\"]"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    attempts: 0\n    timeout: 5 minutes\n"),
            &[
                "jobs.j.plan.do[1].attempts: must be greater than 0",
                "jobs.j.plan.do[1].timeout: invalid duration '5 minutes'",
            ],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    timeout: ((t))\n"),
            &["jobs.j.plan.do[1].timeout: invalid duration '((t))'"],
        ),
        (
            &with_steps("  - across: [{var: x, values: [1]}]\n    get: r\n"),
            &["jobs.j.plan.do[1].across: the across modifier is not supported by hangar yet; list the steps instead"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    version: newest\n"),
            &["jobs.j.plan.do[1].get(r2).version: 'newest' is none of latest, every or a version (a mapping); Concourse would take it as latest"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    version: {ref: 1}\n"),
            &["jobs.j.plan.do[1].get(r2).version.ref: the value of a version is a string, got a number"],
        ),
        (
            &with_steps("  - put: r\n    inputs: some\n"),
            &["jobs.j.plan.do[1].put(r).inputs: expected all, detect or a list of artifact names, got 'some'"],
        ),
        (
            &with_steps("  - put: r\n    inputs: [r, nowhere]\n"),
            &["jobs.j.plan.do[1].put(r).inputs: no step of the job produces the artifact 'nowhere' (Concourse would fail the build when the step runs)"],
        ),
        (
            &with_steps("  - task: t\n    image: missing\n    config: {platform: linux, inputs: [{name: src}], run: {path: x}}\n"),
            &[
                "jobs.j.plan.do[1].task(t).image: no step of the job produces the artifact 'missing' (Concourse would fail the build when the step runs)",
                "jobs.j.plan.do[1].task(t).config.inputs: no step of the job produces the artifact 'src' (Concourse would fail the build when the step runs)",
            ],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    output_mapping: {out: ../up}\n  - put: r\n    inputs: [\"..\"]\n"),
            &[
                "jobs.j.plan.do[1].task(t).output_mapping: '../up' is not a valid artifact name: illegal character '/': names are used as path segments (Concourse only warns)",
                "jobs.j.plan.do[2].put(r).inputs: '..' is not a valid artifact name: '.' and '..' are refused: names are used as path segments (Concourse only warns)",
            ],
        ),
        (
            &with_steps("  - load_var: v\n    file: elsewhere/v\n    format: toml\n"),
            &["jobs.j.plan.do[1].load_var(v).format: 'toml' is not one of json, yaml, yml, trim, raw"],
        ),
        (
            &with_steps("  - load_var: v\n    file: r/v\n  - load_var: v\n"),
            &[
                "jobs.j.plan.do[2].load_var(v): repeated var name",
                "jobs.j.plan.do[2].load_var(v): no file specified",
            ],
        ),
        (
            &with_steps("  - set_pipeline: p\n    file: pipeline.yml\n"),
            &["jobs.j.plan.do[1].set_pipeline(p).file: 'pipeline.yml' is not a file of an artifact (artifact/path/to/file)"],
        ),
        (
            &with_steps("  - in_parallel: 3\n"),
            &["jobs.j.plan.do[1].in_parallel: expected a list of steps or a mapping (steps, limit, fail_fast), got a number"],
        ),
        (
            &with_steps("  - do:\n    - try:\n        get: x\n"),
            &["jobs.j.plan.do[1].do[0].try.get(x): unknown resource 'x'"],
        ),
        (
            &with_steps("  - try: {bogus: 1}\n    ensure: {get: r, trigger: maybe}\n"),
            &[
                "jobs.j.plan.do[1].try: no core step type declared (e.g. get, put, task, etc.)",
                "jobs.j.plan.do[1].ensure.get(r).trigger: expected true or false, got a string",
            ],
        ),
        (
            &with_steps("    on_failure: {put: nope}\n"),
            &["jobs.j.plan.do[0].on_failure.put(nope): unknown resource 'nope'"],
        ),
        (
            "resources: [{name: r, type: git, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n  ensure: {put: x}\n",
            &["jobs.j.plan.ensure.put(x): unknown resource 'x'"],
        ),
        (
            "resources: [{name: r, type: git}, {name: r, type: git}, {name: u, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.u: has no type",
                "resources.u.source: unknown field \"source\"",
            ][..1],
        ),
        (
            "resources: [{name: r, type: git}, {name: r, type: git}, {name: u, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources: resources[0] and resources[1] have the same name ('r')",
                "resources.u: resource 'u' is not used",
            ],
        ),
        (
            "resources: [{name: r, type: git, check_every: often, bogus: 1}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.r: unknown field \"bogus\"",
                "resources.r.check_every: \"often\" is not a duration (a number with a unit ns, us, ms, s, m or h, such as \"24h\" or \"1h30m\")",
            ],
        ),
        (
            "resource_types: [{name: a, type: b, source: {}}, {name: b, type: a, source: {}}]\nresources: [{name: r, type: a}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.r.type: resource type \"a\": its types form a cycle (a -> b -> a)",
                "resource_types.a: resource type \"a\": its types form a cycle (a -> b -> a)",
                "resource_types.b: resource type \"b\": its types form a cycle (b -> a -> b)",
            ],
        ),
        (
            "resource_types: [{name: Slack, type: registry-image, source: {}, privileged: true}]\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resource_types.Slack.privileged: not supported: hangar runs resource type containers unprivileged only",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n- name: j\n  plan: [{get: r}]\n- name: empty\n",
            &[
                "jobs: jobs[0] and jobs[1] have the same name ('j')",
                "jobs.empty.plan: a job needs at least one step (Concourse would run builds that do nothing)",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: -1\n  build_log_retention: {builds: 2, minimum_succeeded_builds: 3, days: -2}\n  plan: [{get: r}]\n",
            &[
                "jobs.j: has negative build_logs_to_retain: -1",
                "jobs.j: has negative build_log_retention.days: -2",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_log_retention: {builds: 2, minimum_succeeded_builds: 3}\n  plan: [{get: r}]\n",
            &["jobs.j: has build_log_retention.minimum_succeeded_builds: 3 greater than build_log_retention.builds: 2"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: 5\n  build_log_retention: {builds: 2}\n  plan: [{get: r}]\n",
            &["jobs.j: can't use both build_log_retention and build_logs_to_retain"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  max_in_flight: many\n  plan: [{get: r}]\n",
            &["jobs.j.max_in_flight: expected a whole number, got a string"],
        ),
        (
            "resources: [{name: r, type: git}]\ngroups:\n- {name: g, jobs: [nope, \"x*\", \"[\"], resources: [missing]}\n- {name: g}\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "groups.g: no jobs match 'nope' for group 'g'",
                "groups.g: no jobs match 'x*' for group 'g'",
                "groups.g: invalid glob expression '[' for group 'g': an unclosed '['",
                "groups.g: group 'g' has unknown resource 'missing'",
                "groups: group 'g' appears 2 times. Duplicate names are not allowed.",
                "groups: job 'j' belongs to no group",
            ],
        ),
        (
            "var_sources: [{name: v, type: conjur, config: {}}, {name: v, type: vault, config: 3}]\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "var_sources: var_sources[0] and var_sources[1] have the same name ('v')",
                "var_sources.v: unknown credential manager type: conjur (a pipeline takes vault, dummy, ssm, secretsmanager, idtoken)",
                "var_sources.v.config: expected the credential manager's config (a mapping), got a number",
            ],
        ),
        (
            "display: {background_image: \"ftp://example.com/x.png\"}\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["display: background_image scheme must be either http, https or relative"],
        ),
        (
            "prototypes: []\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["prototypes: not supported: prototypes are experimental in Concourse and hangar has none"],
        ),
        (
            "resources: {r: {type: git}}\njobs: [{name: j, plan: {get: r}}]\n",
            &[
                "resources: expected a list, got a mapping",
                "jobs.j.plan.do: expected a list of steps, got a mapping",
            ],
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(errors(yaml), *expected, "{yaml}");
    }
}

#[test]
fn passed_must_name_jobs_that_use_the_resource() {
    let yaml = r#"
resources: [{name: r, type: git}, {name: s, type: git}]
jobs:
- name: a
  plan: [{get: s}]
- name: b
  plan: [{get: r, passed: [a]}]
- name: c
  plan: [{get: r, passed: ["[ab]"]}]
"#;
    assert_eq!(
        errors(yaml),
        [
            "jobs.b.plan.do[0].get(r).passed: job 'a' does not interact with resource 'r'",
            "jobs.c.plan.do[0].get(r).passed: job 'a' does not interact with resource 'r'",
        ]
    );
}

#[test]
fn a_cycle_of_passed_is_refused_and_a_chain_is_not() {
    let chain = r#"
resources: [{name: r, type: git}]
jobs:
- {name: a, plan: [{get: r}]}
- {name: b, plan: [{get: r, passed: [a]}]}
- {name: c, plan: [{get: r, passed: [a, b]}]}
"#;
    ok(chain);
    let cycle = r#"
resources: [{name: r, type: git}]
jobs:
- {name: a, plan: [{get: r, passed: [c]}]}
- {name: b, plan: [{get: r, passed: [a]}]}
- {name: c, plan: [{get: r, passed: [b]}]}
"#;
    assert_eq!(
        errors(cycle),
        ["jobs: pipeline contains a cycle that starts at Job 'a'"]
    );
}

#[test]
fn warnings_are_concourses() {
    let cases: &[(&str, &[&str])] = &[
        (
            "resources: [{name: My-Repo, type: git}]\njobs:\n- name: \"123\"\n  plan: [{get: My-Repo}]\n",
            &[
                "resources.My-Repo: 'My-Repo' is not a valid identifier: must start with a lowercase letter or a number",
                "jobs.123: '123' is not a valid identifier: cannot be just numbers",
                "jobs.123.plan.do[0].get(My-Repo): 'My-Repo' is not a valid identifier: must start with a lowercase letter or a number",
            ],
        ),
        (
            &with_steps("  - task: \"run tests\"\n    file: r/t.yml\n"),
            &["jobs.j.plan.do[1].task(run tests): 'run tests' is not a valid identifier: illegal character ' '"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: 3\n  plan: [{get: r}]\n",
            &["jobs.j.build_logs_to_retain is deprecated. Use build_log_retention instead."],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  serial: true\n  max_in_flight: 3\n  plan: [{get: r}]\n",
            &["jobs.j: max_in_flight is ignored: serial runs one build of the job at a time"],
        ),
        (
            &with_steps("  - task: t\n    image: r\n    config:\n      platform: linux\n      image_resource: {type: registry-image, source: {repository: busybox}}\n      run: {path: x}\n"),
            &["jobs.j.plan.do[1].task(t): specifies image: on the step but also specifies an image under config: - the image: on the step takes precedence"],
        ),
        ("résumé: {}\nresources: [{name: r, type: git}]\njobs: [{name: ünïcode, plan: [{get: r}]}]\n", &[]),
    ];
    for (yaml, expected) in cases {
        assert_eq!(warnings(yaml), *expected, "{yaml}");
    }
    let v = ok(&with_steps("  - task: \"Up\"\n    file: r/t.yml\n"));
    assert_eq!(v.warnings[0].kind, "invalid_identifier");
}

#[test]
fn hostile_names_are_refused() {
    let long = "a".repeat(MAX_NAME_LEN + 1);
    let cases: &[(&str, &str)] = &[
        ("a/b", "'a/b' is not a valid identifier: illegal character '/': names are used as path segments (Concourse only warns)"),
        ("a\\\\b", "'a\\\\b' is not a valid identifier: illegal character '\\\\': names are used as path segments (Concourse only warns)"),
        ("..", "'..' is not a valid identifier: '.' and '..' are refused: names are used as path segments (Concourse only warns)"),
        ("nul\\0", "'nul\\0' is not a valid identifier: illegal character '\\0': names are used as path segments (Concourse only warns)"),
        ("tab\\t", "'tab\\t' is not a valid identifier: illegal character '\\t': names are used as path segments (Concourse only warns)"),
    ];
    for (name, message) in cases {
        let yaml = format!(
            "resources: [{{name: r, type: git}}]\njobs:\n- name: \"{name}\"\n  plan: [{{get: r}}]\n"
        );
        let errs = errors(&yaml);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].ends_with(message), "{errs:?} {message}");
    }
    let yaml = format!(
        "resources: [{{name: r, type: git}}]\njobs:\n- name: {long}\n  plan: [{{get: r}}]\n"
    );
    assert_eq!(
        errors(&yaml),
        [format!(
            "jobs.{}…: '{}…' is not a valid identifier: longer than 128 characters (Concourse has no limit)",
            "a".repeat(64),
            "a".repeat(64)
        )]
    );
    // An empty step name.
    assert_eq!(
        errors(&with_steps("  - task: \"\"\n    file: r/t.yml\n")),
        ["jobs.j.plan.do[1].task(): identifier cannot be an empty string"]
    );
}

#[test]
fn non_string_keys_are_read_as_text_and_complex_keys_refused() {
    assert_eq!(
        errors(&with_steps("  - get: r2\n    resource: r\n    1: x\n")),
        ["jobs.j.plan.do[1]: unknown fields [\"1\"]"]
    );
    let err = errors("? [a]\n: b\n");
    assert_eq!(err.len(), 1);
    assert!(
        err[0].ends_with("a mapping key must be a scalar, not a mapping or a list"),
        "{err:?}"
    );
}

#[test]
fn a_billion_laughs_is_refused() {
    let mut yaml = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    yaml.push_str("jobs: [{name: j, plan: [{get: r, params: {x: *a9}}]}]\n");
    let err = errors(&yaml);
    assert_eq!(err.len(), 1);
    assert!(
        err[0].contains("the document holds more than 100000 values once its aliases are expanded"),
        "{err:?}"
    );
}

#[test]
fn ten_thousand_jobs_are_refused_before_any_check() {
    let mut yaml = String::from("resources: [{name: r, type: git}]\njobs:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("- {{name: j{i}, plan: [{{get: r}}]}}\n"));
    }
    assert_eq!(
        errors(&yaml),
        ["jobs: 10000 entries, more than the limit of 1000 (Concourse has no limit)"]
    );
}

/// The largest pipeline allowed is checked in work linear in its size:
/// names are looked up, only glob patterns scan the jobs.
#[test]
fn the_largest_pipeline_is_checked_in_linear_work() {
    let mut jobs = Vec::new();
    for i in 0..MAX_JOBS {
        let passed = if i == 0 {
            serde_json::json!([])
        } else {
            serde_json::json!([format!("j{}", i - 1)])
        };
        jobs.push(
            serde_json::json!({"name": format!("j{i}"), "plan": [{"get": "r", "passed": passed}]}),
        );
    }
    let mut value = serde_json::json!({
        "resources": [{"name": "r", "type": "git"}],
        "jobs": jobs,
        "groups": [{"name": "all", "jobs": ["*"]}],
    });
    let read = read::read_config(&value);
    assert!(read.errors.is_empty());
    let (mut errors, mut warnings) = (vec![], vec![]);
    let mut v = validate::Validator::new(&read.config, &mut errors, &mut warnings);
    v.run();
    // One pattern, matched against each job once.
    assert_eq!(v.glob_matches, MAX_JOBS);
    assert_eq!(errors, vec![]);

    // Glob patterns in passed are bounded by the work they would take.
    for job in value["jobs"].as_array_mut().unwrap().iter_mut().skip(1) {
        job["plan"][0]["passed"] = serde_json::json!(["j0*", "j0?"]);
    }
    let Err(err) = parse_pipeline_value(&value) else {
        panic!("accepted 1999 glob patterns");
    };
    assert_eq!(
        err.errors[0].message,
        "1999 glob patterns in passed and groups, each matched against 1000 jobs, is more than 1000000 matches; name the jobs instead"
    );
}

#[test]
fn deep_nesting_is_refused() {
    let mut step = serde_json::json!({"get": "r"});
    for _ in 0..MAX_STEP_DEPTH {
        step = serde_json::json!({"do": [step]});
    }
    let value = serde_json::json!({
        "resources": [{"name": "r", "type": "git"}],
        "jobs": [{"name": "j", "plan": [step]}],
    });
    let err = parse_pipeline_value(&value).unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert_eq!(
        err.errors[0].message,
        "steps are nested deeper than 16 levels"
    );
    assert!(err.errors[0]
        .path
        .starts_with("jobs.j.plan.do[0].do[0].do[0]"));
}

#[test]
fn too_many_steps_are_refused_once() {
    let steps: Vec<Value> = (0..MAX_STEPS + 5)
        .map(|i| serde_json::json!({"get": format!("g{i}"), "resource": "r"}))
        .collect();
    let value = serde_json::json!({
        "resources": [{"name": "r", "type": "git"}],
        "jobs": [{"name": "j", "plan": [{"in_parallel": steps}]}],
    });
    let err = parse_pipeline_value(&value).unwrap_err();
    assert_eq!(
        err.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["jobs.j.plan.do[0].in_parallel.steps[19999]: the pipeline holds more than 20000 steps, hooks included"]
    );
}

#[test]
fn an_oversized_config_is_refused_before_parsing() {
    let yaml = " ".repeat(MAX_CONFIG_BYTES + 1);
    assert_eq!(
        errors(&yaml),
        ["the config is 4194305 bytes, more than the limit of 4194304"]
    );
}

#[test]
fn unknown_top_level_keys_hold_anchors_and_are_dropped() {
    let yaml = r#"
shared: &get-repo {get: r, trigger: true}
resources: [{name: r, type: git}]
jobs:
- name: j
  plan: [*get-repo]
"#;
    let c = ok(yaml).config;
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json.get("shared"), None);
    assert_eq!(
        json["jobs"][0]["plan"][0],
        serde_json::json!({"get": "r", "trigger": true})
    );
}

#[test]
fn globs_match_as_concourse_patterns_do() {
    let cases: &[(&str, &str, bool)] = &[
        ("*", "anything", true),
        ("deploy-*", "deploy-prod", true),
        ("deploy-*", "deploy-", true),
        ("deploy-*", "test", false),
        ("*-prod", "deploy-prod", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "aXbY", false),
        ("?", "a", true),
        ("?", "ab", false),
        ("[ab]x", "bx", true),
        ("[^ab]x", "bx", false),
        ("[!ab]x", "cx", true),
        ("[a-c]", "b", true),
        ("[a-c]", "d", false),
        ("a\\*", "a*", true),
        ("a\\*", "ab", false),
    ];
    for (pattern, name, matches) in cases {
        let g = glob::Glob::compile(pattern).unwrap();
        assert_eq!(g.matches(name), *matches, "{pattern} {name}");
    }
    let braces: &[(&str, &str, bool)] = &[
        ("{unit,deploy}-*", "unit-a", true),
        ("{unit,deploy}-*", "deploy-b", true),
        ("{unit,deploy}-*", "lint-c", false),
        ("a{b,{c,d}}e", "ade", true),
        ("a{,x}", "a", true),
        ("\\{a\\}", "{a}", true),
    ];
    for (pattern, name, matches) in braces {
        let g = glob::Glob::compile_with_braces(pattern).unwrap();
        assert_eq!(g.matches(name), *matches, "{pattern} {name}");
    }
    // In passed, braces are plain characters, as in Go's path.Match.
    assert!(glob::Glob::compile("{a,b}").unwrap().matches("{a,b}"));
    assert_eq!(
        glob::Glob::compile_with_braces("{a,b").unwrap_err(),
        "an unclosed '{'"
    );
    assert_eq!(
        glob::Glob::compile_with_braces("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}").unwrap_err(),
        "its '{…}' alternatives expand to more than 32 patterns"
    );
    assert_eq!(
        glob::Glob::compile("[z-a]").unwrap_err(),
        "the range z-a is backwards"
    );
}

const OLD: &str = r#"
groups:
- {name: a, jobs: [build]}
- {name: b, jobs: [deploy]}
resources:
- {name: repo, type: git, source: {uri: old}}
- {name: gone, type: git}
jobs:
- {name: build, plan: [{get: repo}, {get: gone}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
"#;

const NEW: &str = r#"
groups:
- {name: b, jobs: [deploy]}
- {name: a, jobs: [build]}
resources:
- {name: repo, type: git, source: {uri: new}}
jobs:
- {name: build, plan: [{get: repo}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
display: {background_image: bg.png}
"#;

#[test]
fn the_diff_names_what_changes() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let d = diff(&old, &new);
    let summary: Vec<(Section, &str, Change)> = d
        .items
        .iter()
        .map(|i| (i.section, i.name.as_str(), i.change))
        .collect();
    assert_eq!(
        summary,
        [
            (Section::Groups, "a", Change::Moved),
            (Section::Groups, "b", Change::Moved),
            (Section::Resources, "repo", Change::Changed),
            (Section::Resources, "gone", Change::Removed),
            (Section::Jobs, "build", Change::Changed),
            (Section::Display, "", Change::Added),
        ]
    );
    assert!(diff(&old, &old).is_empty());
    assert_eq!(diff(&old, &old).render(), "");
}

#[test]
fn the_diff_renders_as_plain_text() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let mut d = diff(&old, &new);
    d.items.retain(|i| i.section != Section::Groups);
    assert_eq!(
        d.render(),
        r#"resources:
  resource repo has changed:
    {
      "name": "repo",
      "type": "git",
      "source": {
  -     "uri": "old"
  +     "uri": "new"
      }
    }

  resource gone has been removed:
  - {
  -   "name": "gone",
  -   "type": "git",
  -   "source": {}
  - }

jobs:
  job build has changed:
    {
      "name": "build",
      "plan": [
        {
          "get": "repo"
  -     },
  -     {
  -       "get": "gone"
        }
      ]
    }

  display configuration has been added:
  + {
  +   "background_image": "bg.png"
  + }

"#
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
