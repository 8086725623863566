//! What the end-to-end tests share: a web process and worker processes on
//! loopback, and the CLI to drive them.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hangar_api::Worker;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub(crate) const ADMIN: &str = "e2e-admin-token-0123456789";
pub(crate) const KEY: &str = "e2e-worker-key-0123456789";
pub(crate) const HEARTBEAT: &str = "300ms";
pub(crate) const TTL: &str = "900ms";

pub(crate) fn hangar() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
    // Nothing from the developer's shell may leak into the processes.
    for (k, _) in std::env::vars() {
        if k.starts_with("HANGAR_") {
            c.env_remove(k);
        }
    }
    c.env("HANGAR_LOG", "info");
    c
}

/// A child process that is killed when the test ends, however it ends.
pub(crate) struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub(crate) fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap_or_else(|e| panic!("send {sig} to {}: {e}", self.name));
    }

    /// Waits for the process to exit on its own and returns its exit code.
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {within:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A web process at `url` (on loopback) with its data in `dir`, logging to
/// `dir/web.log` (appended across restarts).
fn spawn_web(dir: &Path, url: &str, extra: &[&str]) -> Proc {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("web.log"))
        .unwrap();
    let child = hangar()
        .args(["web", "--bind", url.trim_start_matches("http://")])
        .arg("--data-dir")
        .arg(dir.join("web"))
        .args(["--lifecycle-interval", "100ms"])
        // The tests' short TTL, unless they give their own.
        .args(
            ["--heartbeat-ttl", TTL]
                .iter()
                .filter(|_| !extra.contains(&"--heartbeat-ttl")),
        )
        .args(extra)
        .env("HANGAR_ADMIN_TOKEN", ADMIN)
        .env("HANGAR_WORKER_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Proc {
        child,
        name: "web".into(),
    }
}

pub(crate) struct Cluster {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub web: Proc,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    /// A cluster whose web takes `extra` flags too.
    pub(crate) fn start_with(extra: &[&str]) -> Cluster {
        Cluster::start_at(|_| extra.iter().map(|s| s.to_string()).collect())
    }

    /// A cluster whose web takes the flags `extra` makes of its URL.
    pub(crate) fn start_at(extra: impl FnOnce(&str) -> Vec<String>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let flags = extra(&url);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let web = spawn_web(dir.path(), &url, &flags);
        let cluster = Cluster { dir, url, web };
        cluster.wait_until("web answers", |_| true);
        cluster
    }

    /// Stops web (SIGTERM, as an operator's restart does) and starts it
    /// again on the same address and data dir, with `extra` flags.
    pub(crate) fn restart_web(&mut self, extra: &[&str]) {
        self.web.signal(Signal::SIGTERM);
        assert_eq!(self.web.wait_exit(Duration::from_secs(30)), Some(0));
        self.web = spawn_web(self.dir.path(), &self.url, extra);
        self.wait_until("web answers again", |_| true);
    }

    /// How many lines of `name`'s log (`web`, a worker's name) contain `text`.
    pub(crate) fn log_lines(&self, name: &str, text: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }

