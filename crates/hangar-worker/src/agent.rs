use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hangar_api::{codes, Heartbeat, RegisterWorker, Registered, VolumeReport};
use hangar_client::{Client, ClientError};
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::api::{self, VolumeApi};
use crate::containers::ContainerManager;
use crate::health::{check_once, Health, HealthConfig};
use hangar_core::agent::{self, AfterHeartbeat, AgentEnd, HeartbeatAnswer, Leaving, OnTick};

use crate::resource_types::offered_resource_types;
use crate::state_identity::{
    load_last_generation, load_or_create_state_identity, store_last_generation,
};

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub name: String,
    pub work_dir: PathBuf,
    pub web_url: String,
    pub worker_key: String,
    /// Where `worker_key` was read from, read again at each registration:
    /// a projected service-account token (`--kubernetes-worker-account`
    /// on web) is rotated by the kubelet while the worker runs.
    pub worker_key_file: Option<PathBuf>,
    /// The volume API's connection limits (`--http-*`).
    pub http_limits: hangar_http::Limits,
    pub platform: String,
    pub tags: Vec<String>,
    pub team: Option<String>,
    pub ephemeral: bool,
    pub heartbeat_interval: Duration,
    pub resource_types_dir: Option<PathBuf>,
    /// `None` picks overlay when it works here, else naive.
    pub volume_driver: Option<DriverKind>,
    /// Where the volume API listens (`127.0.0.1:0` picks a free port).
    pub api_bind: String,
    /// The URL web reaches the volume API at; defaults to `http://<bound address>`.
    pub api_url: Option<String>,
    /// How often the worker reports its full list of volumes.
    pub report_interval: Duration,
    /// What the worker watches of itself (memory, disk, self-checks).
    pub health: HealthConfig,
    /// The first uid:gid of the users process tasks run as (root worker).
    pub task_user: hangar_core::users::Ids,
    /// Host directories `import` volumes may copy from; empty: none.
    pub allow_import_dirs: Vec<PathBuf>,
    /// Host directories the built-in resource types' actions see, read-only
    /// at their own paths (a local repository for `git`), where those
    /// actions run in the sandbox; empty: none.
    pub allow_resource_dirs: Vec<PathBuf>,
    /// `--allow-privileged`: run privileged containers (privileged tasks,
    /// actions of privileged resource types), as real root with every
    /// capability; advertised to web at registration. Without it such a
    /// container is refused, whatever web sends.
    pub allow_privileged: bool,
    /// `--task-network` and its subnet and bridge.
    pub task_network: crate::containers::TaskNetworkConfig,
    /// Process tasks run in the sandbox where the worker can (root, runc,
    /// cgroups); `--no-process-sandbox` turns it off.
    pub process_sandbox: bool,
    /// `--container-pids-limit`: the most tasks (processes and threads)
    /// one sandboxed container may have; `None`: no limit.
    pub pids_limit: Option<u64>,
}

/// What the agent is asked to do, from a signal or from its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentCommand {
    /// SIGUSR1: stop taking work, finish what runs, then exit.
    Land,
    /// SIGUSR2: like land, then leave the fleet for good.
    Retire,
}

/// Why the agent stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentExit {
    /// The shutdown token was cancelled (SIGTERM, SIGINT).
    Stopped,
    Landed,
    Retired,
    /// A newer registration of the same name took over: this process is a
    /// zombie and must not go on.
    Superseded(String),
}

