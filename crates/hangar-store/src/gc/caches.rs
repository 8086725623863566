//! The caches collector's sweep.
//!
//! A cache's fate depends on its rank among the caches of its worker and
//! owner, so the planner needs whole groups; and most caches are kept (the
//! newest of each group, until the retention), so a collector that read
//! every candidate on every pass would read the same kept rows again and
//! again, millions of them on a large fleet. Instead each pass reads the
//! caches of the next `cache_sweep_workers` workers, by name, after the
//! last one the previous pass on this node reached; at the last worker the
//! sweep starts over. A pass costs the same whatever the fleet's size; a
//! fleet of N workers is swept every N / `cache_sweep_workers` passes, so a
//! cache may outlive its retention or grace by that long.

use hangar_core::gc::{self, Collector, CollectorStats, GcConfig, GcVolume};
use hangar_core::UnixMillis;

use super::{gc_volume, GC_VOLUME_COLUMNS, LIVE_CACHES, MARK_CREATED_DESTROYING};
use crate::db::Store;
use crate::error::StoreError;
use crate::handle_list::{in_list, json_list};

/// When a cache was last used: the later of its creation and its last
/// recorded use (`GcVolume::last_used`).
const LAST_USED: &str =
    "CASE WHEN v.last_used_at > v.created_at THEN v.last_used_at ELSE v.created_at END";

/// Workers whose caches one statement reads.
const WORKERS_PER_PAGE: usize = 50;

/// Where this node's sweep of the caches stands: the last worker swept.
#[derive(Debug, Default)]
pub(crate) struct CacheSweep {
    after: std::sync::Mutex<Option<String>>,
}

impl CacheSweep {
    fn after(&self) -> Option<String> {
        self.after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, worker: Option<String>) {
        *self
            .after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = worker;
    }
}

impl Store {
    pub(super) async fn gc_caches(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let mut stats = CollectorStats::default();
        if !self
            .any_cache_unused_since(config.cache_idle_cutoff(now))
            .await?
        {
            // A young fleet: nothing to sweep, and the age index said so
            // without reading a worker's caches.
            return Ok(stats);
        }
        let mut left = config.cache_sweep_workers.max(1);
        let mut started_over = false;
        while left > 0 {
            let take = left.min(WORKERS_PER_PAGE);
            let after = self.cache_sweep.after();
            let workers = self.workers_after(after.as_deref(), take).await?;
            let Some(last) = workers.last().cloned() else {
                // Past the last worker: start over, once per pass (the
                // fleet may be empty).
                self.cache_sweep.set(None);
                if after.is_none() || started_over {
                    break;
                }
                started_over = true;
                continue;
            };
            stats.add(self.collect_caches_of(&workers, config, now).await?);
            if workers.len() < take {
                // The end of the fleet: the next pass starts over.
                self.cache_sweep.set(None);
                break;
            }
            self.cache_sweep.set(Some(last));
            left -= take;
        }
        Ok(stats)
    }

    /// Whether any live cache was made at `at` or before (a cache is last
    /// used at its creation or later, so only such a one can be idle since).
    async fn any_cache_unused_since(&self, at: UnixMillis) -> Result<bool, StoreError> {
        let found: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM volumes v \
             WHERE {LIVE_CACHES} AND v.created_at <= $1 LIMIT 1) old"
        ))
        .bind(at)
        .fetch_one(&self.pool)
        .await?;
        Ok(found > 0)
    }

    /// Up to `limit` worker names after `after`, in order.
    async fn workers_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let sql = match after {
            Some(_) => {
                format!("SELECT name FROM workers WHERE name > $1 ORDER BY name LIMIT {limit}")
            }
            None => format!("SELECT name FROM workers ORDER BY name LIMIT {limit}"),
        };
        let mut q = sqlx::query_scalar(&sql);
        if let Some(name) = after {
            q = q.bind(name.to_string());
        }
        Ok(q.fetch_all(&self.pool).await?)
    }

    /// Plans and applies the caches of `workers`.
    ///
    /// Only groups (worker, owner kind, owner id) that could lose a cache
    /// are read: those with more than `cache_keep_per_owner` live caches
    /// and one unused for the grace, or with one unused for the whole
    /// retention. The rest (most groups:
    /// one cache per owner, kept) are counted in the database and never
    /// leave it. The owner id is compared with NULL as '', which can only
    /// let more groups through, never fewer.
    async fn collect_caches_of(
        &self,
        workers: &[String],
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let of_workers = in_list(self.backend(), "v.worker_name", 1);
        let group = "v.worker_name, v.owner_kind, COALESCE(v.owner_id, '')";
        let rows: Vec<GcVolume> = sqlx::query(&format!(
            "SELECT {GC_VOLUME_COLUMNS} FROM volumes v WHERE {LIVE_CACHES} AND {of_workers} \
             AND ({group}) IN (SELECT {group} FROM volumes v \
               WHERE {LIVE_CACHES} AND {of_workers} GROUP BY {group} \
               HAVING (COUNT(*) > $2 AND MIN({LAST_USED}) <= $3) OR MIN({LAST_USED}) <= $4)"
        ))
        .bind(json_list(workers))
        .bind(i64::try_from(config.cache_keep_per_owner).unwrap_or(i64::MAX))
        .bind(now.saturating_sub(config.cache_duplicate_grace_ms))
        .bind(now.saturating_sub(config.cache_retention_ms))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(gc_volume)
        .collect::<Result<_, _>>()?;
        let doomed = gc::plan_caches(&rows, now, config);
        drop(rows);
        // One a step looked up since the plan was made stays.
        let fresh = config.cache_idle_cutoff(now);
        Ok(self
            .apply_chunks(
                Collector::Caches,
                &format!(
                    "{MARK_CREATED_DESTROYING} AND (last_used_at IS NULL OR last_used_at <= $1)"
                ),
                &[fresh],
                &doomed,
            )
            .await)
    }
}
