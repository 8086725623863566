//! Instanced pipelines end to end: a real web and worker, one config set as
//! two instances with `set-pipeline -i`, each driven with fly's references
//! (`-p NAME/KEY:VALUE`, `-j NAME/KEY:VALUE/JOB`), and a `set_pipeline`
//! step with `instance_vars` setting an instance from a build.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, json_of, text, Cluster};
use serde_json::{json, Value};

const BRANCHES: &str = r#"
resources:
- name: src
  type: mock
  source: {tag: ((branch))}
jobs:
- name: build
  plan:
  - task: say
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo building ((branch)) at ((shard))"]}
- name: publish
  plan:
  - get: src
"#;

const PARENT: &str = r#"
jobs:
- name: spawn
  plan:
  - task: write
    config:
      platform: linux
      outputs: [{name: out}]
      run:
        path: sh
        args:
        - -c
        - |
          V='(('
          printf 'jobs:\n- name: hello\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [hello %swho))]}}\n' "$V" > out/child.yml
          printf '[{"name": "main"}, {"name": "v2"}]' > out/branches.json
  - set_pipeline: kids
    file: out/child.yml
    instance_vars: {who: ann}
  # Concourse's multi-branch pattern: one instance per value.
  - across:
    - var: who
      values: [bob, cy]
    set_pipeline: kids
    file: out/child.yml
    instance_vars: {who: ((.:who))}
  # Values known only when the build runs: one instance per branch a file
  # of the build lists.
  - load_var: branches
    file: out/branches.json
  - across:
    - var: branch
      values: ((.:branches))
      max_in_flight: all
    set_pipeline: kids
    file: out/child.yml
    instance_vars: {who: ((.:branch.name))}
- name: bad
  plan:
  - task: write
    config:
      platform: linux
      outputs: [{name: out}]
      run: {path: sh, args: [-c, 'echo 12 > out/bad.json']}
  - load_var: bad
    file: out/bad.json
  - across:
    - var: b
      values: ((.:bad))
    task: never
    config: {platform: linux, run: {path: echo, args: [((.:b))]}}
"#;

fn references(c: &Cluster) -> Vec<String> {
    let listed = json_of(c, &["pipelines", "--json"]);
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| match p["instance_vars"].as_object() {
            Some(vars) => format!(
                "{} {}",
                p["name"].as_str().unwrap(),
                Value::Object(vars.clone())
            ),
            None => p["name"].as_str().unwrap().to_string(),
        })
        .collect()
}

