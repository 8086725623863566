//! `/workers` (the fleet at a glance) and `/workers/{name}` (one worker's
//! lifecycle events: what happened to it, when, and why). Fleet details
//! are for operators: both need a login.

use axum::extract::{Path, State};
use axum::response::Html;
use hangar_core::dashboard::duration_words;
use hangar_store::WorkerRecord;
use maud::{html, Markup};

use super::auth::Viewer;
use super::layout::{moment, page, seg};
use super::{PageError, PageResult};
use crate::Web;

/// How many lifecycle events a worker's page shows.
const EVENTS_SHOWN: i64 = 200;

fn condition(worker: &WorkerRecord) -> Markup {
    // The worker's own report, read as the CLI reads it; one that does
    // not parse is shown as it came rather than hidden.
    let Some(raw) = worker.condition.as_deref() else {
        return html! { "–" };
    };
    match serde_json::from_str::<hangar_api::WorkerCondition>(raw) {
        Ok(c) => html! { (c.summary()) },
        Err(_) => html! { (raw) },
    }
}

pub(crate) async fn list_page(State(web): State<Web>, viewer: Viewer) -> PageResult {
    viewer.may_see_workers()?;
    let workers = web.store().list_workers().await?;
    let now = web.now();
    let body = html! {
        div #fleet {
        h1 { "workers (" (workers.len()) ")" }
        table {
            tr {
                th { "name" } th { "state" } th { "generation" } th { "restarts" }
                th { "last restart" } th { "condition" } th { "containers" } th { "volumes" }
                th { "last heartbeat" }
            }
            @for w in &workers {
                tr {
                    td { a href={"/workers/" (seg(&w.info.name))} { (w.info.name) } }
                    td { span class={"status " (w.state.as_str())} { (w.state.as_str()) } }
                    td { (w.generation) }
                    td { (w.restarts) }
                    td {
                        @if let Some(r) = &w.last_restart {
                            (r.kind.as_str()) ": " (r.cause) " (" (moment(Some(r.at), now)) ")"
                        } @else { "–" }
                    }
                    td { (condition(w)) }
                    td { (w.info.containers) }
                    td { (w.info.volumes) }
                    td { (duration_words(now - w.last_heartbeat_at)) " ago" }
                }
            }
        }
        }
    };
    Ok(Html(page("workers", &viewer, body).into_string()))
}

pub(crate) async fn worker_page(
    State(web): State<Web>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> PageResult {
    viewer.may_see_workers()?;
    let events = web.store().list_events(Some(&name), EVENTS_SHOWN).await?;
    let worker = web.store().get_worker(&name).await?;
    if worker.is_none() && events.is_empty() {
        return Err(PageError::not_found(format!("no worker {name:?}")));
    }
    let now = web.now();
    let body = html! {
        h1 { "worker " (name) }
        @match &worker {
            Some(w) => {
                table {
                    tr { th { "state" } td { (w.state.as_str()) " since " (moment(Some(w.state_changed_at), now)) } }
                    tr { th { "generation" } td { (w.generation) } }
                    tr { th { "restarts" } td { (w.restarts) } }
                    tr { th { "first registered" } td { (moment(Some(w.first_registered_at), now)) } }
                    tr { th { "registered" } td { (moment(Some(w.registered_at), now)) } }
                    tr { th { "last heartbeat" } td { (moment(Some(w.last_heartbeat_at), now)) } }
                    tr { th { "condition" } td { (condition(w)) } }
                    tr { th { "containers" } td { (w.info.containers) } }
                    tr { th { "volumes" } td { (w.info.volumes) } }
                    tr { th { "platform" } td { (w.info.platform) } }
                    tr { th { "tags" } td { (w.info.tags.join(", ")) } }
                    tr { th { "version" } td { (w.info.version) } }
                }
            }
            None => { p.notice { "no longer in the fleet; its events remain:" } }
        }
        h2 { "lifecycle events, newest first (UTC)" }
        table {
            tr { th { "at" } th { "event" } th { "generation" } th { "cause" } }
            @for e in &events {
                tr {
                    td { (moment(Some(e.at), now)) }
                    td { (e.kind.as_str()) }
                    td { (e.generation) }
                    td { (e.cause) }
                }
            }
        }
    };
    Ok(Html(
        page(&format!("worker {name}"), &viewer, body).into_string(),
    ))
}
