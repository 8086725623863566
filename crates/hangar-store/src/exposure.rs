//! Which pipelines are exposed: readable on the dashboard without the
//! admin token, as `fly expose-pipeline` makes them in Concourse.

use crate::db::Store;
use crate::error::StoreError;

impl Store {
    /// Exposes or hides a pipeline (by id); doing it twice changes nothing.
    pub async fn set_pipeline_exposed(
        &self,
        pipeline_id: i64,
        exposed: bool,
    ) -> Result<(), StoreError> {
        let sql = if exposed {
            "INSERT INTO exposed_pipelines (pipeline_id) VALUES ($1) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM exposed_pipelines WHERE pipeline_id = $1"
        };
        sqlx::query(sql)
            .bind(pipeline_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The ids of every exposed pipeline.
    pub async fn exposed_pipeline_ids(&self) -> Result<Vec<i64>, StoreError> {
        let rows: Vec<(i64,)> = sqlx::query_as("SELECT pipeline_id FROM exposed_pipelines")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

/// Who may read a job build without logging in, as Concourse decides it:
/// its pipeline is exposed and its job says `public: true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildExposure {
    pub pipeline_exposed: bool,
    /// The job's config as JSON (its `public` flag is read from it).
    pub job_config: String,
}

impl Store {
    /// `None` for a build that is not a job's (a one-off build).
    pub async fn build_exposure(&self, build_id: i64) -> Result<Option<BuildExposure>, StoreError> {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT j.config, (SELECT COUNT(*) FROM exposed_pipelines e \
               WHERE e.pipeline_id = j.pipeline_id) AS exposed \
             FROM job_builds jb JOIN jobs j ON j.id = jb.job_id WHERE jb.build_id = $1",
        )
        .bind(build_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(job_config, exposed)| BuildExposure {
            pipeline_exposed: exposed > 0,
            job_config,
        }))
    }
}
