//! `hangar web` never starts silently on an empty database where one was:
//! the marker it keeps beside the SQLite file makes it refuse a missing
//! database until told to accept a new one; and it refuses a database that
//! takes no writes.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{hangar, ADMIN, KEY};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

struct Web {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Web {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.join(format!("web-{port}.log"));
    let child = hangar()
        .args(["web", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(extra)
        .envs(env.iter().copied())
        .env("HANGAR_ADMIN_TOKEN", ADMIN)
        .env("HANGAR_WORKER_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Web { child, port, log }
}

/// The status of `GET /api/v1/info`, or `None` while nothing listens.
fn info_status(port: u16) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /api/v1/info HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split(' ').nth(1)?.parse().ok()
}

impl Web {
    /// Waits until web answers `/info`, or exits.
    fn wait_answers(&mut self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = info_status(self.port) {
                return status;
            }
            if let Some(exit) = self.child.try_wait().unwrap() {
                panic!("web exited ({exit}): {}", self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "web never answered: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for web to exit on its own; returns its exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                info_status(self.port).is_none(),
                "web started and answers: {}",
                self.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "web did not exit: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(mut self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "web: {status}: {}", self.stderr());
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn remove_database(data: &Path) {
    for name in ["hangar.db", "hangar.db-wal", "hangar.db-shm"] {
        let _ = std::fs::remove_file(data.join(name));
    }
}

fn marker(data: &Path) -> String {
    std::fs::read_to_string(data.join("hangar.db.id")).unwrap()
}

#[test]
fn web_refuses_a_missing_database_the_marker_remembers_and_starts_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut web = start(dir.path(), &[], &[]);
    assert_eq!(web.wait_answers(), 200);
    web.stop();
    let first = marker(&data);
    remove_database(&data);

    let mut web = start(dir.path(), &[], &[]);
    let code = web.wait_exit();
    assert_ne!(code, Some(0));
    let err = web.stderr();
    assert!(
        err.contains("missing") && err.contains(first.trim()),
        "{err}"
    );
    assert!(err.contains("--accept-new-database"), "{err}");
    assert!(
        !data.join("hangar.db").exists(),
        "no empty database was created"
    );
    assert_eq!(marker(&data), first, "the marker is unchanged");

    let mut web = start(dir.path(), &["--accept-new-database"], &[]);
    assert_eq!(web.wait_answers(), 200);
    web.stop();
    let second = marker(&data);
    assert_ne!(second, first);

    // From now on the new database is the one remembered: no flag needed.
    let mut web = start(dir.path(), &[], &[]);
    assert_eq!(web.wait_answers(), 200);
    web.stop();

    // The environment variable says the same as the flag.
    remove_database(&data);
    let mut web = start(dir.path(), &[], &[]);
    assert_ne!(web.wait_exit(), Some(0));
    let mut web = start(dir.path(), &[], &[("HANGAR_ACCEPT_NEW_DATABASE", "true")]);
    assert_eq!(web.wait_answers(), 200);
    web.stop();
    assert_ne!(marker(&data), second);
}

#[test]
fn web_refuses_a_database_that_takes_no_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut web = start(dir.path(), &[], &[]);
    assert_eq!(web.wait_answers(), 200);
    web.stop();
    let url = format!("sqlite://{}?mode=ro", data.join("hangar.db").display());
    let mut web = start(dir.path(), &["--database-url", &url], &[]);
    assert_ne!(web.wait_exit(), Some(0));
    let err = web.stderr();
    assert!(
        err.contains("takes no writes") && err.contains("readonly"),
        "{err}"
    );
}
