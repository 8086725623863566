use axum::extract::{Path, State};
use axum::http::StatusCode;
use hangar_api::credentials::{digest, incarnation_token, new_secret, valid_api_token};
use hangar_api::CommandState;
use hangar_api::{
    BaseResourceType, CommandDone, Heartbeat, HeartbeatAccepted, Pruned, RegisterWorker,
    Registered, Worker,
};
use hangar_core::names::{validate_label, validate_worker_name};
use hangar_core::OperatorCommand;
use hangar_store::{
    Credentials, HeartbeatRecord, Registration, StoreError, WorkerInfo, WorkerRecord,
};

use crate::auth::{AdminOrWorker, FleetKey, Peer, Principal, WorkerCaller, WorkerClaim};
use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::json::Json;
use crate::routes::events::event_to_api;
use crate::takeover;
use crate::Web;

const MAX_TAGS: usize = 32;
const MAX_RESOURCE_TYPES: usize = 64;
const MAX_TEXT: usize = 128;
const MAX_PATH: usize = 4096;

fn printable(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() || value.len() > max {
        return Err(format!("{field} must be 1 to {max} bytes long"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

/// Everything a registration says is checked before anything is stored.
pub(super) fn validate_registration(r: &RegisterWorker) -> Result<(), String> {
    validate_worker_name(&r.name).map_err(|e| format!("worker name: {e}"))?;
    printable("state_identity", &r.state_identity, MAX_TEXT)?;
    validate_label(&r.platform).map_err(|e| format!("platform: {e}"))?;
    printable("version", &r.version, MAX_TEXT)?;
    if r.tags.len() > MAX_TAGS {
        return Err(format!("at most {MAX_TAGS} tags are allowed"));
    }
    for tag in &r.tags {
        validate_label(tag).map_err(|e| format!("tag: {e}"))?;
    }
    if let Some(team) = &r.team {
        validate_label(team).map_err(|e| format!("team: {e}"))?;
    }
    if r.resource_types.len() > MAX_RESOURCE_TYPES {
        return Err(format!(
            "at most {MAX_RESOURCE_TYPES} resource types are allowed"
        ));
    }
    for rt in &r.resource_types {
        validate_label(&rt.type_name).map_err(|e| format!("resource type: {e}"))?;
        printable("resource type path", &rt.path, MAX_PATH)?;
        if let Some(v) = &rt.version {
            printable("resource type version", v, MAX_TEXT)?;
        }
    }
    if let Some(url) = &r.api_url {
        printable("api_url", url, MAX_PATH)?;
        validate_api_url(url)?;
    }
    match (&r.api_url, &r.api_token) {
        (Some(_), None) => return Err("api_url needs the api_token web must present there".into()),
        (None, Some(_)) => {
            return Err("api_token without api_url: web has nowhere to present it".into())
        }
        (_, Some(t)) if !valid_api_token(t) => {
            return Err(
                "api_token must be 32 to 256 printable ASCII characters without spaces".into(),
            )
        }
        _ => {}
    }
    if matches!(r.last_generation, Some(g) if g < 0) {
        return Err("last_generation must not be negative".into());
    }
    if r.containers < 0 || r.volumes < 0 {
        return Err("container and volume counts must not be negative".into());
    }
    if let Some(exit) = &r.previous_exit {
        printable("previous_exit", exit, 2 * MAX_TEXT)?;
    }
    Ok(())
}

/// The URL web will dial with the worker's token: a plain origin, so that
/// nothing in it (credentials, a query, a fragment) changes where or how the
/// token goes.
fn validate_api_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("api_url: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("api_url must be an http:// or https:// URL".into());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("api_url must name a host".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("api_url must not carry credentials".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("api_url must not have a query or a fragment".into());
    }
    Ok(())
}

/// A message's generation must be the one its credential was issued to.
pub(super) fn caller_generation(credential: i64, stated: i64) -> Result<(), ApiError> {
    if credential == stated {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "the message says generation {stated} but its credential belongs to generation {credential}"
        )))
    }
}

fn valid_name(name: &str) -> Result<(), ApiError> {
    validate_worker_name(name).map_err(|e| ApiError::bad_request(format!("worker name: {e}")))
}

