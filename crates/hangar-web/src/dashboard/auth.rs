//! Logging in to the dashboard, and its actions.
//!
//! The login form takes a local user's name and password (or, for
//! bootstrap, the admin token) and opens a server-side session, the same
//! kind `hangar login` opens: the cookie holds the session's token
//! (`HttpOnly`: no script reads it; `SameSite=Strict`: no other site's page
//! sends it). Logging out revokes the session at web, so a copied cookie
//! stops working too; a session also ends when idle and at its expiry.
//! Every action is a POST form that carries a CSRF token (a digest of the
//! session's token, which only a page web rendered for that session holds).
//!
//! Wrong passwords are throttled per account, per client and in all
//! (`hangar_core::login_throttle`); wrong admin tokens per client
//! (`hangar_core::login_limit`: 5 in 5 minutes).
//!
//! An action is done by handing the matching API request, with the
//! viewer's session token, to web's own router in-process: the dashboard
//! never duplicates a rule the API applies (a paused pipeline refusing a
//! trigger, the viewer's role in the team, …).

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::header::{AUTHORIZATION, COOKIE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderValue, Method, Request};
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use hangar_api::credentials::{digest, same_secret};
use hangar_core::dashboard::duration_words;
use hangar_core::login_limit::Admission;
use hangar_core::tenancy::{Caller, Identity};
use maud::html;
use serde::Deserialize;
use tower::ServiceExt;

use super::layout::page;
use super::PageError;
use crate::authz::LoginRefused;
use crate::{ApiError, Web};

const COOKIE_NAME: &str = "hangar_session";

/// Who is looking at a page.
pub(crate) struct Viewer {
    pub logged_in: bool,
    /// The token the page's action forms carry; empty when anonymous.
    pub csrf: String,
    /// Who they are, and their roles.
    pub caller: Caller,
    /// The session's token, for the API requests its actions make.
    session: String,
}

impl Viewer {
    pub(crate) fn anonymous() -> Viewer {
        Viewer {
            logged_in: false,
            csrf: String::new(),
            caller: Caller::Anonymous,
            session: String::new(),
        }
    }

    /// May this viewer read team `team`'s things (any role there)?
    pub(crate) fn reads_team(&self, team: &str) -> bool {
        self.caller.role_on(team).is_some()
    }

    /// The fleet's pages: for whoever has a role on some team.
    pub(crate) fn may_see_workers(&self) -> Result<(), PageError> {
        use hangar_core::tenancy::{decide, Action, Denied, Target};
        match decide(&self.caller, Action::ListWorkers, Target::none()) {
            Ok(()) => Ok(()),
            Err(Denied::Unauthenticated) => Err(PageError::login_needed()),
            Err(Denied::Forbidden(why)) => Err(PageError::forbidden(why)),
            Err(Denied::Hidden) => Err(PageError::not_found("not found")),
        }
    }

    /// Refuses an action unless the browser is logged in and the form
    /// carries this session's CSRF token.
    pub(crate) fn check_action(&self, form: &ActionForm) -> Result<(), PageError> {
        if !self.logged_in {
            return Err(PageError::unauthorized("log in to do this"));
        }
        if !same_secret(form.csrf.as_bytes(), self.csrf.as_bytes()) {
            return Err(PageError::forbidden(
                "this form is stale or came from another site (CSRF token missing or wrong): reload the page and try again",
            ));
        }
        Ok(())
    }
}

fn csrf_value(session: &str) -> String {
    digest(&format!("hangar-dashboard-csrf:{session}"))
}

fn session_cookie(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)
}

impl FromRequestParts<Web> for Viewer {
    type Rejection = Infallible;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, Infallible> {
        let Some(session) = session_cookie(parts).filter(|v| !v.is_empty()) else {
            return Ok(Viewer::anonymous());
        };
        match crate::authz::session_of(web, session).await {
            Ok(Some(caller)) => Ok(Viewer {
                logged_in: true,
                csrf: csrf_value(session),
                caller,
                session: session.to_string(),
            }),
            Ok(None) => Ok(Viewer::anonymous()),
            Err(e) => {
                // The page then shows what an anonymous visitor sees.
                tracing::warn!(error = %e.message, "cannot read a dashboard session");
                Ok(Viewer::anonymous())
            }
        }
    }
}

/// Every action form's one field.
#[derive(Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    pub csrf: String,
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    token: String,
}

