//! The executors of the garbage collectors planned in [`hangar_core::gc`]:
//! fetch candidate rows, ask the planner, apply its answer with statements
//! that re-check every row (two web nodes collecting at once, or a report
//! landing in between, never make a row change twice or a row that moved on
//! change at all).
//!
//! An error applying one chunk or one subtree is logged and counted as
//! failed; the collector goes on with the rest. Only failing to read the
//! candidates fails a collector as a whole.

use std::collections::{HashMap, HashSet};

use hangar_core::build::BuildStatus;
use hangar_core::gc::{
    self, Collector, CollectorStats, DoomedVolume, GcBuild, GcConfig, GcContainer, GcVolume,
    MissingBatch, SubtreePart,
};
use hangar_core::UnixMillis;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::db::{Backend, Store};
use crate::error::{decode, StoreError};
use crate::handle_list::{in_list, json_list};
use crate::packed::{handle_and_parent, malformed, HANDLE_AND_PARENT};
use crate::volumes::placeholders;

mod caches;
mod pages;
mod turn;

pub(crate) use caches::CacheSweep;
use pages::{Candidate, Pages};
pub use turn::GcTurn;

/// Container handles, and when each worker's containers were made.
type ContainersMade = (HashSet<String>, HashMap<String, Vec<UnixMillis>>);

/// Binds per statement stay well under both databases' limits.
const CHUNK: usize = 1000;

/// How many connections the missing-volume collector reads and deletes on
/// at once (PostgreSQL).
const MISSING_LANES: usize = 2;

pub(crate) const GC_VOLUME_COLUMNS: &str =
    "v.handle, v.worker_name, v.state, v.owner_kind, v.owner_id, v.created_at, v.last_used_at, \
     v.missing_since, (SELECT COUNT(*) FROM volumes c WHERE c.parent_handle = v.handle \
     AND c.state NOT IN ('destroying', 'failed')) AS live_children";

/// Created, present task and resource caches.
pub(crate) const LIVE_CACHES: &str =
    "v.owner_kind IN ('task-cache', 'resource-cache') AND v.state = 'created' \
     AND v.missing_since IS NULL";

/// Whether `collector` changes volume rows (and so their workers' volume
/// stamps, [`crate::volume_stamps`]) rather than container rows.
fn marks_volumes(collector: Collector) -> bool {
    match collector {
        Collector::AbandonedVolumes
        | Collector::FailedVolumes
        | Collector::OrphanVolumes
        | Collector::Caches
        | Collector::Artifacts
        | Collector::MissingVolumes => true,
        Collector::FailedContainers | Collector::BuildContainers | Collector::MissingContainers => {
            false
        }
    }
}

/// Marks `created`, present volumes without live children `destroying`.
pub(crate) const MARK_CREATED_DESTROYING: &str = "UPDATE volumes SET state = 'destroying' \
     WHERE state = 'created' AND missing_since IS NULL \
     AND NOT EXISTS (SELECT 1 FROM volumes c WHERE c.parent_handle = volumes.handle \
     AND c.state NOT IN ('destroying', 'failed'))";

pub(crate) fn gc_volume(r: &AnyRow) -> Result<GcVolume, StoreError> {
    Ok(GcVolume {
        handle: r.try_get("handle")?,
        worker: r.try_get("worker_name")?,
        state: decode(r, "volumes", &["handle"], "state")?,
        owner_kind: decode(r, "volumes", &["handle"], "owner_kind")?,
        owner_id: r.try_get("owner_id")?,
        created_at: r.try_get("created_at")?,
        last_used_at: r.try_get("last_used_at")?,
        missing_since: r.try_get("missing_since")?,
        live_children: r.try_get("live_children")?,
    })
}

