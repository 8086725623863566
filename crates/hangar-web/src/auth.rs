//! Who is calling. Every credential comes as `Authorization: Bearer …`;
//! each route says which it accepts:
//!
//! - the admin token: a user (the CLI);
//! - the fleet's worker key: admits a worker, and is good for registering
//!   only;
//! - an incarnation token (`<generation>.<secret>`, returned by a
//!   registration): one process of one worker, for the routes under that
//!   worker's name. Web keeps only the secret's digest.

use axum::extract::{ConnectInfo, FromRequestParts, RawPathParams};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use hangar_api::credentials::{digest, parse_incarnation_token, same_secret};
use hangar_core::fencing::Refusal;
use std::net::SocketAddr;

use crate::error::ApiError;
use crate::Web;

/// Who asked for a land or retire, in the words recorded with its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    Admin,
    /// A logged-in admin (an owner of team main), as events name them.
    User(String),
    /// The worker process itself, by its own credential.
    Worker {
        generation: i64,
    },
}

impl Principal {
    pub(crate) fn describe(&self) -> String {
        match self {
            Principal::Admin => "an operator".into(),
            Principal::User(who) => who.clone(),
            Principal::Worker { generation } => {
                format!("the worker itself (generation {generation})")
            }
        }
    }
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthorized("missing credentials: send Authorization: Bearer <token>")
    })?;
    header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::unauthorized("malformed credentials: expected Authorization: Bearer <token>")
        })
}

/// The fixed secrets, recognised before anything is looked up.
enum Fixed {
    Admin,
    FleetKey,
    Other,
}

fn fixed(token: &str, web: &Web) -> Fixed {
    let cfg = web.config();
    if same_secret(token.as_bytes(), cfg.admin_token.as_bytes()) {
        Fixed::Admin
    } else if same_secret(token.as_bytes(), cfg.worker_key.as_bytes()) {
        Fixed::FleetKey
    } else {
        Fixed::Other
    }
}

/// The bearer token of a call a worker process makes under its own name:
/// refused at once if it is the admin token or the fleet's worker key.
fn worker_token(parts: &Parts, web: &Web) -> Result<String, ApiError> {
    let token = bearer(parts)?;
    match fixed(token, web) {
        Fixed::Admin => Err(ApiError::forbidden(
            "this needs the worker's own credential, not the admin token",
        )),
        Fixed::FleetKey => Err(ApiError::forbidden(
            "the worker key only registers a worker: present the token its registration returned",
        )),
        Fixed::Other => Ok(token.to_string()),
    }
}

/// A request from a user holding the admin token.
pub(crate) struct Admin;

/// A worker asking to register, and with which key: the fleet's (any
/// name, any team), a team's (`--team-worker-key-file TEAM:PATH`, as
/// Concourse's team authorized keys: workers of that team only), or one
/// worker's own (`--named-worker-key-file NAME:PATH`: that name only, a
/// shared worker).
pub(crate) enum FleetKey {
    Fleet,
    Team(String),
    Worker(String),
    /// A pod's service-account token the API server vouched for
    /// (`token_review.rs`): the pod's name only, as its account's team's
    /// worker or a shared one.
    Pod(hangar_core::tenancy::pod_admission::PodWorker),
}

impl FleetKey {
    /// Refuses a registration this key does not admit: a team key
    /// registers workers of its team only, and never under a name a
    /// worker of another team (or a shared one) holds.
    pub(crate) fn admits(
        &self,
        name: &str,
        team: Option<&str>,
        holder_team: Option<Option<&str>>,
    ) -> Result<(), ApiError> {
        let key_team = match self {
            FleetKey::Fleet => return Ok(()),
            FleetKey::Pod(pod) if pod.pod != name => {
                return Err(ApiError::forbidden(format!(
                    "the service account token of pod {} registers worker {} only: a pod's \
                     worker is named as its pod",
                    pod.pod, pod.pod
                )))
            }
            FleetKey::Pod(pod) => {
                return match &pod.team {
                    None => FleetKey::Worker(pod.pod.clone()).admits(name, team, holder_team),
                    Some(t) => FleetKey::Team(t.clone()).admits(name, team, holder_team),
                }
            }
            FleetKey::Worker(own) if own != name => {
                return Err(ApiError::forbidden(format!(
                    "the worker key of worker {own} registers worker {own} only"
                )))
            }
            FleetKey::Worker(own) if team.is_some() => {
                return Err(ApiError::forbidden(format!(
                    "the worker key of worker {own} registers it as a shared worker: a team's \
                     worker registers with its team's key"
                )))
            }
            FleetKey::Worker(_) => return Ok(()),
            FleetKey::Team(key_team) => key_team,
        };
        if team != Some(key_team.as_str()) {
            return Err(ApiError::forbidden(format!(
                "the worker key of team {key_team} registers workers of team {key_team} only: \
                 start the worker with --team {key_team}"
            )));
        }
        match holder_team {
            Some(held) if held != Some(key_team.as_str()) => Err(ApiError::forbidden(format!(
                "the worker key of team {key_team} cannot take a name a worker outside team \
                 {key_team} holds"
            ))),
            _ => Ok(()),
        }
    }
}

