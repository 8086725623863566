//! Who a user is and what they may do: every user route asks here.
//!
//! A user's credential is `Authorization: Bearer` with either the admin
//! token (bootstrap and automation: an admin) or a session token from
//! logging in. A session names an identity; its roles are read from the
//! teams' auth configs at each request, so a `set-team` takes effect at
//! once. The decision is `hangar_core::tenancy::decide`; each route names
//! its action with [`Allowed`], and the team comes from the route's path
//! (`{team}`) or from the build it names (`{id}`).
//!
//! Wrong bearer tokens are counted per client address: past
//! [`BEARER_FAILURES`] in a minute, that client's calls with an unknown
//! token are answered 429 before any lookup.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use hangar_api::credentials::{digest, same_secret};
use hangar_core::login_limit::{Admission, LoginLimiter};
pub(crate) use hangar_core::tenancy::act;
use hangar_core::tenancy::{
    decide, Action, ActionOf, Caller, Denied, Identity, Role, Target, TeamAuth,
};

use crate::error::ApiError;
use crate::Web;

/// Wrong bearer tokens one client may send in [`BEARER_WINDOW_MS`].
pub(crate) const BEARER_FAILURES: u32 = 20;
pub(crate) const BEARER_WINDOW_MS: i64 = 60_000;

pub(crate) fn bearer_limiter() -> LoginLimiter {
    LoginLimiter::new(BEARER_FAILURES, BEARER_WINDOW_MS, 10_000)
}

/// How a refusal reads over the API.
pub(crate) fn refusal(denied: Denied, what: &str) -> ApiError {
    match denied {
        Denied::Unauthenticated => ApiError::unauthorized(
            "not logged in: run `hangar login` (or send Authorization: Bearer <token>)",
        ),
        Denied::Forbidden(why) => ApiError::forbidden(why),
        Denied::Hidden => ApiError::not_found(format!("{what} not found")),
    }
}

/// Every team's roles for `who`, from the stored configs. A config that
/// no longer reads gives nobody a role there (and says so in the log):
/// failing closed beats guessing.
pub(crate) async fn roles_of(
    web: &Web,
    who: &Identity,
) -> Result<BTreeMap<String, Role>, ApiError> {
    let mut roles = BTreeMap::new();
    for team in web.store().team_auths().await? {
        let auth = serde_json::from_str::<TeamAuth>(&team.auth)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                if a.0.is_empty() {
                    return Ok(a);
                }
                a.validate().map(|()| a).map_err(|e| e.to_string())
            });
        match auth {
            Ok(auth) => {
                if let Some(role) = auth.role_of(who) {
                    roles.insert(team.name, role);
                }
            }
            Err(e) => {
                tracing::error!(team = %team.name, error = %e, "a team's stored auth config does not read; it gives no role until set again");
            }
        }
    }
    Ok(roles)
}

/// The caller of a request: anonymous without credentials, an admin with
/// the admin token, else the user of a live session.
pub(crate) async fn caller_of(parts: &Parts, web: &Web) -> Result<Caller, ApiError> {
    let Some(header) = parts.headers.get(AUTHORIZATION) else {
        return Ok(Caller::Anonymous);
    };
    let token = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::unauthorized("malformed credentials: expected Authorization: Bearer <token>")
        })?;
    let cfg = web.config();
    if same_secret(token.as_bytes(), cfg.admin_token.as_bytes()) {
        return Ok(Caller::AdminToken);
    }
    if same_secret(token.as_bytes(), cfg.worker_key.as_bytes()) {
        return Err(ApiError::forbidden(
            "this needs a user's token or the admin token, not the worker key",
        ));
    }
    session_caller(parts, web, token).await
}

