//! Teams and users end to end, as fly's users work: a real web started
//! with local users, the CLI logging in to saved targets (`-t`), an admin
//! making two teams, an owner setting a pipeline in theirs, a viewer
//! refused what a viewer may not do, and a logout ending the session at
//! web.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{hangar, text, user_cli as user, Cluster};
use serde_json::Value;

const PASSWORD: &str = "test-password-1";
/// bcrypt (cost 4, so the debug build stays quick) of PASSWORD.
const HASH: &str = "$2y$04$vf818SDRhzZT6GaAJB9ft.2ppVUxvAV1JUlzLzHn2LcNa5b81rIp.";

const CONFIG: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
jobs:
- name: build
  plan:
  - get: repo
";

fn ok(c: &Cluster, rc: &Path, args: &[&str]) -> String {
    let o = user(c, rc, args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}: {out}\n{err}");
    out + &err
}

fn fails(c: &Cluster, rc: &Path, args: &[&str]) -> String {
    let o = user(c, rc, args);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{args:?} succeeded: {out}\n{err}");
    err
}

#[test]
fn two_teams_an_owner_and_a_viewer_log_in_through_the_cli_and_see_only_their_own() {
    let users = ["root", "alice", "vic", "bob"]
        .map(|u| format!("{u}:{HASH}"))
        .join(",");
    let c = Cluster::start_with(&["--add-local-user", &users, "--main-team-local-user", "root"]);
    let rc = c.dir.path().join("hangarrc");
    let rc = rc.as_path();
    let url = c.url.clone();
    // The admin logs in to main, and makes team a (alice owns it, vic
    // views it) from a Concourse roles file, and team b (bob owns it).
    ok(
        &c,
        rc,
        &[
            "-t", "admin", "login", "-c", &url, "-u", "root", "-p", PASSWORD,
        ],
    );
    let mode = std::fs::metadata(rc).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the targets file is its owner's alone");
    let roles = c.dir.path().join("roles.yml");
    std::fs::write(
        &roles,
        "roles:\n- name: owner\n  local: {users: [alice]}\n- name: viewer\n  local: {users: [vic]}\n",
    )
    .unwrap();
    let out = ok(
        &c,
        rc,
        &[
            "-t",
            "admin",
            "set-team",
            "-n",
            "a",
            "-c",
            roles.to_str().unwrap(),
            "--non-interactive",
        ],
    );
    assert!(out.contains("team a created"), "{out}");
    ok(
        &c,
        rc,
        &[
            "-t",
            "admin",
            "set-team",
            "-n",
            "b",
            "--local-user",
            "bob",
            "--non-interactive",
        ],
    );
    // Alice logs in to team a and sets a pipeline there: the target's team
    // is the default for every verb.
    ok(
        &c,
        rc,
        &[
            "-t", "a", "login", "-c", &url, "-n", "a", "-u", "alice", "-p", PASSWORD,
        ],
    );
    let config = c.dir.path().join("p.yml");
    std::fs::write(&config, CONFIG).unwrap();
    ok(
        &c,
        rc,
        &[
            "-t",
            "a",
            "set-pipeline",
            "-p",
            "p",
            "-c",
            config.to_str().unwrap(),
            "--non-interactive",
        ],
    );
    let listed: Value =
        serde_json::from_str(&ok(&c, rc, &["-t", "a", "pipelines", "--json"])).unwrap();
    assert_eq!(listed[0]["team"], "a", "{listed}");
    let info: Value =
        serde_json::from_str(&ok(&c, rc, &["-t", "a", "userinfo", "--json"])).unwrap();
    assert_eq!(info["teams"], serde_json::json!({"a": ["owner"]}));
    // Vic, a viewer of a, reads it and may not pause it; bob, of team b,
    // does not see it at all; nor may alice touch team b.
    ok(
        &c,
        rc,
        &[
            "-t", "v", "login", "-c", &url, "-n", "a", "-u", "vic", "-p", PASSWORD,
        ],
    );
    ok(&c, rc, &["-t", "v", "jobs", "-p", "p"]);
    let err = fails(&c, rc, &["-t", "v", "pause-pipeline", "-p", "p"]);
    assert!(err.contains("pipeline-operator role on team a"), "{err}");
    ok(
        &c,
        rc,
        &[
            "-t", "bob", "login", "-c", &url, "-n", "b", "-u", "bob", "-p", PASSWORD,
        ],
    );
    let err = fails(&c, rc, &["-t", "bob", "jobs", "-p", "p", "--team", "a"]);
    assert!(err.contains("not found"), "{err}");
    let listed = ok(&c, rc, &["-t", "bob", "pipelines", "--team", "a", "--json"]);
    assert_eq!(listed.trim(), "[]");
    let err = fails(
        &c,
        rc,
        &[
            "-t",
            "a",
            "set-pipeline",
            "-p",
            "q",
            "-c",
            config.to_str().unwrap(),
            "--team",
            "b",
            "--non-interactive",
        ],
    );
    assert!(
        err.contains("role on team b; you have no role there"),
        "{err}"
    );
    // A login names a team the user has a role on.
    let err = fails(
        &c,
        rc,
        &[
            "-t", "x", "login", "-c", &url, "-n", "b", "-u", "vic", "-p", PASSWORD,
        ],
    );
    assert!(err.contains("no role on team b"), "{err}");
    let err = fails(
        &c,
        rc,
        &[
            "-t",
            "x",
            "login",
            "-c",
            &url,
            "-u",
            "vic",
            "-p",
            "wrong-password",
        ],
    );
    assert!(err.contains("wrong user name or password"), "{err}");
    // The targets, then a logout ending vic's session at web: a copy of
    // the token taken before is refused too.
    let targets = ok(&c, rc, &["targets"]);
    for name in ["admin", "a", "v", "bob"] {
        assert!(targets.contains(name), "{targets}");
    }
    assert!(!targets.contains(" x "), "{targets}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(rc).unwrap()).unwrap();
    let vic_token = saved["targets"]["v"]["token"]["value"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&c, rc, &["-t", "v", "status"]);
    ok(&c, rc, &["-t", "v", "logout"]);
    fails(&c, rc, &["-t", "v", "status"]);
    let o = hangar()
        .args(["userinfo", "--url", &url, "--token", &vic_token])
        .env_remove("HANGAR_TOKEN")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("invalid or expired"),
        "{err}"
    );
    // The admin destroys team b; bob is left with no team.
    ok(
        &c,
        rc,
        &[
            "-t",
            "admin",
            "destroy-team",
            "-n",
            "b",
            "--non-interactive",
        ],
    );
    let teams = ok(&c, rc, &["-t", "admin", "teams"]);
    assert!(
        teams.contains('a') && !teams.contains(" b\n") && teams.contains("main"),
        "{teams}"
    );
    let info: Value =
        serde_json::from_str(&ok(&c, rc, &["-t", "bob", "userinfo", "--json"])).unwrap();
    assert_eq!(info["teams"], serde_json::json!({}));
}
