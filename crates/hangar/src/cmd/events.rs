use std::process::ExitCode;

use crate::format::{table, utc};
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// Only this worker's events.
    #[arg(short = 'w', long = "worker")]
    pub worker: Option<String>,
    /// How many events (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let events = args
        .target
        .client()?
        .events(args.worker.as_deref(), args.limit)
        .await?;
    if args.json {
        crate::format::emit_json(&events)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                utc(e.at),
                e.worker.clone(),
                e.kind.to_string(),
                e.generation.to_string(),
                e.cause.clone(),
            ]
        })
        .collect();
    crate::format::emit(&table(
        &["time", "worker", "event", "generation", "cause"],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}