/// The user whose session `token` is, counting a wrong token against the
/// client's address.
pub(crate) async fn session_caller(
    parts: &Parts,
    web: &Web,
    token: &str,
) -> Result<Caller, ApiError> {
    let client = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let now = web.now();
    if let Admission::Limited { retry_after_ms } = web.bearer_limit().admit(&client, now) {
        return Err(ApiError::too_many_requests(format!(
            "too many wrong tokens from this address; try again in {}",
            hangar_core::lifecycle::human_ms(retry_after_ms)
        )));
    }
    match session_of(web, token).await? {
        Some(caller) => Ok(caller),
        None => {
            web.bearer_limit().failed(&client, now);
            Err(ApiError::unauthorized(
                "invalid or expired credentials: log in again",
            ))
        }
    }
}

/// The connector of a dashboard session opened with the admin token.
pub(crate) const ADMIN_TOKEN_CONNECTOR: &str = "token";

/// What an admin-token session records as its user id: a digest of the
/// admin token it was opened with, so a rotated token ends it.
pub(crate) fn admin_session_id(web: &Web) -> String {
    digest(&format!(
        "hangar-admin-session:{}",
        web.config().admin_token
    ))
}

/// The caller of a live session, if `token` is one's.
pub(crate) async fn session_of(web: &Web, token: &str) -> Result<Option<Caller>, ApiError> {
    if token.len() > 256 {
        return Ok(None);
    }
    let idle = i64::try_from(web.config().auth.session_idle.as_millis()).unwrap_or(i64::MAX);
    let Some(s) = web
        .store()
        .live_session(&digest(token), idle, web.now())
        .await?
    else {
        return Ok(None);
    };
    if s.connector == ADMIN_TOKEN_CONNECTOR {
        // Good only while web holds the admin token it was opened with:
        // rotating the token ends these sessions too.
        let current = admin_session_id(web);
        return Ok(
            same_secret(s.user_id.as_bytes(), current.as_bytes()).then_some(Caller::AdminToken)
        );
    }
    let identity = Identity {
        connector: s.connector,
        user_id: s.user_id,
        user_name: s.user_name,
        groups: serde_json::from_str(&s.groups).unwrap_or_default(),
    };
    let roles = roles_of(web, &identity).await?;
    Ok(Some(Caller::User { identity, roles }))
}

/// Why a local user's login was refused.
pub(crate) enum LoginRefused {
    /// Too many wrong passwords (`hangar_core::login_throttle`): try again
    /// in this many milliseconds.
    Limited(i64),
    /// A wrong name or password, answered alike.
    Wrong,
}

/// Checks a local user's name and password from `client`, throttled per
/// account, per client and in all: the identity to open a session for.
/// The API's login and the dashboard's form both ask here.
pub(crate) async fn check_local_login(
    web: &Web,
    account: &str,
    password: &str,
    client: &str,
) -> Result<Identity, LoginRefused> {
    let now = web.now();
    if let Admission::Limited { retry_after_ms } = web.login_throttle().admit(account, client, now)
    {
        return Err(LoginRefused::Limited(retry_after_ms));
    }
    // bcrypt is slow on purpose: off the async threads.
    let (checker, name, password) = (web.clone(), account.to_string(), password.to_string());
    let user = tokio::task::spawn_blocking(move || {
        checker
            .config()
            .auth
            .check_password(&name, &password)
            .map(|u| u.name.clone())
    })
    .await
    .ok()
    .flatten();
    let Some(name) = user else {
        web.login_throttle().failed(account, client, now);
        tracing::info!(account = %hangar_core::names::shorten(account), %client, "wrong login");
        return Err(LoginRefused::Wrong);
    };
    web.login_throttle().succeeded(account, client, now);
    tracing::info!(user = %name, %client, "logged in");
    Ok(Identity {
        connector: "local".into(),
        user_id: name.clone(),
        user_name: name,
        groups: vec![],
    })
}

