//! The garbage collection loop: every collector of `hangar_core::gc`, run
//! by the store, every `--gc-interval`. A collector that fails is logged,
//! counted and run again next tick; it never stops the others or the loop.
//! One node at a time collects ([`hangar_store::GcTurn`]): a node whose
//! tick finds another node collecting skips it.

use std::time::{Duration, Instant};

use hangar_core::gc::{Collector, CollectorStats};
use tokio_util::sync::CancellationToken;

use crate::Web;

/// What one collector did in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorRun {
    pub collector: Collector,
    pub stats: CollectorStats,
    /// Why the collector could not run at all (its candidates could not be
    /// read); its `stats` are then empty.
    pub error: Option<String>,
    pub duration: Duration,
}

pub(crate) async fn run(web: Web, interval: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match web.store().try_gc_turn().await {
            Ok(Some(turn)) => {
                collect(&web).await;
                drop(turn);
                web.metrics().gc_pass("collected");
            }
            Ok(None) => {
                tracing::debug!("another web node is collecting garbage; skipping this tick");
                web.metrics().gc_pass("skipped");
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not take the garbage collection turn; retrying next tick");
                web.metrics().gc_pass("failed");
            }
        }
    }
}

/// Waits for this node's turn, then collects once.
pub(crate) async fn tick(web: &Web) -> Vec<CollectorRun> {
    match web.store().gc_turn().await {
        Ok(_turn) => {
            let runs = collect(web).await;
            web.metrics().gc_pass("collected");
            runs
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not take the garbage collection turn");
            web.metrics().gc_pass("failed");
            Vec::new()
        }
    }
}

/// Runs every collector once, in order, each at the time it starts, then
/// the jobs' build log retention.
async fn collect(web: &Web) -> Vec<CollectorRun> {
    let mut runs = Vec::with_capacity(Collector::ALL.len());
    for collector in Collector::ALL {
        let started = Instant::now();
        let result = web
            .store()
            .run_collector(collector, &web.config().gc, web.now())
            .await;
        let duration = started.elapsed();
        let run = match result {
            Ok(stats) => CollectorRun {
                collector,
                stats,
                error: None,
                duration,
            },
            Err(e) => {
                tracing::warn!(%collector, error = %e, "garbage collector failed; retrying next tick");
                CollectorRun {
                    collector,
                    stats: CollectorStats::default(),
                    error: Some(e.to_string()),
                    duration,
                }
            }
        };
        if run.stats != CollectorStats::default() {
            tracing::info!(
                %collector,
                found = run.stats.found,
                destroyed = run.stats.destroyed,
                failed = run.stats.failed,
                ms = run.duration.as_millis() as u64,
                "garbage collected"
            );
        }
        web.metrics().gc_run(&run);
        runs.push(run);
    }
    // Jobs' build_log_retention: not a collector of volumes, but the same
    // pass, as Concourse's build log collector runs with its GC.
    match crate::log_retention::reap(web).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(logs = n, "reaped build logs (build_log_retention)"),
        Err(e) => tracing::warn!(error = %e, "build_log_retention failed; retrying next tick"),
    }
    runs
}
