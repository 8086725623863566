use hangar_core::fencing::check_generation;
use hangar_core::volumes::{plan_report, OwnerKind, ReportPlan, Strategy, VolumeRow, VolumeState};
use hangar_core::UnixMillis;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::db::{Backend, Store};
use crate::error::{decode, StoreError};
use crate::handle_list::{in_list, json_list};
use crate::packed::{handle_and_parent, malformed, next_field, HANDLE_AND_PARENT};
use crate::records::parse_state;
use crate::volume_stamps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVolume {
    pub handle: String,
    pub worker: String,
    pub parent: Option<String>,
    pub owner_kind: OwnerKind,
    pub owner_id: Option<String>,
    pub strategy: Strategy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    pub handle: String,
    pub worker: String,
    pub state: VolumeState,
    pub parent: Option<String>,
    pub owner_kind: OwnerKind,
    pub owner_id: Option<String>,
    pub strategy: Strategy,
    pub size_bytes: Option<i64>,
    pub created_at: UnixMillis,
    pub missing_since: Option<UnixMillis>,
    /// When a step last reused it (caches), if ever.
    pub last_used_at: Option<UnixMillis>,
}

/// The columns an insert sets.
const VOLUME_COLUMNS: &str =
    "handle, worker_name, state, parent_handle, owner_kind, owner_id, strategy, \
     size_bytes, created_at, missing_since";

/// The columns of a [`VolumeRecord`].
const VOLUME_SELECT: &str =
    "handle, worker_name, state, parent_handle, owner_kind, owner_id, strategy, \
     size_bytes, created_at, missing_since, last_used_at";

fn volume_from_row(row: &AnyRow) -> Result<VolumeRecord, StoreError> {
    Ok(VolumeRecord {
        handle: row.try_get("handle")?,
        worker: row.try_get("worker_name")?,
        state: decode(row, "volumes", &["handle"], "state")?,
        parent: row.try_get("parent_handle")?,
        owner_kind: decode(row, "volumes", &["handle"], "owner_kind")?,
        owner_id: row.try_get("owner_id")?,
        strategy: decode(row, "volumes", &["handle"], "strategy")?,
        size_bytes: row.try_get("size_bytes")?,
        created_at: row.try_get("created_at")?,
        missing_since: row.try_get("missing_since")?,
        last_used_at: row.try_get("last_used_at")?,
    })
}

/// `$first, $first+1, …` for an `IN (…)` list of `n` binds.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `count` groups of `width` numbered placeholders from `$first` on, each
/// written by `group` from its own (`["$2", "$3", "$4"]`), joined by
/// `sep`: the rows of a multi-row `VALUES`, the terms of an `OR`.
pub(crate) fn placeholder_groups(
    first: usize,
    count: usize,
    width: usize,
    sep: &str,
    group: impl Fn(&[String]) -> String,
) -> String {
    (0..count)
        .map(|n| {
            let at = first + width * n;
            let own: Vec<String> = (at..at + width).map(|i| format!("${i}")).collect();
            group(&own)
        })
        .collect::<Vec<_>>()
        .join(sep)
}

