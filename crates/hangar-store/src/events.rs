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

/// A build step the infrastructure retried because of a worker: a line of
/// its build's log naming the worker (see `StepFailure::describe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRetry {
    pub build_id: i64,
    pub build_name: String,
    pub step: Option<String>,
    pub line: String,
    pub at: UnixMillis,
}

impl Store {
    /// The newest `limit` infrastructure lines of build logs that name
    /// worker `name` (`worker NAME …`): the steps it lost and where they
    /// went. Read through the index of infrastructure lines.
    pub async fn worker_retries(
        &self,
        name: &str,
        limit: i64,
    ) -> Result<Vec<WorkerRetry>, StoreError> {
        use sqlx::Row;
        // `_` and `%` are common in names: escaped, they match themselves.
        let escaped: String = name
            .chars()
            .flat_map(|c| match c {
                '!' | '%' | '_' => vec!['!', c],
                c => vec![c],
            })
            .collect();
        let rows = sqlx::query(
            "SELECT e.build_id, b.name AS build_name, e.step, e.payload, e.at \
             FROM build_events e JOIN builds b ON b.id = e.build_id \
             WHERE e.kind = 'infra' AND e.payload LIKE $1 ESCAPE '!' \
             ORDER BY e.id DESC LIMIT $2",
        )
        .bind(format!("%worker {escaped} %"))
        .bind(limit.clamp(1, MAX_EVENTS_PER_PAGE))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(WorkerRetry {
                    build_id: r.try_get("build_id")?,
                    build_name: r.try_get("build_name")?,
                    step: r.try_get("step")?,
                    line: r.try_get("payload")?,
                    at: r.try_get("at")?,
                })
            })
            .collect()
    }
}
