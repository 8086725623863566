//! `hangar execute` when web cannot take its upload: the reason is printed
//! and the exit code is 1, never a silent 141. Only the CLI's own standard
//! output losing its reader ends it without a word.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Output, Stdio};

use crate::common::{hangar, Cluster, ADMIN};

const TASK: &str = "platform: linux\ninputs: [{name: src}]\nrun: {path: 'true'}\n";

/// A task dir whose input holds `bytes` of data gzip cannot shrink, so the
/// upload is still being written when web answers.
fn task_with_input(bytes: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.yml"), TASK).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut data = Vec::with_capacity(bytes);
    while data.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(dir.path().join("src/big"), data).unwrap();
    dir
}

fn execute(dir: &Path, url: &str, token: &str) -> Output {
    hangar()
        .args(["execute", "-c", "task.yml", "-i", "src=src"])
        .current_dir(dir)
        .env("HANGAR_URL", url)
        .env("HANGAR_TOKEN", token)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_closed_port_is_reported_and_exits_1() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = task_with_input(20 << 20);
    let out = execute(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        "some-token-0123456789",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("upload input src") && err.contains("cannot reach"),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
}

#[test]
fn a_wrong_token_with_a_large_input_prints_webs_refusal_and_exits_1() {
    let c = Cluster::start();
    let dir = task_with_input(20 << 20);
    // Several times: web answers while the upload is still being written,
    // and the answer must win over the packer's broken pipe every time.
    for _ in 0..3 {
        let out = execute(dir.path(), &c.url, "not-the-admin-token-0123456789");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(
                "upload input src: invalid or expired credentials: log in again (401 Unauthorized)"
            ),
            "{err}"
        );
    }
    // Nothing was created.
    let builds = c.cli(&["builds", "--json"]);
    assert_eq!(String::from_utf8_lossy(&builds.stdout).trim(), "[]");
}

#[test]
fn a_closed_standard_output_ends_the_cli_silently_with_141() {
    let c = Cluster::start();
    let commands = [
        &["builds"][..],
        &["builds", "--json"],
        &["workers"],
        &["prune-worker", "--all-stalled"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        // `hangar builds | head -1` where head has already gone.
        drop(reader);
        let out = hangar()
            .args(args)
            .env("HANGAR_URL", &c.url)
            .env("HANGAR_TOKEN", ADMIN)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}