pub(super) async fn register(
    State(web): State<Web>,
    key: FleetKey,
    Peer(peer): Peer,
    Json(req): Json<RegisterWorker>,
) -> Result<(StatusCode, axum::Json<Registered>), ApiError> {
    validate_registration(&req).map_err(ApiError::bad_request)?;
    if !matches!(key, FleetKey::Fleet) {
        let holder = web.store().get_worker(&req.name).await?;
        key.admits(
            &req.name,
            req.team.as_deref(),
            holder.as_ref().map(|h| h.info.team.as_deref()),
        )?;
    }
    // Only a holder that is gone (or the caller itself) gives up its name.
    let expect = takeover::check(&web, &req, peer).await?;
    let secret = new_secret()
        .map_err(|e| ApiError::internal(format!("no randomness for a credential: {e}")))?;
    let token_hash = digest(&secret);
    let info = WorkerInfo {
        resource_types_json: serde_json::to_string(&req.resource_types)
            .map_err(|e| ApiError::bad_request(format!("resource types: {e}")))?,
        name: req.name,
        state_identity: req.state_identity,
        platform: req.platform,
        tags: req.tags,
        team: req.team,
        version: req.version,
        ephemeral: req.ephemeral,
        containers: req.containers,
        volumes: req.volumes,
        api_url: req.api_url,
        allow_privileged: req.allow_privileged,
    };
    let cfg = web.config();
    let out = web
        .store()
        .register_incarnation(
            &Registration {
                info: &info,
                previous_exit: req.previous_exit.as_deref(),
                credentials: Some(Credentials {
                    token_hash: &token_hash,
                    api_token: req.api_token.as_deref(),
                }),
                expect,
                generation_floor: req.last_generation.unwrap_or(0),
                accept_unissued_generation: cfg.accept_new_database,
            },
            web.now(),
        )
        .await?;
    let event = out.kind.event();
    tracing::info!(worker = %info.name, generation = out.generation, kind = out.kind.as_str(), "worker registered");
    web.metrics().count_lifecycle_event(event);
    web.metrics()
        .invalidated(out.invalidated_volumes, out.invalidated_containers);
    Ok(crate::answer::created(axum::Json(Registered {
        generation: out.generation,
        kind: out.kind,
        heartbeat_interval_ms: cfg.heartbeat_interval_ms,
        heartbeat_ttl_ms: cfg.lifecycle.heartbeat_ttl_ms,
        token: incarnation_token(out.generation, &secret),
    })))
}

