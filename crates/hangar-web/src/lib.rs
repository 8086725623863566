//! The web node's HTTP server: the API over the store and the dashboard.
//!
//! Handlers only parse, authenticate and call the store; every decision is
//! made in `hangar-core` (through the store). The node's control loops are
//! `hangar-control`'s: [`Web`] holds their [`Control`] to wake them, and
//! the caller starts their [`hangar_control::Supervisor`] beside [`serve`].
//! The caller binds the listener (tests bind port 0) and owns the shutdown
//! token; [`serve`] returns once every task it started has stopped.

mod answer;
mod auth;
mod authz;
mod cli_login;
mod dashboard;
mod error;
mod health;
mod json;
mod metrics;
mod oidc;
mod presence;
mod routes;
mod takeover;
mod token_review;
mod users;

use std::sync::Arc;
use std::time::Duration;

use hangar_core::LifecycleConfig;
use hangar_store::{Store, TokenSealing, WorkerTokenKey};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use hangar_control::{Control, Supervisor};
pub use hangar_engine::{Clock, DEFAULT_NO_WORKER_TIMEOUT};
pub use oidc::OidcConfig;
pub use presence::{PresenceEnd, PresenceOutcome};
pub use token_review::TokenReviewConfig;
pub use users::{AuthConfig, LocalUser};

/// Everything web is configured with. Its `Debug` leaves the two secrets
/// out.
#[derive(Clone)]
pub struct WebConfig {
    /// The token users (the CLI) present.
    pub admin_token: String,
    /// The secret workers register with.
    pub worker_key: String,
    pub lifecycle: LifecycleConfig,
    /// The heartbeat interval web dictates to workers, if any.
    pub heartbeat_interval_ms: Option<i64>,
    /// How often the lifecycle loop runs; `None` runs it never (tests drive
    /// it through [`Control::run_lifecycle_once`]).
    pub lifecycle_interval: Option<Duration>,
    pub clock: Clock,
    /// Whether this node runs builds (every node does in production; some
    /// tests drive the API alone).
    pub run_builds: bool,
    /// What the garbage collectors keep, and for how long.
    pub gc: hangar_core::gc::GcConfig,
    /// How often the GC loop runs; `None` runs it never (tests drive it
    /// through [`Control::run_gc_once`]).
    pub gc_interval: Option<Duration>,
    /// The operator accepted that this database is not the one the fleet
    /// registered with: a worker's generation it never issued is adopted
    /// (and numbering goes on above it) instead of refused.
    pub accept_new_database: bool,
    /// `/metrics` answers only the admin token (default: open to
    /// scrapers; see docs/security.md, "Unauthenticated endpoints").
    pub metrics_require_token: bool,
    /// Where the `((vars))` left in a build's plan are read from (a
    /// Kubernetes API server, a directory); none: such a plan is refused.
    pub credentials: Option<Arc<hangar_creds::Credentials>>,
    /// How often the check loop looks for resources due a check; `None`
    /// runs it never (tests drive it).
    pub check_interval: Option<Duration>,
    /// How often the scheduler looks at jobs with something new (it also
    /// wakes at once through [`Control::wake_scheduler`]); `None` runs it
    /// never (tests drive it).
    pub scheduler_interval: Option<Duration>,
    /// How long a check or a build step waits for a worker of the kind it
    /// needs (its resource type, platform, tags) while none is registered,
    /// before it fails saying so (`--no-worker-timeout`); 0 fails at once.
    pub no_worker_timeout: Duration,
    /// How the engine places steps on workers (`--container-placement-strategy`).
    pub placement: hangar_core::placement::Placement,
    /// How long a failed task's container is kept for `intercept`: a job
    /// build's (at most; the job's next build ends it), a one-off build's
    /// (`--keep-failed-containers-for`, `--gc-one-off-grace-period`).
    pub keep_failed_containers: KeepFailedContainers,
    /// Who logs in (local users), main's auth, and how long sessions last.
    pub auth: AuthConfig,
    /// Team → the key that team's workers register with (workers of that
    /// team only).
    pub team_worker_keys: std::collections::BTreeMap<String, String>,
    /// Worker name → the key that one worker registers with (that name
    /// only, as a shared worker).
    pub named_worker_keys: std::collections::BTreeMap<String, String>,
    /// Workers that register with their pod's service-account token,
    /// checked by the Kubernetes API server (TokenReview).
    pub token_review: Option<TokenReviewConfig>,
    /// The HTTP server's deadlines and connection caps (`--http-*`).
    pub http_limits: hangar_http::Limits,
}

/// See [`WebConfig::keep_failed_containers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepFailedContainers {
    pub job_builds: Duration,
    pub one_off_builds: Duration,
}