/// Opens a session for `identity` (or, with the admin token's connector,
/// for the admin token): its token and when it ends at the latest.
pub(crate) async fn open_session(
    web: &Web,
    identity: &Identity,
) -> Result<(String, i64), ApiError> {
    let secret =
        hangar_api::credentials::new_secret().map_err(|e| ApiError::internal(e.to_string()))?;
    let token = format!("hs.{secret}");
    let now = web.now();
    let ttl = i64::try_from(web.config().auth.session_ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_at = now.saturating_add(ttl);
    let groups =
        serde_json::to_string(&identity.groups).map_err(|e| ApiError::internal(e.to_string()))?;
    web.store()
        .create_session(
            &hangar_store::NewSession {
                token_digest: &digest(&token),
                connector: &identity.connector,
                user_id: &identity.user_id,
                user_name: &identity.user_name,
                groups: &groups,
                expires_at,
            },
            now,
        )
        .await?;
    let idle = i64::try_from(web.config().auth.session_idle.as_millis()).unwrap_or(i64::MAX);
    // Sessions that ended a day ago are no longer worth a row.
    if let Err(e) = web
        .store()
        .prune_sessions(idle, 24 * 3600 * 1000, now)
        .await
    {
        tracing::warn!(error = %e, "cannot prune ended sessions");
    }
    Ok((token, expires_at))
}

/// A request whose caller may do `A`: the route's `{team}`, or the team of
/// the build its `{id}` names, is the target; a pipeline read looks up
/// whether the pipeline (or the build's job) is exposed when the caller
/// has no role to read it anyway.
pub(crate) struct Allowed<A>(pub Caller, PhantomData<A>);

impl<A> Allowed<A> {
    pub(crate) fn caller(&self) -> &Caller {
        &self.0
    }
}

impl<A: ActionOf + Send + Sync> FromRequestParts<Web> for Allowed<A> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        let caller = caller_of(parts, web).await?;
        let params = RawPathParams::from_request_parts(parts, web)
            .await
            .map_err(|e| ApiError::bad_request(format!("path: {e}")))?;
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        };
        let action = A::ACTION;
        let mut team = param("team");
        let mut exposed = false;
        let mut what = "it".to_string();
        if let Some(t) = &team {
            hangar_core::names::validate_label(t)
                .map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
        }
        let reads_pipeline = action.access() == hangar_core::tenancy::Access::PipelineRead;
        let may_read_anyway = |team: Option<&str>| {
            team.is_some_and(|t| caller.role_on(t).is_some()) || caller.is_admin()
        };
        if let (Some(t), Some(name)) = (&team, param("name")) {
            what = format!("pipeline {t}/{name}");
            if reads_pipeline && !may_read_anyway(Some(t)) {
                if let Ok(p) = web.store().pipeline(t, &name).await {
                    exposed = web.store().exposed_pipeline_ids().await?.contains(&p.id);
                }
            }
        } else if team.is_some() && action == Action::ListPipelines {
            // The listing is filtered to what the caller may read.
            exposed = true;
        }
        if let Some(id) = param("id").and_then(|id| id.parse::<i64>().ok()) {
            what = format!("build {id}");
            if !caller.is_admin() {
                let build = web.store().get_build(id).await?;
                team = build.and_then(|b| b.team);
                if reads_pipeline && !may_read_anyway(team.as_deref()) {
                    exposed = match web.store().build_exposure(id).await? {
                        Some(e) => crate::dashboard::build_is_public(&e),
                        None => false,
                    };
                }
                if team.is_none() {
                    // A build of no team (or none at all) is the admins'.
                    return Err(refusal(
                        match caller {
                            Caller::Anonymous => Denied::Unauthenticated,
                            _ => Denied::Hidden,
                        },
                        &what,
                    ));
                }
            }
        }
        let target = Target {
            team: team.as_deref(),
            exposed,
        };
        decide(&caller, action, target).map_err(|d| refusal(d, &what))?;
        Ok(Allowed(caller, PhantomData))
    }
}

/// The caller of a route that learns its team from its body or query,
/// and so checks with [`authorize`] once it has read it.
pub(crate) struct CallerOf(pub Caller);

impl FromRequestParts<Web> for CallerOf {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        Ok(CallerOf(caller_of(parts, web).await?))
    }
}

/// Checks an action whose team a route learns from its body or query.
pub(crate) fn authorize(caller: &Caller, action: Action, team: &str) -> Result<(), ApiError> {
    decide(caller, action, Target::team(team)).map_err(|d| refusal(d, &format!("team {team}")))
}
