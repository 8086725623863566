//! `hangar bench scheduling`: how long a new version takes to become the
//! builds it triggers, and web's memory, as a pipeline's history grows.
//!
//! For each scale the benchmark seeds a fresh database with the pipeline
//! of [`history`] (100 jobs over 20 resources) and its history, starts web
//! as its own process, and then, round after round:
//!
//! 1. saves a new version of one resource (as a check does), and times
//!    until the `unit` job reading it has a new build;
//! 2. records a succeeded build of that `unit` job with the new version
//!    (as a finished build does), and times until every job `passed`
//!    through it has a new build.
//!
//! Web runs in its own process. On PostgreSQL the benchmark sends the
//! scheduler's wake-up after each change, as the node whose check saved
//! the version (or whose build finished) does for every node. On SQLite
//! there is no channel between processes: web's scheduler finds the change
//! at its next look (`--scheduler-interval`, 10 ms here), which the
//! figures include.
//!
//! Web's resident memory is sampled throughout. Nothing here asserts a
//! time; the figures are printed.

pub mod history;
pub mod spread;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hangar_core::pipeline::parse_pipeline;
use hangar_store::{HistoricBuild, Store};
use serde::Serialize;

use crate::procfs;
use crate::procs::{now_ms, WebSpec};
use crate::stats::{fmt_opt, Summary};

const TEAM: &str = "main";
const PIPELINE: &str = "bench";

#[derive(Debug, Clone)]
pub struct SchedulingConfig {
    /// The `hangar` binary to start web from.
    pub bin: PathBuf,
    /// History sizes as multiples of the target's (100,000 versions and
    /// 50,000 builds at 1.0).
    pub scales: Vec<f64>,
    /// Rounds measured per scale.
    pub rounds: usize,
    /// PostgreSQL URL; default SQLite in the scratch dir. (On PostgreSQL
    /// each scale starts by destroying the pipeline of the one before.)
    pub database_url: Option<String>,
    /// How often web's scheduler looks for work (`--scheduler-interval`):
    /// the benchmark cannot ring another process's wake-up, so a new
    /// version waits for the next look, up to this long.
    pub scheduler_interval: Duration,
    pub dir: Option<PathBuf>,
}

