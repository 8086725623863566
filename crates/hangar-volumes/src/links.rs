//! Symlink checks of a stream-in, against the volume as it will be on disk
//! once the staged archive is merged.
//!
//! One archive at a time cannot be the unit of the check: a link to a name
//! that does not exist yet (`up -> b/..`, which stays inside while `b` is
//! missing) passes, and a later archive that makes `b` a link to `.` turns
//! it into an escape. So, after every archive:
//!
//! 1. every symlink the archive staged is resolved in the *merged view*
//!    (staged entries over the existing data), through chains of links of
//!    both, and refused if it leaves the volume root at any step;
//! 2. when the archive adds or replaces a symlink, every symlink already in
//!    the volume is resolved again in the merged view: one that escapes now
//!    but did not before makes the archive refused. (A link that already
//!    escaped before, e.g. one a container wrote, is not this archive's
//!    doing and does not block it; a new link through it is refused by 1.)
//!
//! The resolver works like the kernel's, with the volume's data root as `/`,
//! except that it is stricter in two places: a missing name or a regular
//! file is walked through as if it were a directory (so a later archive
//! cannot change the verdict by creating it as one; making it a link is
//! caught by step 2), and an absolute target is always outside.
//!
//! The merged view equals the tree after the merge because the merge check
//! (`tar_in::check_merge`) has already refused every staged entry that
//! would replace a directory by a non-directory or the other way round.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::driver::names;
use crate::error::{IoContext, VolumeError};
use crate::paths::{display, join, RelPath};
use crate::tar_in::{refused, Target, EXTRACT_STAGING};

/// How many symlinks one resolution may traverse (like Linux's ELOOP limit).
const MAX_SYMLINK_HOPS: u32 = 40;

/// Directory levels a walk keeps open; deeper levels are listed into memory
/// and closed, so a very deep tree cannot exhaust file descriptors.
const OPEN_LEVELS: usize = 64;

enum Node {
    Missing,
    Symlink(PathBuf),
    /// A directory or anything else; both are walked through.
    Other,
}

/// The volume before (`merged == false`) or after the merge.
struct View<'a> {
    t: &'a Target<'a>,
    merged: bool,
}

