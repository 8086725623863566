use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hangar_core::LifecycleConfig;
use hangar_store::Store;
use hangar_web::{Clock, Web, WebConfig};
use tokio_util::sync::CancellationToken;

use crate::duration::{self, millis};

/// Lifecycle timing, shared by `web` and `quickstart`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Lifecycle {
    /// A worker silent for longer than this is stalled (ephemeral: removed).
    #[arg(long, env = "HANGAR_HEARTBEAT_TTL", default_value = "15s", value_parser = duration::parse)]
    pub heartbeat_ttl: Duration,
    /// The heartbeat interval web tells every worker to use (default: each
    /// worker's own --heartbeat-interval).
    #[arg(long, env = "HANGAR_HEARTBEAT_INTERVAL", value_parser = duration::parse)]
    pub heartbeat_interval: Option<Duration>,
    /// A worker stalled for longer than this is removed; 0 = never.
    #[arg(long, env = "HANGAR_STALLED_WORKER_TIMEOUT", default_value = "10m", value_parser = duration::parse)]
    pub stalled_worker_timeout: Duration,
    /// How often the lifecycle loop looks for stalled, landed and retired workers.
    #[arg(long, env = "HANGAR_LIFECYCLE_INTERVAL", default_value = "1s", value_parser = duration::parse)]
    pub lifecycle_interval: Duration,
    /// How often the garbage collectors run.
    #[arg(long, env = "HANGAR_GC_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub gc_interval: Duration,
    /// How often web looks for resources due a check (each resource is
    /// checked every `check_every`, default 1m).
    #[arg(long, env = "HANGAR_CHECK_INTERVAL", default_value = "1s", value_parser = duration::parse)]
    pub check_interval: Duration,
    /// How often the scheduler looks at jobs; it also looks at once when a
    /// version, a build or a pin changes.
    #[arg(long, env = "HANGAR_SCHEDULER_INTERVAL", default_value = "1s", value_parser = duration::parse)]
    pub scheduler_interval: Duration,
    /// How long a resource check or a build step waits for a worker of the
    /// kind it needs (its resource type, platform, tags) while no such
    /// worker is registered, before it fails with the reason (`no worker
    /// has resource type X`); 0 fails at once. A worker of that kind that
    /// is down or busy is waited for without a bound.
    #[arg(long, env = "HANGAR_NO_WORKER_TIMEOUT", default_value = "1m", value_parser = duration::parse)]
    pub no_worker_timeout: Duration,
    /// How long a volume or container a worker stopped reporting is kept
    /// (absent for new steps from the first moment) before it is collected.
    #[arg(long, env = "HANGAR_GC_MISSING_GRACE_PERIOD", default_value = "5m", value_parser = duration::parse)]
    pub gc_missing_grace_period: Duration,
    /// A volume row still being created after this long was abandoned (its
    /// web node died mid-request) and is collected; web's own requests to
    /// create a volume time out after half of it.
    #[arg(long, env = "HANGAR_GC_ABANDONED_CREATION_TIMEOUT", default_value = "20m", value_parser = duration::parse)]
    pub gc_abandoned_creation_timeout: Duration,
    /// How long a job build's failed task container is kept for
    /// `intercept` at most: it goes as soon as the job's next build starts
    /// (as in Concourse) or its build succeeds after all; 0 keeps none.
    #[arg(long, env = "HANGAR_KEEP_FAILED_CONTAINERS_FOR", default_value = "24h", value_parser = duration::parse)]
    pub keep_failed_containers_for: Duration,
    /// How long a one-off build's (`execute`) failed task container is
    /// kept for `intercept`; 0 keeps none.
    #[arg(long, env = "HANGAR_GC_ONE_OFF_GRACE_PERIOD", default_value = "5m", value_parser = duration::parse)]
    pub gc_one_off_grace_period: Duration,
    /// Start on this database deliberately although it is not the one the
    /// fleet knew: the marker beside the SQLite file names another (the file
    /// is missing or was replaced), or workers arrive with generations it
    /// never issued (it is empty, restored or replaced; numbering then goes
    /// on above theirs). Without it web refuses to start, or refuses those
    /// workers, who keep their volumes until the right database is back.
    #[arg(long, env = "HANGAR_ACCEPT_NEW_DATABASE")]
    pub accept_new_database: bool,
}

