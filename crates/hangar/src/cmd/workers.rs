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
    crate::format::emit(&listing(&workers, now_ms()))?;
    Ok(ExitCode::SUCCESS)
}

/// The workers as `hangar workers` prints them at `now`.
fn listing(workers: &[hangar_api::Worker], now: i64) -> String {
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
            "privileged",
            "restarts",
            "condition",
            "last event",
        ],
        &rows,
    )
}

/// Memory, disk, pressure and health in one cell (see
/// `WorkerCondition::summary`).
fn condition(c: Option<&hangar_api::WorkerCondition>) -> String {
    c.map_or_else(|| "unknown".into(), hangar_api::WorkerCondition::summary)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::listing;

    const NOW: i64 = 1_700_000_000_000;

    fn worker(value: serde_json::Value) -> hangar_api::Worker {
        let mut base = serde_json::json!({
            "name": "w1", "state": "running", "state_identity": "3f2a9c0d1e2b4a5c",
            "generation": 7, "platform": "linux", "tags": [], "team": null,
            "version": "0.1.0", "resource_types": [], "ephemeral": false,
            "containers": 2, "volumes": 14,
            "first_registered_at": NOW - 3 * 3_600_000, "registered_at": NOW - 600_000,
            "last_heartbeat_at": NOW - 4_000, "state_changed_at": NOW - 600_000,
            "restarts": 0, "api_url": null, "last_event": null,
        });
        let fields = value.as_object().unwrap();
        for (k, v) in fields {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    // The listing is what operators read and scripts cut columns from: its
    // shape is the contract, so it is compared whole.
    #[test]
    fn the_workers_listing_keeps_its_columns_and_words() {
        let workers = [
            worker(serde_json::json!({
                "condition": {
                    "pressure": "none", "pressure_reason": null, "healthy": true,
                    "unhealthy_reason": null, "memory_used": 1_288_490_189u64,
                    "memory_limit": 4_294_967_296u64, "memory_reserved": 536_870_912u64,
                    "disk_used": 40, "disk_total": 100
                },
                "allow_privileged": true,
            })),
            worker(serde_json::json!({
                "name": "w2", "state": "stalled", "tags": ["gpu", "east"], "restarts": 2,
                "last_heartbeat_at": NOW - 95_000,
                "last_restart": {"id": 9, "worker": "w2", "kind": "restarted-state-lost",
                    "at": NOW - 120_000, "cause": "restarted with its dir wiped",
                    "generation": 6},
                "condition": {
                    "pressure": "hard", "pressure_reason": "disk full: 44 KiB left",
                    "healthy": true, "unhealthy_reason": null, "memory_used": 0,
                    "memory_limit": 0, "memory_reserved": 0, "disk_used": 99, "disk_total": 100
                },
            })),
        ];
        expect![[r#"
            name  state    identity  generation  age  heartbeat  containers  volumes  platform  tags      privileged  restarts                               condition                                                                   last event
            w1    running  3f2a9c0d  7           3h   4s ago     2           14       linux     none      allowed     0                                      ok mem 1.2 GiB/4 GiB (512 MiB promised) disk 40%
            w2    stalled  3f2a9c0d  7           3h   1m ago     2           14       linux     gpu,east  no          2 (last: restarted-state-lost 2m ago)  pressure hard (disk full: 44 KiB left) mem 0 B/0 B (0 B promised) disk 99%
        "#]].assert_eq(&listing(&workers, NOW));
    }
}