/// Runs the agent until it lands, retires, is superseded or is shut down.
pub async fn run(
    config: WorkerConfig,
    mut commands: mpsc::Receiver<AgentCommand>,
    shutdown: CancellationToken,
) -> anyhow::Result<AgentExit> {
    hangar_core::names::validate_worker_name(&config.name)?;
    let identity = load_or_create_state_identity(&config.work_dir)?;
    // Only registration uses the fleet's key; each registration returns the
    // process's own credential for everything after.
    let client = Client::new(&config.web_url, &config.worker_key, Duration::from_secs(10))?;
    // What web must present to this process's API: made here, known only to
    // this process and web, gone with the process.
    let api_token = hangar_api::credentials::new_secret()
        .map_err(|e| anyhow::anyhow!("no randomness for the API token: {e}"))?;
    let volumes = open_volumes(&config).await?;
    let containers = open_containers(&config, &volumes).await?;
    // Containers of resource actions a worker process that died left.
    if let Some(runtime) = containers.action_runtime() {
        if let Err(e) = tokio::task::spawn_blocking(move || runtime.remove_leftovers()).await {
            tracing::warn!(error = %e, "removing leftover resource action containers panicked");
        }
    }

    let listener = tokio::net::TcpListener::bind(&config.api_bind)
        .await
        .with_context(|| format!("listen for the volume API on {}", config.api_bind))?;
    let bound = listener.local_addr()?;
    let api_url = match &config.api_url {
        Some(url) => url.clone(),
        None if bound.ip().is_unspecified() => anyhow::bail!(
            "the volume API listens on {bound}, which web cannot dial: set --api-url to an address web can reach"
        ),
        None => format!("http://{bound}"),
    };
    tracing::info!(worker = %config.name, %api_url, driver = ?volumes.driver(), "volume API listening");
    // The API server and the health checks are owned here and stop with
    // the agent.
    let api_stop = shutdown.child_token();
    let _stop_api_on_return = api_stop.clone().drop_guard();
    let health = Arc::new(Health::default());
    check_once(&health, &config.health, &config.work_dir, &containers).await;
    let health_task = tokio::spawn({
        let (health, work_dir, containers, stop) = (
            health.clone(),
            config.work_dir.clone(),
            containers.clone(),
            api_stop.clone(),
        );
        let config = config.health.clone();
        async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(config.check_interval) => {}
                }
                check_once(&health, &config, &work_dir, &containers).await;
            }
        }
    });
    let actions_dir = config.work_dir.join(crate::action_dir::ACTIONS_DIR);
    let actions =
        tokio::task::spawn_blocking(move || crate::action_dir::ActionDirs::open(&actions_dir))
            .await?
            .context("prepare the dir of resource actions")?;
    let volume_api = VolumeApi::new(volumes.clone(), &api_token, Limits::default())
        .with_import_dirs(&config.allow_import_dirs)
        .context("--allow-import-dir")?
        .with_task_user(config.task_user);
    let api_task = tokio::spawn(api::serve_with(
        listener,
        volume_api
            .with_containers(containers.clone())
            .with_health(health.clone())
            .with_resources(
                crate::resources_api::ResourceRunner::new(
                    config.resource_types_dir.clone(),
                    volumes.clone(),
                    actions,
                    &api_token,
                    Duration::from_secs(3600),
                )
                .with_task_user(config.task_user)
                .with_isolation(containers.isolation())
                .with_action_runtime(containers.action_runtime())
                .with_hangar_exe(std::env::current_exe().ok())
                .with_resource_dirs(&config.allow_resource_dirs)
                .with_allow_privileged(config.allow_privileged)
                .with_base_type_roots(
                    &config
                        .work_dir
                        .join(crate::resource_types::rootfs::UNPACKED_DIR),
                ),
            ),
        config.http_limits,
        api_stop,
    ));
    let result = agent_loop(
        &config,
        &identity,
        &Endpoint {
            url: &api_url,
            token: &api_token,
        },
        &client,
        &Stores {
            volumes: volumes.clone(),
            containers: containers.clone(),
            health: health.clone(),
        },
        &mut commands,
        &shutdown,
    )
    .await;
    drop(_stop_api_on_return);
    if let Err(e) = health_task.await {
        tracing::warn!(error = %e, "health check task failed");
    }
    if let Err(e) = api_task.await {
        tracing::warn!(error = %e, "volume API task failed");
    }
    result
}

async fn open_volumes(config: &WorkerConfig) -> anyhow::Result<Arc<VolumeManager>> {
    let root = config.work_dir.clone();
    let choice = config.volume_driver;
    let manager = tokio::task::spawn_blocking(move || {
        let driver = choice.unwrap_or_else(|| hangar_volumes::best_driver(&root));
        VolumeManager::open(&root, driver)
    })
    .await??;
    let report = manager.open_report();
    if !report.removed.is_empty()
        || !report.remounted.is_empty()
        || !report.remount_failed.is_empty()
    {
        tracing::info!(
            removed = report.removed.len(),
            remounted = report.remounted.len(),
            remount_failed = report.remount_failed.len(),
            "volume store recovered at start"
        );
    }
    Ok(Arc::new(manager))
}

/// Where web reaches this process's API, and what it presents there.
struct Endpoint<'a> {
    url: &'a str,
    token: &'a str,
}

