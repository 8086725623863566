//! The heartbeat's one-statement path: every worker sends one every few
//! seconds, so the accepted case is a single `UPDATE` that also proves
//! the caller (see `hangar-web`'s `WorkerClaim`).

use hangar_core::{UnixMillis, WorkerState};

use crate::db::Store;
use crate::error::StoreError;
use crate::records::parse_state;

/// What one heartbeat records of its worker.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatRecord<'a> {
    pub name: &'a str,
    pub generation: i64,
    pub containers: i64,
    pub volumes: i64,
    /// The worker's view of its condition (JSON); `None` clears it.
    pub condition: Option<&'a str>,
}

impl Store {
    /// Records a heartbeat if `generation` is the worker's current
    /// registration, `secret_digest` the digest of that registration's
    /// secret, and the worker is not stalled; returns its state. `None`:
    /// nothing was recorded, and the caller finds out why.
    pub async fn heartbeat_proven(
        &self,
        beat: &HeartbeatRecord<'_>,
        secret_digest: &str,
        now: UnixMillis,
    ) -> Result<Option<WorkerState>, StoreError> {
        sqlx::query(
            "UPDATE workers SET last_heartbeat_at = $1, containers = $2, volumes = $3, condition = $4 \
             WHERE name = $5 AND generation = $6 AND token_hash = $7 AND state <> 'stalled' \
             RETURNING state",
        )
        .bind(now)
        .bind(beat.containers)
        .bind(beat.volumes)
        .bind(beat.condition)
        .bind(beat.name)
        .bind(beat.generation)
        .bind(secret_digest)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| parse_state(&row))
        .transpose()
    }
}
