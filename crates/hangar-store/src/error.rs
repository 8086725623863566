use hangar_core::fencing::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    /// The request contradicts the current state (pruning a running worker).
    #[error("{0}")]
    Conflict(String),
    /// A worker process's message was refused by generation fencing.
    #[error("{message}")]
    Refused { refusal: Refusal, message: String },
    /// A worker knows of a generation this database never issued.
    #[error("{0}")]
    DatabaseMismatch(String),
    /// The database is not the one web opened (its file was deleted or
    /// replaced, it answers with another id), or web refuses to start on it.
    #[error("{0}")]
    Lost(String),
    /// The database did not take a write (timed out, or its file cannot be
    /// looked at).
    #[error("{0}")]
    Unhealthy(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}