/// A request from one process of the worker named in the path, proven by
/// its incarnation token.
pub(crate) struct WorkerCaller {
    pub name: String,
    pub generation: i64,
}

/// A request presenting an incarnation token for the worker named in the
/// path, not yet looked up. The heartbeat, sent by every worker every few
/// seconds, checks the token in the one statement that records it (the
/// row's generation and secret digest are in its `WHERE`), instead of a
/// read and then a write; when that statement matches nothing,
/// [`WorkerClaim::check`] says why, exactly as [`WorkerCaller`] would.
/// Comparing digests in SQL is not constant-time, and need not be: the
/// digest is the SHA-256 of 256 random bits, so how long a comparison
/// takes tells nothing about the secret.
pub(crate) struct WorkerClaim {
    pub name: String,
    /// The generation the token names.
    pub generation: i64,
    /// The digest of the token's secret, as web stores it.
    pub secret_digest: String,
    token: String,
}

impl WorkerClaim {
    /// Checks the claim against the current registration, as
    /// [`WorkerCaller`] does, and returns its generation.
    pub(crate) async fn check(&self, web: &Web) -> Result<i64, ApiError> {
        check_incarnation(web, &self.name, &self.token).await
    }
}

impl FromRequestParts<Web> for WorkerClaim {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        let token = worker_token(parts, web)?;
        let name = path_name(parts, web).await?;
        let Some((generation, secret)) = parse_incarnation_token(&token) else {
            return Err(ApiError::unauthorized("invalid credentials"));
        };
        let secret_digest = digest(secret);
        Ok(WorkerClaim {
            name,
            generation,
            secret_digest,
            token,
        })
    }
}

/// A request from the admin or from the worker named in the path.
pub(crate) struct AdminOrWorker(pub Principal);

impl FromRequestParts<Web> for Admin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        match fixed(bearer(parts)?, web) {
            Fixed::Admin => Ok(Admin),
            Fixed::FleetKey => Err(ApiError::forbidden(
                "this needs the admin token, not the worker key",
            )),
            Fixed::Other => Err(ApiError::unauthorized("invalid credentials")),
        }
    }
}

impl FromRequestParts<Web> for FleetKey {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        match fixed(token, web) {
            Fixed::FleetKey => Ok(FleetKey::Fleet),
            Fixed::Admin => Err(ApiError::forbidden(
                "this needs the worker key, not the admin token",
            )),
            Fixed::Other => {
                let cfg = web.config();
                let team = cfg
                    .team_worker_keys
                    .iter()
                    .find(|(_, key)| same_secret(token.as_bytes(), key.as_bytes()))
                    .map(|(team, _)| FleetKey::Team(team.clone()));
                let worker = || {
                    cfg.named_worker_keys
                        .iter()
                        .find(|(_, key)| same_secret(token.as_bytes(), key.as_bytes()))
                        .map(|(name, _)| FleetKey::Worker(name.clone()))
                };
                match team.or_else(worker) {
                    Some(key) => Ok(key),
                    None => match web.token_reviewer() {
                        Some(reviewer) if crate::token_review::looks_like_jwt(token) => {
                            pod_key(parts, web, reviewer, token).await
                        }
                        _ => Err(ApiError::unauthorized("invalid credentials")),
                    },
                }
            }
        }
    }
}

