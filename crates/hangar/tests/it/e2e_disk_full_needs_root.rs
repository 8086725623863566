//! A worker whose work dir fills up, end to end with real processes: its
//! work dir is a small tmpfs (so the machine's disk is never filled). The
//! step that fills it ends as an infrastructure failure, "disk full on
//! worker …" in the build log, and is retried on another worker where it
//! succeeds; the full worker logs the state change, not every failed write.
//!
//! Needs root to mount the tmpfs (as the runc tests need root): without it
//! the test fails and says so; it never skips.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{has, Cluster, ADMIN};
use hangar_client::Client;

struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs on {}: {} — the full-disk test needs root (as the runc tests do)",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_step_that_fills_its_worker_s_disk_fails_over_as_disk_full_and_succeeds_elsewhere() {
    let c = Cluster::start();
    let full_dir = c.work_dir("worker-full");
    let tmpfs = Tmpfs::mount(&full_dir, "8m");
    let full = c.worker_with(
        "worker-full",
        &full_dir,
        &["--health-check-interval", "200ms"],
    );
    c.wait_until("the small worker runs", |ws| {
        has(ws, "worker-full", "running")
    });
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let build = block(client.create_build(&hangar_api::builds::CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("fill-job".into()),
        plan: serde_json::json!([{"task": "fill", "infrastructure_attempts": 10,
            "config": {"platform": "linux",
            "outputs": [{"name": "out"}],
            "run": {"path": "sh", "args": ["-c",
                "head -c 20000000 /dev/zero > out/big && echo wrote it"]}}}]),
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap();
    // The first attempt goes to the small worker, the only one; the roomy
    // one comes once it runs there.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = block(client.build(build.id)).unwrap();
        if b.steps.first().and_then(|s| s.worker.as_deref()) == Some("worker-full") {
            break;
        }
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _roomy = c.worker("worker-roomy");
    // A step stuck on the full disk would keep the build started for ever:
    // fail (generously late) rather than hang.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let b = block(client.build(build.id)).unwrap();
        if !matches!(b.status.as_str(), "pending" | "started") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the build is still {} on a full disk: {:?}",
            b.status,
            b.steps
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = (
        String::from_utf8_lossy(&watch.stdout).into_owned(),
        String::from_utf8_lossy(&watch.stderr).into_owned(),
    );
    assert!(watch.status.success(), "{out}\n{err}");
    assert!(
        err.contains("disk full on worker worker-full"),
        "the build log says the disk was full: {err}"
    );
    assert!(out.contains("wrote it"), "{out}");
    let done = block(client.build(build.id)).unwrap();
    assert_eq!(done.status.to_string(), "succeeded");
    assert_eq!(done.steps[0].worker.as_deref(), Some("worker-roomy"));

    // An upload that does not fit on the small worker is refused as such:
    // 507 insufficient_storage from the worker, passed through by web.
    let up = tempfile::tempdir().unwrap();
    let made = Command::new("sh")
        .arg("-c")
        .arg("head -c 16000000 /dev/zero > big && tar czf up.tgz big && rm big")
        .current_dir(up.path())
        .status()
        .unwrap();
    assert!(made.success());
    let body = std::fs::read(up.path().join("up.tgz")).unwrap();
    // Under hard pressure the worker may have landed itself; it takes work
    // again once the failed attempts' volumes are gone and the reserve is
    // back (a landed worker's refusal, 409, is waited out).
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let e =
            block(client.upload_artifact(Some("worker-full"), "linux", &[], body.clone().into()))
                .unwrap_err();
        match &e {
            hangar_client::ClientError::Api { status, .. }
                if status.as_u16() == 409 && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100))
            }
            _ => break e,
        }
    };
    match refused {
        hangar_client::ClientError::Api {
            status,
            code,
            message,
        } => {
            assert_eq!(
                (status.as_u16(), code.as_str()),
                (507, "insufficient_storage"),
                "{message}"
            );
            assert!(
                message.contains("worker worker-full has no room"),
                "{message}"
            );
        }
        other => panic!("expected web's refusal, got {other}"),
    }

    // The full worker said so in a bounded number of lines: state changes,
    // not one line per failed write.
    drop(full);
    let log = std::fs::read_to_string(c.dir.path().join("worker-full.log")).unwrap();
    let lines = log.lines().count();
    let no_space = log
        .lines()
        .filter(|l| l.contains("No space left") || l.contains("disk full"))
        .count();
    assert!(
        log.contains("disk full: the work dir has no room"),
        "the worker logged the disk filling up:\n{log}"
    );
    assert!(
        no_space <= 40,
        "{no_space} lines about the full disk:\n{log}"
    );
    assert!(lines <= 400, "{lines} lines of worker log:\n{log}");
    drop(tmpfs);
}

/// `execute`'s upload that fills its worker's disk goes again, whole, to
/// another worker: web doubts the full one, and the task runs on the
/// other with its input complete.
#[test]
fn an_upload_that_fills_its_worker_s_disk_goes_again_to_another_worker() {
    let c = Cluster::start();
    // First by name, so placement picks it first of two idle workers.
    let small_dir = c.work_dir("a-small");
    let _tmpfs = Tmpfs::mount(&small_dir, "8m");
    let _small = c.worker_with("a-small", &small_dir, &[]);
    let _large = c.worker("b-large");
    c.wait_until("both workers run", |ws| {
        has(ws, "a-small", "running") && has(ws, "b-large", "running")
    });
    let dir = c.dir.path().join("job");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    // 12 MB that do not compress, past the small worker's 8 MB.
    let big: Vec<u8> = (0..12_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("src/big"), &big).unwrap();
    std::fs::write(
        dir.join("task.yml"),
        "platform: linux\ninputs: [{name: src}]\nrun: {path: sh, args: [-c, 'wc -c < src/big']}\n",
    )
    .unwrap();
    let out = c.cli_in(&dir, &["execute", "-c", "task.yml", "-i", "src=src"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("12000000"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("uploading the inputs again on another worker (attempt 2 of 3)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("a-small"),
        "the failure names the full worker: {stderr}"
    );
}
