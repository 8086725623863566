//! `/teams/{team}/pipelines/{name}`: the pipeline's jobs and resources as
//! a graph (`graph.rs`; one group at a time, as tabs, when the config has
//! groups), its resources with their newest versions, pin, last check and
//! a failing check's error, and its paused/exposed state.

use std::collections::{HashMap, HashSet};

use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{Html, Response};
use axum::Form;
use hangar_core::dashboard::graph::{layout, NodeKind};
use hangar_core::dashboard::shorten;
use hangar_core::pipeline::{parse_pipeline_value, CheckEvery};
use hangar_store::{JobBuilds, PipelineRecord, StoreError, VersionPage};
use maud::html;
use serde::Deserialize;

use super::auth::{act_through_api, segment, ActionForm, Viewer};
use super::graph::{svg, JobState, ResourceState};
use super::layout::{action_button, moment, page as shell, seg, status};
use super::{PageError, PageResult};
use crate::Web;

/// How many versions of each resource the page lists.
const VERSIONS_SHOWN: i64 = 5;
/// How much of a failing check's error the page shows, in characters.
const ERROR_SHOWN: usize = 400;

/// The pipeline, if this viewer may read it: a role in its team, or exposed.
pub(crate) async fn readable(
    web: &Web,
    viewer: &Viewer,
    team: &str,
    name: &str,
) -> Result<PipelineRecord, PageError> {
    let found = web.store().pipeline(team, name).await;
    if viewer.reads_team(team) {
        return Ok(found?);
    }
    match found {
        Ok(p) if web.store().exposed_pipeline_ids().await?.contains(&p.id) => Ok(p),
        // A private pipeline reads as a missing one to whoever may not see it.
        Ok(_) | Err(StoreError::NotFound(_)) if viewer.logged_in => Err(PageError::not_found(
            format!("pipeline {team}/{name} not found"),
        )),
        Ok(_) | Err(StoreError::NotFound(_)) => Err(PageError::login_needed()),
        Err(e) => Err(e.into()),
    }
}

/// `?group=NAME`: the tab shown, of a pipeline with groups.
#[derive(Deserialize)]
pub(crate) struct GroupQuery {
    group: Option<String>,
}

