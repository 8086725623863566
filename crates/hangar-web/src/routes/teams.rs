//! `/api/v1/teams…`, `/api/v1/login`, `/api/v1/logout` and `/api/v1/user`:
//! teams and their auth configs, and users' sessions.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use hangar_api::credentials::digest;
use hangar_api::teams::{CliCode, Login, RenameTeam, Session, SetTeam, Team, TeamSaved, UserInfo};
use hangar_core::login_limit::Admission;
use hangar_core::tenancy::{Caller, Identity, TeamAuth, MAIN_TEAM};
use hangar_store::TeamSet;

use crate::auth::Peer;
use crate::authz::{act, check_local_login, roles_of, Allowed, LoginRefused};
use crate::error::ApiError;
use crate::json::Json;
use crate::Web;

/// A team name: a URL segment (`validate_label`).
fn check_team(team: &str) -> Result<(), ApiError> {
    hangar_core::names::validate_label(team)
        .map_err(|e| ApiError::bad_request(format!("team: {e}")))
}

fn read_auth(value: serde_json::Value) -> Result<TeamAuth, ApiError> {
    let auth: TeamAuth =
        serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("auth: {e}")))?;
    auth.validate()
        .map_err(|e| ApiError::bad_request(format!("auth: {e}")))?;
    Ok(auth)
}

pub(super) async fn list(
    State(web): State<Web>,
    allowed: Allowed<act::ListTeams>,
) -> Result<axum::Json<Vec<Team>>, ApiError> {
    let caller = allowed.caller();
    let teams = web.store().team_auths().await?;
    Ok(axum::Json(
        teams
            .into_iter()
            .filter_map(|t| {
                let role = caller.role_on(&t.name)?;
                let auth = (role == hangar_core::tenancy::Role::Owner)
                    .then(|| serde_json::from_str(&t.auth).ok())
                    .flatten();
                Some(Team { name: t.name, auth })
            })
            .collect(),
    ))
}

pub(super) async fn show(
    State(web): State<Web>,
    allowed: Allowed<act::GetTeam>,
    Path(team): Path<String>,
) -> Result<axum::Json<Team>, ApiError> {
    let found = web
        .store()
        .team_auths()
        .await?
        .into_iter()
        .find(|t| t.name == team)
        .ok_or_else(|| ApiError::not_found(format!("team {team} not found")))?;
    let owner = allowed.caller().role_on(&team) == Some(hangar_core::tenancy::Role::Owner);
    Ok(axum::Json(Team {
        name: found.name,
        auth: owner
            .then(|| serde_json::from_str(&found.auth).ok())
            .flatten(),
    }))
}

/// Sets a team's auth: its owners may change it; only an admin makes a
/// team (Concourse's rule).
pub(super) async fn set(
    State(web): State<Web>,
    allowed: Allowed<act::SetTeam>,
    Path(team): Path<String>,
    Json(req): Json<SetTeam>,
) -> Result<(StatusCode, axum::Json<TeamSaved>), ApiError> {
    check_team(&team)?;
    let auth = read_auth(req.auth)?;
    let text = serde_json::to_string(&auth).map_err(|e| ApiError::internal(e.to_string()))?;
    let set = web
        .store()
        .set_team_auth(&team, &text, allowed.caller().is_admin(), web.now())
        .await?;
    tracing::info!(%team, by = %allowed.caller().describe(), ?set, "team set");
    let created = set == TeamSet::Created;
    Ok(crate::answer::created_or_changed(
        created,
        axum::Json(TeamSaved { team, created }),
    ))
}

