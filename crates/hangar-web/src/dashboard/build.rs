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
use hangar_core::build::{BuildEventKind, StepState};
use hangar_core::build_log::{clock_words, line_pieces};
use hangar_store::{BuildEventRecord, BuildRecord, StepRecord};
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::auth::{act_through_api, ActionForm, Viewer};
use super::layout::{action_button, job_path, moment, page as shell, seg, status, took};
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
    render(&web, &viewer, build, html! {}, None).await
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
    let rerun = format!("{}/builds/{number}/rerun", job_path(&team, &name, &job));
    render(&web, &viewer, b.build, crumbs, Some(rerun)).await
}

fn line_class(kind: BuildEventKind) -> &'static str {
    match kind {
        BuildEventKind::Log => "",
        BuildEventKind::Infra => "infra",
        BuildEventKind::Error => "error",
        BuildEventKind::Step | BuildEventKind::Status => "notice",
    }
}

/// One entry of the log, each line it begins with its time before it
/// (shown when the timestamps box is ticked).
fn log_line(e: &BuildEventRecord, starts_line: bool) -> Markup {
    let class = line_class(e.kind);
    if e.kind != BuildEventKind::Log {
        return html! {
            @if starts_line { span.t { (clock_words(e.at)) " " } }
            span class=(class) { (e.payload) "\n" }
        };
    }
    html! {
        @for (stamp, piece) in line_pieces(&e.payload, starts_line) {
            @if stamp { span.t { (clock_words(e.at)) " " } }
            span { (piece) }
        }
    }
}

/// Whether a step's section starts open: what a person came to look at
/// (a step running, failed or cut short), not the ones that went well.
fn opens(state: StepState) -> bool {
    state != StepState::Succeeded
}

/// A step's summary line: what it is and how it went, each part in an
/// element the live script updates by its class.
fn step_summary(s: &StepRecord, now: i64) -> Markup {
    html! {
        (status(s.state.as_str()))
        " " span.kind { (s.kind.as_str()) } " " strong { (s.name) }
        " " span.attempt { @if s.attempt > 1 { "attempt " (s.attempt) } }
        " " span.where { @if let Some(w) = &s.worker { "on " a href={"/workers/" (seg(w))} { (w) } } }
        " " span.took { (took(s.started_at, s.finished_at, now)) }
        " " span.exit { @if let Some(c) = s.exit_code { "exit " (c) } }
        " " span.error { (s.error.as_deref().unwrap_or("")) }
    }
}

