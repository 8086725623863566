//! Prometheus metrics of the web node, served on `/metrics`.

use std::sync::Mutex;

use hangar_core::{EventKind, WorkerState};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

pub(crate) struct Metrics {
    registry: Mutex<Registry>,
    events: Family<Labels, Counter>,
    heartbeats: Family<Labels, Counter>,
    volume_reports: Family<Labels, Counter>,
    workers: Family<Labels, Gauge>,
    invalidated: Family<Labels, Counter>,
    step_retries: Family<Labels, Counter>,
    gc: GcMetrics,
    database: DatabaseMetrics,
}

/// The database's health as web's write probe last saw it.
struct DatabaseMetrics {
    reachable: Gauge,
    lost: Gauge,
    probe_failures: Counter,
}

impl DatabaseMetrics {
    fn register(registry: &mut Registry) -> DatabaseMetrics {
        let m = DatabaseMetrics {
            reachable: Gauge::default(),
            lost: Gauge::default(),
            probe_failures: Counter::default(),
        };
        registry.register(
            "database_reachable",
            "1 when the database took web's last write probe, else 0",
            m.reachable.clone(),
        );
        registry.register(
            "database_lost",
            "1 once the database is not the one web started on (file deleted or replaced); web refuses writes until restarted",
            m.lost.clone(),
        );
        registry.register(
            "database_probe_failures",
            "Write probes (and guarded writes) the database failed",
            m.probe_failures.clone(),
        );
        m
    }
}

/// Per garbage collector: rows found, destroyed and failed, and how long
/// each run took.
struct GcMetrics {
    passes: Family<Labels, Counter>,
    found: Family<Labels, Counter>,
    destroyed: Family<Labels, Counter>,
    failed: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
}