    pub(crate) fn work_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join("workers").join(name)
    }

    pub(crate) fn worker(&self, name: &str) -> Proc {
        self.worker_in(name, &self.work_dir(name))
    }

    pub(crate) fn worker_in(&self, name: &str, work_dir: &Path) -> Proc {
        self.worker_with(name, work_dir, &[])
    }

    /// A worker whose tasks and resource actions share the host's network
    /// (`--task-network host`), still in the sandbox otherwise: for a test
    /// whose registry or server listens on the host's loopback, which the
    /// task network keeps out of reach.
    pub(crate) fn worker_on_host_network(&self, name: &str) -> Proc {
        self.worker_with(name, &self.work_dir(name), &["--task-network", "host"])
    }

    /// A worker whose process tasks and base resource types' actions run
    /// on the host, outside the sandbox (`--no-process-sandbox`): for a
    /// test whose resources are local paths (a repository it made), which
    /// the sandbox does not show, and whose subject is not the sandbox.
    pub(crate) fn worker_outside_sandbox(&self, name: &str) -> Proc {
        self.worker_with(name, &self.work_dir(name), &["--no-process-sandbox"])
    }

    /// A worker with extra flags (e.g. `--tag only-me`).
    pub(crate) fn worker_with(&self, name: &str, work_dir: &Path, extra: &[&str]) -> Proc {
        self.worker_with_env(name, work_dir, extra, &[])
    }

    /// A worker with extra flags and environment variables (its own HOME).
    pub(crate) fn worker_with_env(
        &self,
        name: &str,
        work_dir: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> Proc {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .unwrap();
        // Flags and environment variables both configure the worker.
        let child = hangar()
            .args(["worker", "--name", name, "--heartbeat-interval", HEARTBEAT])
            .args(["--api-bind", "127.0.0.1:0", "--report-interval", "200ms"])
            // Overlay mounts would outlive a SIGKILLed worker in this mount
            // namespace and pin the temp dirs; the volume crate's own suite
            // covers the overlay driver.
            .args(["--volume-driver", "naive"])
            // The work dirs sit on the machine's shared disk, whose
            // fullness no test here is about: only a nearly full disk may
            // keep these workers from work (memory keeps its defaults).
            .args([
                "--disk-soft-threshold",
                "0.98",
                "--disk-hard-threshold",
                "0.99",
            ])
            .args(extra)
            .arg("--work-dir")
            .arg(work_dir)
            .env("HANGAR_WEB", &self.url)
            .env("HANGAR_WORKER_KEY", KEY)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Proc {
            child,
            name: name.into(),
        }
    }

    /// Runs a user-side CLI command against the cluster.
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        hangar()
            .args(args)
            .env("HANGAR_URL", &self.url)
            .env("HANGAR_TOKEN", ADMIN)
            .output()
            .unwrap()
    }

    /// Saves a version of a pipeline's resource straight into web's SQLite
    /// file, as a check would (no check loop runs in these tests): a job's
    /// inputs resolve only to checked versions.
    pub(crate) fn save_version(&self, pipeline: &str, resource: &str, version: serde_json::Value) {
        let db = self.dir.path().join("web").join("hangar.db");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let store = hangar_store::Store::open(&format!("sqlite://{}", db.display()))
                    .await
                    .unwrap();
                let r = store.resource("main", pipeline, resource).await.unwrap();
                // A second writer beside web: SQLite answers `database is
                // locked` at once (not after its busy timeout) when this
                // transaction's read is overtaken by web's write; it is
                // tried again, as any second writer must.
                let mut tries = 0;
                loop {
                    match store
                        .save_resource_version(r.id, &version, &serde_json::json!([]), 0)
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if e.to_string().contains("database is locked") && tries < 50 => {
                            tries += 1;
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("save version of {resource}: {e}"),
                    }
                }
                store.close().await;
            });
    }

    /// Runs a CLI command in `dir` (for relative paths in its arguments).
    pub(crate) fn cli_in(&self, dir: &Path, args: &[&str]) -> Output {
        hangar()
            .args(args)
            .current_dir(dir)
            .env("HANGAR_URL", &self.url)
            .env("HANGAR_TOKEN", ADMIN)
            .output()
            .unwrap()
    }

    pub(crate) fn workers(&self) -> Option<Vec<Worker>> {
        let out = self.cli(&["workers", "--json"]);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    pub(crate) fn state_of(&self, name: &str) -> Option<String> {
        self.workers()?
            .into_iter()
            .find(|w| w.name == name)
            .map(|w| w.state.to_string())
    }

    /// Polls the worker list until `cond` holds; panics with the logs if it
    /// never does.
    pub(crate) fn wait_until(&self, what: &str, cond: impl Fn(&[Worker]) -> bool) -> Vec<Worker> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(workers) = self.workers() {
                if cond(&workers) {
                    return workers;
                }
            }
            if Instant::now() > deadline {
                let logs = std::fs::read_dir(self.dir.path())
                    .unwrap()
                    .filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                    .map(|e| {
                        format!(
                            "--- {}\n{}",
                            e.path().display(),
                            std::fs::read_to_string(e.path()).unwrap()
                        )
                    })
                    .collect::<String>();
                panic!(
                    "timed out waiting until {what}; workers: {:?}\n{logs}",
                    self.workers()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn events_of(&self, name: &str) -> Vec<hangar_api::WorkerEvent> {
        let out = self.cli(&["events", "-w", name, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

pub(crate) fn has(workers: &[Worker], name: &str, state: &str) -> bool {
    workers
        .iter()
        .any(|w| w.name == name && w.state.as_str() == state)
}

/// Fails the test, saying what to install, unless runc can be run (runc
/// tests need it, and root).
pub(crate) fn require_runc() {
    assert!(
        Command::new("runc").arg("--version").output().is_ok(),
        "runc is needed (and root): scripts/install-deps installs it"
    );
}

/// The host's static busybox, which runc tests put in their images.
pub(crate) fn static_busybox() -> &'static Path {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("busybox-static is needed for runc tests: scripts/install-deps installs it")
}

/// The CLI as a user runs it: no admin token or URL in the environment,
/// the targets file in `rc`.
pub(crate) fn user_cli(c: &Cluster, rc: &Path, args: &[&str]) -> Output {
    hangar()
        .args(args)
        .current_dir(c.dir.path())
        .env_remove("HANGAR_TOKEN")
        .env_remove("HANGAR_URL")
        .env("HANGAR_RC", rc)
        .output()
        .unwrap()
}

/// A command's stdout and stderr as text.
pub(crate) fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The JSON a CLI command prints (`--json`), failing the test if it fails.
pub(crate) fn json_of(c: &Cluster, args: &[&str]) -> serde_json::Value {
    let o = c.cli(args);
    assert!(o.status.success(), "{args:?}: {:?}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Polls `f` every 100 ms until it gives a value, failing the test after
/// `within`.
pub(crate) fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
