//! Web and worker processes started from the `hangar` binary, on loopback,
//! each with its own log file. Every process is killed when its handle is
//! dropped, so a harness that fails half-way leaves nothing running.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_client::Client;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The admin token every harness web uses (web wants at least 16 characters).
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// The worker key every harness web and worker use.
pub const WORKER_KEY: &str = "bench-worker-key-0123456789";

/// A free loopback port (bound and released: a tiny race, fine on a test box).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Milliseconds since the Unix epoch, the unit web records times in.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `250ms`, `5s`: the duration form hangar's flags take.
pub fn flag_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A `hangar` command with nothing of the caller's `HANGAR_*` environment.
pub fn hangar_command(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    for (k, _) in std::env::vars() {
        if k.starts_with("HANGAR_") || k == "RUST_LOG" {
            c.env_remove(k);
        }
    }
    c.env("HANGAR_LOG", "info");
    c.stdin(Stdio::null()).stdout(Stdio::null());
    c.kill_on_drop(true);
    c
}

fn append_log(path: &Path) -> anyhow::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open log {}", path.display()))
}

/// One child process.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub started_at: Instant,
}

impl Proc {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `sig`; false when the process is already gone.
    pub fn signal(&self, sig: Signal) -> bool {
        match self.pid() {
            Some(pid) => kill(Pid::from_raw(pid as i32), sig).is_ok(),
            None => false,
        }
    }

    /// Whether it has exited (and how): `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        self.signal(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                self.kill().await;
                None
            }
        }
    }
}

/// How to start web.
#[derive(Debug, Clone)]
pub struct WebSpec {
    pub bin: PathBuf,
    pub addr: SocketAddr,
    /// Web's SQLite lives here when no database URL is given.
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    pub heartbeat_ttl: Duration,
    pub lifecycle_interval: Duration,
    pub log: PathBuf,
    pub extra_args: Vec<String>,
}

impl WebSpec {
    pub fn new(bin: &Path, dir: &Path) -> anyhow::Result<WebSpec> {
        Ok(WebSpec {
            bin: bin.to_path_buf(),
            addr: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            data_dir: dir.join("web"),
            database_url: None,
            heartbeat_ttl: Duration::from_secs(15),
            lifecycle_interval: Duration::from_secs(1),
            log: dir.join("logs").join("web.log"),
            extra_args: Vec::new(),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The database web uses (its SQLite file by default).
    pub fn database(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("hangar.db").display()))
    }

    /// Starts web and waits until it answers.
    pub async fn start(&self) -> anyhow::Result<Proc> {
        let log = append_log(&self.log)?;
        let mut cmd = hangar_command(&self.bin);
        cmd.arg("web")
            .args(["--bind", &self.addr.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--heartbeat-ttl", &flag_duration(self.heartbeat_ttl)])
            .args([
                "--lifecycle-interval",
                &flag_duration(self.lifecycle_interval),
            ])
            .args(&self.extra_args)
            .env("HANGAR_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("HANGAR_WORKER_KEY", WORKER_KEY)
            .stderr(log);
        if let Some(url) = &self.database_url {
            cmd.env("HANGAR_DATABASE_URL", url);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start web from {}", self.bin.display()))?;
        let mut web = Proc {
            name: "web".into(),
            child,
            started_at: Instant::now(),
        };
        let client = admin_client(&self.url(), Duration::from_secs(2))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = web.exited() {
                bail!("web exited at start ({status}); see {}", self.log.display());
            }
            if client.info().await.is_ok() {
                return Ok(web);
            }
            if Instant::now() > deadline {
                web.kill().await;
                bail!("web did not answer within 60s; see {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// How to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub bin: PathBuf,
    pub name: String,
    pub work_dir: PathBuf,
    pub web_url: String,
    pub heartbeat_interval: Duration,
    pub report_interval: Duration,
    pub tags: Vec<String>,
    pub log: PathBuf,
    /// `--volume-driver`: naive unless a bench says otherwise. Overlay
    /// mounts outlive a SIGKILLed worker and would pin its dirs; the naive
    /// driver keeps every volume a plain directory.
    pub volume_driver: &'static str,
    pub extra_args: Vec<String>,
}

impl WorkerSpec {
    pub fn new(bin: &Path, dir: &Path, name: &str, web_url: &str) -> WorkerSpec {
        WorkerSpec {
            bin: bin.to_path_buf(),
            name: name.to_string(),
            work_dir: dir.join("workers").join(name),
            web_url: web_url.to_string(),
            heartbeat_interval: Duration::from_secs(5),
            report_interval: Duration::from_secs(10),
            tags: Vec::new(),
            log: dir.join("logs").join(format!("{name}.log")),
            volume_driver: "naive",
            // Harness workers share the machine's disk with everything
            // else on it: only a nearly full disk keeps them from work.
            extra_args: vec![
                "--disk-soft-threshold".into(),
                "0.98".into(),
                "--disk-hard-threshold".into(),
                "0.99".into(),
            ],
        }
    }

    /// Starts the worker process (it registers on its own).
    pub fn start(&self) -> anyhow::Result<Proc> {
        let log = append_log(&self.log)?;
        let mut cmd = hangar_command(&self.bin);
        cmd.arg("worker")
            .args(["--name", &self.name])
            .arg("--work-dir")
            .arg(&self.work_dir)
            .args([
                "--heartbeat-interval",
                &flag_duration(self.heartbeat_interval),
            ])
            .args(["--report-interval", &flag_duration(self.report_interval)])
            .args(["--api-bind", "127.0.0.1:0"])
            .args(["--volume-driver", self.volume_driver])
            .args(&self.extra_args)
            .env("HANGAR_WEB", &self.web_url)
            .env("HANGAR_WORKER_KEY", WORKER_KEY)
            .stderr(log);
        if !self.tags.is_empty() {
            cmd.env("HANGAR_TAGS", self.tags.join(","));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start worker {}", self.name))?;
        Ok(Proc {
            name: self.name.clone(),
            child,
            started_at: Instant::now(),
        })
    }
}

/// A client with the admin token.
pub fn admin_client(url: &str, timeout: Duration) -> anyhow::Result<Client> {
    Ok(Client::new(url, ADMIN_TOKEN, timeout)?)
}

/// A client with the worker key.
pub fn worker_client(url: &str, timeout: Duration) -> anyhow::Result<Client> {
    Ok(Client::new(url, WORKER_KEY, timeout)?)
}

/// Polls until `worker` is `state` on web (by the worker list), or fails
/// after `within`.
pub async fn wait_for_state(
    client: &Client,
    worker: &str,
    state: &str,
    within: Duration,
) -> anyhow::Result<hangar_api::Worker> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(workers) = client.workers().await {
            if let Some(w) = workers
                .into_iter()
                .find(|w| w.name == worker && w.state.as_str() == state)
            {
                return Ok(w);
            }
        }
        if Instant::now() > deadline {
            bail!("worker {worker} was not {state} within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
