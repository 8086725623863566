//! `/workers` (the fleet at a glance) and `/workers/{name}` (one worker's
//! lifecycle events: what happened to it, when, and why). Fleet details
//! are for operators: both need a login.

use axum::extract::{Path, Query, State};
use axum::response::Html;
use hangar_core::dashboard::duration_words;
use hangar_core::dashboard::utc_words;
use hangar_core::worker_timeline::{tone, Window};
use hangar_store::{EventRecord, WorkerRecord, WorkerRetry};
use maud::{html, Markup, PreEscaped};

use super::auth::Viewer;
use super::layout::{moment, page, seg};
use super::{PageError, PageResult};
use crate::Web;

/// How many lifecycle events a worker's page shows.
const EVENTS_SHOWN: i64 = 200;

/// A worker's condition as the pages show it, read once: the worker's own
/// report as the CLI reads it (one that does not parse is shown as it came
/// rather than hidden), and its memory and disk as bars.
struct Condition {
    summary: Markup,
    memory: Markup,
    disk: Markup,
}

fn condition(worker: &WorkerRecord) -> Condition {
    let none = || html! { "–" };
    let Some(raw) = worker.condition.as_deref() else {
        return Condition {
            summary: none(),
            memory: none(),
            disk: none(),
        };
    };
    match serde_json::from_str::<hangar_api::WorkerCondition>(raw) {
        Ok(c) => Condition {
            summary: html! { (c.summary()) },
            memory: bar(
                c.memory_used,
                c.memory_limit,
                format!(
                    "memory {} of {}",
                    hangar_core::build::human_bytes(c.memory_used),
                    hangar_core::build::human_bytes(c.memory_limit)
                ),
            ),
            disk: bar(
                c.disk_used,
                c.disk_total,
                format!(
                    "disk {} of {}",
                    hangar_core::build::human_bytes(c.disk_used),
                    hangar_core::build::human_bytes(c.disk_total)
                ),
            ),
        },
        Err(_) => Condition {
            summary: html! { (raw) },
            memory: none(),
            disk: none(),
        },
    }
}

pub(crate) async fn list_page(State(web): State<Web>, viewer: Viewer) -> PageResult {
    viewer.may_see_workers()?;
    let workers = web.store().list_workers().await?;
    let now = web.now();
    // Containers have no limit to show against: the busiest worker's
    // count is the bar's end.
    let most_containers = workers
        .iter()
        .map(|w| w.info.containers)
        .max()
        .unwrap_or(0)
        .max(1);
    let body = html! {
        div #fleet {
        h1 { "workers (" (workers.len()) ")" }
        table {
            tr {
                th { "name" } th { "state" } th { "generation" } th { "restarts" }
                th { "last restart" } th { "condition" } th { "memory" } th { "disk" }
                th { "containers" } th { "volumes" } th { "last heartbeat" }
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
                    @let c = condition(w);
                    td { (c.summary) }
                    td { (c.memory) }
                    td { (c.disk) }
                    td {
                        meter min="0" max=(most_containers) value=(w.info.containers) title="containers, against the busiest worker" { (w.info.containers) }
                        " " (w.info.containers)
                    }
                    td { (w.info.volumes) }
                    td { (duration_words(now - w.last_heartbeat_at)) " ago" }
                }
            }
        }
        }
    };
    Ok(Html(page("workers", &viewer, body).into_string()))
}

/// A bar of `used` out of `total` with the words beside it; none when the
/// worker did not report it.
fn bar(used: u64, total: u64, words: String) -> Markup {
    if total == 0 {
        return html! { "–" };
    }
    html! {
        meter min="0" max=(total) value=(used.min(total)) high=(total / 10 * 9) title=(words) { (words) }
        " " small { (used * 100 / total) "%" }
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct SpanQuery {
    #[serde(default)]
    span: Option<String>,
}

pub(crate) async fn worker_page(
    State(web): State<Web>,
    viewer: Viewer,
    Path(name): Path<String>,
    query: Result<Query<SpanQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    viewer.may_see_workers()?;
    let Query(q) = query.map_err(|e| PageError::bad_request(e.body_text()))?;
    let window = match q.span.as_deref() {
        None | Some("") => Window::Day,
        Some(s) => Window::parse(s).ok_or_else(|| {
            PageError::bad_request(format!("span: {s:?} is none of 1h, 24h, 7d, all"))
        })?,
    };
    let events = web.store().list_events(Some(&name), EVENTS_SHOWN).await?;
    let retries = web.store().worker_retries(&name, EVENTS_SHOWN).await?;
    let worker = web.store().get_worker(&name).await?;
    if worker.is_none() && events.is_empty() {
        return Err(PageError::not_found(format!("no worker {name:?}")));
    }
    let now = web.now();
    let mut history: Vec<Entry> = events
        .iter()
        .map(Entry::Event)
        .chain(retries.iter().map(Entry::Retry))
        .collect();
    history.sort_by_key(|e| std::cmp::Reverse(e.at()));
    let body = html! {
        style { (PreEscaped(TIMELINE_STYLE)) }
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
                    tr { th { "condition" } td { (condition(w).summary) } }
                    tr { th { "containers" } td { (w.info.containers) } }
                    tr { th { "volumes" } td { (w.info.volumes) } }
                    tr { th { "platform" } td { (w.info.platform) } }
                    tr { th { "tags" } td { (w.info.tags.join(", ")) } }
                    tr { th { "version" } td { (w.info.version) } }
                }
            }
            None => { p.notice { "no longer in the fleet; its events remain:" } }
        }
        h2 { "timeline" }
        (timeline(&name, &events, &retries, now, window))
        h2 { "lifecycle events and steps retried elsewhere, newest first" }
        table #history {
            tr { th { "at" } th { "what" } th { "generation" } th { "cause" } }
            @for entry in &history {
                @match entry {
                    Entry::Event(e) => tr class={"tone-" (tone(e.kind).as_str())} {
                        td { (moment(Some(e.at), now)) }
                        td { (e.kind.as_str()) }
                        td { (e.generation) }
                        td { (e.cause) }
                    },
                    Entry::Retry(r) => tr.tone-retry {
                        td { (moment(Some(r.at), now)) }
                        td { "step retried: " a href={"/builds/" (r.build_id)} { (r.build_name) } @if let Some(s) = &r.step { " step " (s) } }
                        td { "–" }
                        td { (r.line) }
                    },
                }
            }
        }
    };
    Ok(Html(
        page(&format!("worker {name}"), &viewer, body).into_string(),
    ))
}

