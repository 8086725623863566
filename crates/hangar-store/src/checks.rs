//! The check loop's rows: which scopes are due, the claim one web node
//! holds while it checks one, what the check found, and explicit requests
//! (`check-resource`, webhooks).
//!
//! A claim is a conditional update (`claim_until < now`): of several nodes
//! on one database exactly one takes a scope (on PostgreSQL the second
//! update re-reads the row the first one committed and no longer matches).
//! The result is recorded only by the claim's owner, in one transaction
//! with the scope's next due time, so a node whose lease ran out changes
//! nothing.

use std::collections::HashMap;

use hangar_core::checks::{self, CheckSettings};
use hangar_core::UnixMillis;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use crate::db::Store;
use crate::error::StoreError;
use crate::pipelines::json;

/// How far past its check's timeout a claim is held: the node records the
/// timeout's failure within it.
pub const CLAIM_MARGIN_MS: i64 = 60_000;

/// A scope a node claimed: what to check, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedCheck {
    pub scope_id: i64,
    pub resource_type: String,
    pub source: Value,
    /// Asked for explicitly (a webhook, `check-resource`).
    pub requested: bool,
    /// The version to check from (`check-resource -f`).
    pub from: Option<Value>,
    pub timeout_ms: i64,
    /// Since when its checks have found no worker of the kind they need
    /// (none registered): web fails the check past its bound on that.
    pub waiting_since: Option<UnixMillis>,
    /// Why its last check was given back without running, if it was.
    pub waiting_reason: Option<String>,
}

/// A resource or resource type sharing a scope.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckMember {
    /// `resource` or `resource_type`.
    pub kind: String,
    pub team: String,
    /// Its pipeline's reference (`name`, or `name/key:value,…`).
    pub pipeline: String,
    pub pipeline_id: i64,
    pub name: String,
    /// Its config as the pipeline's set stored it.
    pub config: Value,
    pub paused: bool,
}

/// A scope's check state, shown on each of its resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStatus {
    pub last_started_at: Option<UnixMillis>,
    pub last_finished_at: Option<UnixMillis>,
    /// The last check's failure; `None` once a check succeeds.
    pub error: Option<String>,
    /// What the last check that succeeded printed; `None` after a failure.
    pub output: Option<String>,
    /// A requested check not yet started.
    pub requested_at: Option<UnixMillis>,
    /// A node holds the scope and is checking it.
    pub checking: bool,
    pub next_check_at: Option<UnixMillis>,
    /// Why the last check was given back without running (no worker fits
    /// it, …), until a check runs on a worker or ends.
    pub waiting_reason: Option<String>,
    /// Since when no worker of the kind the check needs is registered at
    /// all (the wait web bounds).
    pub waiting_since: Option<UnixMillis>,
    /// The longest a check of the scope runs.
    pub timeout_ms: i64,
}

const CLAIMED_COLUMNS: &str = "id, type, source, check_from, check_requested_at, \
     check_timeout_ms, check_waiting_since, check_waiting_reason";
const STATUS_COLUMNS: &str = "s.last_check_started_at, s.last_check_finished_at, \
     s.last_check_error, s.last_check_output, s.check_requested_at, s.claim_owner, s.next_check_at, \
     s.check_waiting_reason, s.check_waiting_since, s.check_timeout_ms";

fn text_json(row: &AnyRow, column: &str, id: i64) -> Result<Value, StoreError> {
    let text: String = row.try_get(column)?;
    serde_json::from_str(&text).map_err(|e| {
        StoreError::Corrupt(format!("resource_scopes row id {id}, column {column}: {e}"))
    })
}

fn claimed_from_row(row: &AnyRow) -> Result<ClaimedCheck, StoreError> {
    let id: i64 = row.try_get("id")?;
    let from = match row.try_get::<Option<String>, _>("check_from")? {
        Some(_) => Some(text_json(row, "check_from", id)?),
        None => None,
    };
    Ok(ClaimedCheck {
        scope_id: id,
        resource_type: row.try_get("type")?,
        source: text_json(row, "source", id)?,
        requested: row
            .try_get::<Option<i64>, _>("check_requested_at")?
            .is_some(),
        from,
        timeout_ms: row
            .try_get::<Option<i64>, _>("check_timeout_ms")?
            .unwrap_or(checks::DEFAULT_CHECK_TIMEOUT_MS),
        waiting_since: row.try_get("check_waiting_since")?,
        waiting_reason: row.try_get("check_waiting_reason")?,
    })
}

