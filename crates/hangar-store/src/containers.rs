//! Container rows: which containers web asked which worker to run, for
//! which build step.

use hangar_core::containers::{
    plan_container_report, ContainerReportPlan, ContainerRow, ContainerState,
};
use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::{decode, StoreError};
use crate::volumes::{check_report_generation, placeholders};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRecord {
    pub handle: String,
    pub worker: String,
    pub state: ContainerState,
    pub build_id: Option<i64>,
    pub step_id: Option<String>,
    pub created_at: UnixMillis,
    pub missing_since: Option<UnixMillis>,
    /// A failed task step's container kept for `intercept` after its step
    /// ended (see [`Store::keep_container`]).
    pub kept_until: Option<UnixMillis>,
}

/// A container row's own columns.
fn container_record(r: &sqlx::any::AnyRow) -> Result<ContainerRecord, StoreError> {
    Ok(ContainerRecord {
        handle: r.try_get("handle")?,
        worker: r.try_get("worker_name")?,
        state: decode(r, "containers", &["handle"], "state")?,
        build_id: r.try_get("build_id")?,
        step_id: r.try_get("step_id")?,
        created_at: r.try_get("created_at")?,
        missing_since: r.try_get("missing_since")?,
        kept_until: r.try_get("kept_until")?,
    })
}

