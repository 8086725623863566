//! The check loop: every pass claims the resource scopes due a check (or
//! asked for one) and runs their checks on workers, several at a time,
//! recording what each found.
//!
//! A pass with nothing due is two indexed queries. Claims are leases in
//! the database (`hangar-store/src/checks.rs`), so of several web nodes
//! exactly one runs a scope's check; a node that dies leaves its claims to
//! run out and the scope becomes due again. Checks run in tasks the loop
//! owns, so a slow check never holds back the others or the next pass.
//!
//! A check no worker can run is given back with the reason, which
//! `check-resource` and the dashboard show. While no worker of the kind it
//! needs is registered at all (its type, its tags), the wait is bounded:
//! past web's `--no-worker-timeout` the check fails saying so.

use std::collections::BTreeSet;
use std::time::Duration;

use hangar_engine::check::{run_check, CheckEnd, CheckJob};
use hangar_store::{ClaimedCheck, StoreError};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::Control;

/// Checks one node runs at once.
pub const MAX_CONCURRENT_CHECKS: usize = 32;
/// How soon a check that could not run (no worker fits, workers lost) is
/// tried again.
const RETRY_DEFERRED_MS: i64 = 10_000;

/// What the loop waits for.
enum Event {
    /// Its interval passed.
    Tick,
    /// A webhook or `check-resource` asked for a check.
    Woken,
    /// A check ended while every slot was taken: more may be due.
    SlotFreed,
    Shutdown,
}

pub(crate) async fn run(control: Control, interval: Duration, shutdown: CancellationToken) {
    let mut running = JoinSet::new();
    loop {
        while running.try_join_next().is_some() {}
        let free = MAX_CONCURRENT_CHECKS.saturating_sub(running.len());
        // Every free slot taken: more may be due, so a check's end is
        // reason enough to claim again (thousands of resources a minute
        // are not held to one batch a tick).
        let saturated = match claim_and_start(&control, &mut running, &shutdown).await {
            Ok(started) => started >= free,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim due checks");
                false
            }
        };
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = tokio::time::sleep(interval) => Event::Tick,
            _ = control.checks_woken() => Event::Woken,
            Some(_) = running.join_next(), if saturated => Event::SlotFreed,
        };
        match event {
            Event::Shutdown => break,
            Event::Tick | Event::Woken | Event::SlotFreed => {}
        }
    }
    // Each check sees the token and gives its claim back.
    while running.join_next().await.is_some() {}
}

/// One pass run to its end (tests drive the loop with it): answers how
/// many checks it ran.
pub(crate) async fn pass(control: &Control) -> Result<usize, StoreError> {
    let mut running = JoinSet::new();
    let started = claim_and_start(control, &mut running, &CancellationToken::new()).await?;
    while running.join_next().await.is_some() {}
    Ok(started)
}