/// The registration a pod's service-account token admits, as the API
/// server's TokenReview says. Tokens it does not vouch for count against
/// the client's address as wrong bearer tokens do, so a stranger cannot
/// make web flood the API server.
async fn pod_key(
    parts: &Parts,
    web: &Web,
    reviewer: &crate::token_review::TokenReviewer,
    token: &str,
) -> Result<FleetKey, ApiError> {
    use crate::token_review::ReviewFailure;
    use hangar_core::login_limit::Admission;
    use hangar_core::tenancy::pod_admission::ReviewRefusal;
    let client = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let now = web.now();
    if let Admission::Limited { retry_after_ms } = web.bearer_limit().admit(&client, now) {
        return Err(ApiError::too_many_requests(format!(
            "too many wrong tokens from this address; try again in {}",
            hangar_core::lifecycle::human_ms(retry_after_ms)
        )));
    }
    match reviewer.review(token).await {
        Ok(pod) => Ok(FleetKey::Pod(pod)),
        Err(ReviewFailure::Refused(refusal)) => {
            web.bearer_limit().failed(&client, now);
            tracing::info!(%client, ?refusal, "a worker's service account token was refused");
            Err(match refusal {
                ReviewRefusal::NotAuthenticated(_) => ApiError::unauthorized("invalid credentials"),
                ReviewRefusal::NotAdmitted(why) => ApiError::forbidden(why),
                ReviewRefusal::Malformed(why) => ApiError::unavailable(format!(
                    "cannot check the worker's token with the API server: {why}"
                )),
            })
        }
        Err(ReviewFailure::Unavailable(why)) => {
            tracing::warn!(error = %why, "cannot check a worker's service account token");
            Err(ApiError::unavailable(format!(
                "cannot check the worker's token with the API server: {why}"
            )))
        }
    }
}

impl FromRequestParts<Web> for WorkerCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        let token = worker_token(parts, web)?;
        let name = path_name(parts, web).await?;
        let generation = check_incarnation(web, &name, &token).await?;
        Ok(WorkerCaller { name, generation })
    }
}

impl FromRequestParts<Web> for AdminOrWorker {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        match fixed(token, web) {
            Fixed::Admin => Ok(AdminOrWorker(Principal::Admin)),
            // A user's session token: an admin may land and retire too.
            Fixed::Other if parse_incarnation_token(token).is_none() => {
                let token = token.to_string();
                let caller = crate::authz::session_caller(parts, web, &token).await?;
                if !caller.is_admin() {
                    return Err(ApiError::forbidden(
                        "only an admin (an owner of team main) or the worker itself may do this",
                    ));
                }
                Ok(AdminOrWorker(Principal::User(caller.describe())))
            }
            _ => {
                let caller = WorkerCaller::from_request_parts(parts, web).await?;
                Ok(AdminOrWorker(Principal::Worker {
                    generation: caller.generation,
                }))
            }
        }
    }
}

/// The `{name}` of the route, checked as a worker name.
async fn path_name(parts: &mut Parts, web: &Web) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, web)
        .await
        .map_err(|e| ApiError::bad_request(format!("path: {e}")))?;
    let name = params
        .iter()
        .find(|(k, _)| *k == "name")
        .map(|(_, v)| v.to_string())
        .ok_or_else(|| ApiError::bad_request("the route names no worker"))?;
    hangar_core::names::validate_worker_name(&name)
        .map_err(|e| ApiError::bad_request(format!("worker name: {e}")))?;
    Ok(name)
}

/// Checks an incarnation token against the current registration of `name`
/// and returns its generation. A well-formed token of an older generation is
/// told it was superseded (so a zombie stops) without learning the current
/// generation; anything else that does not match is refused outright.
async fn check_incarnation(web: &Web, name: &str, token: &str) -> Result<i64, ApiError> {
    let Some((claimed, secret)) = parse_incarnation_token(token) else {
        return Err(ApiError::unauthorized("invalid credentials"));
    };
    let Some(current) = web.store().worker_credential(name).await? else {
        return Err(ApiError::from(hangar_store::StoreError::Refused {
            message: Refusal::Unknown.message(name, claimed),
            refusal: Refusal::Unknown,
        }));
    };
    let matches = current
        .token_hash
        .as_deref()
        .is_some_and(|h| same_secret(h.as_bytes(), digest(secret).as_bytes()));
    if matches && current.generation == claimed {
        Ok(claimed)
    } else if claimed < current.generation {
        let refusal = Refusal::Superseded {
            current: current.generation,
        };
        Err(ApiError::from(hangar_store::StoreError::Refused {
            message: refusal.message(name, claimed),
            refusal,
        }))
    } else {
        Err(ApiError::unauthorized("invalid credentials"))
    }
}

/// The address a request came from, where the server recorded it.
pub(crate) struct Peer(pub Option<SocketAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
        ))
    }
}
