//! Logging in through the OIDC provider (`crate::oidc`): `/auth/oidc`
//! sends the browser to the provider, which sends it back to
//! `/auth/oidc/callback`. The login's state travels in the provider's
//! redirect and in a cookie of its own (`SameSite=Lax`, so the provider's
//! top-level redirect back carries it; scoped to the callback's path), and
//! the two must match: a callback forced on another browser is refused.

use axum::extract::{Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::auth::{cookie, log_in, login_form, LoginQuery, Viewer};
use super::layout::page;
use crate::oidc::CALLBACK_PATH;
use crate::{ApiError, Web};

const STATE_COOKIE: &str = "hangar_oidc_state";
/// The state cookie lives as long as the login may take at the provider.
const STATE_MAX_AGE_S: u32 = 600;

fn state_cookie(web: &Web, state: &str, max_age: u32) -> String {
    let secure = if web.config().auth.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{STATE_COOKIE}={state}; HttpOnly; SameSite=Lax; Path={CALLBACK_PATH}; Max-Age={max_age}{secure}"
    )
}

fn no_provider(web: &Web) -> Response {
    login_form(
        web,
        &Viewer::anonymous(),
        None,
        Some(ApiError::not_found(
            "no OIDC provider is configured on this web (see --oidc-issuer)",
        )),
    )
}

/// Starts an OIDC login (for the CLI too, when the query names one).
pub(crate) async fn start(State(web): State<Web>, Query(query): Query<LoginQuery>) -> Response {
    let Some(oidc) = web.oidc() else {
        return no_provider(&web);
    };
    let cli = match query.cli() {
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
    match oidc.begin(&web, cli.clone()).await {
        Ok((url, state)) => {
            crate::answer::see_other_with_cookie(&url, state_cookie(&web, &state, STATE_MAX_AGE_S))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start an OIDC login");
            login_form(
                &web,
                &Viewer::anonymous(),
                cli.as_ref(),
                Some(ApiError::unavailable(e)),
            )
        }
    }
}

/// What the provider sends back.
#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Finishes an OIDC login: a session for this browser, or the waiting
/// CLI's code. The state cookie is cleared whatever happens.
pub(crate) async fn callback(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(back): Query<Callback>,
) -> Response {
    let Some(oidc) = web.oidc() else {
        return no_provider(&web);
    };
    let refused = |message: String| {
        login_form(
            &web,
            &Viewer::anonymous(),
            None,
            Some(ApiError::unauthorized(message)),
        )
    };
    let mut response = match (back.error, back.code, back.state) {
        (Some(error), _, _) => {
            let shown = |s: &str| hangar_core::names::shorten(s);
            refused(format!(
                "the OIDC provider refused the login: {}{}",
                shown(&error),
                back.error_description
                    .map(|d| format!(": {}", shown(&d)))
                    .unwrap_or_default()
            ))
        }
        (None, Some(code), Some(state)) => {
            match oidc
                .finish(&web, &code, &state, cookie(&headers, STATE_COOKIE))
                .await
            {
                Ok((identity, cli)) => {
                    tracing::info!(user = %identity.user_name, subject = %identity.user_id, cli = cli.is_some(), "logged in through OIDC");
                    let name = identity.user_name.clone();
                    log_in(&web, &identity, cli.as_ref(), |cookie| {
                        logged_in_page(&name, cookie)
                    })
                    .await
                }
                Err(e) => {
                    tracing::info!(error = %e, "an OIDC login was refused");
                    refused(e)
                }
            }
        }
        _ => refused("the OIDC provider's answer has no code or no state".into()),
    };
    if let Ok(clear) = HeaderValue::from_str(&state_cookie(&web, "", 0)) {
        response.headers_mut().append(SET_COOKIE, clear);
    }
    response
}

/// Sets the session's cookie and goes on to the dashboard from a page of
/// web's own: a `SameSite=Strict` cookie set at the end of a redirect
/// that began at the provider would not be sent on an immediate redirect
/// onwards.
fn logged_in_page(user: &str, cookie: String) -> Response {
    let body = page(
        "logged in",
        &Viewer::anonymous(),
        html! {
            meta http-equiv="refresh" content="0; url=/";
            h1 { "logged in" }
            p { "logged in as " (user) "; " a href="/" { "on to the pipelines" } }
        },
    );
    ([(SET_COOKIE, cookie)], Html(body.into_string())).into_response()
}