async fn claim_and_start(
    control: &Control,
    running: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Result<usize, StoreError> {
    let free = MAX_CONCURRENT_CHECKS.saturating_sub(running.len());
    if free == 0 {
        return Ok(0);
    }
    let claimed = control
        .store()
        .claim_due_checks(control.node_id(), control.now(), free as i64)
        .await?;
    let n = claimed.len();
    for check in claimed {
        running.spawn(check_scope(control.clone(), check, stop.clone()));
    }
    Ok(n)
}

async fn check_scope(control: Control, claimed: ClaimedCheck, stop: CancellationToken) {
    let scope = claimed.scope_id;
    let end = match job_for(&control, &claimed).await {
        Ok(job) => {
            let (placed, on_worker) = tokio::sync::oneshot::channel();
            let waited = claimed.waiting_reason.is_some() || claimed.waiting_since.is_some();
            let no_longer_waits = async {
                // It waited: once on a worker, it says so no more.
                if on_worker.await.is_ok() && waited {
                    if let Err(e) = control.store().check_placed(scope, control.node_id()).await {
                        tracing::warn!(scope, error = %e, "cannot record that a check runs");
                    }
                }
            };
            let (end, ()) = tokio::join!(
                run_check(control.engine(), &job, &stop, Some(placed)),
                no_longer_waits
            );
            end
        }
        Err(end) => end,
    };
    let store = control.store();
    let recorded = match &end {
        CheckEnd::Found { versions, output } => {
            match store
                .finish_check(scope, control.node_id(), versions, None, control.now())
                .await
            {
                Ok(new) => {
                    if new.unwrap_or(0) > 0 {
                        control.wake_scheduler();
                    }
                    // Only this node's own finish (it still held the scope)
                    // says what the check printed.
                    match (new, output.trim_end()) {
                        (None, _) | (_, "") => Ok(()),
                        (Some(_), output) => store.set_check_output(scope, output).await,
                    }
                }
                Err(e) => Err(e),
            }
        }
        CheckEnd::Failed(error) => {
            tracing::info!(scope, %error, "check failed");
            store
                .finish_check(scope, control.node_id(), &[], Some(error), control.now())
                .await
                .map(|_| ())
        }
        CheckEnd::Deferred(why) => {
            // A requested check is claimed again at every pass: at debug.
            tracing::debug!(scope, reason = %why, "check deferred");
            store
                .release_check(
                    scope,
                    control.node_id(),
                    control.now() + RETRY_DEFERRED_MS,
                    why,
                    None,
                )
                .await
        }
        CheckEnd::NoWorker(why) => no_worker(&control, &claimed, why).await,
    };
    if let Err(e) = recorded {
        // The claim runs out and another pass checks the scope again.
        tracing::warn!(scope, error = %e, "cannot record a check");
    }
}

/// A check no worker of its kind could take: given back with the reason
/// while it has waited less than web's bound (due again by the bound's
/// end), failed with the reason past it.
async fn no_worker(control: &Control, claimed: &ClaimedCheck, why: &str) -> Result<(), StoreError> {
    let scope = claimed.scope_id;
    let now = control.now();
    let bound = control.config().no_worker_timeout;
    let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    let since = claimed.waiting_since.unwrap_or(now);
    if now.saturating_sub(since) >= bound_ms {
        let error = hangar_engine::placement::gave_up(why, bound);
        tracing::info!(scope, %error, "check failed");
        return control
            .store()
            .finish_check(scope, control.node_id(), &[], Some(&error), now)
            .await
            .map(|_| ());
    }
    if claimed.waiting_since.is_none() {
        tracing::info!(scope, reason = %why, "check waits for a worker");
    } else {
        tracing::debug!(scope, reason = %why, "check waits for a worker");
    }
    let retry_at = (now + RETRY_DEFERRED_MS).min(since.saturating_add(bound_ms));
    control
        .store()
        .release_check(scope, control.node_id(), retry_at, why, Some(since))
        .await
}

/// What to run for a claimed scope, or how it ends without running.
async fn job_for(control: &Control, claimed: &ClaimedCheck) -> Result<CheckJob, CheckEnd> {
    let store = control.store();
    let members = store
        .check_members(claimed.scope_id)
        .await
        .map_err(|e| CheckEnd::Deferred(format!("cannot read the scope's resources: {e}")))?;
    // Periodic checks skip paused pipelines (explicit ones run).
    let Some(member) = members.iter().find(|m| claimed.requested || !m.paused) else {
        return Err(CheckEnd::Deferred("no resource wants a check".into()));
    };
    let types = store
        .pipeline_resource_types(&member.team, &member.pipeline)
        .await
        .map_err(|e| CheckEnd::Deferred(format!("cannot read resource types: {e}")))?;
    // The pipeline's custom types, as a build of it carries them: a
    // resource of one is checked with its type's image.
    let resource_types = types
        .iter()
        .map(|t| build_type(&t.config))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            CheckEnd::Failed(format!(
                "a resource type of the pipeline is unreadable: {e}"
            ))
        })?;
    let tags: BTreeSet<String> = member
        .config
        .get("tags")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    // Without `-f`, from the newest version known, as Concourse checks.
    let from = match &claimed.from {
        Some(from) => Some(from.clone()),
        None => store
            .latest_scope_version(claimed.scope_id)
            .await
            .map_err(|e| CheckEnd::Deferred(format!("cannot read the newest version: {e}")))?,
    };
    Ok(CheckJob {
        resource_type: claimed.resource_type.clone(),
        source: claimed.source.clone(),
        from,
        tags,
        timeout: Duration::from_millis(claimed.timeout_ms.max(1) as u64),
        resource_types,
        team: Some(member.team.clone()),
    })
}

/// A stored resource type config (the pipeline's) as a build's type: the
/// fields a build's type has, the others (`check_every`) left out.
fn build_type(config: &str) -> Result<hangar_core::resource_types::ResourceType, String> {
    let value: Value = serde_json::from_str(config).map_err(|e| e.to_string())?;
    let mut fields = serde_json::Map::new();
    for key in ["name", "type", "source", "params", "tags", "defaults"] {
        if let Some(v) = value.get(key) {
            fields.insert(key.to_string(), v.clone());
        }
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| e.to_string())
}