impl Default for KeepFailedContainers {
    fn default() -> Self {
        KeepFailedContainers {
            job_builds: hangar_engine::DEFAULT_KEEP_FAILED_CONTAINERS_FOR,
            one_off_builds: hangar_engine::DEFAULT_KEEP_FAILED_ONE_OFF_CONTAINERS_FOR,
        }
    }
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("admin_token", &"<redacted>")
            .field("worker_key", &"<redacted>")
            .field("lifecycle", &self.lifecycle)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("lifecycle_interval", &self.lifecycle_interval)
            .field("clock", &self.clock)
            .field("run_builds", &self.run_builds)
            .field("gc", &self.gc)
            .field("gc_interval", &self.gc_interval)
            .field("accept_new_database", &self.accept_new_database)
            .field("metrics_require_token", &self.metrics_require_token)
            .field("credentials", &self.credentials)
            .field("check_interval", &self.check_interval)
            .field("scheduler_interval", &self.scheduler_interval)
            .field("no_worker_timeout", &self.no_worker_timeout)
            .field("placement", &self.placement)
            .field("keep_failed_containers", &self.keep_failed_containers)
            .field("auth", &self.auth)
            .field(
                "team_worker_keys",
                &self.team_worker_keys.keys().collect::<Vec<_>>(),
            )
            .field(
                "named_worker_keys",
                &self.named_worker_keys.keys().collect::<Vec<_>>(),
            )
            .field("token_review", &self.token_review)
            .field("http_limits", &self.http_limits)
            .finish()
    }
}

impl WebConfig {
    /// Refuses configurations that would make the API unsafe or useless.
    pub fn validate(&self) -> Result<(), String> {
        if self.admin_token.len() < 16 {
            return Err("the admin token must be at least 16 characters".into());
        }
        if self.worker_key.len() < 16 {
            return Err("the worker key must be at least 16 characters".into());
        }
        if self.admin_token == self.worker_key {
            return Err("the admin token and the worker key must differ".into());
        }
        let keyed = self
            .team_worker_keys
            .iter()
            .map(|(team, key)| (format!("team {team}"), key))
            .chain(
                self.named_worker_keys
                    .iter()
                    .map(|(name, key)| (format!("worker {name}"), key)),
            )
            .collect::<Vec<_>>();
        for (whose, key) in &keyed {
            if key.len() < 16 {
                return Err(format!(
                    "the worker key of {whose} must be at least 16 characters"
                ));
            }
            if **key == self.admin_token || **key == self.worker_key {
                return Err(format!(
                    "the worker key of {whose} must differ from the admin token and the fleet's worker key"
                ));
            }
            if keyed.iter().any(|(w, k)| w != whose && k == key) {
                return Err(format!("{whose} shares its worker key with another"));
            }
        }
        if self.lifecycle.heartbeat_ttl_ms <= 0 {
            return Err("the heartbeat ttl must be positive".into());
        }
        if self.gc.missing_grace_ms < 0 {
            return Err("the missing grace period must not be negative".into());
        }
        if self.gc.abandoned_creation_ms < 2 {
            return Err("the abandoned-creation timeout must be positive".into());
        }
        if let Some(interval) = self.heartbeat_interval_ms {
            if interval <= 0 || interval >= self.lifecycle.heartbeat_ttl_ms {
                return Err(format!(
                    "the heartbeat interval ({interval}ms) must be positive and shorter than the heartbeat ttl ({}ms)",
                    self.lifecycle.heartbeat_ttl_ms
                ));
            }
        }
        Ok(())
    }
}

/// The shared state of one web node.
#[derive(Clone)]
pub struct Web {
    inner: Arc<WebInner>,
}

struct WebInner {
    store: Store,
    config: WebConfig,
    metrics: Arc<metrics::Metrics>,
    /// The build engine (every node has one; it runs builds only with
    /// `run_builds`), and the calls web makes to workers through it.
    engine: hangar_engine::Engine,
    workers: hangar_engine::HttpWorkers,
    /// One database write probe at a time.
    probe_gate: health::ProbeGate,
    /// The node's control loops (woken by the API).
    control: Control,
    /// Wrong admin tokens sent to the dashboard's login form, per client.
    login_limit: std::sync::Mutex<hangar_core::login_limit::LoginLimiter>,
    /// Wrong passwords, per account, per client and in all.
    login_throttle: std::sync::Mutex<hangar_core::login_throttle::LoginThrottle>,
    /// Wrong bearer tokens on the API, per client address.
    bearer_limit: std::sync::Mutex<hangar_core::login_limit::LoginLimiter>,
    /// Cancelled when `serve` begins to stop: long-lived responses (the
    /// dashboard's log streams) end instead of holding the drain.
    stopping: CancellationToken,
    /// The workers' presences this node holds (`presence.rs`).
    presences: presence::Presences,
    /// The OIDC provider users log in through, if one is configured.
    oidc: Option<oidc::Oidc>,
    /// The API server that vouches for pods' tokens, if configured.
    token_reviewer: Option<token_review::TokenReviewer>,
    /// What open dashboard pages wait on to refresh (`dashboard::live`).
    live: dashboard::Live,
}

