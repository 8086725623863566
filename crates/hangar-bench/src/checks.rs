//! `hangar bench checks`: web's CPU while it keeps N resources checked
//! every `check_every`, with a check that returns at once (the built-in
//! `mock` type on one real worker). The worker's check processes run in
//! the worker's process tree, not web's, so web's figure is its own:
//! planning checks, claiming them, calling the worker and recording.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hangar_core::pipeline::parse_pipeline;
use hangar_store::Store;
use serde::Serialize;

use crate::procfs;
use crate::procs::{now_ms, WebSpec, WorkerSpec};

const TEAM: &str = "main";
/// Resources per pipeline: a pipeline of 10,000 would pass the YAML
/// reader's bound on values (100,000), which a real one would not.
const PER_PIPELINE: usize = 1000;

#[derive(Debug, Clone)]
pub struct ChecksConfig {
    pub bin: PathBuf,
    pub resources: usize,
    /// Each resource's `check_every`, as Concourse writes it (`1m`).
    pub check_every: String,
    /// Load before measuring: the first round of checks (every resource
    /// due at once) is over by then.
    pub warmup: Duration,
    pub duration: Duration,
    pub database_url: Option<String>,
    pub dir: Option<PathBuf>,
}

impl ChecksConfig {
    pub fn new(bin: PathBuf) -> ChecksConfig {
        ChecksConfig {
            bin,
            resources: 10_000,
            check_every: "1m".into(),
            warmup: Duration::from_secs(90),
            duration: Duration::from_secs(60),
            database_url: None,
            dir: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ChecksReport {
    pub resources: usize,
    pub check_every: String,
    pub database: String,
    pub set_pipeline_seconds: f64,
    pub measured_seconds: f64,
    /// Checks that finished in the window, per second, and what
    /// `check_every` asks for.
    pub checks_per_second: f64,
    pub due_per_second: f64,
    pub check_errors: usize,
    /// Web's CPU time in the window divided by the window: 1.0 = one core.
    pub web_cpu_cores: f64,
    pub web_rss_mib: f64,
    /// The worker process's own CPU (its check processes' not counted).
    pub worker_cpu_cores: f64,
}

impl ChecksReport {
    pub fn line(&self) -> String {
        format!(
            "checks: {} resources every {} ({}; {:.0}s measured): {:.1} checks/s recorded ({:.1}/s due), \
             {} failing; web cpu {:.2} cores, rss {:.1} MiB; worker process cpu {:.2} cores; \
             pipelines set in {:.1}s",
            self.resources,
            self.check_every,
            self.database,
            self.measured_seconds,
            self.checks_per_second,
            self.due_per_second,
            self.check_errors,
            self.web_cpu_cores,
            self.web_rss_mib,
            self.worker_cpu_cores,
            self.set_pipeline_seconds,
        )
    }
}

fn pipeline_yaml(first: usize, resources: usize, check_every: &str) -> String {
    let mut y = String::from("resources:\n");
    for i in first..first + resources {
        let _ = writeln!(
            y,
            "- {{name: r{i:05}, type: mock, source: {{versions: [\"v{i}\"]}}, check_every: {check_every}}}"
        );
    }
    // One job reads them all, so none is an unused resource.
    y.push_str("jobs:\n- name: reads-all\n  plan:\n");
    for i in first..first + resources {
        let _ = writeln!(y, "  - get: r{i:05}");
    }
    y
}

/// Checks finished since `since` across the pipeline, and how many fail.
async fn finished_since(
    store: &Store,
    pipeline_id: i64,
    since: i64,
) -> anyhow::Result<(usize, usize)> {
    let statuses = store.pipeline_check_statuses(pipeline_id).await?;
    let done = statuses
        .values()
        .filter(|s| s.last_finished_at.is_some_and(|t| t >= since))
        .count();
    let failing = statuses.values().filter(|s| s.error.is_some()).count();
    Ok((done, failing))
}

pub async fn run(cfg: ChecksConfig) -> anyhow::Result<ChecksReport> {
    let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
    let dir = cfg.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let mut spec = WebSpec::new(&cfg.bin, &dir)?;
    spec.database_url = cfg.database_url.clone();
    spec.extra_args = vec!["--gc-interval=1h".into()];
    std::fs::create_dir_all(&spec.data_dir)?;
    let url = spec.database();
    let database = url.split(':').next().unwrap_or("").to_string();

    let store = Store::open(&url).await?;
    eprintln!(
        "bench checks: setting {} resources in pipelines of {PER_PIPELINE}",
        cfg.resources
    );
    let setting = Instant::now();
    let mut pipelines = Vec::new();
    let mut first = 0;
    while first < cfg.resources {
        let n = PER_PIPELINE.min(cfg.resources - first);
        let name = format!("checks-{:03}", pipelines.len());
        let config = parse_pipeline(&pipeline_yaml(first, n, &cfg.check_every))
            .map_err(|e| anyhow::anyhow!("the benchmark's pipeline: {e:?}"))?
            .config;
        if store.pipeline(TEAM, &name).await.is_ok() {
            store.destroy_pipeline(TEAM, &name, now_ms()).await?;
        }
        let set = store
            .set_pipeline(TEAM, &name, &config, None, now_ms())
            .await?;
        pipelines.push((name, set.pipeline_id));
        first += n;
    }
    let set_pipeline_seconds = setting.elapsed().as_secs_f64();

    let mut web = spec.start().await?;
    let web_pid = web.pid().ok_or_else(|| anyhow::anyhow!("web has no pid"))?;
    let mut worker = WorkerSpec::new(&cfg.bin, &dir, "bench-checker", &spec.url()).start()?;
    let worker_pid = worker.pid().unwrap_or(0);
    // Unpaused once the worker is there: every resource is due at once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, _) in &pipelines {
        store
            .set_pipeline_paused(TEAM, name, false, now_ms())
            .await?;
    }
    eprintln!(
        "bench checks: warming up for {}s (the first round of checks)",
        cfg.warmup.as_secs()
    );
    tokio::time::sleep(cfg.warmup).await;

    let window_start = Instant::now();
    let since = now_ms();
    let web_cpu = procfs::cpu_seconds(web_pid).unwrap_or(0.0);
    let worker_cpu = procfs::cpu_seconds(worker_pid).unwrap_or(0.0);
    tokio::time::sleep(cfg.duration).await;
    let measured = window_start.elapsed().as_secs_f64();
    let web_cpu = procfs::cpu_seconds(web_pid).unwrap_or(0.0) - web_cpu;
    let worker_cpu = procfs::cpu_seconds(worker_pid).unwrap_or(0.0) - worker_cpu;
    let rss = procfs::rss(web_pid).unwrap_or_default();
    let (mut done, mut failing) = (0, 0);
    for (_, id) in &pipelines {
        let (d, f) = finished_since(&store, *id, since).await?;
        done += d;
        failing += f;
    }
    worker.stop(Duration::from_secs(10)).await;
    web.stop(Duration::from_secs(10)).await;
    let every = hangar_core::pipeline::GoDuration::parse(&cfg.check_every)
        .map(|d| d.duration.as_secs_f64())
        .unwrap_or(60.0);
    Ok(ChecksReport {
        resources: cfg.resources,
        check_every: cfg.check_every.clone(),
        database,
        set_pipeline_seconds,
        measured_seconds: measured,
        // A scope's last finish is counted once however often it ran in
        // the window: with a window no longer than check_every, it is the
        // number of checks.
        checks_per_second: done as f64 / measured,
        due_per_second: cfg.resources as f64 / every,
        check_errors: failing,
        web_cpu_cores: web_cpu / measured,
        web_rss_mib: rss.now as f64 / (1024.0 * 1024.0),
        worker_cpu_cores: worker_cpu / measured,
    })
}