pub(crate) async fn page(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name)): Path<(String, String)>,
    Query(query): Query<GroupQuery>,
) -> PageResult {
    let p = readable(&web, &viewer, &team, &name).await?;
    let store = web.store();
    let now = web.now();
    let (_, config) = store.pipeline_config(&team, &name, None).await?;
    let config = parse_pipeline_value(&config)
        .map_err(|e| StoreError::Corrupt(format!("the config of pipeline {name}: {e}")))?
        .config;
    // The first group unless one is asked for; a group the pipeline does
    // not have is a missing page, not silently another tab.
    let group = match (&query.group, config.groups.first()) {
        (None, first) => first,
        (Some(asked), _) => Some(config.groups.iter().find(|g| &g.name == asked).ok_or_else(
            || PageError::not_found(format!("pipeline {name} has no group {asked:?}")),
        )?),
    };
    let graph = layout(&config, group);
    let builds = store.job_build_states(&team).await?;
    let jobs = store.jobs(&team, &name, false).await?;
    let job_states: HashMap<&str, JobState> = jobs
        .iter()
        .map(|j| {
            let b = builds.get(&j.id);
            let shown = b.map(JobBuilds::shown);
            let state = JobState {
                status: shown.map_or("none", |b| b.status.as_str()),
                number: shown.map(|b| b.number),
                running: b.and_then(|b| b.running.as_ref()).map(|r| r.number),
                paused: j.paused,
            };
            (j.name.as_str(), state)
        })
        .collect();
    let checks = store.pipeline_check_statuses(p.id).await?;
    let api_pins = store.api_pins(p.id).await?;
    let in_graph: HashSet<&str> = graph
        .nodes
        .iter()
        .filter(|n| n.kind != NodeKind::Job)
        .map(|n| n.name.as_str())
        .collect();
    let mut resources = Vec::new();
    for r in store.resources(&team, &name).await? {
        if !in_graph.contains(r.name.as_str()) {
            continue;
        }
        let page = VersionPage {
            limit: VERSIONS_SHOWN,
            ..VersionPage::default()
        };
        let versions = store.resource_versions(&team, &name, &r.name, page).await?;
        resources.push((r, versions));
    }
    let resource_states: HashMap<&str, ResourceState> = resources
        .iter()
        .map(|(r, _)| {
            let check = r.scope_id.and_then(|s| checks.get(&s));
            let state = ResourceState {
                resource_type: r.resource_type.clone(),
                pinned: r
                    .pinned
                    .clone()
                    .or_else(|| api_pins.get(&r.id).map(|(v, _)| v.clone())),
                check_error: check.and_then(|c| c.error.clone()),
                checks_off: matches!(
                    config
                        .resource(&r.name)
                        .and_then(|c| c.check_every.as_ref()),
                    Some(CheckEvery::Never)
                ),
            };
            (r.name.as_str(), state)
        })
        .collect();
    let exposed = store.exposed_pipeline_ids().await?.contains(&p.id);
    let base = format!("/teams/{}/pipelines/{}", seg(&team), seg(&name));
    let body = html! {
        h1 {
            "pipeline " (name)
            @if p.paused { " " (status("paused")) }
            @if exposed { " " span.notice { "(exposed: readable without login)" } }
        }
        @if viewer.logged_in {
            p {
                @if p.paused { (action_button(&viewer, &format!("{base}/unpause"), "unpause pipeline")) }
                @else { (action_button(&viewer, &format!("{base}/pause"), "pause pipeline")) }
                " "
                @if exposed { (action_button(&viewer, &format!("{base}/hide"), "hide")) }
                @else { (action_button(&viewer, &format!("{base}/expose"), "expose")) }
            }
        }
        @if !config.groups.is_empty() {
            nav.tabs aria-label="groups" {
                @for g in &config.groups {
                    @let current = group.is_some_and(|shown| shown.name == g.name);
                    a href={(base) "?group=" (seg(&g.name))} aria-current=[current.then_some("page")] {
                        (shorten(&g.name, 40))
                    }
                }
            }
        }
        h2 { "jobs and resources" }
        @if graph.nodes.is_empty() { p.notice { "no jobs" } }
        @else { (svg(&graph, &base, &job_states, &resource_states)) }
        p.notice {
            "Dashed edges do not trigger; an edge between jobs carries versions that passed the first."
        }
        h2 { "resources" }
        table {
            tr { th { "resource" } th { "type" } th { "pinned" } th { "last check" } th { "newest versions" } }
            @for (r, versions) in &resources {
                @let check = r.scope_id.and_then(|s| checks.get(&s));
                tr {
                    td { a href={(base) "/resources/" (seg(&r.name))} { (r.name) } }
                    td { (r.resource_type) }
                    td {
                        @match (r.pinned.as_deref(), api_pins.get(&r.id)) {
                            (Some(pin), _) => { (pin) " (config)" }
                            (None, Some((pin, comment))) => {
                                (pin) " (pin-resource)"
                                @if let Some(c) = comment { div.pin-comment { "“" (c) "”" } }
                            }
                            (None, None) => { "–" }
                        }
                    }
                    td.check {
                        @match check.and_then(|c| c.last_finished_at) {
                            Some(at) => { (moment(Some(at), now)) }
                            None => { span.notice { "not checked yet" } }
                        }
                        @if let Some(error) = check.and_then(|c| c.error.as_deref()) {
                            // The start of it: the whole is on the resource's page.
                            pre.check-error { "check failed: " (shorten(error, ERROR_SHOWN)) }
                            @if error.chars().count() > ERROR_SHOWN {
                                a href={(base) "/resources/" (seg(&r.name))} { "the whole error" }
                            }
                        }
                        @if let Some(why) = check.and_then(|c| c.waiting_reason.as_deref()) {
                            div.check-waiting { "check waiting: " (why) }
                        }
                    }
                    td {
                        @if versions.is_empty() { span.notice { "no versions yet" } }
                        @for v in versions {
                            div { code { (v.version) } @if !v.enabled { " (disabled)" } }
                        }
                    }
                }
            }
        }
    };
    Ok(Html(
        shell(&format!("pipeline {name}"), &viewer, body).into_string(),
    ))
}

/// The pipeline's buttons, each an API request as the viewer.
pub(crate) async fn act(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name, action)): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    viewer.check_action(&form)?;
    let back = format!("/teams/{}/pipelines/{}", segment(&team), segment(&name));
    match action.as_str() {
        "pause" | "unpause" | "expose" | "hide" => {
            let path = format!(
                "/teams/{}/pipelines/{}/{action}",
                segment(&team),
                segment(&name)
            );
            act_through_api(&web, &viewer, Method::PUT, &path, &back).await
        }
        _ => Err(PageError::not_found(format!("no action {action:?}"))),
    }
}