pub(super) async fn heartbeat(
    State(web): State<Web>,
    claim: WorkerClaim,
    Json(hb): Json<Heartbeat>,
) -> Result<axum::Json<HeartbeatAccepted>, ApiError> {
    caller_generation(claim.generation, hb.generation)?;
    if hb.containers < 0 || hb.volumes < 0 {
        return Err(ApiError::bad_request(
            "container and volume counts must not be negative",
        ));
    }
    let condition = match &hb.condition {
        Some(c) => {
            for reason in c.pressure_reason.iter().chain(c.unhealthy_reason.iter()) {
                printable("condition reason", reason, 1024).map_err(ApiError::bad_request)?;
            }
            Some(serde_json::to_string(c).map_err(|e| ApiError::bad_request(e.to_string()))?)
        }
        None => None,
    };
    let beat = HeartbeatRecord {
        name: &claim.name,
        generation: hb.generation,
        containers: hb.containers,
        volumes: hb.volumes,
        condition: condition.as_deref(),
    };
    // The usual case, one statement: the token's generation and secret
    // are the row's, and the worker is not stalled.
    match web
        .store()
        .heartbeat_proven(&beat, &claim.secret_digest, web.now())
        .await
    {
        Ok(Some(state)) => {
            web.metrics().heartbeat(true);
            return Ok(axum::Json(HeartbeatAccepted { state }));
        }
        Ok(None) => {}
        Err(e) => {
            web.metrics().heartbeat(false);
            return Err(e.into());
        }
    }
    // Not recorded: say why, as every other call of a worker would
    // (invalid credentials, superseded, unknown), then as a heartbeat
    // (stalled: register again).
    let result = match claim.check(&web).await {
        Ok(_) => web
            .store()
            .heartbeat_with_condition(
                &claim.name,
                hb.generation,
                hb.containers,
                hb.volumes,
                condition.as_deref(),
                web.now(),
            )
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    web.metrics().heartbeat(result.is_ok());
    let state = result?;
    Ok(axum::Json(HeartbeatAccepted { state }))
}

/// Holds the worker process's presence for as long as the request's body
/// streams (`crate::presence`). Only the current registration's own token
/// opens it, checked before the body is read: no worker holds another's.
pub(super) async fn presence(
    State(web): State<Web>,
    caller: WorkerCaller,
    body: axum::body::Body,
) -> axum::body::Body {
    crate::presence::begin(&web, caller.name, caller.generation, body)
}

/// A worker row as the API shows it. The JSON columns were validated on
/// the way in; one that no longer parses is corrupt, and says so rather
/// than pass for an empty list or no condition.
pub(super) fn worker_to_api(w: WorkerRecord) -> Result<Worker, ApiError> {
    let corrupt = |column: &str, e: serde_json::Error| {
        ApiError::from(hangar_store::StoreError::Corrupt(format!(
            "workers row {}, column {column}: {e}",
            w.info.name
        )))
    };
    let resource_types: Vec<BaseResourceType> = serde_json::from_str(&w.info.resource_types_json)
        .map_err(|e| corrupt("resource_types", e))?;
    let condition = match w.condition.as_deref() {
        Some(c) => Some(serde_json::from_str(c).map_err(|e| corrupt("condition", e))?),
        None => None,
    };
    Ok(Worker {
        name: w.info.name,
        state: w.state,
        state_identity: w.info.state_identity,
        generation: w.generation,
        platform: w.info.platform,
        tags: w.info.tags,
        team: w.info.team,
        version: w.info.version,
        resource_types,
        ephemeral: w.info.ephemeral,
        containers: w.info.containers,
        volumes: w.info.volumes,
        first_registered_at: w.first_registered_at,
        registered_at: w.registered_at,
        last_heartbeat_at: w.last_heartbeat_at,
        state_changed_at: w.state_changed_at,
        restarts: w.restarts,
        api_url: w.info.api_url,
        last_event: w.last_event.map(event_to_api),
        last_restart: w.last_restart.map(event_to_api),
        condition,
        allow_privileged: w.info.allow_privileged,
    })
}

pub(super) async fn list(
    State(web): State<Web>,
    allowed: Allowed<act::ListWorkers>,
) -> Result<axum::Json<Vec<Worker>>, ApiError> {
    let caller = allowed.caller();
    let workers = web.store().list_workers().await?;
    // Shared workers, and those of the teams the caller has a role on.
    let workers = workers
        .into_iter()
        .filter(|w| {
            w.info
                .team
                .as_deref()
                .is_none_or(|t| caller.role_on(t).is_some())
        })
        .map(worker_to_api)
        .collect::<Result<Vec<Worker>, ApiError>>()?;
    Ok(axum::Json(workers))
}

pub(super) async fn show(
    State(web): State<Web>,
    _: Allowed<act::GetWorker>,
    Path(name): Path<String>,
) -> Result<axum::Json<Worker>, ApiError> {
    valid_name(&name)?;
    let worker = web
        .store()
        .get_worker(&name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("worker {name} not found")))?;
    Ok(axum::Json(worker_to_api(worker)?))
}

async fn command(
    web: &Web,
    name: &str,
    command: OperatorCommand,
    by: Principal,
) -> Result<axum::Json<CommandDone>, ApiError> {
    valid_name(name)?;
    let by = by.describe();
    let out = web
        .store()
        .worker_command(name, command, &by, web.now())
        .await?;
    if out.changed {
        tracing::info!(worker = %name, command = command.as_str(), %by, "worker command");
    }
    Ok(axum::Json(CommandDone {
        worker: name.to_string(),
        state: out
            .state
            .map_or(CommandState::REMOVED, CommandState::Worker),
        changed: out.changed,
    }))
}

pub(super) async fn land(
    State(web): State<Web>,
    AdminOrWorker(by): AdminOrWorker,
    Path(name): Path<String>,
) -> Result<axum::Json<CommandDone>, ApiError> {
    command(&web, &name, OperatorCommand::Land, by).await
}

pub(super) async fn retire(
    State(web): State<Web>,
    AdminOrWorker(by): AdminOrWorker,
    Path(name): Path<String>,
) -> Result<axum::Json<CommandDone>, ApiError> {
    command(&web, &name, OperatorCommand::Retire, by).await
}

pub(super) async fn prune(
    State(web): State<Web>,
    _: Allowed<act::PruneWorker>,
    Path(name): Path<String>,
) -> Result<axum::Json<CommandDone>, ApiError> {
    command(&web, &name, OperatorCommand::Prune, Principal::Admin).await
}

pub(super) async fn prune_stalled(
    State(web): State<Web>,
    _: Allowed<act::PruneStalledWorkers>,
) -> Result<axum::Json<Pruned>, ApiError> {
    let pruned = web
        .store()
        .prune_stalled(&Principal::Admin.describe(), web.now())
        .await
        .map_err(|e: StoreError| ApiError::from(e))?;
    Ok(axum::Json(Pruned { pruned }))
}