impl Store {
    /// Adds the row of a volume about to be made on a running worker. A
    /// copy-on-write child needs a parent that is created, on the same
    /// worker, and not missing: a missing volume is never built upon.
    pub async fn create_volume_row(
        &self,
        v: &NewVolume,
        now: UnixMillis,
    ) -> Result<VolumeRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let state = sqlx::query("SELECT state FROM workers WHERE name = $1")
            .bind(&v.worker)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("worker {} not found", v.worker)))?;
        let state = parse_state(&state)?;
        if state != hangar_core::WorkerState::Running {
            return Err(StoreError::Conflict(format!(
                "worker {} is {state}; volumes are made only on running workers",
                v.worker
            )));
        }
        if let Some(parent) = &v.parent {
            let p = get_volume_in(&mut tx, parent)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("parent volume {parent} not found")))?;
            if p.worker != v.worker {
                return Err(StoreError::Conflict(format!(
                    "parent volume {parent} is on worker {}, not {}",
                    p.worker, v.worker
                )));
            }
            if p.state != VolumeState::Created || p.missing_since.is_some() {
                let why = if p.missing_since.is_some() {
                    "missing".to_string()
                } else {
                    p.state.to_string()
                };
                return Err(StoreError::Conflict(format!(
                    "parent volume {parent} is {why}"
                )));
            }
        }
        sqlx::query(&format!(
            "INSERT INTO volumes ({VOLUME_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, NULL)"
        ))
        .bind(&v.handle)
        .bind(&v.worker)
        .bind(VolumeState::Creating.as_str())
        .bind(&v.parent)
        .bind(v.owner_kind.as_str())
        .bind(&v.owner_id)
        .bind(v.strategy.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_unique_violation() => {
                StoreError::Conflict(format!("volume {} already exists", v.handle))
            }
            other => other.into(),
        })?;
        volume_stamps::bump(&mut *tx, self.backend(), &[&v.worker]).await?;
        let record = get_volume_in(&mut tx, &v.handle).await?.ok_or_else(|| {
            StoreError::Corrupt("volume row vanished inside its transaction".into())
        })?;
        tx.commit().await?;
        Ok(record)
    }

    /// Moves a `creating` row to `created` (with its size) or `failed`;
    /// an error when the row is no longer `creating`.
    pub async fn finish_volume_creation(
        &self,
        handle: &str,
        outcome: Result<Option<i64>, ()>,
    ) -> Result<(), StoreError> {
        let (state, size) = match outcome {
            Ok(size) => (VolumeState::Created, size),
            Err(()) => (VolumeState::Failed, None),
        };
        let mut tx = self.pool.begin().await?;
        let worker: Option<String> = sqlx::query_scalar(
            "UPDATE volumes SET state = $1, size_bytes = $2 WHERE handle = $3 AND state = 'creating' \
             RETURNING worker_name",
        )
        .bind(state.as_str())
        .bind(size)
        .bind(handle)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(worker) = worker else {
            // Garbage collection gave the creation up (it outlived the
            // abandon age) or the row went with its worker: whoever asked
            // must not use the volume.
            return Err(StoreError::Conflict(format!(
                "volume {handle} is no longer being created (abandoned or removed)"
            )));
        };
        volume_stamps::bump(&mut *tx, self.backend(), &[worker]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Gives a volume a new owner (a step's output becoming a build artifact).
    pub async fn set_volume_owner(
        &self,
        handle: &str,
        owner_kind: OwnerKind,
        owner_id: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE volumes SET owner_kind = $1, owner_id = $2 WHERE handle = $3")
            .bind(owner_kind.as_str())
            .bind(owner_id)
            .bind(handle)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Makes a fetched volume the resource cache `key`, with the metadata
    /// its `in` answered, in one statement: a get that finds the cache by
    /// its key always finds its metadata too.
    pub async fn key_resource_cache(
        &self,
        handle: &str,
        key: &str,
        metadata: &serde_json::Value,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE volumes SET owner_kind = $1, owner_id = $2, resource_metadata = $3 \
             WHERE handle = $4",
        )
        .bind(OwnerKind::ResourceCache.as_str())
        .bind(key)
        .bind(metadata.to_string())
        .bind(handle)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The metadata [`Store::key_resource_cache`] kept with a resource
    /// cache; `None` when the volume is gone or was keyed without it (a
    /// cache made before metadata was kept). Text that does not parse is
    /// a corrupt row, never read as no metadata.
    pub async fn resource_cache_metadata(
        &self,
        handle: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<Option<String>> =
            sqlx::query_scalar("SELECT resource_metadata FROM volumes WHERE handle = $1")
                .bind(handle)
                .fetch_optional(&self.pool)
                .await?;
        let Some(text) = text.flatten() else {
            return Ok(None);
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            StoreError::Corrupt(format!(
                "volume {handle}: resource_metadata does not parse: {e}"
            ))
        })
    }

    pub async fn get_volume(&self, handle: &str) -> Result<Option<VolumeRecord>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        sqlx::query(&format!(
            "SELECT {VOLUME_SELECT} FROM volumes WHERE handle = $1"
        ))
        .bind(handle)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(volume_from_row)
        .transpose()
    }

    pub async fn list_volumes(
        &self,
        worker: Option<&str>,
    ) -> Result<Vec<VolumeRecord>, StoreError> {
        let rows = match worker {
            Some(w) => {
                sqlx::query(&format!(
                    "SELECT {VOLUME_SELECT} FROM volumes WHERE worker_name = $1 ORDER BY worker_name, handle"
                ))
                .bind(w)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&format!("SELECT {VOLUME_SELECT} FROM volumes ORDER BY worker_name, handle"))
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(volume_from_row).collect()
    }

    /// Marks a volume for destruction; the worker destroys it when it next
    /// reports it. Refused while the volume has children that are not
    /// themselves being destroyed.
    pub async fn destroy_volume(&self, handle: &str) -> Result<VolumeState, StoreError> {
        let mut tx = self.pool.begin().await?;
        let v = get_volume_in(&mut tx, handle)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("volume {handle} not found")))?;
        let live_children: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM volumes WHERE parent_handle = $1 AND state NOT IN ('destroying', 'failed')",
        )
        .bind(handle)
        .fetch_one(&mut *tx)
        .await?
        .try_get("n")?;
        if live_children > 0 {
            return Err(StoreError::Conflict(format!(
                "volume {handle} has {live_children} child volume(s); destroy them first"
            )));
        }
        if v.state == VolumeState::Creating {
            return Err(StoreError::Conflict(format!(
                "volume {handle} is still being created"
            )));
        }
        sqlx::query("UPDATE volumes SET state = 'destroying' WHERE handle = $1 AND state IN ('created', 'failed')")
            .bind(handle)
            .execute(&mut *tx)
            .await?;
        volume_stamps::bump(&mut *tx, self.backend(), &[&v.worker]).await?;
        tx.commit().await?;
        Ok(VolumeState::Destroying)
    }

    /// Marks a `created` volume missing because its worker said it does not
    /// have it (a step asked for it and was told "not found"): from now on
    /// it is absent for scheduling, as if a report had left it out. The
    /// worker's next report clears the mark if it lists the volume after
    /// all. Returns whether the row changed.
    pub async fn mark_volume_missing(
        &self,
        handle: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let worker: Option<String> = sqlx::query_scalar(
            "UPDATE volumes SET missing_since = $1 \
             WHERE handle = $2 AND state = 'created' AND missing_since IS NULL RETURNING worker_name",
        )
        .bind(now)
        .bind(handle)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(worker) = worker else {
            return Ok(false);
        };
        volume_stamps::bump(&mut *tx, self.backend(), &[worker]).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Applies a worker's full report of its volume handles and returns the
    /// handles it must destroy, children first. Refused unless `generation`
    /// is the worker's current, non-stalled registration.
    pub async fn apply_volume_report(
        &self,
        worker: &str,
        generation: i64,
        reported: &[String],
        now: UnixMillis,
    ) -> Result<ReportPlan, StoreError> {
        Ok(self
            .apply_volume_report_counted(worker, generation, reported, now)
            .await?
            .plan)
    }

    /// [`Store::apply_volume_report`], also saying whether the report was
    /// quiet and skipped reading its worker's rows ([`crate::volume_stamps`]).
    pub async fn apply_volume_report_counted(
        &self,
        worker: &str,
        generation: i64,
        reported: &[String],
        now: UnixMillis,
    ) -> Result<AppliedReport, StoreError> {
        // One statement reads the worker's registration, its volume stamp
        // and, unless the report is quiet, every row of it (one snapshot),
        // outside a transaction: most reports change nothing, and then
        // that statement is all a report costs. Only a report with changes
        // opens a transaction, and checks the registration again in it
        // before writing. (PostgreSQL reads at READ COMMITTED, so a
        // transaction around the read promised no more than this.)
        let digest = volume_stamps::report_digest(reported);
        let row = sqlx::query(&report_rows_sql())
            .bind(worker)
            .bind(&digest)
            .fetch_one(&self.pool)
            .await?;
        let state: Option<String> = row.try_get("state")?;
        let registration = match state {
            Some(text) => {
                let state = text.parse::<hangar_core::WorkerState>().map_err(|e| {
                    StoreError::Corrupt(format!("workers row {worker}, column state: {e}"))
                })?;
                Some((state, row.try_get::<i64, _>("generation")?))
            }
            None => None,
        };
        check_generation(registration, generation).map_err(|refusal| StoreError::Refused {
            message: refusal.message(worker, generation),
            refusal,
        })?;
        let stamp: Option<i64> = row.try_get("stamp")?;
        // The statement decides: it read no row when it found the report
        // quiet, so only its own verdict may skip the plan.
        if row.try_get::<i64, _>("quiet")? == 1 {
            return Ok(AppliedReport {
                plan: ReportPlan::default(),
                read_rows: false,
            });
        }
        let encoded: Option<String> = row.try_get("packed")?;
        drop(row);
        // With no grace every row is judged (young_after past any row).
        let young_after = if self.young_volume_ms > 0 {
            now.saturating_sub(self.young_volume_ms)
        } else {
            UnixMillis::MAX
        };
        let rows = decode_report_rows(encoded.as_deref().unwrap_or_default(), young_after)
            .map_err(StoreError::Corrupt)?;
        drop(encoded);
        let plan = plan_report(&rows, reported);
        drop(rows);
        let applied = |plan| AppliedReport {
            plan,
            read_rows: true,
        };
        if plan.mark_missing.is_empty()
            && plan.clear_missing.is_empty()
            && plan.delete_rows.is_empty()
        {
            // Young rows left unjudged: a later report must read them.
            if plan.destroy_on_worker.is_empty() && plan.deferred == 0 {
                volume_stamps::record_quiet(
                    &self.pool,
                    worker,
                    generation,
                    &digest,
                    stamp.unwrap_or(0),
                )
                .await?;
            }
            return Ok(applied(plan));
        }
        let mut tx = self.pool.begin().await?;
        check_report_generation(&mut tx, worker, generation).await?;
        let backend = self.backend();
        if !plan.mark_missing.is_empty() {
            sqlx::query(&format!(
                "UPDATE volumes SET missing_since = $1 WHERE {}",
                in_list(backend, "handle", 2)
            ))
            .bind(now)
            .bind(json_list(&plan.mark_missing))
            .execute(&mut *tx)
            .await?;
        }
        if !plan.clear_missing.is_empty() {
            sqlx::query(&format!(
                "UPDATE volumes SET missing_since = NULL WHERE {}",
                in_list(backend, "handle", 1)
            ))
            .bind(json_list(&plan.clear_missing))
            .execute(&mut *tx)
            .await?;
        }
        if !plan.mark_missing.is_empty() || !plan.clear_missing.is_empty() {
            volume_stamps::bump(&mut *tx, backend, &[worker]).await?;
        }
        // (Deleting rows bumps their workers' stamps itself.)
        crate::gc::delete_handles(&mut tx, backend, &plan.delete_rows).await?;
        tx.commit().await?;
        Ok(applied(plan))
    }
}

