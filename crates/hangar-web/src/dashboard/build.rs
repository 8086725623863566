//! A build's page (`/teams/…/jobs/{job}/builds/{n}` and, for every build
//! including one-off ones, `/builds/{id}`): its steps with their states
//! and attempts, the infrastructure's doings (a worker lost, why, where
//! the step went next: the log's `infra` entries) and the log, which then
//! streams live from `/builds/{id}/log` (server-sent events).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use futures_util::Stream;
use hangar_core::build::BuildEventKind;
use hangar_store::{BuildEventRecord, BuildRecord};
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::auth::{act_through_api, ActionForm, Viewer};
use super::layout::{action_button, moment, page as shell, seg, status, took};
use super::pipeline::readable;
use super::{PageError, PageResult};
use crate::Web;

/// Events sent in one server-sent event: a fast log arrives in big
/// batches instead of one frame per line.
const BATCH: i64 = 1000;
/// The most log entries the page itself holds; the stream sends the rest.
const RENDERED: i64 = 10_000;

/// A job build anyone may read: its pipeline is exposed and its job
/// `public` (Concourse's rule).
pub(crate) fn build_is_public(e: &hangar_store::BuildExposure) -> bool {
    e.pipeline_exposed
        && serde_json::from_str::<serde_json::Value>(&e.job_config)
            .ok()
            .and_then(|c| c.get("public").and_then(|p| p.as_bool()))
            .unwrap_or(false)
}

/// Whether this viewer may read build `id`: a role in its team, or a job
/// build of an exposed pipeline whose job is `public` (Concourse's rule).
async fn may_read(web: &Web, viewer: &Viewer, id: i64) -> Result<(), PageError> {
    let team = web.store().get_build(id).await?.and_then(|b| b.team);
    if team.as_deref().is_some_and(|t| viewer.reads_team(t)) || viewer.caller.is_admin() {
        return Ok(());
    }
    let public = web
        .store()
        .build_exposure(id)
        .await?
        .is_some_and(|e| build_is_public(&e));
    if public {
        Ok(())
    } else {
        Err(PageError::login_needed())
    }
}

pub(crate) async fn page(
    State(web): State<Web>,
    viewer: Viewer,
    Path(id): Path<i64>,
) -> PageResult {
    may_read(&web, &viewer, id).await?;
    let build = web
        .store()
        .get_build(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("no build {id}")))?;
    render(&web, &viewer, build, html! {}).await
}

pub(crate) async fn job_build_page(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, job, number)): Path<(String, String, String, i64)>,
) -> PageResult {
    readable(&web, &viewer, &team, &name).await?;
    let j = web.store().job(&team, &name, &job).await?;
    let b = web
        .store()
        .job_build(j.id, number)
        .await?
        .ok_or_else(|| PageError::not_found(format!("no build {name}/{job} #{number}")))?;
    may_read(&web, &viewer, b.build.id).await?;
    let crumbs = html! {
        p {
            a href={"/teams/" (seg(&team)) "/pipelines/" (seg(&name))} { (name) } " / "
            a href={"/teams/" (seg(&team)) "/pipelines/" (seg(&name)) "/jobs/" (seg(&job))} { (job) } " / #" (number)
        }
    };
    render(&web, &viewer, b.build, crumbs).await
}

fn line_class(kind: BuildEventKind) -> &'static str {
    match kind {
        BuildEventKind::Log => "",
        BuildEventKind::Infra => "infra",
        BuildEventKind::Error => "error",
        BuildEventKind::Step | BuildEventKind::Status => "notice",
    }
}

fn log_line(e: &BuildEventRecord) -> Markup {
    html! { span class=(line_class(e.kind)) { (e.payload) @if e.kind != BuildEventKind::Log { "\n" } } }
}

async fn render(web: &Web, viewer: &Viewer, build: BuildRecord, crumbs: Markup) -> PageResult {
    let store = web.store();
    let steps = store.build_steps(build.id).await?;
    let events = store.build_events(build.id, 0, RENDERED).await?;
    let last = events.last().map_or(0, |e| e.id);
    let infra: Vec<&BuildEventRecord> = events
        .iter()
        .filter(|e| e.kind == BuildEventKind::Infra)
        .collect();
    let now = web.now();
    let body = html! {
        (crumbs)
        h1 { "build " (build.name) " " span #build-status { (status(build.status.as_str())) } }
        p {
            "created " (moment(Some(build.created_at))) " · ran " (took(build.started_at, build.finished_at, now))
            @if let Some(code) = build.exit_code { " · exit " (code) }
            @if viewer.logged_in && !build.status.is_final() {
                " " (action_button(viewer, &format!("/builds/{}/abort", build.id), "abort"))
            }
        }
        @if let Some(e) = &build.error { p.error { (e) } }
        @if build.logs_reaped_at.is_some() { p.notice { "this build's log was removed by build_log_retention" } }
        h2 { "steps" }
        table {
            tr { th { "step" } th { "name" } th { "kind" } th { "state" } th { "attempt" } th { "worker" } th { "exit" } th { "duration" } th { "error" } }
            @for s in &steps {
                tr {
                    td { (s.step_id) } td { (s.name) } td { (s.kind.as_str()) }
                    td { (status(s.state.as_str())) } td { (s.attempt) }
                    td { @if let Some(w) = &s.worker { a href={"/workers/" (seg(w))} { (w) } } @else { "–" } }
                    td { (s.exit_code.map_or("–".to_string(), |c| c.to_string())) }
                    td { (took(s.started_at, s.finished_at, now)) }
                    td { (s.error.as_deref().unwrap_or("")) }
                }
            }
        }
        @if !infra.is_empty() {
            h2 { "infrastructure" }
            ul #infra {
                @for e in &infra {
                    li.infra {
                        (moment(Some(e.at))) " step " (e.step.as_deref().unwrap_or("–")) ": " (e.payload)
                        // Where the step went: its latest attempt (the
                        // log says which worker each attempt lost).
                        @if let Some(s) = steps.iter().find(|s| Some(&s.step_id) == e.step.as_ref()) {
                            " → now attempt " (s.attempt) " on "
                            @if let Some(w) = &s.worker { a href={"/workers/" (seg(w))} { (w) } } @else { "no worker yet" }
                            " (" (s.state.as_str()) ")"
                        }
                    }
                }
            }
        }
        h2 { "log" }
        pre.log #log data-build=(build.id) data-after=(last) data-final=(build.status.is_final()) {
            @for e in &events { (log_line(e)) }
        }
        script { (PreEscaped(LIVE_LOG)) }
    };
    Ok(Html(
        shell(&format!("build {}", build.name), viewer, body).into_string(),
    ))
}

