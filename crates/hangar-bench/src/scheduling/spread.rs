//! `hangar bench spread`: how placement spreads a queue of builds over a
//! fleet. Web and N workers run as processes; the benchmark queues B
//! builds of one short task through the API as fast as it can, waits for
//! all of them, and counts, from the database, the worker each task ran
//! on (its last attempt's). Web runs with the chain given
//! (`--container-placement-strategy`, default hangar's own).
//!
//! Nothing here asserts a split; the figures are printed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::CreateBuild;
use hangar_core::build::StepKind;
use hangar_store::Store;
use serde::Serialize;

use crate::procs::{admin_client, wait_for_state, Proc, WebSpec, WorkerSpec};

#[derive(Debug, Clone)]
pub struct SpreadConfig {
    pub bin: PathBuf,
    pub builds: usize,
    pub workers: usize,
    /// How long each task runs (`sleep`), 0: `true`.
    pub task_ms: u64,
    /// Web's `--container-placement-strategy` values (none: its default).
    pub strategies: Vec<String>,
    pub database_url: Option<String>,
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpreadReport {
    pub database: String,
    pub chain: String,
    pub builds: usize,
    pub task_ms: u64,
    /// Tasks run per worker, by name.
    pub per_worker: BTreeMap<String, usize>,
    pub succeeded: usize,
    pub queued_seconds: f64,
    pub all_done_seconds: f64,
}

impl SpreadReport {
    /// The busiest worker's share of the tasks, in percent.
    pub fn busiest_percent(&self) -> f64 {
        let total: usize = self.per_worker.values().sum();
        let most = self.per_worker.values().copied().max().unwrap_or(0);
        if total == 0 {
            0.0
        } else {
            100.0 * most as f64 / total as f64
        }
    }

    pub fn lines(&self) -> String {
        let total: usize = self.per_worker.values().sum();
        let split: Vec<String> = self
            .per_worker
            .iter()
            .map(|(w, n)| format!("{w} {n} ({:.1}%)", 100.0 * *n as f64 / total.max(1) as f64))
            .collect();
        format!(
            "spread: {} builds of one task ({}) on {} workers ({}; chain {}): {}; busiest {:.1}%; \
             {} succeeded; queued in {:.1} s, all done in {:.1} s\n",
            self.builds,
            if self.task_ms == 0 {
                "true".to_string()
            } else {
                format!("sleep {} ms", self.task_ms)
            },
            self.per_worker.len(),
            self.database,
            self.chain,
            split.join(", "),
            self.busiest_percent(),
            self.succeeded,
            self.queued_seconds,
            self.all_done_seconds,
        )
    }
}

pub async fn run(cfg: SpreadConfig) -> anyhow::Result<SpreadReport> {
    let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
    let dir = cfg.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let mut spec = WebSpec::new(&cfg.bin, &dir)?;
    spec.database_url = cfg.database_url.clone();
    for s in &cfg.strategies {
        spec.extra_args
            .extend(["--container-placement-strategy".to_string(), s.clone()]);
    }
    std::fs::create_dir_all(&spec.data_dir)?;
    let database_url = spec.database();
    let database = database_url.split(':').next().unwrap_or("").to_string();
    let mut web = spec.start().await?;
    let client = admin_client(&spec.url(), Duration::from_secs(30))?;
    let mut workers: Vec<Proc> = Vec::new();
    let names: Vec<String> = (1..=cfg.workers).map(|n| format!("w{n}")).collect();
    for name in &names {
        let mut w = WorkerSpec::new(&cfg.bin, &dir, name, &spec.url());
        // A task of `true` or `sleep`: the sandbox is not what is measured.
        w.extra_args.push("--no-process-sandbox".into());
        workers.push(w.start()?);
    }
    for name in &names {
        wait_for_state(&client, name, "running", Duration::from_secs(60)).await?;
    }
    let store = Store::open(&database_url).await?;

    let run = if cfg.task_ms == 0 {
        serde_json::json!({"path": "true"})
    } else {
        serde_json::json!({"path": "sleep", "args": [format!("{:.3}", cfg.task_ms as f64 / 1000.0)]})
    };
    let plan = serde_json::json!([{"task": "t", "config": {"platform": "linux", "run": run}}]);
    let started = Instant::now();
    let mut ids = Vec::with_capacity(cfg.builds);
    for n in 0..cfg.builds {
        let build = client
            .create_build(&CreateBuild {
                resource_types: serde_json::Value::Null,
                name: Some(format!("spread-{n}")),
                plan: plan.clone(),
                artifacts: BTreeMap::new(),
                team: None,
            })
            .await
            .with_context(|| format!("queue build {n}"))?;
        ids.push(build.id);
    }
    let queued = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut pending = ids.clone();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for id in pending {
            let b = store
                .get_build(id)
                .await?
                .with_context(|| format!("build {id} is gone"))?;
            if !b.status.is_final() {
                still.push(id);
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("{} builds did not finish within 10 minutes", pending.len());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_done = started.elapsed();
    let mut per_worker: BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    let mut succeeded = 0;
    for &id in &ids {
        let b = store.get_build(id).await?.context("build gone")?;
        if b.status == hangar_core::build::BuildStatus::Succeeded {
            succeeded += 1;
        }
        for s in store.build_steps(id).await? {
            if s.kind == StepKind::Task {
                if let Some(w) = s.worker {
                    *per_worker.entry(w).or_default() += 1;
                }
            }
        }
    }
    for mut w in workers {
        w.stop(Duration::from_secs(10)).await;
    }
    web.stop(Duration::from_secs(10)).await;
    Ok(SpreadReport {
        database,
        chain: if cfg.strategies.is_empty() {
            "default".into()
        } else {
            cfg.strategies.join(",")
        },
        builds: cfg.builds,
        task_ms: cfg.task_ms,
        per_worker,
        succeeded,
        queued_seconds: queued.as_secs_f64(),
        all_done_seconds: all_done.as_secs_f64(),
    })
}
