//! Logging in to the dashboard, and its actions.
//!
//! The login form takes a local user's name and password (or, for
//! bootstrap, the admin token), or sends the browser to the OIDC provider
//! (`oidc.rs`), and opens a server-side session, the same kind
//! `hangar login` opens: the cookie holds the session's token (`HttpOnly`:
//! no script reads it; `SameSite=Strict`: no other site's page sends it;
//! `Secure` when web's external URL is https). When the page was opened
//! by `hangar login` (`cli_port`, `cli_challenge`), the login is handed to
//! the CLI instead (`crate::cli_login`). Logging out revokes the session at web, so a copied cookie
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
use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE, RETRY_AFTER};
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
use crate::cli_login::CliLogin;
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
    /// Whether the page knows who is looking: an error page does not (it
    /// is made where the viewer was not read), so its header offers
    /// neither "log in" nor "log out".
    pub known: bool,
}

impl Viewer {
    pub(crate) fn anonymous() -> Viewer {
        Viewer {
            logged_in: false,
            csrf: String::new(),
            caller: Caller::Anonymous,
            session: String::new(),
            known: true,
        }
    }

    /// Someone the page did not identify (an error page's viewer).
    pub(crate) fn unknown() -> Viewer {
        Viewer {
            known: false,
            ..Viewer::anonymous()
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

/// The value of the request's cookie `name`.
pub(crate) fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

fn session_cookie(parts: &Parts) -> Option<&str> {
    cookie(&parts.headers, COOKIE_NAME)
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
                known: true,
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
    #[serde(default)]
    cli_port: Option<String>,
    #[serde(default)]
    cli_challenge: Option<String>,
}

/// The login page's query: a CLI waiting for this login, if any
/// (`crate::cli_login`).
#[derive(Deserialize, Default)]
pub(crate) struct LoginQuery {
    #[serde(default)]
    cli_port: Option<String>,
    #[serde(default)]
    cli_challenge: Option<String>,
}

impl LoginQuery {
    pub(crate) fn cli(&self) -> Result<Option<CliLogin>, String> {
        CliLogin::from_query(self.cli_port.as_deref(), self.cli_challenge.as_deref())
    }
}

/// The login form, with why the last login was refused if it was; `cli`
/// is carried through each way of logging in.
pub(crate) fn login_form(
    web: &Web,
    viewer: &Viewer,
    cli: Option<&CliLogin>,
    refused: Option<ApiError>,
) -> Response {
    let oidc_href = match cli {
        Some(cli) => format!("/auth/oidc?{}", cli.query()),
        None => "/auth/oidc".to_string(),
    };
    let cli_fields = html! {
        @if let Some(cli) = cli {
            input type="hidden" name="cli_port" value=(cli.port);
            input type="hidden" name="cli_challenge" value=(cli.challenge);
        }
    };
    let body = page(
        "log in",
        viewer,
        html! {
            // What a person types here must not be swapped away.
            h1 data-live="off" { "log in" }
            @if cli.is_some() { p #cli { "logging in the hangar CLI: once you log in here, it carries on" } }
            @if let Some(e) = &refused { p.error { (e.message) } }
            @if let Some(oidc) = web.oidc() {
                p { a.button #oidc href=(oidc_href) { "log in with " (oidc.display_name()) } }
            }
            form method="post" action="/login" {
                (cli_fields)
                label { "user " input type="text" name="username" autocomplete="username" autofocus; }
                " "
                label { "password " input type="password" name="password" autocomplete="current-password"; }
                " "
                button type="submit" { "log in" }
            }
            details {
                summary { "log in with the admin token" }
                form method="post" action="/login" {
                    (cli_fields)
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

pub(crate) async fn login_page(
    State(web): State<Web>,
    viewer: Viewer,
    Query(query): Query<LoginQuery>,
) -> Response {
    match query.cli() {
        Ok(cli) => login_form(&web, &viewer, cli.as_ref(), None),
        Err(e) => login_form(&web, &viewer, None, Some(ApiError::bad_request(e))),
    }
}

/// A session cookie's attributes: `HttpOnly` (no script reads it),
/// `SameSite=Strict` (no other site's page sends it) and, when browsers
/// reach web over TLS, `Secure`.
pub(crate) fn session_cookie_value(web: &Web, token: &str, max_age: Option<u32>) -> String {
    let mut cookie = format!("{COOKIE_NAME}={token}; HttpOnly; SameSite=Strict; Path=/");
    if let Some(age) = max_age {
        cookie.push_str(&format!("; Max-Age={age}"));
    }
    if web.config().auth.secure_cookies() {
        cookie.push_str("; Secure");
    }
    cookie
}

/// Logs `identity` in: a session and its cookie for this browser, or,
/// when a CLI is waiting, a one-time code handed to it.
pub(crate) async fn log_in(
    web: &Web,
    identity: &Identity,
    cli: Option<&CliLogin>,
    then: impl FnOnce(String) -> Response,
) -> Response {
    if let Some(cli) = cli {
        return match crate::cli_login::hand_over(web, identity.clone(), cli).await {
            Ok(url) => see_other(&url),
            Err(e) => login_form(web, &Viewer::anonymous(), Some(cli), Some(e)),
        };
    }
    match crate::authz::open_session(web, identity).await {
        Ok((token, _)) => then(session_cookie_value(web, &token, None)),
        Err(e) => login_form(web, &Viewer::anonymous(), None, Some(e)),
    }
}

/// Who sent a login: the peer's address (no forwarded header is trusted,
/// so behind a proxy every browser counts as the proxy).
fn client_of(extensions: &Extensions) -> String {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string())
}

fn limited(web: &Web, cli: Option<&CliLogin>, retry_after_ms: i64, what: &str) -> Response {
    let seconds = (retry_after_ms + 999) / 1000;
    let mut response = login_form(
        web,
        &Viewer::anonymous(),
        cli,
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
        cli_port: None,
        cli_challenge: None,
    });
    let cli = match CliLogin::from_query(form.cli_port.as_deref(), form.cli_challenge.as_deref()) {
        Ok(cli) => cli,
        Err(e) => {
            return login_form(
                &web,
                &Viewer::anonymous(),
                None,
                Some(ApiError::bad_request(e)),
            )
        }
    };
    let cli = cli.as_ref();
    let identity = if form.username.is_empty() {
        // Checked before the token: once limited, the right token is
        // refused too, or guessing would simply go on.
        if let Admission::Limited { retry_after_ms } = web.login_limit().admit(&client, now) {
            return limited(&web, cli, retry_after_ms, "tokens from this address");
        }
        if !same_secret(form.token.as_bytes(), web.config().admin_token.as_bytes()) {
            web.login_limit().failed(&client, now);
            return login_form(
                &web,
                &Viewer::anonymous(),
                cli,
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
                return limited(&web, cli, retry_after_ms, "passwords")
            }
            Err(LoginRefused::Wrong) => {
                return login_form(
                    &web,
                    &Viewer::anonymous(),
                    cli,
                    Some(ApiError::unauthorized("wrong user name or password")),
                )
            }
        }
    };
    log_in(&web, &identity, cli, |cookie| {
        crate::answer::see_other_with_cookie("/", cookie)
    })
    .await
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
    crate::answer::see_other_with_cookie("/", session_cookie_value(&web, "", Some(0)))
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
    act_through_api_with(web, viewer, method, path, None, back).await
}

/// [`act_through_api`] with a JSON body, for the requests that take one
/// (pin a version, enable one).
pub(crate) async fn act_through_api_with(
    web: &Web,
    viewer: &Viewer,
    method: Method,
    path: &str,
    json: Option<serde_json::Value>,
    back: &str,
) -> Result<Response, PageError> {
    let request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", hangar_api::API_PREFIX))
        .header(AUTHORIZATION, format!("Bearer {}", viewer.session));
    let request = match json {
        Some(json) => request
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(json.to_string())),
        None => request.body(Body::empty()),
    }
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
    // The API's error shape: its message alone is shown.
    let message = serde_json::from_slice::<hangar_api::ErrorBody>(&body)
        .map(|b| b.error.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
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
