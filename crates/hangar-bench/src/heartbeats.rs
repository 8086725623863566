//! `hangar bench heartbeats`: N simulated workers over loopback with the
//! real client, against one web process or several on one PostgreSQL
//! database (`web_nodes`; workers spread over them round-robin, each
//! worker talking to one node as behind a Service). Each worker registers,
//! heartbeats every `heartbeat_interval` and reports its full list of
//! volumes every `report_interval`; web already holds those volumes' rows,
//! seeded before it starts, so every report is diffed against real rows.
//!
//! Web runs as processes of their own so that their CPU time and memory
//! can be read from `/proc/<pid>` apart from the load generator's (one
//! tokio runtime; the workers of one node share its client's
//! connections). PostgreSQL's own CPU is read too when its postmaster can
//! be found (`postgres_cpu`). The whole measurement repeats `runs` times
//! with fresh web processes over the same seeded rows.

mod figures;
mod sim;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{Mutex, Semaphore};

pub use figures::{
    meets, summarise, CallFigures, HeartbeatsReport, NodeFigures, PostgresCpu, RunFigures,
};
pub use sim::seed;

use crate::postgres_cpu;
use crate::procfs;
use crate::procs::{self, WebSpec};
use crate::stats::Summary;
use sim::{Samples, SimWorker};

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
    /// Web processes on the one database (more than one needs PostgreSQL).
    pub web_nodes: usize,
    /// Whole measurements, each with fresh web processes.
    pub runs: usize,
    /// A heartbeat p99 every run must be within, for the summary.
    pub target_p99_ms: Option<f64>,
    /// PostgreSQL's postmaster, when it cannot be found from the URL.
    pub postgres_pid: Option<u32>,
    /// The database already holds this fleet's rows from an earlier run
    /// (same workers and volumes): seeding is skipped, after a check.
    pub reuse_seeded: bool,
    /// How long before now the seeded volumes were made.
    pub seed_age: Duration,
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
            web_nodes: 1,
            runs: 1,
            target_p99_ms: None,
            postgres_pid: None,
            reuse_seeded: false,
            seed_age: Duration::ZERO,
        }
    }

    fn on_postgres(&self) -> bool {
        self.database_url
            .as_deref()
            .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
    }

    /// Refuses a configuration that cannot be measured, saying which flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.web_nodes == 0 {
            return Err("--web-nodes must be at least 1".into());
        }
        if self.web_nodes > 1 && !self.on_postgres() {
            return Err(format!(
                "--web-nodes {} needs a PostgreSQL --database-url: several web nodes share \
                 one PostgreSQL database, and SQLite is for one node",
                self.web_nodes
            ));
        }
        if self.runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        if self.workers == 0 {
            return Err("--workers must be at least 1".into());
        }
        if self.heartbeat_interval.is_zero() || self.report_interval.is_zero() {
            return Err("--heartbeat-interval and --report-interval must be above zero".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be above zero".into());
        }
        if let Some(t) = self.target_p99_ms {
            if !(t.is_finite() && t > 0.0) {
                return Err(format!(
                    "--target-p99-ms must be a positive number, not {t}"
                ));
            }
        }
        if self.reuse_seeded && self.database_url.is_none() {
            return Err(
                "--reuse-seeded needs a --database-url (the default database is new)".into(),
            );
        }
        if self.reuse_seeded && !self.seed_age.is_zero() {
            return Err("--seed-age applies to seeding, and --reuse-seeded seeds nothing".into());
        }
        if self.postgres_pid.is_some() && !self.on_postgres() {
            return Err("--postgres-pid needs a PostgreSQL --database-url".into());
        }
        Ok(())
    }
}

