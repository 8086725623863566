use std::process::ExitCode;

use hangar_core::registration::short_id;

use crate::format::{ago, coarse, now_ms, table};
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let workers = args.target.client()?.workers().await?;
    if args.json {
        crate::format::emit_json(&workers)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.state.to_string(),
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
                // `--allow-privileged`: privileged steps run here as root.
                if w.allow_privileged { "allowed" } else { "no" }.into(),
                match &w.last_restart {
                    Some(r) => format!("{} (last: {} {})", w.restarts, r.kind, ago(now, r.at)),
                    None => w.restarts.to_string(),
                },
                condition(w.condition.as_ref()),
                w.last_event
                    .as_ref()
                    .map(|e| format!("{} {}", e.kind, ago(now, e.at)))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    crate::format::emit(&table(
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
            "privileged",
            "restarts",
            "condition",
            "last event",
        ],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Memory, disk, pressure and health in one cell: `ok mem 1.2 GiB/4 GiB
/// (512 MiB promised) disk 40%`, or what is wrong first.
fn condition(c: Option<&hangar_api::WorkerCondition>) -> String {
    let Some(c) = c else { return "unknown".into() };
    let human = hangar_core::build::human_bytes;
    let disk = (c.disk_used * 100).checked_div(c.disk_total).unwrap_or(0);
    let state = if !c.healthy {
        format!(
            "unhealthy ({})",
            c.unhealthy_reason.as_deref().unwrap_or("?")
        )
    } else if c.pressure != hangar_api::Pressure::None {
        format!(
            "pressure {} ({})",
            c.pressure,
            c.pressure_reason.as_deref().unwrap_or("?")
        )
    } else {
        "ok".into()
    };
    format!(
        "{state} mem {}/{} ({} promised) disk {disk}%",
        human(c.memory_used),
        human(c.memory_limit),
        human(c.memory_reserved)
    )
}