/// Appends what the stream sends as text nodes (never as HTML), keeps the
/// view at the bottom while it was there, and reloads at the end so the
/// steps table shows the final states.
const LIVE_LOG: &str = r#"
(function () {
  var log = document.getElementById("log");
  if (log.dataset.final === "true") return;
  var source = new EventSource("/builds/" + log.dataset.build + "/log?after=" + log.dataset.after);
  var classes = {infra: "infra", error: "error", step: "notice", status: "notice"};
  source.addEventListener("events", function (m) {
    var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    var fragment = document.createDocumentFragment();
    JSON.parse(m.data).forEach(function (e) {
      var span = document.createElement("span");
      if (classes[e.kind]) span.className = classes[e.kind];
      span.textContent = e.kind === "log" ? e.payload : e.payload + "\n";
      fragment.appendChild(span);
    });
    log.appendChild(fragment);
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("end", function (m) {
    source.close();
    var badge = document.querySelector('#build-status .status');
    badge.className = "status " + m.data;
    badge.textContent = m.data;
    log.dataset.final = "true";
    setTimeout(function () { location.reload(); }, 300);
  });
})();
"#;

#[derive(Deserialize)]
pub(crate) struct After {
    #[serde(default)]
    after: i64,
}

/// What the stream is at: the last event sent, and whether it ended.
struct Cursor {
    web: Web,
    id: i64,
    after: i64,
    ended: bool,
}

pub(crate) async fn log_stream(
    State(web): State<Web>,
    viewer: Viewer,
    Path(id): Path<i64>,
    headers: HeaderMap,
    query: Result<Query<After>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    may_read(&web, &viewer, id).await?;
    let Query(q) = query.map_err(|e| PageError::bad_request(e.body_text()))?;
    web.store()
        .get_build(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("no build {id}")))?;
    // A reconnecting EventSource says where it was.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(q.after)
        .max(0);
    let cursor = Cursor {
        web,
        id,
        after,
        ended: false,
    };
    Ok(Sse::new(events(cursor))
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn events(cursor: Cursor) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(cursor, |mut c| async move {
        if c.ended || c.web.stopping().is_cancelled() {
            return None;
        }
        loop {
            // Registered before reading, so an event written in between
            // wakes the wait below.
            let web = c.web.clone();
            let notified = web.build_events().notified();
            let build = c.web.store().get_build(c.id).await;
            let batch = c.web.store().build_events(c.id, c.after, BATCH).await;
            match (build, batch) {
                (Ok(Some(build)), Ok(batch)) => {
                    if let Some(last) = batch.last() {
                        c.after = last.id;
                        let data = serde_json::Value::Array(
                            batch
                                .iter()
                                .map(|e| {
                                    serde_json::json!({
                                        "id": e.id, "step": e.step,
                                        "kind": e.kind.as_str(), "payload": e.payload,
                                    })
                                })
                                .collect(),
                        );
                        let event = Event::default()
                            .event("events")
                            .id(c.after.to_string())
                            .data(data.to_string());
                        return Some((Ok(event), c));
                    }
                    if build.status.is_final() {
                        c.ended = true;
                        let event = Event::default().event("end").data(build.status.as_str());
                        return Some((Ok(event), c));
                    }
                }
                (Ok(None), _) => return None,
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(build = c.id, error = %e, "cannot read a build's log");
                }
            }
            // Another web node may be running the build: look again soon
            // even without a local wake-up. A node that is stopping ends
            // the stream (the browser reconnects to another node, from
            // its last event id) rather than hold the shutdown's drain.
            tokio::select! {
                _ = c.web.stopping().cancelled() => return None,
                _ = tokio::time::timeout(Duration::from_millis(250), notified) => {}
            }
        }
    })
}

pub(crate) async fn abort(
    State(web): State<Web>,
    viewer: Viewer,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    viewer.check_action(&form)?;
    act_through_api(
        &web,
        &viewer,
        Method::PUT,
        &format!("/builds/{id}/abort"),
        &format!("/builds/{id}"),
    )
    .await
}
