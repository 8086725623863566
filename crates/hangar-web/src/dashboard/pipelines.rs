//! `/`: every pipeline of every team with its jobs' latest status, team
//! by team; anonymous visitors see the exposed pipelines only.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Html;
use hangar_store::JobSummary;
use maud::html;

use super::auth::Viewer;
use super::layout::{page as shell, seg, status};
use super::PageResult;
use crate::Web;

pub(crate) async fn page(State(web): State<Web>, viewer: Viewer) -> PageResult {
    let store = web.store();
    let exposed = store.exposed_pipeline_ids().await?;
    let pipelines: Vec<_> = store
        .all_pipelines()
        .await?
        .into_iter()
        .filter(|p| viewer.reads_team(&p.team) || exposed.contains(&p.id))
        // Archived pipelines are off the dashboard, as in Concourse.
        .filter(|p| !p.archived)
        .collect();
    // Two queries per team shown (its jobs, their newest builds; and two
    // per job whose newest build has not ended), keyed by ids that are
    // unique across teams.
    let mut teams: Vec<&str> = pipelines.iter().map(|p| p.team.as_str()).collect();
    teams.dedup();
    let mut latest = HashMap::new();
    let mut jobs_of: HashMap<i64, Vec<JobSummary>> = HashMap::new();
    for team in &teams {
        latest.extend(store.job_build_states(team).await?);
        for job in store.team_jobs(team).await? {
            jobs_of.entry(job.pipeline_id).or_default().push(job);
        }
    }
    // An instance group's pipelines together, where its first one was set.
    let mut group_at: HashMap<(&str, &str), i64> = HashMap::new();
    for p in &pipelines {
        group_at.entry((&p.team, &p.name)).or_insert(p.id);
    }
    let mut ordered: Vec<_> = pipelines.iter().collect();
    ordered.sort_by_key(|p| {
        (
            p.team.as_str(),
            group_at[&(p.team.as_str(), p.name.as_str())],
            p.id,
        )
    });
    let rows: Vec<_> = ordered
        .into_iter()
        .map(|p| {
            let jobs = jobs_of.remove(&p.id).unwrap_or_default();
            (p, jobs)
        })
        .collect();
    let several_teams = teams.len() > 1 || teams.first().is_some_and(|t| *t != "main");
    let body = html! {
        h1 { "pipelines" }
        @if rows.is_empty() {
            p.notice {
                @if viewer.logged_in { "no pipelines yet: set one with hangar set-pipeline" }
                @else { "no exposed pipelines: log in to see the others" }
            }
        }
        @for (i, (p, jobs)) in rows.iter().enumerate() {
            @if several_teams && (i == 0 || rows[i - 1].0.team != p.team) {
                h2.team { "team " (p.team) }
            }
            @let reference = p.reference();
            @let base = format!("/teams/{}/pipelines/{}", seg(&p.team), seg(&reference));
            section.pipeline {
                h2 {
                    a href=(base) { (p.name) }
                    @if let Some(vars) = reference.strip_prefix(&format!("{}/", p.name)) {
                        " " span.instance-vars title="instance vars" { (vars) }
                    }
                    @if p.paused { " " (status("paused")) }
                    @if exposed.contains(&p.id) { " " span.notice { "(exposed)" } }
                }
                table {
                    @for j in jobs {
                        tr {
                            td { a href={(base) "/jobs/" (seg(&j.name))} { (j.name) } }
                            td {
                                @if j.paused { (status("paused")) " " }
                                @match latest.get(&j.id) {
                                    Some(b) => {
                                        // The build that last ended, as the
                                        // graph colours the job, then the
                                        // one running if another.
                                        @let shown = b.shown();
                                        a href={(base) "/jobs/" (seg(&j.name)) "/builds/" (shown.number)} {
                                            (status(shown.status.as_str())) " #" (shown.number)
                                        }
                                        @if let Some(r) = b.running.as_ref().filter(|r| r.number != shown.number) {
                                            " "
                                            a href={(base) "/jobs/" (seg(&j.name)) "/builds/" (r.number)} {
                                                (status(r.status.as_str())) " #" (r.number)
                                            }
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