fn gc_duration_histogram() -> Histogram {
    // 1 ms to about 4.4 minutes.
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

impl GcMetrics {
    fn register(registry: &mut Registry) -> GcMetrics {
        let m = GcMetrics {
            passes: Family::default(),
            found: Family::default(),
            destroyed: Family::default(),
            failed: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(gc_duration_histogram),
        };
        registry.register(
            "gc_passes",
            "Garbage collection ticks of this node, by outcome: collected; skipped (another node \
             held the turn); failed (the turn could not be taken)",
            m.passes.clone(),
        );
        registry.register(
            "gc_found",
            "Rows a garbage collector chose to collect, by collector",
            m.found.clone(),
        );
        registry.register(
            "gc_destroyed",
            "Rows a garbage collector marked destroying or deleted, by collector",
            m.destroyed.clone(),
        );
        registry.register(
            "gc_failed",
            "Rows an error kept a garbage collector from collecting (retried next run), by collector",
            m.failed.clone(),
        );
        registry.register(
            "gc_errors",
            "Garbage collector runs that could not read their candidates, by collector",
            m.errors.clone(),
        );
        registry.register(
            "gc_duration_seconds",
            "How long one run of a garbage collector took, by collector",
            m.duration.clone(),
        );
        m
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("hangar");
        let events = Family::<Labels, Counter>::default();
        let heartbeats = Family::<Labels, Counter>::default();
        let workers = Family::<Labels, Gauge>::default();
        registry.register(
            "worker_events",
            "Worker lifecycle events recorded, by kind",
            events.clone(),
        );
        registry.register(
            "worker_heartbeats",
            "Worker heartbeats received, by result",
            heartbeats.clone(),
        );
        let volume_reports = Family::<Labels, Counter>::default();
        registry.register(
            "volume_reports",
            "Volume reports answered, by whether the worker's rows were read or the report was quiet (same handles, no row changed since its last quiet report)",
            volume_reports.clone(),
        );
        registry.register("workers", "Workers known, by state", workers.clone());
        let invalidated = Family::<Labels, Counter>::default();
        registry.register(
            "invalidated",
            "Rows dropped because a worker registered with its state lost, by kind",
            invalidated.clone(),
        );
        let step_retries = Family::<Labels, Counter>::default();
        registry.register(
            "step_retries",
            "Build step attempts retried after an infrastructure failure, by cause",
            step_retries.clone(),
        );
        let gc = GcMetrics::register(&mut registry);
        let database = DatabaseMetrics::register(&mut registry);
        Metrics {
            gc,
            database,
            registry: Mutex::new(registry),
            events,
            heartbeats,
            volume_reports,
            workers,
            invalidated,
            step_retries,
        }
    }

    pub(crate) fn count_lifecycle_event(&self, kind: EventKind) {
        self.events
            .get_or_create(&vec![("kind", kind.as_str())])
            .inc();
    }

    pub(crate) fn invalidated(&self, volumes: u64, containers: u64) {
        self.invalidated
            .get_or_create(&vec![("kind", "volume")])
            .inc_by(volumes);
        self.invalidated
            .get_or_create(&vec![("kind", "container")])
            .inc_by(containers);
    }

    fn count_gc_pass(&self, outcome: &'static str) {
        self.gc
            .passes
            .get_or_create(&vec![("outcome", outcome)])
            .inc();
    }

    fn count_gc_run(&self, run: &hangar_control::CollectorRun) {
        let labels = vec![("collector", run.collector.as_str())];
        self.gc.found.get_or_create(&labels).inc_by(run.stats.found);
        self.gc
            .destroyed
            .get_or_create(&labels)
            .inc_by(run.stats.destroyed);
        self.gc
            .failed
            .get_or_create(&labels)
            .inc_by(run.stats.failed);
        if run.error.is_some() {
            self.gc.errors.get_or_create(&labels).inc();
        } else {
            // Present from the first run, so dashboards see zeros.
            let _ = self.gc.errors.get_or_create(&labels);
        }
        self.gc
            .duration
            .get_or_create(&labels)
            .observe(run.duration.as_secs_f64());
    }

    /// What the build engine reports: its retries, by cause.
    pub(crate) fn engine_observer(&self) -> EngineMetrics {
        EngineMetrics {
            step_retries: self.step_retries.clone(),
        }
    }

    pub(crate) fn database_probe(&self, ok: bool, lost: bool) {
        self.database.reachable.set(i64::from(ok));
        self.database.lost.set(i64::from(lost));
        if !ok {
            self.database.probe_failures.inc();
        }
    }

    pub(crate) fn heartbeat(&self, accepted: bool) {
        let result = if accepted { "accepted" } else { "refused" };
        self.heartbeats
            .get_or_create(&vec![("result", result)])
            .inc();
    }

    pub(crate) fn volume_report(&self, read_rows: bool) {
        let rows = if read_rows { "read" } else { "quiet" };
        self.volume_reports
            .get_or_create(&vec![("rows", rows)])
            .inc();
    }

    pub(crate) fn set_worker_counts(&self, counts: &[(WorkerState, i64)]) {
        for state in WorkerState::ALL {
            let n = counts
                .iter()
                .filter(|(s, _)| *s == state)
                .map(|(_, n)| *n)
                .sum();
            self.workers
                .get_or_create(&vec![("state", state.as_str())])
                .set(n);
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// The part of web's metrics the build engine writes.
#[derive(Clone)]
pub(crate) struct EngineMetrics {
    step_retries: Family<Labels, Counter>,
}

impl hangar_engine::EngineObserver for EngineMetrics {
    fn step_retried(&self, cause: &'static str) {
        self.step_retries
            .get_or_create(&vec![("cause", cause)])
            .inc();
    }
}

impl hangar_control::ControlObserver for Metrics {
    fn gc_pass(&self, pass: hangar_control::GcPass) {
        self.count_gc_pass(pass.as_str());
    }

    fn gc_run(&self, run: &hangar_control::CollectorRun) {
        self.count_gc_run(run);
    }

    fn lifecycle_event(&self, event: EventKind) {
        self.count_lifecycle_event(event);
    }
}
