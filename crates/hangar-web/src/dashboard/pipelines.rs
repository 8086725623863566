//! `/`: every pipeline of the `main` team with its jobs' latest status;
//! anonymous visitors see the exposed pipelines only.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Html;
use hangar_store::JobSummary;
use maud::html;

use super::auth::Viewer;
use super::layout::{page as shell, seg, status};
use super::PageResult;
use crate::Web;

/// The team the dashboard shows (hangar has one team today).
pub(crate) const TEAM: &str = "main";

pub(crate) async fn page(State(web): State<Web>, viewer: Viewer) -> PageResult {
    let store = web.store();
    let exposed = store.exposed_pipeline_ids().await?;
    let pipelines: Vec<_> = store
        .pipelines(TEAM)
        .await?
        .into_iter()
        .filter(|p| viewer.logged_in || exposed.contains(&p.id))
        .collect();
    let latest = store.latest_job_builds(TEAM).await?;
    let mut jobs_of: HashMap<i64, Vec<JobSummary>> = HashMap::new();
    for job in store.team_jobs(TEAM).await? {
        jobs_of.entry(job.pipeline_id).or_default().push(job);
    }
    let rows: Vec<_> = pipelines
        .into_iter()
        .map(|p| {
            let jobs = jobs_of.remove(&p.id).unwrap_or_default();
            (p, jobs)
        })
        .collect();
    let body = html! {
        h1 { "pipelines" }
        @if rows.is_empty() {
            p.notice {
                @if viewer.logged_in { "no pipelines yet: set one with hangar set-pipeline" }
                @else { "no exposed pipelines: log in to see the others" }
            }
        }
        @for (p, jobs) in &rows {
            section.pipeline {
                h2 {
                    a href={"/teams/" (TEAM) "/pipelines/" (seg(&p.name))} { (p.name) }
                    @if p.paused { " " (status("paused")) }
                    @if exposed.contains(&p.id) { " " span.notice { "(exposed)" } }
                }
                table {
                    @for j in jobs {
                        tr {
                            td { a href={"/teams/" (TEAM) "/pipelines/" (seg(&p.name)) "/jobs/" (seg(&j.name))} { (j.name) } }
                            td {
                                @if j.paused { (status("paused")) " " }
                                @match latest.get(&j.id) {
                                    Some(b) => {
                                        a href={"/teams/" (TEAM) "/pipelines/" (seg(&p.name)) "/jobs/" (seg(&j.name)) "/builds/" (b.number)} {
                                            (status(b.status.as_str())) " #" (b.number)
                                        }
                                    }
                                    None => { (status("none")) " no builds" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(Html(shell("pipelines", &viewer, body).into_string()))
}