fn status_from_row(row: &AnyRow) -> Result<CheckStatus, StoreError> {
    Ok(CheckStatus {
        last_started_at: row.try_get("last_check_started_at")?,
        last_finished_at: row.try_get("last_check_finished_at")?,
        error: row.try_get("last_check_error")?,
        output: row.try_get("last_check_output")?,
        requested_at: row.try_get("check_requested_at")?,
        checking: row.try_get::<Option<String>, _>("claim_owner")?.is_some(),
        next_check_at: row.try_get("next_check_at")?,
        waiting_reason: row.try_get("check_waiting_reason")?,
        waiting_since: row.try_get("check_waiting_since")?,
        timeout_ms: row
            .try_get::<Option<i64>, _>("check_timeout_ms")?
            .unwrap_or(checks::DEFAULT_CHECK_TIMEOUT_MS),
    })
}

/// The members of a scope: active resources and resource types pointing
/// at it, with their pipeline's paused flag.
async fn members(conn: &mut AnyConnection, scope_id: i64) -> Result<Vec<CheckMember>, StoreError> {
    let member = |kind: &str, table: &str| {
        format!(
            "SELECT '{kind}' AS kind, t.name AS team, p.name AS pipeline, p.instance_vars, \
             p.id AS pipeline_id, \
             m.name, m.config, p.paused FROM {table} m JOIN pipelines p ON p.id = m.pipeline_id \
             JOIN teams t ON t.id = p.team_id WHERE m.scope_id = $1 AND m.active = 1"
        )
    };
    let rows = sqlx::query(&format!(
        "{} UNION ALL {} ORDER BY 5, 1, 6",
        member("resource", "resources"),
        member("resource_type", "resource_types")
    ))
    .bind(scope_id)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            let text: String = r.try_get("config")?;
            let name: String = r.try_get("name")?;
            let config = serde_json::from_str(&text).map_err(|e| {
                StoreError::Corrupt(format!("{name} of scope {scope_id}, column config: {e}"))
            })?;
            Ok(CheckMember {
                kind: r.try_get("kind")?,
                team: r.try_get("team")?,
                pipeline: crate::pipelines::reference_text(
                    &r.try_get::<String, _>("pipeline")?,
                    &r.try_get::<String, _>("instance_vars")?,
                ),
                pipeline_id: r.try_get("pipeline_id")?,
                name,
                config,
                paused: r.try_get::<i64, _>("paused")? != 0,
            })
        })
        .collect()
}

/// The scope's schedule: its interval from its members in unpaused
/// pipelines, its timeout from all (an explicit check runs in a paused
/// pipeline too).
fn schedule(members: &[CheckMember]) -> (Option<i64>, Option<i64>) {
    let settings = |unpaused_only: bool| {
        let of: Vec<CheckSettings> = members
            .iter()
            .filter(|m| !(unpaused_only && m.paused))
            .map(|m| checks::settings_of(&m.config))
            .collect();
        checks::scope_settings(&of)
    };
    (
        settings(true).and_then(|s| s.every_ms),
        settings(false).map(|s| s.timeout_ms),
    )
}