/// Runs the benchmark and returns its figures (every run's).
pub async fn run(cfg: HeartbeatsConfig) -> anyhow::Result<HeartbeatsReport> {
    cfg.validate().map_err(anyhow::Error::msg)?;
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
    let specs = web_specs(&cfg, &dir)?;
    let url = specs[0].database();
    let database = url.split(':').next().unwrap_or("").to_string();

    let seeding = Instant::now();
    if cfg.reuse_seeded {
        sim::check_seeded(&url, cfg.workers, cfg.volumes_per_worker).await?;
        eprintln!("bench heartbeats: reusing the fleet seeded in {database} before");
    } else {
        eprintln!(
            "bench heartbeats: seeding {} workers x {} volumes into {database}",
            cfg.workers, cfg.volumes_per_worker
        );
        seed(&url, cfg.workers, cfg.volumes_per_worker, cfg.seed_age).await?;
        eprintln!(
            "bench heartbeats: seeded in {:.1}s",
            seeding.elapsed().as_secs_f64()
        );
    }
    let seed_seconds = seeding.elapsed().as_secs_f64();

    let postmaster = cfg.on_postgres().then(|| find_postmaster(&cfg, &url));
    let mut report = HeartbeatsReport {
        workers: cfg.workers,
        volumes_per_worker: cfg.volumes_per_worker,
        web_nodes: cfg.web_nodes,
        heartbeat_interval_ms: cfg.heartbeat_interval.as_millis() as u64,
        report_interval_ms: cfg.report_interval.as_millis() as u64,
        database,
        seed_seconds,
        seed_age_seconds: cfg.seed_age.as_secs(),
        machine_cores: procfs::cores(),
        web_args: cfg.web_args.clone(),
        runs_planned: cfg.runs,
        runs: Vec::new(),
        worst_heartbeat_p99_ms: None,
        target_p99_ms: cfg.target_p99_ms,
        every_run_met_target: None,
    };
    for n in 1..=cfg.runs {
        if n > 1 {
            // The last run's workers must be gone in web's eyes (their
            // heartbeats past the TTL) before the same names register
            // again: web refuses a registration while the name's holder
            // is alive, as it would for a real worker's double.
            let gone = cfg.heartbeat_interval * 3 + Duration::from_secs(3);
            eprintln!("bench heartbeats: waiting {gone:?} for the last run's workers to go stale");
            tokio::time::sleep(gone).await;
        }
        let figures = one_run(&cfg, &specs, n, postmaster.as_ref()).await?;
        report.runs.push(figures);
        let last = report.runs.last().context("a run was just added")?;
        eprintln!("{}", report.run_line(last));
    }
    (report.worst_heartbeat_p99_ms, report.every_run_met_target) =
        summarise(&report.runs, cfg.target_p99_ms);
    Ok(report)
}

/// One spec per web node, each with its own port, data dir and log.
fn web_specs(cfg: &HeartbeatsConfig, dir: &std::path::Path) -> anyhow::Result<Vec<WebSpec>> {
    let mut specs = Vec::with_capacity(cfg.web_nodes);
    for n in 0..cfg.web_nodes {
        let mut spec = WebSpec::new(&cfg.bin, dir)?;
        if n > 0 {
            spec.data_dir = dir.join(format!("web-{n}"));
            spec.log = dir.join("logs").join(format!("web-{n}.log"));
        }
        spec.database_url = cfg.database_url.clone();
        spec.heartbeat_ttl = cfg.heartbeat_interval * 3;
        spec.extra_args = cfg.web_args.clone();
        std::fs::create_dir_all(&spec.data_dir)?;
        specs.push(spec);
    }
    Ok(specs)
}

/// The postmaster whose CPU is measured, or why there is none.
fn find_postmaster(cfg: &HeartbeatsConfig, url: &str) -> Result<u32, String> {
    let found = match cfg.postgres_pid {
        Some(pid) => postgres_cpu::check_postgres(pid).map(|()| pid),
        None => postgres_cpu::find_postmaster(url),
    };
    match &found {
        Ok(pid) => eprintln!("bench heartbeats: measuring PostgreSQL's CPU from postmaster {pid}"),
        Err(why) => eprintln!("bench heartbeats: PostgreSQL's CPU is not measured: {why}"),
    }
    found
}

/// Registrations in flight at once across the fleet, as a fleet's workers
/// starting together would send them. (PostgreSQL takes registrations of
/// different names at once; SQLite one at a time on its one connection.)
const REGISTERING_AT_ONCE: usize = 64;

