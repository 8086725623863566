//! Garbage collection: what each collector on web removes, decided from rows.
//!
//! Every collector is a pure planning function here and a thin executor in
//! the store, which fetches candidate rows, asks the planner, and applies
//! the answer with statements that re-check each row (so two web nodes
//! collecting at once, or a report landing in between, change nothing
//! twice and nothing that moved on).
//!
//! Collectors never delete a volume a worker may still have: they mark it
//! `destroying`, the worker destroys it when it next reports it, and the
//! report deletes the row once the worker no longer lists it. The one
//! exception is the missing collector: a missing row's volume is already
//! gone, so it deletes rows, and a descendant the worker still has becomes
//! unknown to web, which tells the worker to destroy it on the next report.
//!
//! The rules, collector by collector:
//!
//! - **abandoned-volumes**: a `creating` row older than
//!   `abandoned_creation` becomes `failed`. Web makes the row, asks the
//!   worker, then records the outcome; a web node that dies in between (or
//!   a request that outlives its timeout, which is half this age) leaves a
//!   row no one will finish. The worker may have made the volume: marking it
//!   failed lets the next collector have it destroyed like any failed one.
//! - **failed-volumes**: a `failed` volume row becomes `destroying` (the
//!   worker removes whatever half-made data it has; the row goes when the
//!   worker stops listing it).
//! - **failed-containers**: a `failed` container row becomes `destroying`.
//! - **build-containers**: a `creating` or `created` container row whose
//!   build is final (succeeded, failed, errored, aborted) or whose build row
//!   is gone becomes `destroying` — unless it is kept for `intercept` (a
//!   failed task step's, see `Store::keep_container`): a kept row goes once
//!   its keep-until has passed, its job's next build has started or its
//!   build succeeded after all, as Concourse keeps a failed build's
//!   containers until the next build.
//! - **orphan-volumes**: a `created`, present volume owned by `container`
//!   (a step's scratch: copy-on-write inputs, outputs not yet artifacts, a
//!   rootfs copy) with no live children becomes `destroying` when all hold:
//!   it is older than `orphan_min_age`; the container its owner id names
//!   has no row (most name none: the engine does not record it); no
//!   container row on its worker was made within `orphan_min_age` after it
//!   (the engine makes a step's volumes first, then the step's container
//!   row, which lives as long as the attempt: such a row may be the one
//!   using it); and no step of a build that is not final lists it among its
//!   outputs (a succeeded step's outputs become artifacts only after its
//!   container row is deleted). The worker adds a last guard: its sweeper
//!   never destroys a volume a container it still has mounts.
//! - **caches** (task and resource caches): a `created`, present cache with
//!   no live children becomes `destroying` when it was last used longer than
//!   `cache_retention` ago, or when it is not among the
//!   `cache_keep_per_owner` most recently used caches of its worker and
//!   owner id and was last used longer than `cache_duplicate_grace` ago.
//!   "Last used" is the later of its creation and the last use recorded
//!   with `Store::mark_volumes_used`, which the engine calls each time a
//!   get or task step reuses the cache. A cache a step still mounts is
//!   kept on disk by the worker's sweeper whatever web decides. The store
//!   plans a few hundred workers' caches per pass (`cache_sweep_workers`),
//!   so on a large fleet a cache may outlive these ages by one sweep.
//! - **artifacts**: a `created`, present artifact with no live children,
//!   not named by a build that is not final, becomes `destroying` when it is
//!   a step output of a build (`build/<id>`) that finished longer than
//!   `artifact_retention` ago (or whose build row is gone and which is that
//!   old), or an upload (`upload`) older than `upload_retention`.
//! - **missing-volumes**: a `created` row missing for at least
//!   `missing_grace` is deleted together with all its descendants, children
//!   before parents, in batches of at most `batch_size` rows. A batch holds
//!   whole subtrees (a subtree larger than a batch is cut into batches,
//!   deepest rows first); one that fails is retried subtree by subtree, and a
//!   subtree that fails again is logged, counted and skipped until the next
//!   run, never blocking the rest. Each transaction first re-checks (on
//!   PostgreSQL: locks) the roots of its subtrees; a root reported again
//!   since the plan keeps what is left of its subtree (rows an earlier batch
//!   of it deleted are unknown to web from then on, and the next report has
//!   the worker destroy them).
//! - **missing-containers**: a container row missing for at least
//!   `missing_grace` is deleted, in batches.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::build::BuildStatus;
use crate::containers::ContainerState;
use crate::volumes::{OwnerKind, VolumeState};
use crate::UnixMillis;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

