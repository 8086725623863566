//! Volumes as web sees them, and what a worker's report of its volumes means.
//!
//! A report is the full list of handles a worker has on disk. The planner
//! diffs it against the rows web holds for that worker, both ways, and says
//! what to change; the store applies it.

// A report diffs tens of thousands of handles several times over; foldhash
// is several times faster than the default SipHash here and still seeded
// per process.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::fmt;
use std::str::FromStr;

use crate::UnixMillis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeState {
    /// A row exists; the worker is making the volume (or was told to).
    Creating,
    Created,
    /// Web wants it gone; the worker destroys it when it next reports it.
    Destroying,
    /// Creation failed; whatever the worker has of it is to be destroyed.
    Failed,
}

impl VolumeState {
    pub const ALL: [VolumeState; 4] = [
        VolumeState::Creating,
        VolumeState::Created,
        VolumeState::Destroying,
        VolumeState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Creating => "creating",
            VolumeState::Created => "created",
            VolumeState::Destroying => "destroying",
            VolumeState::Failed => "failed",
        }
    }
}

impl fmt::Display for VolumeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for VolumeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        VolumeState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown volume state {s:?}"))
    }
}

/// What a volume is for; decides who may use it and when it is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerKind {
    BaseResourceType,
    ResourceCache,
    TaskCache,
    Container,
    Artifact,
}

impl OwnerKind {
    pub const ALL: [OwnerKind; 5] = [
        OwnerKind::BaseResourceType,
        OwnerKind::ResourceCache,
        OwnerKind::TaskCache,
        OwnerKind::Container,
        OwnerKind::Artifact,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::BaseResourceType => "base-resource-type",
            OwnerKind::ResourceCache => "resource-cache",
            OwnerKind::TaskCache => "task-cache",
            OwnerKind::Container => "container",
            OwnerKind::Artifact => "artifact",
        }
    }
}

impl fmt::Display for OwnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OwnerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OwnerKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown volume owner kind {s:?}"))
    }
}

/// How a volume is made: `empty`, `cow` (a copy-on-write child of
/// `parent`) or `import` (a copy of a path on the worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    Empty,
    Cow,
    Import,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::Empty, Strategy::Cow, Strategy::Import];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Empty => "empty",
            Strategy::Cow => "cow",
            Strategy::Import => "import",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown volume strategy {s:?}"))
    }
}

/// What the report planner needs of one volume row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRow {
    pub handle: String,
    pub state: VolumeState,
    pub parent: Option<String>,
    pub missing_since: Option<UnixMillis>,
    /// Made so recently that the worker's listing may have been taken
    /// before the volume existed ([`YOUNG_VOLUME_MS`]).
    pub young: bool,
}

/// How long after its row is made a volume the worker did not report is
/// not yet judged missing: a report lists the worker's volumes, then
/// travels to web and is applied; a volume made meanwhile (an upload, a
/// step's output) is absent from the listing but present on the worker.
/// Many times a listing plus its trip (milliseconds for thousands of
/// volumes); a volume really lost that young is marked at a later report.
pub const YOUNG_VOLUME_MS: i64 = 5_000;

/// The changes one report calls for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportPlan {
    /// Rows the worker did not report: absent from now on (for scheduling),
    /// collected after the grace period.
    pub mark_missing: Vec<String>,
    /// Rows the worker reported again after they went missing.
    pub clear_missing: Vec<String>,
    /// Handles the worker must destroy: unknown to web, being destroyed, or
    /// failed. Children come before their parents.
    pub destroy_on_worker: Vec<String>,
    /// Rows whose volume is gone from the worker and that web no longer
    /// wants: deleted now. Children come before their parents.
    pub delete_rows: Vec<String>,
    /// Unreported rows too young to judge ([`VolumeRow::young`]): nothing
    /// is written for them, and the report is not remembered as quiet, so
    /// a later one judges them.
    pub deferred: usize,
}

impl ReportPlan {
    pub fn is_empty(&self) -> bool {
        self.mark_missing.is_empty()
            && self.clear_missing.is_empty()
            && self.destroy_on_worker.is_empty()
            && self.delete_rows.is_empty()
    }
}

