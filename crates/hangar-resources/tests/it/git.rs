//! The `git` type against real repositories made in temporary directories.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// Runs git in `dir` for the test's own setup, with a fixed identity and no
/// user or system config.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05+02:00")
        .env("GIT_COMMITTER_NAME", "Ada Lovelace")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05+02:00")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// A repository with two commits on `main` and a branch `first` left at the
/// first one.
struct Repo {
    _dir: tempfile::TempDir,
    path: PathBuf,
    first: String,
    second: String,
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("origin");
    std::fs::create_dir(&path).unwrap();
    git(&path, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(path.join("README.md"), "hello\n").unwrap();
    std::fs::create_dir(path.join("src")).unwrap();
    std::fs::write(path.join("src/main.sh"), "echo one\n").unwrap();
    git(&path, &["add", "."]);
    git(
        &path,
        &["commit", "--quiet", "-m", "First commit\n\nWith a body."],
    );
    let first = git(&path, &["rev-parse", "HEAD"]);
    git(&path, &["branch", "first"]);
    std::fs::write(path.join("src/main.sh"), "echo two\n").unwrap();
    std::fs::write(path.join("NEW"), "new\n").unwrap();
    git(&path, &["add", "."]);
    git(&path, &["commit", "--quiet", "-m", "Second commit"]);
    let second = git(&path, &["rev-parse", "HEAD"]);
    Repo {
        _dir: dir,
        path,
        first,
        second,
    }
}

fn call(action: &str, args: &[&Path], request: &Value) -> (i32, String, String) {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_str().unwrap().to_string())
        .collect();
    let stdin = serde_json::to_vec(request).unwrap();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = hangar_resources::run("git", action, &args, &stdin[..], &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn answer(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

#[test]
fn check_returns_the_head_then_every_commit_from_the_given_one() {
    let repo = repo();
    let uri = repo.path.to_str().unwrap();
    let (first, second) = (&repo.first, &repo.second);
    let cases = [
        (json!({"source": {"uri": uri}}), json!([{"ref": second}])),
        (
            json!({"source": {"uri": uri, "branch": "main"}}),
            json!([{"ref": second}]),
        ),
        (
            json!({"source": {"uri": uri, "branch": "first"}}),
            json!([{"ref": first}]),
        ),
        // As git-resource: the given version, then each newer commit.
        (
            json!({"source": {"uri": uri}, "version": {"ref": first}}),
            json!([{"ref": first}, {"ref": second}]),
        ),
        (
            json!({"source": {"uri": uri}, "version": {"ref": second}}),
            json!([{"ref": second}]),
        ),
        // A version the branch no longer holds: the head.
        (
            json!({"source": {"uri": uri}, "version": {"ref": "0123456789abcdef0123456789abcdef01234567"}}),
            json!([{"ref": second}]),
        ),
        (
            json!({"source": {"uri": format!("file://{uri}")}, "version": null}),
            json!([{"ref": second}]),
        ),
    ];
    for (request, expected) in cases {
        let (code, out, err) = call("check", &[], &request);
        assert_eq!(code, 0, "{request}: {err}");
        assert_eq!(answer(&out), expected, "{request}");
    }
}

#[test]
fn check_refuses_a_missing_branch_or_repository() {
    let repo = repo();
    let uri = repo.path.to_str().unwrap();
    let (code, out, err) = call(
        "check",
        &[],
        &json!({"source": {"uri": uri, "branch": "nope"}}),
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.ends_with(&format!("error: git: branch \"nope\" not found at {uri}\n")),
        "{err}"
    );

    let missing = repo.path.join("missing");
    let (code, out, err) = call(
        "check",
        &[],
        &json!({"source": {"uri": missing.to_str().unwrap()}}),
    );
    assert_eq!((code, out.as_str()), (1, ""));
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: git fetch failed (exit status: 128): fatal: "),
        "{err}"
    );
}

#[test]
fn check_hides_credentials_in_the_uri() {
    // Nothing listens on port 9; the point is what the message shows.
    let (code, _, err) = call(
        "check",
        &[],
        &json!({"source": {"uri": "http://user:s3cret@127.0.0.1:9/r.git", "branch": "main"}}),
    );
    assert_eq!(code, 1);
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("error: git fetch failed"), "{err}");
    assert!(!last.contains("s3cret"), "{last}");
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn the_ext_transport_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let uri = format!("ext::sh -c touch% {}", marker.display());
    let (code, _, err) = call("check", &[], &json!({"source": {"uri": uri}}));
    assert_eq!(code, 1);
    assert!(
        err.contains("the transport `<name>::` runs a program and is refused"),
        "{err}"
    );
    assert!(!marker.exists(), "the ext transport ran a command");
}

#[test]
fn in_fetches_the_exact_commit_with_metadata() {
    let repo = repo();
    let uri = repo.path.to_str().unwrap();
    let work = tempfile::tempdir().unwrap();

    for (name, wanted, body) in [
        ("at-first", repo.first.clone(), "echo one\n"),
        ("at-second", repo.second.clone(), "echo two\n"),
        // An abbreviated sha is answered with the full one.
        ("short", repo.first[..10].to_string(), "echo one\n"),
    ] {
        let dest = work.path().join(name);
        let (code, out, err) = call(
            "in",
            &[&dest],
            &json!({"source": {"uri": uri, "branch": "main"}, "version": {"ref": wanted}, "params": {}}),
        );
        assert_eq!(code, 0, "{name}: {err}");
        let full = if wanted.len() == 40 {
            wanted.clone()
        } else {
            repo.first.clone()
        };
        assert_eq!(git(&dest, &["rev-parse", "HEAD"]), full, "{name}");
        // Detached: HEAD names no branch.
        assert_eq!(git(&dest, &["rev-parse", "--abbrev-ref", "HEAD"]), "HEAD");
        assert_eq!(
            std::fs::read_to_string(dest.join("src/main.sh")).unwrap(),
            body
        );
        assert_eq!(dest.join("NEW").exists(), full == repo.second, "{name}");
        let answer = answer(&out);
        assert_eq!(answer["version"], json!({"ref": full}), "{name}");
        let message = if full == repo.first {
            "First commit\n\nWith a body."
        } else {
            "Second commit"
        };
        assert_eq!(
            answer["metadata"],
            json!([
                {"name": "commit", "value": full},
                {"name": "author", "value": "Ada Lovelace <ada@example.com>"},
                {"name": "author_date", "value": "2024-01-02T03:04:05+02:00"},
                {"name": "committer", "value": "ada@example.com"},
                {"name": "committer_date", "value": "2024-01-02T03:04:05+02:00"},
                {"name": "branch", "value": "main"},
                {"name": "message", "value": message},
                {"name": "url", "value": uri},
            ]),
            "{name}"
        );
    }
}

#[test]
fn in_refuses_an_unknown_commit_and_bad_requests() {
    let repo = repo();
    let uri = repo.path.to_str().unwrap();
    let work = tempfile::tempdir().unwrap();

    let dest = work.path().join("unknown");
    let (code, out, err) = call(
        "in",
        &[&dest],
        &json!({"source": {"uri": uri}, "version": {"ref": "deadbeefdeadbeef"}}),
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.ends_with(&format!(
            "error: git: commit deadbeefdeadbeef not found in {uri}\n"
        )),
        "{err}"
    );

    let cases = [
        (
            json!({"source": {"uri": "-oProxyCommand=x"}, "version": {"ref": repo.first}}),
            "error: source.uri: \"-oProxyCommand=x\" must not start with '-'\n",
        ),
        (
            json!({"source": {"uri": uri}, "version": {"ref": "--orphan"}}),
            "error: version.ref: \"--orphan\" is not a commit sha (4 to 64 hex digits)\n",
        ),
        (
            json!({"source": {"uri": uri}, "version": {"ref": "main"}}),
            "error: version.ref: \"main\" is not a commit sha (4 to 64 hex digits)\n",
        ),
    ];
    for (i, (request, expected)) in cases.into_iter().enumerate() {
        let dest = work.path().join(format!("bad-{i}"));
        let (code, out, err) = call("in", &[&dest], &request);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", expected),
            "{request}"
        );
        assert!(!dest.exists(), "{request}: nothing is fetched");
    }
}

