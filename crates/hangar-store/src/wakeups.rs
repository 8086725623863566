//! Wake-ups between web nodes on one PostgreSQL: a node that saves a new
//! version, finishes a build or changes a pin says so on a channel, and
//! every node's scheduler looks at once instead of at its next tick. The
//! node holding a pipeline's lease may not be the one whose check found
//! the version. On SQLite (one node per file in practice) there is no
//! channel: the local wake-up and the tick are all there is.
//!
//! A wake-up is a hint, never the truth: a lost one costs at most one
//! scheduler interval, so sending never fails a caller and a dropped
//! listener is simply connected again.

use sqlx::postgres::PgListener;

use crate::{Backend, Store, StoreError};

/// The channel the scheduler's wake-ups go on.
const SCHEDULER_CHANNEL: &str = "hangar_scheduler";

impl Store {
    /// Tells every node listening (this one too) that jobs may have
    /// something to do. A no-op on SQLite.
    pub async fn notify_scheduler(&self) -> Result<(), StoreError> {
        if self.backend() != Backend::Postgres {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, '') AS sent")
            .bind(SCHEDULER_CHANNEL)
            .fetch_optional(&self.pool)
            .await?;
        Ok(())
    }

    /// A listener for [`Store::notify_scheduler`], on a connection of its
    /// own; `None` on SQLite.
    pub async fn scheduler_listener(&self) -> Result<Option<SchedulerListener>, StoreError> {
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        let mut listener = PgListener::connect(&self.url).await?;
        listener.listen(SCHEDULER_CHANNEL).await?;
        Ok(Some(SchedulerListener { listener }))
    }
}

/// Waits for other nodes' (and this node's) scheduler wake-ups.
pub struct SchedulerListener {
    listener: PgListener,
}

impl SchedulerListener {
    /// The next wake-up. A lost connection is connected again on the next
    /// call (wake-ups sent meanwhile are lost: the tick covers them); an
    /// error means reconnecting failed.
    pub async fn next(&mut self) -> Result<(), StoreError> {
        self.listener.recv().await?;
        Ok(())
    }
}