impl Store {
    pub async fn create_container_row(
        &self,
        handle: &str,
        worker: &str,
        build_id: Option<i64>,
        step_id: Option<&str>,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO containers (handle, worker_name, state, build_id, step_id, created_at) \
             VALUES ($1, $2, 'creating', $3, $4, $5)",
        )
        .bind(handle)
        .bind(worker)
        .bind(build_id)
        .bind(step_id)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
                StoreError::NotFound(format!("worker {worker} not found"))
            }
            other => other.into(),
        })?;
        Ok(())
    }

    /// Moves a container row from `from` to `to`, only if it is still in
    /// `from`. The moves rows make: `creating → created | failed |
    /// destroying`, `created → destroying`, `failed → destroying`; any other
    /// pair is refused without touching the database. A row found in another
    /// state is a [`StoreError::Conflict`] naming it; a missing row is
    /// [`StoreError::NotFound`].
    pub async fn set_container_state(
        &self,
        handle: &str,
        from: ContainerState,
        to: ContainerState,
    ) -> Result<(), StoreError> {
        use ContainerState::{Created, Creating, Destroying, Failed};
        if !matches!(
            (from, to),
            (Creating, Created | Failed | Destroying) | (Created | Failed, Destroying)
        ) {
            return Err(StoreError::Conflict(format!(
                "container {handle}: no transition from {from} to {to}"
            )));
        }
        let done = sqlx::query("UPDATE containers SET state = $1 WHERE handle = $2 AND state = $3")
            .bind(to.as_str())
            .bind(handle)
            .bind(from.as_str())
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        Err(self
            .why_unchanged(handle, &format!("not {from}: not moved to {to}"))
            .await?)
    }

    /// Why an update of container `handle` that required a state touched
    /// nothing: it is missing ([`StoreError::NotFound`]), or in another
    /// state ([`StoreError::Conflict`] naming it, then `what`).
    async fn why_unchanged(&self, handle: &str, what: &str) -> Result<StoreError, StoreError> {
        let found = sqlx::query("SELECT state FROM containers WHERE handle = $1")
            .bind(handle)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match found {
            None => StoreError::NotFound(format!("container {handle} not found")),
            Some(row) => {
                let state: ContainerState = decode(&row, "containers", &["handle"], "state")?;
                StoreError::Conflict(format!("container {handle} is {state}, {what}"))
            }
        })
    }

    /// Keeps `created` container `handle` after its step ended, for
    /// `intercept`, until `until` (or until its job's next build starts):
    /// the build-containers collector leaves it until then. A row in any
    /// other state is a [`StoreError::Conflict`]; a missing one
    /// [`StoreError::NotFound`].
    pub async fn keep_container(&self, handle: &str, until: UnixMillis) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE containers SET kept_until = $1 WHERE handle = $2 AND state = 'created'",
        )
        .bind(until)
        .bind(handle)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        Err(self.why_unchanged(handle, "not created: not kept").await?)
    }

    pub async fn delete_container_row(&self, handle: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM containers WHERE handle = $1")
            .bind(handle)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn list_containers(
        &self,
        worker: Option<&str>,
    ) -> Result<Vec<ContainerRecord>, StoreError> {
        let base = "SELECT handle, worker_name, state, build_id, step_id, created_at, missing_since, kept_until FROM containers";
        let rows = match worker {
            Some(w) => {
                sqlx::query(&format!(
                    "{base} WHERE worker_name = $1 ORDER BY created_at, handle"
                ))
                .bind(w)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&format!("{base} ORDER BY worker_name, created_at, handle"))
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(container_record).collect()
    }

    /// Appends a chunk of a step's container log to the build log and moves
    /// the step's log offset past it, in one transaction: a resumed build
    /// neither repeats nor loses a chunk.
    pub async fn append_step_log(
        &self,
        build_id: i64,
        step_id: &str,
        chunk: &str,
        new_offset: i64,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        if !chunk.is_empty() {
            sqlx::query(
                "INSERT INTO build_events (build_id, step, kind, payload, at) VALUES ($1, $2, 'log', $3, $4)",
            )
            .bind(build_id)
            .bind(step_id)
            .bind(chunk)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("UPDATE build_steps SET log_offset = $1 WHERE build_id = $2 AND step_id = $3")
            .bind(new_offset)
            .bind(build_id)
            .bind(step_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Applies a worker's full report of its container handles and returns
    /// what it calls for (the worker destroys `destroy_on_worker`). Refused
    /// unless `generation` is the worker's current, non-stalled registration.
    pub async fn apply_container_report(
        &self,
        worker: &str,
        generation: i64,
        reported: &[String],
        now: UnixMillis,
    ) -> Result<ContainerReportPlan, StoreError> {
        let mut tx = self.pool.begin().await?;
        check_report_generation(&mut tx, worker, generation).await?;
        let rows: Vec<ContainerRow> = sqlx::query(
            "SELECT handle, state, missing_since FROM containers WHERE worker_name = $1",
        )
        .bind(worker)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(ContainerRow {
                handle: r.try_get("handle")?,
                state: decode(r, "containers", &["handle"], "state")?,
                missing_since: r.try_get("missing_since")?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
        let plan = plan_container_report(&rows, reported);
        // Each statement re-checks what the planner saw.
        let steps: [(&str, Option<i64>, &[String]); 3] = [
            (
                "UPDATE containers SET missing_since = $1 WHERE state = 'created' AND missing_since IS NULL AND handle IN",
                Some(now),
                &plan.mark_missing,
            ),
            (
                "UPDATE containers SET missing_since = NULL WHERE missing_since IS NOT NULL AND handle IN",
                None,
                &plan.clear_missing,
            ),
            (
                "DELETE FROM containers WHERE state IN ('destroying', 'failed') AND handle IN",
                None,
                &plan.delete_rows,
            ),
        ];
        for (sql, first, handles) in steps {
            for chunk in handles.chunks(1000) {
                let offset = usize::from(first.is_some()) + 1;
                let text = format!("{sql} ({})", placeholders(offset, chunk.len()));
                let mut q = sqlx::query(&text);
                if let Some(v) = first {
                    q = q.bind(v);
                }
                for h in chunk {
                    q = q.bind(h);
                }
                q.execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(plan)
    }

    /// Records that steps used these volumes (a cache looked up and
    /// mounted) at `now`: the caches collector keeps what was used within
    /// its retention. The build engine calls it where it reuses a cache.
    pub async fn mark_volumes_used(
        &self,
        handles: &[String],
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        for chunk in handles.chunks(1000) {
            let sql = format!(
                "UPDATE volumes SET last_used_at = $1 WHERE handle IN ({})",
                placeholders(2, chunk.len())
            );
            let mut q = sqlx::query(&sql).bind(now);
            for h in chunk {
                q = q.bind(h);
            }
            q.execute(&self.pool).await?;
        }
        Ok(())
    }

    /// The created, present volumes of one owner kind whose owner ids are
    /// among `owner_ids`, on any worker: what placement counts as caches a
    /// worker already has.
    pub async fn present_volumes_by_owner(
        &self,
        owner_kind: &str,
        owner_ids: &[String],
    ) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut out = Vec::new();
        for chunk in owner_ids.chunks(500) {
            let list = (0..chunk.len())
                .map(|i| format!("${}", i + 2))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "SELECT worker_name, owner_id, handle FROM volumes WHERE owner_kind = $1 AND state = 'created' \
                 AND missing_since IS NULL AND owner_id IN ({list}) ORDER BY created_at"
            );
            let mut q = sqlx::query(&sql).bind(owner_kind);
            for id in chunk {
                q = q.bind(id);
            }
            for r in q.fetch_all(&self.pool).await? {
                out.push((
                    r.try_get("worker_name")?,
                    r.try_get("owner_id")?,
                    r.try_get("handle")?,
                ));
            }
        }
        Ok(out)
    }

    /// The handles of the live volumes of `owner_kind` whose owner id
    /// starts with `prefix` (a task step's caches: `team/job/task:`).
    pub async fn volumes_by_owner_prefix(
        &self,
        owner_kind: &str,
        prefix: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        // substr, not LIKE: a prefix holding `%` or `_` is matched as
        // written.
        let rows = sqlx::query(
            "SELECT handle, owner_id FROM volumes WHERE owner_kind = $1 \
             AND state IN ('created', 'failed') AND substr(owner_id, 1, $2) = $3 ORDER BY handle",
        )
        .bind(owner_kind)
        .bind(i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX))
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("handle")?, r.try_get("owner_id")?)))
            .collect()
    }
}

/// Deletes every container row of `worker` and returns how many there were.
pub(crate) async fn invalidate_worker_containers(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    worker: &str,
) -> Result<u64, StoreError> {
    let done = sqlx::query("DELETE FROM containers WHERE worker_name = $1")
        .bind(worker)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected())
}

/// A team's container as `hangar containers` lists it: the row with the
/// build, step, job and pipeline it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamContainer {
    pub container: ContainerRecord,
    pub build_name: String,
    /// The job build's number, for a job's build.
    pub build_number: Option<i64>,
    pub step_name: Option<String>,
    pub step_kind: Option<String>,
    pub attempt: Option<i64>,
    pub job: Option<String>,
    pub pipeline: Option<String>,
}

