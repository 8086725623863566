//! `hangar bench execute`: web and one worker as processes; after warm-up
//! runs, times what `hangar execute` does (pack and upload an input, create
//! the build) up to the moment the task's process has started, N times; then
//! a 5-step build (a get and four chained tasks) end to end. It does so twice
//! in one run, on the same web: with a worker that runs process tasks as
//! plain host processes (`--no-process-sandbox`, the floor) and with one that
//! runs them in the sandbox (the default), so the sandbox's cost is measured
//! against that floor on the same machine at the same time.
//!
//! "Started" is seen two ways, both through the build log as a client sees
//! it: the step event `running on worker …` (web logs it once the worker
//! has spawned the process) and the first `log` event (the process's first
//! line of output, pumped from the worker into the build log).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::{BuildEventKind, CreateBuild};
use hangar_client::Client;
use serde::Serialize;

use crate::procs::{self, WebSpec, WorkerSpec};
use crate::stats::{fmt_opt, Summary};

#[derive(Debug, Clone)]
pub struct ExecuteConfig {
    pub bin: PathBuf,
    /// Timed runs (after `warmup` untimed ones).
    pub runs: usize,
    pub warmup: usize,
    /// Timed runs of the 5-step build.
    pub pipeline_runs: usize,
    pub database_url: Option<String>,
    pub dir: Option<PathBuf>,
}

impl ExecuteConfig {
    pub fn new(bin: PathBuf) -> ExecuteConfig {
        ExecuteConfig {
            bin,
            runs: 20,
            warmup: 3,
            pipeline_runs: 5,
            database_url: None,
            dir: None,
        }
    }
}

/// One timed `execute`.
#[derive(Debug, Clone, Serialize)]
pub struct ExecuteRun {
    pub upload_ms: f64,
    pub create_ms: f64,
    /// From the start (before packing the input) to the `running on worker`
    /// event seen by the client.
    pub to_running_ms: f64,
    /// From the start to the process's first output line seen by the client.
    pub to_first_log_ms: f64,
    /// From the start to the build's end.
    pub total_ms: f64,
}

/// Both passes: the floor (no sandbox) and the sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct ExecuteComparison {
    pub unsandboxed: ExecuteReport,
    pub sandboxed: ExecuteReport,
}

