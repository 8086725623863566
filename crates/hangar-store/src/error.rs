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
    /// A row holds a value the store cannot read back (an unknown enum
    /// word, malformed JSON); the message names the table, the row and the
    /// column.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A worker's API token that cannot be sealed, or whose stored value
    /// does not open: the store has no key or not the one it was sealed
    /// with, or the value was altered or copied from another worker's row.
    #[error("{0}")]
    Sealed(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

/// Reads the text column `column` of a `table` row and parses it; a value
/// that does not parse is [`StoreError::Corrupt`], naming the table, the row
/// (by the `keys` columns the query selected) and the column.
pub(crate) fn decode<T>(
    row: &sqlx::any::AnyRow,
    table: &str,
    keys: &[&str],
    column: &str,
) -> Result<T, StoreError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let text: String = sqlx::Row::try_get(row, column)?;
    text.parse()
        .map_err(|e| corrupt(row, table, keys, column, e))
}

/// [`StoreError::Corrupt`] for `column` of a `table` row.
pub(crate) fn corrupt(
    row: &sqlx::any::AnyRow,
    table: &str,
    keys: &[&str],
    column: &str,
    why: impl std::fmt::Display,
) -> StoreError {
    use sqlx::Row;
    let key: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            row.try_get::<String, _>(*k)
                .map(|v| format!("{k} {v:?}"))
                .or_else(|_| row.try_get::<i64, _>(*k).map(|v| format!("{k} {v}")))
                .ok()
        })
        .collect();
    let key = if key.is_empty() {
        "(key not read)".to_string()
    } else {
        key.join(", ")
    };
    StoreError::Corrupt(format!("{table} row {key}, column {column}: {why}"))
}
