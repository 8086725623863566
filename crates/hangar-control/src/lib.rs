//! The web node's control loops: the lifecycle loop (workers' liveness),
//! the garbage collector, the check loop, the scheduler and its wake-ups
//! across nodes, and the node's own heartbeat. Each is a small loop that
//! waits for one of a closed set of events and acts on it; what to decide
//! is `hangar-core`'s, what to read and write the store's.
//!
//! [`Control`] is the state they share; [`Supervisor`] starts them, owns
//! every task they run and stops them. The `web` command starts one
//! supervisor beside the HTTP server; `hangar-web` holds a [`Control`] only
//! to wake loops (a trigger wakes the scheduler, a webhook the check loop)
//! and to run the scheduler's decision for a manual trigger.

mod check_loop;
mod gc_loop;
mod lifecycle_loop;
mod log_retention;
mod scheduler_loop;
mod scheduler_resolve;
mod scheduler_wakeups;
mod supervisor;
mod web_nodes_loop;

use std::sync::Arc;
use std::time::Duration;

use hangar_core::EventKind;
use hangar_core::LifecycleConfig;
use hangar_engine::{Clock, Engine};
use hangar_store::Store;

pub use check_loop::MAX_CONCURRENT_CHECKS;
pub use gc_loop::{CollectorRun, GcPass};
pub use scheduler_loop::start_held;
use scheduler_loop::ConfigCache;
pub use scheduler_resolve::{
    decide_job, plan_with, waiting_json, waiting_words, JobDecision, PipelineView,
};
pub use supervisor::Supervisor;

/// When and how the loops run. `None` intervals run a loop never (tests
/// drive it through the `run_*_once` calls).
#[derive(Clone, Debug)]
pub struct ControlConfig {
    pub lifecycle: LifecycleConfig,
    pub lifecycle_interval: Option<Duration>,
    pub clock: Clock,
    /// Whether this node's engine runs builds.
    pub run_builds: bool,
    pub gc: hangar_core::gc::GcConfig,
    pub gc_interval: Option<Duration>,
    pub check_interval: Option<Duration>,
    pub scheduler_interval: Option<Duration>,
    /// How long a check waits for a worker of its kind while none is
    /// registered before it fails saying so.
    pub no_worker_timeout: Duration,
}

/// What the loops report as they go (web's `/metrics` counts it).
pub trait ControlObserver: Send + Sync {
    fn gc_pass(&self, pass: GcPass);
    fn gc_run(&self, run: &CollectorRun);
    fn lifecycle_event(&self, event: EventKind);
}

/// The state the loops share, and the wake-ups the API rings.
#[derive(Clone)]
pub struct Control {
    inner: Arc<ControlInner>,
}

struct ControlInner {
    store: Store,
    engine: Engine,
    config: ControlConfig,
    observer: Arc<dyn ControlObserver>,
    /// Rung when something a job's next build depends on changed (a new
    /// version, a finished build, a pin): the scheduler looks at once
    /// instead of at its next tick.
    schedule_wakeup: tokio::sync::Notify,
    /// Rung to pass a wake-up on to the other web nodes; the task of
    /// `scheduler_wakeups::tell` sends it (wake-ups meanwhile are one).
    others_wakeup: tokio::sync::Notify,
    /// Rung when a check is asked for (webhook, `check-resource`).
    check_wakeup: tokio::sync::Notify,
    scheduler_configs: ConfigCache,
}

impl Control {
    /// The loops of a node whose builds `engine` runs.
    pub fn new(
        store: Store,
        engine: Engine,
        config: ControlConfig,
        observer: Arc<dyn ControlObserver>,
    ) -> Control {
        Control {
            inner: Arc::new(ControlInner {
                store,
                engine,
                config,
                observer,
                schedule_wakeup: tokio::sync::Notify::new(),
                others_wakeup: tokio::sync::Notify::new(),
                check_wakeup: tokio::sync::Notify::new(),
                scheduler_configs: ConfigCache::default(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn config(&self) -> &ControlConfig {
        &self.inner.config
    }

    fn observer(&self) -> &dyn ControlObserver {
        &*self.inner.observer
    }

    fn now(&self) -> i64 {
        self.inner.config.clock.now()
    }

    /// This node's name in leases (its engine's builds, its scheduler's
    /// pipelines) and in `web_nodes`.
    pub fn node_id(&self) -> &str {
        &self.inner.engine.config().node_id
    }

    /// Parsed pipeline configs, shared by the scheduler and manual
    /// triggers.
    fn config_cache(&self) -> &ConfigCache {
        &self.inner.scheduler_configs
    }

    /// Asks the scheduler to look at jobs now: this node's, and on
    /// PostgreSQL every other node's too (the pipeline's lease may be
    /// held elsewhere).
    pub fn wake_scheduler(&self) {
        self.wake_local_scheduler();
        scheduler_wakeups::tell_other_nodes(self);
    }

    /// Wakes this node's scheduler only (what another node asked for).
    fn wake_local_scheduler(&self) {
        self.inner.schedule_wakeup.notify_one();
    }

    /// Waits until [`Control::wake_scheduler`] is called (a call made
    /// before the wait is not lost).
    async fn scheduler_woken(&self) {
        self.inner.schedule_wakeup.notified().await
    }

    /// Waits until a wake-up is to be passed on to the other nodes.
    async fn others_to_wake(&self) {
        self.inner.others_wakeup.notified().await
    }

    fn wake_other_nodes(&self) {
        self.inner.others_wakeup.notify_one();
    }

    /// Asks this node's check loop to claim now.
    pub fn wake_checks(&self) {
        self.inner.check_wakeup.notify_one();
    }

    async fn checks_woken(&self) {
        self.inner.check_wakeup.notified().await
    }

    /// Runs one scheduler pass now; the number of builds it created.
    pub async fn run_scheduler_once(&self) -> Result<usize, hangar_store::StoreError> {
        scheduler_loop::tick(self).await
    }

    /// Runs one pass of the lifecycle loop now.
    pub async fn run_lifecycle_once(&self) -> Result<usize, hangar_store::StoreError> {
        lifecycle_loop::tick(self).await
    }

    /// Runs one pass of the check loop now, to its end: answers how many
    /// checks it ran.
    pub async fn run_checks_once(&self) -> Result<usize, hangar_store::StoreError> {
        check_loop::pass(self).await
    }

    /// Runs every garbage collector once now.
    pub async fn run_gc_once(&self) -> Vec<CollectorRun> {
        gc_loop::tick(self).await
    }
}