/// The login form, with why the last login was refused if it was.
fn login_form(viewer: &Viewer, refused: Option<ApiError>) -> Response {
    let body = page(
        "log in",
        viewer,
        html! {
            h1 { "log in" }
            @if let Some(e) = &refused { p.error { (e.message) } }
            form method="post" action="/login" {
                label { "user " input type="text" name="username" autocomplete="username" autofocus; }
                " "
                label { "password " input type="password" name="password" autocomplete="current-password"; }
                " "
                button type="submit" { "log in" }
            }
            details {
                summary { "log in with the admin token" }
                form method="post" action="/login" {
                    label { "admin token " input type="password" name="token"; }
                    " "
                    button type="submit" { "log in" }
                }
            }
        },
    );
    let body = Html(body.into_string());
    match refused {
        None => body.into_response(),
        Some(e) => (e.status, body).into_response(),
    }
}

pub(crate) async fn login_page(viewer: Viewer) -> Response {
    login_form(&viewer, None)
}

/// Who sent a login: the peer's address (no forwarded header is trusted,
/// so behind a proxy every browser counts as the proxy).
fn client_of(extensions: &Extensions) -> String {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string())
}

fn limited(retry_after_ms: i64, what: &str) -> Response {
    let seconds = (retry_after_ms + 999) / 1000;
    let mut response = login_form(
        &Viewer::anonymous(),
        Some(ApiError::too_many_requests(format!(
            "too many wrong {what}: try again in {}",
            duration_words(retry_after_ms)
        ))),
    );
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}

pub(crate) async fn login(
    State(web): State<Web>,
    extensions: Extensions,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let client = client_of(&extensions);
    let now = web.now();
    let form = form.map(|Form(f)| f).unwrap_or(LoginForm {
        username: String::new(),
        password: String::new(),
        token: String::new(),
    });
    let identity = if form.username.is_empty() {
        // Checked before the token: once limited, the right token is
        // refused too, or guessing would simply go on.
        if let Admission::Limited { retry_after_ms } = web.login_limit().admit(&client, now) {
            return limited(retry_after_ms, "tokens from this address");
        }
        if !same_secret(form.token.as_bytes(), web.config().admin_token.as_bytes()) {
            web.login_limit().failed(&client, now);
            return login_form(
                &Viewer::anonymous(),
                Some(ApiError::unauthorized("that is not the admin token")),
            );
        }
        web.login_limit().succeeded(&client);
        Identity {
            connector: crate::authz::ADMIN_TOKEN_CONNECTOR.into(),
            user_id: crate::authz::admin_session_id(&web),
            user_name: "admin".into(),
            groups: vec![],
        }
    } else {
        match crate::authz::check_local_login(&web, &form.username, &form.password, &client).await {
            Ok(identity) => identity,
            Err(LoginRefused::Limited(retry_after_ms)) => {
                return limited(retry_after_ms, "passwords")
            }
            Err(LoginRefused::Wrong) => {
                return login_form(
                    &Viewer::anonymous(),
                    Some(ApiError::unauthorized("wrong user name or password")),
                )
            }
        }
    };
    match crate::authz::open_session(&web, &identity).await {
        Ok((token, _)) => {
            let cookie = format!("{COOKIE_NAME}={token}; HttpOnly; SameSite=Strict; Path=/");
            crate::answer::see_other_with_cookie("/", cookie)
        }
        Err(e) => login_form(&Viewer::anonymous(), Some(e)),
    }
}

/// Ends the session at web (a copy of the cookie stops working too) and
/// clears the cookie.
pub(crate) async fn logout(
    State(web): State<Web>,
    viewer: Viewer,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(e) = viewer.check_action(&form) {
        return e.into_response();
    }
    if let Err(e) = web
        .store()
        .revoke_session(&digest(&viewer.session), web.now())
        .await
    {
        return ApiError::from(e).into_response();
    }
    let cookie = format!("{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    crate::answer::see_other_with_cookie("/", cookie)
}

/// Does an API request (`method` on `/api/v1{path}`) as the viewer, then
/// sends the browser to `back`; the API's refusal is shown as it is.
pub(crate) async fn act_through_api(
    web: &Web,
    viewer: &Viewer,
    method: Method,
    path: &str,
    back: &str,
) -> Result<Response, PageError> {
    let request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", hangar_api::API_PREFIX))
        .header(AUTHORIZATION, format!("Bearer {}", viewer.session))
        .body(Body::empty())
        .map_err(|e| PageError::bad_request(e.to_string()))?;
    let response = crate::routes::router(web.clone())
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    let status = response.status();
    if status.is_success() {
        return Ok(see_other(back));
    }
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    Err(ApiError::passed_on(status, message).into())
}

/// A name as one path segment of the API request's URI: every byte but
/// the unreserved ones percent-encoded, so a name cannot add a segment.
pub(crate) fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) use crate::answer::see_other;