impl Lifecycle {
    pub(crate) fn web_config(
        &self,
        admin_token: String,
        worker_key: String,
    ) -> anyhow::Result<WebConfig> {
        if self.lifecycle_interval.is_zero() {
            anyhow::bail!("--lifecycle-interval must be more than 0");
        }
        if self.gc_interval.is_zero() {
            anyhow::bail!("--gc-interval must be more than 0");
        }
        if self.check_interval.is_zero() {
            anyhow::bail!("--check-interval must be more than 0");
        }
        if self.scheduler_interval.is_zero() {
            anyhow::bail!("--scheduler-interval must be more than 0");
        }
        if self.gc_abandoned_creation_timeout < Duration::from_secs(2) {
            anyhow::bail!("--gc-abandoned-creation-timeout must be at least 2s");
        }
        Ok(WebConfig {
            admin_token,
            worker_key,
            lifecycle: LifecycleConfig {
                heartbeat_ttl_ms: millis(self.heartbeat_ttl),
                stalled_worker_timeout_ms: (!self.stalled_worker_timeout.is_zero())
                    .then(|| millis(self.stalled_worker_timeout)),
            },
            heartbeat_interval_ms: self.heartbeat_interval.map(millis),
            lifecycle_interval: Some(self.lifecycle_interval),
            clock: Clock::System,
            run_builds: true,
            gc: hangar_core::gc::GcConfig {
                missing_grace_ms: millis(self.gc_missing_grace_period),
                abandoned_creation_ms: millis(self.gc_abandoned_creation_timeout),
                ..Default::default()
            },
            gc_interval: Some(self.gc_interval),
            accept_new_database: self.accept_new_database,
            metrics_require_token: false,
            credentials: None,
            check_interval: Some(self.check_interval),
            scheduler_interval: Some(self.scheduler_interval),
            no_worker_timeout: self.no_worker_timeout,
            placement: Default::default(),
            keep_failed_containers: hangar_web::KeepFailedContainers {
                job_builds: self.keep_failed_containers_for,
                one_off_builds: self.gc_one_off_grace_period,
            },
            auth: Default::default(),
            team_worker_keys: Default::default(),
            named_worker_keys: Default::default(),
            token_review: None,
            http_limits: hangar_http::Limits::web(),
        })
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Address to serve the API on.
    #[arg(long, env = "HANGAR_BIND", default_value = "127.0.0.1:8080")]
    pub bind: String,
    /// sqlite://PATH or postgres://USER@HOST:PORT/DB (default: SQLite in --data-dir).
    #[arg(long, env = "HANGAR_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where web keeps its SQLite database when no --database-url is given.
    #[arg(long, env = "HANGAR_DATA_DIR", default_value = "hangar-data")]
    pub data_dir: PathBuf,
    /// The token users present (at least 16 characters).
    #[arg(
        long,
        env = "HANGAR_ADMIN_TOKEN",
        hide_env_values = true,
        required_unless_present = "admin_token_file",
        conflicts_with = "admin_token_file"
    )]
    pub admin_token: Option<String>,
    /// A file holding the admin token (not readable by other users).
    #[arg(long, env = "HANGAR_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// The secret workers register with (at least 16 characters).
    #[arg(
        long,
        env = "HANGAR_WORKER_KEY",
        hide_env_values = true,
        required_unless_present = "worker_key_file",
        conflicts_with = "worker_key_file"
    )]
    pub worker_key: Option<String>,
    /// A file holding the worker key (not readable by other users).
    #[arg(long, env = "HANGAR_WORKER_KEY_FILE")]
    pub worker_key_file: Option<PathBuf>,
    /// Serve `/metrics` only to the admin token (Prometheus then sends it
    /// as a bearer token); by default it is open, like `/api/v1/info`.
    #[arg(long, env = "HANGAR_METRICS_REQUIRE_TOKEN")]
    pub metrics_require_token: bool,
    #[command(flatten)]
    pub lifecycle: Lifecycle,
    #[command(flatten)]
    pub credentials: CredentialFlags,
    #[command(flatten)]
    pub placement: PlacementFlags,
    #[command(flatten)]
    pub users: super::web_users::UserFlags,
    #[command(flatten)]
    pub http: super::http_flags::HttpFlags,
}

/// How steps are placed on workers: Concourse's strategies, chained (see
/// docs/configuration.md, "Placement").
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct PlacementFlags {
    /// A placement strategy, applied in the order given (repeat the flag,
    /// or separate with commas): volume-locality, fewest-build-containers,
    /// random, limit-active-tasks, limit-active-containers,
    /// limit-active-volumes. Default: volume-locality,fewest-build-containers.
    #[arg(
        long = "container-placement-strategy",
        env = "HANGAR_CONTAINER_PLACEMENT_STRATEGY"
    )]
    pub strategies: Vec<String>,
    /// With limit-active-tasks: a task waits while every worker runs this
    /// many tasks (0: no limit).
    #[arg(long, env = "HANGAR_MAX_ACTIVE_TASKS_PER_WORKER", default_value_t = 0)]
    pub max_active_tasks_per_worker: u32,
    /// With limit-active-containers: a step waits while every worker has
    /// this many active containers (0: no limit).
    #[arg(
        long,
        env = "HANGAR_MAX_ACTIVE_CONTAINERS_PER_WORKER",
        default_value_t = 0
    )]
    pub max_active_containers_per_worker: u32,
    /// With limit-active-volumes: a step waits while every worker has this
    /// many volumes (0: no limit).
    #[arg(
        long,
        env = "HANGAR_MAX_ACTIVE_VOLUMES_PER_WORKER",
        default_value_t = 0
    )]
    pub max_active_volumes_per_worker: u32,
}

