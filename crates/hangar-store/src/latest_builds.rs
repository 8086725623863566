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

/// What the dashboard shows of a job, as Concourse does: its colour is
/// the build that last ended (`finished_build`), and it is marked running
/// while any build of it runs, a newer one pending or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobBuilds {
    pub newest: LatestBuild,
    pub finished: Option<LatestBuild>,
    /// The newest build that has started and not ended.
    pub running: Option<LatestBuild>,
}

impl JobBuilds {
    /// The build whose status the job is shown in: the last that ended,
    /// else the one running, else the newest (pending).
    pub fn shown(&self) -> &LatestBuild {
        self.finished
            .as_ref()
            .or(self.running.as_ref())
            .unwrap_or(&self.newest)
    }
}

/// A newest build of a job among the builds in some states.
enum Among {
    Ended,
    Started,
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
                let latest = latest_build(r)?;
                Ok((latest.job_id, latest))
            })
            .collect()
    }

    /// [`Store::latest_job_builds`], and for a job whose newest build has
    /// not ended, the build that last ended and the newest running: two
    /// lookups more per such job, each the first match of the job's
    /// builds walked newest first.
    pub async fn job_build_states(
        &self,
        team: &str,
    ) -> Result<HashMap<i64, JobBuilds>, StoreError> {
        let latest = self.latest_job_builds(team).await?;
        let mut out = HashMap::with_capacity(latest.len());
        for (job_id, newest) in latest {
            let (finished, running) = match newest.status {
                status if status.is_final() => (Some(newest.clone()), None),
                BuildStatus::Started => (
                    self.newest_job_build(job_id, Among::Ended).await?,
                    Some(newest.clone()),
                ),
                _ => (
                    self.newest_job_build(job_id, Among::Ended).await?,
                    self.newest_job_build(job_id, Among::Started).await?,
                ),
            };
            out.insert(
                job_id,
                JobBuilds {
                    newest,
                    finished,
                    running,
                },
            );
        }
        Ok(out)
    }

    async fn newest_job_build(
        &self,
        job_id: i64,
        among: Among,
    ) -> Result<Option<LatestBuild>, StoreError> {
        let sql = match among {
            Among::Ended => {
                "SELECT jb.job_id, jb.build_number, b.id, b.status, b.started_at, b.finished_at \
                 FROM job_builds jb JOIN builds b ON b.id = jb.build_id \
                 WHERE jb.job_id = $1 AND b.status IN ('succeeded', 'failed', 'errored', 'aborted') \
                 ORDER BY jb.build_number DESC LIMIT 1"
            }
            Among::Started => {
                "SELECT jb.job_id, jb.build_number, b.id, b.status, b.started_at, b.finished_at \
                 FROM job_builds jb JOIN builds b ON b.id = jb.build_id \
                 WHERE jb.job_id = $1 AND b.status = 'started' \
                 ORDER BY jb.build_number DESC LIMIT 1"
            }
        };
        let row = sqlx::query(sql)
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(latest_build).transpose()
    }
}

/// A row of `job_builds` joined to `builds`, as both reads select it.
fn latest_build(r: &sqlx::any::AnyRow) -> Result<LatestBuild, StoreError> {
    Ok(LatestBuild {
        job_id: r.try_get("job_id")?,
        number: r.try_get("build_number")?,
        build_id: r.try_get("id")?,
        status: decode(r, "builds", &["id"], "status")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
    })
}
