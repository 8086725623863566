//! The worker's sweeper: destroys what web's answer to a report lists,
//! several at a time, and removes what the worker's stores left half-made.
//!
//! Containers go first (they mount volumes). Volumes go in waves: a volume
//! is destroyed only after every volume in the list that is its child on
//! disk, so a parent never meets "has children" because its child's
//! destruction ran beside it. Each destroy is idempotent (gone already is
//! done), one failure never stops the rest, and a volume that a container
//! the worker still has mounts is left alone: web asks again on the next
//! report, once the container is gone. So is a container younger than a
//! minute (see [`SweepOptions::container_min_age`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::stream::{self, StreamExt};
use hangar_volumes::VolumeManager;

use crate::containers::ContainerManager;

/// How the sweeper goes about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepOptions {
    /// How many destroys run at once.
    pub concurrency: usize,
    /// A container younger than this is not destroyed yet. Web lists the
    /// containers it has no row for, but a container the worker makes for
    /// itself (a health probe) never has one and lives a few seconds;
    /// every container web makes has its row before it exists.
    pub container_min_age: Duration,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            concurrency: 4,
            container_min_age: Duration::from_secs(60),
        }
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepOutcome {
    pub destroyed_containers: Vec<String>,
    pub destroyed_volumes: Vec<String>,
    /// Volumes left because a container still mounts them.
    pub mounted: Vec<String>,
    /// Containers left because they are younger than the minimum age.
    pub young: Vec<String>,
    /// What could not be destroyed, and why; asked again next report.
    pub failed: Vec<(String, String)>,
    /// Leftovers of interrupted container creations and removals, removed.
    pub leftovers: Vec<PathBuf>,
}

/// Orders `destroy` into waves: every handle comes in a later wave than all
/// of its descendants (by the on-disk `parents`) that are also listed.
/// Handles in one wave can be destroyed at once. Within a wave, sorted.
pub fn waves(destroy: &[String], parents: &HashMap<String, Option<String>>) -> Vec<Vec<String>> {
    let listed: BTreeSet<&str> = destroy.iter().map(String::as_str).collect();
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for h in &listed {
        if let Some(Some(p)) = parents.get(*h) {
            if listed.contains(p.as_str()) {
                children.entry(p.as_str()).or_default().push(h);
            }
        }
    }
    // Height: 0 without listed children, else one more than the highest
    // child. Computed depth-first without recursion; a cycle in corrupt
    // metadata is cut where it closes.
    let mut height: HashMap<&str, usize> = HashMap::new();
    for &start in &listed {
        let mut stack: Vec<(&str, bool)> = vec![(start, false)];
        let mut on_path: HashSet<&str> = HashSet::new();
        while let Some((h, expanded)) = stack.pop() {
            if height.contains_key(h) {
                continue;
            }
            let kids = children.get(h).map(Vec::as_slice).unwrap_or(&[]);
            if expanded {
                on_path.remove(h);
                let hgt = kids
                    .iter()
                    .filter_map(|k| height.get(k).map(|x| x + 1))
                    .max()
                    .unwrap_or(0);
                height.insert(h, hgt);
            } else if on_path.insert(h) {
                stack.push((h, true));
                for k in kids {
                    if !height.contains_key(k) && !on_path.contains(k) {
                        stack.push((k, false));
                    }
                }
            }
        }
    }
    let mut out: Vec<Vec<String>> = Vec::new();
    for h in listed {
        let i = height[h];
        if out.len() <= i {
            out.resize_with(i + 1, Vec::new);
        }
        out[i].push(h.to_string());
    }
    out
}