#[test]
fn instances_of_one_config_are_set_run_and_destroyed_by_their_references() {
    let c = Cluster::start();
    let _w = c.worker("worker-i");
    c.wait_until("the worker runs", |ws| has(ws, "worker-i", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("branches.yml"), BRANCHES).unwrap();
    for branch in ["main", "dev"] {
        let set = c.cli_in(
            dir,
            &[
                "set-pipeline",
                "-p",
                "branches",
                "-i",
                &format!("branch={branch}"),
                "-v",
                "shard=7",
                "-c",
                "branches.yml",
                "-n",
            ],
        );
        let (out, err) = text(&set);
        assert!(set.status.success(), "{out}\n{err}");
        // What to run next names the instance.
        assert!(
            out.contains(&format!(
                "hangar unpause-pipeline -p branches/branch:{branch}"
            )),
            "{out}"
        );
    }
    assert_eq!(
        references(&c),
        [
            r#"branches {"branch":"main"}"#,
            r#"branches {"branch":"dev"}"#
        ]
    );
    let table = text(&c.cli(&["pipelines"])).0;
    assert!(table.contains("branches/branch:dev"), "{table}");

    // Each instance's config has its own vars filled in.
    let dev = json_of(&c, &["get-pipeline", "-p", "branches/branch:dev", "--json"]);
    assert_eq!(dev["resources"][0]["source"], json!({"tag": "dev"}));
    let main = json_of(
        &c,
        &["get-pipeline", "-p", "branches/branch:main", "--json"],
    );
    assert_eq!(main["resources"][0]["source"], json!({"tag": "main"}));
    // The plain name is no pipeline of its own.
    let plain = c.cli(&["get-pipeline", "-p", "branches"]);
    assert!(!plain.status.success(), "{:?}", text(&plain));

    // Setting the same instance again is the same pipeline, unchanged.
    let again = c.cli_in(
        dir,
        &[
            "set-pipeline",
            "-p",
            "branches/branch:dev",
            "-v",
            "shard=7",
            "-c",
            "branches.yml",
            "-n",
        ],
    );
    assert!(again.status.success(), "{:?}", text(&again));
    assert!(
        text(&again).0.contains("no changes to apply"),
        "{:?}",
        text(&again)
    );

    // One instance runs; the other stays paused.
    let unpause = c.cli(&["unpause-pipeline", "-p", "branches/branch:dev"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));
    let run = c.cli(&["trigger-job", "-j", "branches/branch:dev/build", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("building dev at 7"), "{out}");
    let paused = c.cli(&["trigger-job", "-j", "branches/branch:main/build"]);
    let (out, err) = text(&paused);
    assert!(!paused.status.success(), "{out}");
    assert!(
        err.contains("pipeline branches/branch:main is paused"),
        "{err}"
    );
    let builds = json_of(&c, &["builds", "-j", "branches/branch:dev/build", "--json"]);
    assert_eq!(builds.as_array().unwrap().len(), 1, "{builds}");
    assert_eq!(builds[0]["name"], "branches/branch:dev/build #1");
    let none = json_of(
        &c,
        &["builds", "-j", "branches/branch:main/build", "--json"],
    );
    assert_eq!(none, json!([]));
    let jobs = json_of(&c, &["jobs", "-p", "branches/branch:main", "--json"]);
    assert_eq!(jobs[0]["name"], "build");
    let resources = json_of(&c, &["resources", "-p", "branches/branch:dev", "--json"]);
    assert_eq!(resources[0]["name"], "src");

    // Malformed references are refused before anything is sent, and
    // nothing changes.
    for (args, why) in [
        (
            &["destroy-pipeline", "-p", "branches/branch", "-n"][..],
            "has no ':'",
        ),
        (
            &["destroy-pipeline", "-p", "branches/", "-n"][..],
            "no instance vars",
        ),
        // Read as fly reads it: job `branch:dev` of the plain pipeline.
        (
            &["trigger-job", "-j", "branches/branch:dev"][..],
            "pipeline main/branches not found",
        ),
        (&["pause-pipeline", "-p", "../x/branch:dev"][..], ""),
    ] {
        let o = c.cli(args);
        assert!(!o.status.success(), "{args:?}: {:?}", text(&o));
        assert!(text(&o).1.contains(why), "{args:?}: {:?}", text(&o));
    }
    let bad_flag = c.cli_in(
        dir,
        &[
            "set-pipeline",
            "-p",
            "branches",
            "-i",
            "a,b=1",
            "-c",
            "branches.yml",
            "-n",
        ],
    );
    assert!(!bad_flag.status.success());
    assert!(
        text(&bad_flag).1.contains("not allowed in a key"),
        "{:?}",
        text(&bad_flag)
    );
    let unknown = c.cli(&["destroy-pipeline", "-p", "branches/branch:nope", "-n"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).1.contains("branches/branch:nope not found"),
        "{:?}",
        text(&unknown)
    );
    assert_eq!(references(&c).len(), 2);

    // Destroying one instance leaves the other.
    let gone = c.cli(&["destroy-pipeline", "-p", "branches/branch:dev", "-n"]);
    assert!(gone.status.success(), "{:?}", text(&gone));
    assert_eq!(references(&c), [r#"branches {"branch":"main"}"#]);
}

#[test]
fn a_set_pipeline_step_sets_an_instance_with_its_vars_filled_in() {
    let c = Cluster::start();
    let _w = c.worker("worker-s");
    c.wait_until("the worker runs", |ws| has(ws, "worker-s", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("parent.yml"), PARENT).unwrap();
    let set = c.cli_in(
        dir,
        &["set-pipeline", "-p", "parent", "-c", "parent.yml", "-n"],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    assert!(c
        .cli(&["unpause-pipeline", "-p", "parent"])
        .status
        .success());
    let run = c.cli(&["trigger-job", "-j", "parent/spawn", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("setting pipeline: main/kids/who:ann"), "{out}");

    // The instance exists, unpaused as a step's pipeline is, and its
    // instance var filled the config.
    // The last two were set in parallel, in either order.
    let mut set = references(&c);
    set.sort();
    assert_eq!(
        set,
        [
            r#"kids {"who":"ann"}"#,
            r#"kids {"who":"bob"}"#,
            r#"kids {"who":"cy"}"#,
            r#"kids {"who":"main"}"#,
            r#"kids {"who":"v2"}"#,
            "parent"
        ]
    );
    let cy = json_of(&c, &["get-pipeline", "-p", "kids/who:cy", "--json"]);
    assert_eq!(
        cy["jobs"][0]["plan"][0]["config"]["run"]["args"],
        json!(["hello cy"])
    );
    let kids = json_of(&c, &["get-pipeline", "-p", "kids/who:ann", "--json"]);
    assert_eq!(
        kids["jobs"][0]["plan"][0]["config"]["run"]["args"],
        json!(["hello ann"])
    );
    let run = c.cli(&["trigger-job", "-j", "kids/who:ann/hello", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("hello ann"), "{out}");

    // Values that turn out to be no list fail the step, saying so, and run
    // nothing.
    let bad = c.cli(&["trigger-job", "-j", "parent/bad", "-w"]);
    let (out, err) = text(&bad);
    assert!(!bad.status.success(), "{out}\n{err}");
    assert!(
        err.contains("across var b: its values (\"((.:bad))\") are number, not a list"),
        "{out}\n{err}"
    );
}