impl SchedulingConfig {
    pub fn new(bin: PathBuf) -> SchedulingConfig {
        SchedulingConfig {
            bin,
            scales: vec![0.1, 1.0],
            rounds: 40,
            database_url: None,
            scheduler_interval: Duration::from_millis(10),
            dir: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleFigures {
    pub scale: f64,
    pub versions: usize,
    pub builds: usize,
    pub seed_seconds: f64,
    /// New version → the build of the job reading it, ms.
    pub new_version_ms: Summary,
    /// A passed build recorded → every downstream job's build, ms.
    pub passed_ms: Summary,
    pub rounds_timed_out: usize,
    pub web_rss_mib: f64,
    pub web_rss_peak_mib: f64,
    pub web_cpu_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SchedulingReport {
    pub database: String,
    pub scheduler_interval_ms: u64,
    pub scales: Vec<ScaleFigures>,
}

impl SchedulingReport {
    pub fn lines(&self) -> String {
        let mut out = String::new();
        for s in &self.scales {
            out.push_str(&format!(
                "scheduling: {} versions, {} builds ({}; scheduler every {} ms): \
                 new version -> build p50 {} ms p99 {} ms max {} ms; \
                 passed -> downstream builds p50 {} ms p99 {} ms max {} ms ({} rounds, {} timed out); \
                 web rss {:.1} MiB (peak {:.1}), cpu {:.2} s; seeded in {:.1} s\n",
                s.versions,
                s.builds,
                self.database,
                self.scheduler_interval_ms,
                fmt_opt(s.new_version_ms.p50, 1),
                fmt_opt(s.new_version_ms.p99, 1),
                fmt_opt(s.new_version_ms.max, 1),
                fmt_opt(s.passed_ms.p50, 1),
                fmt_opt(s.passed_ms.p99, 1),
                fmt_opt(s.passed_ms.max, 1),
                s.new_version_ms.count,
                s.rounds_timed_out,
                s.web_rss_mib,
                s.web_rss_peak_mib,
                s.web_cpu_seconds,
                s.seed_seconds,
            ));
        }
        out
    }
}

pub async fn run(cfg: SchedulingConfig) -> anyhow::Result<SchedulingReport> {
    let mut scales = Vec::new();
    let mut database = String::new();
    for &scale in &cfg.scales {
        let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
        let dir = match &cfg.dir {
            Some(d) => d.join(format!("scale-{scale}")),
            None => tmp.path().to_path_buf(),
        };
        std::fs::create_dir_all(&dir)?;
        let figures = run_scale(&cfg, scale, &dir, &mut database).await?;
        eprintln!(
            "{}",
            SchedulingReport {
                database: database.clone(),
                scheduler_interval_ms: cfg.scheduler_interval.as_millis() as u64,
                scales: vec![figures.clone()],
            }
            .lines()
            .trim_end()
        );
        scales.push(figures);
    }
    Ok(SchedulingReport {
        database,
        scheduler_interval_ms: cfg.scheduler_interval.as_millis() as u64,
        scales,
    })
}

async fn run_scale(
    cfg: &SchedulingConfig,
    scale: f64,
    dir: &std::path::Path,
    database: &mut String,
) -> anyhow::Result<ScaleFigures> {
    let versions_per_resource = ((5000.0 * scale) as usize).max(10);
    let builds_per_job = ((500.0 * scale) as usize).max(1);
    let mut spec = WebSpec::new(&cfg.bin, dir)?;
    spec.database_url = cfg.database_url.clone();
    spec.extra_args = vec![
        format!(
            "--scheduler-interval={}",
            crate::procs::flag_duration(cfg.scheduler_interval)
        ),
        "--gc-interval=1h".into(),
    ];
    std::fs::create_dir_all(&spec.data_dir)?;
    let url = spec.database();
    *database = url.split(':').next().unwrap_or("").to_string();

    eprintln!(
        "bench scheduling: seeding {} versions and {} builds into {database}",
        versions_per_resource * history::RESOURCES,
        builds_per_job * 100
    );
    let seeding = Instant::now();
    let store = Store::open(&url).await?;
    if store.pipeline(TEAM, PIPELINE).await.is_ok() {
        store.destroy_pipeline(TEAM, PIPELINE, now_ms()).await?;
    }
    let config = parse_pipeline(&history::pipeline_yaml())
        .map_err(|e| anyhow::anyhow!("the benchmark's pipeline: {e:?}"))?
        .config;
    store
        .set_pipeline(TEAM, PIPELINE, &config, None, now_ms())
        .await?;
    let filled = history::fill(
        &store,
        TEAM,
        PIPELINE,
        versions_per_resource,
        builds_per_job,
        now_ms(),
    )
    .await?;
    store
        .set_pipeline_paused(TEAM, PIPELINE, false, now_ms())
        .await?;
    let seed_seconds = seeding.elapsed().as_secs_f64();

    let mut web = spec.start().await?;
    let pid = web.pid().ok_or_else(|| anyhow::anyhow!("web has no pid"))?;
    // Web's first look at every job: nothing is due (the history's last
    // builds took the newest versions).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu_before = procfs::cpu_seconds(pid).unwrap_or(0.0);

    let jobs = history::jobs();
    let mut new_version = Vec::new();
    let mut passed = Vec::new();
    let mut timed_out = 0;
    let mut rss_peak = 0u64;
    let timeout = Duration::from_secs(10);
    for round in 0..cfg.rounds {
        let r = round % history::RESOURCES;
        let resource = store
            .resource(TEAM, PIPELINE, &history::resource_name(r))
            .await?;
        let unit = store.job(TEAM, PIPELINE, &format!("unit-{r:02}")).await?;
        let downstream: Vec<_> = jobs
            .iter()
            .filter(|j| j.gets.iter().any(|g| g.passed.contains(&unit.name)))
            .map(|j| j.name.clone())
            .collect();
        let mut downstream_ids = Vec::new();
        for name in &downstream {
            downstream_ids.push(store.job(TEAM, PIPELINE, name).await?.id);
        }
        let before = latest_numbers(&store, &[unit.id]).await?;

        // 1. A new version, as a check saves it.
        let version = serde_json::json!({"v": format!("new-{round}")});
        let ids = retry_busy(|| {
            store.insert_versions(resource.id, std::slice::from_ref(&version), now_ms())
        })
        .await?;
        // Timed from the version's commit: what a check's saving is. On
        // PostgreSQL the check's node then sends the scheduler's wake-up
        // to every node (this process is that node here); on SQLite web
        // finds the version at its next tick.
        let start = Instant::now();
        store.notify_scheduler().await?;
        match wait_for_new_builds(&store, &[unit.id], &before, timeout).await? {
            true => new_version.push(start.elapsed().as_secs_f64() * 1000.0),
            false => timed_out += 1,
        }
        // No worker runs the builds: aborted, as a user would, so that
        // rounds of builds waiting for a worker do not pile up in web.
        abort_newest(&store, &[unit.id]).await?;

        // 2. The unit job's build with it succeeded, as a finished build
        //    records it.
        let before = latest_numbers(&store, &downstream_ids).await?;
        let build = HistoricBuild {
            inputs: vec![(resource.name.clone(), resource.id, ids[0])],
            outputs: vec![],
        };
        let unit_name = format!("{PIPELINE}/{}", unit.name);
        retry_busy(|| {
            store.insert_succeeded_job_builds(
                unit.id,
                &unit_name,
                std::slice::from_ref(&build),
                now_ms(),
            )
        })
        .await?;
        let start = Instant::now();
        // As the node that finished the build does.
        store.notify_scheduler().await?;
        match wait_for_new_builds(&store, &downstream_ids, &before, timeout).await? {
            true => passed.push(start.elapsed().as_secs_f64() * 1000.0),
            false => timed_out += 1,
        }
        abort_newest(&store, &downstream_ids).await?;
        if let Some(rss) = procfs::rss(pid) {
            rss_peak = rss_peak.max(rss.peak);
        }
    }
    let cpu = procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    let rss = procfs::rss(pid).unwrap_or_default();
    web.stop(Duration::from_secs(10)).await;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Ok(ScaleFigures {
        scale,
        versions: versions_per_resource * history::RESOURCES,
        builds: filled.builds,
        seed_seconds,
        new_version_ms: Summary::of(&new_version),
        passed_ms: Summary::of(&passed),
        rounds_timed_out: timed_out,
        web_rss_mib: mib(rss.now),
        web_rss_peak_mib: mib(rss_peak.max(rss.peak)),
        web_cpu_seconds: cpu,
    })
}

/// Runs a write again while SQLite answers that another connection (web,
/// in its own process) wrote since this one's transaction began.
async fn retry_busy<T, F, Fut>(mut write: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, hangar_store::StoreError>>,
{
    let mut tries = 0;
    loop {
        match write().await {
            Ok(v) => return Ok(v),
            Err(e) if tries < 100 && e.to_string().contains("database is locked") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Each job's newest build number (0: none).
async fn latest_numbers(store: &Store, jobs: &[i64]) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::with_capacity(jobs.len());
    for &job in jobs {
        let latest = store.job_builds(job, 1).await?;
        out.push(latest.first().map_or(0, |b| b.number));
    }
    Ok(out)
}

/// Asks for each job's newest build to be aborted (if it has not
/// finished).
async fn abort_newest(store: &Store, jobs: &[i64]) -> anyhow::Result<()> {
    for &job in jobs {
        if let Some(b) = store.job_builds(job, 1).await?.first() {
            let id = b.build.id;
            retry_busy(|| store.request_build_abort(id, now_ms())).await?;
        }
    }
    Ok(())
}

/// Polls until every job has a build newer than `before`; false on
/// timeout.
async fn wait_for_new_builds(
    store: &Store,
    jobs: &[i64],
    before: &[i64],
    timeout: Duration,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<(i64, i64)> = jobs.iter().copied().zip(before.iter().copied()).collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (job, was) in pending {
            let now = store.job_builds(job, 1).await?;
            if now.first().map_or(0, |b| b.number) <= was {
                still.push((job, was));
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(true)
}