pub(crate) fn gc_container(r: &AnyRow) -> Result<GcContainer, StoreError> {
    Ok(GcContainer {
        handle: r.try_get("handle")?,
        state: decode(r, "containers", &["handle"], "state")?,
        build_id: r.try_get("build_id")?,
        missing_since: r.try_get("missing_since")?,
        created_at: r.try_get("created_at")?,
        kept_until: r.try_get("kept_until")?,
    })
}

fn gc_build(r: &AnyRow) -> Result<GcBuild, StoreError> {
    Ok(GcBuild {
        status: decode(r, "builds", &["id"], "status")?,
        finished_at: r.try_get("finished_at")?,
        superseded: r.try_get::<i64, _>("superseded")? != 0,
    })
}

impl Store {
    /// Runs one collector once. `Err` only when the candidates cannot be
    /// read; errors applying the plan are counted in `failed`.
    pub async fn run_collector(
        &self,
        collector: Collector,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        match collector {
            Collector::AbandonedVolumes => self.gc_abandoned_volumes(config, now).await,
            Collector::FailedVolumes => self.gc_failed_volumes(config).await,
            Collector::FailedContainers => self.gc_failed_containers(config).await,
            Collector::BuildContainers => self.gc_build_containers(config, now).await,
            Collector::OrphanVolumes => self.gc_orphan_volumes(config, now).await,
            Collector::Caches => self.gc_caches(config, now).await,
            Collector::Artifacts => self.gc_artifacts(config, now).await,
            Collector::MissingContainers => self.gc_missing_containers(config, now).await,
            Collector::MissingVolumes => self.gc_missing_volumes(config, now).await,
        }
    }

    /// Runs every collector once, in [`Collector::ALL`]'s order.
    pub async fn run_gc(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Vec<(Collector, Result<CollectorStats, StoreError>)> {
        let mut out = Vec::new();
        for c in Collector::ALL {
            out.push((c, self.run_collector(c, config, now).await));
        }
        out
    }

    /// Builds by id, for the ids given.
    async fn gc_builds(&self, ids: &[i64]) -> Result<HashMap<i64, GcBuild>, StoreError> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(CHUNK) {
            let sql = format!(
                "SELECT b.id, b.status, b.finished_at, \
                        CASE WHEN EXISTS (SELECT 1 FROM job_builds jb \
                            JOIN job_builds nb ON nb.job_id = jb.job_id AND nb.build_id > jb.build_id \
                            JOIN builds n ON n.id = nb.build_id \
                            WHERE jb.build_id = b.id AND n.status <> $1) \
                        THEN 1 ELSE 0 END AS superseded \
                 FROM builds b WHERE b.id IN ({})",
                placeholders(2, chunk.len())
            );
            let mut q = sqlx::query(&sql).bind(BuildStatus::Pending.as_str());
            for id in chunk {
                q = q.bind(*id);
            }
            for r in q.fetch_all(&self.pool).await? {
                out.insert(r.try_get::<i64, _>("id")?, gc_build(&r)?);
            }
        }
        Ok(out)
    }

