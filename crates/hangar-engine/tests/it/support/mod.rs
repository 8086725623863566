//! An engine over a real (in-memory SQLite) store and the recording fake
//! of the workers, with helpers to change the fleet under it.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use hangar_core::build::BuildStatus;
use hangar_core::LifecycleConfig;
use hangar_engine::fake::FakeWorkers;
use hangar_engine::{Clock, Engine, EngineConfig, NoObserver};
use hangar_store::{Store, WorkerInfo};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a test waits for something that should happen within a
/// second or two before calling it a hang.
pub(crate) const HANG: Duration = Duration::from_secs(30);

pub(crate) struct Harness {
    pub store: Store,
    pub fake: FakeWorkers,
    pub engine: Engine,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<()>>,
    /// The database's directory, for the harness that made it.
    _db_dir: Option<tempfile::TempDir>,
}

pub(crate) fn info(name: &str, identity: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.to_string(),
        state_identity: identity.to_string(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "test".into(),
        resource_types_json: r#"[{"type":"mock","path":"/fake/mock"}]"#.into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: Some("http://fake.invalid:7788".into()),
        allow_privileged: false,
    }
}

pub(crate) fn config(node: &str) -> EngineConfig {
    let mut config = EngineConfig::new(node);
    // Short enough that a test waits well under a second for web to judge
    // an unreachable worker or for a dead node's lease to run out.
    config.lease_ms = 900;
    config.heartbeat_ttl_ms = 200;
    config.lifecycle_pass_ms = 50;
    config.poll = Duration::from_millis(20);
    // Every build checks its images, so tests see each check; the reuse
    // of a recent check has tests of its own (`Harness::new_with`).
    config.image_check_interval_ms = 0;
    config
}

pub(crate) fn now() -> i64 {
    hangar_engine::system_now_ms()
}

impl Harness {
    pub(crate) async fn new(workers: &[&str]) -> Harness {
        Harness::new_with(workers, |_| {}).await
    }

    /// [`Harness::new`] with the engine's configuration changed by `tune`.
    pub(crate) async fn new_with(
        workers: &[&str],
        tune: impl FnOnce(&mut EngineConfig),
    ) -> Harness {
        // A file, not `:memory:`: a node stopped mid-query may lose its
        // connection, and a new connection to `:memory:` is an empty
        // database, which a second node over the same store would see.
        let dir = tempfile::tempdir().expect("a dir for the database");
        let store = Store::open(&format!(
            "sqlite://{}?synchronous=normal",
            dir.path().join("hangar.db").display()
        ))
        .await
        .expect("open the test database");
        for w in workers {
            store
                .register_worker(&info(w, &format!("sid-{w}")), now())
                .await
                .expect("register a worker");
        }
        let fake = FakeWorkers::new();
        let mut config = config("node-a");
        tune(&mut config);
        let mut h = Harness::start_with(store, fake, config);
        h._db_dir = Some(dir);
        h
    }

    /// A node running an engine configured with `config` over `store` (any
    /// database, made by the caller), with `workers` registered.
    pub(crate) async fn on_store(store: Store, workers: &[&str], config: EngineConfig) -> Harness {
        for w in workers {
            store
                .register_worker(&info(w, &format!("sid-{w}")), now())
                .await
                .expect("register a worker");
        }
        Harness::start_with(store, FakeWorkers::new(), config)
    }

    /// A node running an engine over `store` and `fake`.
    pub(crate) fn start(store: Store, fake: FakeWorkers, node: &str) -> Harness {
        Harness::start_with(store, fake, config(node))
    }

    /// A node running an engine configured with `config`.
    pub(crate) fn start_with(store: Store, fake: FakeWorkers, config: EngineConfig) -> Harness {
        let engine = Engine::new(
            store.clone(),
            Arc::new(fake.clone()),
            Clock::System,
            config,
            Arc::new(NoObserver),
        );
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(engine.clone().run(shutdown.clone()));
        Harness {
            store,
            fake,
            engine,
            shutdown,
            task: Some(task),
            _db_dir: None,
        }
    }

