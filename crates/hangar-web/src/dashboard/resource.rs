//! `/teams/{team}/pipelines/{name}/resources/{resource}`: a resource's
//! versions, newest first, each enabled or disabled; its pin and the
//! pin's comment; its last check (when, the error, why it waits); and the
//! buttons to check now, pin or unpin, enable or disable a version, each
//! the API's own request as the viewer.

use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{Html, Response};
use axum::Form;
use hangar_core::dashboard::{pin_names_version, utc_words};
use hangar_store::VersionPage;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::{act_through_api_with, segment, ActionForm, Viewer};
use super::layout::{csrf_field, moment, page as shell, seg, status};
use super::pipeline::readable;
use super::{PageError, PageResult};
use crate::Web;

/// How many versions one page lists.
const VERSIONS_SHOWN: i64 = 50;

/// `?before=ID`: the versions older than that one.
#[derive(Deserialize)]
pub(crate) struct VersionsQuery {
    before: Option<String>,
}

pub(crate) async fn page(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, resource)): Path<(String, String, String)>,
    Query(query): Query<VersionsQuery>,
) -> PageResult {
    let p = readable(&web, &viewer, &team, &name).await?;
    let before = match query.before.as_deref() {
        None | Some("") => None,
        Some(text) => Some(text.parse::<i64>().map_err(|_| {
            PageError::bad_request(format!("before: {text:?} is not a version id"))
        })?),
    };
    let store = web.store();
    let now = web.now();
    let r = store.resource(&team, &name, &resource).await?;
    let page = VersionPage {
        limit: VERSIONS_SHOWN,
        before,
        ..VersionPage::default()
    };
    let versions = store
        .resource_versions(&team, &name, &resource, page)
        .await?;
    let pin = store.resource_pin(&team, &name, &resource).await?;
    let check = match r.scope_id {
        Some(scope) => Some(store.check_status(scope).await?),
        None => None,
    };
    let checks_off = serde_json::from_str::<Value>(&r.config)
        .ok()
        .and_then(|c| c.get("check_every").cloned())
        == Some(json!("never"));
    let pipeline = format!("/teams/{}/pipelines/{}", seg(&team), seg(&name));
    let base = format!("{pipeline}/resources/{}", seg(&resource));
    let can_act = viewer.logged_in;
    let body = html! {
        h1 {
            a href=(pipeline) { (name) } " / " (resource)
            @if pin.is_some() { " " span.status.pinned-badge { "pinned" } }
        }
        p {
            "type " code { (r.resource_type) }
            @if checks_off { " · " span.notice { "periodic checks off (check_every: never)" } }
            @if p.paused { " · " span.notice { "pipeline paused: no periodic checks" } }
        }
        h2 { "check" }
        div.check {
            @match &check {
                None => { p.notice { "not checked yet" } }
                Some(c) => {
                    p {
                        "last check finished: " (moment(c.last_finished_at, now))
                        @if let Some(started) = c.last_started_at {  " (started " (moment(Some(started), now)) ")" }
                        @if c.checking { " · " (status("started")) " checking now" }
                        @if c.requested_at.is_some() { " · a check is asked for" }
                        @if let Some(next) = c.next_check_at { " · next due " (utc_words(next)) }
                    }
                    @if let Some(error) = &c.error { pre.check-error { "check failed: " (error) } }
                    @else if c.last_finished_at.is_some() { p { (status("succeeded")) " the last check succeeded" } }
                    @if let Some(output) = &c.output { pre.check-output { (output) } }
                    @if let Some(why) = &c.waiting_reason { p.check-waiting { "check waiting: " (why) } }
                }
            }
            @if can_act { (form(&viewer, &base, "check", None, "check now")) }
        }
        h2 { "pin" }
        @match &pin {
            None => { p.notice { "not pinned: jobs take the newest enabled version" } }
            Some(pin) => {
                p {
                    "pinned to " code { (pin.version) }
                    @if pin.from_config { " by the pipeline's config (change the config to unpin)" }
                    @if let Some(comment) = &pin.comment { div.pin-comment { "“" (comment) "”" } }
                }
                @if can_act && !pin.from_config { (form(&viewer, &base, "unpin", None, "unpin")) }
            }
        }
        h2 { "versions, newest first" }
        @if versions.is_empty() { p.notice { "no versions yet" } }
        @else {
            table.versions {
                tr { th { "version" } th { "metadata" } th { "found" } th { "state" } @if can_act { th { "actions" } } }
                @for v in &versions {
                    @let pinned = pin.as_ref().is_some_and(|p| pin_names_version(&p.version, &v.version));
                    tr.pinned[pinned] data-version=(v.version) {
                        td { code { (v.version) } }
                        td { (metadata(&v.metadata)) }
                        td { (moment(Some(v.created_at), now)) }
                        td {
                            @if v.enabled { "enabled" } @else { strong { "disabled" } }
                            @if pinned { " · pinned" }
                        }
                        @if can_act {
                            td {
                                @if pinned {
                                    @if !pin.as_ref().is_some_and(|p| p.from_config) {
                                        (form(&viewer, &base, "unpin", None, "unpin"))
                                    }
                                } @else if !pin.as_ref().is_some_and(|p| p.from_config) {
                                    form.inline method="post" action={(base) "/pin"} {
                                        (csrf_field(&viewer))
                                        input type="hidden" name="version" value=(v.version);
                                        input type="text" name="comment" placeholder="why (optional)" aria-label="pin comment";
                                        button type="submit" { "pin" }
                                    }
                                }
                                " "
                                @if v.enabled { (form(&viewer, &base, "disable", Some(&v.version), "disable")) }
                                @else { (form(&viewer, &base, "enable", Some(&v.version), "enable")) }
                            }
                        }
                    }
                }
            }
        }
        @if versions.len() as i64 == VERSIONS_SHOWN {
            @if let Some(last) = versions.last() {
                p { a href={(base) "?before=" (last.id)} { "older versions" } }
            }
        }
    };
    Ok(Html(
        shell(&format!("{name}/{resource}"), &viewer, body).into_string(),
    ))
}

