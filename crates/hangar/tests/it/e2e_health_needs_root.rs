//! Workers that protect themselves, with real processes: a worker in a real
//! memory cgroup pushed over its soft threshold stops getting work and gets
//! it again afterwards; a step needing more memory than a worker has free
//! goes elsewhere; a worker whose work dir turns read-only becomes unhealthy
//! within one check and recovers when the disk does.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{has, Cluster, ADMIN};
use hangar_api::builds::{Build, CreateBuild};
use hangar_api::Worker;
use hangar_client::Client;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A memory cgroup (v1 here; v2 where that is the layout) removed on drop.
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    fn new(name: &str, limit: u64) -> MemoryCgroup {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let dir = if v1.exists() {
            v1.join(name)
        } else {
            Path::new("/sys/fs/cgroup").join(name)
        };
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("create {} (needs root): {e}", dir.display()));
        let limit_file = if v1.exists() {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        std::fs::write(dir.join(limit_file), limit.to_string()).unwrap();
        MemoryCgroup { dir }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Hog(Child);

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker_row(c: &Cluster, name: &str) -> Option<Worker> {
    c.workers()?.into_iter().find(|w| w.name == name)
}

fn submit(c: &Cluster, config: serde_json::Value, tags: &[&str]) -> Build {
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let plan = serde_json::json!([{"task": "t", "config": config, "tags": tags}]);
    block(client.create_build(&CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("health".into()),
        plan,
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap()
}

fn finished(c: &Cluster, id: i64) -> Build {
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let b = block(client.build(id)).unwrap();
        if !matches!(b.status.as_str(), "pending" | "started") {
            return b;
        }
        if Instant::now() > deadline {
            let log = block(client.build_events(id, 0, 0)).unwrap();
            panic!("build {id} did not end: {b:?}\n{log:?}\n{:?}", c.workers());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn quick() -> serde_json::Value {
    serde_json::json!({"platform": "linux", "run": {"path": "true"}})
}

const CHECKS: [&str; 2] = ["--health-check-interval", "300ms"];

#[test]
fn a_worker_over_its_soft_memory_threshold_gets_no_work_until_it_clears() {
    let c = Cluster::start();
    let cg = MemoryCgroup::new(&format!("hangar-e2e-{}", std::process::id()), 512 << 20);
    let dir = c.work_dir("tight");
    let mut args = vec!["--tag", "shared", "--tag", "tight"];
    args.extend(CHECKS);
    let tight = c.worker_with("tight", &dir, &args);
    cg.add(tight.child.id());
    let mut roomy_args = vec!["--tag", "shared"];
    roomy_args.extend(CHECKS);
    let _roomy = c.worker_with("roomy", &c.work_dir("roomy"), &roomy_args);
    c.wait_until("both run and the tight one knows its cgroup limit", |ws| {
        has(ws, "roomy", "running")
            && ws.iter().any(|w| {
                w.name == "tight"
                    && w.condition
                        .as_ref()
                        .is_some_and(|c| c.memory_limit == 512 << 20)
            })
    });

    // A step asking for more memory than the tight worker has goes to the other.
    let mut big = quick();
    big["container_limits"] = serde_json::json!({"memory": "1GiB"});
    let b = finished(&c, submit(&c, big, &["shared"]).id);
    assert_eq!(b.status.to_string(), "succeeded");
    assert_eq!(b.steps[0].worker.as_deref(), Some("roomy"));

    // Push the tight worker's cgroup over 80%: no work for it.
    let hog = Command::new("python3")
        .args([
            "-c",
            "import time; b = b'x' * (450 * 2**20); time.sleep(120)",
        ])
        .spawn()
        .unwrap();
    cg.add(hog.id());
    let hog = Hog(hog);
    c.wait_until("tight is under soft pressure", |ws| {
        ws.iter().any(|w| {
            w.name == "tight"
                && w.condition
                    .as_ref()
                    .is_some_and(|c| c.pressure.to_string() == "soft")
        })
    });
    let held = submit(&c, quick(), &["tight"]);
    std::thread::sleep(Duration::from_millis(1500));
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let waiting = block(client.build(held.id)).unwrap();
    assert!(
        waiting.steps.iter().all(|s| s.worker.is_none()),
        "placed while under pressure: {waiting:?}"
    );
    let log = block(client.build_events(held.id, 0, 0)).unwrap();
    assert!(
        log.events.iter().any(|e| e
            .payload
            .contains("every running worker that fits is under pressure or unhealthy")),
        "{log:?}"
    );

    drop(hog);
    let b = finished(&c, held.id);
    assert_eq!(b.status.to_string(), "succeeded");
    assert_eq!(b.steps[0].worker.as_deref(), Some("tight"));
    let row = worker_row(&c, "tight").unwrap();
    assert_eq!(
        row.state.to_string(),
        "running",
        "the worker was not killed"
    );
    drop(tight);
}

/// A read-only bind mount of a directory over itself, undone on drop.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn new(dir: &Path) -> ReadOnly {
        let run = |args: &[&str]| {
            let o = Command::new("mount").args(args).output().unwrap();
            assert!(
                o.status.success(),
                "mount {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        let d = dir.to_str().unwrap();
        run(&["--bind", d, d]);
        run(&["-o", "remount,ro,bind", d]);
        ReadOnly(dir.to_path_buf())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_worker_whose_work_dir_turns_read_only_is_unhealthy_gets_no_work_and_recovers() {
    let c = Cluster::start();
    let dir = c.work_dir("fragile");
    let mut args = vec!["--tag", "shared"];
    args.extend(CHECKS);
    let _fragile = c.worker_with("fragile", &dir, &args);
    let _sturdy = c.worker_with("sturdy", &c.work_dir("sturdy"), &args);
    let ws = c.wait_until("both healthy", |ws| {
        ws.iter()
            .filter(|w| w.condition.as_ref().is_some_and(|c| c.healthy))
            .count()
            == 2
    });
    let api_url = ws
        .iter()
        .find(|w| w.name == "fragile")
        .unwrap()
        .api_url
        .clone()
        .unwrap();

    let ro = ReadOnly::new(&dir);
    let broken = Instant::now();
    c.wait_until("fragile is unhealthy", |ws| {
        ws.iter().any(|w| {
            w.name == "fragile"
                && w.condition.as_ref().is_some_and(|c| {
                    !c.healthy
                        && c.unhealthy_reason
                            .as_deref()
                            .unwrap_or("")
                            .contains("not writable")
                })
        })
    });
    eprintln!(
        "figure: read-only work dir to unhealthy seen by web: {:?} (checks every 300ms)",
        broken.elapsed()
    );
    let status = block(async {
        reqwest::get(format!("{api_url}/healthz"))
            .await
            .map(|r| r.status().as_u16())
    });
    assert_eq!(
        status.unwrap(),
        503,
        "the health endpoint fails while unhealthy"
    );
    for _ in 0..3 {
        let b = finished(&c, submit(&c, quick(), &["shared"]).id);
        assert_eq!(b.status.to_string(), "succeeded");
        assert_eq!(b.steps[0].worker.as_deref(), Some("sturdy"));
    }
    drop(ro);
    c.wait_until("fragile recovers", |ws| {
        ws.iter()
            .any(|w| w.name == "fragile" && w.condition.as_ref().is_some_and(|c| c.healthy))
    });
}
