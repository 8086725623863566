//! `/teams/{team}/pipelines/{name}/jobs/{job}`: the job's builds, newest
//! first, with their durations and input versions, and its buttons.

use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{Html, Response};
use axum::Form;
use maud::html;

use super::auth::{act_through_api, ActionForm, Viewer};
use super::layout::{action_button, job_path, moment, page as shell, seg, status, took};
use super::pipeline::readable;
use super::{PageError, PageResult};
use crate::Web;

/// How many builds the page lists.
const BUILDS_SHOWN: i64 = 25;

pub(crate) async fn page(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, job)): Path<(String, String, String)>,
) -> PageResult {
    let p = readable(&web, &viewer, &team, &name).await?;
    let store = web.store();
    let j = store.job(&team, &name, &job).await?;
    let builds = store.job_builds(j.id, BUILDS_SHOWN).await?;
    let mut rows = Vec::with_capacity(builds.len());
    for b in builds {
        let (inputs, _) = store.build_versions_shown(b.build.id).await?;
        rows.push((b, inputs));
    }
    let now = web.now();
    let base = job_path(&team, &name, &job);
    let body = html! {
        h1 {
            a href={"/teams/" (seg(&team)) "/pipelines/" (seg(&name))} { (name) } " / " (job)
            @if j.paused { " " (status("paused")) }
            @if p.paused { " " span.notice { "(pipeline paused)" } }
        }
        @if viewer.logged_in {
            p {
                (action_button(&viewer, &format!("{base}/trigger"), "trigger build"))
                " "
                @if j.paused { (action_button(&viewer, &format!("{base}/unpause"), "unpause job")) }
                @else { (action_button(&viewer, &format!("{base}/pause"), "pause job")) }
            }
        }
        h2 { "builds, newest first" }
        @if rows.is_empty() { p.notice { "no builds yet" } }
        table {
            tr { th { "build" } th { "status" } th { "started" } th { "duration" } th { "inputs" } th {} }
            @for (b, inputs) in &rows {
                tr {
                    td { a href={(base) "/builds/" (b.number)} { "#" (b.number) } }
                    td { (status(b.build.status.as_str())) }
                    td { (moment(b.build.started_at, now)) }
                    td { (took(b.build.started_at, b.build.finished_at, now)) }
                    td {
                        @for i in inputs {
                            div { (i.name.as_deref().unwrap_or(&i.resource)) ": " code { (i.version) } }
                        }
                    }
                    td {
                        @if viewer.logged_in && !b.build.status.is_final() {
                            (action_button(&viewer, &format!("/builds/{}/abort", b.build.id), "abort"))
                        }
                    }
                }
            }
        }
    };
    Ok(Html(
        shell(&format!("{name}/{job}"), &viewer, body).into_string(),
    ))
}

/// Trigger, pause, unpause: each the API's own request.
pub(crate) async fn act(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, job, action)): Path<(String, String, String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    viewer.check_action(&form)?;
    let base = job_path(&team, &name, &job);
    let (method, api_path) = match action.as_str() {
        "trigger" => (Method::POST, format!("{base}/builds")),
        "pause" | "unpause" => (Method::PUT, format!("{base}/{action}")),
        _ => return Err(PageError::not_found(format!("no action {action:?}"))),
    };
    act_through_api(&web, &viewer, method, &api_path, &base).await
}
