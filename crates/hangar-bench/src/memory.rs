//! `hangar bench agent-memory`: the resident memory of a worker process
//! (its own, not its containers', which are other processes) idle and while
//! it runs several tasks, and of web.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::CreateBuild;
use serde::Serialize;

use crate::procfs;
use crate::procs::{self, WebSpec, WorkerSpec};

#[derive(Debug, Clone)]
pub struct MemoryConfig {
    pub bin: PathBuf,
    /// Builds run at once for the busy figure.
    pub busy_builds: usize,
    /// How long the worker sits idle before the idle figure.
    pub idle_for: Duration,
    pub dir: Option<PathBuf>,
}

impl MemoryConfig {
    pub fn new(bin: PathBuf) -> MemoryConfig {
        MemoryConfig {
            bin,
            busy_builds: 4,
            idle_for: Duration::from_secs(15),
            dir: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub worker_idle_rss_mib: f64,
    /// The most the worker held while the builds ran (sampled every 100 ms,
    /// and its high-water mark).
    pub worker_busy_rss_mib: f64,
    pub worker_peak_rss_mib: f64,
    pub busy_builds: usize,
    pub web_rss_mib: f64,
}

impl MemoryReport {
    pub fn line(&self) -> String {
        format!(
            "agent memory: worker idle {:.1} MiB, busy ({} builds at once) {:.1} MiB (high-water mark {:.1} MiB); web with 1 worker {:.1} MiB",
            self.worker_idle_rss_mib,
            self.busy_builds,
            self.worker_busy_rss_mib,
            self.worker_peak_rss_mib,
            self.web_rss_mib
        )
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

pub async fn run(cfg: MemoryConfig) -> anyhow::Result<MemoryReport> {
    let tmp;
    let dir = match &cfg.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let spec = WebSpec::new(&cfg.bin, &dir)?;
    let mut web = spec.start().await?;
    let mut wspec = WorkerSpec::new(&cfg.bin, &dir, "mem-worker", &spec.url());
    wspec.heartbeat_interval = Duration::from_secs(5);
    wspec.report_interval = Duration::from_secs(10);
    let mut worker = wspec.start()?;
    let client = procs::admin_client(&spec.url(), Duration::from_secs(30))?;
    let result = async {
        procs::wait_for_state(&client, "mem-worker", "running", Duration::from_secs(60)).await?;
        let pid = worker.pid().context("worker has no pid")?;
        eprintln!("bench agent-memory: worker idle for {:?}", cfg.idle_for);
        tokio::time::sleep(cfg.idle_for).await;
        let idle = procfs::rss(pid).context("read the worker's memory")?;
        let mut ids = Vec::new();
        for n in 0..cfg.busy_builds {
            let plan = serde_json::json!([
                {"get": "thing", "type": "mock", "source": {"versions": [format!("v{n}")]}},
                {"task": "busy", "config": {
                    "platform": "linux",
                    "inputs": [{"name": "thing"}],
                    "outputs": [{"name": "out"}],
                    "caches": [{"path": "cache"}],
                    "run": {"path": "sh", "args": ["-c",
                        "for i in $(seq 1 200); do echo line $i of output; done; head -c 4000000 /dev/urandom > out/blob; sleep 3"]},
                }},
            ]);
            let b = client
                .create_build(&CreateBuild {
                    resource_types: serde_json::Value::Null,
                    name: Some(format!("busy-{n}")),
                    plan,
                    artifacts: BTreeMap::new(),
                    team: None,
                })
                .await?;
            ids.push(b.id);
        }
        let mut busy_max = 0u64;
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(r) = procfs::rss(pid) {
                busy_max = busy_max.max(r.now);
            }
            let mut open = 0;
            for id in &ids {
                let b = client.build(*id).await?;
                match b.status.as_str() {
                    "pending" | "started" => open += 1,
                    "succeeded" => {}
                    other => bail!("busy build {id} ended {other}: {:?}", b.error),
                }
            }
            if open == 0 {
                break;
            }
            if Instant::now() > deadline {
                bail!("busy builds did not finish within 180s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let peak = procfs::rss(pid).context("read the worker's memory")?;
        let web_rss = web.pid().and_then(procfs::rss).unwrap_or_default();
        Ok(MemoryReport {
            worker_idle_rss_mib: mib(idle.now),
            worker_busy_rss_mib: mib(busy_max),
            worker_peak_rss_mib: mib(peak.peak),
            busy_builds: cfg.busy_builds,
            web_rss_mib: mib(web_rss.now),
        })
    }
    .await;
    worker.stop(Duration::from_secs(10)).await;
    web.stop(Duration::from_secs(10)).await;
    result
}
