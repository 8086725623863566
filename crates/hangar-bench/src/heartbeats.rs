//! `hangar bench heartbeats`: one web process, N simulated workers over
//! loopback with the real client. Each registers, heartbeats every
//! `heartbeat_interval` and reports its full list of volumes every
//! `report_interval`; web already holds those volumes' rows, seeded before
//! it starts, so every report is diffed against real rows.
//!
//! Web runs as its own process so that its CPU time and memory can be read
//! from `/proc/<pid>` apart from the load generator's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hangar_api::{Heartbeat, RegisterWorker, VolumeReport};
use hangar_client::Client;
use hangar_core::volumes::OwnerKind;
use hangar_store::{NewVolume, Store, WorkerInfo};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::procfs;
use crate::procs::{self, now_ms, WebSpec};
use crate::stats::{fmt_opt, Summary};

#[derive(Debug, Clone)]
pub struct HeartbeatsConfig {
    /// The `hangar` binary to start web from.
    pub bin: PathBuf,
    pub workers: usize,
    pub volumes_per_worker: usize,
    pub heartbeat_interval: Duration,
    pub report_interval: Duration,
    /// How long load runs before measuring starts (every worker has
    /// registered and reported once by then).
    pub warmup: Duration,
    /// How long figures are collected.
    pub duration: Duration,
    /// PostgreSQL (or SQLite) URL; default: SQLite in the scratch dir.
    pub database_url: Option<String>,
    /// Scratch dir; default: a temporary one, removed at the end.
    pub dir: Option<PathBuf>,
    /// Extra flags for `hangar web` (e.g. `--gc-interval=1h`).
    pub web_args: Vec<String>,
}