/// Diffs a worker's full report against the rows web holds for it.
///
/// Rows still `creating` are never marked missing: the worker may not have
/// made them yet. A row is deleted only when no row that stays has it as a
/// parent, so a child never outlives its parent's row.
pub fn plan_report(rows: &[VolumeRow], reported: &[String]) -> ReportPlan {
    // Sized up front: growing a map of tens of thousands rehashes it
    // several times over.
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(rows.len());
    index.extend(rows.iter().enumerate().map(|(i, r)| (r.handle.as_str(), i)));
    let parent_of = |h: &str| index.get(h).and_then(|&i| rows[i].parent.as_deref());
    let mut plan = ReportPlan::default();

    // One lookup per reported handle marks the rows it finds: the rows left
    // unmarked are the unreported ones, with no set of reported handles.
    let mut is_reported = vec![false; rows.len()];
    let mut unknown: Vec<&str> = Vec::new();
    for handle in reported {
        let Some(&i) = index.get(handle.as_str()) else {
            unknown.push(handle);
            continue;
        };
        if std::mem::replace(&mut is_reported[i], true) {
            continue; // listed twice
        }
        let row = &rows[i];
        match row.state {
            VolumeState::Destroying | VolumeState::Failed => {
                plan.destroy_on_worker.push(row.handle.clone())
            }
            VolumeState::Created if row.missing_since.is_some() => {
                plan.clear_missing.push(row.handle.clone())
            }
            _ => {}
        }
    }

    let mut deletable: HashSet<&str> = HashSet::new();
    for (row, _) in rows.iter().zip(&is_reported).filter(|(_, r)| !**r) {
        match row.state {
            VolumeState::Created if row.missing_since.is_none() && row.young => plan.deferred += 1,
            VolumeState::Created if row.missing_since.is_none() => {
                plan.mark_missing.push(row.handle.clone())
            }
            VolumeState::Destroying | VolumeState::Failed => {
                deletable.insert(row.handle.as_str());
            }
            _ => {}
        }
    }
    // A deletable row whose child stays (any state not deletable) must wait,
    // and so must its deletable ancestors. The walk stops at the first
    // ancestor that is not deletable: that one stays, and its own walk
    // blocks the deletable rows above it.
    let mut blocked: HashSet<&str> = HashSet::new();
    if !deletable.is_empty() {
        for row in rows {
            if deletable.contains(row.handle.as_str()) {
                continue;
            }
            let mut parent = row.parent.as_deref();
            while let Some(p) = parent {
                if !deletable.contains(p) || !blocked.insert(p) {
                    break;
                }
                parent = parent_of(p);
            }
        }
    }
    let deletable: Vec<&VolumeRow> = rows
        .iter()
        .filter(|r| deletable.contains(r.handle.as_str()) && !blocked.contains(r.handle.as_str()))
        .collect();
    plan.delete_rows = children_first(&deletable, parent_of);
    plan.destroy_on_worker = {
        let mut on_worker: Vec<&VolumeRow> = plan
            .destroy_on_worker
            .iter()
            .filter_map(|h| index.get(h.as_str()).map(|&i| &rows[i]))
            .collect();
        on_worker.sort_by(|a, b| a.handle.cmp(&b.handle));
        let mut ordered = children_first(&on_worker, parent_of);
        // Unknown handles have no known parents: destroy them last, sorted.
        unknown.sort_unstable();
        unknown.dedup();
        ordered.extend(unknown.into_iter().map(str::to_string));
        ordered
    };
    plan.mark_missing.sort();
    plan.clear_missing.sort();
    plan
}

/// Orders `set` so every volume comes before its ancestors: deepest first,
/// then by handle for a stable order. `parent_of` gives a known row's
/// parent.
pub fn children_first<'a>(
    set: &[&'a VolumeRow],
    parent_of: impl Fn(&'a str) -> Option<&'a str>,
) -> Vec<String> {
    let depth = |row: &'a VolumeRow| {
        let mut d = 0usize;
        let mut parent = row.parent.as_deref();
        let mut seen = HashSet::new();
        while let Some(p) = parent {
            if !seen.insert(p) {
                break; // a cycle in corrupt data must not hang the planner
            }
            d += 1;
            parent = parent_of(p);
        }
        d
    };
    let mut with_depth: Vec<(usize, &str)> =
        set.iter().map(|r| (depth(r), r.handle.as_str())).collect();
    with_depth.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    with_depth.into_iter().map(|(_, h)| h.to_string()).collect()
}

pub mod transfer;

#[cfg(test)]
mod tests;
