use std::path::PathBuf;
use std::time::Duration;

use hangar_api::{codes, Heartbeat, RegisterWorker, Registered};
use hangar_client::{Client, ClientError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::resource_types::discover_resource_types;
use crate::state_identity::load_or_create_state_identity;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub name: String,
    pub work_dir: PathBuf,
    pub web_url: String,
    pub worker_key: String,
    pub platform: String,
    pub tags: Vec<String>,
    pub team: Option<String>,
    pub ephemeral: bool,
    pub heartbeat_interval: Duration,
    pub resource_types_dir: Option<PathBuf>,
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

/// Where the agent stands with web.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    No,
    Landing,
    Retiring,
}

/// Runs the agent until it lands, retires, is superseded or is shut down.
pub async fn run(
    config: WorkerConfig,
    mut commands: mpsc::Receiver<AgentCommand>,
    shutdown: CancellationToken,
) -> anyhow::Result<AgentExit> {
    hangar_core::names::validate_worker_name(&config.name)?;
    let identity = load_or_create_state_identity(&config.work_dir)?;
    let client = Client::new(&config.web_url, &config.worker_key, Duration::from_secs(10))?;
    let registration = || registration(&config, &identity);

    let Some(mut registered) = register_until_accepted(&client, &registration(), &shutdown).await
    else {
        return Ok(AgentExit::Stopped);
    };
    let mut leaving = Leaving::No;
    let mut ticker = heartbeat_ticker(&config, &registered);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                if config.ephemeral {
                    // An ephemeral worker's state dies with it: say so now
                    // rather than leave web to find out after the TTL.
                    if let Err(e) = client.retire(&config.name).await {
                        tracing::warn!(error = %e, "could not retire the ephemeral worker on shutdown");
                    }
                }
                tracing::info!(worker = %config.name, "worker stopped");
                return Ok(AgentExit::Stopped);
            }
            Some(command) = commands.recv() => {
                let (result, next) = match command {
                    AgentCommand::Land => (client.land(&config.name).await, Leaving::Landing),
                    AgentCommand::Retire => (client.retire(&config.name).await, Leaving::Retiring),
                };
                match result {
                    Ok(done) => {
                        tracing::info!(worker = %config.name, state = %done.state, "worker is leaving");
                        leaving = next;
                        if done.state == "removed" {
                            return Ok(AgentExit::Retired);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, ?command, "web refused the command"),
                }
                ticker.reset_immediately();
            }
            _ = ticker.tick() => {
                let hb = Heartbeat {
                    generation: registered.generation,
                    containers: 0,
                    volumes: count_volumes(&config.work_dir),
                };
                match client.heartbeat(&config.name, &hb).await {
                    Ok(accepted) if accepted.state == "landed" => {
                        tracing::info!(worker = %config.name, "worker landed");
                        return Ok(AgentExit::Landed);
                    }
                    Ok(_) => {}
                    Err(e) => match e.code() {
                        Some(codes::SUPERSEDED) => {
                            tracing::error!(error = %e, "this worker process was superseded; stopping");
                            return Ok(AgentExit::Superseded(e.to_string()));
                        }
                        Some(codes::NOT_FOUND) if leaving == Leaving::Retiring => {
                            tracing::info!(worker = %config.name, "worker retired");
                            return Ok(AgentExit::Retired);
                        }
                        Some(codes::NOT_FOUND | codes::REREGISTER) => {
                            tracing::warn!(error = %e, "web no longer accepts this registration; registering again");
                            let Some(r) = register_until_accepted(&client, &registration(), &shutdown).await else {
                                return Ok(AgentExit::Stopped);
                            };
                            registered = r;
                            leaving = Leaving::No;
                            ticker = heartbeat_ticker(&config, &registered);
                        }
                        _ => tracing::warn!(error = %e, "heartbeat failed; retrying next interval"),
                    },
                }
            }
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
            .map(discover_resource_types)
            .unwrap_or_default(),
        ephemeral: config.ephemeral,
        containers: 0,
        volumes: count_volumes(&config.work_dir),
        api_url: None,
    }
}

/// The volumes in the work dir, as the volume manager lays them out.
fn count_volumes(work_dir: &std::path::Path) -> i64 {
    std::fs::read_dir(work_dir.join("volumes"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count() as i64
        })
        .unwrap_or(0)
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
async fn register_until_accepted(
    client: &Client,
    req: &RegisterWorker,
    shutdown: &CancellationToken,
) -> Option<Registered> {
    let mut backoff = Duration::from_millis(250);
    loop {
        match client.register(req).await {
            Ok(r) => {
                tracing::info!(worker = %req.name, generation = r.generation, kind = %r.kind, "registered with web");
                return Some(r);
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