/// A bare repository on disk holding `repo`'s `main`, and a clone of it
/// in a put's source dir as the input `repo`.
fn push_setup(origin: &Repo) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("bare.git");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            origin.path.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&src, &["clone", "--quiet", bare.to_str().unwrap(), "repo"]);
    (dir, bare, src)
}

#[test]
fn out_pushes_the_repository_s_head_to_the_branch() {
    let origin = repo();
    let (_dir, bare, src) = push_setup(&origin);
    let clone = src.join("repo");
    std::fs::write(clone.join("THIRD"), "third\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "Third commit"]);
    let third = git(&clone, &["rev-parse", "HEAD"]);
    // What the build wrote into the repository never runs: hooks and
    // config that run commands.
    let marker = src.join("ran");
    let hook = clone.join(".git/hooks/pre-push");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let touch = format!("touch {}", marker.display());
    git(&clone, &["config", "core.fsmonitor", &touch]);
    git(&clone, &["config", "core.sshCommand", &touch]);
    git(
        &clone,
        &["config", "credential.helper", &format!("!{touch}")],
    );
    let request = json!({"source": {"uri": bare.to_str().unwrap(), "branch": "main"},
                         "params": {"repository": "repo"}});
    let (code, out, err) = call("out", &[&src], &request);
    assert_eq!(code, 0, "{err}");
    assert!(!marker.exists(), "the repository's hook or config ran");
    assert_eq!(answer(&out)["version"], json!({"ref": third}));
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), third);
    // The version out answers is what check then finds.
    let (_, out, _) = call(
        "check",
        &[],
        &json!({"source": {"uri": bare.to_str().unwrap(), "branch": "main"}}),
    );
    assert_eq!(answer(&out), json!([{"ref": third}]));
    // To a new branch too.
    let request = json!({"source": {"uri": bare.to_str().unwrap(), "branch": "release/1"},
                         "params": {"repository": "repo"}});
    assert_eq!(call("out", &[&src], &request).0, 0);
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/release/1"]), third);
}