/// What the worker keeps on its disk.
struct Stores {
    volumes: Arc<VolumeManager>,
    containers: Arc<ContainerManager>,
    health: Arc<Health>,
}

/// Opens `<work-dir>/containers`, recovering what a previous worker process
/// left there.
async fn open_containers(
    config: &WorkerConfig,
    volumes: &Arc<VolumeManager>,
) -> anyhow::Result<Arc<ContainerManager>> {
    let dir = config.work_dir.join("containers");
    let volumes = volumes.clone();
    let options = crate::containers::ContainerOptions {
        task_user: config.task_user,
        hangar_exe: std::env::current_exe().ok(),
        allow_privileged: config.allow_privileged,
        task_network: config.task_network.clone(),
        sandbox_process: config.process_sandbox,
        pids_limit: config.pids_limit,
        ..Default::default()
    };
    let manager =
        tokio::task::spawn_blocking(move || ContainerManager::open_with(&dir, volumes, options))
            .await??;
    let report = manager.open_report();
    if !report.removed.is_empty() || !report.lost.is_empty() {
        tracing::info!(
            removed = report.removed.len(),
            lost = ?report.lost,
            "container store recovered at start"
        );
    }
    Ok(Arc::new(manager))
}

/// How many containers are running, for registration and heartbeats.
async fn active_containers(containers: &Arc<ContainerManager>) -> i64 {
    let m = containers.clone();
    match tokio::task::spawn_blocking(move || m.active_count()).await {
        Ok(Ok(n)) => n as i64,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot count containers");
            0
        }
        Err(e) => {
            tracing::warn!(error = %e, "container count task failed");
            0
        }
    }
}

/// Every handle the worker has, for the report (and the count in heartbeats).
async fn handles(volumes: &Arc<VolumeManager>) -> anyhow::Result<Vec<String>> {
    let m = volumes.clone();
    let list = tokio::task::spawn_blocking(move || m.list()).await??;
    Ok(list.into_iter().map(|v| v.handle).collect())
}

/// Reports the full lists of volume and container handles, then sweeps:
/// destroys what web answers (several at a time, children first, never a
/// volume a container still mounts) and removes container leftovers. One
/// failure does not stop the rest.
async fn report_volumes(
    client: &Client,
    name: &str,
    generation: i64,
    volumes: &Arc<VolumeManager>,
    containers: &Arc<ContainerManager>,
) -> Result<(), ClientError> {
    // Containers are listed before volumes: a container made between the
    // two listings mounts volumes that existed before it, so the report
    // never names a container without the volumes it uses.
    let cm = containers.clone();
    let container_handles = match tokio::task::spawn_blocking(move || cm.handles()).await {
        Ok(Ok(h)) => Some(h),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot list containers for the report; reporting volumes only");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "container listing task failed; reporting volumes only");
            None
        }
    };
    let reported = match handles(volumes).await {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot list volumes for the report");
            return Ok(());
        }
    };
    let answer = client
        .report_volumes(
            name,
            &VolumeReport {
                generation,
                handles: reported,
                containers: container_handles,
            },
        )
        .await?;
    let swept = crate::sweeper::sweep(
        volumes,
        Some(containers),
        &answer.destroy,
        &answer.destroy_containers,
        &crate::sweeper::SweepOptions::default(),
    )
    .await;
    for handle in &swept.destroyed_containers {
        tracing::info!(%handle, "destroyed container as web asked");
    }
    for handle in &swept.destroyed_volumes {
        tracing::info!(%handle, "destroyed volume as web asked");
    }
    if !swept.mounted.is_empty() {
        tracing::info!(volumes = ?swept.mounted, "kept volumes a container still mounts; web asks again");
    }
    for (handle, error) in &swept.failed {
        tracing::warn!(%handle, %error, "could not destroy; web asks again next report");
    }
    Ok(())
}

