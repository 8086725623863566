//! Database against disk: what each side holds that the other lacks.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

/// The entries of `dir` that are directories and not dot-dirs (work in
/// progress: `.creating-…`, `.destroying-…`, runc's `.runc`). A missing
/// dir has none.
pub fn handles_on_disk(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// One side's surplus over the other, for one kind of thing on one worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Rows with no directory on the worker's disk.
    pub rows_without_dir: Vec<String>,
    /// Directories on the disk with no row in a state that keeps them.
    pub dirs_without_row: Vec<String>,
}

impl Divergence {
    pub fn total(&self) -> usize {
        self.rows_without_dir.len() + self.dirs_without_row.len()
    }
}

/// `rows` are (handle, state) of one worker; a directory is accounted for
/// only by a row in one of the `keeping` states (e.g. `created`): after a
/// quiet period, a row in any other state with a directory means the worker
/// did not destroy what web wanted gone.
pub fn compare(rows: &[(String, String)], keeping: &[&str], dirs: &BTreeSet<String>) -> Divergence {
    let kept: BTreeSet<&str> = rows
        .iter()
        .filter(|(_, s)| keeping.contains(&s.as_str()))
        .map(|(h, _)| h.as_str())
        .collect();
    Divergence {
        rows_without_dir: rows
            .iter()
            .filter(|(h, _)| !dirs.contains(h))
            .map(|(h, s)| format!("{h} ({s})"))
            .collect(),
        dirs_without_row: dirs
            .iter()
            .filter(|d| !kept.contains(d.as_str()))
            .map(|d| match rows.iter().find(|(h, _)| h == d) {
                Some((_, s)) => format!("{d} (row {s})"),
                None => format!("{d} (no row)"),
            })
            .collect(),
    }
}

/// The live check used after a worker registers again: the worker is clean
/// once no `created`, present row lacks its directory (seen in both reads
/// of the rows around the disk listing) and no directory lacks a row of any
/// state (in either read). Volumes being made or destroyed meanwhile do not
/// count against it.
pub fn clean_now(
    rows_before: &[(String, String, bool)],
    dirs: &BTreeSet<String>,
    rows_after: &[(String, String, bool)],
) -> bool {
    let present = |rows: &[(String, String, bool)]| -> BTreeSet<String> {
        rows.iter()
            .filter(|(_, s, missing)| s == "created" && !missing)
            .map(|(h, _, _)| h.clone())
            .collect()
    };
    let any = |rows: &[(String, String, bool)]| -> BTreeSet<String> {
        rows.iter().map(|(h, _, _)| h.clone()).collect()
    };
    let (p1, p2) = (present(rows_before), present(rows_after));
    let stale_rows = p1.intersection(&p2).any(|h| !dirs.contains(h));
    let (a1, a2) = (any(rows_before), any(rows_after));
    let stale_dirs = dirs.iter().any(|d| !a1.contains(d) && !a2.contains(d));
    !stale_rows && !stale_dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(h, s)| (h.to_string(), s.to_string()))
            .collect()
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_side_s_surplus_is_named() {
        let d = compare(
            &rows(&[("a", "created"), ("b", "created"), ("c", "destroying")]),
            &["created"],
            &set(&["a", "c", "d"]),
        );
        assert_eq!(d.rows_without_dir, vec!["b (created)"]);
        assert_eq!(d.dirs_without_row, vec!["c (row destroying)", "d (no row)"]);
        assert_eq!(d.total(), 3);
        let same = compare(&rows(&[("a", "created")]), &["created"], &set(&["a"]));
        assert_eq!(same.total(), 0);
    }

    #[test]
    fn dot_dirs_and_files_are_not_handles() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("vol-1")).unwrap();
        std::fs::create_dir(dir.path().join(".creating-vol-2")).unwrap();
        std::fs::write(dir.path().join("stray-file"), "x").unwrap();
        assert_eq!(handles_on_disk(dir.path()), set(&["vol-1"]));
        assert!(handles_on_disk(&dir.path().join("absent")).is_empty());
    }

    #[test]
    fn a_worker_is_clean_when_neither_side_has_stale_entries() {
        let r = |v: &[(&str, &str, bool)]| -> Vec<(String, String, bool)> {
            v.iter()
                .map(|(h, s, m)| (h.to_string(), s.to_string(), *m))
                .collect()
        };
        let before = r(&[("a", "created", false), ("b", "creating", false)]);
        // b is being made: its dir may or may not be there yet.
        assert!(clean_now(&before, &set(&["a"]), &before));
        assert!(clean_now(&before, &set(&["a", "b"]), &before));
        // A created, present row without its dir is stale.
        assert!(!clean_now(&before, &set(&[]), &before));
        // Unless it was marked missing (web already knows it is gone).
        let missing = r(&[("a", "created", true)]);
        assert!(clean_now(&missing, &set(&[]), &missing));
        // A dir no row names is stale.
        assert!(!clean_now(&before, &set(&["a", "z"]), &before));
        // A row made between the two reads accounts for its dir.
        let after = r(&[("a", "created", false), ("z", "creating", false)]);
        assert!(clean_now(&before, &set(&["a", "z"]), &after));
    }
}
