//! `hangar bench dashboard`: how long web takes to answer each dashboard
//! page at the size PRODUCT.md names, 1,000 workers and 100 pipelines.
//!
//! The fleet and the pipelines are seeded through the store ([`seed`]:
//! 1,000 registered workers, 100 pipelines of 5 jobs chained by
//! `passed`, a succeeded build of each first job, 1,000 log lines in one build),
//! then web is started as its own process on that database and every
//! page is fetched as a logged-in browser fetches it, round after round
//! (pages interleaved, so a noisy moment of the machine falls on all of
//! them alike). A page's time runs from the request sent to the last
//! byte of its HTML read, over loopback: web's rendering and queries,
//! plus a loopback round trip. Web's loops that would write meanwhile
//! (checks, scheduling, GC, workers going stalled) are set far apart, so
//! what is timed is the pages. Nothing here asserts a time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hangar_core::build::BuildEventKind;
use hangar_core::pipeline::parse_pipeline;
use hangar_store::{HistoricBuild, Store, WorkerInfo};
use serde::Serialize;

use crate::procs::{now_ms, WebSpec, ADMIN_TOKEN};
use crate::stats::{fmt_opt, Summary};

/// The target: each page within this, at p99.
pub const TARGET_MS: f64 = 100.0;
/// The pipeline whose pages are fetched (the middle one).
pub const SHOWN_PIPELINE: &str = "pipeline-050";
/// The worker whose page is fetched.
pub const SHOWN_WORKER: &str = "worker-0500";
/// Log lines in the shown pipeline's build.
pub const LOG_LINES: usize = 1000;

/// What [`seed`] made.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub workers: usize,
    pub pipelines: usize,
    /// The id of the shown pipeline's `job-0` build #1.
    pub shown_build: i64,
}

/// The seeded pipelines' config: a resource and 5 jobs, each passed
/// through the one before.
pub fn pipeline_yaml() -> String {
    let mut c = String::from("resources:\n- name: repo\n  type: mock\n  source: {}\njobs:\n");
    for j in 0..5 {
        c.push_str(&format!("- name: job-{j}\n  plan:\n  - get: repo\n"));
        if j > 0 {
            c.push_str(&format!("    passed: [job-{}]\n", j - 1));
        }
    }
    c
}

pub fn pipeline_name(p: usize) -> String {
    format!("pipeline-{p:03}")
}

pub fn worker_name(i: usize) -> String {
    format!("worker-{i:04}")
}

fn worker(i: usize) -> WorkerInfo {
    WorkerInfo {
        name: worker_name(i),
        state_identity: format!("disk-{i}"),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 12,
        volumes: 40,
        api_url: None,
        allow_privileged: false,
    }
}

/// Seeds `workers` workers and `pipelines` unpaused pipelines of team
/// `main` into `store`, each pipeline with a succeeded build of its
/// `job-0`, and [`LOG_LINES`] log lines
/// in the build of [`SHOWN_PIPELINE`] when there is one.
pub async fn seed(store: &Store, workers: usize, pipelines: usize) -> anyhow::Result<Seeded> {
    for i in 0..workers {
        store.register_worker(&worker(i), now_ms()).await?;
    }
    let config = parse_pipeline(&pipeline_yaml())
        .map_err(|e| anyhow::anyhow!("the benchmark's pipeline: {e:?}"))?
        .config;
    let mut shown_build = 0;
    for p in 0..pipelines {
        let name = pipeline_name(p);
        store
            .set_pipeline("main", &name, &config, None, now_ms())
            .await?;
        store
            .set_pipeline_paused("main", &name, false, now_ms())
            .await?;
        let job = store.job("main", &name, "job-0").await?;
        // Finished, as most builds a dashboard shows are: web has nothing
        // to run while its pages are timed.
        let ids = store
            .insert_succeeded_job_builds(
                job.id,
                &format!("{name}/job-0"),
                &[HistoricBuild {
                    inputs: vec![],
                    outputs: vec![],
                }],
                now_ms(),
            )
            .await?;
        if name == SHOWN_PIPELINE {
            shown_build = ids.first().copied().unwrap_or_default();
        }
    }
    if shown_build != 0 {
        for i in 0..LOG_LINES {
            store
                .append_build_event(
                    shown_build,
                    Some("0"),
                    BuildEventKind::Log,
                    &format!("line {i} of the build's output\n"),
                    now_ms(),
                )
                .await?;
        }
    }
    Ok(Seeded {
        workers,
        pipelines,
        shown_build,
    })
}

/// The pages timed, as paths.
pub fn pages(build: i64) -> Vec<String> {
    let p = format!("/teams/main/pipelines/{SHOWN_PIPELINE}");
    vec![
        "/".to_string(),
        "/workers".into(),
        format!("/workers/{SHOWN_WORKER}"),
        "/builds".into(),
        p.clone(),
        format!("{p}/jobs/job-0"),
        format!("{p}/resources/repo"),
        format!("{p}/jobs/job-0/builds/1"),
        format!("/builds/{build}"),
    ]
}