/// How long things are kept. Every duration is in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcConfig {
    /// A volume row still `creating` after this long was abandoned by the
    /// web node that made it. Web's own requests to create a volume time out
    /// after half of it.
    pub abandoned_creation_ms: i64,
    /// How long a row may be missing before it is collected.
    pub missing_grace_ms: i64,
    /// How old a container-owned volume must be before it can be an orphan.
    pub orphan_min_age_ms: i64,
    /// A cache unused for this long is collected.
    pub cache_retention_ms: i64,
    /// How many of the most recently used caches of one worker and owner id
    /// are kept for the whole retention.
    pub cache_keep_per_owner: usize,
    /// A cache beyond the kept ones, unused for this long, is collected.
    pub cache_duplicate_grace_ms: i64,
    /// How long a finished build's outputs are kept.
    pub artifact_retention_ms: i64,
    /// How long an uploaded artifact is kept (unless a running build names it).
    pub upload_retention_ms: i64,
    /// The most rows one transaction of the missing collector deletes.
    pub batch_size: usize,
    /// The most candidate rows a collector reads at once: it plans and
    /// applies each page before reading the next.
    pub page_size: usize,
    /// The caches collector reads whole workers' caches (a cache's rank is
    /// among its worker's), this many workers per pass, resuming where the
    /// last pass stopped: a pass costs the same whatever the fleet's size,
    /// and a fleet of N workers is swept every N / this many passes.
    pub cache_sweep_workers: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            abandoned_creation_ms: 20 * MINUTE,
            missing_grace_ms: 5 * MINUTE,
            orphan_min_age_ms: HOUR,
            cache_retention_ms: 24 * HOUR,
            cache_keep_per_owner: 1,
            cache_duplicate_grace_ms: HOUR,
            artifact_retention_ms: HOUR,
            upload_retention_ms: HOUR,
            batch_size: 2500,
            page_size: 1000,
            cache_sweep_workers: 200,
        }
    }
}

impl GcConfig {
    /// Only a cache last used at this time or before (the shorter of the
    /// grace and the retention ago) can be collected.
    pub fn cache_idle_cutoff(&self, now: UnixMillis) -> UnixMillis {
        now.saturating_sub(self.cache_duplicate_grace_ms.min(self.cache_retention_ms))
    }

    /// Rows missing since this time or earlier are collected.
    pub fn missing_cutoff(&self, now: UnixMillis) -> UnixMillis {
        now.saturating_sub(self.missing_grace_ms)
    }
}

/// The collectors, in the order one GC run runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collector {
    AbandonedVolumes,
    FailedVolumes,
    FailedContainers,
    BuildContainers,
    OrphanVolumes,
    Caches,
    Artifacts,
    MissingContainers,
    MissingVolumes,
}

impl Collector {
    pub const ALL: [Collector; 9] = [
        Collector::AbandonedVolumes,
        Collector::FailedVolumes,
        Collector::FailedContainers,
        Collector::BuildContainers,
        Collector::OrphanVolumes,
        Collector::Caches,
        Collector::Artifacts,
        Collector::MissingContainers,
        Collector::MissingVolumes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Collector::AbandonedVolumes => "abandoned-volumes",
            Collector::FailedVolumes => "failed-volumes",
            Collector::FailedContainers => "failed-containers",
            Collector::BuildContainers => "build-containers",
            Collector::OrphanVolumes => "orphan-volumes",
            Collector::Caches => "caches",
            Collector::Artifacts => "artifacts",
            Collector::MissingContainers => "missing-containers",
            Collector::MissingVolumes => "missing-volumes",
        }
    }
}

impl fmt::Display for Collector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one collector did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Rows the planner chose.
    pub found: u64,
    /// Rows changed (marked `destroying`) or deleted.
    pub destroyed: u64,
    /// Rows an error kept from being collected (tried again next run).
    pub failed: u64,
}

