use hangar_core::{EventKind, UnixMillis};
use sqlx::{Any, Transaction};

use crate::db::Store;
use crate::error::StoreError;
use crate::records::{event_from_row, EventRecord};

/// The most events one listing returns.
pub(crate) const MAX_EVENTS_PER_PAGE: i64 = 1000;

pub(crate) async fn record_event(
    tx: &mut Transaction<'_, Any>,
    worker: &str,
    kind: EventKind,
    cause: &str,
    generation: i64,
    at: UnixMillis,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO worker_events (worker, kind, cause, generation, at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(worker)
    .bind(kind.as_str())
    .bind(cause)
    .bind(generation)
    .bind(at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    /// Lifecycle events, newest first, optionally of one worker.
    pub async fn list_events(
        &self,
        worker: Option<&str>,
        limit: i64,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let limit = limit.clamp(1, MAX_EVENTS_PER_PAGE);
        let rows = match worker {
            Some(name) => {
                sqlx::query(
                    "SELECT id, worker, kind, cause, generation, at FROM worker_events \
                     WHERE worker = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(name)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT id, worker, kind, cause, generation, at FROM worker_events \
                     ORDER BY id DESC LIMIT $1",
                )
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter().map(event_from_row).collect()
    }
}
