//! Many rows at once, for benchmarks and large-fleet tests: a big fleet's
//! volume rows inserted in a few statements instead of one transaction each.

use hangar_core::UnixMillis;

use crate::db::Store;
use crate::error::StoreError;
use crate::volumes::NewVolume;

/// Rows per statement: 9 binds each stays under both databases' limits.
const ROWS_PER_STATEMENT: usize = 100;

impl Store {
    /// Inserts volume rows as they stand once made (`created`, present), many
    /// per statement, all in one transaction. Unlike
    /// [`Store::create_volume_row`] nothing is checked but the schema's own
    /// constraints: the workers must exist and parents must come before
    /// their children in `rows`. Returns how many rows were inserted.
    pub async fn insert_created_volumes(
        &self,
        rows: &[NewVolume],
        now: UnixMillis,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut inserted = 0;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let b = i * 8;
                    format!(
                        "(${}, ${}, 'created', ${}, ${}, ${}, ${}, ${}, ${}, NULL)",
                        b + 1,
                        b + 2,
                        b + 3,
                        b + 4,
                        b + 5,
                        b + 6,
                        b + 7,
                        b + 8
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO volumes (handle, worker_name, state, parent_handle, owner_kind, \
                 owner_id, strategy, size_bytes, created_at, missing_since) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql);
            for v in chunk {
                q = q
                    .bind(&v.handle)
                    .bind(&v.worker)
                    .bind(&v.parent)
                    .bind(v.owner_kind.as_str())
                    .bind(&v.owner_id)
                    .bind(v.strategy.as_str())
                    .bind(Option::<i64>::None)
                    .bind(now);
            }
            inserted += q.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(inserted)
    }
}