impl View<'_> {
    fn lookup(&self, p: &[OsString]) -> io::Result<Node> {
        if let Some(staged) = self.staged_part(p) {
            match classify(&join(self.t.staging, staged))? {
                Node::Missing => {}
                found => return Ok(found),
            }
        }
        classify(&join(self.t.data, p))
    }

    /// The part of `p` below the destination, when `p` is there and the
    /// view includes the staged archive.
    fn staged_part<'p>(&self, p: &'p [OsString]) -> Option<&'p [OsString]> {
        let n = self.t.sub.len();
        (self.merged && p.len() > n && p[..n] == *self.t.sub).then(|| &p[n..])
    }

    /// Resolve `target` as the kernel would from directory `from`, with the
    /// volume data root as the top; `Err` tells why it escapes.
    fn check_inside(&self, from: &[OsString], target: &Path) -> Result<(), String> {
        let mut cur: Vec<OsString> = from.to_vec();
        let mut queue: VecDeque<Step> = target.components().map(Step::from).collect();
        let mut hops = 0;
        while let Some(step) = queue.pop_front() {
            match step {
                Step::Root => return Err("it is an absolute path".into()),
                Step::Cur => {}
                Step::Up => {
                    if cur.pop().is_none() {
                        return Err("it climbs above the volume root".into());
                    }
                }
                Step::Name(n) => {
                    cur.push(n);
                    let node = self
                        .lookup(&cur)
                        .map_err(|e| format!("lookup failed: {e}"))?;
                    if let Node::Symlink(next) = node {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err("too many levels of symbolic links".into());
                        }
                        cur.pop();
                        for s in next.components().map(Step::from).rev() {
                            queue.push_front(s);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

enum Step {
    Root,
    Cur,
    Up,
    Name(OsString),
}

impl From<Component<'_>> for Step {
    fn from(c: Component<'_>) -> Self {
        match c {
            Component::RootDir | Component::Prefix(_) => Step::Root,
            Component::ParentDir => Step::Up,
            Component::CurDir => Step::Cur,
            Component::Normal(n) => Step::Name(n.to_os_string()),
        }
    }
}

fn classify(path: &Path) -> io::Result<Node> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Ok(Node::Symlink(fs::read_link(path)?)),
        Ok(_) => Ok(Node::Other),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
        {
            Ok(Node::Missing)
        }
        Err(e) => Err(e),
    }
}

/// Steps 1 and 2 of the module docs. `recheck_existing`: the archive adds
/// or replaces a symlink, so links already in the volume may resolve
/// differently afterwards.
pub(crate) fn check_links(t: &Target<'_>, recheck_existing: bool) -> Result<(), VolumeError> {
    let after = View { t, merged: true };
    walk_symlinks(t.staging, None, &mut |dir, rel, target| {
        let mut from: RelPath = t.sub.to_vec();
        from.extend_from_slice(dir);
        match after.check_inside(&from, target) {
            Ok(()) => Ok(()),
            Err(why) => Err(refused(
                &display(rel),
                format!(
                    "symlink target {} resolves outside the volume: {why}",
                    target.display()
                ),
            )),
        }
    })?;
    if !recheck_existing {
        return Ok(());
    }
    let before = View { t, merged: false };
    walk_symlinks(t.data, Some(t.staging), &mut |dir, rel, target| {
        if let Some(staged) = after.staged_part(rel) {
            if !matches!(
                classify(&join(t.staging, staged)).ctx_path("stat staged entry", t.staging)?,
                Node::Missing
            ) {
                return Ok(()); // replaced by the archive: checked above
            }
        }
        let Err(why) = after.check_inside(dir, target) else {
            return Ok(());
        };
        if before.check_inside(dir, target).is_err() {
            return Ok(()); // escaped already; not this archive's doing
        }
        Err(refused(
            &display(rel),
            format!(
                "symlink already in the volume (target {}) would resolve outside the volume once this archive is in: {why}",
                target.display()
            ),
        ))
    })
}

type OnLink<'f> = dyn FnMut(&[OsString], &[OsString], &Path) -> Result<(), VolumeError> + 'f;

enum Level {
    Open(fs::ReadDir),
    Listed(std::vec::IntoIter<OsString>),
}

/// Calls `on_link(dir, path, target)` for every symlink below `root`
/// (paths relative to `root`), never following one. With `skip` (a walk
/// of the data, not of a staging dir), `skip` and every stream-in staging
/// dir at the top level are left out. Memory is bounded
/// by the depth of the tree (plus the names of levels below
/// `OPEN_LEVELS`), not by its size.
fn walk_symlinks(
    root: &Path,
    skip: Option<&Path>,
    on_link: &mut OnLink<'_>,
) -> Result<(), VolumeError> {
    let mut stack: Vec<(Level, RelPath)> = vec![(
        Level::Open(fs::read_dir(root).ctx_path("list directory", root)?),
        Vec::new(),
    )];
    while let Some((level, dir)) = stack.last_mut() {
        // The type from the listing where there is one (no stat per entry).
        let next = match level {
            Level::Open(rd) => match rd.next() {
                Some(entry) => {
                    let entry = entry.ctx_path("list directory", root)?;
                    let kind = match entry.file_type() {
                        Ok(k) => Some(k),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(VolumeError::io("stat directory entry", e)),
                    };
                    Some((entry.file_name(), kind))
                }
                None => None,
            },
            Level::Listed(names) => names.next().map(|n| (n, None)),
        };
        let Some((name, kind)) = next else {
            stack.pop();
            continue;
        };
        if skip.is_some() && dir.is_empty() && is_staging_name(&name) {
            continue;
        }
        let mut abs = join(root, dir);
        abs.push(&name);
        let kind = match kind {
            Some(k) => k,
            None => match fs::symlink_metadata(&abs) {
                Ok(m) => m.file_type(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // removed meanwhile
                Err(e) => return Err(VolumeError::io(format!("stat {}", abs.display()), e)),
            },
        };
        if !kind.is_symlink() && !kind.is_dir() || skip == Some(abs.as_path()) {
            continue;
        }
        let mut rel = dir.clone();
        rel.push(name);
        if kind.is_symlink() {
            let target = fs::read_link(&abs).ctx_path("read symlink", &abs)?;
            on_link(&rel[..rel.len() - 1], &rel, &target)?;
        } else {
            let level = if stack.len() < OPEN_LEVELS {
                Level::Open(fs::read_dir(&abs).ctx_path("list directory", &abs)?)
            } else {
                let names = fs::read_dir(&abs)
                    .ctx_path("list directory", &abs)?
                    .map(|e| e.map(|e| e.file_name()))
                    .collect::<io::Result<Vec<_>>>()
                    .ctx_path("list directory", &abs)?;
                Level::Listed(names.into_iter())
            };
            stack.push((level, rel));
        }
    }
    Ok(())
}

fn is_staging_name(name: &OsString) -> bool {
    let n = name.to_string_lossy();
    n.starts_with(names::STREAM_STAGING) || n.starts_with(EXTRACT_STAGING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links_below(root: &Path, skip: Option<&Path>) -> Vec<(String, PathBuf)> {
        let mut found = Vec::new();
        walk_symlinks(root, skip, &mut |_, rel, target| {
            found.push((display(rel), target.to_path_buf()));
            Ok(())
        })
        .unwrap();
        found.sort();
        found
    }

    #[test]
    fn the_walk_finds_links_below_the_levels_it_keeps_open() {
        let tmp = tempfile::tempdir().unwrap();
        let mut deep = tmp.path().to_path_buf();
        for _ in 0..(OPEN_LEVELS + 10) {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("..", deep.join("up")).unwrap();
        std::os::unix::fs::symlink("file", deep.join("side")).unwrap();
        let found = links_below(tmp.path(), None);
        let prefix = "d/".repeat(OPEN_LEVELS + 10);
        assert_eq!(
            found,
            [
                (format!("{prefix}side"), PathBuf::from("file")),
                (format!("{prefix}up"), PathBuf::from("..")),
            ]
        );
    }

    #[test]
    fn only_a_walk_of_the_data_leaves_staging_dirs_out() {
        let tmp = tempfile::tempdir().unwrap();
        let staging = tmp.path().join(format!("{}x", names::STREAM_STAGING));
        fs::create_dir(&staging).unwrap();
        std::os::unix::fs::symlink("..", staging.join("l")).unwrap();
        std::os::unix::fs::symlink(".", tmp.path().join("top")).unwrap();
        assert_eq!(links_below(tmp.path(), Some(&staging)).len(), 1);
        assert_eq!(links_below(tmp.path(), None).len(), 2);
    }
}