async fn one_run(
    cfg: &HeartbeatsConfig,
    specs: &[WebSpec],
    run: usize,
    postmaster: Option<&Result<u32, String>>,
) -> anyhow::Result<RunFigures> {
    let mut webs = Vec::with_capacity(specs.len());
    for spec in specs {
        webs.push(spec.start().await?);
    }
    let pids: Vec<u32> = webs
        .iter()
        .map(|w| w.pid().context("web has no pid"))
        .collect::<anyhow::Result<_>>()?;
    let timeout = Duration::from_secs(30);
    let clients: Vec<_> = specs
        .iter()
        .map(|s| procs::worker_client(&s.url(), timeout))
        .collect::<anyhow::Result<_>>()?;
    let samples = Arc::new(Mutex::new(Samples {
        heartbeat_ms: vec![Vec::new(); specs.len()],
        ..Samples::default()
    }));
    let registering = Arc::new(Semaphore::new(REGISTERING_AT_ONCE));
    let begin = tokio::time::Instant::now();
    let measure_from = Instant::now() + cfg.warmup;
    let until = measure_from + cfg.duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut per_node = vec![0usize; specs.len()];
    for i in 0..cfg.workers {
        let node = i % specs.len();
        per_node[node] += 1;
        // First ticks spread evenly over each interval.
        let spread = |interval: Duration| interval.mul_f64(i as f64 / cfg.workers as f64);
        let w = SimWorker {
            i,
            node,
            volumes: cfg.volumes_per_worker,
            heartbeat_interval: cfg.heartbeat_interval,
            report_interval: cfg.report_interval,
            register_at: begin + spread(cfg.heartbeat_interval),
            first_report_at: begin + cfg.heartbeat_interval + spread(cfg.report_interval),
            measure_from,
            until,
            fleet_started: begin.into_std(),
            fleet_size: cfg.workers,
        };
        tasks.spawn(sim::simulate_worker(
            w,
            clients[node].clone(),
            registering.clone(),
            samples.clone(),
        ));
    }
    eprintln!(
        "bench heartbeats: run {run}: load running on {} web node(s); warming up for {:?}, then measuring for {:?}",
        specs.len(),
        cfg.warmup,
        cfg.duration
    );
    tokio::time::sleep_until(measure_from.into()).await;
    let load_start = figures::loadavg();
    let web_cpu_0 = cpu_of(&pids)?;
    let pg_cpu_0 = pg_cpu(postmaster);
    let me_cpu_0 = procfs::cpu_seconds(std::process::id()).unwrap_or(0.0);
    let window = Instant::now();
    let mut rss_max = vec![0u64; pids.len()];
    while Instant::now() < until {
        for (k, pid) in pids.iter().enumerate() {
            if let Some(r) = procfs::rss(*pid) {
                rss_max[k] = rss_max[k].max(r.now);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let web_cpu_1 = cpu_of(&pids)?;
    let pg_cpu_1 = pg_cpu(postmaster);
    let me_cpu_1 = procfs::cpu_seconds(std::process::id()).unwrap_or(0.0);
    let measured = window.elapsed().as_secs_f64();
    let load_end = figures::loadavg();
    let rss: Vec<procfs::Rss> = pids
        .iter()
        .map(|p| procfs::rss(*p).unwrap_or_default())
        .collect();
    let mut workers_failed = 0;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if workers_failed == 0 {
                    eprintln!("bench heartbeats: a simulated worker stopped: {e:#}");
                }
                workers_failed += 1;
            }
            Err(_) => workers_failed += 1,
        }
    }
    for web in &mut webs {
        web.stop(Duration::from_secs(10)).await;
    }
    if workers_failed > 0 {
        eprintln!("bench heartbeats: {workers_failed} simulated workers stopped early");
    }
    let s = samples.lock().await;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let nodes: Vec<NodeFigures> = (0..pids.len())
        .map(|k| NodeFigures {
            node: k + 1,
            workers: per_node[k],
            heartbeat_latency_ms: Summary::of(&s.heartbeat_ms[k]),
            cpu_cores: (web_cpu_1[k] - web_cpu_0[k]) / measured,
            rss_mib: mib(rss[k].now.max(rss_max[k])),
            rss_peak_mib: mib(rss[k].peak),
        })
        .collect();
    let all_heartbeats: Vec<f64> = s.heartbeat_ms.iter().flatten().copied().collect();
    let due = |interval: Duration| {
        (cfg.workers as f64 * measured / interval.as_secs_f64()).round() as usize
    };
    let postgres_cpu = postmaster.map(|found| match (found, pg_cpu_0, pg_cpu_1) {
        (Ok(pid), Some(a), Some(b)) => PostgresCpu::Measured {
            postmaster_pid: *pid,
            cores: (b - a) / measured,
        },
        (Ok(pid), _, _) => PostgresCpu::NotMeasured {
            why: format!("postmaster {pid} could not be read"),
        },
        (Err(why), _, _) => PostgresCpu::NotMeasured { why: why.clone() },
    });
    Ok(RunFigures {
        run,
        measured_seconds: measured,
        heartbeats: CallFigures {
            count: all_heartbeats.len(),
            errors: s.heartbeat_errors,
            due: due(cfg.heartbeat_interval),
            latency_ms: Summary::of(&all_heartbeats),
        },
        reports: CallFigures {
            count: s.report_ms.len(),
            errors: s.report_errors,
            due: due(cfg.report_interval),
            latency_ms: Summary::of(&s.report_ms),
        },
        send_lag_ms: Summary::of(&s.send_lag_ms),
        web_cpu_cores: nodes.iter().map(|n| n.cpu_cores).sum(),
        nodes,
        postgres_cpu,
        load_generator_cpu_cores: (me_cpu_1 - me_cpu_0) / measured,
        load_average_start: load_start,
        load_average_end: load_end,
        workers_failed,
        all_registered_after_s: s.all_registered_after_s,
    })
}