#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// The `hangar` binary to start web from.
    pub bin: PathBuf,
    pub workers: usize,
    pub pipelines: usize,
    /// Times each page is fetched.
    pub rounds: usize,
    /// PostgreSQL URL, measured after SQLite (a throwaway database: the
    /// seed is added to what it holds).
    pub database_url: Option<String>,
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PageFigures {
    pub page: String,
    pub bytes: usize,
    pub ms: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatabaseFigures {
    pub database: String,
    pub seed_seconds: f64,
    pub pages: Vec<PageFigures>,
    pub live: LiveFigures,
}

/// Pages left open on `/live` while the fleet changes: what web spends
/// on their streams and on the fetches each `change` makes them do.
#[derive(Debug, Clone, Serialize)]
pub struct LiveFigures {
    pub pages_open: usize,
    pub seconds: f64,
    /// Changes made (a job paused or unpaused each second).
    pub changes: usize,
    /// `change` events the pages heard, and the page fetches they did.
    pub events: usize,
    /// Web's CPU with the pages open and nothing changing (the streams'
    /// own cost and the watcher's reads), in cores: the target's figure.
    pub quiet_cores: f64,
    /// Web's CPU while the job changes each second: the streams and every
    /// page's fetch of the pipeline page after each `change`.
    pub busy_cores: f64,
}

/// What the live streams may cost web, in cores, with 100 pages open.
pub const LIVE_TARGET_CORES: f64 = 0.1;
/// How many pages are left open.
pub const LIVE_PAGES: usize = 100;

#[derive(Debug, Clone, Serialize)]
pub struct DashboardReport {
    pub workers: usize,
    pub pipelines: usize,
    pub rounds: usize,
    pub target_ms: f64,
    pub databases: Vec<DatabaseFigures>,
}

impl DashboardReport {
    pub fn lines(&self) -> String {
        let mut out = String::new();
        for d in &self.databases {
            let worst = d
                .pages
                .iter()
                .filter_map(|p| p.ms.p99)
                .fold(0.0_f64, f64::max);
            out.push_str(&format!(
                "dashboard: {} workers, {} pipelines ({}; {} rounds; seeded in {:.1} s): \
                 slowest page p99 {:.1} ms, target {} ms {}\n",
                self.workers,
                self.pipelines,
                d.database,
                self.rounds,
                d.seed_seconds,
                worst,
                self.target_ms,
                if worst <= self.target_ms {
                    "met"
                } else {
                    "NOT met"
                },
            ));
            let l = &d.live;
            out.push_str(&format!(
                "  live: {} pages open: quiet, the streams cost web {:.3} cores (target {}) {}; \
                 with a change each second for {:.0} s ({} changes, {} change events, each a page fetch) {:.3} cores\n",
                l.pages_open,
                l.quiet_cores,
                LIVE_TARGET_CORES,
                if l.quiet_cores <= LIVE_TARGET_CORES {
                    "met"
                } else {
                    "NOT met"
                },
                l.seconds,
                l.changes,
                l.events,
                l.busy_cores,
            ));
            for p in &d.pages {
                out.push_str(&format!(
                    "  {:<56} p50 {:>6} ms  p99 {:>6} ms  max {:>6} ms  ({} bytes)\n",
                    p.page,
                    fmt_opt(p.ms.p50, 1),
                    fmt_opt(p.ms.p99, 1),
                    fmt_opt(p.ms.max, 1),
                    p.bytes,
                ));
            }
        }
        out
    }
}

pub async fn run(cfg: DashboardConfig) -> anyhow::Result<DashboardReport> {
    let mut databases = Vec::new();
    let mut urls = vec![None];
    if cfg.database_url.is_some() {
        urls.push(cfg.database_url.clone());
    }
    for url in urls {
        let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
        let kind = if url.is_some() { "postgres" } else { "sqlite" };
        let dir = match &cfg.dir {
            Some(d) => d.join(kind),
            None => tmp.path().to_path_buf(),
        };
        std::fs::create_dir_all(&dir)?;
        let figures = run_database(&cfg, url, &dir).await?;
        databases.push(figures);
    }
    Ok(DashboardReport {
        workers: cfg.workers,
        pipelines: cfg.pipelines,
        rounds: cfg.rounds,
        target_ms: TARGET_MS,
        databases,
    })
}

async fn run_database(
    cfg: &DashboardConfig,
    url: Option<String>,
    dir: &std::path::Path,
) -> anyhow::Result<DatabaseFigures> {
    let mut spec = WebSpec::new(&cfg.bin, dir)?;
    spec.database_url = url;
    // Nothing goes stalled, is checked, scheduled or collected while the
    // pages are timed.
    spec.heartbeat_ttl = Duration::from_secs(3600);
    spec.extra_args = [
        "--check-interval=1h",
        "--scheduler-interval=1h",
        "--gc-interval=1h",
    ]
    .map(String::from)
    .to_vec();
    std::fs::create_dir_all(&spec.data_dir)?;
    let database = spec.database();
    let kind = database.split(':').next().unwrap_or("").to_string();

    // Seeded before web starts (the store applies the schema), so no
    // write of web's meets the seed's on SQLite.
    eprintln!(
        "bench dashboard: seeding {} workers and {} pipelines into {kind}",
        cfg.workers, cfg.pipelines
    );
    let seeding = Instant::now();
    let store = Store::open(&database).await?;
    let seeded = seed(&store, cfg.workers, cfg.pipelines).await?;
    store.close().await;
    let seed_seconds = seeding.elapsed().as_secs_f64();
    let mut web = spec.start().await?;

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let login = http
        .post(format!("{}/login", spec.url()))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await?;
    let cookie = login
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("the login answered {} without a cookie", login.status()))?
        .to_string();
    let pages = pages(seeded.shown_build);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pages.len()];
    let mut bytes = vec![0; pages.len()];
    // One untimed round first: connections, caches and web's prepared
    // statements warm, as on a web that has been serving.
    for round in 0..=cfg.rounds {
        for (i, page) in pages.iter().enumerate() {
            let started = Instant::now();
            let r = http
                .get(format!("{}{page}", spec.url()))
                .header("cookie", &cookie)
                .send()
                .await?;
            let status = r.status();
            let body = r.bytes().await?;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if !status.is_success() {
                anyhow::bail!("{page} answered {status}");
            }
            if round > 0 {
                times[i].push(ms);
            }
            bytes[i] = body.len();
        }
    }
    let live = live_cost(&http, &spec.url(), &cookie, web.pid()).await?;
    web.stop(Duration::from_secs(15)).await;
    Ok(DatabaseFigures {
        database: kind,
        live,
        seed_seconds,
        pages: pages
            .into_iter()
            .zip(times)
            .zip(bytes)
            .map(|((page, t), bytes)| PageFigures {
                page,
                bytes,
                ms: Summary::of(&t),
            })
            .collect(),
    })
}

