//! What the scheduler reads and writes: the window of history one job's
//! input resolution works on (`hangar_core::scheduling::Window`), loaded
//! with indexed queries bounded by LIMIT, never a pipeline's whole
//! history; the lease that lets one node schedule a pipeline at a time; and
//! the builds it creates (held until their start limits allow them).

use std::collections::{BTreeMap, BTreeSet};

use hangar_core::scheduling::{
    BuildList, EveryNext, PassedBuild, PendingBuild, ResourceId, RunningBuild, VersionId,
};
use hangar_core::UnixMillis;
use serde_json::{Map, Value};
use sqlx::Row;

use crate::builds::{build_from_row, BUILD_COLUMNS};
use crate::db::Store;
use crate::error::StoreError;
use crate::job_builds::JobBuildRecord;
use crate::volumes::placeholder_groups;

/// How many versions one pass of pin matching reads at a time.
const PIN_PAGE: i64 = 500;

/// A pipeline the scheduler looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulablePipeline {
    pub id: i64,
    pub team: String,
    /// Its reference: the name, or `name/key:value,…` for an instance.
    pub reference: String,
    pub paused: bool,
    pub config_version: i64,
}

/// A pipeline's resource as the scheduler needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulingResource {
    pub id: ResourceId,
    pub scope_id: Option<i64>,
    /// The version `pin-resource` pinned.
    pub api_pin: Option<VersionId>,
}

/// One input of a build the scheduler creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedInput {
    pub name: String,
    pub resource_id: ResourceId,
    pub version_id: VersionId,
}

/// Running and held builds of a pipeline's jobs, for start limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartState {
    /// Started builds, and pending ones already released to the engine.
    pub running: Vec<RunningBuild>,
    /// Held builds whose inputs are fixed, oldest first.
    pub held: Vec<PendingBuild>,
}

/// A manual build still waiting for its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputsPendingBuild {
    pub build_id: i64,
    pub job_id: i64,
}

