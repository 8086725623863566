//! The `git` type's git-resource fields and params against real
//! repositories (and a real sshd on loopback) made in temporary directories.

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
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada Lovelace")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Commits `files` (path, content) with `message` at `date` (seconds, so
/// tags sort by it); answers the sha.
fn commit(repo: &Path, files: &[(&str, &str)], message: &str, date: u32) -> String {
    for (path, content) in files {
        let at = repo.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, content).unwrap();
    }
    git(repo, &["add", "."]);
    let date = format!("@{} +0000", 1_700_000_000 + date);
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["commit", "--quiet", "--allow-empty", "-m", message])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_NAME", "Grace Hopper")
        .env("GIT_COMMITTER_EMAIL", "grace@example.com")
        .env("GIT_COMMITTER_DATE", &date)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    git(repo, &["rev-parse", "HEAD"])
}

fn init(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).unwrap();
    git(&path, &["init", "--quiet", "--initial-branch=main"]);
    path
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

fn ok(action: &str, args: &[&Path], request: &Value) -> Value {
    let (code, out, err) = call(action, args, request);
    assert_eq!(code, 0, "{request}: {err}");
    serde_json::from_str(&out).unwrap()
}

fn refs(shas: &[&String]) -> Value {
    Value::Array(shas.iter().map(|s| json!({ "ref": s })).collect())
}

#[test]
fn check_follows_paths_ignore_paths_ci_skip_and_commit_filter() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init(dir.path(), "origin");
    let c0 = commit(&repo, &[("README.md", "0")], "start", 0);
    let c1 = commit(&repo, &[("src/a.rs", "1")], "code", 1);
    let c2 = commit(&repo, &[("docs/x.md", "2")], "docs", 2);
    let c3 = commit(&repo, &[("src/b.rs", "3")], "more code [ci skip]", 3);
    let c4 = commit(
        &repo,
        &[("src/c.rs", "4"), ("docs/y.md", "4")],
        "both [skip ci]",
        4,
    );
    let c5 = commit(&repo, &[("docs/z.md", "5")], "wip: docs", 5);
    let uri = repo.to_str().unwrap();
    let from =
        |source: Value, version: &String| json!({"source": source, "version": {"ref": version}});
    let cases = [
        (from(json!({"uri": uri}), &c0), refs(&[&c0, &c1, &c2, &c5])),
        (
            from(json!({"uri": uri, "disable_ci_skip": true}), &c0),
            refs(&[&c0, &c1, &c2, &c3, &c4, &c5]),
        ),
        (
            from(
                json!({"uri": uri, "paths": ["src"], "disable_ci_skip": true}),
                &c0,
            ),
            refs(&[&c0, &c1, &c3, &c4]),
        ),
        (
            from(json!({"uri": uri, "ignore_paths": ["docs"]}), &c0),
            refs(&[&c0, &c1]),
        ),
        (
            from(
                json!({"uri": uri, "ignore_paths": ["docs/*.md"], "disable_ci_skip": true}),
                &c0,
            ),
            refs(&[&c0, &c1, &c3, &c4]),
        ),
        (
            from(
                json!({"uri": uri, "commit_filter": {"exclude": ["wip"]}}),
                &c1,
            ),
            refs(&[&c1, &c2]),
        ),
        (
            from(
                json!({"uri": uri, "commit_filter": {"include": ["docs", "code"]}}),
                &c0,
            ),
            refs(&[&c0, &c1, &c2, &c5]),
        ),
        // No version: the newest commit that is one.
        (
            json!({"source": {"uri": uri, "paths": ["src"]}}),
            refs(&[&c1]),
        ),
        (json!({"source": {"uri": uri}}), refs(&[&c5])),
    ];
    for (request, expected) in cases {
        assert_eq!(ok("check", &[], &request), expected, "{request}");
    }
}