fn cpu_of(pids: &[u32]) -> anyhow::Result<Vec<f64>> {
    pids.iter()
        .map(|p| procfs::cpu_seconds(*p).with_context(|| format!("read web {p}'s cpu time")))
        .collect()
}

fn pg_cpu(postmaster: Option<&Result<u32, String>>) -> Option<f64> {
    match postmaster {
        Some(Ok(pid)) => postgres_cpu::tree_cpu_seconds(*pid),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_that_cannot_be_measured_are_refused_with_the_flag() {
        let pg = Some("postgres://postgres@127.0.0.1:5432/db".to_string());
        let sqlite = Some("sqlite:///tmp/x.db".to_string());
        type Change = Box<dyn Fn(&mut HeartbeatsConfig)>;
        let cases: Vec<(&str, Change, Option<&str>)> = vec![
            ("defaults", Box::new(|_| {}), None),
            (
                "three nodes on postgres",
                Box::new({
                    let pg = pg.clone();
                    move |c| {
                        c.web_nodes = 3;
                        c.database_url = pg.clone();
                    }
                }),
                None,
            ),
            (
                "two nodes, default sqlite",
                Box::new(|c| c.web_nodes = 2),
                Some("--web-nodes 2 needs a PostgreSQL"),
            ),
            (
                "two nodes, sqlite url",
                Box::new({
                    let s = sqlite.clone();
                    move |c| {
                        c.web_nodes = 2;
                        c.database_url = s.clone();
                    }
                }),
                Some("SQLite is for one node"),
            ),
            (
                "no node",
                Box::new(|c| c.web_nodes = 0),
                Some("--web-nodes must be at least 1"),
            ),
            (
                "no run",
                Box::new(|c| c.runs = 0),
                Some("--runs must be at least 1"),
            ),
            (
                "no worker",
                Box::new(|c| c.workers = 0),
                Some("--workers must be at least 1"),
            ),
            (
                "bad target",
                Box::new(|c| c.target_p99_ms = Some(-1.0)),
                Some("--target-p99-ms"),
            ),
            (
                "pid without postgres",
                Box::new(|c| c.postgres_pid = Some(1)),
                Some("--postgres-pid needs"),
            ),
            (
                "zero interval",
                Box::new(|c| c.heartbeat_interval = Duration::ZERO),
                Some("--heartbeat-interval"),
            ),
        ];
        for (what, change, refusal) in cases {
            let mut cfg = HeartbeatsConfig::new(PathBuf::from("hangar"));
            change(&mut cfg);
            match (cfg.validate(), refusal) {
                (Ok(()), None) => {}
                (Err(e), Some(part)) => assert!(e.contains(part), "{what}: {e}"),
                (got, want) => panic!("{what}: got {got:?}, wanted a refusal containing {want:?}"),
            }
        }
    }
}
