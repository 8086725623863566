//! Teams, pipelines, their versioned configs, and the jobs, resources and
//! resource types derived from each config.
//!
//! Every lookup is scoped by team. A set writes a new config version and
//! re-derives the rows in one transaction; with an expected version it is a
//! conditional update of the pipeline row, so of two sets made from the same
//! version one wins and the other changes nothing.

use hangar_core::instance_vars::{InstanceVars, PipelineRef};
use hangar_core::pipeline::PipelineConfig;
use hangar_core::UnixMillis;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::db::Store;
use crate::error::{corrupt, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamRecord {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineRecord {
    pub id: i64,
    pub team: String,
    pub name: String,
    pub paused: bool,
    /// The current config version (1 after the first set).
    pub config_version: i64,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    /// The instance vars' canonical JSON; `{}` for a pipeline that is not
    /// an instance.
    pub instance_vars: String,
    /// Archived (`archive-pipeline`): paused with its config emptied until
    /// it is set again.
    pub archived: bool,
}

impl PipelineRecord {
    /// How fly names it: `name`, or `name/key:value,…` for an instance. Every
    /// store call that takes a pipeline takes this text.
    pub fn reference(&self) -> String {
        reference_text(&self.name, &self.instance_vars)
    }
}

/// [`PipelineRecord::reference`] of stored columns; vars that do not read
/// back (a row written by hand) show as their JSON.
pub(crate) fn reference_text(name: &str, vars_json: &str) -> String {
    match PipelineRef::from_stored(name, vars_json) {
        Ok(r) => r.to_string(),
        Err(_) => format!("{name}/{vars_json}"),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub id: i64,
    pub pipeline_id: i64,
    pub name: String,
    /// The job's config as JSON.
    pub config: String,
    pub paused: bool,
    /// False once the config no longer names the job; its history stays.
    pub active: bool,
    /// The number the job's next build takes (`P/J #N`).
    pub next_build_number: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRecord {
    pub id: i64,
    pub pipeline_id: i64,
    pub name: String,
    pub resource_type: String,
    /// `source` as JSON.
    pub source: String,
    /// The resource's whole config as JSON.
    pub config: String,
    /// The version the config pins (`version:`), as JSON.
    pub pinned: Option<String>,
    pub active: bool,
    /// The scope whose checks and versions it shares; set by every set.
    pub scope_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceTypeRecord {
    pub id: i64,
    pub pipeline_id: i64,
    pub name: String,
    pub resource_type: String,
    pub source: String,
    pub config: String,
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceVersionRecord {
    pub id: i64,
    /// The scope whose history it is (shared by resources of one type and
    /// source in a team).
    pub scope_id: i64,
    /// The version as JSON (`{"ref": "…"}`).
    pub version: String,
    /// Its metadata as JSON (a list of name/value pairs).
    pub metadata: String,
    pub check_order: i64,
    /// Not disabled for the resource it was read for.
    pub enabled: bool,
    pub created_at: UnixMillis,
}

/// What a set did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetOutcome {
    pub pipeline_id: i64,
    /// The version the set wrote.
    pub version: i64,
    /// True when the pipeline did not exist before.
    pub created: bool,
}

/// How a pipeline a set creates starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Paused,
    Unpaused,
}

/// A page of resource versions, newest first, by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VersionPage {
    pub limit: i64,
    /// Only versions with a smaller id (older).
    pub before: Option<i64>,
    /// Only versions with a larger id (newer).
    pub after: Option<i64>,
}

const PIPELINE_COLUMNS: &str = "p.id, t.name AS team, p.name, p.paused, p.config_version, \
     p.created_at, p.updated_at, p.instance_vars, p.archived";
const JOB_COLUMNS: &str = "id, pipeline_id, name, config, paused, active, next_build_number";
pub(crate) const RESOURCE_COLUMNS: &str =
    "id, pipeline_id, name, type, source, config, pinned, active, scope_id";
const TYPE_COLUMNS: &str = "id, pipeline_id, name, type, source, config, active";
/// A version's columns, read from `v`, and whether resource `$1` has it
/// enabled.
pub(crate) const VERSION_COLUMNS: &str = "v.id, v.scope_id, v.version, v.metadata, v.check_order, \
     v.created_at, CASE WHEN EXISTS (SELECT 1 FROM resource_disabled_versions d \
     WHERE d.resource_id = $1 AND d.version_id = v.id) THEN 0 ELSE 1 END AS enabled";

fn flag(r: &AnyRow, column: &str) -> Result<bool, StoreError> {
    Ok(r.try_get::<i64, _>(column)? != 0)
}

fn pipeline_from_row(r: &AnyRow) -> Result<PipelineRecord, StoreError> {
    Ok(PipelineRecord {
        id: r.try_get("id")?,
        team: r.try_get("team")?,
        name: r.try_get("name")?,
        paused: flag(r, "paused")?,
        config_version: r.try_get("config_version")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        instance_vars: r.try_get("instance_vars")?,
        archived: flag(r, "archived")?,
    })
}

fn job_from_row(r: &AnyRow) -> Result<JobRecord, StoreError> {
    Ok(JobRecord {
        id: r.try_get("id")?,
        pipeline_id: r.try_get("pipeline_id")?,
        name: r.try_get("name")?,
        config: r.try_get("config")?,
        paused: flag(r, "paused")?,
        active: flag(r, "active")?,
        next_build_number: r.try_get("next_build_number")?,
    })
}

pub(crate) fn resource_from_row(r: &AnyRow) -> Result<ResourceRecord, StoreError> {
    Ok(ResourceRecord {
        id: r.try_get("id")?,
        pipeline_id: r.try_get("pipeline_id")?,
        name: r.try_get("name")?,
        resource_type: r.try_get("type")?,
        source: r.try_get("source")?,
        config: r.try_get("config")?,
        pinned: r.try_get("pinned")?,
        active: flag(r, "active")?,
        scope_id: r.try_get("scope_id")?,
    })
}

fn type_from_row(r: &AnyRow) -> Result<ResourceTypeRecord, StoreError> {
    Ok(ResourceTypeRecord {
        id: r.try_get("id")?,
        pipeline_id: r.try_get("pipeline_id")?,
        name: r.try_get("name")?,
        resource_type: r.try_get("type")?,
        source: r.try_get("source")?,
        config: r.try_get("config")?,
        active: flag(r, "active")?,
    })
}

pub(crate) fn version_from_row(r: &AnyRow) -> Result<ResourceVersionRecord, StoreError> {
    Ok(ResourceVersionRecord {
        id: r.try_get("id")?,
        scope_id: r.try_get("scope_id")?,
        version: r.try_get("version")?,
        metadata: r.try_get("metadata")?,
        check_order: r.try_get("check_order")?,
        enabled: flag(r, "enabled")?,
        created_at: r.try_get("created_at")?,
    })
}

pub(crate) fn json(value: &impl serde::Serialize) -> String {
    // Serialising the core's config types cannot fail: their maps have text
    // keys and their values are JSON values already.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

fn parse_reference(team: &str, reference: &str) -> Result<PipelineRef, StoreError> {
    PipelineRef::parse(reference).map_err(|e| {
        StoreError::NotFound(format!(
            "pipeline {team}/{} not found: {e}",
            hangar_core::names::shorten(reference)
        ))
    })
}

fn not_found_pipeline(team: &str, name: &str) -> StoreError {
    StoreError::NotFound(format!("pipeline {team}/{name} not found"))
}

/// The rows one config section derives: name, the name it had before
/// (`old_name`), and the columns written.
struct Derived {
    name: String,
    old_name: Option<String>,
    resource_type: String,
    source: String,
    config: String,
    pinned: Option<String>,
}

impl Store {
    pub async fn team(&self, name: &str) -> Result<Option<TeamRecord>, StoreError> {
        let row = sqlx::query("SELECT id, name FROM teams WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(TeamRecord {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
            })
        })
        .transpose()
    }

    /// Makes team `name` unless it exists; answers it either way. The
    /// caller checks the name (`validate_label`).
    pub async fn create_team(&self, name: &str, now: UnixMillis) -> Result<TeamRecord, StoreError> {
        sqlx::query(
            "INSERT INTO teams (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(now)
        .execute(&self.pool)
        .await?;
        self.team(name)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("team {name} not found")))
    }

    /// Every team, by name.
    pub async fn teams(&self) -> Result<Vec<TeamRecord>, StoreError> {
        let rows = sqlx::query("SELECT id, name FROM teams ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TeamRecord {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                })
            })
            .collect()
    }

    async fn team_id(&self, team: &str) -> Result<i64, StoreError> {
        self.team(team)
            .await?
            .map(|t| t.id)
            .ok_or_else(|| StoreError::NotFound(format!("team {team} not found")))
    }

    /// Stores `config` as the pipeline's next version and derives its jobs,
    /// resources and resource types, in one transaction. `expected`: the
    /// version the caller's change was made from (0: the pipeline must not
    /// exist yet); another version is a [`StoreError::Conflict`] and nothing
    /// changes. An unknown team is [`StoreError::NotFound`].
    /// A pipeline it creates starts paused, as `fly set-pipeline`'s.
    pub async fn set_pipeline(
        &self,
        team: &str,
        name: &str,
        config: &PipelineConfig,
        expected: Option<i64>,
        now: UnixMillis,
    ) -> Result<SetOutcome, StoreError> {
        self.set_pipeline_as(team, name, config, expected, Created::Paused, now)
            .await
    }

    /// [`Store::set_pipeline`], a pipeline it creates starting as
    /// `created` says (a `set_pipeline` step's starts unpaused, as in
    /// Concourse). An existing pipeline keeps its paused flag.
    pub async fn set_pipeline_as(
        &self,
        team: &str,
        name: &str,
        config: &PipelineConfig,
        expected: Option<i64>,
        created: Created,
        now: UnixMillis,
    ) -> Result<SetOutcome, StoreError> {
        let r = parse_reference(team, name)?;
        self.set_pipeline_instance(
            team,
            &r.name,
            &r.instance_vars,
            config,
            expected,
            created,
            now,
        )
        .await
    }

    /// [`Store::set_pipeline_as`] for the instance of `name` with `vars`
    /// (empty vars: the plain pipeline).
    #[allow(clippy::too_many_arguments)]
    pub async fn set_pipeline_instance(
        &self,
        team: &str,
        name: &str,
        vars: &InstanceVars,
        config: &PipelineConfig,
        expected: Option<i64>,
        created: Created,
        now: UnixMillis,
    ) -> Result<SetOutcome, StoreError> {
        let vars_json = vars.canonical_json();
        let team_id = self.team_id(team).await?;
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO pipelines (team_id, name, paused, config_version, created_at, updated_at, \
             instance_vars, ordering) VALUES ($1, $2, $3, 1, $4, $4, $5, \
             (SELECT COALESCE(MAX(o.ordering), 0) + 1 FROM pipelines o WHERE o.team_id = $1)) \
             ON CONFLICT (team_id, name, instance_vars) DO NOTHING RETURNING id",
        )
        .bind(team_id)
        .bind(name)
        .bind(i64::from(created == Created::Paused))
        .bind(now)
        .bind(&vars_json)
        .fetch_optional(&mut *tx)
        .await?;
        let conflict = |found: &str| {
            StoreError::Conflict(format!(
                "pipeline {team}/{name} is at {found}, not at version {} that this change was \
                 made from: it was changed meanwhile; fetch it again and retry",
                expected.unwrap_or_default()
            ))
        };
        let (pipeline_id, version, created) = match inserted {
            Some(row) => {
                if matches!(expected, Some(v) if v != 0) {
                    return Err(conflict("no version (it does not exist)"));
                }
                (row.try_get::<i64, _>("id")?, 1, true)
            }
            None => {
                // The row lock this update takes (PostgreSQL) or the
                // database's write lock (SQLite) holds off a concurrent set
                // until commit; it then re-reads the version and misses.
                let updated = sqlx::query(
                    "UPDATE pipelines SET config_version = config_version + 1, updated_at = $1, \
                     archived = 0 \
                     WHERE team_id = $2 AND name = $3 AND instance_vars = $5 \
                     AND ($4 < 0 OR config_version = $4) \
                     RETURNING id, config_version",
                )
                .bind(now)
                .bind(team_id)
                .bind(name)
                .bind(expected.unwrap_or(-1))
                .bind(&vars_json)
                .fetch_optional(&mut *tx)
                .await?;
                match updated {
                    Some(row) => (row.try_get("id")?, row.try_get("config_version")?, false),
                    None => {
                        let found: Option<i64> = sqlx::query(
                            "SELECT config_version FROM pipelines \
                             WHERE team_id = $1 AND name = $2 AND instance_vars = $3",
                        )
                        .bind(team_id)
                        .bind(name)
                        .bind(&vars_json)
                        .fetch_optional(&mut *tx)
                        .await?
                        .map(|r| r.try_get("config_version"))
                        .transpose()?;
                        return Err(conflict(&match found {
                            Some(v) => format!("version {v}"),
                            None => "no version (it was destroyed)".to_string(),
                        }));
                    }
                }
            }
        };
        sqlx::query(
            "INSERT INTO pipeline_configs (pipeline_id, version, config, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(pipeline_id)
        .bind(version)
        .bind(json(config))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        derive_jobs(&mut tx, pipeline_id, config).await?;
        let resources: Vec<Derived> = config
            .resources
            .iter()
            .map(|r| Derived {
                name: r.name.clone(),
                old_name: r.old_name.clone(),
                resource_type: r.resource_type.clone(),
                source: json(&r.source),
                config: json(r),
                pinned: r.version.as_ref().map(json),
            })
            .collect();
        derive_rows(&mut tx, "resources", pipeline_id, &resources).await?;
        let types: Vec<Derived> = config
            .resource_types
            .iter()
            .map(|t| Derived {
                name: t.name.clone(),
                old_name: None,
                resource_type: t.resource_type.clone(),
                source: json(&t.source),
                config: json(t),
                pinned: None,
            })
            .collect();
        derive_rows(&mut tx, "resource_types", pipeline_id, &types).await?;
        crate::scopes::assign_scopes(&mut tx, team_id, pipeline_id, config, now).await?;
        crate::checks::refresh_pipeline_schedules(&mut tx, pipeline_id, now).await?;
        tx.commit().await?;
        Ok(SetOutcome {
            pipeline_id,
            version,
            created,
        })
    }

    /// The team and pipeline (its reference) a job build belongs to; none for a build of
    /// the plan API, or once its pipeline was destroyed.
    pub async fn build_pipeline(
        &self,
        build_id: i64,
    ) -> Result<Option<(String, String)>, StoreError> {
        let row = sqlx::query(
            "SELECT t.name AS team, p.name AS pipeline, p.instance_vars FROM job_builds jb \
             JOIN jobs j ON j.id = jb.job_id \
             JOIN pipelines p ON p.id = j.pipeline_id \
             JOIN teams t ON t.id = p.team_id \
             WHERE jb.build_id = $1",
        )
        .bind(build_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            let name: String = r.try_get("pipeline")?;
            let vars: String = r.try_get("instance_vars")?;
            Ok((r.try_get("team")?, reference_text(&name, &vars)))
        })
        .transpose()
    }

    /// The team's pipelines, oldest first.
    pub async fn pipelines(&self, team: &str) -> Result<Vec<PipelineRecord>, StoreError> {
        let team_id = self.team_id(team).await?;
        let rows = sqlx::query(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines p JOIN teams t ON t.id = p.team_id \
             WHERE p.team_id = $1 ORDER BY p.ordering, p.id"
        ))
        .bind(team_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(pipeline_from_row).collect()
    }

    /// Orders a team's pipelines (Concourse's `order-pipelines`): those
    /// named in `names` first, in that order (an instance group moves
    /// whole), then the others as they were. A name the team has no
    /// pipeline of is [`StoreError::NotFound`], and nothing changes.
    pub async fn order_pipelines(&self, team: &str, names: &[String]) -> Result<(), StoreError> {
        let current = self.pipelines(team).await?;
        if let Some(missing) = names
            .iter()
            .find(|n| !current.iter().any(|p| &p.name == *n))
        {
            return Err(StoreError::NotFound(format!(
                "pipeline {team}/{missing} not found"
            )));
        }
        let mut order: Vec<&str> = Vec::new();
        for name in names
            .iter()
            .map(String::as_str)
            .chain(current.iter().map(|p| p.name.as_str()))
        {
            if !order.contains(&name) {
                order.push(name);
            }
        }
        let team_id = self.team_id(team).await?;
        let mut tx = self.pool.begin().await?;
        for (i, name) in order.iter().enumerate() {
            sqlx::query("UPDATE pipelines SET ordering = $1 WHERE team_id = $2 AND name = $3")
                .bind(i64::try_from(i).unwrap_or(i64::MAX) + 1)
                .bind(team_id)
                .bind(*name)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every team's pipelines, by team name, each team's in its order.
    pub async fn all_pipelines(&self) -> Result<Vec<PipelineRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines p JOIN teams t ON t.id = p.team_id \
             ORDER BY t.name, p.ordering, p.id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(pipeline_from_row).collect()
    }

    /// One pipeline by its reference (`name`, or `name/key:value,…` for an
    /// instance, see [`PipelineRef`]); [`StoreError::NotFound`] for an
    /// unknown team or pipeline, or a reference that cannot name one.
    pub async fn pipeline(
        &self,
        team: &str,
        reference: &str,
    ) -> Result<PipelineRecord, StoreError> {
        let r = parse_reference(team, reference)?;
        self.pipeline_instance(team, &r.name, &r.instance_vars)
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) => not_found_pipeline(team, reference),
                e => e,
            })
    }

    /// The instance of `name` with `vars`; [`StoreError::NotFound`] when the
    /// team has none.
    pub async fn pipeline_instance(
        &self,
        team: &str,
        name: &str,
        vars: &InstanceVars,
    ) -> Result<PipelineRecord, StoreError> {
        let team_id = self.team_id(team).await?;
        let row = sqlx::query(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines p JOIN teams t ON t.id = p.team_id \
             WHERE p.team_id = $1 AND p.name = $2 AND p.instance_vars = $3"
        ))
        .bind(team_id)
        .bind(name)
        .bind(vars.canonical_json())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => pipeline_from_row(&r),
            None => Err(not_found_pipeline(team, name)),
        }
    }

    /// A config version of the pipeline (the current one by default), as
    /// JSON, with its number.
    pub async fn pipeline_config(
        &self,
        team: &str,
        name: &str,
        version: Option<i64>,
    ) -> Result<(i64, Value), StoreError> {
        let pipeline = self.pipeline(team, name).await?;
        let version = version.unwrap_or(pipeline.config_version);
        let row = sqlx::query(
            "SELECT pipeline_id, version, config FROM pipeline_configs \
             WHERE pipeline_id = $1 AND version = $2",
        )
        .bind(pipeline.id)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!(
                "pipeline {team}/{name} has no config version {version}"
            ))
        })?;
        let text: String = row.try_get("config")?;
        let value = serde_json::from_str(&text).map_err(|e| {
            corrupt(
                &row,
                "pipeline_configs",
                &["pipeline_id", "version"],
                "config",
                e,
            )
        })?;
        Ok((version, value))
    }

    /// Removes the pipeline and everything under it (configs, jobs,
    /// resources). Version histories stay with their scopes.
    pub async fn destroy_pipeline(
        &self,
        team: &str,
        name: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let pipeline = self.pipeline(team, name).await?;
        self.destroy_pipeline_record(team, &pipeline, now).await
    }

    /// Destroys a pipeline already looked up (see `destroy_pipeline`).
    pub(crate) async fn destroy_pipeline_record(
        &self,
        team: &str,
        pipeline: &PipelineRecord,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let team_id = self.team_id(team).await?;
        let mut tx = self.pool.begin().await?;
        // Its builds that have not finished end with it, as in Concourse:
        // a pending one is aborted now, a running one is asked to stop
        // (the node running it aborts it at its next look). Left alone,
        // they would wait for workers, or run, for a pipeline that is gone.
        let of_pipeline = "id IN (SELECT jb.build_id FROM job_builds jb JOIN jobs j \
             ON j.id = jb.job_id WHERE j.pipeline_id = $2)";
        sqlx::query(&format!(
            "UPDATE builds SET status = 'aborted', finished_at = $1, abort_requested_at = $1, \
             error = 'its pipeline was destroyed before it started' \
             WHERE status = 'pending' AND {of_pipeline}"
        ))
        .bind(now)
        .bind(pipeline.id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "UPDATE builds SET abort_requested_at = COALESCE(abort_requested_at, $1) \
             WHERE status = 'started' AND {of_pipeline}"
        ))
        .bind(now)
        .bind(pipeline.id)
        .execute(&mut *tx)
        .await?;
        // Children first, explicitly: the cascade would do it, but an
        // explicit order keeps a foreign key added later from wedging this.
        // Versions belong to scopes, which other pipelines may share;
        // only this pipeline's disabled marks go.
        sqlx::query(
            "DELETE FROM resource_disabled_versions WHERE resource_id IN \
             (SELECT id FROM resources WHERE pipeline_id = $1)",
        )
        .bind(pipeline.id)
        .execute(&mut *tx)
        .await?;
        // Its jobs' builds stay, as one-off builds; only their numbering goes.
        sqlx::query(
            "DELETE FROM job_builds WHERE job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1)",
        )
        .bind(pipeline.id)
        .execute(&mut *tx)
        .await?;
        for table in ["resources", "resource_types", "jobs", "pipeline_configs"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE pipeline_id = $1"))
                .bind(pipeline.id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM pipelines WHERE id = $1")
            .bind(pipeline.id)
            .execute(&mut *tx)
            .await?;
        crate::scopes::delete_orphan_scopes(&mut tx, team_id).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn set_pipeline_paused(
        &self,
        team: &str,
        name: &str,
        paused: bool,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let pipeline = self.pipeline(team, name).await?;
        if pipeline.archived && !paused {
            return Err(StoreError::Conflict(format!(
                "pipeline {team}/{name} is archived: set it again (set-pipeline) to bring it back"
            )));
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE pipelines SET paused = $1, updated_at = $2 WHERE id = $3")
            .bind(i64::from(paused))
            .bind(now)
            .bind(pipeline.id)
            .execute(&mut *tx)
            .await?;
        // Paused pipelines' resources are not checked, as in Concourse.
        crate::checks::refresh_pipeline_schedules(&mut tx, pipeline.id, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Archives a pipeline (Concourse's `archive-pipeline`): its config is
    /// emptied, so its jobs, resources and types go inactive and nothing
    /// checks or builds, and it is paused; its builds and versions stay.
    /// Setting it again brings it back, paused; unpausing it before is
    /// refused.
    pub async fn archive_pipeline(
        &self,
        team: &str,
        name: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let pipeline = self.pipeline(team, name).await?;
        self.set_pipeline_as(
            team,
            name,
            &PipelineConfig::default(),
            None,
            Created::Paused,
            now,
        )
        .await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE pipelines SET archived = 1, paused = 1, updated_at = $1 WHERE id = $2")
            .bind(now)
            .bind(pipeline.id)
            .execute(&mut *tx)
            .await?;
        crate::checks::refresh_pipeline_schedules(&mut tx, pipeline.id, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Renames a pipeline; its id, versions, jobs and resources stay. A
    /// name already taken in the team is a [`StoreError::Conflict`].
    pub async fn rename_pipeline(
        &self,
        team: &str,
        name: &str,
        new_name: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let pipeline = self.pipeline(team, name).await?;
        if pipeline.name == new_name {
            return Ok(());
        }
        // An instance moves into the group of the new name, keeping its vars.
        let moved = reference_text(new_name, &pipeline.instance_vars);
        let taken = sqlx::query(
            "SELECT id FROM pipelines WHERE team_id = (SELECT team_id FROM pipelines WHERE id = $1) \
             AND name = $2 AND instance_vars = $3",
        )
        .bind(pipeline.id)
        .bind(new_name)
        .bind(&pipeline.instance_vars)
        .fetch_optional(&self.pool)
        .await?;
        if taken.is_some() {
            return Err(StoreError::Conflict(format!(
                "pipeline {team}/{moved} already exists"
            )));
        }
        let result = sqlx::query("UPDATE pipelines SET name = $1, updated_at = $2 WHERE id = $3")
            .bind(new_name)
            .bind(now)
            .bind(pipeline.id)
            .execute(&self.pool)
            .await;
        match result {
            Ok(_) => Ok(()),
            // A rename racing another to the same name: the unique index
            // decides.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(StoreError::Conflict(
                format!("pipeline {team}/{moved} already exists"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The pipeline's jobs in config order; with `include_inactive`, also
    /// the jobs the config no longer names (after the active ones).
    pub async fn jobs(
        &self,
        team: &str,
        pipeline: &str,
        include_inactive: bool,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let pipeline = self.pipeline(team, pipeline).await?;
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE pipeline_id = $1 AND (active = 1 OR $2 = 1) \
             ORDER BY active DESC, config_order, id"
        ))
        .bind(pipeline.id)
        .bind(i64::from(include_inactive))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// An active job of the pipeline.
    pub async fn job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<JobRecord, StoreError> {
        let p = self.pipeline(team, pipeline).await?;
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE pipeline_id = $1 AND name = $2 AND active = 1"
        ))
        .bind(p.id)
        .bind(job)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => job_from_row(&r),
            None => Err(StoreError::NotFound(format!(
                "job {pipeline}/{job} not found in team {team}"
            ))),
        }
    }

    pub async fn set_job_paused(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        paused: bool,
    ) -> Result<(), StoreError> {
        let job = self.job(team, pipeline, job).await?;
        sqlx::query("UPDATE jobs SET paused = $1 WHERE id = $2")
            .bind(i64::from(paused))
            .bind(job.id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The pipeline's active resources in config order.
    pub async fn resources(
        &self,
        team: &str,
        pipeline: &str,
    ) -> Result<Vec<ResourceRecord>, StoreError> {
        let p = self.pipeline(team, pipeline).await?;
        let rows = sqlx::query(&format!(
            "SELECT {RESOURCE_COLUMNS} FROM resources WHERE pipeline_id = $1 AND active = 1 \
             ORDER BY config_order, id"
        ))
        .bind(p.id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(resource_from_row).collect()
    }

    pub async fn resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<ResourceRecord, StoreError> {
        let p = self.pipeline(team, pipeline).await?;
        let row = sqlx::query(&format!(
            "SELECT {RESOURCE_COLUMNS} FROM resources WHERE pipeline_id = $1 AND name = $2 \
             AND active = 1"
        ))
        .bind(p.id)
        .bind(resource)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => resource_from_row(&r),
            None => Err(StoreError::NotFound(format!(
                "resource {pipeline}/{resource} not found in team {team}"
            ))),
        }
    }

    /// The pipeline's active resource types in config order.
    pub async fn pipeline_resource_types(
        &self,
        team: &str,
        pipeline: &str,
    ) -> Result<Vec<ResourceTypeRecord>, StoreError> {
        let p = self.pipeline(team, pipeline).await?;
        let rows = sqlx::query(&format!(
            "SELECT {TYPE_COLUMNS} FROM resource_types WHERE pipeline_id = $1 AND active = 1 \
             ORDER BY config_order, id"
        ))
        .bind(p.id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(type_from_row).collect()
    }
}

/// Renames rows whose config says `old_name` (when the new name is free),
/// so a renamed job or resource keeps its id and history, as Concourse's
/// `old_name` does.
async fn apply_old_names(
    tx: &mut Transaction<'static, Any>,
    table: &str,
    pipeline_id: i64,
    renames: impl Iterator<Item = (&str, &str)>,
) -> Result<(), StoreError> {
    for (old, new) in renames {
        sqlx::query(&format!(
            "UPDATE {table} SET name = $1 WHERE pipeline_id = $2 AND name = $3 \
             AND NOT EXISTS (SELECT 1 FROM {table} t2 WHERE t2.pipeline_id = $2 AND t2.name = $1)"
        ))
        .bind(new)
        .bind(pipeline_id)
        .bind(old)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

async fn derive_jobs(
    tx: &mut Transaction<'static, Any>,
    pipeline_id: i64,
    config: &PipelineConfig,
) -> Result<(), StoreError> {
    apply_old_names(
        tx,
        "jobs",
        pipeline_id,
        config
            .jobs
            .iter()
            .filter_map(|j| j.old_name.as_deref().map(|o| (o, j.name.as_str()))),
    )
    .await?;
    sqlx::query("UPDATE jobs SET active = 0 WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .execute(&mut **tx)
        .await?;
    for (order, job) in config.jobs.iter().enumerate() {
        sqlx::query(
            "INSERT INTO jobs (pipeline_id, name, config, paused, active, next_build_number, config_order) \
             VALUES ($1, $2, $3, 0, 1, 1, $4) \
             ON CONFLICT (pipeline_id, name) DO UPDATE SET config = excluded.config, active = 1, \
             config_order = excluded.config_order",
        )
        .bind(pipeline_id)
        .bind(&job.name)
        .bind(json(job))
        .bind(order as i64)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Resources or resource types (`table`), as [`derive_jobs`] for jobs.
async fn derive_rows(
    tx: &mut Transaction<'static, Any>,
    table: &str,
    pipeline_id: i64,
    rows: &[Derived],
) -> Result<(), StoreError> {
    apply_old_names(
        tx,
        table,
        pipeline_id,
        rows.iter()
            .filter_map(|r| r.old_name.as_deref().map(|o| (o, r.name.as_str()))),
    )
    .await?;
    sqlx::query(&format!(
        "UPDATE {table} SET active = 0 WHERE pipeline_id = $1"
    ))
    .bind(pipeline_id)
    .execute(&mut **tx)
    .await?;
    let pinned = if table == "resources" { ", pinned" } else { "" };
    let pinned_value = if table == "resources" { ", $7" } else { "" };
    let pinned_update = if table == "resources" {
        ", pinned = excluded.pinned"
    } else {
        ""
    };
    for (order, row) in rows.iter().enumerate() {
        let query = format!(
            "INSERT INTO {table} (pipeline_id, name, type, source, config, active, config_order{pinned}) \
             VALUES ($1, $2, $3, $4, $5, 1, $6{pinned_value}) \
             ON CONFLICT (pipeline_id, name) DO UPDATE SET type = excluded.type, \
             source = excluded.source, config = excluded.config, active = 1, \
             config_order = excluded.config_order{pinned_update}"
        );
        let mut q = sqlx::query(&query)
            .bind(pipeline_id)
            .bind(&row.name)
            .bind(&row.resource_type)
            .bind(&row.source)
            .bind(&row.config)
            .bind(order as i64);
        if table == "resources" {
            q = q.bind(row.pinned.clone());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
