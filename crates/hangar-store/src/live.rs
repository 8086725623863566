//! What the dashboard's live pages watch: one cheap read whose answer
//! changes whenever something a page shows changes (a build made, started
//! or ended, a pipeline or job paused, a check finished, a pin, a worker's
//! state or its counts), so open pages refresh only then.

use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// Each a number; together they are the fingerprint. Sums are cast so
/// that PostgreSQL answers a BIGINT (its SUM of BIGINT is NUMERIC).
const PARTS: [&str; 13] = [
    "SELECT COALESCE(MAX(id), 0) FROM builds",
    "SELECT COUNT(*) FROM builds WHERE status = 'pending'",
    "SELECT CAST(COALESCE(SUM(id), 0) AS BIGINT) FROM builds WHERE status = 'started'",
    "SELECT COUNT(*) FROM pipelines",
    "SELECT CAST(COALESCE(SUM(paused), 0) AS BIGINT) FROM pipelines",
    "SELECT COALESCE(MAX(updated_at), 0) FROM pipelines",
    "SELECT CAST(COALESCE(SUM(paused), 0) AS BIGINT) FROM jobs",
    "SELECT CAST(COALESCE(SUM(api_pinned_version_id), 0) AS BIGINT) FROM resources",
    "SELECT COALESCE(MAX(last_check_finished_at), 0) FROM resource_scopes",
    "SELECT COUNT(*) FROM workers",
    "SELECT COALESCE(MAX(state_changed_at), 0) FROM workers",
    "SELECT CAST(COALESCE(SUM(containers), 0) AS BIGINT) FROM workers",
    "SELECT CAST(COALESCE(SUM(volumes), 0) AS BIGINT) FROM workers",
];

impl Store {
    /// The dashboard's fingerprint of the installation (see the module
    /// docs): equal answers mean no page has anything new to show.
    pub async fn dashboard_fingerprint(&self) -> Result<String, StoreError> {
        let sql = format!(
            "SELECT {}",
            PARTS
                .iter()
                .enumerate()
                .map(|(i, q)| format!("({q}) AS p{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let row = sqlx::query(&sql).fetch_one(&self.pool).await?;
        let mut out = String::new();
        for i in 0..PARTS.len() {
            let n: i64 = row.try_get(i)?;
            out.push_str(&n.to_string());
            out.push(' ');
        }
        Ok(out)
    }
}
