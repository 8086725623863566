//! Volume stamps: what lets a quiet report skip reading its worker's rows.
//!
//! A report's answer is a pure function of the worker's volume rows and the
//! set of handles it lists (`hangar_core::volumes::plan_report`). Every
//! write to a row that the planner reads (a row made or deleted, its state
//! or missing mark changed) bumps its worker's stamp, in the same
//! transaction as the write. A report whose plan is empty (nothing to
//! mark, clear, delete or destroy) records the digest of its handle set
//! and the stamp it read with the rows, in one snapshot. The next report
//! with the same digest, while the stamp has not moved, would plan the
//! same rows to the same empty answer: it answers without reading them.
//!
//! The order matters where a bump cannot share the write's transaction:
//! a bump must land after (or with) its change, never before. A report
//! reading between a change and its bump records a stamp the bump then
//! moves past; one reading between a bump and its change would record the
//! new stamp over the old rows and hide the change for good.

use sha2::{Digest, Sha256};
use sqlx::{Any, Executor};

use crate::db::Backend;
use crate::error::StoreError;
use crate::handle_list::{in_list, json_list};

/// Bumps the stamps of `workers` (names; repeats are fine). A worker
/// without a stamp row gets one; names with no worker are ignored.
pub(crate) async fn bump<'e, E, S>(
    exec: E,
    backend: Backend,
    workers: &[S],
) -> Result<(), StoreError>
where
    E: Executor<'e, Database = Any>,
    S: AsRef<str>,
{
    if workers.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&str> = workers.iter().map(AsRef::as_ref).collect();
    // Sorted: two transactions bumping overlapping workers lock their rows
    // in the same order.
    names.sort_unstable();
    names.dedup();
    sqlx::query(&format!(
        "INSERT INTO worker_volume_stamps (worker_name, stamp) \
         SELECT name, 1 FROM workers WHERE {} ORDER BY name \
         ON CONFLICT (worker_name) DO UPDATE SET stamp = worker_volume_stamps.stamp + 1",
        in_list(backend, "name", 1)
    ))
    .bind(json_list(&names))
    .execute(exec)
    .await?;
    Ok(())
}

/// Records that `worker`'s report with `digest`, planned from the rows read
/// at `stamp`, was quiet; recorded only if `generation` is still current.
pub(crate) async fn record_quiet<'e, E>(
    exec: E,
    worker: &str,
    generation: i64,
    digest: &str,
    stamp: i64,
) -> Result<(), StoreError>
where
    E: Executor<'e, Database = Any>,
{
    // A worker without a stamp row was never changed since stamps began:
    // its stamp is 0, and a bump that lands before this insert leaves the
    // row at 1, past the recorded stamp.
    sqlx::query(
        "INSERT INTO worker_volume_stamps (worker_name, stamp, quiet_digest, quiet_stamp) \
         SELECT name, 0, $2, $3 FROM workers WHERE name = $1 AND generation = $4 \
         ON CONFLICT (worker_name) DO UPDATE SET quiet_digest = $2, quiet_stamp = $3",
    )
    .bind(worker)
    .bind(digest)
    .bind(stamp)
    .bind(generation)
    .execute(exec)
    .await?;
    Ok(())
}

/// The digest of a report's handles as a set: order and repeats do not
/// change a plan, so they do not change the digest either.
pub(crate) fn report_digest(handles: &[String]) -> String {
    let mut sorted: Vec<&str> = handles.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut hasher = Sha256::new();
    for h in sorted {
        // Handles never hold a newline (they are validated as UUIDs or
        // names), so it separates them unambiguously.
        hasher.update(h.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_of_the_set() {
        let s = |v: &[&str]| v.iter().map(|h| h.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&["a", "b"], &["b", "a"], true),
            (&["a", "b"], &["a", "b", "a"], true),
            (&[], &[], true),
            (&["a", "b"], &["a"], false),
            (&["ab"], &["a", "b"], false),
            (&["a"], &[], false),
        ];
        for (left, right, same) in cases {
            assert_eq!(
                report_digest(&s(left)) == report_digest(&s(right)),
                *same,
                "{left:?} vs {right:?}"
            );
        }
        assert_eq!(report_digest(&s(&["a"])).len(), 64);
    }
}