impl PlacementFlags {
    /// The chain, or why it is refused (an unknown strategy's name, with
    /// the valid ones).
    pub(crate) fn placement(&self) -> anyhow::Result<hangar_core::placement::Placement> {
        use hangar_core::placement::{Placement, Strategy};
        let p = Placement::from_names(
            &self.strategies,
            self.max_active_tasks_per_worker,
            self.max_active_containers_per_worker,
            self.max_active_volumes_per_worker,
        )
        .map_err(|e| anyhow::anyhow!("--container-placement-strategy: {e}"))?;
        for (max, flag, strategy) in [
            (
                p.max_active_tasks,
                "--max-active-tasks-per-worker",
                Strategy::LimitActiveTasks,
            ),
            (
                p.max_active_containers,
                "--max-active-containers-per-worker",
                Strategy::LimitActiveContainers,
            ),
            (
                p.max_active_volumes,
                "--max-active-volumes-per-worker",
                Strategy::LimitActiveVolumes,
            ),
        ] {
            if max > 0 && !p.uses(strategy) {
                tracing::warn!("{flag} has no effect without the {strategy} placement strategy");
            }
        }
        tracing::info!(strategies = %p.names(), "container placement");
        Ok(p)
    }
}

/// Where web reads the `((vars))` a build's plan still holds (one manager
/// at a time, as Concourse). See docs/security.md, "Credentials".
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct CredentialFlags {
    /// Read vars from Kubernetes secrets: namespace <prefix><team>, secret
    /// <pipeline>.<name> then <name>. In a pod, with its service account.
    #[arg(
        long,
        env = "HANGAR_CREDENTIALS_KUBERNETES",
        conflicts_with = "credentials_dir"
    )]
    pub credentials_kubernetes: bool,
    /// The prefix of the namespace of each team's secrets.
    #[arg(
        long,
        env = "HANGAR_CREDENTIALS_KUBERNETES_NAMESPACE_PREFIX",
        default_value = hangar_core::vars::credentials::DEFAULT_NAMESPACE_PREFIX,
        requires = "credentials_kubernetes"
    )]
    pub credentials_kubernetes_namespace_prefix: String,
    /// The API server (https://HOST:PORT) instead of the pod's.
    #[arg(
        long,
        env = "HANGAR_CREDENTIALS_KUBERNETES_URL",
        requires_all = ["credentials_kubernetes", "credentials_kubernetes_token_file"]
    )]
    pub credentials_kubernetes_url: Option<String>,
    /// The bearer token for --credentials-kubernetes-url, read at every request.
    #[arg(
        long,
        env = "HANGAR_CREDENTIALS_KUBERNETES_TOKEN_FILE",
        requires = "credentials_kubernetes_url"
    )]
    pub credentials_kubernetes_token_file: Option<PathBuf>,
    /// The CA bundle of --credentials-kubernetes-url (default: the system's roots).
    #[arg(
        long,
        env = "HANGAR_CREDENTIALS_KUBERNETES_CA_FILE",
        requires = "credentials_kubernetes_url"
    )]
    pub credentials_kubernetes_ca_file: Option<PathBuf>,
    /// Read vars from files: DIR/<team>/<pipeline>/<name> then DIR/<team>/<name>.
    #[arg(long, env = "HANGAR_CREDENTIALS_DIR")]
    pub credentials_dir: Option<PathBuf>,
    /// Keep what the manager answered this long (0: ask every time, the
    /// default, as Concourse's secret cache is off by default). Absent
    /// secrets are kept at most 10s.
    #[arg(long, env = "HANGAR_CREDENTIALS_CACHE_TTL", default_value = "0s", value_parser = duration::parse)]
    pub credentials_cache_ttl: Duration,
    // Boxed: the flags are many, and `Command`'s variants stay close in
    // size.
    #[command(flatten)]
    pub vault: Box<super::vault_flags::VaultFlags>,
}