impl CollectorStats {
    pub fn add(&mut self, other: CollectorStats) {
        self.found += other.found;
        self.destroyed += other.destroyed;
        self.failed += other.failed;
    }
}

/// What the collectors need of one volume row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcVolume {
    pub handle: String,
    pub worker: String,
    pub state: VolumeState,
    pub owner_kind: OwnerKind,
    pub owner_id: Option<String>,
    pub created_at: UnixMillis,
    pub last_used_at: Option<UnixMillis>,
    pub missing_since: Option<UnixMillis>,
    /// Children that are neither `destroying` nor `failed`.
    pub live_children: i64,
}

impl GcVolume {
    /// Created, present and without live children: the only volumes a
    /// collector other than the missing one may mark `destroying`.
    fn destroyable(&self) -> bool {
        self.state == VolumeState::Created
            && self.missing_since.is_none()
            && self.live_children == 0
    }

    fn last_used(&self) -> UnixMillis {
        self.last_used_at
            .map_or(self.created_at, |u| u.max(self.created_at))
    }
}

/// What the collectors need of one container row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcContainer {
    pub handle: String,
    pub state: ContainerState,
    pub build_id: Option<i64>,
    pub missing_since: Option<UnixMillis>,
    /// Read so that collectors can page their candidates oldest first.
    pub created_at: UnixMillis,
    /// Kept for `intercept` until then (a failed task step's container).
    pub kept_until: Option<UnixMillis>,
}

/// What the collectors need of one build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcBuild {
    pub status: BuildStatus,
    pub finished_at: Option<UnixMillis>,
    /// A later build of the same job has started: what the build kept
    /// for debugging is no longer the job's latest failure.
    pub superseded: bool,
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

/// abandoned-volumes: `creating` rows made `abandoned_creation` ago or
/// earlier.
pub fn plan_abandoned_volumes(
    volumes: &[GcVolume],
    now: UnixMillis,
    config: &GcConfig,
) -> Vec<String> {
    sorted(
        volumes
            .iter()
            .filter(|v| v.state == VolumeState::Creating)
            .filter(|v| now - v.created_at >= config.abandoned_creation_ms)
            .map(|v| v.handle.clone())
            .collect(),
    )
}

/// failed-volumes: every `failed` row.
pub fn plan_failed_volumes(volumes: &[GcVolume]) -> Vec<String> {
    sorted(
        volumes
            .iter()
            .filter(|v| v.state == VolumeState::Failed)
            .map(|v| v.handle.clone())
            .collect(),
    )
}

/// failed-containers: every `failed` row.
pub fn plan_failed_containers(containers: &[GcContainer]) -> Vec<String> {
    sorted(
        containers
            .iter()
            .filter(|c| c.state == ContainerState::Failed)
            .map(|c| c.handle.clone())
            .collect(),
    )
}

/// build-containers: `creating` or `created` rows of final builds, or of
/// builds whose row is gone, but for kept rows whose keep-until is still
/// ahead and whose job has not started a next build. Rows without a build
/// are left alone.
pub fn plan_build_containers(
    containers: &[GcContainer],
    builds: &HashMap<i64, GcBuild>,
    now: UnixMillis,
) -> Vec<String> {
    sorted(
        containers
            .iter()
            .filter(|c| matches!(c.state, ContainerState::Creating | ContainerState::Created))
            .filter(|c| match c.build_id {
                Some(id) => match builds.get(&id) {
                    None => true,
                    Some(b) => {
                        // A build that succeeded after all (the failure
                        // was in a `try`, or retried) has nothing to debug.
                        let kept = c.kept_until.is_some_and(|until| now < until)
                            && !b.superseded
                            && b.status != BuildStatus::Succeeded;
                        b.status.is_final() && !kept
                    }
                },
                None => false,
            })
            .map(|c| c.handle.clone())
            .collect(),
    )
}

/// Every volume handle a JSON map of name → handle names. Text that is not
/// such a map is searched for quoted handles instead, so a garbled row never
/// makes a volume look unreferenced.
fn referenced_handles<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    candidates: &[GcVolume],
) -> HashSet<String> {
    let mut out = HashSet::new();
    for text in texts {
        match serde_json::from_str::<BTreeMap<String, String>>(text) {
            Ok(map) => out.extend(map.into_values()),
            Err(_) => out.extend(
                candidates
                    .iter()
                    .filter(|v| text.contains(&format!("\"{}\"", v.handle)))
                    .map(|v| v.handle.clone()),
            ),
        }
    }
    out
}

