//! Resource actions kept apart on one worker, end to end: gets of two
//! unrelated sources on the same worker, with a shell resource type that
//! keeps state as Concourse's git resource does (a clone in `$TMPDIR`,
//! reused when there; `~/.gitconfig` rewritten, `~/.netrc` deleted) and
//! with the built-in `git` type over two repositories made with `git init`,
//! on workers without the sandbox (the sources are local paths; in the
//! sandbox each action is a container of its own).

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::Duration;

use crate::common::{has, Cluster, ADMIN};
use hangar_client::Client;

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// The state a Concourse-style type keeps, and what it does to its user.
const CLONE: &str = r#"request=$(cat)
uri=$(printf '%s' "$request" | sed -n 's/.*"uri":"\([^"]*\)".*/\1/p')
clone="${TMPDIR:-/tmp}/clonecache-repo"
if [ -d "$clone" ]; then
  echo "reusing the clone in $clone" >&2
else
  mkdir -p "$clone"
  cp -R "$uri/." "$clone/"
fi
printf '[user]\n\tname = %s\n' "$uri" > "$HOME/.gitconfig"
rm -f "$HOME/.netrc"
"#;

fn install_clonecache(types: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let actions = [
        (
            "check",
            r#"printf '[{"ref":"%s"}]\n' "$(cat "$clone/ref")""#,
        ),
        (
            "in",
            r#"cp -R "$clone/." "$1/"
printf '{"version":{"ref":"%s"}}\n' "$(cat "$clone/ref")""#,
        ),
    ];
    for (action, tail) in actions {
        let path = types.join("clonecache").join(action);
        write(&path, &format!("#!/bin/sh\nset -eu\n{CLONE}{tail}\n"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs a build of `plan` and returns what `hangar watch` printed.
fn build(c: &Cluster, plan: serde_json::Value) -> String {
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let build = rt
        .block_on(client.create_build(&hangar_api::builds::CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some("iso".into()),
            plan,
            artifacts: Default::default(),
            team: None,
        }))
        .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = (
        String::from_utf8_lossy(&watch.stdout).into_owned(),
        String::from_utf8_lossy(&watch.stderr).into_owned(),
    );
    assert!(watch.status.success(), "{out}\n{err}");
    out
}

/// A get of `source` with `resource_type`, then a task printing `file`.
fn get_and_show(resource_type: &str, source: serde_json::Value, file: &str) -> serde_json::Value {
    serde_json::json!([
        {"get": "repo", "type": resource_type, "source": source},
        {"task": "show", "config": {"platform": "linux", "inputs": [{"name": "repo"}],
            "run": {"path": "cat", "args": [format!("repo/{file}")]}}}
    ])
}

#[test]
fn gets_of_two_sources_on_one_worker_see_nothing_of_each_other_nor_touch_the_worker_s_home() {
    let c = Cluster::start();
    let work = c.work_dir("worker-iso");
    install_clonecache(&work.join("resource-types"));
    // The worker's own HOME and TMPDIR, as its service manager gives them.
    let home = c.dir.path().join("worker-home");
    let tmp = c.dir.path().join("worker-tmp");
    write(
        &home.join(".netrc"),
        "machine example.com login me password secret\n",
    );
    write(&home.join(".gitconfig"), "[user]\n\tname = the operator\n");
    std::fs::create_dir_all(&tmp).unwrap();
    // The actions of a worker without the sandbox (their sources are
    // local paths), each in a dir of its own on the host.
    let _w = c.worker_with_env(
        "worker-iso",
        &work,
        &["--no-process-sandbox"],
        &[("HOME", &home), ("TMPDIR", &tmp)],
    );
    c.wait_until("the worker runs", |ws| has(ws, "worker-iso", "running"));

    let sources = c.dir.path().join("sources");
    for name in ["one", "two"] {
        write(&sources.join(name).join("ref"), &format!("ref-{name}"));
        write(
            &sources.join(name).join("content"),
            &format!("content of {name}\n"),
        );
    }
    for name in ["one", "two", "one"] {
        let uri = sources.join(name).display().to_string();
        let out = build(
            &c,
            get_and_show("clonecache", serde_json::json!({"uri": uri}), "content"),
        );
        assert_eq!(out, format!("content of {name}\n"));
    }

    assert_eq!(
        std::fs::read_to_string(home.join(".netrc")).unwrap(),
        "machine example.com login me password secret\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".gitconfig")).unwrap(),
        "[user]\n\tname = the operator\n"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "the worker's TMPDIR"
    );
    let left: Vec<_> = std::fs::read_dir(work.join("resource-actions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_git_type_fetches_two_unrelated_repositories_on_one_worker_each_its_own() {
    let c = Cluster::start();
    // The repositories are local paths, which the sandbox does not show.
    let _w = c.worker_outside_sandbox("worker-git");
    c.wait_until("the worker runs", |ws| has(ws, "worker-git", "running"));
    let repos = tempfile::tempdir().unwrap();
    for name in ["alpha", "beta"] {
        let repo = repos.path().join(name);
        std::fs::create_dir_all(&repo).unwrap();
        let git = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .args(["-c", "user.email=e2e@hangar", "-c", "user.name=e2e"])
                .args(["-c", "init.defaultBranch=main"])
                .args(args)
                .current_dir(&repo)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        git(&["init", "-q"]);
        write(&repo.join("README"), &format!("the {name} repository\n"));
        git(&["add", "."]);
        git(&["commit", "-qm", name]);
    }
    for name in ["alpha", "beta", "alpha"] {
        let uri = repos.path().join(name).display().to_string();
        let out = build(
            &c,
            get_and_show("git", serde_json::json!({"uri": uri}), "README"),
        );
        assert_eq!(out, format!("the {name} repository\n"));
    }
}