#[test]
fn check_with_tag_filter_gives_tags_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init(dir.path(), "origin");
    commit(&repo, &[("a", "1")], "one", 1);
    git(&repo, &["tag", "v1.0.0"]);
    commit(&repo, &[("a", "2")], "two", 2);
    git(&repo, &["tag", "v1.1.0"]);
    git(&repo, &["tag", "other"]);
    commit(&repo, &[("a", "3")], "three", 3);
    git(&repo, &["tag", "v2.0.0"]);
    let uri = repo.to_str().unwrap();
    let source = json!({"uri": uri, "tag_filter": "v*"});
    assert_eq!(
        ok("check", &[], &json!({"source": source})),
        json!([{"ref": "v2.0.0"}])
    );
    assert_eq!(
        ok(
            "check",
            &[],
            &json!({"source": source, "version": {"ref": "v1.0.0"}})
        ),
        json!([{"ref": "v1.0.0"}, {"ref": "v1.1.0"}, {"ref": "v2.0.0"}])
    );

    // in fetches the tag's commit and writes the tag as the ref.
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("dest");
    let answer = ok(
        "in",
        &[&dest],
        &json!({"source": source, "version": {"ref": "v1.1.0"}}),
    );
    assert_eq!(answer["version"], json!({"ref": "v1.1.0"}));
    assert_eq!(std::fs::read_to_string(dest.join("a")).unwrap(), "2");
    assert_eq!(
        std::fs::read_to_string(dest.join(".git/ref")).unwrap(),
        "v1.1.0"
    );
}

#[test]
fn in_writes_git_resource_s_files_and_honours_depth_and_submodules() {
    let dir = tempfile::tempdir().unwrap();
    let sub = init(dir.path(), "sub");
    commit(&sub, &[("lib.txt", "library")], "lib", 0);
    let repo = init(dir.path(), "origin");
    commit(&repo, &[("a", "1")], "one", 1);
    git(
        &repo,
        &[
            "submodule",
            "--quiet",
            "add",
            sub.to_str().unwrap(),
            "vendor/sub",
        ],
    );
    commit(&repo, &[], "add the submodule", 2);
    let head = commit(&repo, &[("a", "3")], "Three\n\nbody", 3);
    git(&repo, &["tag", "-a", "-m", "three", "v3"]);
    let uri = repo.to_str().unwrap();
    let work = tempfile::tempdir().unwrap();

    let dest = work.path().join("full");
    let answer = ok(
        "in",
        &[&dest],
        &json!({"source": {"uri": uri, "branch": "main"}, "version": {"ref": head},
                "params": {"fetch_tags": true, "short_ref_format": "sha-%s",
                           "timestamp_format": "unix"}}),
    );
    let read = |name: &str| std::fs::read_to_string(dest.join(".git").join(name)).unwrap();
    assert_eq!(read("ref"), head);
    assert_eq!(read("short_ref"), format!("sha-{}", &head[..7]));
    assert_eq!(read("commit_message"), "Three\n\nbody");
    assert_eq!(read("committer"), "grace@example.com");
    assert_eq!(read("committer_name"), "Grace Hopper");
    assert_eq!(read("commit_timestamp"), "1700000003");
    assert_eq!(read("describe_ref"), "v3");
    assert_eq!(read("branch"), "main");
    assert_eq!(read("tags"), "v3");
    assert_eq!(
        std::fs::read_to_string(dest.join("vendor/sub/lib.txt")).unwrap(),
        "library"
    );
    let names: Vec<&str> = answer["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "commit",
            "author",
            "author_date",
            "committer",
            "committer_date",
            "branch",
            "tags",
            "message",
            "url"
        ]
    );

    // depth 1, no submodules, tags cleaned.
    let dest = work.path().join("shallow");
    ok(
        "in",
        &[&dest],
        &json!({"source": {"uri": format!("file://{uri}")}, "version": {"ref": head},
                "params": {"depth": 1, "submodules": "none", "fetch_tags": true, "clean_tags": true}}),
    );
    assert_eq!(git(&dest, &["rev-list", "--count", "HEAD"]), "1");
    assert!(!dest.join("vendor/sub/lib.txt").exists());
    assert_eq!(git(&dest, &["tag", "--list"]), "");
}

