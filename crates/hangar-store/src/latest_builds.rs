//! The dashboard's pipelines page in two queries for a whole team: every
//! active job, and each job's newest build (instead of queries per
//! pipeline and per job).

use std::collections::HashMap;

use hangar_core::build::BuildStatus;
use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::{decode, StoreError};

/// A job's newest build, as the dashboard colours the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestBuild {
    pub job_id: i64,
    pub number: i64,
    pub build_id: i64,
    pub status: BuildStatus,
    pub started_at: Option<UnixMillis>,
    pub finished_at: Option<UnixMillis>,
}

/// An active job as the pipelines page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    pub id: i64,
    pub pipeline_id: i64,
    pub name: String,
    pub paused: bool,
}

impl Store {
    /// Every active job of the team's pipelines, each pipeline's in config
    /// order (as [`Store::jobs`] lists them).
    pub async fn team_jobs(&self, team: &str) -> Result<Vec<JobSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT j.id, j.pipeline_id, j.name, j.paused FROM jobs j \
             JOIN pipelines p ON p.id = j.pipeline_id JOIN teams t ON t.id = p.team_id \
             WHERE t.name = $1 AND j.active = 1 ORDER BY j.pipeline_id, j.config_order, j.id",
        )
        .bind(team)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(JobSummary {
                    id: r.try_get("id")?,
                    pipeline_id: r.try_get("pipeline_id")?,
                    name: r.try_get("name")?,
                    paused: r.try_get::<i64, _>("paused")? != 0,
                })
            })
            .collect()
    }

    /// The newest build of every job of the team's pipelines, by job id.
    pub async fn latest_job_builds(
        &self,
        team: &str,
    ) -> Result<HashMap<i64, LatestBuild>, StoreError> {
        let rows = sqlx::query(
            "SELECT jb.job_id, jb.build_number, b.id, b.status, b.started_at, b.finished_at \
             FROM job_builds jb JOIN builds b ON b.id = jb.build_id \
             JOIN jobs j ON j.id = jb.job_id JOIN pipelines p ON p.id = j.pipeline_id \
             JOIN teams t ON t.id = p.team_id \
             WHERE t.name = $1 AND jb.build_number = \
               (SELECT MAX(newer.build_number) FROM job_builds newer WHERE newer.job_id = jb.job_id)",
        )
        .bind(team)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let latest = LatestBuild {
                    job_id: r.try_get("job_id")?,
                    number: r.try_get("build_number")?,
                    build_id: r.try_get("id")?,
                    status: decode(r, "builds", &["id"], "status")?,
                    started_at: r.try_get("started_at")?,
                    finished_at: r.try_get("finished_at")?,
                };
                Ok((latest.job_id, latest))
            })
            .collect()
    }
}
