//! One node at a time collects garbage.
//!
//! Every collector is safe to run on two nodes at once (each change
//! re-checks its row), but running it on every node multiplies its reads by
//! the number of nodes for nothing. On PostgreSQL a pass first takes a
//! transaction-scoped advisory lock and holds it (and one pooled
//! connection, idle in a transaction that has read nothing) until the pass
//! ends; a node that finds it taken skips its pass. A node that dies
//! mid-pass loses its connection, and the lock with it. SQLite has one
//! web node: the turn is always its.

use sqlx::{Any, Transaction};

use crate::db::{Backend, Store};
use crate::error::StoreError;

/// The advisory lock key of garbage collection (PostgreSQL).
const GC_LOCK: i64 = 0x6861_6e67_6172_0002;

/// This node's turn to collect garbage; it ends when this is dropped.
#[must_use = "the turn ends when this is dropped"]
pub struct GcTurn {
    _held: Option<Transaction<'static, Any>>,
}

impl std::fmt::Debug for GcTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcTurn").finish_non_exhaustive()
    }
}

/// Takes the lock, answering 1 when taken and 0 when another holds it.
const TRY_LOCK: &str =
    "SELECT CAST(CASE WHEN pg_try_advisory_xact_lock($1) THEN 1 ELSE 0 END AS BIGINT)";
/// Waits for the lock (`pg_advisory_xact_lock` returns void, which is not
/// decoded: the statement answers 1).
const LOCK: &str = "SELECT CAST(1 AS BIGINT) FROM (SELECT pg_advisory_xact_lock($1)) l";

impl Store {
    /// The turn to collect garbage, or `None` while another node has it.
    pub async fn try_gc_turn(&self) -> Result<Option<GcTurn>, StoreError> {
        self.gc_turn_with(TRY_LOCK).await
    }

    /// The turn to collect garbage, once no other node has it.
    pub async fn gc_turn(&self) -> Result<GcTurn, StoreError> {
        self.gc_turn_with(LOCK).await?.ok_or_else(|| {
            StoreError::Unhealthy(
                "the garbage collection lock answered that it was not taken".into(),
            )
        })
    }

    async fn gc_turn_with(&self, sql: &str) -> Result<Option<GcTurn>, StoreError> {
        if self.backend() == Backend::Sqlite {
            return Ok(Some(GcTurn { _held: None }));
        }
        let mut tx = self.pool.begin().await?;
        let taken: i64 = sqlx::query_scalar(sql)
            .bind(GC_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        Ok((taken == 1).then_some(GcTurn { _held: Some(tx) }))
    }
}