impl HeartbeatsConfig {
    pub fn new(bin: PathBuf) -> HeartbeatsConfig {
        HeartbeatsConfig {
            bin,
            workers: 1000,
            volumes_per_worker: 1000,
            heartbeat_interval: Duration::from_secs(5),
            report_interval: Duration::from_secs(30),
            warmup: Duration::from_secs(35),
            duration: Duration::from_secs(60),
            database_url: None,
            dir: None,
            web_args: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CallFigures {
    pub count: usize,
    pub errors: usize,
    pub latency_ms: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatsReport {
    pub workers: usize,
    pub volumes_per_worker: usize,
    pub heartbeat_interval_ms: u64,
    pub report_interval_ms: u64,
    pub measured_seconds: f64,
    pub database: String,
    pub seed_seconds: f64,
    pub heartbeats: CallFigures,
    pub reports: CallFigures,
    /// Web's CPU time over the window divided by the window: 1.0 = one core.
    pub web_cpu_cores: f64,
    /// The load generator's own CPU (it shares the machine with web).
    pub load_generator_cpu_cores: f64,
    pub web_rss_mib: f64,
    pub web_rss_peak_mib: f64,
    pub machine_cores: usize,
    pub web_args: Vec<String>,
}

impl HeartbeatsReport {
    pub fn line(&self) -> String {
        format!(
            "heartbeats: {} workers x {} volumes ({}; hb every {}ms, report every {}ms, {:.0}s measured): \
             heartbeat p50 {} ms p99 {} ms max {} ms ({} calls, {} errors); \
             report p50 {} ms p99 {} ms ({} calls, {} errors); \
             web cpu {:.2} cores, rss {:.1} MiB (peak {:.1}); load generator cpu {:.2} cores",
            self.workers,
            self.volumes_per_worker,
            self.database,
            self.heartbeat_interval_ms,
            self.report_interval_ms,
            self.measured_seconds,
            fmt_opt(self.heartbeats.latency_ms.p50, 2),
            fmt_opt(self.heartbeats.latency_ms.p99, 2),
            fmt_opt(self.heartbeats.latency_ms.max, 2),
            self.heartbeats.count,
            self.heartbeats.errors,
            fmt_opt(self.reports.latency_ms.p50, 2),
            fmt_opt(self.reports.latency_ms.p99, 2),
            self.reports.count,
            self.reports.errors,
            self.web_cpu_cores,
            self.web_rss_mib,
            self.web_rss_peak_mib,
            self.load_generator_cpu_cores,
        )
    }
}

/// The name, state identity and volume handles of simulated worker `i`.
fn sim_name(i: usize) -> String {
    format!("sim-{i:04}")
}

fn sim_identity(i: usize) -> String {
    format!("sim-identity-{i:04}")
}

/// A handle shaped like a real one (a UUID), unique per worker and index.
fn sim_handle(worker: usize, volume: usize) -> String {
    format!("{worker:08x}-0000-4000-8000-{volume:012x}")
}

fn registration(i: usize, volumes: usize) -> anyhow::Result<RegisterWorker> {
    // Built from JSON so fields added to the wire type later take their
    // defaults here too.
    Ok(serde_json::from_value(serde_json::json!({
        "name": sim_name(i),
        "state_identity": sim_identity(i),
        "platform": "linux",
        "tags": ["sim"],
        "version": env!("CARGO_PKG_VERSION"),
        "volumes": volumes,
    }))?)
}

fn heartbeat(generation: i64, volumes: usize) -> anyhow::Result<Heartbeat> {
    Ok(serde_json::from_value(serde_json::json!({
        "generation": generation,
        "containers": 0,
        "volumes": volumes,
    }))?)
}

fn report(generation: i64, handles: &[String]) -> anyhow::Result<VolumeReport> {
    Ok(serde_json::from_value(serde_json::json!({
        "generation": generation,
        "handles": handles,
    }))?)
}

/// Registers every simulated worker in the database and inserts its
/// volumes' rows, before web starts.
pub async fn seed(url: &str, workers: usize, volumes_per_worker: usize) -> anyhow::Result<()> {
    let store = Store::open(url)
        .await
        .with_context(|| format!("open {url} to seed it"))?;
    let now = now_ms();
    for i in 0..workers {
        let info = WorkerInfo {
            name: sim_name(i),
            state_identity: sim_identity(i),
            platform: "linux".into(),
            tags: vec!["sim".into()],
            team: None,
            version: env!("CARGO_PKG_VERSION").into(),
            resource_types_json: "[]".into(),
            ephemeral: false,
            containers: 0,
            volumes: volumes_per_worker as i64,
            api_url: None,
        };
        store.register_worker(&info, now).await?;
        let rows: Vec<NewVolume> = (0..volumes_per_worker)
            .map(|v| seeded_volume(i, v))
            .collect();
        store.insert_created_volumes(&rows, now).await?;
    }
    store.close().await;
    Ok(())
}

/// Volume `v` of simulated worker `i`, in a mix like a busy worker's: of
/// every ten, four resource caches, three task caches, two step volumes
/// made copy-on-write from the first two caches, one build artifact.
fn seeded_volume(i: usize, v: usize) -> NewVolume {
    let base = v - v % 10;
    let (owner_kind, owner_id, parent) = match v % 10 {
        0..=3 => (OwnerKind::ResourceCache, format!("resource/{v}"), None),
        4..=6 => (OwnerKind::TaskCache, format!("bench/task/cache-{v}"), None),
        7 | 8 => (
            OwnerKind::Container,
            format!("container-{v}"),
            Some(sim_handle(i, base + v % 10 - 7)),
        ),
        _ => (OwnerKind::Artifact, format!("build/{v}"), None),
    };
    NewVolume {
        handle: sim_handle(i, v),
        worker: sim_name(i),
        strategy: if parent.is_some() {
            hangar_api::Strategy::Cow
        } else {
            hangar_api::Strategy::Empty
        },
        parent,
        owner_kind,
        owner_id: Some(owner_id),
    }
}

#[derive(Default)]
struct Samples {
    heartbeat_ms: Vec<f64>,
    heartbeat_errors: usize,
    report_ms: Vec<f64>,
    report_errors: usize,
}

/// One simulated worker: registers, then heartbeats and reports on its
/// intervals (first ticks spread over the interval) until `until`.
#[allow(clippy::too_many_arguments)]
async fn simulate_worker(
    i: usize,
    client: Client,
    volumes: usize,
    cfg: Arc<HeartbeatsConfig>,
    offset_hb: Duration,
    offset_report: Duration,
    measure_from: Instant,
    until: Instant,
    samples: Arc<Mutex<Samples>>,
) -> anyhow::Result<()> {
    let name = sim_name(i);
    let handles: Vec<String> = (0..volumes).map(|v| sim_handle(i, v)).collect();
    let fleet = client;
    let registered = fleet.register(&registration(i, volumes)?).await?;
    let mut generation = registered.generation;
    let mut client = fleet.with_token(&registered.token);
    let start = tokio::time::Instant::now();
    let mut hb = tokio::time::interval_at(start + offset_hb, cfg.heartbeat_interval);
    hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rep = tokio::time::interval_at(start + offset_report, cfg.report_interval);
    rep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let is_heartbeat = tokio::select! {
            _ = hb.tick() => true,
            _ = rep.tick() => false,
        };
        let sent = Instant::now();
        if sent >= until {
            return Ok(());
        }
        let result = if is_heartbeat {
            client
                .heartbeat(&name, &heartbeat(generation, volumes)?)
                .await
                .map(|_| ())
        } else {
            client
                .report_volumes(&name, &report(generation, &handles)?)
                .await
                .map(|_| ())
        };
        let ms = sent.elapsed().as_secs_f64() * 1000.0;
        if let Err(e) = &result {
            if matches!(
                e.code(),
                Some(hangar_api::codes::REREGISTER | hangar_api::codes::NOT_FOUND)
            ) {
                let registered = fleet.register(&registration(i, volumes)?).await?;
                generation = registered.generation;
                client = fleet.with_token(&registered.token);
            }
        }
        if sent >= measure_from {
            let mut s = samples.lock().await;
            match (is_heartbeat, result.is_ok()) {
                (true, true) => s.heartbeat_ms.push(ms),
                (true, false) => s.heartbeat_errors += 1,
                (false, true) => s.report_ms.push(ms),
                (false, false) => s.report_errors += 1,
            }
        }
    }
}

/// Runs the benchmark and returns its figures.
pub async fn run(cfg: HeartbeatsConfig) -> anyhow::Result<HeartbeatsReport> {
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
    let mut spec = WebSpec::new(&cfg.bin, &dir)?;
    spec.database_url = cfg.database_url.clone();
    spec.heartbeat_ttl = cfg.heartbeat_interval * 3;
    spec.extra_args = cfg.web_args.clone();
    std::fs::create_dir_all(&spec.data_dir)?;
    let url = spec.database();
    let database = url.split(':').next().unwrap_or("").to_string();

    eprintln!(
        "bench heartbeats: seeding {} workers x {} volumes into {database}",
        cfg.workers, cfg.volumes_per_worker
    );
    let seeding = Instant::now();
    seed(&url, cfg.workers, cfg.volumes_per_worker).await?;
    let seed_seconds = seeding.elapsed().as_secs_f64();
    eprintln!("bench heartbeats: seeded in {seed_seconds:.1}s; starting web");

    let mut web = spec.start().await?;
    let web_pid = web.pid().context("web has no pid")?;
    let cfg = Arc::new(cfg);
    let samples = Arc::new(Mutex::new(Samples::default()));
    let begin = Instant::now();
    let measure_from = begin + cfg.warmup;
    let until = measure_from + cfg.duration;
    let mut tasks = tokio::task::JoinSet::new();
    let timeout = Duration::from_secs(30);
    for i in 0..cfg.workers {
        // Each simulated worker has its own client (its own connection),
        // as real workers do.
        let client = procs::worker_client(&spec.url(), timeout)?;
        let spread = |interval: Duration| interval.mul_f64(i as f64 / cfg.workers as f64);
        tasks.spawn(simulate_worker(
            i,
            client,
            cfg.volumes_per_worker,
            cfg.clone(),
            spread(cfg.heartbeat_interval),
            spread(cfg.report_interval),
            measure_from,
            until,
            samples.clone(),
        ));
    }
    eprintln!(
        "bench heartbeats: load running; warming up for {:?}, then measuring for {:?}",
        cfg.warmup, cfg.duration
    );
    tokio::time::sleep_until(measure_from.into()).await;
    let web_cpu_0 = procfs::cpu_seconds(web_pid).context("read web's cpu time")?;
    let me_cpu_0 = procfs::cpu_seconds(std::process::id()).unwrap_or(0.0);
    let window = Instant::now();
    let mut rss_max = 0u64;
    while Instant::now() < until {
        if let Some(r) = procfs::rss(web_pid) {
            rss_max = rss_max.max(r.now);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let web_cpu_1 = procfs::cpu_seconds(web_pid).context("read web's cpu time")?;
    let me_cpu_1 = procfs::cpu_seconds(std::process::id()).unwrap_or(0.0);
    let measured = window.elapsed().as_secs_f64();
    let rss = procfs::rss(web_pid).unwrap_or_default();
    let mut failures = 0;
    while let Some(done) = tasks.join_next().await {
        if !matches!(done, Ok(Ok(()))) {
            failures += 1;
        }
    }
    web.stop(Duration::from_secs(10)).await;
    if failures > 0 {
        eprintln!("bench heartbeats: {failures} simulated workers stopped early (see errors)");
    }
    let s = samples.lock().await;
    Ok(HeartbeatsReport {
        workers: cfg.workers,
        volumes_per_worker: cfg.volumes_per_worker,
        heartbeat_interval_ms: cfg.heartbeat_interval.as_millis() as u64,
        report_interval_ms: cfg.report_interval.as_millis() as u64,
        measured_seconds: measured,
        database,
        seed_seconds,
        heartbeats: CallFigures {
            count: s.heartbeat_ms.len(),
            errors: s.heartbeat_errors,
            latency_ms: Summary::of(&s.heartbeat_ms),
        },
        reports: CallFigures {
            count: s.report_ms.len(),
            errors: s.report_errors,
            latency_ms: Summary::of(&s.report_ms),
        },
        web_cpu_cores: (web_cpu_1 - web_cpu_0) / measured,
        load_generator_cpu_cores: (me_cpu_1 - me_cpu_0) / measured,
        web_rss_mib: rss.now.max(rss_max) as f64 / (1024.0 * 1024.0),
        web_rss_peak_mib: rss.peak as f64 / (1024.0 * 1024.0),
        machine_cores: procfs::cores(),
        web_args: cfg.web_args.clone(),
    })
}
