//! Where a registration's generation comes from, and how the name's
//! previous holder is read so that no other registration of the name can
//! race it.
//!
//! SQLite: the `counters` row. Updating it first takes SQLite's write lock,
//! which serialises every registration (SQLite has one writer anyway).
//!
//! PostgreSQL: the `worker_generations` sequence, which hands out numbers
//! without a lock, and the name's row taken `FOR UPDATE`, so registrations
//! of different names run at once (10,000 workers starting together on
//! several web nodes) while two of one name still go one after the other.
//! A first registration of a name has no row to lock; of two at once, the
//! later insert fails on the primary key and is told to try again.
//!
//! Adopting a worker's generation floor that this database never issued
//! (`--accept-new-database`) moves the sequence forward with `setval`,
//! which is not atomic with a concurrent `nextval`. So every registration
//! holds a shared advisory lock while it takes a number, and an adoption
//! holds it exclusively: no number is taken while the sequence is moved.

use hangar_core::registration::KnownWorker;
use sqlx::{Any, Row, Transaction};

use crate::db::Store;
use crate::error::StoreError;
use crate::records::parse_state;
use crate::workers::Registration;

/// The advisory lock key of taking generation numbers (PostgreSQL).
const GENERATION_LOCK: i64 = 0x6861_6e67_6172_0001;

/// A registration's open transaction, its new generation, and what the
/// name held before.
pub(crate) type Taken = (Transaction<'static, Any>, i64, Option<KnownWorker>);

impl Store {
    pub(crate) async fn take_generation_sqlite(
        &self,
        reg: &Registration<'_>,
    ) -> Result<Taken, StoreError> {
        let mut tx = self.pool.begin().await?;
        let generation: i64 = sqlx::query(
            "UPDATE counters SET value = value + 1 WHERE name = 'generation' RETURNING value",
        )
        .fetch_one(&mut *tx)
        .await?
        .try_get("value")?;
        let generation = if reg.generation_floor >= generation {
            refuse_unless_accepted(reg, generation - 1)?;
            sqlx::query("UPDATE counters SET value = $1 WHERE name = 'generation' RETURNING value")
                .bind(reg.generation_floor + 1)
                .fetch_one(&mut *tx)
                .await?
                .try_get("value")?
        } else {
            generation
        };
        let previous = previous_holder(&mut tx, &reg.info.name, "").await?;
        Ok((tx, generation, previous))
    }

    pub(crate) async fn take_generation_postgres(
        &self,
        reg: &Registration<'_>,
    ) -> Result<Taken, StoreError> {
        // Numbers only grow, so a floor at or below what was issued before
        // this read can never reach the number taken below: only a floor
        // above it may need adopting, and only then is the lock exclusive.
        let issued = self.generations_issued().await?;
        let adopting = reg.generation_floor > issued;
        let mut tx = self.pool.begin().await?;
        let lock = if adopting {
            "SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock($1)) l"
        } else {
            "SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock_shared($1)) l"
        };
        sqlx::query(lock)
            .bind(GENERATION_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        let previous = previous_holder(&mut tx, &reg.info.name, " FOR UPDATE").await?;
        let generation: i64 = sqlx::query("SELECT nextval('worker_generations') AS value")
            .fetch_one(&mut *tx)
            .await?
            .try_get("value")?;
        if reg.generation_floor < generation {
            return Ok((tx, generation, previous));
        }
        refuse_unless_accepted(reg, generation - 1)?;
        if !adopting {
            // Another registration moved the sequence past what was read
            // above; with the lock shared it must not be moved here.
            return Err(StoreError::Conflict(format!(
                "worker {} registered while generation numbers were being moved; try again",
                reg.info.name
            )));
        }
        let generation: i64 = sqlx::query("SELECT setval('worker_generations', $1) AS value")
            .bind(reg.generation_floor + 1)
            .fetch_one(&mut *tx)
            .await?
            .try_get("value")?;
        Ok((tx, generation, previous))
    }

    /// The highest generation issued so far (PostgreSQL's sequence; it may
    /// be passed by the time the caller acts on it, never undone).
    async fn generations_issued(&self) -> Result<i64, StoreError> {
        let issued: i64 = sqlx::query(
            "SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END AS issued \
             FROM worker_generations",
        )
        .fetch_one(&self.pool)
        .await?
        .try_get("issued")?;
        Ok(issued)
    }
}

/// Refuses a floor this database never issued unless the operator accepted
/// a new database. `issued` is the highest number issued before this one.
fn refuse_unless_accepted(reg: &Registration<'_>, issued: i64) -> Result<(), StoreError> {
    if reg.accept_unissued_generation {
        return Ok(());
    }
    // A worker that was given a number this database never reached met
    // another database: this one is empty, restored or replaced. Going on
    // would tell the worker to destroy state web never knew, and could
    // hand out its generation again. Only an operator's say-so (accept)
    // goes on, past that number, so no generation is ever issued twice.
    Err(StoreError::DatabaseMismatch(format!(
        "worker {} was given generation {} but this database has issued only up to {issued}: \
         it is not the database the fleet registered with (empty, restored or replaced); \
         restore the right one, or start web with --accept-new-database to adopt this one",
        reg.info.name, reg.generation_floor
    )))
}

async fn previous_holder(
    tx: &mut Transaction<'static, Any>,
    name: &str,
    lock: &'static str,
) -> Result<Option<KnownWorker>, StoreError> {
    let sql =
        format!("SELECT state, state_identity, generation FROM workers WHERE name = $1{lock}");
    sqlx::query(&sql)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| -> Result<KnownWorker, StoreError> {
            Ok(KnownWorker {
                state: parse_state(&row)?,
                state_identity: row.try_get("state_identity")?,
                generation: row.try_get("generation")?,
            })
        })
        .transpose()
}