/// Destroys the containers, then the volumes, `options.concurrency` at a
/// time, and removes container leftovers. Never fails as a whole: what went
/// wrong is in [`SweepOutcome::failed`].
pub async fn sweep(
    volumes: &Arc<VolumeManager>,
    containers: Option<&Arc<ContainerManager>>,
    destroy_volumes: &[String],
    destroy_containers: &[String],
    options: &SweepOptions,
) -> SweepOutcome {
    let concurrency = options.concurrency.max(1);
    let min_age = i64::try_from(options.container_min_age.as_millis()).unwrap_or(i64::MAX);
    let mut out = SweepOutcome::default();
    if let Some(cm) = containers {
        let results: Vec<(String, Result<bool, String>)> =
            stream::iter(destroy_containers.to_vec())
                .map(|handle| {
                    let cm = cm.clone();
                    async move {
                        let h = handle.clone();
                        let r = tokio::task::spawn_blocking(move || {
                            let now = SystemTime::now()
                                .duration_since(UNIX_EPOCH)
                                .map_or(0, |d| d.as_millis() as i64);
                            if let Some(c) = cm.get(&h)? {
                                if now.saturating_sub(c.started_at) < min_age {
                                    return Ok(false);
                                }
                            }
                            cm.destroy(&h).map(|()| true)
                        })
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                        (handle, r)
                    }
                })
                .buffer_unordered(concurrency)
                .collect()
                .await;
        for (handle, r) in results {
            match r {
                Ok(true) => out.destroyed_containers.push(handle),
                Ok(false) => out.young.push(handle),
                Err(e) => out.failed.push((handle, e)),
            }
        }
    }
    let mounted = match containers {
        Some(cm) => {
            let cm = cm.clone();
            match tokio::task::spawn_blocking(move || cm.mounted_volumes()).await {
                Ok(Ok(m)) => Some(m),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot tell which volumes containers mount; destroying none this time");
                    None
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mount listing task failed; destroying no volumes this time");
                    None
                }
            }
        }
        None => Some(BTreeSet::new()),
    };
    if !destroy_volumes.is_empty() {
        match mounted {
            Some(mounted) => {
                sweep_volumes(volumes, destroy_volumes, &mounted, concurrency, &mut out).await
            }
            None => out.failed.extend(
                destroy_volumes
                    .iter()
                    .map(|h| (h.clone(), "container mounts unknown".to_string())),
            ),
        }
    }
    if let Some(cm) = containers {
        let cm = cm.clone();
        match tokio::task::spawn_blocking(move || cm.sweep_leftovers()).await {
            Ok(Ok(removed)) => out.leftovers = removed,
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot remove container leftovers"),
            Err(e) => tracing::warn!(error = %e, "container leftover task failed"),
        }
    }
    out.destroyed_containers.sort();
    out.young.sort();
    out.destroyed_volumes.sort();
    out.failed.sort();
    out
}

async fn sweep_volumes(
    volumes: &Arc<VolumeManager>,
    destroy: &[String],
    mounted: &BTreeSet<String>,
    concurrency: usize,
    out: &mut SweepOutcome,
) {
    let m = volumes.clone();
    let parents: HashMap<String, Option<String>> = match tokio::task::spawn_blocking(move || {
        m.list()
    })
    .await
    {
        Ok(Ok(list)) => list.into_iter().map(|v| (v.handle, v.parent)).collect(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot list volumes; destroying in the order given");
            HashMap::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "volume listing task failed; destroying in the order given");
            HashMap::new()
        }
    };
    for wave in waves(destroy, &parents) {
        let (held, go): (Vec<String>, Vec<String>) =
            wave.into_iter().partition(|h| mounted.contains(h));
        out.mounted.extend(held);
        let results: Vec<(String, Result<(), String>)> = stream::iter(go)
            .map(|handle| {
                let m = volumes.clone();
                async move {
                    let h = handle.clone();
                    let r = tokio::task::spawn_blocking(move || m.destroy(&h))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                    (handle, r)
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        for (handle, r) in results {
            match r {
                Ok(()) => out.destroyed_volumes.push(handle),
                Err(e) => out.failed.push((handle, e)),
            }
        }
    }
    out.mounted.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parents(rows: &[(&str, Option<&str>)]) -> HashMap<String, Option<String>> {
        rows.iter()
            .map(|(h, p)| (h.to_string(), p.map(str::to_string)))
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn destroys_are_ordered_in_waves_children_first() {
        let disk = parents(&[
            ("base", None),
            ("a", Some("base")),
            ("b", Some("base")),
            ("a1", Some("a")),
            ("kept", Some("base")),
            ("other", None),
            ("loop1", Some("loop2")),
            ("loop2", Some("loop1")),
        ]);
        // (listed, waves)
        let cases: Vec<(Vec<&str>, Vec<Vec<&str>>)> = vec![
            (vec![], vec![]),
            // parents listed before children still wait for them
            (
                vec!["base", "a", "a1", "b", "other"],
                vec![vec!["a1", "b", "other"], vec!["a"], vec!["base"]],
            ),
            // a child not listed does not hold its parent back here (the
            // destroy fails and web asks again)
            (vec!["base", "b"], vec![vec!["b"], vec!["base"]]),
            // unknown handles (not on disk): first wave
            (vec!["ghost", "a1"], vec![vec!["a1", "ghost"]]),
            // duplicates count once
            (vec!["a1", "a1"], vec![vec!["a1"]]),
            // corrupt metadata with a cycle does not hang
            (vec!["loop1", "loop2"], vec![vec!["loop2"], vec!["loop1"]]),
        ];
        for (i, (listed, expected)) in cases.into_iter().enumerate() {
            let expected: Vec<Vec<String>> = expected.iter().map(|w| strings(w)).collect();
            assert_eq!(waves(&strings(&listed), &disk), expected, "case {i}");
        }
    }
}