/// What [`Store::apply_volume_report_counted`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedReport {
    pub plan: ReportPlan,
    /// Whether the worker's rows were read: `false` for a quiet report
    /// answered from its stamp.
    pub read_rows: bool,
}

/// Every row of a worker for the report planner, packed into one text
/// value ([`crate::packed`]): per row `state missing_since|-` and its
/// handle and parent. A report reads every row of its worker (50,000 on a
/// big one); packed, they cost sqlx's `Any` driver no allocation per row.
/// `string_agg` is SQLite's too (3.44).
///
/// A quiet report (its digest `$2` recorded at the stamp the rows still
/// have) reads no row: both databases evaluate a `CASE` branch only when
/// it is taken.
fn report_rows_sql() -> String {
    const QUIET: &str = "s.quiet_digest = $2 AND s.quiet_stamp = s.stamp";
    format!(
        "SELECT w.state, w.generation, s.stamp, \
         CASE WHEN {QUIET} THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END AS quiet, \
         CASE WHEN {QUIET} THEN NULL ELSE \
         (SELECT string_agg(state || ' ' || COALESCE(CAST(missing_since AS TEXT), '-') || ' ' \
         || CAST(created_at AS TEXT) || ' ' || {HANDLE_AND_PARENT}, '') \
         FROM volumes WHERE worker_name = $1) END AS packed \
         FROM (SELECT 1 AS x) AS anchor \
         LEFT JOIN workers w ON w.name = $1 \
         LEFT JOIN worker_volume_stamps s ON s.worker_name = $1"
    )
}