async fn agent_loop(
    config: &WorkerConfig,
    identity: &str,
    endpoint: &Endpoint<'_>,
    fleet_client: &Client,
    stores: &Stores,
    commands: &mut mpsc::Receiver<AgentCommand>,
    shutdown: &CancellationToken,
) -> anyhow::Result<AgentExit> {
    let (volumes, containers) = (&stores.volumes, &stores.containers);
    let registration = || async {
        let mut req = registration(config, identity);
        req.api_url = Some(endpoint.url.to_string());
        req.api_token = Some(endpoint.token.to_string());
        req.last_generation = load_last_generation(&config.work_dir);
        req.volumes = handles(volumes).await.map(|h| h.len() as i64).unwrap_or(0);
        req.containers = active_containers(containers).await;
        req
    };
    // Only this process's first registration says how the previous
    // container ended; a later one (after a stall) is the same container.
    let mut first = registration().await;
    first.previous_exit = crate::kube::previous_exit_from_env().await;
    let Some(registered) = register_until_accepted(fleet_client, config, &first, shutdown).await
    else {
        return Ok(AgentExit::Stopped);
    };
    // The volume report and sweep run in a task of their own, owned here,
    // so a slow listing or sweep never holds back a heartbeat. It follows
    // the registration through `session`: a report carries the current
    // generation, and none runs while the worker registers again.
    let (session, sessions) = watch::channel(Some(Session::of(fleet_client, &registered)));
    let stop_reports = shutdown.child_token();
    let reporter = tokio::spawn(report_loop(
        config.name.clone(),
        config.report_interval,
        volumes.clone(),
        containers.clone(),
        sessions,
        stop_reports.clone(),
    ));
    // The presence follows the registration too: its token opens it. It
    // ends with a goodbye however the agent ends (a SIGKILL ends it
    // without one, which is how web knows the process is gone).
    let stop_presence = CancellationToken::new();
    let presence = tokio::spawn({
        let (web_url, name, sessions, stop) = (
            config.web_url.clone(),
            config.name.clone(),
            session.subscribe(),
            stop_presence.clone(),
        );
        async move {
            crate::presence::hold(
                &web_url,
                &name,
                sessions,
                |s: &Session| s.token.clone(),
                stop,
            )
            .await
        }
    });
    let result = heartbeat_loop(
        config,
        fleet_client,
        stores,
        commands,
        shutdown,
        registered,
        &session,
        registration,
    )
    .await;
    stop_reports.cancel();
    stop_presence.cancel();
    if let Err(e) = reporter.await {
        tracing::warn!(error = %e, "volume report task failed");
    }
    if let Err(e) = presence.await {
        tracing::warn!(error = %e, "presence task failed");
    }
    result
}

/// What a report is sent as: the registration's generation and the client
/// presenting its token.
#[derive(Clone)]
struct Session {
    generation: i64,
    client: Client,
    /// The registration's own token, which the presence presents.
    token: String,
}

impl Session {
    fn of(fleet_client: &Client, registered: &Registered) -> Session {
        Session {
            generation: registered.generation,
            client: fleet_client.with_token(&registered.token),
            token: registered.token.clone(),
        }
    }
}

/// Every `every`, reports the worker's volumes and containers and sweeps
/// what web answers, one report at a time, as the registration `sessions`
/// holds. A report under way is dropped when the registration changes (the
/// worker was told to register again) and when `stop` is cancelled; none
/// starts while there is no registration.
async fn report_loop(
    name: String,
    every: Duration,
    volumes: Arc<VolumeManager>,
    containers: Arc<ContainerManager>,
    mut sessions: watch::Receiver<Option<Session>>,
    stop: CancellationToken,
) {
    let mut ticks = Ticker::new(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(session) = sessions.borrow_and_update().clone() else {
            continue;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = sessions.changed() => {
                if changed.is_err() {
                    return;
                }
                tracing::info!(generation = session.generation, "the registration changed during a volume report; dropping it");
            }
            result = report_volumes(&session.client, &name, session.generation, &volumes, &containers) => {
                if let Err(e) = result {
                    // Refusals are acted on by the heartbeat, which sees the same answer.
                    tracing::warn!(error = %e, "volume report failed; retrying next interval");
                }
            }
        }
    }
}

/// The registration the agent heartbeats under, and what goes with it.
struct Current {
    registered: Registered,
    client: Client,
    ticker: Ticker,
}

impl Current {
    fn new(config: &WorkerConfig, fleet_client: &Client, registered: Registered) -> Current {
        Current {
            client: fleet_client.with_token(&registered.token),
            ticker: heartbeat_ticker(config, &registered),
            registered,
        }
    }
}

