//! `hangar bench death`: a worker SIGKILLed while it runs a long step, to
//! that step running again on another worker, at the default settings
//! (heartbeat every 5 s, a 15 s TTL, a lifecycle pass every second). Web
//! (one node, or several on one PostgreSQL behind a balancer, each worker's
//! presence on whichever node its connection reached) and two workers run
//! as processes; each round submits a one-step build (`sleep 600`), waits
//! until the step runs, SIGKILLs the worker running it and times, from the
//! kill, web's stall of that worker and the step's next attempt running on
//! the other worker (both read from the database every 2 ms). The build is
//! then aborted and the killed worker started again under its name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::CreateBuild;
use hangar_core::build::StepState;
use hangar_core::WorkerState;
use hangar_store::Store;
use serde::Serialize;

use crate::chaos::balancer::Balancer;
use crate::procs::{admin_client, wait_for_state, Proc, WebSpec, WorkerSpec};
use crate::stats::{fmt_opt, Summary};

/// What the worker logs once web holds its presence.
const PRESENCE_HELD: &str = "presence held by web";

#[derive(Debug, Clone)]
pub struct DeathConfig {
    pub bin: PathBuf,
    pub rounds: usize,
    /// PostgreSQL for web (default: SQLite in the scratch dir).
    pub database_url: Option<String>,
    /// Web nodes sharing the database (more than one needs PostgreSQL).
    pub web_nodes: usize,
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeathRound {
    pub killed: String,
    pub retried_on: Option<String>,
    pub kill_to_stalled_ms: Option<f64>,
    pub kill_to_retry_running_ms: Option<f64>,
    /// The stall's cause, as web recorded it.
    pub cause: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeathReport {
    pub database: String,
    pub web_nodes: usize,
    pub rounds: Vec<DeathRound>,
    /// Rounds whose step did not run again within 60 s.
    pub timed_out: usize,
    pub kill_to_stalled_ms: Summary,
    pub kill_to_retry_running_ms: Summary,
}

impl DeathReport {
    pub fn line(&self) -> String {
        format!(
            "death: ({}, {} web node(s); {} rounds, {} timed out; defaults: heartbeat 5s, ttl 15s) \
             SIGKILL -> worker stalled p50 {} ms max {} ms; SIGKILL -> step running on the other worker p50 {} ms max {} ms",
            self.database,
            self.web_nodes,
            self.rounds.len(),
            self.timed_out,
            fmt_opt(self.kill_to_stalled_ms.p50, 1),
            fmt_opt(self.kill_to_stalled_ms.max, 1),
            fmt_opt(self.kill_to_retry_running_ms.p50, 1),
            fmt_opt(self.kill_to_retry_running_ms.max, 1),
        )
    }
}

fn presences_held(spec: &WorkerSpec) -> usize {
    std::fs::read_to_string(&spec.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(PRESENCE_HELD))
        .count()
}

/// Waits until the worker's log says web holds its presence more than
/// `before` times.
async fn presence_held(spec: &WorkerSpec, before: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while presences_held(spec) <= before {
        if Instant::now() > deadline {
            bail!("worker {}'s presence was not held within 30s", spec.name);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

pub async fn run(cfg: DeathConfig) -> anyhow::Result<DeathReport> {
    if cfg.web_nodes > 1 && cfg.database_url.is_none() {
        bail!("several web nodes need PostgreSQL (--database-url)");
    }
    let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
    let dir = cfg.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let mut specs = Vec::new();
    for n in 0..cfg.web_nodes.max(1) {
        let mut spec = WebSpec::new(&cfg.bin, &dir)?;
        spec.database_url = cfg.database_url.clone();
        spec.data_dir = dir.join(format!("web-{n}"));
        spec.log = dir.join("logs").join(format!("web-{n}.log"));
        // The defaults, said out loud: what the figures are at.
        spec.heartbeat_ttl = Duration::from_secs(15);
        spec.lifecycle_interval = Duration::from_secs(1);
        std::fs::create_dir_all(&spec.data_dir)?;
        specs.push(spec);
    }
    let database_url = specs[0].database();
    let database = database_url.split(':').next().unwrap_or("").to_string();
    let mut webs: Vec<Proc> = Vec::new();
    for spec in &specs {
        webs.push(spec.start().await?);
    }
    let (web_url, _balancer) = if specs.len() > 1 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let nodes: Vec<_> = specs.iter().map(|s| s.addr).collect();
        let balancer = Balancer::start(listener, &nodes)?;
        (balancer.url(), Some(balancer))
    } else {
        (specs[0].url(), None)
    };
    let store = Store::open(&database_url).await?;
    let client = admin_client(&web_url, Duration::from_secs(10))?;
    let mut worker_specs = BTreeMap::new();
    let mut workers = BTreeMap::new();
    for name in ["death-1", "death-2"] {
        let mut spec = WorkerSpec::new(&cfg.bin, &dir, name, &web_url);
        spec.heartbeat_interval = Duration::from_secs(5);
        // The step is `sleep`; the sandbox is not what is measured.
        spec.extra_args.push("--no-process-sandbox".into());
        workers.insert(name.to_string(), spec.start()?);
        worker_specs.insert(name.to_string(), spec);
    }
    for (name, spec) in &worker_specs {
        wait_for_state(&client, name, "running", Duration::from_secs(60)).await?;
        presence_held(spec, 0).await?;
    }

    let mut rounds = Vec::new();
    let mut timed_out = 0;
    for round in 0..cfg.rounds {
        let plan = serde_json::json!([{"task": "long", "config": {
            "platform": "linux",
            "run": {"path": "sleep", "args": ["600"]},
        }}]);
        let build = client
            .create_build(&CreateBuild {
                resource_types: serde_json::Value::Null,
                name: Some(format!("death-{round}")),
                plan,
                artifacts: BTreeMap::new(),
                team: None,
            })
            .await?;
        // The step runs: on which worker, at which attempt.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (victim, attempt) = loop {
            let steps = store.build_steps(build.id).await?;
            if let Some(s) = steps.iter().find(|s| s.state == StepState::Running) {
                if let Some(w) = &s.worker {
                    break (w.clone(), s.attempt);
                }
            }
            if Instant::now() > deadline {
                bail!("round {round}: the step did not start within 60s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let proc = workers
            .get_mut(&victim)
            .with_context(|| format!("the step runs on {victim}, not a bench worker"))?;
        let killed = Instant::now();
        proc.kill().await;
        let mut stalled = None;
        let mut cause = None;
        let mut retried = None;
        let deadline = killed + Duration::from_secs(60);
        while (stalled.is_none() || retried.is_none()) && Instant::now() < deadline {
            if stalled.is_none() {
                if let Some(w) = store.get_worker(&victim).await? {
                    if w.state == WorkerState::Stalled {
                        stalled = Some(killed.elapsed());
                        cause = w.last_event.map(|e| e.cause);
                    }
                }
            }
            if retried.is_none() {
                let steps = store.build_steps(build.id).await?;
                if let Some(s) = steps.iter().find(|s| {
                    s.state == StepState::Running
                        && s.attempt > attempt
                        && s.worker.as_deref().is_some_and(|w| w != victim)
                }) {
                    retried = Some((killed.elapsed(), s.worker.clone()));
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if retried.is_none() {
            timed_out += 1;
        }
        let r = DeathRound {
            killed: victim.clone(),
            retried_on: retried.as_ref().and_then(|(_, w)| w.clone()),
            kill_to_stalled_ms: stalled.map(ms),
            kill_to_retry_running_ms: retried.as_ref().map(|(d, _)| ms(*d)),
            cause,
        };
        eprintln!(
            "round {round}: killed {victim}; stalled after {} ms, step running on {} after {} ms",
            fmt_opt(r.kill_to_stalled_ms, 1),
            r.retried_on.as_deref().unwrap_or("-"),
            fmt_opt(r.kill_to_retry_running_ms, 1),
        );
        rounds.push(r);
        // The next round starts from two running workers and no build.
        client.abort_build(build.id).await?;
        let spec = &worker_specs[&victim];
        let before = presences_held(spec);
        workers.insert(victim.clone(), spec.start()?);
        wait_for_state(&client, &victim, "running", Duration::from_secs(60)).await?;
        presence_held(spec, before).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client.build(build.id).await?.status.is_final() {
            if Instant::now() > deadline {
                bail!("round {round}: the aborted build did not end within 60s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (_, mut w) in workers {
        w.stop(Duration::from_secs(10)).await;
    }
    for mut web in webs {
        web.stop(Duration::from_secs(10)).await;
    }
    let stalled: Vec<f64> = rounds.iter().filter_map(|r| r.kill_to_stalled_ms).collect();
    let retried: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.kill_to_retry_running_ms)
        .collect();
    Ok(DeathReport {
        database,
        web_nodes: specs.len(),
        timed_out,
        kill_to_stalled_ms: Summary::of(&stalled),
        kill_to_retry_running_ms: Summary::of(&retried),
        rounds,
    })
}