impl Web {
    pub fn new(store: Store, config: WebConfig) -> Result<Web, String> {
        config.validate()?;
        // Workers' API tokens are sealed at rest with a key from the admin
        // token: every web node of the installation holds it, no worker
        // does, and the database does not.
        let store = store
            .with_worker_token_key(WorkerTokenKey::derive(
                config.admin_token.as_bytes(),
                "the admin token",
            ))
            .with_young_volume_grace(hangar_core::volumes::YOUNG_VOLUME_MS);
        let metrics = Arc::new(metrics::Metrics::new());
        // A request making a volume times out at half the age at which GC
        // gives a `creating` row up: it never sees its row failed under it.
        let create_timeout =
            Duration::from_millis((config.gc.abandoned_creation_ms / 2).max(1) as u64);
        let workers = hangar_engine::HttpWorkers::new(store.clone(), create_timeout);
        let node_id = format!("web-{}", uuid::Uuid::new_v4().simple());
        let mut engine_config = hangar_engine::EngineConfig::new(node_id.clone());
        engine_config.heartbeat_ttl_ms = config.lifecycle.heartbeat_ttl_ms;
        engine_config.lifecycle_pass_ms = config
            .lifecycle_interval
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(1_000);
        engine_config.no_worker_timeout = config.no_worker_timeout;
        engine_config.placement = config.placement.clone();
        engine_config.keep_failed_containers_for = config.keep_failed_containers.job_builds;
        engine_config.keep_failed_one_off_containers_for =
            config.keep_failed_containers.one_off_builds;
        let engine = hangar_engine::Engine::new(
            store.clone(),
            Arc::new(workers.clone()),
            config.clock.clone(),
            engine_config,
            Arc::new(metrics.engine_observer()),
        );
        if let Some(credentials) = &config.credentials {
            engine.set_credentials(credentials.clone())?;
        }
        let control = Control::new(
            store.clone(),
            engine.clone(),
            hangar_control::ControlConfig {
                lifecycle: config.lifecycle,
                lifecycle_interval: config.lifecycle_interval,
                clock: config.clock.clone(),
                run_builds: config.run_builds,
                gc: config.gc.clone(),
                gc_interval: config.gc_interval,
                check_interval: config.check_interval,
                scheduler_interval: config.scheduler_interval,
                no_worker_timeout: config.no_worker_timeout,
            },
            metrics.clone(),
        );
        let oidc =
            match (&config.auth.oidc, &config.auth.external_url) {
                (None, _) => None,
                (Some(o), Some(url)) => Some(oidc::Oidc::new(o.clone(), url)?),
                (Some(_), None) => return Err(
                    "an OIDC provider needs --external-url: the provider sends browsers back there"
                        .into(),
                ),
            };
        let token_reviewer = config
            .token_review
            .clone()
            .map(token_review::TokenReviewer::new)
            .transpose()?;
        Ok(Web {
            inner: Arc::new(WebInner {
                store,
                config,
                metrics,
                engine,
                workers,
                probe_gate: health::ProbeGate::default(),
                control,
                login_limit: Default::default(),
                login_throttle: Default::default(),
                bearer_limit: std::sync::Mutex::new(authz::bearer_limiter()),
                stopping: CancellationToken::new(),
                presences: Default::default(),
                oidc,
                token_reviewer,
                live: dashboard::Live::default(),
            }),
        })
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn config(&self) -> &WebConfig {
        &self.inner.config
    }

    pub(crate) fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    pub(crate) fn engine(&self) -> &hangar_engine::Engine {
        &self.inner.engine
    }

    pub(crate) fn workers(&self) -> &hangar_engine::HttpWorkers {
        &self.inner.workers
    }

    pub(crate) fn build_events(&self) -> &tokio::sync::Notify {
        self.inner.engine.build_events()
    }

    /// The node's control loops.
    pub fn control(&self) -> &Control {
        &self.inner.control
    }

    /// Asks the scheduler to look at jobs now (on every node).
    pub(crate) fn wake_scheduler(&self) {
        self.inner.control.wake_scheduler();
    }

    pub(crate) fn probe_gate(&self) -> &health::ProbeGate {
        &self.inner.probe_gate
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.config.clock.now()
    }

    /// Seals the worker API tokens stored in plaintext (by a web of a
    /// version before tokens were sealed), and warns of those this node's
    /// key does not open. Run before [`serve`] and the loops start (the
    /// `web` command's `run_node` does), so neither reads a token unsealed.
    pub async fn seal_stored_api_tokens(&self) -> Result<TokenSealing, hangar_store::StoreError> {
        let found = self.store().seal_plaintext_api_tokens().await?;
        if !found.sealed.is_empty() {
            tracing::info!(count = found.sealed.len(), workers = ?found.sealed, "sealed worker API tokens stored in plaintext");
        }
        if let Some((_, why)) = found.unreadable.first() {
            let workers: Vec<&str> = found.unreadable.iter().map(|(w, _)| w.as_str()).collect();
            tracing::warn!(
                count = workers.len(),
                ?workers,
                "web cannot call these workers until they register again: {why}"
            );
        }
        Ok(found)
    }

    /// Runs web's database write probe once now (as `/info` does).
    pub async fn probe_database(&self) -> Result<(), hangar_store::StoreError> {
        health::probe(self).await
    }

    /// Asks this node's check loop to claim now.
    pub(crate) fn wake_checks(&self) {
        self.inner.control.wake_checks();
    }

    pub(crate) fn login_limit(
        &self,
    ) -> std::sync::MutexGuard<'_, hangar_core::login_limit::LoginLimiter> {
        // The limiter's state stays whole whatever panicked holding it.
        self.inner
            .login_limit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn login_throttle(
        &self,
    ) -> std::sync::MutexGuard<'_, hangar_core::login_throttle::LoginThrottle> {
        self.inner
            .login_throttle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn token_reviewer(&self) -> Option<&token_review::TokenReviewer> {
        self.inner.token_reviewer.as_ref()
    }

    pub(crate) fn oidc(&self) -> Option<&oidc::Oidc> {
        self.inner.oidc.as_ref()
    }

    pub(crate) fn bearer_limit(
        &self,
    ) -> std::sync::MutexGuard<'_, hangar_core::login_limit::LoginLimiter> {
        self.inner
            .bearer_limit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes the main team's auth from web's flags, if they name any
    /// (Concourse rewrites it at every start too). Called once at start,
    /// before serving.
    pub async fn write_main_team_auth(&self) -> Result<(), hangar_store::StoreError> {
        if let Some(auth) = &self.config().auth.main_team {
            let text = serde_json::to_string(auth)
                .map_err(|e| hangar_store::StoreError::Corrupt(e.to_string()))?;
            self.store()
                .set_team_auth(hangar_core::tenancy::MAIN_TEAM, &text, true, self.now())
                .await?;
        }
        Ok(())
    }

    /// Cancelled once this node begins to stop serving.
    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.inner.stopping
    }

