//! `/builds`: the newest builds of every kind (job builds and one-off
//! `execute` builds), as Concourse's builds page lists them. Needs a
//! login: one-off builds belong to no exposed pipeline.

use axum::extract::State;
use axum::response::Html;
use maud::html;

use super::auth::Viewer;
use super::layout::{moment, page as shell, status, took};
use super::{PageError, PageResult};
use crate::Web;

/// How many builds the page lists.
const BUILDS_SHOWN: i64 = 100;

pub(crate) async fn page(State(web): State<Web>, viewer: Viewer) -> PageResult {
    if !viewer.logged_in {
        return Err(PageError::login_needed());
    }
    // The builds of the teams the viewer has a role on.
    let builds: Vec<_> = web
        .store()
        .list_builds(BUILDS_SHOWN)
        .await?
        .into_iter()
        .filter(|b| {
            viewer.caller.is_admin() || b.team.as_deref().is_some_and(|t| viewer.reads_team(t))
        })
        .collect();
    let now = web.now();
    let body = html! {
        h1 { "builds, newest first" }
        @if builds.is_empty() { p.notice { "no builds yet" } }
        table {
            tr { th { "id" } th { "build" } th { "status" } th { "created" } th { "duration" } }
            @for b in &builds {
                tr {
                    td { a href={"/builds/" (b.id)} { (b.id) } }
                    td { (b.name) }
                    td { (status(b.status.as_str())) }
                    td { (moment(Some(b.created_at), now)) }
                    td { (took(b.started_at, b.finished_at, now)) }
                }
            }
        }
    };
    Ok(Html(shell("builds", &viewer, body).into_string()))
}