    /// One text column of every build that is not final (or of its steps).
    async fn live_build_texts(&self, sql: &str) -> Result<Vec<String>, StoreError> {
        sqlx::query(sql)
            .bind(BuildStatus::Pending.as_str())
            .bind(BuildStatus::Started.as_str())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok(r.try_get::<String, _>(0)?))
            .collect()
    }

    /// Runs `sql AND handle IN (…)` over `handles` in chunks (binding
    /// `first` as `$1`… before the handles); an error in one chunk is logged
    /// and counted, not returned.
    async fn apply_chunks(
        &self,
        collector: Collector,
        sql: &str,
        first: &[i64],
        handles: &[String],
    ) -> CollectorStats {
        let mut stats = CollectorStats {
            found: handles.len() as u64,
            ..Default::default()
        };
        for chunk in handles.chunks(CHUNK) {
            match self.apply_chunk(collector, sql, first, chunk).await {
                Ok(changed) => stats.destroyed += changed,
                Err(e) => {
                    tracing::warn!(%collector, rows = chunk.len(), error = %e, "garbage collection of a chunk failed; retrying next run");
                    stats.failed += chunk.len() as u64;
                }
            }
        }
        stats
    }

    /// Applies `sql` to one chunk of handles. A volume collector's change
    /// and its workers' stamp bumps share a transaction.
    async fn apply_chunk(
        &self,
        collector: Collector,
        sql: &str,
        first: &[i64],
        chunk: &[String],
    ) -> Result<u64, StoreError> {
        // Both tables name each row's worker: what the statement changed
        // is counted from the names it returns.
        let text = format!(
            "{sql} AND handle IN ({}) RETURNING worker_name",
            placeholders(first.len() + 1, chunk.len())
        );
        let mut q = sqlx::query_scalar::<_, String>(&text);
        for b in first {
            q = q.bind(*b);
        }
        for h in chunk {
            q = q.bind(h);
        }
        if !marks_volumes(collector) {
            return Ok(q.fetch_all(&self.pool).await?.len() as u64);
        }
        let mut tx = self.pool.begin().await?;
        let workers = q.fetch_all(&mut *tx).await?;
        crate::volume_stamps::bump(&mut *tx, self.backend(), &workers).await?;
        tx.commit().await?;
        Ok(workers.len() as u64)
    }

    /// Plans and applies `filter`'s rows a page at a time: `plan` gets
    /// each page and dooms some of its rows, in batches applied in order,
    /// which `apply` (a statement [`Store::apply_chunks`] completes)
    /// changes if they still qualify.
    async fn collect_pages<T: Candidate>(
        &self,
        collector: Collector,
        (filter, binds): (&str, &[i64]),
        config: &GcConfig,
        apply: (&str, &[i64]),
        mut plan: impl FnMut(&[T]) -> Vec<Vec<String>>,
    ) -> Result<CollectorStats, StoreError> {
        let mut pages = Pages::<T>::new(filter, binds, config.page_size);
        let mut stats = CollectorStats::default();
        while let Some(page) = pages.next(self).await? {
            for doomed in plan(&page) {
                stats.add(
                    self.apply_chunks(collector, apply.0, apply.1, &doomed)
                        .await,
                );
            }
        }
        Ok(stats)
    }

    async fn gc_abandoned_volumes(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let cutoff = now.saturating_sub(config.abandoned_creation_ms);
        self.collect_pages(
            Collector::AbandonedVolumes,
            ("v.state = 'creating' AND v.created_at <= $1", &[cutoff]),
            config,
            (
                "UPDATE volumes SET state = 'failed' WHERE state = 'creating' AND created_at <= $1",
                &[cutoff],
            ),
            |page| vec![gc::plan_abandoned_volumes(page, now, config)],
        )
        .await
    }

    async fn gc_failed_volumes(&self, config: &GcConfig) -> Result<CollectorStats, StoreError> {
        self.collect_pages(
            Collector::FailedVolumes,
            ("v.state = 'failed'", &[]),
            config,
            (
                "UPDATE volumes SET state = 'destroying' WHERE state = 'failed'",
                &[],
            ),
            |page| vec![gc::plan_failed_volumes(page)],
        )
        .await
    }

    async fn gc_failed_containers(&self, config: &GcConfig) -> Result<CollectorStats, StoreError> {
        self.collect_pages(
            Collector::FailedContainers,
            ("v.state = 'failed'", &[]),
            config,
            (
                "UPDATE containers SET state = 'destroying' WHERE state = 'failed'",
                &[],
            ),
            |page| vec![gc::plan_failed_containers(page)],
        )
        .await
    }

    async fn gc_build_containers(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        // The containers of builds still running stay, and there are many:
        // they are left out here rather than read and kept on every pass.
        let mut builds = HashMap::new();
        let mut pages = Pages::<GcContainer>::new(
            "v.build_id IS NOT NULL AND v.state IN ('creating', 'created') \
             AND NOT EXISTS (SELECT 1 FROM builds b WHERE b.id = v.build_id \
             AND b.status IN ('pending', 'started'))",
            &[],
            config.page_size,
        );
        let mut stats = CollectorStats::default();
        while let Some(page) = pages.next(self).await? {
            let mut ids: Vec<i64> = page.iter().filter_map(|c| c.build_id).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.retain(|id| !builds.contains_key(id));
            builds.extend(self.gc_builds(&ids).await?);
            let doomed = gc::plan_build_containers(&page, &builds, now);
            stats.add(
                self.apply_chunks(
                    Collector::BuildContainers,
                    "UPDATE containers SET state = 'destroying' WHERE state IN ('creating', 'created')",
                    &[],
                    &doomed,
                )
                .await,
            );
        }
        Ok(stats)
    }

    async fn gc_orphan_volumes(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        // A scratch volume whose container has a row stays; most live
        // ones do, so they are left out here rather than read on every pass.
        let mut pages = Pages::<GcVolume>::new(
            "v.owner_kind = 'container' AND v.state = 'created' AND v.missing_since IS NULL \
             AND v.created_at <= $1 \
             AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.handle = v.owner_id)",
            &[now - config.orphan_min_age_ms],
            config.page_size,
        );
        let mut outputs = None;
        let mut stats = CollectorStats::default();
        while let Some(page) = pages.next(self).await? {
            if outputs.is_none() {
                outputs = Some(
                    self.live_build_texts(
                        "SELECT s.outputs FROM build_steps s JOIN builds b ON b.id = s.build_id \
                         WHERE b.status IN ($1, $2)",
                    )
                    .await?,
                );
            }
            let (live, started) = self.containers_of_workers(&page).await?;
            let doomed = gc::plan_orphan_volumes(
                &page,
                &live,
                &started,
                outputs.as_deref().unwrap_or_default(),
                now,
                config,
            );
            stats.add(
                self.apply_chunks(
                    Collector::OrphanVolumes,
                    MARK_CREATED_DESTROYING,
                    &[],
                    &doomed,
                )
                .await,
            );
        }
        Ok(stats)
    }

    /// The container rows of the workers of `volumes`: their handles, and
    /// when each worker's were made.
    async fn containers_of_workers(
        &self,
        volumes: &[GcVolume],
    ) -> Result<ContainersMade, StoreError> {
        let mut workers: Vec<&str> = volumes.iter().map(|v| v.worker.as_str()).collect();
        workers.sort_unstable();
        workers.dedup();
        let rows = sqlx::query(&format!(
            "SELECT handle, worker_name, created_at FROM containers WHERE {}",
            in_list(self.backend(), "worker_name", 1)
        ))
        .bind(json_list(&workers))
        .fetch_all(&self.pool)
        .await?;
        let mut live = HashSet::new();
        let mut started: HashMap<String, Vec<UnixMillis>> = HashMap::new();
        for r in rows {
            live.insert(r.try_get::<String, _>("handle")?);
            started
                .entry(r.try_get("worker_name")?)
                .or_default()
                .push(r.try_get("created_at")?);
        }
        Ok((live, started))
    }

    async fn gc_artifacts(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let mut pages = Pages::<GcVolume>::new(
            "v.owner_kind = 'artifact' AND v.state = 'created' AND v.missing_since IS NULL \
             AND v.created_at <= $1",
            &[now - config.artifact_retention_ms.min(config.upload_retention_ms)],
            config.page_size,
        );
        let mut named = None;
        let mut stats = CollectorStats::default();
        while let Some(page) = pages.next(self).await? {
            if named.is_none() {
                named = Some(
                    self.live_build_texts("SELECT artifacts FROM builds WHERE status IN ($1, $2)")
                        .await?,
                );
            }
            let mut ids: Vec<i64> = page
                .iter()
                .filter_map(|v| v.owner_id.as_deref().and_then(gc::artifact_build))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let builds = self.gc_builds(&ids).await?;
            let doomed = gc::plan_artifacts(
                &page,
                &builds,
                named.as_deref().unwrap_or_default(),
                now,
                config,
            );
            stats.add(
                self.apply_chunks(Collector::Artifacts, MARK_CREATED_DESTROYING, &[], &doomed)
                    .await,
            );
        }
        Ok(stats)
    }

    async fn gc_missing_containers(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let cutoff = config.missing_cutoff(now);
        self.collect_pages(
            Collector::MissingContainers,
            (
                "v.missing_since IS NOT NULL AND v.missing_since <= $1",
                &[cutoff],
            ),
            config,
            (
                "DELETE FROM containers WHERE missing_since IS NOT NULL AND missing_since <= $1",
                &[cutoff],
            ),
            |page| gc::plan_missing_containers(page, now, config),
        )
        .await
    }

    /// Every row missing since `cutoff` or earlier, and all their
    /// descendants, each with its parent: one recursive statement, whose
    /// rows come packed in one value ([`crate::packed`]).
    ///
    /// Each step of the recursion looks children up by the parent index.
    /// PostgreSQL's planner cannot see how small each step's frontier is and
    /// would scan the whole table once per level with a hash join (2.7 s
    /// instead of 0.7 s over a million rows); a `LATERAL` subquery behind an
    /// `OFFSET 0` fence (so it is not flattened back into that join) makes
    /// it probe the index row by row. SQLite always joins that way.
    pub(crate) async fn doomed_volumes(
        &self,
        cutoff: UnixMillis,
        workers: Option<&[String]>,
    ) -> Result<Vec<DoomedVolume>, StoreError> {
        let backend = self.backend();
        let children = match backend {
            Backend::Postgres => {
                "SELECT c.handle, c.parent_handle FROM doomed d CROSS JOIN LATERAL \
                 (SELECT v.handle, v.parent_handle FROM volumes v WHERE v.parent_handle = d.handle OFFSET 0) c"
            }
            Backend::Sqlite => {
                "SELECT v.handle, v.parent_handle FROM volumes v \
                 JOIN doomed d ON v.parent_handle = d.handle"
            }
        };
        let of_workers = match workers {
            Some(_) => format!("AND {}", in_list(backend, "worker_name", 2)),
            None => String::new(),
        };
        let mut tx = self.pool.begin().await?;
        if backend == Backend::Postgres {
            // The planner cannot size a recursion and guesses a million
            // rows, enough to compile the query to machine code first:
            // about 0.2-0.4 s here, longer than running it takes.
            sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
        }
        let sql = format!(
            "WITH RECURSIVE doomed (handle, parent_handle) AS ( \
                 SELECT handle, parent_handle FROM volumes \
                 WHERE missing_since IS NOT NULL AND missing_since <= $1 {of_workers} \
               UNION {children} \
             ) SELECT string_agg({HANDLE_AND_PARENT}, '') FROM doomed"
        );
        let mut q = sqlx::query_scalar(&sql).bind(cutoff);
        if let Some(w) = workers {
            q = q.bind(json_list(w));
        }
        let packed: Option<String> = q.fetch_one(&mut *tx).await?;
        tx.commit().await?;
        let mut rest = packed.as_deref().unwrap_or_default();
        let mut doomed = Vec::new();
        while !rest.is_empty() {
            let (handle, parent) = handle_and_parent(&mut rest)
                .ok_or_else(|| StoreError::Corrupt(malformed("doomed volume row", rest)))?;
            doomed.push(DoomedVolume { handle, parent });
        }
        Ok(doomed)
    }

    async fn gc_missing_volumes(
        &self,
        config: &GcConfig,
        now: UnixMillis,
    ) -> Result<CollectorStats, StoreError> {
        let cutoff = config.missing_cutoff(now);
        // Each lane reads the doomed rows of its share of the workers (a
        // subtree never spans workers: a child is made on its parent's
        // worker), so the reads run side by side; then every lane takes jobs
        // from one queue until all are done, so one lost worker's rows are
        // still deleted on every lane. SQLite has one connection: one lane.
        let lanes = match self.backend() {
            Backend::Postgres => MISSING_LANES,
            Backend::Sqlite => 1,
        };
        let mut groups: Vec<Option<Vec<String>>> = vec![None];
        if lanes > 1 {
            let workers: Vec<String> = sqlx::query_scalar("SELECT name FROM workers ORDER BY name")
                .fetch_all(&self.pool)
                .await?;
            groups = vec![Some(Vec::new()); lanes];
            for (i, w) in workers.into_iter().enumerate() {
                if let Some(group) = &mut groups[i % lanes] {
                    group.push(w);
                }
            }
        }
        let (send, receive) = tokio::sync::mpsc::unbounded_channel::<Vec<MissingBatch>>();
        let receive = tokio::sync::Mutex::new(receive);
        let runs: Vec<_> = groups
            .into_iter()
            .map(|group| {
                let send = send.clone();
                let receive = &receive;
                async move {
                    let read = self
                        .queue_missing(cutoff, group.as_deref(), config.batch_size, &send)
                        .await;
                    drop(send);
                    let mut stats = CollectorStats::default();
                    loop {
                        let job = receive.lock().await.recv().await;
                        let Some(job) = job else { break };
                        stats.add(self.delete_missing_lane(job.iter().collect(), cutoff).await);
                    }
                    (read, stats)
                }
            })
            .collect();
        drop(send);
        let mut stats = CollectorStats::default();
        let mut failed_read = None;
        for (read, s) in futures_util::future::join_all(runs).await {
            stats.add(s);
            if let Err(e) = read {
                failed_read.get_or_insert(e);
            }
        }
        // What the other lanes read was deleted all the same.
        match failed_read {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    /// Reads the doomed rows of `workers` (all when `None`), plans their
    /// batches and queues them as jobs: the batches of a subtree bigger
    /// than a batch are one job, to run in order; every other batch is a
    /// job of its own.
    async fn queue_missing(
        &self,
        cutoff: UnixMillis,
        workers: Option<&[String]>,
        batch_size: usize,
        jobs: &tokio::sync::mpsc::UnboundedSender<Vec<MissingBatch>>,
    ) -> Result<(), StoreError> {
        if workers.is_some_and(<[String]>::is_empty) {
            return Ok(());
        }
        let doomed = self.doomed_volumes(cutoff, workers).await?;
        let batches = gc::plan_missing_volumes(&doomed, batch_size);
        drop(doomed);
        let mut job: Vec<MissingBatch> = Vec::new();
        let mut job_root: Option<String> = None;
        for batch in batches {
            let root = match batch.parts.as_slice() {
                [only] => Some(only.root.clone()),
                _ => None,
            };
            if !job.is_empty() && (root.is_none() || root != job_root) {
                // The receiver lives until every lane is done.
                let _ = jobs.send(std::mem::take(&mut job));
            }
            job_root = root;
            job.push(batch);
        }
        if !job.is_empty() {
            let _ = jobs.send(job);
        }
        Ok(())
    }

    /// Deletes the batches of one job in order, one transaction each. A
    /// batch that fails is retried subtree by subtree; a subtree that fails
    /// (or whose root was reported again) is skipped in the job's later
    /// batches.
    async fn delete_missing_lane(
        &self,
        batches: Vec<&MissingBatch>,
        cutoff: UnixMillis,
    ) -> CollectorStats {
        let mut stats = CollectorStats::default();
        let mut failed_roots: HashSet<String> = HashSet::new();
        for batch in batches {
            stats.found += batch.len() as u64;
            // Subtrees an earlier batch failed on wait for the next run.
            let (skip, go): (Vec<&SubtreePart>, Vec<&SubtreePart>) = batch
                .parts
                .iter()
                .partition(|p| failed_roots.contains(&p.root));
            stats.failed += skip.iter().map(|p| p.handles.len() as u64).sum::<u64>();
            if go.is_empty() {
                continue;
            }
            match self.delete_missing_parts(&go, cutoff).await {
                Ok(Some(n)) => {
                    stats.destroyed += n;
                    continue;
                }
                // A root moved on (reported again): retry part by part.
                Ok(None) => {}
                Err(e) if go.len() == 1 => {
                    tracing::warn!(root = %go[0].root, rows = go[0].handles.len(), error = %e, "garbage collection of a missing subtree failed; retrying next run");
                    stats.failed += go[0].handles.len() as u64;
                    failed_roots.insert(go[0].root.clone());
                    continue;
                }
                Err(e) => {
                    tracing::debug!(parts = go.len(), error = %e, "a batch of missing subtrees failed; retrying subtree by subtree");
                }
            }
            for part in go {
                match self.delete_missing_parts(&[part], cutoff).await {
                    Ok(Some(n)) => stats.destroyed += n,
                    // Reported again since the plan: it stays, and so does
                    // the rest of its subtree.
                    Ok(None) => {
                        failed_roots.insert(part.root.clone());
                    }
                    Err(e) => {
                        tracing::warn!(root = %part.root, rows = part.handles.len(), error = %e, "garbage collection of a missing subtree failed; retrying next run");
                        stats.failed += part.handles.len() as u64;
                        failed_roots.insert(part.root.clone());
                    }
                }
            }
        }
        stats
    }

    /// Deletes the rows of `parts` in one transaction, after checking (and,
    /// on PostgreSQL, locking) that every part's root is still missing since
    /// `cutoff`. `Ok(None)` when one is not: nothing is deleted.
    async fn delete_missing_parts(
        &self,
        parts: &[&SubtreePart],
        cutoff: UnixMillis,
    ) -> Result<Option<u64>, StoreError> {
        let mut roots: Vec<&str> = parts.iter().map(|p| p.root.as_str()).collect();
        roots.sort_unstable();
        roots.dedup();
        let mut tx = self.pool.begin().await?;
        // On PostgreSQL the roots' row locks make a report clearing
        // `missing_since` wait for this transaction (and then find no row);
        // SQLite runs one writer at a time anyway.
        let lock = match self.backend() {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        };
        let held: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM (SELECT handle FROM volumes \
             WHERE missing_since IS NOT NULL AND missing_since <= $1 AND {}{lock}) AS held",
            in_list(self.backend(), "handle", 2)
        ))
        .bind(cutoff)
        .bind(json_list(&roots))
        .fetch_one(&mut *tx)
        .await?;
        if held != roots.len() as i64 {
            tx.rollback().await?;
            return Ok(None);
        }
        let handles: Vec<&String> = parts.iter().flat_map(|p| &p.handles).collect();
        let deleted = delete_handles(&mut tx, self.backend(), &handles).await?;
        tx.commit().await?;
        Ok(Some(deleted))
    }
}

/// Deletes rows by handle in one statement, and bumps their workers'
/// volume stamps in the same transaction. Each foreign key is checked at
/// the statement's end, so rows may come in any order as long as every
/// child of a deleted row is deleted too.
pub(crate) async fn delete_handles<S: AsRef<str>>(
    tx: &mut Transaction<'_, Any>,
    backend: Backend,
    handles: &[S],
) -> Result<u64, StoreError> {
    if handles.is_empty() {
        return Ok(0);
    }
    let workers: Vec<String> = sqlx::query_scalar(&format!(
        "DELETE FROM volumes WHERE {} RETURNING worker_name",
        in_list(backend, "handle", 1)
    ))
    .bind(json_list(handles))
    .fetch_all(&mut **tx)
    .await?;
    crate::volume_stamps::bump(&mut **tx, backend, &workers).await?;
    Ok(workers.len() as u64)
}

#[cfg(test)]
mod tests;