fn ids_list(ids: &[i64]) -> String {
    ids.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether every key of `pin` has the same value in `version`: how
/// Concourse matches a pinned version (`version @> pin`).
pub fn version_matches_pin(version: &Map<String, Value>, pin: &Map<String, Value>) -> bool {
    pin.iter().all(|(k, v)| version.get(k) == Some(v))
}

impl Store {
    /// Every pipeline with active jobs, for a scheduler pass.
    pub async fn schedulable_pipelines(&self) -> Result<Vec<SchedulablePipeline>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.id, t.name AS team, p.name, p.instance_vars, p.paused, p.config_version \
             FROM pipelines p JOIN teams t ON t.id = p.team_id ORDER BY p.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SchedulablePipeline {
                    id: r.try_get("id")?,
                    team: r.try_get("team")?,
                    reference: crate::pipelines::reference_text(
                        &r.try_get::<String, _>("name")?,
                        &r.try_get::<String, _>("instance_vars")?,
                    ),
                    paused: r.try_get::<i64, _>("paused")? != 0,
                    config_version: r.try_get("config_version")?,
                })
            })
            .collect()
    }

    /// Takes the pipeline for `owner` until `now + lease_ms` unless another
    /// node holds it: only the holder decides builds of its jobs.
    pub async fn claim_pipeline_schedule(
        &self,
        pipeline_id: i64,
        owner: &str,
        now: UnixMillis,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE pipelines SET schedule_owner = $1, schedule_until = $2 WHERE id = $3 \
             AND (schedule_owner IS NULL OR schedule_owner = $1 OR schedule_until < $4)",
        )
        .bind(owner)
        .bind(now + lease_ms)
        .bind(pipeline_id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives the pipeline back (another node may schedule it at once).
    pub async fn release_pipeline_schedule(
        &self,
        pipeline_id: i64,
        owner: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE pipelines SET schedule_owner = NULL, schedule_until = NULL \
             WHERE id = $1 AND schedule_owner = $2",
        )
        .bind(pipeline_id)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The pipeline's resources (including ones its config dropped) by name.
    pub async fn scheduling_resources(
        &self,
        pipeline_id: i64,
    ) -> Result<BTreeMap<String, SchedulingResource>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, scope_id, api_pinned_version_id FROM resources \
             WHERE pipeline_id = $1",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("name")?,
                    SchedulingResource {
                        id: r.try_get("id")?,
                        scope_id: r.try_get("scope_id")?,
                        api_pin: r.try_get("api_pinned_version_id")?,
                    },
                ))
            })
            .collect()
    }

    /// The pipeline's active jobs: id, name, paused.
    pub async fn scheduling_jobs(
        &self,
        pipeline_id: i64,
    ) -> Result<Vec<(i64, String, bool)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, paused FROM jobs WHERE pipeline_id = $1 AND active = 1 \
             ORDER BY config_order, id",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("id")?,
                    r.try_get("name")?,
                    r.try_get::<i64, _>("paused")? != 0,
                ))
            })
            .collect()
    }

    /// The newest enabled version of the resource (in its scope's check
    /// order).
    pub async fn latest_enabled_version(
        &self,
        resource_id: ResourceId,
    ) -> Result<Option<VersionId>, StoreError> {
        let row = sqlx::query(
            "SELECT v.id FROM resources r JOIN resource_versions v ON v.scope_id = r.scope_id \
             WHERE r.id = $1 AND NOT EXISTS (SELECT 1 FROM resource_disabled_versions d \
             WHERE d.resource_id = r.id AND d.version_id = v.id) \
             ORDER BY v.check_order DESC LIMIT 1",
        )
        .bind(resource_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok(r.try_get("id")?)).transpose()
    }

    /// For a `version: every` input: the enabled version after the one the
    /// job's newest build used for it, and whether another follows; the
    /// newest version when the job never used one, and the used one again
    /// when nothing follows it (as Concourse does).
    pub async fn every_next_version(
        &self,
        job_id: i64,
        input: &str,
        resource_id: ResourceId,
    ) -> Result<Option<EveryNext>, StoreError> {
        let used = sqlx::query(
            "SELECT v.id, v.check_order FROM build_inputs bi \
             JOIN resource_versions v ON v.id = bi.version_id \
             WHERE bi.job_id = $1 AND bi.name = $2 AND bi.resource_id = $3 \
             ORDER BY bi.build_id DESC LIMIT 1",
        )
        .bind(job_id)
        .bind(input)
        .bind(resource_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(used) = used else {
            return Ok(self
                .latest_enabled_version(resource_id)
                .await?
                .map(|version| EveryNext {
                    version,
                    has_next: false,
                }));
        };
        let used_id: i64 = used.try_get("id")?;
        let used_order: i64 = used.try_get("check_order")?;
        let next: Vec<i64> = sqlx::query(
            "SELECT v.id FROM resources r JOIN resource_versions v ON v.scope_id = r.scope_id \
             WHERE r.id = $1 AND v.check_order > $2 AND NOT EXISTS (SELECT 1 FROM \
             resource_disabled_versions d WHERE d.resource_id = r.id AND d.version_id = v.id) \
             ORDER BY v.check_order LIMIT 2",
        )
        .bind(resource_id)
        .bind(used_order)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
        if let Some(&version) = next.first() {
            return Ok(Some(EveryNext {
                version,
                has_next: next.len() > 1,
            }));
        }
        let used_disabled = self.disabled_versions(&[resource_id]).await?;
        if used_disabled.contains(&(resource_id, used_id)) {
            return Ok(self
                .latest_enabled_version(resource_id)
                .await?
                .map(|version| EveryNext {
                    version,
                    has_next: false,
                }));
        }
        Ok(Some(EveryNext {
            version: used_id,
            has_next: false,
        }))
    }

    /// Up to `limit` succeeded builds of `job_id`, newest first, each with
    /// its outputs among `resources`; `complete` when there are no more.
    pub async fn passed_builds(
        &self,
        job_id: i64,
        resources: &[ResourceId],
        limit: i64,
    ) -> Result<BuildList, StoreError> {
        // One statement: the newest succeeded builds, each with its
        // outputs of `resources` (none: one row of NULLs). Each statement
        // is a round trip, and on PostgreSQL a round trip is most of a
        // decision's cost. Resource ids are integers from the database:
        // listing them inline is safe and works alike on both databases.
        let wanted = if resources.is_empty() {
            "0 = 1".to_string()
        } else {
            format!("o.resource_id IN ({})", ids_list(resources))
        };
        let rows = sqlx::query(&format!(
            "SELECT p.build_id, p.build_number, o.resource_id, o.version_id FROM \
             (SELECT jb.build_id, jb.build_number FROM job_builds jb \
              JOIN builds b ON b.id = jb.build_id \
              WHERE jb.job_id = $1 AND b.status = 'succeeded' \
              ORDER BY jb.build_number DESC LIMIT $2) p \
             LEFT JOIN build_outputs o ON o.build_id = p.build_id AND {wanted} \
             ORDER BY p.build_number DESC, o.resource_id, o.version_id"
        ))
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut builds: Vec<PassedBuild> = Vec::new();
        for r in rows {
            let id: i64 = r.try_get("build_id")?;
            if builds.last().map(|b| b.id) != Some(id) {
                builds.push(PassedBuild {
                    id,
                    versions: Vec::new(),
                });
            }
            let resource: Option<i64> = r.try_get("resource_id")?;
            let version: Option<i64> = r.try_get("version_id")?;
            if let (Some(resource), Some(version), Some(b)) = (resource, version, builds.last_mut())
            {
                b.versions.push((resource, version));
            }
        }
        let complete = (builds.len() as i64) < limit;
        Ok(BuildList { builds, complete })
    }

    /// The disabled versions of `resources`.
    pub async fn disabled_versions(
        &self,
        resources: &[ResourceId],
    ) -> Result<BTreeSet<(ResourceId, VersionId)>, StoreError> {
        if resources.is_empty() {
            return Ok(BTreeSet::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT resource_id, version_id FROM resource_disabled_versions \
             WHERE resource_id IN ({})",
            ids_list(resources)
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("resource_id")?, r.try_get("version_id")?)))
            .collect()
    }

    /// The newest version of the resource's scope that matches `pin` (every
    /// field of the pin equal), read a page at a time.
    pub async fn match_pinned_version(
        &self,
        resource_id: ResourceId,
        pin: &Map<String, Value>,
    ) -> Result<Option<VersionId>, StoreError> {
        let mut before = i64::MAX;
        loop {
            let rows = sqlx::query(
                "SELECT v.id, v.version, v.check_order FROM resources r \
                 JOIN resource_versions v ON v.scope_id = r.scope_id \
                 WHERE r.id = $1 AND v.check_order < $2 ORDER BY v.check_order DESC LIMIT $3",
            )
            .bind(resource_id)
            .bind(before)
            .bind(PIN_PAGE)
            .fetch_all(&self.pool)
            .await?;
            for r in &rows {
                let text: String = r.try_get("version")?;
                before = r.try_get("check_order")?;
                let Ok(Value::Object(version)) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if version_matches_pin(&version, pin) {
                    return Ok(Some(r.try_get("id")?));
                }
            }
            if (rows.len() as i64) < PIN_PAGE {
                return Ok(None);
            }
        }
    }

    /// Which of `inputs` an earlier build of the job already had, with the
    /// same version, under the same name.
    pub async fn inputs_used_before(
        &self,
        job_id: i64,
        inputs: &[PlannedInput],
    ) -> Result<BTreeSet<String>, StoreError> {
        if inputs.is_empty() {
            return Ok(BTreeSet::new());
        }
        // One statement for all of them (a round trip each is what a
        // decision costs on PostgreSQL).
        let terms = placeholder_groups(2, inputs.len(), 3, " OR ", |p| {
            format!(
                "(resource_id = {} AND version_id = {} AND name = {})",
                p[0], p[1], p[2]
            )
        });
        let sql = format!("SELECT DISTINCT name FROM build_inputs WHERE job_id = $1 AND ({terms})");
        let mut q = sqlx::query(&sql).bind(job_id);
        for i in inputs {
            q = q.bind(i.resource_id).bind(i.version_id).bind(&i.name);
        }
        let mut out = BTreeSet::new();
        for r in q.fetch_all(&self.pool).await? {
            out.insert(r.try_get::<String, _>("name")?);
        }
        Ok(out)
    }

    /// The JSON text of each of `version_ids`, by id, in one statement; a
    /// missing one is an error.
    pub async fn version_texts(
        &self,
        version_ids: &[VersionId],
    ) -> Result<BTreeMap<VersionId, String>, StoreError> {
        let mut out = BTreeMap::new();
        if version_ids.is_empty() {
            return Ok(out);
        }
        // Ids are integers: listed inline, as elsewhere in this file.
        let rows = sqlx::query(&format!(
            "SELECT id, version FROM resource_versions WHERE id IN ({})",
            ids_list(version_ids)
        ))
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            out.insert(r.try_get("id")?, r.try_get("version")?);
        }
        if let Some(missing) = version_ids.iter().find(|id| !out.contains_key(*id)) {
            return Err(StoreError::NotFound(format!("version {missing} not found")));
        }
        Ok(out)
    }

    /// Creates the next build of the job, held, with its planned inputs, in
    /// one transaction. With `lease`, only while `owner` still holds the
    /// pipeline (`(pipeline_id, owner, now)`): a node whose lease ran out
    /// creates nothing (`None`). `inputs_pending` marks a manual build
    /// whose inputs are to be resolved later.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_scheduled_build(
        &self,
        job_id: i64,
        name: &str,
        plan: &str,
        inputs: &[PlannedInput],
        inputs_pending: bool,
        lease: Option<(i64, &str)>,
        now: UnixMillis,
    ) -> Result<Option<JobBuildRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if let Some((pipeline_id, owner)) = lease {
            // Touching the row also makes a concurrent claim wait for this
            // transaction on PostgreSQL.
            let held = sqlx::query(
                "UPDATE pipelines SET schedule_until = schedule_until WHERE id = $1 \
                 AND schedule_owner = $2 AND schedule_until >= $3",
            )
            .bind(pipeline_id)
            .bind(owner)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if held.rows_affected() != 1 {
                return Ok(None);
            }
        }
        // A build with its inputs fixed means the job no longer waits: said
        // in the same statement (one round trip fewer per build).
        let row = sqlx::query(
            "UPDATE jobs SET next_build_number = next_build_number + 1, \
             waiting = CASE WHEN $2 = 1 THEN waiting ELSE NULL END \
             WHERE id = $1 AND active = 1 RETURNING next_build_number",
        )
        .bind(job_id)
        .bind(i64::from(inputs_pending))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!("job {job_id} not found")));
        };
        let number: i64 = row.try_get::<i64, _>("next_build_number")? - 1;
        let row = sqlx::query(&format!(
            "INSERT INTO builds (name, team, plan, artifacts, status, created_at, held, \
             inputs_pending) VALUES ($1, {}, $2, '{{}}', 'pending', $3, 1, $4) \
             RETURNING {BUILD_COLUMNS}",
            crate::builds::job_team("$5")
        ))
        .bind(format!("{name} #{number}"))
        .bind(plan)
        .bind(now)
        .bind(i64::from(inputs_pending))
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
        let build = build_from_row(&row)?;
        sqlx::query("INSERT INTO job_builds (job_id, build_number, build_id) VALUES ($1, $2, $3)")
            .bind(job_id)
            .bind(number)
            .bind(build.id)
            .execute(&mut *tx)
            .await?;
        insert_inputs(&mut tx, build.id, job_id, inputs).await?;
        tx.commit().await?;
        Ok(Some(JobBuildRecord { number, build }))
    }

    /// Manual builds of the pipeline's jobs still waiting for inputs,
    /// oldest first.
    pub async fn inputs_pending_builds(
        &self,
        pipeline_id: i64,
    ) -> Result<Vec<InputsPendingBuild>, StoreError> {
        let rows = sqlx::query(
            "SELECT b.id, jb.job_id FROM builds b JOIN job_builds jb ON jb.build_id = b.id \
             JOIN jobs j ON j.id = jb.job_id WHERE b.status = 'pending' \
             AND b.inputs_pending = 1 AND j.pipeline_id = $1 ORDER BY b.id",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(InputsPendingBuild {
                    build_id: r.try_get("id")?,
                    job_id: r.try_get("job_id")?,
                })
            })
            .collect()
    }

    /// Fixes a manual build's inputs and plan once they resolve (it stays
    /// held until start limits allow it). False if it is no longer waiting
    /// for inputs (aborted, or another node got there first).
    pub async fn fix_build_inputs(
        &self,
        build_id: i64,
        job_id: i64,
        plan: &str,
        inputs: &[PlannedInput],
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE builds SET plan = $1, inputs_pending = 0 WHERE id = $2 \
             AND status = 'pending' AND inputs_pending = 1",
        )
        .bind(plan)
        .bind(build_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        insert_inputs(&mut tx, build_id, job_id, inputs).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The pipeline's running and held job builds.
    pub async fn start_state(&self, pipeline_id: i64) -> Result<StartState, StoreError> {
        let rows = sqlx::query(
            "SELECT b.id, b.status, b.held, b.inputs_pending, jb.job_id FROM builds b \
             JOIN job_builds jb ON jb.build_id = b.id JOIN jobs j ON j.id = jb.job_id \
             WHERE b.status IN ('pending', 'started') AND j.pipeline_id = $1 ORDER BY b.id",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        let mut out = StartState::default();
        for r in rows {
            let id: i64 = r.try_get("id")?;
            let job: i64 = r.try_get("job_id")?;
            let status: String = r.try_get("status")?;
            let held = r.try_get::<i64, _>("held")? != 0;
            let inputs_pending = r.try_get::<i64, _>("inputs_pending")? != 0;
            if status == "started" || !held {
                out.running.push(RunningBuild { id, job });
            } else if !inputs_pending {
                out.held.push(PendingBuild { id, job });
            }
        }
        Ok(out)
    }

    /// Lets the engine claim these held builds.
    pub async fn release_held_builds(&self, ids: &[i64]) -> Result<(), StoreError> {
        for id in ids {
            sqlx::query("UPDATE builds SET held = 0 WHERE id = $1 AND status = 'pending'")
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Records why the job waits (JSON), or that it does not.
    pub async fn set_job_waiting(
        &self,
        job_id: i64,
        waiting: Option<&str>,
    ) -> Result<(), StoreError> {
        // Unchanged reasons are not written again: each pass decides every
        // job, and most of them wait for the same thing as before.
        sqlx::query(
            "UPDATE jobs SET waiting = $1 WHERE id = $2 \
             AND COALESCE(waiting, '') <> COALESCE($1, '')",
        )
        .bind(waiting)
        .bind(job_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Why the job waits, as the scheduler last recorded it (JSON).
    pub async fn job_waiting(&self, job_id: i64) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT waiting FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("waiting")).transpose()?.flatten())
    }
}

/// Records a build's inputs in one statement (a job has a handful; far
/// below either database's limit on bound values).
async fn insert_inputs(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    build_id: i64,
    job_id: i64,
    inputs: &[PlannedInput],
) -> Result<(), StoreError> {
    if inputs.is_empty() {
        return Ok(());
    }
    let rows = placeholder_groups(3, inputs.len(), 3, ", ", |p| {
        format!("($1, $2, {})", p.join(", "))
    });
    let sql = format!(
        "INSERT INTO build_inputs (build_id, job_id, name, resource_id, version_id) VALUES {rows} \
         ON CONFLICT (build_id, name) DO NOTHING"
    );
    let mut q = sqlx::query(&sql).bind(build_id).bind(job_id);
    for i in inputs {
        q = q.bind(&i.name).bind(i.resource_id).bind(i.version_id);
    }
    q.execute(&mut **tx).await?;
    Ok(())
}

#[cfg(test)]
mod tests;

impl Store {
    /// What the scheduler compares to skip jobs whose decision cannot have
    /// changed: per resource its scope's newest check order, its disabled
    /// versions and its API pin; per active job its newest build. Two
    /// indexed queries, whatever the history's size.
    pub async fn scheduling_stamps(
        &self,
        pipeline_id: i64,
    ) -> Result<hangar_core::scheduling::PipelineStamps, StoreError> {
        use hangar_core::scheduling::{BuildStamp, PipelineStamps, ResourceStamp};
        let mut out = PipelineStamps::default();
        let rows = sqlx::query(
            "SELECT r.name, r.api_pinned_version_id, \
             (SELECT MAX(v.check_order) FROM resource_versions v WHERE v.scope_id = r.scope_id) AS top, \
             (SELECT COUNT(*) FROM resource_disabled_versions d WHERE d.resource_id = r.id) AS disabled, \
             CAST((SELECT SUM(d.version_id) FROM resource_disabled_versions d WHERE d.resource_id = r.id) AS BIGINT) AS disabled_sum \
             FROM resources r WHERE r.pipeline_id = $1",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            out.resources.insert(
                r.try_get("name")?,
                ResourceStamp {
                    newest_check_order: r.try_get::<Option<i64>, _>("top")?.unwrap_or(0),
                    disabled: (
                        r.try_get::<Option<i64>, _>("disabled")?.unwrap_or(0),
                        r.try_get::<Option<i64>, _>("disabled_sum")?.unwrap_or(0),
                    ),
                    api_pin: r.try_get("api_pinned_version_id")?,
                },
            );
        }
        let rows = sqlx::query(
            "SELECT j.name, jb.build_number, b.status, \
             (SELECT y.build_number FROM job_builds y JOIN builds yb ON yb.id = y.build_id \
              WHERE y.job_id = j.id AND yb.status = 'succeeded' \
              ORDER BY y.build_number DESC LIMIT 1) AS newest_succeeded \
             FROM jobs j \
             LEFT JOIN job_builds jb ON jb.job_id = j.id AND jb.build_number = \
             (SELECT MAX(x.build_number) FROM job_builds x WHERE x.job_id = j.id) \
             LEFT JOIN builds b ON b.id = jb.build_id \
             WHERE j.pipeline_id = $1 AND j.active = 1",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            out.jobs.insert(
                r.try_get("name")?,
                BuildStamp {
                    number: r.try_get::<Option<i64>, _>("build_number")?.unwrap_or(0),
                    status: r
                        .try_get::<Option<String>, _>("status")?
                        .unwrap_or_default(),
                    newest_succeeded: r
                        .try_get::<Option<i64>, _>("newest_succeeded")?
                        .unwrap_or(0),
                },
            );
        }
        Ok(out)
    }
}
