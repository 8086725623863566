//! What `execute` uploads of an input directory, as fly decides it: in a
//! git work tree, the files git knows (tracked and not deleted) and the
//! untracked ones `.gitignore` does not exclude; elsewhere, or with
//! `--include-ignored`, everything. Either way never a hangar data dir
//! (quickstart's `hangar-data`, holding the admin token, the worker key and
//! the database): a task must not read the secrets of the hangar it runs on.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The entries to pack, relative to the input dir, parents before their
/// children; and the hangar data dirs left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Selection {
    pub entries: Vec<PathBuf>,
    pub skipped_data_dirs: Vec<PathBuf>,
    /// Whether `.gitignore` decided (the dir is in a git work tree).
    pub from_git: bool,
}

/// Picks what to upload of `root`.
pub(crate) fn select(root: &Path, include_ignored: bool) -> std::io::Result<Selection> {
    let listed = if include_ignored {
        None
    } else {
        git_files(root)
    };
    let from_git = listed.is_some();
    let (mut entries, mut skipped_data_dirs) = match listed {
        Some(files) => with_parents_without_data_dirs(root, files),
        None => walk(root)?,
    };
    // Byte order puts a dir before everything under it (a prefix sorts
    // first), and costs a memcmp where `Path`'s order walks components.
    let by_bytes =
        |a: &PathBuf, b: &PathBuf| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes());
    entries.sort_unstable_by(by_bytes);
    entries.dedup();
    skipped_data_dirs.sort_unstable_by(by_bytes);
    Ok(Selection {
        entries,
        skipped_data_dirs,
        from_git,
    })
}

/// A dir that holds a hangar's secrets: an `admin-token` beside a database
/// or a `workers` dir (what `web --data-dir` and quickstart make).
pub(crate) fn is_data_dir(dir: &Path) -> bool {
    dir.join("admin-token").is_file()
        && (dir.join("hangar.db").exists() || dir.join("workers").is_dir())
}

/// What git lists of `root` as fly uploads it; `None` when `root` is not in
/// a git work tree or git cannot run.
fn git_files(root: &Path) -> Option<Vec<PathBuf>> {
    let tracked = git_ls(root, &[])?;
    let deleted: HashSet<PathBuf> = git_ls(root, &["--deleted"])?.into_iter().collect();
    let untracked = git_ls(root, &["--others", "--exclude-standard"])?;
    Some(
        tracked
            .into_iter()
            .filter(|f| !deleted.contains(f))
            .chain(untracked)
            .collect(),
    )
}

fn git_ls(root: &Path, flags: &[&str]) -> Option<Vec<PathBuf>> {
    // A short-lived child the CLI waits for, as fly does.
    #[allow(clippy::disallowed_methods)]
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .args(flags)
        .current_dir(root)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(parse_nul_list(&out.stdout))
}

/// `git ls-files -z` output as paths.
fn parse_nul_list(bytes: &[u8]) -> Vec<PathBuf> {
    bytes
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
        .collect()
}

/// Every entry under `root` (links not followed), relative to it, less the
/// hangar data dirs, which are neither listed nor entered; and those.
fn walk(root: &Path) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        for entry in std::fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let path = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                if is_data_dir(&entry.path()) {
                    skipped.push(path);
                    continue;
                }
                dirs.push(path.clone());
            }
            out.push(path);
        }
    }
    Ok((out, skipped))
}

/// `files` (which git lists: files, never dirs) with every parent dir,
/// less whatever lies in a hangar data dir (checked on disk under `root`,
/// once per dir).
fn with_parents_without_data_dirs(
    root: &Path,
    files: Vec<PathBuf>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut holders: HashMap<PathBuf, Option<PathBuf>> = HashMap::new();
    let mut skipped = HashSet::new();
    let mut parents: HashSet<PathBuf> = HashSet::new();
    let mut entries = Vec::with_capacity(files.len());
    for file in files {
        let parent = file.parent().unwrap_or(Path::new(""));
        if let Some(data) = data_dir_holding(root, parent, &mut holders) {
            skipped.insert(data);
            continue;
        }
        for dir in file.ancestors().skip(1) {
            // A dir seen before came with all of its own parents.
            if dir.as_os_str().is_empty() || !parents.insert(dir.to_path_buf()) {
                break;
            }
        }
        entries.push(file);
    }
    entries.extend(parents);
    (entries, skipped.into_iter().collect())
}