impl CredentialFlags {
    /// The configured manager, if any.
    pub(crate) fn open(&self) -> anyhow::Result<Option<std::sync::Arc<hangar_creds::Credentials>>> {
        use hangar_creds::{
            cache::Cache, dir::DirSecrets, kube::KubeSecrets, Credentials, Manager,
        };
        let manager = if self.credentials_kubernetes {
            let prefix = &self.credentials_kubernetes_namespace_prefix;
            Manager::Kubernetes(
                match (
                    &self.credentials_kubernetes_url,
                    &self.credentials_kubernetes_token_file,
                ) {
                    (Some(url), Some(token)) => KubeSecrets::new(
                        url,
                        token,
                        self.credentials_kubernetes_ca_file.as_deref(),
                        prefix,
                    )?,
                    _ => KubeSecrets::in_cluster(
                        |k| std::env::var(k).ok(),
                        std::path::Path::new(hangar_creds::kube::DEFAULT_SA_DIR),
                        prefix,
                    )?,
                },
            )
        } else if let Some(dir) = &self.credentials_dir {
            Manager::Dir(DirSecrets::new(dir)?)
        } else if let Some(vault) = self.vault.open()? {
            Manager::Vault(vault)
        } else {
            return Ok(None);
        };
        let credentials = Credentials::new(manager, Cache::new(self.credentials_cache_ttl));
        tracing::info!(credentials = %credentials.describe(), "vars are read from a credential manager");
        Ok(Some(std::sync::Arc::new(credentials)))
    }
}

/// The database URL: the one given, or a SQLite file in the data dir.
pub(crate) fn database_url(
    given: Option<String>,
    data_dir: &std::path::Path,
) -> anyhow::Result<String> {
    match given {
        Some(url) => Ok(url),
        None => {
            crate::secrets::private_dir(data_dir)
                .with_context(|| format!("data dir {}", data_dir.display()))?;
            let db = data_dir.join("hangar.db");
            crate::secrets::private_sqlite(&db)?;
            Ok(format!("sqlite://{}", db.display()))
        }
    }
}

/// Opens the store and builds the web node, with errors that say what to fix.
/// Refuses a SQLite file that is not the database the marker beside it names
/// (unless `accept_new_database`), and a database that takes no write.
pub(crate) async fn open_web(
    url: &str,
    config: WebConfig,
    accept_new_database: bool,
) -> anyhow::Result<Web> {
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let kind = url.split(':').next().unwrap_or("");
    // The store's errors already carry their causes: say each once.
    let store = Store::open_checked(url, accept_new_database)
        .await
        .map_err(|e| anyhow::anyhow!("open the {kind} database: {e}"))?;
    // The store made the file if it was new (and its -wal and -shm): the
    // owner's only, like the secrets beside it.
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        crate::secrets::private_sqlite(std::path::Path::new(path))?;
    }
    let web = Web::new(store, config).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    // A read-only file (or an immutable one) opens and answers reads; start
    // only on a database that takes writes.
    web.probe_database()
        .await
        .map_err(|e| anyhow::anyhow!("the {kind} database takes no writes: {e}"))?;
    Ok(web)
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::init_logging();
    let admin_token = crate::secrets::flag_or_file(
        args.admin_token,
        args.admin_token_file.as_deref(),
        "--admin-token",
    )?;
    let worker_key = crate::secrets::flag_or_file(
        args.worker_key,
        args.worker_key_file.as_deref(),
        "--worker-key",
    )?;
    let mut config = args.lifecycle.web_config(admin_token, worker_key)?;
    config.metrics_require_token = args.metrics_require_token;
    config.credentials = args.credentials.open()?;
    config.auth = args.users.auth_config()?;
    config.team_worker_keys = args.users.team_worker_keys()?;
    config.named_worker_keys = args.users.named_worker_keys()?;
    config.token_review = args.users.token_review()?;
    config.http_limits = args.http.limits(hangar_http::Limits::web())?;
    config.placement = args.placement.placement()?;
    // Refuse a bad configuration before anything is created on disk.
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let url = database_url(args.database_url, &args.data_dir)?;
    let web = open_web(&url, config, args.lifecycle.accept_new_database).await?;
    let listener = tokio::net::TcpListener::bind(&args.bind)
        .await
        .with_context(|| format!("listen on {}", args.bind))?;
    tracing::info!(addr = %listener.local_addr()?, database = web.store().backend().as_str(), "web listening");
    let shutdown = CancellationToken::new();
    crate::signals::stop_on_terminate(shutdown.clone())?;
    run_node(listener, web.clone(), shutdown).await?;
    web.store().close().await;
    Ok(ExitCode::SUCCESS)
}

/// Runs one web node until `shutdown`: the stored worker tokens sealed
/// first (before any request or loop reads one), then the control loops'
/// supervisor and the HTTP server side by side. The server ending for any
/// reason stops the loops; both are waited for.
pub(crate) async fn run_node(
    listener: tokio::net::TcpListener,
    web: Web,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    web.seal_stored_api_tokens()
        .await
        .context("seal the worker API tokens stored in plaintext")?;
    web.write_main_team_auth()
        .await
        .context("write team main's auth from --main-team-local-user")?;
    let loops = hangar_web::Supervisor::start(web.control(), shutdown.clone());
    let served = hangar_web::serve(listener, web, shutdown).await;
    loops.stop().await;
    served
}
