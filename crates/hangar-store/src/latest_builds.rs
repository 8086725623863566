//! Each job's newest build, for the dashboard's pipelines page: one query
//! for a whole team instead of one per job.

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

impl Store {
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