#[test]
fn out_tags_forces_and_pushes_only_the_tag() {
    let dir = tempfile::tempdir().unwrap();
    let origin = init(dir.path(), "origin");
    let first = commit(&origin, &[("a", "1")], "one", 1);
    let bare = dir.path().join("bare.git");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            origin.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&src, &["clone", "--quiet", bare.to_str().unwrap(), "repo"]);
    let clone = src.join("repo");
    let second = commit(&clone, &[("a", "2")], "two", 2);
    std::fs::write(src.join("version"), "1.2.3\n").unwrap();
    std::fs::write(src.join("notes"), "Release 1.2.3\n").unwrap();
    let uri = bare.to_str().unwrap();

    // The tag only: the branch stays.
    ok(
        "out",
        &[&src],
        &json!({"source": {"uri": uri, "branch": "main"},
                "params": {"repository": "repo", "tag": "version", "tag_prefix": "v", "only_tag": true}}),
    );
    assert_eq!(
        git(&bare, &["rev-parse", "refs/tags/v1.2.3^{commit}"]),
        second
    );
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), first);

    // The branch and an annotated tag.
    std::fs::write(src.join("version"), "1.2.4").unwrap();
    let answer = ok(
        "out",
        &[&src],
        &json!({"source": {"uri": uri, "branch": "main"},
                "params": {"repository": "repo", "tag": "version", "annotate": "notes"}}),
    );
    assert_eq!(answer["version"], json!({"ref": second}));
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), second);
    assert_eq!(git(&bare, &["cat-file", "-t", "refs/tags/1.2.4"]), "tag");
    assert_eq!(
        git(&bare, &["tag", "--list", "--format=%(contents)", "1.2.4"]),
        "Release 1.2.3"
    );

    // A commit beside the branch: refused, then pushed with force.
    git(&clone, &["reset", "--quiet", "--hard", &first]);
    let side = commit(&clone, &[("b", "side")], "side", 3);
    let request =
        json!({"source": {"uri": uri, "branch": "main"}, "params": {"repository": "repo"}});
    let (code, _, err) = call("out", &[&src], &request);
    assert_eq!(code, 1, "{err}");
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), second);
    let request = json!({"source": {"uri": uri}, "params": {"repository": "repo", "force": true, "branch": "main"}});
    ok("out", &[&src], &request);
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), side);
}

#[test]
fn hostile_and_unsupported_fields_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = init(dir.path(), "origin");
    let head = commit(&repo, &[("a", "1")], "one", 1);
    let uri = repo.to_str().unwrap();
    let marker = dir.path().join("pwned");
    let m = marker.display();
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n-----END OPENSSH PRIVATE KEY-----";
    let cases = [
        (json!({"uri": "-uhello"}), "source.uri: \"-uhello\" must not start with '-'"),
        (json!({"uri": format!("ext::sh -c touch% {m}")}), "the transport `<name>::` runs a program"),
        (json!({"uri": format!("fd::3")}), "the transport `<name>::` runs a program"),
        (json!({"uri": uri, "private_key": "hunter2"}), "source.private_key: not a private key"),
        (json!({"uri": uri, "private_key": key}), "is not an ssh uri"),
        (json!({"uri": "git@host:r.git", "private_key": key, "private_key_user": "-oProxyCommand=x"}), "source.private_key_user: \"-oProxyCommand=x\" is not a user name"),
        (json!({"uri": uri, "paths": ["../etc"]}), "source.paths: \"../etc\" must not hold '..'"),
        (json!({"uri": uri, "paths": ["/etc"]}), "source.paths: \"/etc\" must be relative"),
        (json!({"uri": uri, "ignore_paths": [":(top)x"]}), "source.ignore_paths: \":(top)x\" must not start with '-' or ':'"),
        (json!({"uri": uri, "git_config": [{"name": "core.sshCommand", "value": format!("touch {m}")}]}), "source.git_config: \"core.sshCommand\" is refused"),
        (json!({"uri": uri, "git_config": [{"name": "core.fsmonitor", "value": format!("touch {m}")}]}), "source.git_config: \"core.fsmonitor\" is refused"),
        (json!({"uri": uri, "git_config": [{"name": "http.proxyHelper", "value": "x"}]}), "is refused"),
        (json!({"uri": uri, "tag_filter": "--contains"}), "source.tag_filter: \"--contains\" is not a tag glob"),
        (json!({"uri": uri, "username": "u"}), "give both or neither"),
        (json!({"uri": uri, "tag_regex": "v.*"}), "source.tag_regex: not supported by hangar's built-in git; install Concourse's git-resource through the base resource type layout (docs/resource-types.md)"),
        (json!({"uri": uri, "version_depth": 2}), "source.version_depth: not supported"),
        (json!({"uri": uri, "private_key_passphrase": "x"}), "source.private_key_passphrase: not supported"),
    ];
    for (source, expected) in cases {
        let (code, out, err) = call("check", &[], &json!({"source": source}));
        assert_eq!((code, out.as_str()), (1, ""), "{source}");
        assert!(err.contains(expected), "{source}: {err}");
    }
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("dest");
    let params_cases = [
        (
            json!({"submodules": ["../x"]}),
            "params.submodules: \"../x\" must not hold '..'",
        ),
        (
            json!({"submodules": 3}),
            "params.submodules: `all`, `none` or a list",
        ),
        (
            json!({"describe_ref_options": "--always --contains=x; touch /tmp/p"}),
            "params.describe_ref_options: \"--contains=x;\" is not an option",
        ),
        (
            json!({"timestamp_format": "--output=/tmp/x"}),
            "params.timestamp_format",
        ),
        (
            json!({"disable_git_lfs": false}),
            "params.disable_git_lfs: false asks for Git LFS files",
        ),
        (
            json!({"git_crypt_key": "k"}),
            "params.git_crypt_key: not supported",
        ),
    ];
    for (params, expected) in params_cases {
        let request = json!({"source": {"uri": uri}, "version": {"ref": head}, "params": params});
        let (code, out, err) = call("in", &[&dest], &request);
        assert_eq!((code, out.as_str()), (1, ""), "{params}");
        assert!(err.contains(expected), "{params}: {err}");
        assert!(!dest.exists(), "{params}: a refused in wrote its directory");
    }
    assert!(!marker.exists(), "a refused field ran a command");
}

