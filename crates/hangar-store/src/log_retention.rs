//! What `build_log_retention` needs from the database: each active job's
//! config, a job's builds whose logs are still there, and the reaping of
//! one build's log (its events), marked on the build.

use hangar_core::build::BuildStatus;
use hangar_core::pipeline::log_retention::RetainedBuild;
use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::decode;
use crate::error::StoreError;

impl Store {
    /// Every active job's id and config (JSON), for the log collector.
    pub async fn active_job_configs(&self) -> Result<Vec<(i64, String)>, StoreError> {
        sqlx::query("SELECT id, config FROM jobs WHERE active = 1 ORDER BY id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("config")?)))
            .collect()
    }

    /// The job's builds whose logs were not reaped, newest first.
    pub async fn builds_with_logs(&self, job_id: i64) -> Result<Vec<RetainedBuild>, StoreError> {
        sqlx::query(
            "SELECT b.id AS id, b.status AS status, b.finished_at AS finished_at \
             FROM job_builds jb JOIN builds b ON b.id = jb.build_id \
             WHERE jb.job_id = $1 AND b.logs_reaped_at IS NULL \
             ORDER BY jb.build_number DESC",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            let status: BuildStatus = decode(r, "builds", &["id"], "status")?;
            Ok(RetainedBuild {
                id: r.try_get("id")?,
                status,
                finished_at: r.try_get("finished_at")?,
            })
        })
        .collect()
    }

    /// Deletes a finished build's log and records when; false (nothing
    /// changed) for a build not finished or already reaped, so a build
    /// that runs again (resumed) never loses its log.
    pub async fn reap_build_logs(
        &self,
        build_id: i64,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let marked = sqlx::query(
            "UPDATE builds SET logs_reaped_at = $2 WHERE id = $1 AND logs_reaped_at IS NULL \
             AND status IN ('succeeded', 'failed', 'errored', 'aborted')",
        )
        .bind(build_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked == 1 {
            sqlx::query("DELETE FROM build_events WHERE build_id = $1")
                .bind(build_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(marked == 1)
    }
}