pub(super) async fn rename(
    State(web): State<Web>,
    allowed: Allowed<act::RenameTeam>,
    Path(team): Path<String>,
    Json(req): Json<RenameTeam>,
) -> Result<StatusCode, ApiError> {
    check_team(&req.name)?;
    if team == MAIN_TEAM {
        return Err(ApiError::forbidden(
            "team main is the admins' team and keeps its name",
        ));
    }
    if req.name == MAIN_TEAM {
        return Err(ApiError::conflict("team main already exists"));
    }
    web.store().rename_team(&team, &req.name).await?;
    tracing::info!(from = %team, to = %req.name, by = %allowed.caller().describe(), "team renamed");
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn destroy(
    State(web): State<Web>,
    allowed: Allowed<act::DestroyTeam>,
    Path(team): Path<String>,
) -> Result<StatusCode, ApiError> {
    if team == MAIN_TEAM {
        return Err(ApiError::forbidden(
            "team main is the admins' team and cannot be destroyed",
        ));
    }
    web.store().destroy_team(&team, web.now()).await?;
    web.engine().wake();
    tracing::info!(%team, by = %allowed.caller().describe(), "team destroyed");
    Ok(crate::answer::NO_CONTENT)
}

/// What `/user` and a login answer about a caller.
pub(crate) fn user_info(caller: &Caller) -> UserInfo {
    let (connector, user_id, user_name, roles) = match caller {
        Caller::User { identity, roles } => (
            identity.connector.clone(),
            identity.user_id.clone(),
            identity.user_name.clone(),
            roles.clone(),
        ),
        _ => (
            "token".into(),
            "admin".into(),
            "admin".into(),
            BTreeMap::new(),
        ),
    };
    UserInfo {
        connector,
        user_id,
        user_name,
        is_admin: caller.is_admin(),
        teams: roles
            .into_iter()
            .map(|(team, role)| (team, vec![role.as_str().to_string()]))
            .collect(),
    }
}

pub(super) async fn user(allowed: Allowed<act::GetUser>) -> axum::Json<UserInfo> {
    axum::Json(user_info(allowed.caller()))
}

/// Logs a local user in: a session token, good until it expires, goes
/// idle, or is revoked at logout. Wrong passwords are throttled per
/// account, per client and in all (`hangar_core::login_throttle`).
pub(super) async fn login(
    State(web): State<Web>,
    Peer(peer): Peer,
    Json(req): Json<Login>,
) -> Result<axum::Json<Session>, ApiError> {
    let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    let identity = match check_local_login(&web, &req.username, &req.password, &client).await {
        Ok(identity) => identity,
        Err(LoginRefused::Limited(retry_after_ms)) => {
            return Err(ApiError::too_many_requests(format!(
                "too many wrong passwords; try again in {}",
                hangar_core::lifecycle::human_ms(retry_after_ms)
            )))
        }
        Err(LoginRefused::Wrong) => {
            return Err(ApiError::unauthorized("wrong user name or password"))
        }
    };
    session_for(&web, identity).await
}

/// Opens a session for `identity`: what a login answers.
async fn session_for(web: &Web, identity: Identity) -> Result<axum::Json<Session>, ApiError> {
    let (token, expires_at) = crate::authz::open_session(web, &identity).await?;
    let caller = if identity.connector == crate::authz::ADMIN_TOKEN_CONNECTOR {
        Caller::AdminToken
    } else {
        let roles = roles_of(web, &identity).await?;
        Caller::User { identity, roles }
    };
    Ok(axum::Json(Session {
        token,
        expires_at,
        user: user_info(&caller),
    }))
}

/// Trades a browser login's one-time code for a session
/// (`crate::cli_login`). Wrong codes count against the client's address
/// as wrong bearer tokens do.
pub(super) async fn login_cli(
    State(web): State<Web>,
    Peer(peer): Peer,
    Json(req): Json<CliCode>,
) -> Result<axum::Json<Session>, ApiError> {
    let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    let now = web.now();
    if let Admission::Limited { retry_after_ms } = web.bearer_limit().admit(&client, now) {
        return Err(ApiError::too_many_requests(format!(
            "too many wrong login codes from this address; try again in {}",
            hangar_core::lifecycle::human_ms(retry_after_ms)
        )));
    }
    match crate::cli_login::redeem(&web, &req.code, &req.verifier).await? {
        Some(identity) => {
            tracing::info!(user = %identity.user_name, %client, "the CLI logged in through the browser");
            session_for(&web, identity).await
        }
        None => {
            web.bearer_limit().failed(&client, now);
            Err(ApiError::unauthorized(
                "that login code is not good (used, expired, or another CLI's): log in again",
            ))
        }
    }
}

/// Ends the caller's session: its token is refused from now on.
pub(super) async fn logout(
    State(web): State<Web>,
    allowed: Allowed<act::Logout>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    if matches!(allowed.caller(), Caller::AdminToken) {
        return Err(ApiError::bad_request(
            "the admin token is not a session: change it to revoke it",
        ));
    }
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or_default();
    web.store()
        .revoke_session(&digest(token), web.now())
        .await?;
    Ok(crate::answer::NO_CONTENT)
}