/// Decodes the text of [`report_rows_sql`]; rows made after `young_after`
/// are young.
fn decode_report_rows(text: &str, young_after: UnixMillis) -> Result<Vec<VolumeRow>, String> {
    let mut rows = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (row, after) = decode_report_row(rest, young_after)
            .ok_or_else(|| malformed("volume report row", rest))?;
        rows.push(row);
        rest = after;
    }
    Ok(rows)
}

/// Decodes the first row of `text`; returns it and what follows it.
fn decode_report_row(text: &str, young_after: UnixMillis) -> Option<(VolumeRow, &str)> {
    let mut rest = text;
    let state: VolumeState = next_field(&mut rest)?.parse().ok()?;
    let missing_since = match next_field(&mut rest)? {
        "-" => None,
        m => Some(m.parse::<UnixMillis>().ok()?),
    };
    let created_at: UnixMillis = next_field(&mut rest)?.parse().ok()?;
    let (handle, parent) = handle_and_parent(&mut rest)?;
    let row = VolumeRow {
        handle,
        state,
        parent,
        missing_since,
        young: created_at > young_after,
    };
    Some((row, rest))
}

/// Refuses a report unless `generation` is the worker's current,
/// non-stalled registration.
pub(crate) async fn check_report_generation(
    tx: &mut Transaction<'_, Any>,
    worker: &str,
    generation: i64,
) -> Result<(), StoreError> {
    let row = sqlx::query("SELECT state, generation FROM workers WHERE name = $1")
        .bind(worker)
        .fetch_optional(&mut **tx)
        .await?
        .map(|r| -> Result<_, StoreError> {
            Ok((parse_state(&r)?, r.try_get::<i64, _>("generation")?))
        })
        .transpose()?;
    check_generation(row, generation).map_err(|refusal| StoreError::Refused {
        message: refusal.message(worker, generation),
        refusal,
    })
}