impl Store {
    /// The containers of `team`'s builds (a one-off build's too), oldest
    /// first; only `handle`'s when given.
    pub async fn team_containers(
        &self,
        team: &str,
        handle: Option<&str>,
    ) -> Result<Vec<TeamContainer>, StoreError> {
        let only = if handle.is_some() {
            " AND c.handle = $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT c.handle, c.worker_name, c.state, c.build_id, c.step_id, c.created_at, \
                    c.missing_since, c.kept_until, b.name AS build_name, jb.build_number, s.name AS step_name, \
                    s.kind AS step_kind, s.attempt, j.name AS job_name, p.name AS pipeline_name, \
                    p.instance_vars AS pipeline_vars \
             FROM containers c \
             JOIN builds b ON b.id = c.build_id \
             LEFT JOIN build_steps s ON s.build_id = c.build_id AND s.step_id = c.step_id \
             LEFT JOIN job_builds jb ON jb.build_id = b.id \
             LEFT JOIN jobs j ON j.id = jb.job_id \
             LEFT JOIN pipelines p ON p.id = j.pipeline_id \
             WHERE b.team = $1{only} ORDER BY c.created_at, c.handle"
        );
        let mut query = sqlx::query(&sql).bind(team);
        if let Some(h) = handle {
            query = query.bind(h);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(TeamContainer {
                    container: container_record(r)?,
                    build_name: r.try_get("build_name")?,
                    build_number: r.try_get("build_number")?,
                    step_name: r.try_get("step_name")?,
                    step_kind: r.try_get("step_kind")?,
                    attempt: r.try_get("attempt")?,
                    job: r.try_get("job_name")?,
                    // An instance by its reference (`p/branch:main`), as
                    // `-j` names it.
                    pipeline: r
                        .try_get::<Option<String>, _>("pipeline_name")?
                        .map(|name| {
                            let vars: Option<String> = r.try_get("pipeline_vars").ok().flatten();
                            crate::pipelines::reference_text(&name, vars.as_deref().unwrap_or("{}"))
                        }),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod team_tests {
    use crate::test_db::{postgres_store, sqlite_store, worker_info};
    use crate::Store;

    async fn a_team_lists_its_own_builds_containers_only(store: Store) {
        store.register_worker(&worker_info("w1"), 1).await.unwrap();
        let a = store
            .create_build("one-off", Some("a"), "{}", "{}", 1)
            .await
            .unwrap();
        let b = store
            .create_build("other", Some("b"), "{}", "{}", 1)
            .await
            .unwrap();
        for (handle, build, at) in [("ca", a.id, 2), ("cb", b.id, 3), ("ca2", a.id, 4)] {
            store
                .create_container_row(handle, "w1", Some(build), Some("0"), at)
                .await
                .unwrap();
        }
        // A row of no build (a resource type's) belongs to no team.
        store
            .create_container_row("loose", "w1", None, None, 5)
            .await
            .unwrap();
        let handles = |list: Vec<crate::TeamContainer>| -> Vec<String> {
            list.into_iter().map(|c| c.container.handle).collect()
        };
        assert_eq!(
            handles(store.team_containers("a", None).await.unwrap()),
            ["ca", "ca2"]
        );
        let one = store.team_containers("a", Some("ca2")).await.unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].build_name, "one-off");
        assert_eq!((one[0].job.as_deref(), one[0].build_number), (None, None));
        // Another team's handle reads as missing.
        assert!(store
            .team_containers("a", Some("cb"))
            .await
            .unwrap()
            .is_empty());
        assert!(store.team_containers("c", None).await.unwrap().is_empty());
        // A hostile handle is a value, not SQL.
        assert!(store
            .team_containers("a", Some("' OR 1=1 --"))
            .await
            .unwrap()
            .is_empty());
        // An instanced pipeline's container names the instance, as `-j`
        // does.
        let config = hangar_core::pipeline::parse_pipeline(
            "jobs:\n- {name: j, plan: [{task: t, config: {platform: linux, run: {path: x}}}]}\n",
        )
        .unwrap()
        .config;
        store
            .set_pipeline("main", "p/branch:main", &config, None, 1)
            .await
            .unwrap();
        let job = store.job("main", "p/branch:main", "j").await.unwrap();
        let build = store
            .create_job_build(job.id, "p/j", "[]", 6)
            .await
            .unwrap();
        store
            .create_container_row("cj", "w1", Some(build.build.id), Some("0"), 7)
            .await
            .unwrap();
        let listed = store.team_containers("main", Some("cj")).await.unwrap();
        assert_eq!(listed[0].pipeline.as_deref(), Some("p/branch:main"));
        assert_eq!(listed[0].job.as_deref(), Some("j"));
    }

    #[tokio::test]
    async fn sqlite_a_team_lists_its_own_builds_containers_only() {
        a_team_lists_its_own_builds_containers_only(sqlite_store().await).await;
    }

    #[tokio::test]
    async fn postgres_a_team_lists_its_own_builds_containers_only() {
        a_team_lists_its_own_builds_containers_only(postgres_store().await).await;
    }
}
