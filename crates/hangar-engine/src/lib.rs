//! The build engine: one loop per web node claims builds (pending ones, and
//! started ones whose node died) and runs each in a task it owns. A build's
//! progress is in the database step by step, so any node can resume it.
//!
//! The engine knows nothing of HTTP servers. It reads and writes the store,
//! asks `hangar-core` for every decision (`hangar_core::engine`, placement,
//! retries), and reaches workers only through the [`Workers`] trait, so its
//! behaviour is tested in-process with the recording fake (`fake` feature).
//! Every call to a worker runs under the step's worker watch and the build's
//! cancellation ([`context::BuildContext::call`]).

mod action_log;
mod artifact_files;
mod build_versions;
mod caches;
pub mod check;
mod clock;
mod context;
#[cfg(feature = "fake")]
pub mod fake;
mod get_step;
mod halt;
mod http_workers;
mod load_var_step;
mod logs;
pub mod placement;
mod put_step;
mod recent_checks;
mod runner;
mod secrets;
mod set_pipeline_step;
mod step_inputs;
mod task_step;
mod volumes;
mod watch;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use hangar_core::backoff::{Backoff, Change};
use hangar_store::Store;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use clock::{system_now_ms, Clock};
pub use http_workers::{call_error, HttpWorkers};
pub use secrets::{resolve_plan, PlanVarsError, BUILD_TEAM, RESOLVE_WITHIN};
pub use volumes::{OpError, Source};
pub use workers::{ActionStderr, CallError, CopyError, LogStream, Workers};

/// How long a claimed build stays with its node without a renewal.
pub const LEASE_MS: i64 = hangar_core::leases::BUILD_LEASE_MS;

/// The default of [`EngineConfig::no_worker_timeout`] (web's
/// `--no-worker-timeout`).
pub const DEFAULT_NO_WORKER_TIMEOUT: Duration = Duration::from_secs(60);

/// What the engine is told by the node that runs it.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node's name in build leases.
    pub node_id: String,
    /// How long a build's lease lasts without renewal.
    pub lease_ms: i64,
    /// The fleet's heartbeat TTL and lifecycle pass: how long web may take
    /// to judge a worker that could not be reached.
    pub heartbeat_ttl_ms: i64,
    pub lifecycle_pass_ms: i64,
    /// How often steps look again (placement waits, worker watches).
    pub poll: Duration,
    /// How long a successful check of an image (a task's `image_resource`,
    /// a custom type's image) is reused by later builds, as Concourse's
    /// check interval; 0 checks every time.
    pub image_check_interval_ms: i64,
    /// How long a step (or a check) waits for a worker of the kind it
    /// needs (one with its resource type, platform, tags) when none is
    /// registered, before it fails saying so; 0 fails at once.
    pub no_worker_timeout: Duration,
    /// How steps are placed: the chain of strategies and their limits
    /// (`--container-placement-strategy`, `--max-active-*-per-worker`).
    pub placement: hangar_core::placement::Placement,
    /// How long a running step's worker may leave the engine's waits for
    /// the step's container unanswered while it goes on heartbeating,
    /// before the step is retried elsewhere as if the worker were
    /// unreachable (a hung or rogue worker does not hold a build for
    /// ever).
    pub unanswered_for: Duration,
    /// How long a job build's failed task container is kept for
    /// `intercept` at most (it goes sooner when the job's next build
    /// starts); 0 keeps none.
    pub keep_failed_containers_for: Duration,
    /// How long a one-off build's failed task container is kept; 0 keeps
    /// none.
    pub keep_failed_one_off_containers_for: Duration,
}

/// The default of [`EngineConfig::keep_failed_containers_for`].
pub const DEFAULT_KEEP_FAILED_CONTAINERS_FOR: Duration = Duration::from_secs(24 * 3600);
/// The default of [`EngineConfig::keep_failed_one_off_containers_for`]:
/// Concourse's one-off grace period.
pub const DEFAULT_KEEP_FAILED_ONE_OFF_CONTAINERS_FOR: Duration = Duration::from_secs(5 * 60);

/// The default of [`EngineConfig::unanswered_for`]: long past any pause an
/// honest worker's API takes under load.
pub const DEFAULT_UNANSWERED_FOR: Duration = Duration::from_secs(60);

impl EngineConfig {
    pub fn new(node_id: impl Into<String>) -> EngineConfig {
        EngineConfig {
            node_id: node_id.into(),
            lease_ms: LEASE_MS,
            heartbeat_ttl_ms: 15_000,
            lifecycle_pass_ms: 1_000,
            poll: Duration::from_millis(500),
            image_check_interval_ms: recent_checks::DEFAULT_INTERVAL_MS,
            no_worker_timeout: DEFAULT_NO_WORKER_TIMEOUT,
            placement: Default::default(),
            unanswered_for: DEFAULT_UNANSWERED_FOR,
            keep_failed_containers_for: DEFAULT_KEEP_FAILED_CONTAINERS_FOR,
            keep_failed_one_off_containers_for: DEFAULT_KEEP_FAILED_ONE_OFF_CONTAINERS_FOR,
        }
    }
}

/// What the engine reports to its node's metrics.
pub trait EngineObserver: Send + Sync + 'static {
    /// A step is retried after an infrastructure failure of this kind.
    fn step_retried(&self, _cause: &'static str) {}
}

