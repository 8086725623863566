//! `hangar bench <what>`: the benchmarks behind PRODUCT.md's targets. Each
//! prints one line of figures (progress goes to stderr) and, with
//! `--json-out`, writes them as JSON. Web and workers run as processes of
//! this same binary, on loopback.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hangar_bench::{
    artifacts, checks, dashboard, execute, heartbeats, image, memory, scheduling, webhook,
};

use hangar_bench::death;

use crate::duration;
use crate::format::emit;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Simulated workers heartbeating and reporting against one web node
    /// (or several on one PostgreSQL: --web-nodes): heartbeat latency,
    /// each node's CPU and memory, PostgreSQL's CPU.
    Heartbeats(HeartbeatsArgs),
    /// `hangar execute` to the task's process started, warm; and a 5-step
    /// build end to end.
    Execute(ExecuteArgs),
    /// A worker's own memory, idle and busy; web's with a simulated fleet.
    AgentMemory(MemoryArgs),
    /// Cold pulls of an image from a local registry into a root filesystem,
    /// against skopeo's (and skopeo + umoci's) in the same run.
    Image(ImageArgs),
    /// A new version to the builds it triggers, over a pipeline of 100 jobs
    /// with a history of 100,000 versions and 50,000 builds (and smaller
    /// or larger ones: --scales), and web's memory as the history grows.
    Scheduling(SchedulingArgs),
    /// Web's CPU while it keeps N resources checked every `check_every`
    /// with a check that returns at once (one worker, the `mock` type).
    Checks(ChecksArgs),
    /// A new commit's webhook to the build it triggers running, on a warm
    /// worker (a local git repository, the built-in `git` type).
    Webhook(WebhookArgs),
    /// A worker SIGKILLed while it runs a long step, to the step running
    /// on another worker, at the default settings (one web node, or
    /// several on PostgreSQL: --web-nodes).
    Death(DeathArgs),
    /// A queue of builds of one short task over N workers: how many ran
    /// on each (placement's spread), with web's placement chain.
    Spread(SpreadArgs),
    /// Each dashboard page's time at 1,000 workers and 100 pipelines
    /// (seeded through the store), on SQLite and, with --database-url,
    /// PostgreSQL too.
    Dashboard(DashboardArgs),
    /// An artifact made on one worker and read on another, and the same
    /// data uploaded by `execute -i` and downloaded by `execute -o`: one
    /// large file against curl, a tree of small files against tar | tar,
    /// same disk, same run.
    Artifacts(ArtifactsArgs),
}

#[derive(clap::Args, Debug)]
struct ArtifactsArgs {
    /// Size of the large file, MiB.
    #[arg(long, default_value_t = 1024)]
    large_mib: u64,
    /// Files of 1 KiB in the tree of small files.
    #[arg(long, default_value_t = 20_000)]
    small_files: usize,
    /// Timed runs of each contender.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The workers' volume driver: auto (overlay where it works, as a
    /// worker's default), naive or overlay.
    #[arg(long, default_value = "auto", value_parser = ["auto", "naive", "overlay"])]
    volume_driver: String,
    #[command(flatten)]
    out: Output,
}

/// Where a benchmark keeps its scratch files and writes its figures.
#[derive(clap::Args, Debug)]
struct Output {
    /// Keep the scratch dir (logs, databases) here; by default it is a
    /// temporary one, removed at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
}

/// The database a benchmark runs web on. It is given only as a flag,
/// never taken from `HANGAR_DATABASE_URL`: a benchmark seeds rows into it,
/// so it must be a throwaway database someone named on purpose.
#[derive(clap::Args, Debug)]
struct Database {
    /// A throwaway database for web (default: SQLite in the scratch dir).
    #[arg(long)]
    database_url: Option<String>,
}