/// An sshd of the test's own on a loopback port, as the current user, with
/// a generated host key and one authorized key; killed when dropped.
struct Sshd {
    child: std::process::Child,
    port: u16,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen (package openssh-client) is needed");
    assert!(status.success());
}

fn sshd(dir: &Path, authorized: &Path) -> Sshd {
    let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect(
            "sshd is missing: the git type's ssh test needs it (package openssh-server; \
             scripts/install-deps installs it)",
        );
    // sshd wants its privilege separation directory.
    let _ = std::fs::create_dir_all("/run/sshd");
    let host_key = dir.join("host_key");
    keygen(&host_key);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
             PidFile {}\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin yes\n\
             SetEnv PATH=/usr/local/bin:/usr/bin:/bin\n",
            host_key.display(),
            authorized.display(),
            dir.join("sshd.pid").display()
        ),
    )
    .unwrap();
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start sshd");
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "sshd did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Sshd { child, port }
}

#[test]
fn private_key_reaches_a_repository_over_ssh() {
    let dir = tempfile::tempdir().unwrap();
    let origin = init(dir.path(), "origin");
    let first = commit(&origin, &[("a", "1")], "one", 1);
    let bare = dir.path().join("bare.git");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            origin.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let client_key = dir.path().join("client_key");
    keygen(&client_key);
    let authorized = dir.path().join("authorized_keys");
    std::fs::copy(client_key.with_extension("pub"), &authorized).unwrap();
    let server = sshd(dir.path(), &authorized);
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let uri = format!("ssh://127.0.0.1:{}{}", server.port, bare.display());
    let key = std::fs::read_to_string(&client_key).unwrap();
    let source =
        json!({"uri": uri, "branch": "main", "private_key": key, "private_key_user": user});

    assert_eq!(
        ok("check", &[], &json!({"source": source})),
        refs(&[&first])
    );
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("dest");
    ok(
        "in",
        &[&dest],
        &json!({"source": source, "version": {"ref": first}}),
    );
    assert_eq!(std::fs::read_to_string(dest.join("a")).unwrap(), "1");

    // out over ssh too.
    let src = work.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&src, &["clone", "--quiet", bare.to_str().unwrap(), "repo"]);
    let second = commit(&src.join("repo"), &[("a", "2")], "two", 2);
    ok(
        "out",
        &[&src],
        &json!({"source": source, "params": {"repository": "repo"}}),
    );
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/main"]), second);

    // No key file is left behind in the actions' temporary directory.
    let leftover: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("hangar-git-{}-", std::process::id()))
                && e.path().join("private_key").exists()
        })
        .collect();
    assert!(leftover.is_empty(), "{leftover:?}");

    // Another key is refused by the server.
    let other = dir.path().join("other_key");
    keygen(&other);
    let wrong = json!({"uri": uri, "branch": "main",
                       "private_key": std::fs::read_to_string(&other).unwrap(),
                       "private_key_user": user});
    let (code, out, err) = call("check", &[], &json!({"source": wrong}));
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("git fetch failed"), "{err}");
}
