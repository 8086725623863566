//! Logging in to the dashboard, and its actions.
//!
//! The login form takes the admin token and answers with a session cookie
//! (`HttpOnly`: no script reads it; `SameSite=Strict`: no other site's
//! page sends it). The cookie holds a digest derived from the token, not
//! the token: a leaked cookie does not give API access, and changing the
//! admin token logs every browser out. Every action is a POST form that
//! carries a CSRF token (another digest of the token, different from the
//! cookie's) which only a page web rendered for a logged-in browser holds.
//!
//! Wrong tokens are limited per client address
//! (`hangar_core::login_limit`: 5 in 5 minutes, then 429 until the
//! window ends).
//!
//! An action is done by handing the matching API request, with the admin
//! token, to web's own router in-process: the dashboard never duplicates
//! a rule the API applies (a paused pipeline refusing a trigger, …).

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
use maud::html;
use serde::Deserialize;
use tower::ServiceExt;

use super::layout::page;
use super::PageError;
use crate::{ApiError, Web};

const COOKIE_NAME: &str = "hangar_session";

/// Who is looking at a page.
pub(crate) struct Viewer {
    pub logged_in: bool,
    /// The token the page's action forms carry; empty when anonymous.
    pub csrf: String,
}

impl Viewer {
    pub(crate) fn anonymous() -> Viewer {
        Viewer {
            logged_in: false,
            csrf: String::new(),
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

fn session_value(web: &Web) -> String {
    digest(&format!(
        "hangar-dashboard-session:{}",
        web.config().admin_token
    ))
}

fn csrf_value(web: &Web) -> String {
    digest(&format!(
        "hangar-dashboard-csrf:{}",
        web.config().admin_token
    ))
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
        let expected = session_value(web);
        let logged_in =
            session_cookie(parts).is_some_and(|v| same_secret(v.as_bytes(), expected.as_bytes()));
        Ok(if logged_in {
            Viewer {
                logged_in,
                csrf: csrf_value(web),
            }
        } else {
            Viewer::anonymous()
        })
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
                label { "admin token " input type="password" name="token" autofocus; }
                " "
                button type="submit" { "log in" }
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

pub(crate) async fn login(
    State(web): State<Web>,
    extensions: Extensions,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let client = client_of(&extensions);
    let now = web.now();
    // Checked before the token: once limited, the right token is refused
    // too, or guessing would simply go on.
    let admission = web.login_limit().admit(&client, now);
    if let Admission::Limited { retry_after_ms } = admission {
        let seconds = (retry_after_ms + 999) / 1000;
        let mut response = login_form(
            &Viewer::anonymous(),
            Some(ApiError::too_many_requests(format!(
                "too many wrong tokens from this address: try again in {}",
                duration_words(retry_after_ms)
            ))),
        );
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
        return response;
    }
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    if !same_secret(token.as_bytes(), web.config().admin_token.as_bytes()) {
        web.login_limit().failed(&client, now);
        return login_form(
            &Viewer::anonymous(),
            Some(ApiError::unauthorized("that is not the admin token")),
        );
    }
    web.login_limit().succeeded(&client);
    let cookie = format!(
        "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/",
        session_value(&web)
    );
    crate::answer::see_other_with_cookie("/", cookie)
}

pub(crate) async fn logout(viewer: Viewer, Form(form): Form<ActionForm>) -> Response {
    if let Err(e) = viewer.check_action(&form) {
        return e.into_response();
    }
    let cookie = format!("{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    crate::answer::see_other_with_cookie("/", cookie)
}

/// Does an API request (`method` on `/api/v1{path}`) as the admin, then
/// sends the browser to `back`; the API's refusal is shown as it is.
pub(crate) async fn act_through_api(
    web: &Web,
    method: Method,
    path: &str,
    back: &str,
) -> Result<Response, PageError> {
    let request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", hangar_api::API_PREFIX))
        .header(
            AUTHORIZATION,
            format!("Bearer {}", web.config().admin_token),
        )
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
