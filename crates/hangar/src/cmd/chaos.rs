//! `hangar chaos`: a seeded chaos run against real web and worker processes
//! (see `hangar_bench::chaos`). Prints one line of figures, writes them as
//! JSON with `--json-out`, and exits 1 when the run did not pass: a build
//! errored because of the infrastructure (or failed or hung though it should
//! not have), the database and a worker's disk disagree after quiescing, a
//! process was left behind, or the killed workers' median kill-to-stalled
//! was over a second or half the TTL (their presence no longer told web).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hangar_bench::chaos::schedule::FaultKind;
use hangar_bench::chaos::{self, ChaosConfig};

use crate::duration;
use crate::format::emit;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// How long builds are submitted and faults injected (quiescing and
    /// checking come after).
    #[arg(long, default_value = "4m", value_parser = duration::parse)]
    duration: Duration,
    /// Seeds the fault schedule and the build stream: the same seed, the
    /// same schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// An admin URL of a PostgreSQL server to run web on (a database is
    /// made for the run); enables database restarts. Default: SQLite.
    #[arg(long, alias = "database-url", conflicts_with = "postgres_throwaway")]
    postgres_url: Option<String>,
    /// Start a throwaway PostgreSQL cluster for the run (initdb on a free
    /// loopback port, as the `postgres` user when run as root), removed at
    /// its end; enables database restarts.
    #[arg(long)]
    postgres_throwaway: bool,
    /// How many web nodes share the database (more than one needs
    /// PostgreSQL); workers and clients reach them through a balancer, and
    /// web nodes are killed (web-restart) and paused (web-pause).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    web_nodes: u16,
    /// That server's data directory (found from its process if not given).
    #[arg(long)]
    postgres_data_dir: Option<PathBuf>,
    /// Only these faults (comma-separated): kill-wipe, kill-keep, pause,
    /// oom, web-restart, web-pause, db-restart.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Vec<FaultKind>,
    #[arg(long, default_value = "300ms", value_parser = duration::parse)]
    heartbeat_interval: Duration,
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    heartbeat_ttl: Duration,
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    report_interval: Duration,
    /// Where the run lives (default: a new dir under the temp dir, removed
    /// when the run passes).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the run's dir even when it passes.
    #[arg(long)]
    keep: bool,
    #[arg(long)]
    json_out: Option<PathBuf>,
}

fn parse_fault(s: &str) -> Result<FaultKind, String> {
    [
        FaultKind::KillWipe,
        FaultKind::KillKeep,
        FaultKind::Pause,
        FaultKind::Oom,
        FaultKind::WebRestart,
        FaultKind::WebPause,
        FaultKind::DbRestart,
    ]
    .into_iter()
    .find(|k| k.as_str() == s)
    .ok_or_else(|| {
        format!(
            "unknown fault {s:?}: use kill-wipe, kill-keep, pause, oom, web-restart, web-pause, db-restart"
        )
    })
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bin = std::env::current_exe().context("find the hangar binary")?;
    let mut cfg = ChaosConfig::new(bin, args.seed);
    cfg.duration = args.duration;
    cfg.workers = args.workers;
    cfg.postgres_url = args.postgres_url;
    cfg.postgres_data_dir = args.postgres_data_dir;
    cfg.postgres_throwaway = args.postgres_throwaway;
    cfg.web_nodes = usize::from(args.web_nodes);
    cfg.heartbeat_interval = args.heartbeat_interval;
    cfg.heartbeat_ttl = args.heartbeat_ttl;
    cfg.report_interval = args.report_interval;
    cfg.dir = args.dir;
    cfg.keep = args.keep;
    if !args.faults.is_empty() {
        cfg.kinds = Some(args.faults);
    }
    let report = chaos::run(cfg).await?;
    for p in &report.problems {
        eprintln!(
            "chaos: build {} ({:?}) ended {}: {}",
            p.id,
            p.kind,
            p.status,
            p.error.as_deref().unwrap_or("-")
        );
        for line in &p.log_tail {
            eprintln!("    {line}");
        }
    }
    for (worker, d) in &report.divergence {
        for (what, side) in [("volume", &d.volumes), ("container", &d.containers)] {
            for h in &side.rows_without_dir {
                eprintln!("chaos: {worker}: {what} row without a dir: {h}");
            }
            for h in &side.dirs_without_row {
                eprintln!("chaos: {worker}: {what} dir without a row: {h}");
            }
        }
    }
    for p in &report.leaked_processes {
        eprintln!("chaos: leaked process {}: {}", p.pid, p.cmdline);
    }
    if !report.passed {
        eprintln!("chaos: the run's files are kept in {}", report.dir);
    }
    if let Some(path) = &args.json_out {
        hangar_bench::write_json(path, &report)?;
    }
    emit(&format!("{}\n", report.line()))?;
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
