//! `/teams/{team}/pipelines/{name}`: the pipeline's jobs as a graph
//! (columns by `passed` depth, each job with its gets and puts), its
//! resources with their newest versions, last check and a failing
//! check's error, and its paused/exposed state.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{Html, Response};
use axum::Form;
use hangar_core::dashboard::job_columns;
use hangar_core::pipeline::parse_pipeline_value;
use hangar_store::{PipelineRecord, StoreError, VersionPage};
use maud::html;

use super::auth::{act_through_api, segment, ActionForm, Viewer};
use super::layout::{action_button, page as shell, seg, status};
use super::{PageError, PageResult};
use crate::Web;

/// How many versions of each resource the page lists.
const VERSIONS_SHOWN: i64 = 5;

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

pub(crate) async fn page(
    State(web): State<Web>,
    viewer: Viewer,
    Path((team, name)): Path<(String, String)>,
) -> PageResult {
    let p = readable(&web, &viewer, &team, &name).await?;
    let store = web.store();
    let (_, config) = store.pipeline_config(&team, &name, None).await?;
    let config = parse_pipeline_value(&config)
        .map_err(|e| StoreError::Corrupt(format!("the config of pipeline {name}: {e}")))?
        .config;
    let latest = store.latest_job_builds(&team).await?;
    let jobs = store.jobs(&team, &name, false).await?;
    let names: Vec<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
    let passed: BTreeMap<String, Vec<String>> = config
        .jobs
        .iter()
        .map(|j| {
            let upstream = j
                .inputs()
                .iter()
                .flat_map(|g| config.passed_jobs(g))
                .map(str::to_string)
                .collect();
            (j.name.clone(), upstream)
        })
        .collect();
    let checks = store.pipeline_check_statuses(p.id).await?;
    let api_pins = store.api_pins(p.id).await?;
    let mut resources = Vec::new();
    for r in store.resources(&team, &name).await? {
        let page = VersionPage {
            limit: VERSIONS_SHOWN,
            ..VersionPage::default()
        };
        let versions = store.resource_versions(&team, &name, &r.name, page).await?;
        resources.push((r, versions));
    }
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
        h2 { "jobs" }
        div.graph {
            @for column in job_columns(&names, &passed) {
                div.column {
                    @for job_name in &column {
                        @let record = jobs.iter().find(|j| &j.name == job_name);
                        @let word = match record.and_then(|j| latest.get(&j.id)) {
                            Some(b) => b.status.as_str(),
                            None => "none",
                        };
                        div class={"job " (word)} {
                            a href={(base) "/jobs/" (seg(job_name))} { (job_name) }
                            @if record.is_some_and(|j| j.paused) { " (paused)" }
                            @if let Some(job) = config.job(job_name) {
                                ul {
                                    @for get in job.inputs() {
                                        li {
                                            "get " (get.resource.as_deref().unwrap_or(&get.name))
                                            @let up = config.passed_jobs(get);
                                            @if !up.is_empty() { " ← passed " (up.join(", ")) }
                                        }
                                    }
                                    @for put in job.outputs() {
                                        li { "put " (put.resource.as_deref().unwrap_or(&put.name)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "resources" }
        table {
            tr { th { "resource" } th { "type" } th { "pinned" } th { "last check" } th { "newest versions" } }
            @for (r, versions) in &resources {
                @let check = r.scope_id.and_then(|s| checks.get(&s));
                tr {
                    td { (r.name) }
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
                            Some(at) => { (hangar_core::dashboard::utc_words(at)) }
                            None => { span.notice { "not checked yet" } }
                        }
                        @if let Some(error) = check.and_then(|c| c.error.as_deref()) {
                            pre.check-error { "check failed: " (error) }
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