/// Heartbeats and carries out commands until the agent stops, keeping
/// `session` at the current registration (empty while registering again).
/// Every decision is `hangar_core::agent`'s; this carries them out.
#[allow(clippy::too_many_arguments)]
async fn heartbeat_loop<F, Fut>(
    config: &WorkerConfig,
    fleet_client: &Client,
    stores: &Stores,
    commands: &mut mpsc::Receiver<AgentCommand>,
    shutdown: &CancellationToken,
    registered: Registered,
    session: &watch::Sender<Option<Session>>,
    registration: F,
) -> anyhow::Result<AgentExit>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = RegisterWorker>,
{
    let (volumes, containers) = (&stores.volumes, &stores.containers);
    let mut current = Current::new(config, fleet_client, registered);
    let mut leaving = Leaving::No;
    // Registers again (web declared the worker stalled or forgot it, or
    // the pressure it landed for cleared): `None` when shut down first.
    let reregister = || async {
        session.send_replace(None);
        let r =
            register_until_accepted(fleet_client, config, &registration().await, shutdown).await?;
        session.send_replace(Some(Session::of(fleet_client, &r)));
        Some(Current::new(config, fleet_client, r))
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                if config.ephemeral {
                    // An ephemeral worker's state dies with it: say so now
                    // rather than leave web to find out after the TTL.
                    if let Err(e) = current.client.retire(&config.name).await {
                        tracing::warn!(error = %e, "could not retire the ephemeral worker on shutdown");
                    }
                }
                tracing::info!(worker = %config.name, "worker stopped");
                return Ok(AgentExit::Stopped);
            }
            Some(command) = commands.recv() => {
                let (result, asked) = match command {
                    AgentCommand::Land => (current.client.land(&config.name).await, agent::Command::Land),
                    AgentCommand::Retire => (current.client.retire(&config.name).await, agent::Command::Retire),
                };
                let accepted = match &result {
                    Ok(done) => {
                        tracing::info!(worker = %config.name, state = %done.state, "worker is leaving");
                        Some(done.state == hangar_api::CommandState::REMOVED)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, ?command, "web refused the command");
                        None
                    }
                };
                let (next, end) = agent::after_command(leaving, asked, accepted);
                leaving = next;
                if let Some(end) = end {
                    return Ok(exit(end, String::new()));
                }
                current.ticker.reset_immediately();
            }
            _ = current.ticker.tick() => {
                match agent::on_tick(leaving, stores.health.pressure()) {
                    OnTick::Heartbeat => {}
                    OnTick::LandThenHeartbeat => {
                        let landed = current.client.land(&config.name).await;
                        match &landed {
                            Ok(_) => tracing::warn!(worker = %config.name, "under hard pressure; landing until it clears"),
                            Err(e) => tracing::warn!(error = %e, "could not land under pressure"),
                        }
                        leaving = agent::after_self_land(leaving, landed.is_ok());
                    }
                    OnTick::Reregister => {
                        tracing::info!(worker = %config.name, "pressure cleared; taking work again");
                        let Some(next) = reregister().await else {
                            return Ok(AgentExit::Stopped);
                        };
                        current = next;
                        leaving = Leaving::No;
                        continue;
                    }
                }
                let hb = Heartbeat {
                    generation: current.registered.generation,
                    containers: active_containers(containers).await,
                    volumes: handles(volumes).await.map(|h| h.len() as i64).unwrap_or(0),
                    condition: Some(stores.health.condition()),
                };
                let answer = current.client.heartbeat(&config.name, &hb).await;
                if answer.is_ok() {
                    stores.health.web_answered();
                }
                let told = heartbeat_answer(&answer);
                match agent::after_heartbeat(leaving, told) {
                    AfterHeartbeat::Continue => {
                        if let Err(e) = &answer {
                            tracing::warn!(error = %e, "heartbeat failed; retrying next interval");
                        }
                    }
                    AfterHeartbeat::End(end) => {
                        if end == AgentEnd::Superseded {
                            session.send_replace(None);
                        }
                        let why = answer.err().map(|e| e.to_string()).unwrap_or_default();
                        return Ok(exit(end, why));
                    }
                    AfterHeartbeat::Reregister => {
                        if let Err(e) = &answer {
                            tracing::warn!(error = %e, "web no longer accepts this registration; registering again");
                        }
                        let Some(next) = reregister().await else {
                            return Ok(AgentExit::Stopped);
                        };
                        current = next;
                        leaving = Leaving::No;
                    }
                }
            }
        }
    }
}