/// A version's metadata (a JSON list of `{name, value}`) as lines.
fn metadata(json: &str) -> Markup {
    let pairs: Vec<(String, String)> = serde_json::from_str::<Vec<Value>>(json)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (field("name"), field("value"))
        })
        .collect();
    html! { @for (k, v) in &pairs { div { (k) ": " (v) } } }
}

/// A button POSTing `action` (with the version, when it acts on one).
fn form(viewer: &Viewer, base: &str, action: &str, version: Option<&str>, label: &str) -> Markup {
    html! {
        form.inline method="post" action={(base) "/" (action)} {
            (csrf_field(viewer))
            @if let Some(v) = version { input type="hidden" name="version" value=(v); }
            button type="submit" { (label) }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct ResourceForm {
    #[serde(default)]
    csrf: String,
    /// The version acted on, as the page wrote it (JSON).
    version: Option<String>,
    comment: Option<String>,
}

/// Check, pin, unpin, enable, disable: each the API's own request.
pub(crate) async fn act(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, resource, action)): Path<(String, String, String, String)>,
    Form(form): Form<ResourceForm>,
) -> Result<Response, PageError> {
    viewer.check_action(&ActionForm {
        csrf: form.csrf.clone(),
    })?;
    let base = format!(
        "/teams/{}/pipelines/{}/resources/{}",
        segment(&team),
        segment(&name),
        segment(&resource)
    );
    let version = || -> Result<Map<String, Value>, PageError> {
        let text = form
            .version
            .as_deref()
            .ok_or_else(|| PageError::bad_request("which version? (the form sent none)"))?;
        serde_json::from_str(text)
            .map_err(|e| PageError::bad_request(format!("version {text:?} is not a version: {e}")))
    };
    let (method, path, body) = match action.as_str() {
        "check" => (Method::POST, format!("{base}/check"), json!({})),
        "pin" => {
            // An empty comment box is no comment.
            let comment = form
                .comment
                .as_deref()
                .map(str::trim)
                .filter(|c| !c.is_empty());
            (
                Method::PUT,
                format!("{base}/pin"),
                json!({"version": version()?, "comment": comment}),
            )
        }
        "unpin" => (Method::PUT, format!("{base}/unpin"), Value::Null),
        "enable" | "disable" => (
            Method::PUT,
            format!("{base}/versions/{action}"),
            json!({"version": version()?}),
        ),
        _ => return Err(PageError::not_found(format!("no action {action:?}"))),
    };
    let body = (!body.is_null()).then_some(body);
    act_through_api_with(&web, &viewer, method, &path, body, &base).await
}