    /// Stops the node as SIGTERM does and waits for its engine to return.
    pub(crate) async fn stop(&mut self) {
        self.shutdown.cancel();
        let task = self.task.take().expect("the engine runs");
        tokio::time::timeout(HANG, task)
            .await
            .expect("the engine ends once stopped, whatever its builds are doing")
            .expect("the engine's task ends cleanly");
    }

    /// Kills the node as SIGKILL does: its engine and every build task of
    /// it are dropped wherever they are, releasing nothing.
    pub(crate) async fn kill(&mut self) {
        let task = self.task.take().expect("the engine runs");
        task.abort();
        let _ = task.await;
    }

    pub(crate) async fn submit(&self, plan: serde_json::Value) -> i64 {
        let build = self
            .store
            .create_build("job", None, &plan.to_string(), "{}", now())
            .await
            .expect("create a build");
        self.engine.wake();
        build.id
    }

    /// Waits until the build is final and returns its status.
    pub(crate) async fn finished(&self, id: i64) -> BuildStatus {
        let deadline = tokio::time::Instant::now() + HANG;
        loop {
            let woken = self.woken();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let build = self.store.get_build(id).await.unwrap().unwrap();
            if build.status.is_final() {
                return build.status;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                panic!(
                    "build {id} did not finish; log: {:#?}; calls: {:#?}",
                    self.log(id, &["status", "step", "infra"]).await,
                    self.fake.calls()
                );
            }
        }
    }

    /// Waits (at most [`HANG`]) until the build's log of `kinds` holds a
    /// line with `text`; answers the log.
    pub(crate) async fn logged(&self, id: i64, kinds: &[&str], text: &str) -> Vec<String> {
        self.logged_within(id, kinds, text, HANG).await
    }

    /// As [`Harness::logged`], waiting at most `within`. Woken by this
    /// node's engine each time it writes a build's log or ends a build:
    /// nothing polls.
    pub(crate) async fn logged_within(
        &self,
        id: i64,
        kinds: &[&str],
        text: &str,
        within: Duration,
    ) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let woken = self.woken();
            tokio::pin!(woken);
            // Registered before the log is read: a write in between wakes it.
            woken.as_mut().enable();
            let log = self.log(id, kinds).await;
            if log.iter().any(|l| l.contains(text)) {
                return log;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                panic!("{text:?} never logged within {within:?}: {log:#?}");
            }
        }
    }

    /// Rung by the engine on every build log write and build end.
    fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.engine.build_events().notified()
    }

    /// The build's log lines of these kinds, as `kind: payload`.
    pub(crate) async fn log(&self, id: i64, kinds: &[&str]) -> Vec<String> {
        self.store
            .build_events(id, 0, 10_000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| kinds.contains(&e.kind.as_str()))
            .map(|e| format!("{}: {}", e.kind, e.payload))
            .collect()
    }

    /// The worker is declared stalled by the lifecycle rules (the others
    /// heartbeat just before, so only it stalls).
    pub(crate) async fn stall(&self, worker: &str) {
        let later = now() + 60_000;
        for w in self.store.list_workers().await.unwrap() {
            if w.info.name != worker {
                self.store
                    .heartbeat(&w.info.name, w.generation, 0, 0, later)
                    .await
                    .unwrap();
            }
        }
        let config = LifecycleConfig {
            heartbeat_ttl_ms: 15_000,
            stalled_worker_timeout_ms: None,
        };
        self.store.run_lifecycle(&config, later).await.unwrap();
        let row = self.store.get_worker(worker).await.unwrap().unwrap();
        assert_eq!(row.state, hangar_core::WorkerState::Stalled);
    }

    /// The worker registers again with its work dir wiped.
    pub(crate) async fn restart_wiped(&self, worker: &str) {
        self.fake.wipe(worker);
        self.store
            .register_worker(&info(worker, &format!("sid-{worker}-new")), now())
            .await
            .unwrap();
    }
}

/// A task plan with one output, running `path`.
pub(crate) fn task_plan(path: &str) -> serde_json::Value {
    serde_json::json!([{
        "task": "t",
        "config": {
            "platform": "linux",
            "run": {"path": path},
            "outputs": [{"name": "out"}]
        }
    }])
}