/// Writes the schedule of every scope the pipeline's active resources and
/// resource types use (after a set, a pause or an unpause): shared scopes
/// take the other pipelines' members into account.
pub(crate) async fn refresh_pipeline_schedules(
    conn: &mut AnyConnection,
    pipeline_id: i64,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let rows = sqlx::query(
        "SELECT scope_id FROM resources WHERE pipeline_id = $1 AND active = 1 \
         AND scope_id IS NOT NULL UNION \
         SELECT scope_id FROM resource_types WHERE pipeline_id = $1 AND active = 1 \
         AND scope_id IS NOT NULL",
    )
    .bind(pipeline_id)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        let scope: i64 = row.try_get("scope_id")?;
        let (every, timeout) = schedule(&members(conn, scope).await?);
        let last: Option<i64> =
            sqlx::query("SELECT last_check_finished_at FROM resource_scopes WHERE id = $1")
                .bind(scope)
                .fetch_one(&mut *conn)
                .await?
                .try_get("last_check_finished_at")?;
        // A scope under a claim keeps its lease as its due time.
        sqlx::query(
            "UPDATE resource_scopes SET check_every_ms = $1, check_timeout_ms = $2, \
             next_check_at = CASE WHEN claim_owner IS NULL THEN $3 ELSE next_check_at END \
             WHERE id = $4",
        )
        .bind(every)
        .bind(timeout)
        .bind(checks::next_check_at(every, last, now))
        .bind(scope)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

impl Store {
    /// Claims up to `limit` scopes for `owner`: first those asked for
    /// explicitly, then those due by `now`, each until its timeout plus
    /// [`CLAIM_MARGIN_MS`]. A scope another node holds is never taken.
    pub async fn claim_due_checks(
        &self,
        owner: &str,
        now: UnixMillis,
        limit: i64,
    ) -> Result<Vec<ClaimedCheck>, StoreError> {
        let mut claimed = Vec::new();
        for wanted in [
            "check_requested_at IS NOT NULL",
            "next_check_at IS NOT NULL AND next_check_at <= $2",
        ] {
            let left = limit - claimed.len() as i64;
            if left <= 0 {
                break;
            }
            let order = if wanted.starts_with("check_requested") {
                "check_requested_at"
            } else {
                "next_check_at"
            };
            let free = "(claim_until IS NULL OR claim_until < $2)";
            let lease = format!(
                "$2 + COALESCE(check_timeout_ms, {}) + {CLAIM_MARGIN_MS}",
                checks::DEFAULT_CHECK_TIMEOUT_MS
            );
            let rows = sqlx::query(&format!(
                "UPDATE resource_scopes SET claim_owner = $1, claim_until = {lease}, \
                 next_check_at = CASE WHEN check_every_ms IS NULL THEN NULL ELSE {lease} END, \
                 last_check_started_at = $2 \
                 WHERE id IN (SELECT id FROM resource_scopes WHERE {wanted} AND {free} \
                 ORDER BY {order} LIMIT $3) AND {wanted} AND {free} \
                 RETURNING {CLAIMED_COLUMNS}"
            ))
            .bind(owner)
            .bind(now)
            .bind(left)
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                claimed.push(claimed_from_row(row)?);
            }
        }
        Ok(claimed)
    }

    /// The resources and resource types sharing a scope.
    pub async fn check_members(&self, scope_id: i64) -> Result<Vec<CheckMember>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        members(&mut conn, scope_id).await
    }

    /// Records the end of `owner`'s check of a scope: the versions found
    /// (oldest first; each new one after those already there, a version
    /// seen before keeping its row) or the check's error, the scope's next
    /// due time, and the claim released; it no longer waits. A request
    /// made while the check ran is kept, so it gets a check of its own.
    /// Answers how many versions were new, or `None` when `owner` no
    /// longer holds the claim (nothing is written).
    /// Records what the check that just succeeded printed, right after its
    /// `finish_check` (which clears it; a failure recorded in between keeps
    /// it clear). The caller bounds it.
    pub async fn set_check_output(&self, scope_id: i64, output: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE resource_scopes SET last_check_output = $1 \
             WHERE id = $2 AND last_check_error IS NULL",
        )
        .bind(output)
        .bind(scope_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn finish_check(
        &self,
        scope_id: i64,
        owner: &str,
        versions: &[Value],
        error: Option<&str>,
        now: UnixMillis,
    ) -> Result<Option<usize>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let (every, timeout) = schedule(&members(&mut tx, scope_id).await?);
        let kept = "check_requested_at IS NOT NULL AND check_requested_at > last_check_started_at";
        let fenced = sqlx::query(&format!(
            "UPDATE resource_scopes SET last_check_finished_at = $1, last_check_error = $2, \
             last_check_output = NULL, \
             claim_owner = NULL, claim_until = NULL, check_every_ms = $3, check_timeout_ms = $4, \
             next_check_at = $5, check_waiting_reason = NULL, check_waiting_since = NULL, \
             check_from = CASE WHEN {kept} THEN check_from ELSE NULL END, \
             check_requested_at = CASE WHEN {kept} THEN check_requested_at ELSE NULL END \
             WHERE id = $6 AND claim_owner = $7"
        ))
        .bind(now)
        .bind(error)
        .bind(every)
        .bind(timeout)
        .bind(checks::next_check_at(every, Some(now), now))
        .bind(scope_id)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        if fenced.rows_affected() == 0 {
            return Ok(None);
        }
        let mut new = 0;
        for version in versions {
            let inserted = sqlx::query(
                "INSERT INTO resource_versions (scope_id, version, metadata, check_order, created_at) \
                 SELECT $1, $2, $3, COALESCE(MAX(check_order), 0) + 1, $4 FROM resource_versions \
                 WHERE scope_id = $1 ON CONFLICT (scope_id, version) DO NOTHING",
            )
            .bind(scope_id)
            .bind(json(version))
            .bind("[]")
            .bind(now)
            .execute(&mut *tx)
            .await?;
            new += inserted.rows_affected() as usize;
        }
        tx.commit().await?;
        Ok(Some(new))
    }

    /// Gives a claim back without a result (no worker could run the
    /// check, the node is stopping, or no member wants a check any more):
    /// the scope is due again at `retry_at` if its members still want
    /// periodic checks, and a request stays. `reason` is kept as why it
    /// waits; `lacking_since` is since when no worker of the kind it needs
    /// is registered at all (none: it waits for something else).
    pub async fn release_check(
        &self,
        scope_id: i64,
        owner: &str,
        retry_at: UnixMillis,
        reason: &str,
        lacking_since: Option<UnixMillis>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let (every, timeout) = schedule(&members(&mut tx, scope_id).await?);
        sqlx::query(
            "UPDATE resource_scopes SET claim_owner = NULL, claim_until = NULL, \
             check_every_ms = $1, check_timeout_ms = $2, next_check_at = $3, \
             check_waiting_reason = $4, check_waiting_since = $5 \
             WHERE id = $6 AND claim_owner = $7",
        )
        .bind(every)
        .bind(timeout)
        .bind(every.map(|_| retry_at))
        .bind(reason)
        .bind(lacking_since)
        .bind(scope_id)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// `owner`'s check of the scope found a worker and runs there: it no
    /// longer waits.
    pub async fn check_placed(&self, scope_id: i64, owner: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE resource_scopes SET check_waiting_reason = NULL, check_waiting_since = NULL \
             WHERE id = $1 AND claim_owner = $2",
        )
        .bind(scope_id)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Asks for a check of the scope now (from `from`, if given). Answers
    /// the time of the request: the check that answers it starts after it.
    pub async fn request_check(
        &self,
        scope_id: i64,
        from: Option<&Value>,
        now: UnixMillis,
    ) -> Result<UnixMillis, StoreError> {
        let done = sqlx::query(
            "UPDATE resource_scopes SET check_requested_at = $1, check_from = $2 WHERE id = $3",
        )
        .bind(now)
        .bind(from.map(json))
        .bind(scope_id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("scope {scope_id} not found")));
        }
        Ok(now)
    }

    /// A scope's check state.
    pub async fn check_status(&self, scope_id: i64) -> Result<CheckStatus, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {STATUS_COLUMNS} FROM resource_scopes s WHERE s.id = $1"
        ))
        .bind(scope_id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("scope {scope_id} not found")))?;
        status_from_row(&row)
    }

    /// The check state of each scope the pipeline's active resources use,
    /// by scope id.
    pub async fn pipeline_check_statuses(
        &self,
        pipeline_id: i64,
    ) -> Result<HashMap<i64, CheckStatus>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT s.id, {STATUS_COLUMNS} FROM resource_scopes s WHERE s.id IN \
             (SELECT scope_id FROM resources WHERE pipeline_id = $1 AND active = 1)"
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, status_from_row(r)?)))
            .collect()
    }

    /// The scope's newest version (by check order): what a check starts
    /// from, as Concourse gives `check` the current version.
    pub async fn latest_scope_version(&self, scope_id: i64) -> Result<Option<Value>, StoreError> {
        let row = sqlx::query(
            "SELECT id, version FROM resource_versions WHERE scope_id = $1 \
             ORDER BY check_order DESC LIMIT 1",
        )
        .bind(scope_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            let id: i64 = r.try_get("id")?;
            let text: String = r.try_get("version")?;
            serde_json::from_str(&text).map_err(|e| {
                StoreError::Corrupt(format!(
                    "resource_versions row id {id}, column version: {e}"
                ))
            })
        })
        .transpose()
    }

    /// The scope of a pipeline's active resource type.
    pub async fn resource_type_scope(
        &self,
        team: &str,
        pipeline: &str,
        name: &str,
    ) -> Result<i64, StoreError> {
        let p = self.pipeline(team, pipeline).await?;
        let row = sqlx::query(
            "SELECT scope_id FROM resource_types WHERE pipeline_id = $1 AND name = $2 \
             AND active = 1",
        )
        .bind(p.id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| r.try_get::<Option<i64>, _>("scope_id"))
            .transpose()?
            .flatten()
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "resource type {pipeline}/{name} not found in team {team}"
                ))
            })
    }
}