/// orphan-volumes; see the module docs. `live_containers` are the handles
/// of every container row; `containers_made` the creation times of every
/// container row, by worker; `step_outputs` the outputs JSON of every step
/// of a build that is not final.
pub fn plan_orphan_volumes(
    volumes: &[GcVolume],
    live_containers: &HashSet<String>,
    containers_made: &HashMap<String, Vec<UnixMillis>>,
    step_outputs: &[String],
    now: UnixMillis,
    config: &GcConfig,
) -> Vec<String> {
    let referenced = referenced_handles(step_outputs.iter().map(String::as_str), volumes);
    let window = config.orphan_min_age_ms;
    sorted(
        volumes
            .iter()
            .filter(|v| v.owner_kind == OwnerKind::Container && v.destroyable())
            .filter(|v| now - v.created_at >= window)
            .filter(|v| {
                v.owner_id
                    .as_ref()
                    .is_none_or(|c| !live_containers.contains(c))
            })
            .filter(|v| {
                containers_made.get(&v.worker).is_none_or(|made| {
                    !made
                        .iter()
                        .any(|&at| at >= v.created_at && at - v.created_at <= window)
                })
            })
            .filter(|v| !referenced.contains(&v.handle))
            .map(|v| v.handle.clone())
            .collect(),
    )
}

/// caches; see the module docs. `volumes` must hold every created cache
/// (present or not) of the owners concerned, so the ranking sees them all.
pub fn plan_caches(volumes: &[GcVolume], now: UnixMillis, config: &GcConfig) -> Vec<String> {
    let mut groups: HashMap<(&str, OwnerKind, Option<&str>), Vec<&GcVolume>> = HashMap::new();
    for v in volumes {
        if matches!(
            v.owner_kind,
            OwnerKind::TaskCache | OwnerKind::ResourceCache
        ) && v.state == VolumeState::Created
            && v.missing_since.is_none()
        {
            groups
                .entry((v.worker.as_str(), v.owner_kind, v.owner_id.as_deref()))
                .or_default()
                .push(v);
        }
    }
    let mut out = Vec::new();
    for (_, mut group) in groups {
        group.sort_by(|a, b| {
            b.last_used()
                .cmp(&a.last_used())
                .then_with(|| a.handle.cmp(&b.handle))
        });
        for (rank, v) in group.into_iter().enumerate() {
            let idle = now - v.last_used();
            let expired = idle >= config.cache_retention_ms
                || (rank >= config.cache_keep_per_owner && idle >= config.cache_duplicate_grace_ms);
            if expired && v.destroyable() {
                out.push(v.handle.clone());
            }
        }
    }
    sorted(out)
}

/// artifacts; see the module docs. `builds` holds the builds the
/// `build/<id>` owners name (absent: the row is gone); `live_build_artifacts`
/// the artifacts JSON of every build that is not final.
pub fn plan_artifacts(
    volumes: &[GcVolume],
    builds: &HashMap<i64, GcBuild>,
    live_build_artifacts: &[String],
    now: UnixMillis,
    config: &GcConfig,
) -> Vec<String> {
    let referenced = referenced_handles(live_build_artifacts.iter().map(String::as_str), volumes);
    sorted(
        volumes
            .iter()
            .filter(|v| v.owner_kind == OwnerKind::Artifact && v.destroyable())
            .filter(|v| !referenced.contains(&v.handle))
            .filter(|v| match v.owner_id.as_deref() {
                Some("upload") => now - v.created_at >= config.upload_retention_ms,
                Some(owner) => match artifact_build(owner) {
                    Some(id) => match builds.get(&id) {
                        Some(b) => {
                            b.status.is_final()
                                && now - b.finished_at.unwrap_or(v.created_at)
                                    >= config.artifact_retention_ms
                        }
                        None => now - v.created_at >= config.artifact_retention_ms,
                    },
                    None => false,
                },
                None => false,
            })
            .map(|v| v.handle.clone())
            .collect(),
    )
}