/// The page of `build`; `rerun` is where its rerun button posts (a job
/// build's page only).
async fn render(
    web: &Web,
    viewer: &Viewer,
    build: BuildRecord,
    crumbs: Markup,
    rerun: Option<String>,
) -> PageResult {
    let store = web.store();
    let steps = store.build_steps(build.id).await?;
    let events = store.build_events(build.id, 0, RENDERED).await?;
    let (inputs, outputs) = store.build_versions_shown(build.id).await?;
    let last = events.last().map_or(0, |e| e.id);
    let infra: Vec<&BuildEventRecord> = events
        .iter()
        .filter(|e| e.kind == BuildEventKind::Infra)
        .collect();
    let now = web.now();
    let step_ids: Vec<&str> = steps.iter().map(|s| s.step_id.as_str()).collect();
    let named: Vec<Option<&str>> = events.iter().map(|e| e.step.as_deref()).collect();
    let sections = hangar_core::build_log::sections(&step_ids, &named);
    let body = html! {
        style { (PreEscaped(STYLE)) }
        (crumbs)
        h1 { "build " (build.name) " " span #build-status { (status(build.status.as_str())) } }
        p {
            "created " (moment(Some(build.created_at), now)) " · ran " (took(build.started_at, build.finished_at, now))
            @if let Some(code) = build.exit_code { " · exit " (code) }
            @if viewer.logged_in && !build.status.is_final() {
                " " (action_button(viewer, &format!("/builds/{}/abort", build.id), "abort"))
            }
            @if let (true, Some(rerun)) = (viewer.logged_in, &rerun) {
                " " (action_button(viewer, rerun, "rerun with the same inputs"))
            }
        }
        @if let Some(e) = &build.error { p.error { (e) } }
        @if build.logs_reaped_at.is_some() { p.notice { "this build's log was removed by build_log_retention" } }
        @if !inputs.is_empty() || !outputs.is_empty() {
            table #versions {
                tr { th { "" } th { "resource" } th { "version" } }
                @for v in &inputs {
                    tr { td { "input " (v.name.as_deref().unwrap_or("")) } td { (v.resource) } td { code { (v.version) } } }
                }
                @for v in &outputs {
                    tr { td { "output" } td { (v.resource) } td { code { (v.version) } } }
                }
            }
        }
        @if !infra.is_empty() {
            h2 { "infrastructure" }
            ul #infra {
                @for e in &infra {
                    li.infra {
                        (moment(Some(e.at), now)) " step " (e.step.as_deref().unwrap_or("–")) ": " (e.payload)
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
        h2 { "steps" }
        // Ticked, every line shows when it was written (CSS only: no
        // script needed).
        input #timestamps type="checkbox";
        label for="timestamps" { " timestamps (UTC)" }
        // The page's own stream updates it (`LIVE_LOG`), not the shell's.
        div #log data-live="off" data-build=(build.id) data-after=(last) data-final=(build.status.is_final()) {
            @for section in &sections {
                @let record = steps.iter().find(|s| Some(&s.step_id) == section.step.as_ref());
                @let entries: Vec<&BuildEventRecord> = section.entries.iter().map(|&i| &events[i]).collect();
                // Any line but output's is shown whole, ending its line.
                @let starts = hangar_core::build_log::line_starts(entries.iter().map(|e| {
                    if e.kind == BuildEventKind::Log { e.payload.as_str() } else { "\n" }
                }));
                details.step data-step=(section.step.as_deref().unwrap_or("")) open[record.is_none_or(|r| opens(r.state))] {
                    summary {
                        @match (record, &section.step) {
                            (Some(r), _) => { (step_summary(r, now)) }
                            (None, Some(id)) => { "step " (id) }
                            (None, None) => { "build" }
                        }
                    }
                    pre.log {
                        @for (e, stamp) in entries.iter().zip(&starts) { (log_line(e, *stamp)) }
                    }
                }
            }
        }
        script { (PreEscaped(LIVE_LOG)) }
    };
    Ok(Html(
        shell(&format!("build {}", build.name), viewer, body).into_string(),
    ))
}

/// The build page's own look: sections, their summaries, the stamps.
const STYLE: &str = "
details.step{border:1px solid #333;margin:.4em 0}
details.step>summary{padding:.3em .6em;cursor:pointer;background:#23282d}
details.step>summary:focus-visible{outline:2px solid #7cc4ff}
details.step pre.log{margin:0;max-height:60vh}
span.t{display:none;color:#9b9b9b}
#timestamps:checked~#log span.t{display:inline}
small.abs{color:#9b9b9b}
";

/// Appends what the stream sends into its step's section, as text nodes
/// (never as HTML), with a stamp where a line begins; keeps a section at
/// the bottom while it was there; updates each step's summary as the
/// steps change (a new step gets its section), and reloads at the end so
/// everything shows its final state.
const LIVE_LOG: &str = r#"
(function () {
  var log = document.getElementById("log");
  if (log.dataset.final === "true") return;
  var source = new EventSource("/builds/" + log.dataset.build + "/log?after=" + log.dataset.after);
  var classes = {infra: "infra", error: "error", step: "notice", status: "notice"};
  function section(step) {
    var id = step || "";
    var found = Array.prototype.find.call(log.querySelectorAll("details.step"),
      function (d) { return d.dataset.step === id; });
    if (found) return found;
    var d = document.createElement("details");
    d.className = "step"; d.dataset.step = id; d.open = true;
    var s = document.createElement("summary");
    s.textContent = id ? "step " + id : "build";
    var pre = document.createElement("pre"); pre.className = "log";
    d.appendChild(s); d.appendChild(pre); log.appendChild(d);
    return d;
  }
  function lineEnded(pre) {
    var last = pre.lastChild;
    return !last || last.textContent.slice(-1) === "\n";
  }
  function clock(ms) { return new Date(ms).toISOString().slice(11, 19) + " "; }
  source.addEventListener("events", function (m) {
    JSON.parse(m.data).forEach(function (e) {
      var pre = section(e.step).querySelector("pre");
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      var text = e.kind === "log" ? e.payload : e.payload + "\n";
      // Each line that begins here gets its stamp.
      text.split(/(?<=\n)/).forEach(function (piece) {
        if (!piece) return;
        if (lineEnded(pre)) {
          var t = document.createElement("span");
          t.className = "t"; t.textContent = clock(e.at);
          pre.appendChild(t);
        }
        var span = document.createElement("span");
        if (classes[e.kind]) span.className = classes[e.kind];
        span.textContent = piece;
        pre.appendChild(span);
      });
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    });
  });
  source.addEventListener("steps", function (m) {
    JSON.parse(m.data).forEach(function (s) {
      var summary = section(s.id).querySelector("summary");
      if (!summary.querySelector(".status")) {
        summary.textContent = "";
        ["status", "kind", "name", "attempt", "where", "took", "exit", "error"].forEach(function (c) {
          var part = document.createElement(c === "name" ? "strong" : "span");
          part.className = c; summary.appendChild(part); summary.appendChild(document.createTextNode(" "));
        });
      }
      var badge = summary.querySelector(".status");
      badge.className = "status " + s.state; badge.textContent = s.state;
      summary.querySelector(".kind").textContent = s.kind;
      summary.querySelector("strong").textContent = s.name;
      summary.querySelector(".attempt").textContent = s.attempt > 1 ? "attempt " + s.attempt : "";
      summary.querySelector(".where").textContent = s.worker ? "on " + s.worker : "";
      summary.querySelector(".exit").textContent = s.exit_code === null ? "" : "exit " + s.exit_code;
      summary.querySelector(".error").textContent = s.error || "";
    });
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

/// What the stream is at: the last event sent, the steps as last sent,
/// and whether it ended.
struct Cursor {
    web: Web,
    id: i64,
    after: i64,
    steps: String,
    ended: bool,
}

/// The steps as the page's script reads them.
fn steps_json(steps: &[StepRecord]) -> String {
    serde_json::Value::Array(
        steps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.step_id, "name": s.name, "kind": s.kind.as_str(),
                    "state": s.state.as_str(), "attempt": s.attempt, "worker": s.worker,
                    "exit_code": s.exit_code, "error": s.error,
                })
            })
            .collect(),
    )
    .to_string()
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
        steps: String::new(),
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
            let steps = c.web.store().build_steps(c.id).await;
            match (build, batch, steps) {
                (Ok(Some(build)), Ok(batch), Ok(steps)) => {
                    if let Some(last) = batch.last() {
                        c.after = last.id;
                        let data = serde_json::Value::Array(
                            batch
                                .iter()
                                .map(|e| {
                                    serde_json::json!({
                                        "id": e.id, "step": e.step, "at": e.at,
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
                    // The steps as they change (a state, an attempt, a
                    // worker), after the lines that led there.
                    let steps = steps_json(&steps);
                    if steps != c.steps {
                        c.steps = steps;
                        let event = Event::default().event("steps").data(c.steps.clone());
                        return Some((Ok(event), c));
                    }
                    if build.status.is_final() {
                        c.ended = true;
                        let event = Event::default().event("end").data(build.status.as_str());
                        return Some((Ok(event), c));
                    }
                }
                (Ok(None), _, _) => return None,
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
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

/// Reruns a job build with its inputs (the API's rerun), back to the
/// job's page, where the rerun is the newest build.
pub(crate) async fn rerun(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, job, number)): Path<(String, String, String, i64)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    viewer.check_action(&form)?;
    let base = job_path(&team, &name, &job);
    act_through_api(
        &web,
        &viewer,
        Method::POST,
        &format!("{base}/builds/{number}"),
        &base,
    )
    .await
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