/// Opens [`LIVE_PAGES`] `/live` streams, each fetching the shown
/// pipeline's page on every `change` as a browser does; reads web's CPU
/// for 10 s of quiet, then for 20 s of a job paused and unpaused each
/// second.
async fn live_cost(
    http: &reqwest::Client,
    url: &str,
    cookie: &str,
    web_pid: Option<u32>,
) -> anyhow::Result<LiveFigures> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let pid = web_pid.ok_or_else(|| anyhow::anyhow!("web has no pid"))?;
    let events = Arc::new(AtomicUsize::new(0));
    let page = format!("{url}/teams/main/pipelines/{SHOWN_PIPELINE}");
    let mut pages = Vec::new();
    for _ in 0..LIVE_PAGES {
        let mut r = http
            .get(format!("{url}/live"))
            .header("cookie", cookie)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "/live answered {}", r.status());
        let (http, page, cookie, events) = (
            http.clone(),
            page.clone(),
            cookie.to_string(),
            Arc::clone(&events),
        );
        pages.push(tokio::spawn(async move {
            let mut seen = String::new();
            while let Ok(Some(chunk)) = r.chunk().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(at) = seen.find("event: change") {
                    seen.drain(..at + "event: change".len());
                    events.fetch_add(1, Ordering::Relaxed);
                    if let Ok(r) = http.get(&page).header("cookie", &cookie).send().await {
                        let _ = r.bytes().await;
                    }
                }
            }
        }));
    }
    // The watcher's first read, then 10 s of nothing changing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let quiet_started = Instant::now();
    let quiet_before = crate::procfs::cpu_seconds(pid).unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet_cores = (crate::procfs::cpu_seconds(pid).unwrap_or(0.0) - quiet_before)
        / quiet_started.elapsed().as_secs_f64();
    let api = format!("{url}/api/v1/teams/main/pipelines/{SHOWN_PIPELINE}/jobs/job-0");
    let cpu_before = crate::procfs::cpu_seconds(pid).unwrap_or(0.0);
    let started = Instant::now();
    let mut changes = 0;
    let window = Duration::from_secs(20);
    while started.elapsed() < window {
        let verb = if changes % 2 == 0 { "pause" } else { "unpause" };
        let r = http
            .put(format!("{api}/{verb}"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "{verb} answered {}", r.status());
        changes += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = crate::procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    for p in pages {
        p.abort();
    }
    Ok(LiveFigures {
        pages_open: LIVE_PAGES,
        seconds,
        changes,
        events: events.load(Ordering::Relaxed),
        quiet_cores,
        busy_cores: cpu / seconds,
    })
}
