//! Builds, their steps and their event log.

use hangar_core::build::{BuildEventKind, BuildStatus, StepKind, StepState};
use hangar_core::UnixMillis;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::{Backend, Store};
use crate::error::{decode, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildRecord {
    pub id: i64,
    pub name: String,
    pub team: Option<String>,
    /// The plan as JSON, validated when the build was created.
    pub plan: String,
    /// Artifacts the build starts with (name → volume handle), as JSON.
    pub artifacts: String,
    pub status: BuildStatus,
    pub created_at: UnixMillis,
    pub started_at: Option<UnixMillis>,
    pub finished_at: Option<UnixMillis>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    /// When `build_log_retention` removed the build's log (its events).
    pub logs_reaped_at: Option<UnixMillis>,
    /// How many times the build was claimed: the fencing token of its
    /// current lease. The node that claimed it writes only under this one.
    pub lease_token: i64,
}

/// What asking to abort a build did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortRequest {
    /// It had not started: it is aborted now.
    AbortedPending,
    /// It runs: the node running it stops it.
    Requested,
    /// It had ended already, so: nothing changed.
    AlreadyFinished(BuildStatus),
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub build_id: i64,
    /// The step's place in the plan (`0`, `1`, `2.0`, …).
    pub step_id: String,
    pub name: String,
    pub kind: StepKind,
    pub state: StepState,
    pub attempt: i64,
    pub worker: Option<String>,
    pub container: Option<String>,
    /// How much of the container's log is already in the build log.
    pub log_offset: i64,
    pub exit_code: Option<i64>,
    /// Artifacts the step produced (name → volume handle), as JSON.
    pub outputs: String,
    pub error: Option<String>,
    pub started_at: Option<UnixMillis>,
    pub finished_at: Option<UnixMillis>,
    /// A put step's new version (the JSON `out` answered), once known.
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildEventRecord {
    pub id: i64,
    pub build_id: i64,
    pub step: Option<String>,
    pub kind: BuildEventKind,
    pub payload: String,
    pub at: UnixMillis,
}

pub(crate) const BUILD_COLUMNS: &str =
    "id, name, team, plan, artifacts, status, created_at, started_at, finished_at, exit_code, error, \
     logs_reaped_at, lease_token";
const STEP_COLUMNS: &str =
    "build_id, step_id, name, kind, state, attempt, worker_name, container_handle, \
     log_offset, exit_code, outputs, error, started_at, finished_at, version";

pub(crate) fn build_from_row(r: &AnyRow) -> Result<BuildRecord, StoreError> {
    Ok(BuildRecord {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        team: r.try_get("team")?,
        plan: r.try_get("plan")?,
        artifacts: r.try_get("artifacts")?,
        status: decode(r, "builds", &["id"], "status")?,
        created_at: r.try_get("created_at")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
        exit_code: r.try_get("exit_code")?,
        error: r.try_get("error")?,
        logs_reaped_at: r.try_get("logs_reaped_at")?,
        lease_token: r.try_get("lease_token")?,
    })
}

fn step_from_row(r: &AnyRow) -> Result<StepRecord, StoreError> {
    Ok(StepRecord {
        build_id: r.try_get("build_id")?,
        step_id: r.try_get("step_id")?,
        name: r.try_get("name")?,
        kind: decode(r, "build_steps", &["build_id", "step_id"], "kind")?,
        state: decode(r, "build_steps", &["build_id", "step_id"], "state")?,
        attempt: r.try_get("attempt")?,
        worker: r.try_get("worker_name")?,
        container: r.try_get("container_handle")?,
        log_offset: r.try_get("log_offset")?,
        exit_code: r.try_get("exit_code")?,
        outputs: r.try_get("outputs")?,
        error: r.try_get("error")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
        version: r.try_get("version")?,
    })
}

/// The SQL of the team of the job whose id is the parameter `param`: a
/// job build records its pipeline's team, so that who may read it is
/// decided from the build alone.
pub(crate) fn job_team(param: &str) -> String {
    format!(
        "(SELECT t.name FROM jobs j JOIN pipelines p ON p.id = j.pipeline_id \
         JOIN teams t ON t.id = p.team_id WHERE j.id = {param})"
    )
}

impl Store {
    pub async fn create_build(
        &self,
        name: &str,
        team: Option<&str>,
        plan: &str,
        artifacts: &str,
        now: UnixMillis,
    ) -> Result<BuildRecord, StoreError> {
        let row = sqlx::query(&format!(
            "INSERT INTO builds (name, team, plan, artifacts, status, created_at) \
             VALUES ($1, $2, $3, $4, 'pending', $5) RETURNING {BUILD_COLUMNS}"
        ))
        .bind(name)
        .bind(team)
        .bind(plan)
        .bind(artifacts)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        build_from_row(&row)
    }

    /// Takes the oldest build that is pending (and not held by the
    /// scheduler for its start limits), or started by a web node whose
    /// lease ran out (it died), for `owner` until `now + lease_ms`. A
    /// conditional update: two nodes never take the same build. Each claim
    /// counts up the build's lease token (the returned record's).
    pub async fn claim_build(
        &self,
        owner: &str,
        now: UnixMillis,
        lease_ms: i64,
    ) -> Result<Option<BuildRecord>, StoreError> {
        for _ in 0..5 {
            // Each state's oldest candidate by its own walk of the (status,
            // id) index, then the older of the two. Written as one OR with
            // `ORDER BY id LIMIT 1`, PostgreSQL walks the primary key and
            // filters, which with a long history of finished builds reads
            // every build row on every claim (40-60 ms at 50,000 builds).
            let candidate = sqlx::query(
                "SELECT id, status FROM ( \
                 SELECT * FROM (SELECT id, status FROM builds \
                  WHERE status = 'pending' AND held = 0 ORDER BY id LIMIT 1) AS pending \
                 UNION ALL \
                 SELECT * FROM (SELECT id, status FROM builds \
                  WHERE status = 'started' AND (lease_until IS NULL OR lease_until < $1) \
                  ORDER BY id LIMIT 1) AS orphaned \
                 ) AS candidates ORDER BY id LIMIT 1",
            )
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
            let Some(candidate) = candidate else {
                return Ok(None);
            };
            let id: i64 = candidate.try_get("id")?;
            let status: String = candidate.try_get("status")?;
            let claimed = sqlx::query(&format!(
                "UPDATE builds SET status = 'started', started_at = COALESCE(started_at, $1), \
                 lease_owner = $2, lease_until = $3, lease_token = lease_token + 1 \
                 WHERE id = $4 AND status = $5 AND ((status = 'pending' AND held = 0) OR lease_until IS NULL OR lease_until < $1) \
                 RETURNING {BUILD_COLUMNS}"
            ))
            .bind(now)
            .bind(owner)
            .bind(now + lease_ms)
            .bind(id)
            .bind(&status)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = claimed {
                return build_from_row(&row).map(Some);
            }
            // Another node took it between the two statements: look again.
        }
        Ok(None)
    }

    /// Extends the lease of claim `lease_token` on a started build; false if
    /// it was lost (another claim took the build, or it ended).
    pub async fn renew_build_lease(
        &self,
        id: i64,
        lease_token: i64,
        now: UnixMillis,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE builds SET lease_until = $1 WHERE id = $2 AND lease_token = $3 AND status = 'started'",
        )
        .bind(now + lease_ms)
        .bind(id)
        .bind(lease_token)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends a build; only under its current claim (`lease_token`), and
    /// only once.
    pub async fn finish_build(
        &self,
        id: i64,
        lease_token: i64,
        status: BuildStatus,
        exit_code: Option<i64>,
        error: Option<&str>,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE builds SET status = $1, exit_code = $2, error = $3, finished_at = $4, lease_until = NULL \
             WHERE id = $5 AND lease_token = $6 AND status = 'started'",
        )
        .bind(status.as_str())
        .bind(exit_code)
        .bind(error)
        .bind(now)
        .bind(id)
        .bind(lease_token)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives up this node's claims of builds it stops running (a graceful
    /// shutdown): their leases end now, so a survivor resumes them at its
    /// next claim pass instead of a lease later. Only claims still held
    /// are touched.
    pub async fn release_build_lease(&self, id: i64, lease_token: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE builds SET lease_until = NULL WHERE id = $1 AND lease_token = $2 AND status = 'started'",
        )
        .bind(id)
        .bind(lease_token)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Asks for a build to be aborted. A pending build ends aborted at
    /// once (nothing of it ran); a started one is marked, and the node
    /// running it stops it ([`Store::build_abort_requested`]); a finished
    /// one is left as it is.
    pub async fn request_build_abort(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> Result<AbortRequest, StoreError> {
        let pending = sqlx::query(
            "UPDATE builds SET status = 'aborted', finished_at = $1, abort_requested_at = $1, \
             error = 'aborted before it started' WHERE id = $2 AND status = 'pending'",
        )
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await?;
        if pending.rows_affected() == 1 {
            return Ok(AbortRequest::AbortedPending);
        }
        let started = sqlx::query(
            "UPDATE builds SET abort_requested_at = COALESCE(abort_requested_at, $1) \
             WHERE id = $2 AND status = 'started'",
        )
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await?;
        if started.rows_affected() == 1 {
            return Ok(AbortRequest::Requested);
        }
        Ok(match self.get_build(id).await? {
            Some(b) => AbortRequest::AlreadyFinished(b.status),
            None => AbortRequest::NotFound,
        })
    }

    /// Whether a user asked for the build to be aborted.
    pub async fn build_abort_requested(&self, id: i64) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT abort_requested_at FROM builds WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<i64>, _>(0)?.is_some(),
            None => false,
        })
    }

    pub async fn get_build(&self, id: i64) -> Result<Option<BuildRecord>, StoreError> {
        sqlx::query(&format!("SELECT {BUILD_COLUMNS} FROM builds WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(build_from_row)
            .transpose()
    }

    /// The newest builds first.
    pub async fn list_builds(&self, limit: i64) -> Result<Vec<BuildRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {BUILD_COLUMNS} FROM builds ORDER BY id DESC LIMIT $1"
        ))
        .bind(limit.clamp(1, 1000))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(build_from_row).collect()
    }

    /// Inserts or replaces a step's row.
    pub async fn save_step(&self, s: &StepRecord) -> Result<(), StoreError> {
        save_step_on(&mut *self.pool.acquire().await?, s).await
    }

    /// [`Store::save_step`] only while claim `lease_token` still holds the
    /// build; false (nothing written) once another claim took it or it
    /// ended. The check takes the build's row first in the transaction
    /// (a row lock on PostgreSQL, the write lock on SQLite), so a claim
    /// cannot slip in between the check and the write.
    pub async fn save_step_under_lease(
        &self,
        s: &StepRecord,
        lease_token: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !hold_lease(self.backend(), &mut tx, s.build_id, lease_token).await? {
            return Ok(false);
        }
        save_step_on(&mut tx, s).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn build_steps(&self, build_id: i64) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {STEP_COLUMNS} FROM build_steps WHERE build_id = $1 ORDER BY step_id"
        ))
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(step_from_row).collect()
    }

    /// Appends to a build's log; returns the event's id (its position).
    pub async fn append_build_event(
        &self,
        build_id: i64,
        step: Option<&str>,
        kind: BuildEventKind,
        payload: &str,
        now: UnixMillis,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO build_events (build_id, step, kind, payload, at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(build_id)
        .bind(step)
        .bind(kind.as_str())
        .bind(payload)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// [`Store::append_build_event`] only while claim `lease_token` still
    /// holds the build; `None` (nothing written) otherwise.
    #[allow(clippy::too_many_arguments)]
    pub async fn append_build_event_under_lease(
        &self,
        build_id: i64,
        lease_token: i64,
        step: Option<&str>,
        kind: BuildEventKind,
        payload: &str,
        now: UnixMillis,
    ) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !hold_lease(self.backend(), &mut tx, build_id, lease_token).await? {
            return Ok(None);
        }
        let row = sqlx::query(
            "INSERT INTO build_events (build_id, step, kind, payload, at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(build_id)
        .bind(step)
        .bind(kind.as_str())
        .bind(payload)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(row.try_get("id")?))
    }

    /// A build's events after `after` (an event id; 0 for the start).
    pub async fn build_events(
        &self,
        build_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<BuildEventRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, build_id, step, kind, payload, at FROM build_events \
             WHERE build_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(build_id)
        .bind(after)
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(BuildEventRecord {
                    id: r.try_get("id")?,
                    build_id: r.try_get("build_id")?,
                    step: r.try_get("step")?,
                    kind: decode(r, "build_events", &["id"], "kind")?,
                    payload: r.try_get("payload")?,
                    at: r.try_get("at")?,
                })
            })
            .collect()
    }
}