impl ExecuteComparison {
    pub fn lines(&self) -> String {
        let delta = match (
            self.sandboxed.to_running_ms.p50,
            self.unsandboxed.to_running_ms.p50,
        ) {
            (Some(a), Some(b)) => format!("{:+.1} ms", a - b),
            _ => "n/a".into(),
        };
        format!(
            "{}
{}
the sandbox's cost to process started, p50: {delta}
",
            self.unsandboxed.line(),
            self.sandboxed.line()
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecuteReport {
    /// `unsandboxed` or `sandboxed`: how the worker ran process tasks.
    pub worker: String,
    pub runs: Vec<ExecuteRun>,
    pub to_running_ms: Summary,
    pub to_first_log_ms: Summary,
    pub upload_ms: Summary,
    pub total_ms: Summary,
    pub pipeline_ms: Summary,
    pub database: String,
}

impl ExecuteReport {
    pub fn line(&self) -> String {
        format!(
            "execute ({}, {}, {} runs): to process started (running event) p50 {} ms max {} ms; \
             to first output line p50 {} ms max {} ms; upload p50 {} ms; whole execute p50 {} ms; \
             5-step build end to end p50 {} ms max {} ms ({} runs)",
            self.worker,
            self.database,
            self.runs.len(),
            fmt_opt(self.to_running_ms.p50, 1),
            fmt_opt(self.to_running_ms.max, 1),
            fmt_opt(self.to_first_log_ms.p50, 1),
            fmt_opt(self.to_first_log_ms.max, 1),
            fmt_opt(self.upload_ms.p50, 1),
            fmt_opt(self.total_ms.p50, 1),
            fmt_opt(self.pipeline_ms.p50, 1),
            fmt_opt(self.pipeline_ms.max, 1),
            self.pipeline_ms.count,
        )
    }
}

/// Packs `dir` as a gzip tar in memory (inputs here are small).
pub fn pack_dir(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    tar.append_dir_all(".", dir)?;
    Ok(tar.into_inner()?.finish()?)
}

/// Writes a small source tree: 20 files of 4 KiB.
pub fn write_input(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    for i in 0..20 {
        let body: Vec<u8> = (0..4096u32).map(|b| (b * 31 + i) as u8).collect();
        std::fs::write(dir.join("src").join(format!("file-{i}.txt")), body)?;
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Waits (long-polling) until the build log shows `until`, or the build ends.
/// Returns when each milestone was seen, relative to `t0`.
async fn follow(
    client: &Client,
    id: i64,
    t0: Instant,
) -> anyhow::Result<(Option<Duration>, Option<Duration>, Duration, String)> {
    let mut after = 0;
    let (mut running, mut first_log) = (None, None);
    loop {
        let page = client.build_events(id, after, 10_000).await?;
        let seen = t0.elapsed();
        for e in &page.events {
            after = after.max(e.id);
            if running.is_none()
                && e.kind == BuildEventKind::Step
                && e.payload.starts_with("running on worker")
            {
                running = Some(seen);
            }
            if first_log.is_none() && e.kind == BuildEventKind::Log {
                first_log = Some(seen);
            }
        }
        if page.status.is_final() && page.events.is_empty() {
            return Ok((running, first_log, seen, page.status.to_string()));
        }
    }
}

/// One `hangar execute`: upload, create, follow to the end.
/// Its steps are tagged `tag`, the tag of the pass's worker.
async fn execute_once(client: &Client, input: &Path, tag: &str) -> anyhow::Result<ExecuteRun> {
    let t0 = Instant::now();
    let packed = pack_dir(input)?;
    let artifact = client
        .upload_artifact(
            None,
            "linux",
            &[tag.to_string()],
            reqwest::Body::from(packed),
        )
        .await?;
    let uploaded = t0.elapsed();
    let config = serde_json::json!({
        "platform": "linux",
        "inputs": [{"name": "src"}],
        "run": {"path": "sh", "args": ["-c", "echo started; ls src/src | wc -l"]},
    });
    let build = client
        .create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: None,
            plan: serde_json::json!([{ "task": "one-off", "tags": [tag], "config": config }]),
            artifacts: BTreeMap::from([("src".to_string(), artifact.handle)]),
            team: None,
        })
        .await?;
    let created = t0.elapsed();
    let (running, first_log, total, status) = follow(client, build.id, t0).await?;
    if status != "succeeded" {
        bail!("execute build {} ended {status}", build.id);
    }
    Ok(ExecuteRun {
        upload_ms: ms(uploaded),
        create_ms: ms(created - uploaded),
        to_running_ms: ms(running.context("no `running on worker` event")?),
        to_first_log_ms: ms(first_log.context("no log event")?),
        total_ms: ms(total),
    })
}

/// A get and four tasks, each reading the previous one's output.
fn five_steps(n: usize, tag: &str) -> serde_json::Value {
    let task = |name: &str, input: &str, output: &str| {
        serde_json::json!({"task": name, "tags": [tag], "config": {
            "platform": "linux",
            "inputs": [{"name": input}],
            "outputs": [{"name": output}],
            "run": {"path": "sh", "args": ["-c", format!("cat {input}/* > {output}/out; echo {name} >> {output}/out")]},
        }})
    };
    serde_json::json!([
        {"get": "thing", "type": "mock", "tags": [tag], "source": {"versions": [format!("v{n}")]}},
        task("one", "thing", "a"),
        task("two", "a", "b"),
        task("three", "b", "c"),
        task("four", "c", "d"),
    ])
}

pub async fn run(cfg: ExecuteConfig) -> anyhow::Result<ExecuteComparison> {
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
    let database = spec.database();
    let database = database.split(':').next().unwrap_or("").to_string();
    let mut web = spec.start().await?;
    let client = procs::admin_client(&spec.url(), Duration::from_secs(60))?;
    let mut passes = Vec::new();
    for (label, extra) in [
        ("unsandboxed", &["--no-process-sandbox"][..]),
        ("sandboxed", &[][..]),
    ] {
        let pass = measure(&cfg, &dir, &spec.url(), &client, label, extra, &database).await;
        match pass {
            Ok(report) => passes.push(report),
            Err(e) => {
                web.stop(Duration::from_secs(10)).await;
                return Err(e);
            }
        }
    }
    web.stop(Duration::from_secs(10)).await;
    let sandboxed = passes.pop().context("no sandboxed pass")?;
    let unsandboxed = passes.pop().context("no unsandboxed pass")?;
    Ok(ExecuteComparison {
        unsandboxed,
        sandboxed,
    })
}

/// One pass: a worker of its own (`extra` worker flags) while web stays.
async fn measure(
    cfg: &ExecuteConfig,
    dir: &Path,
    web_url: &str,
    client: &Client,
    label: &str,
    extra: &[&str],
    database: &str,
) -> anyhow::Result<ExecuteReport> {
    let name = format!("bench-worker-{label}");
    let mut worker_spec = WorkerSpec::new(&cfg.bin, dir, &name, web_url);
    worker_spec.heartbeat_interval = Duration::from_secs(1);
    worker_spec.report_interval = Duration::from_secs(5);
    worker_spec.tags = vec![label.to_string()];
    worker_spec
        .extra_args
        .extend(extra.iter().map(|a| a.to_string()));
    let mut worker = worker_spec.start()?;
    let result = async {
        procs::wait_for_state(client, &name, "running", Duration::from_secs(60)).await?;
        let input = dir.join("input");
        write_input(&input)?;
        for _ in 0..cfg.warmup {
            execute_once(client, &input, label).await?;
        }
        let mut runs = Vec::new();
        for i in 0..cfg.runs {
            let r = execute_once(client, &input, label).await?;
            eprintln!(
                "bench execute ({label}): run {}: running at {:.1} ms, first line at {:.1} ms, done at {:.1} ms",
                i + 1,
                r.to_running_ms,
                r.to_first_log_ms,
                r.total_ms
            );
            runs.push(r);
        }
        // One untimed pipeline warms the mock resource type.
        let mut pipeline = Vec::new();
        for n in 0..=cfg.pipeline_runs {
            let t0 = Instant::now();
            let build = client
                .create_build(&CreateBuild {
                    resource_types: serde_json::Value::Null,
                    name: Some("five-steps".into()),
                    plan: five_steps(n, label),
                    artifacts: BTreeMap::new(),
                    team: None,
                })
                .await?;
            let (_, _, total, status) = follow(client, build.id, t0).await?;
            if status != "succeeded" {
                bail!("5-step build {} ended {status}", build.id);
            }
            if n > 0 {
                eprintln!("bench execute: 5-step build {n}: {:.1} ms", ms(total));
                pipeline.push(ms(total));
            }
        }
        let pick = |f: fn(&ExecuteRun) -> f64| Summary::of(&runs.iter().map(f).collect::<Vec<_>>());
        Ok(ExecuteReport {
            to_running_ms: pick(|r| r.to_running_ms),
            to_first_log_ms: pick(|r| r.to_first_log_ms),
            upload_ms: pick(|r| r.upload_ms),
            total_ms: pick(|r| r.total_ms),
            pipeline_ms: Summary::of(&pipeline),
            runs,
            database: database.to_string(),
            worker: label.to_string(),
        })
    }
    .await;
    worker.stop(Duration::from_secs(10)).await;
    result
}