/// Reports nothing.
pub struct NoObserver;
impl EngineObserver for NoObserver {}

/// One node's engine: the store, the workers, the clock, and the signals
/// between the engine and the node's API (a build was created; a build's
/// log grew).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    workers: Arc<dyn Workers>,
    clock: Clock,
    config: EngineConfig,
    observer: Arc<dyn EngineObserver>,
    wake: Notify,
    build_events: Notify,
    build_finished: Notify,
    recent_checks: recent_checks::RecentChecks,
    /// Where the `((vars))` left in stored plans are read from when a
    /// build runs; none: plans hold no vars (web refuses them).
    credentials: std::sync::OnceLock<Arc<hangar_creds::Credentials>>,
    /// Workers a step failed on for their own fault, until when (Unix
    /// millis): placement takes their claims with doubt (this node's
    /// memory only; another node learns from its own steps).
    distrusted: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

/// How long a worker a step failed on stays distrusted.
pub const DISTRUST_MS: i64 = 5 * 60 * 1000;

impl Engine {
    pub fn new(
        store: Store,
        workers: Arc<dyn Workers>,
        clock: Clock,
        config: EngineConfig,
        observer: Arc<dyn EngineObserver>,
    ) -> Engine {
        Engine {
            inner: Arc::new(Inner {
                store,
                workers,
                clock,
                config,
                observer,
                wake: Notify::new(),
                build_events: Notify::new(),
                build_finished: Notify::new(),
                recent_checks: recent_checks::RecentChecks::default(),
                credentials: std::sync::OnceLock::new(),
                distrusted: Default::default(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn workers(&self) -> &dyn Workers {
        self.inner.workers.as_ref()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn now(&self) -> i64 {
        self.inner.clock.now()
    }

    /// A step failed on `worker` for the worker's fault: placement prefers
    /// every other worker that fits for [`DISTRUST_MS`].
    pub fn distrust(&self, worker: &str) {
        let now = self.now();
        let mut map = self
            .inner
            .distrusted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.retain(|_, until| *until > now);
        map.insert(worker.to_string(), now + DISTRUST_MS);
    }

    pub(crate) fn is_distrusted(&self, worker: &str) -> bool {
        let now = self.now();
        self.inner
            .distrusted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(worker)
            .is_some_and(|until| *until > now)
    }

    pub(crate) fn recent_checks(&self) -> &recent_checks::RecentChecks {
        &self.inner.recent_checks
    }

    /// Sets the credential manager builds resolve their vars from (once,
    /// before [`Engine::run`]); a second call is refused.
    pub fn set_credentials(
        &self,
        credentials: Arc<hangar_creds::Credentials>,
    ) -> Result<(), String> {
        self.inner
            .credentials
            .set(credentials)
            .map_err(|_| "the engine's credential manager is already set".to_string())
    }

    pub fn credentials(&self) -> Option<&Arc<hangar_creds::Credentials>> {
        self.inner.credentials.get()
    }

    /// Wakes the claim loop (a build was created).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Notified (one permit kept) when a build this node ran finished:
    /// the scheduler looks at once at the jobs it may concern.
    pub fn build_finished(&self) -> &Notify {
        &self.inner.build_finished
    }

    /// Notified whenever a build's log or status changes, for watchers.
    pub fn build_events(&self) -> &Notify {
        &self.inner.build_events
    }

    pub(crate) fn observer(&self) -> &dyn EngineObserver {
        self.inner.observer.as_ref()
    }

    /// Claims and runs builds until `shutdown`. On shutdown every running
    /// build stops where it is (each call to a worker observes the
    /// cancellation), and returns once they all did; their leases run out
    /// and they are resumed by the next node to look.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut builds = JoinSet::new();
        // A database that refuses claims (down, or its disk full) is asked
        // again less and less often, and said so once, not every second.
        let mut claim_errors = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        // A node that is stopping claims nothing more: its builds release
        // their leases as they stop, and the claim loop must not take them
        // (or another node's) back on the way out.
        loop {
            let mut pause = Duration::from_secs(1);
            while !shutdown.is_cancelled() {
                match self
                    .store()
                    .claim_build(&self.config().node_id, self.now(), self.config().lease_ms)
                    .await
                {
                    Ok(Some(build)) => {
                        claimed(&mut claim_errors);
                        tracing::info!(build = build.id, "running build");
                        builds.spawn(runner::run(self.clone(), build, shutdown.child_token()));
                    }
                    Ok(None) => {
                        claimed(&mut claim_errors);
                        break;
                    }
                    Err(e) => {
                        let (delay, change) = claim_errors.failed();
                        if change == Change::StartedFailing {
                            tracing::warn!(error = %e, "cannot claim builds; retrying with backoff");
                        }
                        pause = delay;
                        break;
                    }
                }
            }
            tokio::select! {
                // Shutdown first: a build that ended because of it is
                // ready at the same moment, and must not send the loop
                // round to claim again.
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
                Some(_) = builds.join_next() => {}
            }
        }
        while builds.join_next().await.is_some() {}
    }
}

fn claimed(errors: &mut Backoff) {
    if let Change::Recovered { failures } = errors.succeeded() {
        tracing::info!(failures, "claiming builds works again");
    }
}