/// How long a fenced write's transaction may sit idle on PostgreSQL before
/// the server ends the session: a node paused (SIGSTOP) between the
/// statements of one must not keep the build's row locked, or the node
/// taking the build over would wait on it for the whole pause.
const IDLE_IN_FENCED_WRITE: &str = "SET LOCAL idle_in_transaction_session_timeout = '3s'";

/// Whether claim `lease_token` still holds the started build, taking its
/// row for the rest of the transaction (a no-op update: PostgreSQL locks
/// the row, SQLite takes its write lock).
async fn hold_lease(
    backend: Backend,
    conn: &mut sqlx::AnyConnection,
    build_id: i64,
    lease_token: i64,
) -> Result<bool, StoreError> {
    if backend == Backend::Postgres {
        sqlx::query(IDLE_IN_FENCED_WRITE)
            .execute(&mut *conn)
            .await?;
    }
    let held = sqlx::query(
        "UPDATE builds SET lease_token = lease_token WHERE id = $1 AND lease_token = $2 AND status = 'started'",
    )
    .bind(build_id)
    .bind(lease_token)
    .execute(&mut *conn)
    .await?;
    Ok(held.rows_affected() == 1)
}

async fn save_step_on(conn: &mut sqlx::AnyConnection, s: &StepRecord) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "INSERT INTO build_steps ({STEP_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (build_id, step_id) DO UPDATE SET name = $3, kind = $4, state = $5, attempt = $6, \
         worker_name = $7, container_handle = $8, log_offset = $9, exit_code = $10, outputs = $11, \
         error = $12, started_at = $13, finished_at = $14, version = $15"
    ))
    .bind(s.build_id)
    .bind(&s.step_id)
    .bind(&s.name)
    .bind(s.kind.as_str())
    .bind(s.state.as_str())
    .bind(s.attempt)
    .bind(&s.worker)
    .bind(&s.container)
    .bind(s.log_offset)
    .bind(s.exit_code)
    .bind(&s.outputs)
    .bind(&s.error)
    .bind(s.started_at)
    .bind(s.finished_at)
    .bind(s.version.as_deref())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