/// The build id of an artifact owner `build/<id>`.
pub fn artifact_build(owner_id: &str) -> Option<i64> {
    owner_id.strip_prefix("build/")?.parse().ok()
}

/// A volume row the missing collector deletes, with its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoomedVolume {
    pub handle: String,
    pub parent: Option<String>,
}

/// The rows of one subtree that one batch deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtreePart {
    /// The subtree's top row: a row missing past the grace period whose
    /// parent is not deleted with it. The executor re-checks it is still
    /// missing before deleting anything of the subtree.
    pub root: String,
    /// Deepest first; every row's children come before it (or were in an
    /// earlier batch of the same subtree).
    pub handles: Vec<String>,
}

/// One transaction of the missing collector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MissingBatch {
    pub parts: Vec<SubtreePart>,
}

impl MissingBatch {
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.handles.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

/// missing-volumes: orders the doomed rows (every row missing past the
/// grace period, and all their descendants) into batches of at most
/// `batch_size` rows, children before parents.
///
/// Rows are grouped into subtrees under their topmost doomed ancestor.
/// Subtrees that fit are packed whole into batches; a bigger one gets
/// batches of its own, deepest rows first, so no batch deletes a row whose
/// child a later batch deletes. Batches come in that order.
pub fn plan_missing_volumes(doomed: &[DoomedVolume], batch_size: usize) -> Vec<MissingBatch> {
    let batch_size = batch_size.max(1);
    let parent: HashMap<&str, Option<&str>> = doomed
        .iter()
        .map(|d| (d.handle.as_str(), d.parent.as_deref()))
        .collect();
    // (top, depth) of every doomed row, memoised along each walk.
    let mut placed: HashMap<&str, (&str, usize)> = HashMap::with_capacity(doomed.len());
    for d in doomed {
        let mut path: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        let mut at = d.handle.as_str();
        let (top, base) = loop {
            if let Some(&(top, depth)) = placed.get(at) {
                break (top, depth);
            }
            path.push(at);
            seen.insert(at);
            match parent.get(at).copied().flatten() {
                // A parent that is doomed too: keep climbing (a cycle in
                // corrupt data ends the climb where it closes).
                Some(p) if parent.contains_key(p) && !seen.contains(p) => at = p,
                _ => {
                    path.pop();
                    placed.insert(at, (at, 0));
                    break (at, 0);
                }
            }
        };
        for (i, h) in path.iter().rev().enumerate() {
            placed.insert(h, (top, base + i + 1));
        }
    }
    let mut subtrees: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for d in doomed {
        let (top, depth) = placed[d.handle.as_str()];
        subtrees
            .entry(top)
            .or_default()
            .push((depth, d.handle.as_str()));
    }
    let mut batches = Vec::new();
    let mut current = MissingBatch::default();
    for (root, mut rows) in subtrees {
        rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        rows.dedup();
        let handles: Vec<String> = rows.into_iter().map(|(_, h)| h.to_string()).collect();
        if handles.len() <= batch_size {
            if current.len() + handles.len() > batch_size {
                batches.push(std::mem::take(&mut current));
            }
            current.parts.push(SubtreePart {
                root: root.to_string(),
                handles,
            });
        } else {
            if !current.is_empty() {
                batches.push(std::mem::take(&mut current));
            }
            for chunk in handles.chunks(batch_size) {
                batches.push(MissingBatch {
                    parts: vec![SubtreePart {
                        root: root.to_string(),
                        handles: chunk.to_vec(),
                    }],
                });
            }
        }
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// missing-containers: rows missing since `cutoff` or earlier, in batches.
pub fn plan_missing_containers(
    containers: &[GcContainer],
    now: UnixMillis,
    config: &GcConfig,
) -> Vec<Vec<String>> {
    let cutoff = config.missing_cutoff(now);
    sorted(
        containers
            .iter()
            .filter(|c| c.missing_since.is_some_and(|m| m <= cutoff))
            .map(|c| c.handle.clone())
            .collect(),
    )
    .chunks(config.batch_size.max(1))
    .map(<[String]>::to_vec)
    .collect()
}

#[cfg(test)]
mod tests;