#[derive(clap::Args, Debug)]
struct DashboardArgs {
    #[arg(long, default_value_t = 1000)]
    workers: usize,
    #[arg(long, default_value_t = 100)]
    pipelines: usize,
    /// Times each page is fetched (after one untimed round).
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct WebhookArgs {
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// PostgreSQL URL; default SQLite in the scratch dir.
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct DeathArgs {
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Web nodes on one PostgreSQL, behind a balancer (needs
    /// --database-url).
    #[arg(long, default_value_t = 1)]
    web_nodes: usize,
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct SpreadArgs {
    #[arg(long, default_value_t = 200)]
    builds: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// How long each task runs (`sleep`); 0 runs `true`.
    #[arg(long, default_value_t = 0)]
    task_ms: u64,
    /// Web's --container-placement-strategy (repeatable; default: web's).
    #[arg(long = "strategy")]
    strategies: Vec<String>,
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct ChecksArgs {
    #[arg(long, default_value_t = 10_000)]
    resources: usize,
    /// Each resource's check_every.
    #[arg(long, default_value = "1m")]
    check_every: String,
    /// Load before measuring (the first round of checks, all due at once).
    #[arg(long, default_value = "90s", value_parser = duration::parse)]
    warmup: Duration,
    #[arg(long, default_value = "60s", value_parser = duration::parse)]
    duration: Duration,
    /// PostgreSQL URL; default SQLite in the scratch dir.
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct SchedulingArgs {
    /// History sizes, as multiples of 100,000 versions and 50,000 builds.
    #[arg(long, value_delimiter = ',', default_value = "0.1,1")]
    scales: Vec<f64>,
    /// Rounds measured per scale (each: a new version, then a passed build).
    #[arg(long, default_value_t = 40)]
    rounds: usize,
    /// How often web's scheduler looks (on SQLite the benchmark cannot wake
    /// it; on PostgreSQL it sends the wake-up a check's node sends).
    #[arg(long, default_value = "10ms", value_parser = duration::parse)]
    scheduler_interval: Duration,
    /// PostgreSQL URL; default SQLite in the scratch dir.
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct ImageArgs {
    #[arg(long, default_value_t = 5)]
    layers: usize,
    /// Size of each layer, unpacked (incompressible data).
    #[arg(long, default_value_t = 20)]
    layer_mib: usize,
    /// Cold pulls per contender.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Timed builds of a task on the cached image (needs root and runc).
    #[arg(long, default_value_t = 10)]
    start_runs: usize,
    /// Keep the scratch dir here.
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct HeartbeatsArgs {
    #[arg(long, default_value_t = 1000)]
    workers: usize,
    /// Volume rows per worker, listed in each of its reports.
    #[arg(long, default_value_t = 1000)]
    volumes: usize,
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    heartbeat_interval: Duration,
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    report_interval: Duration,
    /// Load before measuring (at least one report interval, so every
    /// simulated worker has registered and reported).
    #[arg(long, default_value = "35s", value_parser = duration::parse)]
    warmup: Duration,
    /// How long figures are collected.
    #[arg(long, default_value = "60s", value_parser = duration::parse)]
    duration: Duration,
    #[command(flatten)]
    db: Database,
    /// Web processes on the one database, the simulated workers spread over
    /// them round-robin (more than one needs a PostgreSQL --database-url).
    #[arg(long, default_value_t = 1)]
    web_nodes: usize,
    /// Whole measurements, each with fresh web processes over the same
    /// seeded rows; each run prints its line, then a summary.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// A heartbeat p99 (ms) every run must be within; the summary says
    /// which runs missed it.
    #[arg(long)]
    target_p99_ms: Option<f64>,
    /// PostgreSQL's postmaster, whose CPU (with its children's) is
    /// reported; by default it is found from a loopback URL's port.
    #[arg(long)]
    postgres_pid: Option<u32>,
    /// The database already holds this fleet from an earlier run with the
    /// same --workers and --volumes: skip seeding (checked first).
    #[arg(long)]
    reuse_seeded: bool,
    /// Seed the volumes as made this long ago (e.g. 2h): the garbage
    /// collectors then meet an old fleet from their first pass.
    #[arg(long, default_value = "0s", value_parser = duration::parse)]
    seed_age: Duration,
    /// An extra flag for `hangar web`, e.g. `--web-arg=--gc-interval=1h`
    /// (repeat for more).
    #[arg(long = "web-arg", allow_hyphen_values = true)]
    web_args: Vec<String>,
    #[command(flatten)]
    out: Output,
}

/// The benchmark's configuration from its flags, refused as a whole when it
/// cannot be measured (several nodes on SQLite, no node, no run).
fn heartbeats_config(
    a: &HeartbeatsArgs,
    bin: PathBuf,
) -> anyhow::Result<heartbeats::HeartbeatsConfig> {
    let mut cfg = heartbeats::HeartbeatsConfig::new(bin);
    cfg.workers = a.workers;
    cfg.volumes_per_worker = a.volumes;
    cfg.heartbeat_interval = a.heartbeat_interval;
    cfg.report_interval = a.report_interval;
    cfg.warmup = a.warmup;
    cfg.duration = a.duration;
    cfg.database_url = a.db.database_url.clone();
    cfg.dir = a.out.dir.clone();
    cfg.web_args = a.web_args.clone();
    cfg.web_nodes = a.web_nodes;
    cfg.runs = a.runs;
    cfg.target_p99_ms = a.target_p99_ms;
    cfg.postgres_pid = a.postgres_pid;
    cfg.reuse_seeded = a.reuse_seeded;
    cfg.seed_age = a.seed_age;
    cfg.validate().map_err(anyhow::Error::msg)?;
    Ok(cfg)
}

#[derive(clap::Args, Debug)]
struct ExecuteArgs {
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Untimed runs first (they warm the worker and web).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed runs of the 5-step build.
    #[arg(long, default_value_t = 5)]
    pipeline_runs: usize,
    #[command(flatten)]
    db: Database,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args, Debug)]
struct MemoryArgs {
    /// Builds run at once for the busy figure.
    #[arg(long, default_value_t = 4)]
    busy_builds: usize,
    /// How long the worker idles before the idle figure.
    #[arg(long, default_value = "15s", value_parser = duration::parse)]
    idle: Duration,
    /// Simulated workers for web's figure (0: skip it).
    #[arg(long, default_value_t = 1000)]
    fleet_workers: usize,
    /// How long the fleet runs after its warm-up.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    fleet_duration: Duration,
    #[command(flatten)]
    out: Output,
}

fn write(json_out: &Option<PathBuf>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = json_out {
        hangar_bench::write_json(path, value)?;
    }
    Ok(())
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bin = std::env::current_exe().context("find the hangar binary")?;
    match args.what {
        What::Heartbeats(a) => {
            let cfg = heartbeats_config(&a, bin)?;
            let report = heartbeats::run(cfg).await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Artifacts(a) => {
            let report = artifacts::run(artifacts::ArtifactsConfig {
                bin,
                large_mib: a.large_mib,
                small_files: a.small_files,
                runs: a.runs,
                dir: a.out.dir,
                volume_driver: match a.volume_driver.as_str() {
                    "naive" => Some(hangar_volumes::DriverKind::Naive),
                    "overlay" => Some(hangar_volumes::DriverKind::Overlay),
                    _ => None,
                },
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Execute(a) => {
            let mut cfg = execute::ExecuteConfig::new(bin);
            cfg.runs = a.runs;
            cfg.warmup = a.warmup;
            cfg.pipeline_runs = a.pipeline_runs;
            cfg.database_url = a.db.database_url;
            cfg.dir = a.out.dir;
            let report = execute::run(cfg).await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Dashboard(a) => {
            if a.pipelines == 0 || a.workers == 0 || a.rounds == 0 {
                anyhow::bail!("--workers, --pipelines and --rounds must be at least 1");
            }
            let report = dashboard::run(dashboard::DashboardConfig {
                bin,
                workers: a.workers,
                pipelines: a.pipelines,
                rounds: a.rounds,
                database_url: a.db.database_url,
                dir: a.out.dir,
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Death(a) => {
            let report = death::run(death::DeathConfig {
                bin,
                rounds: a.rounds.max(1),
                database_url: a.db.database_url,
                web_nodes: a.web_nodes.max(1),
                dir: a.out.dir,
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&format!("{}\n", report.line()))?;
        }
        What::Spread(a) => {
            let report = scheduling::spread::run(scheduling::spread::SpreadConfig {
                bin,
                builds: a.builds.max(1),
                workers: a.workers.max(1),
                task_ms: a.task_ms,
                strategies: a.strategies,
                database_url: a.db.database_url,
                dir: a.out.dir,
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Webhook(a) => {
            let report = webhook::run(webhook::WebhookConfig {
                bin,
                rounds: a.rounds.max(1),
                database_url: a.db.database_url,
                dir: a.out.dir,
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&format!("{}\n", report.line()))?;
        }
        What::Checks(a) => {
            if a.resources == 0 || a.resources > 100_000 {
                anyhow::bail!("--resources must be between 1 and 100000");
            }
            let mut cfg = checks::ChecksConfig::new(bin);
            cfg.resources = a.resources;
            cfg.check_every = a.check_every;
            cfg.warmup = a.warmup;
            cfg.duration = a.duration;
            cfg.database_url = a.db.database_url;
            cfg.dir = a.out.dir;
            let report = checks::run(cfg).await?;
            write(&a.out.json_out, &report)?;
            emit(&format!("{}\n", report.line()))?;
        }
        What::Scheduling(a) => {
            if a.scales.iter().any(|s| !(*s > 0.0 && *s <= 100.0)) {
                anyhow::bail!("--scales must be between 0 and 100");
            }
            let mut cfg = scheduling::SchedulingConfig::new(bin);
            cfg.scales = a.scales;
            cfg.rounds = a.rounds.max(1);
            cfg.scheduler_interval = a.scheduler_interval;
            cfg.database_url = a.db.database_url;
            cfg.dir = a.out.dir;
            let report = scheduling::run(cfg).await?;
            write(&a.out.json_out, &report)?;
            emit(&report.lines())?;
        }
        What::Image(a) => {
            let report = image::run(image::ImageConfig {
                layers: a.layers,
                layer_mib: a.layer_mib,
                runs: a.runs,
                dir: a.out.dir,
                bin: Some(bin),
                start_runs: a.start_runs,
            })
            .await?;
            write(&a.out.json_out, &report)?;
            emit(&format!("{}\n", report.line()))?;
        }
        What::AgentMemory(a) => {
            let mut cfg = memory::MemoryConfig::new(bin.clone());
            cfg.busy_builds = a.busy_builds;
            cfg.idle_for = a.idle;
            cfg.dir = a.out.dir.clone();
            let agent = memory::run(cfg).await?;
            emit(&format!("{}\n", agent.line()))?;
            let fleet = if a.fleet_workers > 0 {
                let mut cfg = heartbeats::HeartbeatsConfig::new(bin);
                cfg.workers = a.fleet_workers;
                cfg.duration = a.fleet_duration;
                cfg.dir = a.out.dir.map(|d| d.join("fleet"));
                let fleet = heartbeats::run(cfg).await?;
                let node = fleet
                    .first_node()
                    .context("the fleet run measured no node")?;
                emit(&format!(
                    "web memory with {} simulated workers: {:.1} MiB (high-water mark {:.1} MiB)\n",
                    fleet.workers, node.rss_mib, node.rss_peak_mib
                ))?;
                Some(fleet)
            } else {
                None
            };
            write(
                &a.out.json_out,
                &serde_json::json!({ "agent": agent, "fleet": fleet }),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        heartbeats: HeartbeatsArgs,
    }

    fn config(flags: &[&str]) -> anyhow::Result<heartbeats::HeartbeatsConfig> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(flags.iter().copied()))?;
        heartbeats_config(&cli.heartbeats, PathBuf::from("hangar"))
    }

    #[test]
    fn heartbeats_flags_that_cannot_be_measured_are_refused() {
        let pg = "--database-url=postgres://postgres@127.0.0.1:5432/db";
        let cases: [(&[&str], Option<&str>); 11] = [
            (&[], None),
            (
                &[
                    "--web-nodes",
                    "3",
                    pg,
                    "--runs",
                    "2",
                    "--target-p99-ms",
                    "50",
                ],
                None,
            ),
            (
                &["--web-nodes", "2"],
                Some("needs a PostgreSQL --database-url"),
            ),
            (
                &["--web-nodes", "2", "--database-url=sqlite:///tmp/h.db"],
                Some("SQLite is for one node"),
            ),
            (
                &["--web-nodes", "0", pg],
                Some("--web-nodes must be at least 1"),
            ),
            (&["--runs", "0"], Some("--runs must be at least 1")),
            (&["--postgres-pid", "12"], Some("--postgres-pid needs")),
            (&["--target-p99-ms", "0"], Some("--target-p99-ms")),
            (
                &["--reuse-seeded"],
                Some("--reuse-seeded needs a --database-url"),
            ),
            (
                &[
                    "--database-url",
                    "postgres://h/db",
                    "--reuse-seeded",
                    "--seed-age",
                    "2h",
                ],
                Some("--seed-age applies to seeding"),
            ),
            (&["--seed-age", "soon"], Some("")),
        ];
        for (flags, refusal) in cases {
            match (config(flags), refusal) {
                (Ok(_), None) => {}
                (Err(e), Some(part)) => assert!(e.to_string().contains(part), "{flags:?}: {e}"),
                (got, want) => panic!("{flags:?}: got {:?}, wanted {want:?}", got.map(|_| ())),
            }
        }
        let cfg = config(&["--web-nodes", "3", pg, "--runs", "5", "--seed-age", "2h"]).unwrap();
        assert_eq!((cfg.web_nodes, cfg.runs), (3, 5));
        assert_eq!(cfg.seed_age, Duration::from_secs(7200));
    }
}