/// The outermost hangar data dir that is or holds `dir`, if any: looked
/// up on disk once per dir, its parents first.
fn data_dir_holding(
    root: &Path,
    dir: &Path,
    holders: &mut HashMap<PathBuf, Option<PathBuf>>,
) -> Option<PathBuf> {
    if dir.as_os_str().is_empty() {
        return None;
    }
    if let Some(known) = holders.get(dir) {
        return known.clone();
    }
    let parent = dir.parent().unwrap_or(Path::new(""));
    let holder = data_dir_holding(root, parent, holders)
        .or_else(|| is_data_dir(&root.join(dir)).then(|| dir.to_path_buf()));
    holders.insert(dir.to_path_buf(), holder.clone());
    holder
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    fn git(dir: &Path, args: &[&str]) {
        #[allow(clippy::disallowed_methods)]
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    fn quickstart_data(dir: &Path) {
        fs::create_dir_all(dir.join("workers/w1")).unwrap();
        fs::write(dir.join("admin-token"), "secret").unwrap();
        fs::write(dir.join("worker-key"), "secret").unwrap();
        fs::write(dir.join("hangar.db"), "db").unwrap();
    }

    #[test]
    fn a_git_work_tree_uploads_what_git_keeps_and_never_a_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        fs::create_dir_all(d.join("src/deep")).unwrap();
        fs::write(d.join("src/deep/main.rs"), "fn main() {}").unwrap();
        fs::write(d.join("gone.txt"), "x").unwrap();
        fs::write(d.join(".gitignore"), "target/\n*.log\n").unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-qm", "init"]);
        fs::remove_file(d.join("gone.txt")).unwrap();
        fs::create_dir_all(d.join("target/debug")).unwrap();
        fs::write(d.join("target/debug/big"), "x").unwrap();
        fs::write(d.join("build.log"), "x").unwrap();
        fs::write(d.join("new.txt"), "x").unwrap();
        // quickstart run from the checkout: not ignored, still never sent.
        quickstart_data(&d.join("hangar-data"));

        let s = select(d, false).unwrap();
        assert!(s.from_git);
        assert_eq!(
            s.entries,
            paths(&[
                ".gitignore",
                "new.txt",
                "src",
                "src/deep",
                "src/deep/main.rs"
            ])
        );
        assert_eq!(s.skipped_data_dirs, paths(&["hangar-data"]));

        // --include-ignored: everything but the data dir (and .git is
        // there, as fly's whole-dir upload has it).
        let all = select(d, true).unwrap();
        assert!(!all.from_git);
        for want in [
            "target/debug/big",
            "build.log",
            ".git/HEAD",
            "src/deep/main.rs",
        ] {
            assert!(all.entries.contains(&PathBuf::from(want)), "{want}");
        }
        assert!(!all.entries.iter().any(|e| e.starts_with("hangar-data")));
        assert_eq!(all.skipped_data_dirs, paths(&["hangar-data"]));
    }

    #[test]
    fn outside_git_everything_is_uploaded_but_data_dirs_at_any_depth() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/c"), "x").unwrap();
        quickstart_data(&d.join("a/data"));
        // An admin-token alone (a test fixture, say) is not a data dir.
        fs::create_dir_all(d.join("fixtures")).unwrap();
        fs::write(d.join("fixtures/admin-token"), "t").unwrap();
        let s = select(d, false).unwrap();
        assert!(!s.from_git);
        assert_eq!(
            s.entries,
            paths(&["a", "a/b", "a/b/c", "fixtures", "fixtures/admin-token"])
        );
        assert_eq!(s.skipped_data_dirs, paths(&["a/data"]));
    }

    #[test]
    fn git_lists_are_split_on_nul_and_paths_keep_odd_bytes() {
        assert_eq!(
            parse_nul_list(b"a b\0dir/\xff\0\0"),
            vec![
                PathBuf::from("a b"),
                PathBuf::from(std::ffi::OsStr::from_bytes(b"dir/\xff")),
            ]
        );
    }
}
