//! The garbage collection loop: every collector of `hangar_core::gc`, run
//! by the store, every `--gc-interval`. A collector that fails is logged,
//! counted and run again next tick; it never stops the others or the loop.
//! One node at a time collects ([`hangar_store::GcTurn`]): a node whose
//! tick finds another node collecting skips it.

use std::time::{Duration, Instant};

use hangar_core::gc::{Collector, CollectorStats};
use tokio_util::sync::CancellationToken;

use crate::Control;

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

/// How one pass of the loop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcPass {
    /// This node had the turn and ran every collector.
    Collected,
    /// Another node was collecting.
    Skipped,
    /// The turn could not be taken (the database).
    Failed,
}

impl GcPass {
    pub fn as_str(self) -> &'static str {
        match self {
            GcPass::Collected => "collected",
            GcPass::Skipped => "skipped",
            GcPass::Failed => "failed",
        }
    }
}

/// What the loop waits for.
enum Event {
    Tick,
    Shutdown,
}

pub(crate) async fn run(control: Control, interval: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = ticker.tick() => Event::Tick,
        };
        match event {
            Event::Shutdown => return,
            Event::Tick => {
                let pass = try_collect(&control).await;
                control.observer().gc_pass(pass);
            }
        }
    }
}

/// Collects if no other node is collecting.
async fn try_collect(control: &Control) -> GcPass {
    match control.store().try_gc_turn().await {
        Ok(Some(turn)) => {
            collect(control).await;
            drop(turn);
            GcPass::Collected
        }
        Ok(None) => {
            tracing::debug!("another web node is collecting garbage; skipping this tick");
            GcPass::Skipped
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not take the garbage collection turn; retrying next tick");
            GcPass::Failed
        }
    }
}

/// Waits for this node's turn, then collects once.
pub(crate) async fn tick(control: &Control) -> Vec<CollectorRun> {
    match control.store().gc_turn().await {
        Ok(_turn) => {
            let runs = collect(control).await;
            control.observer().gc_pass(GcPass::Collected);
            runs
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not take the garbage collection turn");
            control.observer().gc_pass(GcPass::Failed);
            Vec::new()
        }
    }
}

/// Runs every collector once, in order, each at the time it starts, then
/// the jobs' build log retention.
async fn collect(control: &Control) -> Vec<CollectorRun> {
    let mut runs = Vec::with_capacity(Collector::ALL.len());
    for collector in Collector::ALL {
        let started = Instant::now();
        let result = control
            .store()
            .run_collector(collector, &control.config().gc, control.now())
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
        control.observer().gc_run(&run);
        runs.push(run);
    }
    // Jobs' build_log_retention: not a collector of volumes, but the same
    // pass, as Concourse's build log collector runs with its GC.
    match crate::log_retention::reap(control).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(logs = n, "reaped build logs (build_log_retention)"),
        Err(e) => tracing::warn!(error = %e, "build_log_retention failed; retrying next tick"),
    }
    runs
}