    pub(crate) fn live(&self) -> &dashboard::Live {
        &self.inner.live
    }

    pub(crate) fn presences(&self) -> &presence::Presences {
        &self.inner.presences
    }

    /// How every worker presence this node holds ends, from now on.
    pub fn presence_ends(&self) -> tokio::sync::broadcast::Receiver<PresenceEnd> {
        self.inner.presences.ends()
    }

    /// How many worker presences this node holds.
    pub fn presences_held(&self) -> usize {
        self.inner.presences.count()
    }

    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }
}

/// How long in-flight requests may run on once web is stopping.
pub const DRAIN_WITHIN: Duration = Duration::from_secs(10);

/// Serves the API and the dashboard on `listener` until `shutdown` is
/// cancelled, then waits for in-flight requests (up to [`DRAIN_WITHIN`])
/// and its database probe to finish. The control loops are not started
/// here: the caller starts a [`Supervisor`] beside it, after
/// [`Web::seal_stored_api_tokens`] (before any request or loop reads a
/// token).
pub async fn serve(
    listener: TcpListener,
    web: Web,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(health::run(
        web.clone(),
        health::PROBE_INTERVAL,
        shutdown.clone(),
    ));
    let app = web.router();
    let stop = shutdown.clone();
    let stopping = web.stopping().clone();
    // The peer's address goes with each request: a refused takeover's
    // event names who tried.
    let server = hangar_http::serve(listener, app, web.config().http_limits, async move {
        stop.cancelled().await;
        // Streams end now, so only ordinary requests are drained.
        stopping.cancel();
    });
    tokio::pin!(server);
    // In-flight requests get DRAIN_WITHIN to finish once shutdown begins (a
    // long-polling watcher or a slow upload would otherwise hold web past
    // its grace period); then their connections are dropped.
    let result = tokio::select! {
        result = &mut server => result,
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(DRAIN_WITHIN).await;
        } => {
            tracing::warn!(after = ?DRAIN_WITHIN, "requests still in flight at shutdown; closing them");
            Ok(())
        }
    };
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    result.map_err(Into::into)
}
