//! What placement counts on each worker: the build steps the engine placed
//! there, as soon as it placed them (`build_steps.placed_on`, migration
//! 0026), whose build runs and which have not finished.

use std::collections::BTreeMap;

use hangar_core::build::StepKind;
use hangar_core::placement::Load;
use sqlx::Row;

use crate::db::Store;
use crate::error::{decode, StoreError};

impl Store {
    /// Records that placement put the step on `worker`, while claim
    /// `lease_token` still holds its build (false, nothing written, once
    /// it does not, or when the step has no row). Written the moment
    /// placement chooses, so the next placement counts the step.
    pub async fn record_step_placement(
        &self,
        build_id: i64,
        step_id: &str,
        worker: &str,
        lease_token: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE build_steps SET placed_on = $1 WHERE build_id = $2 AND step_id = $3 \
             AND EXISTS (SELECT 1 FROM builds WHERE id = $2 AND lease_token = $4 AND status = 'started')",
        )
        .bind(worker)
        .bind(build_id)
        .bind(step_id)
        .bind(lease_token)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The kind of a build's step, if it has a row.
    pub async fn step_kind(
        &self,
        build_id: i64,
        step_id: &str,
    ) -> Result<Option<StepKind>, StoreError> {
        let row = sqlx::query(
            "SELECT build_id, step_id, kind FROM build_steps WHERE build_id = $1 AND step_id = $2",
        )
        .bind(build_id)
        .bind(step_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r, "build_steps", &["build_id", "step_id"], "kind"))
            .transpose()
    }

    /// Per worker, the build steps placed there that still run (their
    /// step and their build both running) and how many of them are tasks;
    /// a worker with none is left out. `volumes` is left at 0: it is the
    /// worker's own report.
    pub async fn placement_loads(&self) -> Result<BTreeMap<String, Load>, StoreError> {
        // Driven by the started builds (the `(status, id)` index), each
        // reaching its steps by the primary key: finished builds, however
        // many, are not read.
        let rows = sqlx::query(
            "SELECT s.placed_on AS worker, COUNT(*) AS steps, \
             SUM(CASE WHEN s.kind = 'task' THEN 1 ELSE 0 END) AS tasks \
             FROM builds b JOIN build_steps s ON s.build_id = b.id \
             WHERE b.status = 'started' AND s.state = 'running' AND s.placed_on IS NOT NULL \
             GROUP BY s.placed_on",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = BTreeMap::new();
        for r in rows {
            let worker: String = r.try_get("worker")?;
            let steps: i64 = r.try_get("steps")?;
            let tasks: i64 = r.try_get("tasks")?;
            out.insert(
                worker,
                Load {
                    build_steps: steps,
                    tasks,
                    volumes: 0,
                },
            );
        }
        Ok(out)
    }
}
