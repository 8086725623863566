use std::process::ExitCode;

use crate::format::{ago, now_ms, table};
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// Only this worker's volumes.
    #[arg(short = 'w', long = "worker")]
    pub worker: Option<String>,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let volumes = args
        .target
        .client()?
        .volumes(args.worker.as_deref())
        .await?;
    if args.json {
        crate::format::emit_json(&volumes)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = volumes
        .iter()
        .map(|v| {
            vec![
                v.handle.clone(),
                v.worker.clone(),
                v.owner_kind.to_string(),
                v.state.to_string(),
                v.parent.clone().unwrap_or_else(|| "none".into()),
                v.size_bytes
                    .map(human_bytes)
                    .unwrap_or_else(|| "unknown".into()),
                v.missing_since
                    .map(|t| ago(now, t))
                    .unwrap_or_else(|| "no".into()),
            ]
        })
        .collect();
    crate::format::emit(&table(
        &[
            "handle",
            "worker",
            "type",
            "state",
            "parent",
            "size",
            "missing since",
        ],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = n as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }
}
