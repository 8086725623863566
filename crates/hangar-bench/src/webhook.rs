//! `hangar bench webhook`: a new commit's webhook to the build it triggers
//! running, on a warm worker. One web and one worker process; a local bare
//! git repository is the resource (the built-in `git` type), checked only
//! when its webhook is called; a job gets it with `trigger: true`. Each
//! round commits, calls the webhook and times until the job's new build has
//! started (the engine claimed it and runs its first step), then waits for
//! the build to end before the next round.

use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use hangar_core::build::BuildStatus;
use hangar_core::pipeline::parse_pipeline;
use hangar_store::Store;
use serde::Serialize;

use crate::procs::{now_ms, WebSpec, WorkerSpec};
use crate::stats::{fmt_opt, Summary};

const TOKEN: &str = "bench-webhook-token";

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub bin: PathBuf,
    pub rounds: usize,
    pub database_url: Option<String>,
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WebhookReport {
    pub database: String,
    pub rounds: usize,
    pub timed_out: usize,
    /// Webhook answered → the new build started, ms.
    pub webhook_to_running_ms: Summary,
    /// The webhook call itself, ms.
    pub webhook_call_ms: Summary,
}

impl WebhookReport {
    pub fn line(&self) -> String {
        format!(
            "webhook: ({}; {} rounds, {} timed out, warm worker) webhook -> build running p50 {} ms p99 {} ms max {} ms; \
             the webhook call itself p50 {} ms",
            self.database,
            self.rounds,
            self.timed_out,
            fmt_opt(self.webhook_to_running_ms.p50, 1),
            fmt_opt(self.webhook_to_running_ms.p99, 1),
            fmt_opt(self.webhook_to_running_ms.max, 1),
            fmt_opt(self.webhook_call_ms.p50, 1),
        )
    }
}

async fn git(cwd: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("git")
        .args(["-c", "user.email=bench@hangar", "-c", "user.name=bench"])
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .with_context(|| format!("run git {args:?}"))?;
    if !out.status.success() {
        anyhow::bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

async fn commit(work: &Path, n: usize) -> anyhow::Result<()> {
    std::fs::write(work.join("round"), format!("{n}\n"))?;
    git(work, &["add", "."]).await?;
    git(work, &["commit", "-qm", &format!("round {n}")]).await?;
    git(work, &["push", "-q", "origin", "main"]).await
}

pub async fn run(cfg: WebhookConfig) -> anyhow::Result<WebhookReport> {
    let tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
    let dir = cfg.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let bare = dir.join("repo.git");
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    git(
        &dir,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            bare.to_str().unwrap_or("repo.git"),
        ],
    )
    .await?;
    git(&work, &["init", "-q", "-b", "main"]).await?;
    git(
        &work,
        &["remote", "add", "origin", bare.to_str().unwrap_or_default()],
    )
    .await?;
    commit(&work, 0).await?;

    let mut spec = WebSpec::new(&cfg.bin, &dir)?;
    spec.database_url = cfg.database_url.clone();
    spec.extra_args = vec!["--gc-interval=1h".into()];
    std::fs::create_dir_all(&spec.data_dir)?;
    let url = spec.database();
    let database = url.split(':').next().unwrap_or("").to_string();
    let store = Store::open(&url).await?;
    let yaml = format!(
        "resources:\n- name: repo\n  type: git\n  source: {{uri: \"{}\", branch: main}}\n  check_every: never\n  webhook_token: {TOKEN}\n\
         jobs:\n- name: build\n  plan:\n  - get: repo\n    trigger: true\n  - task: show\n    config:\n      platform: linux\n      inputs: [{{name: repo}}]\n      run: {{path: cat, args: [repo/round]}}\n",
        bare.display()
    );
    let config = parse_pipeline(&yaml)
        .map_err(|e| anyhow::anyhow!("the benchmark's pipeline: {e:?}"))?
        .config;
    store
        .set_pipeline("main", "hook", &config, None, now_ms())
        .await?;
    let job = store.job("main", "hook", "build").await?;

    let mut web = spec.start().await?;
    // The repository is a local path, which a worker's sandbox does not
    // show: its actions run on the host, as on a worker without one.
    let mut hooked = WorkerSpec::new(&cfg.bin, &dir, "bench-hooked", &spec.url());
    hooked.extra_args.push("--no-process-sandbox".into());
    let mut worker = hooked.start()?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    store
        .set_pipeline_paused("main", "hook", false, now_ms())
        .await?;
    let hook = format!(
        "{}/api/v1/teams/main/pipelines/hook/resources/repo/check/webhook?webhook_token={TOKEN}",
        spec.url()
    );
    let http = reqwest::Client::new();
    let mut latencies = Vec::new();
    let mut calls = Vec::new();
    let mut timed_out = 0;
    // Round 0 warms the worker (its git, its caches) and is not counted.
    for round in 0..=cfg.rounds {
        if round > 0 {
            commit(&work, round).await?;
        }
        let before = store
            .job_builds(job.id, 1)
            .await?
            .first()
            .map_or(0, |b| b.number);
        let called = Instant::now();
        let status = http.post(&hook).send().await?.status();
        let answered = Instant::now();
        if status.as_u16() != 201 {
            anyhow::bail!("the webhook answered {status}");
        }
        let deadline = answered + Duration::from_secs(20);
        let mut started = None;
        while Instant::now() < deadline {
            if let Some(b) = store.job_builds(job.id, 1).await?.first() {
                if b.number > before && b.build.status != BuildStatus::Pending {
                    started = Some(answered.elapsed());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The build ends before the next commit.
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            let latest = store.job_builds(job.id, 1).await?;
            if latest.first().is_some_and(|b| b.build.status.is_final()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if round == 0 {
            continue;
        }
        match started {
            Some(d) => {
                latencies.push(d.as_secs_f64() * 1000.0);
                calls.push((answered - called).as_secs_f64() * 1000.0);
            }
            None => timed_out += 1,
        }
    }
    worker.stop(Duration::from_secs(10)).await;
    web.stop(Duration::from_secs(10)).await;
    Ok(WebhookReport {
        database,
        rounds: cfg.rounds,
        timed_out,
        webhook_to_running_ms: Summary::of(&latencies),
        webhook_call_ms: Summary::of(&calls),
    })
}
