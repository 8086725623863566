//! Pipelines end to end through the CLI against a real web process:
//! set-pipeline with vars from -v, -l and -y, get-pipeline's round trip,
//! the listings' JSON, pause, rename and destroy.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::process::Output;

use crate::common::Cluster;
use serde_json::{json, Value};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs the CLI, asserts success and returns its stdout.
fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = c.cli_in(c.dir.path(), args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}: {out}\n{err}");
    out
}

/// Runs the CLI, asserts exit status 1 and returns its stderr.
fn fails(c: &Cluster, args: &[&str]) -> String {
    let o = c.cli_in(c.dir.path(), args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {out}\n{err}");
    err
}

fn json_of(c: &Cluster, args: &[&str]) -> Value {
    let out = ok(c, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"))
}

const PIPELINE: &str = "
resources:
- name: repo
  type: git
  source:
    uri: ((uri))
    branch: ((branch))
    private_key: ((vault:git.key))
- name: timer
  type: mock
  source: {interval: ((interval))}
jobs:
- name: build
  plan:
  - get: repo
    trigger: true
  - get: timer
- name: ship
  plan:
  - get: repo
    passed: [build]
";

#[test]
fn a_pipeline_is_set_read_back_listed_paused_renamed_and_destroyed() {
    let c = Cluster::start();
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    std::fs::write(dir.join("vars.yml"), "branch: main\nuri: from-the-file\n").unwrap();

    // Off a terminal, set-pipeline will not guess: it asks for
    // --non-interactive, and nothing is set.
    let err = fails(&c, &["set-pipeline", "-p", "app", "-c", "pipeline.yml"]);
    assert!(err.contains("pass --non-interactive"), "{err}");
    assert_eq!(json_of(&c, &["pipelines", "--json"]), json!([]));

    let out = ok(
        &c,
        &[
            "set-pipeline",
            "-p",
            "app",
            "-c",
            "pipeline.yml",
            "-l",
            "vars.yml",
            "-v",
            "uri=https://example.com/app.git",
            "-y",
            "interval=30",
            "--non-interactive",
        ],
    );
    assert!(out.contains("job build has been added"), "{out}");
    assert!(out.contains("pipeline created!"), "{out}");
    assert!(out.contains("hangar unpause-pipeline -p app"), "{out}");

    // get-pipeline: -v won over the file, -y kept its type, and the var
    // with a source stayed for a credential manager.
    let config = json_of(&c, &["get-pipeline", "-p", "app", "--json"]);
    assert_eq!(
        config["resources"][0]["source"],
        json!({"uri": "https://example.com/app.git", "branch": "main",
               "private_key": "((vault:git.key))"})
    );
    assert_eq!(config["resources"][1]["source"], json!({"interval": 30}));
    let yaml = ok(&c, &["get-pipeline", "-p", "app"]);
    let back = hangar_core::yaml::from_str(&yaml).unwrap();
    assert_eq!(back, config, "{yaml}");

    // The YAML it printed sets the same pipeline again: no changes.
    std::fs::write(dir.join("back.yml"), &yaml).unwrap();
    let out = ok(&c, &["set-pipeline", "-p", "app", "-c", "back.yml", "-n"]);
    assert_eq!(out, "no changes to apply\n");

    let pipelines = json_of(&c, &["pipelines", "--json"]);
    assert_eq!(pipelines.as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &pipelines[0]["name"],
            &pipelines[0]["paused"],
            &pipelines[0]["config_version"]
        ),
        (&json!("app"), &json!(true), &json!(1))
    );
    let jobs = json_of(&c, &["jobs", "-p", "app", "--json"]);
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["build", "ship"]);
    let resources = json_of(&c, &["resources", "-p", "app", "--json"]);
    assert_eq!(resources[0]["name"], "repo");
    assert_eq!(resources[0]["type"], "git");
    assert_eq!(
        json_of(&c, &["resource-versions", "-r", "app/repo", "--json"]),
        json!([])
    );

    ok(&c, &["unpause-pipeline", "-p", "app"]);
    assert_eq!(json_of(&c, &["pipelines", "--json"])[0]["paused"], false);
    ok(&c, &["pause-pipeline", "-p", "app"]);
    assert_eq!(json_of(&c, &["pipelines", "--json"])[0]["paused"], true);
    ok(&c, &["pause-job", "-j", "app/ship"]);
    assert_eq!(
        json_of(&c, &["jobs", "-p", "app", "--json"])[1]["paused"],
        true
    );
    ok(&c, &["unpause-job", "-j", "app/ship"]);
    assert_eq!(
        json_of(&c, &["jobs", "-p", "app", "--json"])[1]["paused"],
        false
    );

    // A changed config shows its diff and becomes version 2.
    std::fs::write(
        dir.join("smaller.yml"),
        "resources:\n- {name: repo, type: git, source: {uri: x}}\njobs:\n- name: build\n  plan: [{get: repo}]\n",
    )
    .unwrap();
    let out = ok(
        &c,
        &["set-pipeline", "-p", "app", "-c", "smaller.yml", "-n"],
    );
    assert!(out.contains("job ship has been removed"), "{out}");
    assert!(out.contains("configuration updated"), "{out}");
    assert_eq!(
        json_of(&c, &["pipelines", "--json"])[0]["config_version"],
        2
    );

    let id = json_of(&c, &["pipelines", "--json"])[0]["id"].clone();
    ok(&c, &["rename-pipeline", "-o", "app", "-n", "service"]);
    let renamed = json_of(&c, &["pipelines", "--json"]);
    assert_eq!(
        (&renamed[0]["name"], &renamed[0]["id"]),
        (&json!("service"), &id)
    );

    // Errors: exit 1 and a clear message.
    let err = fails(&c, &["get-pipeline", "-p", "app"]);
    assert!(err.contains("pipeline main/app not found"), "{err}");
    let err = fails(&c, &["jobs", "-p", "../x"]);
    assert!(
        err.contains("pipeline ..: '.' and '..' are refused"),
        "{err}"
    );
    let err = fails(&c, &["pause-job", "-j", "no-slash"]);
    assert!(err.contains("is not PIPELINE/NAME"), "{err}");
    let err = fails(&c, &["pipelines", "--team", "other"]);
    assert!(err.contains("team other not found"), "{err}");
    std::fs::write(
        dir.join("bad.yml"),
        "jobs:\n- name: a\n  plan: [{get: nope}]\n",
    )
    .unwrap();
    let err = fails(&c, &["set-pipeline", "-p", "bad", "-c", "bad.yml", "-n"]);
    assert!(err.contains("is not a valid pipeline config"), "{err}");

    let err = fails(&c, &["destroy-pipeline", "-p", "service"]);
    assert!(err.contains("pass --non-interactive"), "{err}");
    assert_eq!(
        json_of(&c, &["pipelines", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let out = ok(
        &c,
        &["destroy-pipeline", "-p", "service", "--non-interactive"],
    );
    assert!(out.contains("`service` deleted"), "{out}");
    assert_eq!(json_of(&c, &["pipelines", "--json"]), json!([]));
}