/// One line of a worker's history.
enum Entry<'a> {
    Event(&'a EventRecord),
    Retry(&'a WorkerRetry),
}

impl Entry<'_> {
    fn at(&self) -> i64 {
        match self {
            Entry::Event(e) => e.at,
            Entry::Retry(r) => r.at,
        }
    }
}

/// The timeline's width and its two lanes' heights, in SVG units.
const WIDTH: f64 = 1000.0;
const EVENTS_Y: f64 = 30.0;
const RETRIES_Y: f64 = 70.0;

/// The worker's life as an SVG line: lifecycle events above (coloured by
/// tone, each with its kind and cause in its tooltip), the steps retried
/// elsewhere below (each a link to its build), the span's ends in UTC.
fn timeline(
    name: &str,
    events: &[EventRecord],
    retries: &[WorkerRetry],
    now: i64,
    window: Window,
) -> Markup {
    let times: Vec<i64> = events
        .iter()
        .map(|e| e.at)
        .chain(retries.iter().map(|r| r.at))
        .collect();
    let span = hangar_core::worker_timeline::span(&times, now, window);
    let x = |at| hangar_core::worker_timeline::x_of(at, span, WIDTH);
    let events = events.iter().filter(|e| e.at >= span.0);
    let retries = retries.iter().filter(|r| r.at >= span.0);
    html! {
        p #spans {
            "show: "
            @for w in Window::ALL {
                @if w == window { strong { (w.as_str()) } } @else {
                    a href={"/workers/" (seg(name)) "?span=" (w.as_str())} { (w.as_str()) }
                }
                " "
            }
        }
        svg #timeline viewBox={"-10 0 " (WIDTH + 20.0) " 100"} width="100%" height="100" role="img"
            aria-label="the worker's lifecycle events and the steps retried elsewhere over time" {
            line x1="0" y1=(EVENTS_Y) x2=(WIDTH) y2=(EVENTS_Y) class="axis" {}
            line x1="0" y1=(RETRIES_Y) x2=(WIDTH) y2=(RETRIES_Y) class="axis" {}
            text x="0" y="12" class="lane" { "lifecycle" }
            text x="0" y=(RETRIES_Y - 18.0) class="lane" { "steps retried elsewhere" }
            @for e in events.clone() {
                g data-kind=(e.kind.as_str()) class={"mark tone-" (tone(e.kind).as_str())} {
                    title { (e.kind.as_str()) " at " (utc_words(e.at)) " UTC: " (e.cause) }
                    circle cx=(x(e.at)) cy=(EVENTS_Y) r="7" {}
                }
            }
            @for r in retries {
                a href={"/builds/" (r.build_id)} {
                    g.mark.retry data-build=(r.build_id) {
                        title { (r.build_name) " at " (utc_words(r.at)) " UTC: " (r.line) }
                        rect x=(x(r.at) - 5.0) y=(RETRIES_Y - 5.0) width="10" height="10" {}
                    }
                }
            }
            text x="0" y="96" class="lane" { (utc_words(span.0)) }
            text x=(WIDTH) y="96" class="lane end" { (utc_words(span.1)) " UTC" }
        }
    }
}

/// The timeline's and the history's colours: readable on the dark page.
const TIMELINE_STYLE: &str = "
#timeline .axis{stroke:#555;stroke-width:2}
#timeline .lane{fill:#c8c8c8;font-size:12px}#timeline .lane.end{text-anchor:end}
#timeline .tone-good circle{fill:#11c560}#timeline .tone-bad circle{fill:#ff6b57}
#timeline .tone-quiet circle{fill:#9b9b9b}#timeline .retry rect{fill:#fbdb00}
#timeline .mark:hover circle,#timeline .mark:hover rect,#timeline a:focus rect{stroke:#fff;stroke-width:2}
#history tr.tone-bad td:nth-child(2){color:#ff6b57}#history tr.tone-retry td:nth-child(2){color:#fbdb00}
meter{width:6em}
";