async fn get_volume_in(
    tx: &mut Transaction<'_, Any>,
    handle: &str,
) -> Result<Option<VolumeRecord>, StoreError> {
    sqlx::query(&format!(
        "SELECT {VOLUME_SELECT} FROM volumes WHERE handle = $1"
    ))
    .bind(handle)
    .fetch_optional(&mut **tx)
    .await?
    .as_ref()
    .map(volume_from_row)
    .transpose()
}

/// Deletes every volume row of `worker` (children before parents, by the
/// statement-level foreign key check) and returns how many there were.
pub(crate) async fn invalidate_worker_volumes(
    tx: &mut Transaction<'_, Any>,
    backend: Backend,
    worker: &str,
) -> Result<u64, StoreError> {
    let done = sqlx::query("DELETE FROM volumes WHERE worker_name = $1")
        .bind(worker)
        .execute(&mut **tx)
        .await?;
    volume_stamps::bump(&mut **tx, backend, &[worker]).await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod report_row_tests {
    use super::*;

    fn row(h: &str, state: VolumeState, p: Option<&str>, m: Option<i64>) -> VolumeRow {
        VolumeRow {
            handle: h.into(),
            state,
            parent: p.map(str::to_string),
            missing_since: m,
            young: false,
        }
    }

    /// Rows made after this are young.
    const YOUNG_AFTER: UnixMillis = 1_000;

    #[test]
    fn rows_decode_whatever_their_handles_hold() {
        use VolumeState::*;
        let young = |mut r: VolumeRow| {
            r.young = true;
            r
        };
        let cases = [
            ("", vec![]),
            (
                "created - 100 3 - abc",
                vec![row("abc", Created, None, None)],
            ),
            (
                "created 17 100 3 3 abcdef",
                vec![row("abc", Created, Some("def"), Some(17))],
            ),
            (
                "creating - 100 5 3 a b cp q",
                vec![row("a b c", Creating, Some("p q"), None)],
            ),
            (
                "destroying - 100 3 6 éxparent",
                vec![row("éx", Destroying, Some("parent"), None)],
            ),
            (
                "failed -1 100 1 1 zz",
                vec![row("z", Failed, Some("z"), Some(-1))],
            ),
            // Made after the listing may have been taken: young.
            (
                "created - 1001 3 - abc",
                vec![young(row("abc", Created, None, None))],
            ),
            (
                "created - 1000 3 - abc",
                vec![row("abc", Created, None, None)],
            ),
            // Rows run together; a handle may look like the next row.
            (
                "created - 100 1 - acreated - 100 16 1 created - 100 1aa",
                vec![
                    row("a", Created, None, None),
                    row("created - 100 1a", Created, Some("a"), None),
                ],
            ),
            (
                "failed 5 100 5 - é€created - 100 1 5 xé€",
                vec![
                    row("é€", Failed, None, Some(5)),
                    row("x", Created, Some("é€"), None),
                ],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(
                decode_report_rows(text, YOUNG_AFTER),
                Ok(expected),
                "{text:?}"
            );
        }
    }

    #[test]
    fn malformed_rows_are_refused_not_guessed() {
        for text in [
            "created",
            "created -",
            "created - 100",
            "created - 100 3",
            "created - 100 3 -",
            "created - 3 - abc",
            "created - x 3 - abc",
            "created - 100 4 - abc",
            "created - 100 3 4 abcdef",
            "created - 100 x - abc",
            "created - 100 3 x abc",
            "created x 100 3 - abc",
            "created - 100 0 - abc",
            "created - 100 1 0 a",
            "created - 100 -1 - abc",
            "weird - 100 3 - abc",
            "created - 100 99999999999999999999 - abc",
            "created - 99999999999999999999 3 - abc",
            "created - 100 18446744073709551615 - abc",
            "created - 100 3 18446744073709551615 abc",
            "created - 100 3 - abccreated",
            "created - 100 3 - abc ",
            "created - 100 1 - é",
            "created - 100 2 - é€",
        ] {
            assert!(
                decode_report_rows(text, YOUNG_AFTER).is_err(),
                "{text:?} was accepted"
            );
        }
    }

    #[test]
    fn a_refusal_quotes_a_bounded_excerpt() {
        let text = format!("created - 100 999 - {}", "x".repeat(100_000));
        let err = decode_report_rows(&text, YOUNG_AFTER).unwrap_err();
        assert!(err.len() < 300, "{} bytes", err.len());
    }
}