/// A heartbeat's answer as the agent's rules tell answers apart.
fn heartbeat_answer(
    answer: &Result<hangar_api::HeartbeatAccepted, ClientError>,
) -> HeartbeatAnswer {
    match answer {
        Ok(accepted) => HeartbeatAnswer::Accepted {
            landed: accepted.state == hangar_core::WorkerState::Landed,
        },
        Err(e) => match e.code() {
            Some(codes::SUPERSEDED) => HeartbeatAnswer::Superseded,
            Some(codes::NOT_FOUND) => HeartbeatAnswer::NotFound,
            Some(codes::REREGISTER) => HeartbeatAnswer::Reregister,
            _ => HeartbeatAnswer::Failed,
        },
    }
}

/// How the agent ends, logged as it ends.
fn exit(end: AgentEnd, why: String) -> AgentExit {
    match end {
        AgentEnd::Landed => {
            tracing::info!("worker landed");
            AgentExit::Landed
        }
        AgentEnd::Retired => {
            tracing::info!("worker retired");
            AgentExit::Retired
        }
        AgentEnd::Superseded => {
            tracing::error!(error = %why, "this worker process was superseded; stopping");
            AgentExit::Superseded(why)
        }
    }
}

fn registration(config: &WorkerConfig, identity: &str) -> RegisterWorker {
    RegisterWorker {
        name: config.name.clone(),
        state_identity: identity.to_string(),
        platform: config.platform.clone(),
        tags: config.tags.clone(),
        team: config.team.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        resource_types: config
            .resource_types_dir
            .as_deref()
            .map(|dir| offered_resource_types(dir, config.allow_privileged))
            .unwrap_or_default(),
        ephemeral: config.ephemeral,
        containers: 0,
        volumes: 0,
        api_url: None,
        previous_exit: None,
        api_token: None,
        last_generation: None,
        allow_privileged: config.allow_privileged,
    }
}

fn heartbeat_ticker(config: &WorkerConfig, registered: &Registered) -> Ticker {
    let every = registered
        .heartbeat_interval_ms
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms as u64))
        .unwrap_or(config.heartbeat_interval);
    Ticker::new(every)
}

/// Registers, retrying with backoff while web is unreachable or refuses for a
/// reason that may pass. `None` when shut down first.
/// The key file's content now, when the key came from a file that still
/// reads (else the key read at start is used).
fn fresh_key(config: &WorkerConfig) -> Option<String> {
    let path = config.worker_key_file.as_ref()?;
    match std::fs::read_to_string(path) {
        Ok(key) if !key.trim().is_empty() => Some(key.trim().to_string()),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the worker key file again; using the key read at start");
            None
        }
    }
}

async fn register_until_accepted(
    fleet_client: &Client,
    config: &WorkerConfig,
    req: &RegisterWorker,
    shutdown: &CancellationToken,
) -> Option<Registered> {
    let work_dir = &config.work_dir;
    let mut backoff = Duration::from_millis(250);
    loop {
        let client = match fresh_key(config) {
            Some(key) => fleet_client.with_token(&key),
            None => fleet_client.clone(),
        };
        match client.register(req).await {
            Ok(r) => {
                tracing::info!(worker = %req.name, generation = r.generation, kind = %r.kind, "registered with web");
                if let Err(e) = store_last_generation(work_dir, r.generation) {
                    tracing::warn!(error = %e, "cannot remember the generation in the work dir");
                }
                return Some(r);
            }
            Err(e) if e.code() == Some(codes::TAKEOVER_REFUSED) => {
                tracing::error!(error = %e, "another process holds this worker's name and answers; retrying until it is gone");
            }
            Err(e) if e.code() == Some(codes::DATABASE_MISMATCH) => {
                tracing::error!(error = %e, "web's database does not know this worker's generations; keeping every volume and retrying");
            }
            Err(e) => {
                let permanent =
                    matches!(&e, ClientError::Api { status, .. } if status.is_client_error());
                if permanent {
                    tracing::error!(error = %e, "web refused the registration; retrying in case it is reconfigured");
                } else {
                    tracing::warn!(error = %e, "cannot register yet; retrying");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// A heartbeat timer that can be told to fire at once (after a command, so
/// the worker learns its new state without waiting a whole interval).
struct Ticker {
    interval: tokio::time::Interval,
}

impl Ticker {
    fn new(every: Duration) -> Ticker {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticker { interval }
    }

    async fn tick(&mut self) {
        self.interval.tick().await;
    }

    fn reset_immediately(&mut self) {
        self.interval.reset_immediately();
    }
}
