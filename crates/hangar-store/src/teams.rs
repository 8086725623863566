//! Teams' auth configs, and renaming and destroying teams. The store keeps
//! a config as the JSON text web checked (`hangar_core::tenancy::TeamAuth`);
//! reading it back, web checks it again.

use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// A team and its auth config (JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamAuthRecord {
    pub name: String,
    pub auth: String,
}

/// What a set-team did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamSet {
    Created,
    Updated,
}

impl Store {
    /// Writes team `name`'s auth config. A team that does not exist is
    /// made only when `may_create` (an admin's set-team); else it is
    /// [`StoreError::NotFound`].
    pub async fn set_team_auth(
        &self,
        name: &str,
        auth: &str,
        may_create: bool,
        now: UnixMillis,
    ) -> Result<TeamSet, StoreError> {
        let updated = sqlx::query("UPDATE teams SET auth = $1 WHERE name = $2")
            .bind(auth)
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if updated > 0 {
            return Ok(TeamSet::Updated);
        }
        if !may_create {
            return Err(StoreError::NotFound(format!("team {name} not found")));
        }
        let made = sqlx::query(
            "INSERT INTO teams (name, created_at, auth) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET auth = excluded.auth",
        )
        .bind(name)
        .bind(now)
        .bind(auth)
        .execute(&self.pool)
        .await?;
        debug_assert_eq!(made.rows_affected(), 1);
        Ok(TeamSet::Created)
    }

    /// Every team with its auth config, by name.
    pub async fn team_auths(&self) -> Result<Vec<TeamAuthRecord>, StoreError> {
        let rows = sqlx::query("SELECT name, auth FROM teams ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TeamAuthRecord {
                    name: r.try_get("name")?,
                    auth: r.try_get("auth")?,
                })
            })
            .collect()
    }

    /// Renames a team; its pipelines, builds and versions go with it.
    pub async fn rename_team(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let taken = sqlx::query("SELECT 1 AS one FROM teams WHERE name = $1")
            .bind(to)
            .fetch_optional(&mut *tx)
            .await?;
        if taken.is_some() {
            return Err(StoreError::Conflict(format!("team {to} already exists")));
        }
        let renamed = sqlx::query("UPDATE teams SET name = $1 WHERE name = $2")
            .bind(to)
            .bind(from)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if renamed == 0 {
            return Err(StoreError::NotFound(format!("team {from} not found")));
        }
        // One-off builds name their team in a column of their own.
        sqlx::query("UPDATE builds SET team = $1 WHERE team = $2")
            .bind(to)
            .bind(from)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Destroys a team: each of its pipelines as `destroy_pipeline` does
    /// (their unfinished builds aborted), its one-off builds that have not
    /// finished aborted, then the team. The caller refuses `main`.
    pub async fn destroy_team(&self, name: &str, now: UnixMillis) -> Result<(), StoreError> {
        if self.team(name).await?.is_none() {
            return Err(StoreError::NotFound(format!("team {name} not found")));
        }
        for p in self.pipelines(name).await? {
            self.destroy_pipeline_record(name, &p, now).await?;
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE builds SET status = 'aborted', finished_at = $1, abort_requested_at = $1, \
             error = 'its team was destroyed before it started' \
             WHERE status = 'pending' AND team = $2",
        )
        .bind(now)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE builds SET abort_requested_at = COALESCE(abort_requested_at, $1) \
             WHERE status = 'started' AND team = $2",
        )
        .bind(now)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM teams WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
