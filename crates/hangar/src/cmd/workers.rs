use std::process::ExitCode;

use hangar_core::registration::short_id;

use crate::format::{ago, coarse, now_ms, table};
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let workers = args.target.client()?.workers().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.state.clone(),
                short_id(&w.state_identity).to_string(),
                w.generation.to_string(),
                coarse(now - w.first_registered_at),
                ago(now, w.last_heartbeat_at),
                w.containers.to_string(),
                w.volumes.to_string(),
                w.platform.clone(),
                if w.tags.is_empty() {
                    "none".into()
                } else {
                    w.tags.join(",")
                },
                match &w.last_restart {
                    Some(r) => format!("{} (last: {} {})", w.restarts, r.kind, ago(now, r.at)),
                    None => w.restarts.to_string(),
                },
                w.last_event
                    .as_ref()
                    .map(|e| format!("{} {}", e.kind, ago(now, e.at)))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "name",
                "state",
                "identity",
                "generation",
                "age",
                "heartbeat",
                "containers",
                "volumes",
                "platform",
                "tags",
                "restarts",
                "last event",
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}