#[test]
fn out_refuses_a_non_fast_forward_and_bad_requests_and_pushes_nothing() {
    let origin = repo();
    let (_dir, bare, src) = push_setup(&origin);
    let clone = src.join("repo");
    // The clone goes back to the first commit and commits beside the branch.
    git(&clone, &["reset", "--quiet", "--hard", &origin.first]);
    std::fs::write(clone.join("SIDE"), "side\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "Side"]);
    let uri = bare.to_str().unwrap();
    let before = git(&bare, &["rev-parse", "refs/heads/main"]);
    assert_eq!(before, origin.second);
    let cases = [
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo"}}),
            "hangar pushes fast-forwards only",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo", "rebase": true}}),
            "error: params.rebase: not supported by hangar's built-in git; install Concourse's git-resource",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo", "merge": true}}),
            "error: params.merge: not supported by hangar's built-in git",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo", "tag": "../../etc/hostname"}}),
            "error: params.tag: \"../../etc/hostname\" must be a relative path",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo", "only_tag": true}}),
            "error: params.only_tag: needs params.tag",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo", "branch": "-f"}}),
            "error: params.branch: \"-f\" is not a branch name",
        ),
        (
            json!({"source": {"uri": uri}, "params": {"repository": "repo"}}),
            "error: source.branch: required to push",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}}),
            "error: params.repository: required",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "../etc"}}),
            "error: params.repository: \"../etc\" must be a relative path",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "/etc"}}),
            "error: params.repository: \"/etc\" must be a relative path",
        ),
        (
            json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "missing"}}),
            "error: params.repository: \"missing\" is not a directory",
        ),
    ];
    for (request, expected) in cases {
        let (code, out, err) = call("out", &[&src], &request);
        assert_eq!((code, out.as_str()), (1, ""), "{request}");
        assert!(err.contains(expected), "{request}: {err}");
        assert_eq!(
            git(&bare, &["rev-parse", "refs/heads/main"]),
            before,
            "{request}"
        );
    }
}
