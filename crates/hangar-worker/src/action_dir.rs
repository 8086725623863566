//! Each resource action's own place on the worker, as Concourse gives each
//! action a container of its own: a fresh `<work-dir>/resource-actions/<id>/`
//! holding the `home/` and `tmp/` the program gets as HOME and TMPDIR, and
//! an environment made from nothing.
//!
//! Resource types keep state where they are told to: Concourse's git type
//! keeps its clone in `$TMPDIR` and reuses it when present, rewrites
//! `~/.gitconfig` and deletes `~/.netrc`. Shared between actions, a second
//! repository was fetched into the first one's clone and the worker's own
//! user had its files rewritten. A private dir per action, removed however
//! the action ends, makes each start from nothing, as in a fresh container.
//!
//! The program also leads a process group of its own, and everything still
//! in that group when the action ends is killed before the dir goes: a
//! helper left behind (an `ssh-agent`) must not write into a dir being
//! removed, nor outlive its action.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// The directory under the work dir that holds the actions' dirs.
pub const ACTIONS_DIR: &str = "resource-actions";

/// What of the worker's own environment an action gets besides what is
/// made for it: the proxy settings, as Concourse gives a worker's proxies
/// to its resource containers. Nothing else (the worker's `HANGAR_*`
/// settings and key, its HOME, whatever its service manager set).
const PASSED_THROUGH: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// `<work-dir>/resource-actions`: where every action's dir is made.
#[derive(Debug, Clone)]
pub struct ActionDirs {
    root: PathBuf,
}

impl ActionDirs {
    /// Makes the directory (only the worker's user may enter it: an
    /// action's files may hold the credentials its source was given) and
    /// removes what a worker that died mid-action left in it. Blocks.
    pub fn open(root: &Path) -> io::Result<ActionDirs> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|e| context(e, "create", root))?;
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))
            .map_err(|e| context(e, "protect", root))?;
        let mut removed = 0;
        for entry in fs::read_dir(root).map_err(|e| context(e, "list", root))? {
            let path = entry.map_err(|e| context(e, "list", root))?.path();
            remove_tree(&path).map_err(|e| context(e, "remove the leftover", &path))?;
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(removed, dir = %root.display(), "removed the dirs of resource actions a previous worker process left");
        }
        Ok(ActionDirs {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh, empty dir for one action. Blocks.
    pub(crate) fn make(&self) -> io::Result<ActionDir> {
        let path = self.root.join(uuid::Uuid::new_v4().simple().to_string());
        let mut builder = fs::DirBuilder::new();
        builder.mode(0o700);
        // Not recursive: the root must be there (a wiped work dir is an
        // error, not something to paper over) and the id must be new.
        builder
            .create(&path)
            .map_err(|e| context(e, "create", &path))?;
        let dir = ActionDir {
            path,
            group: None,
            removed: false,
        };
        for sub in [HOME, TMP] {
            let p = dir.path.join(sub);
            builder.create(&p).map_err(|e| context(e, "create", &p))?;
        }
        Ok(dir)
    }
}

const HOME: &str = "home";
const TMP: &str = "tmp";

/// One action's dir. Dropping it kills what is left of the action's
/// process group and removes the dir (on the blocking pool when in a
/// runtime); [`ActionDir::finish`] does the same and waits for it.
#[derive(Debug)]
pub(crate) struct ActionDir {
    path: PathBuf,
    group: Option<i32>,
    removed: bool,
}

impl ActionDir {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The program's whole environment: a PATH, HOME and the temporary
    /// dir variables pointing into this dir, and the worker's proxies.
    pub(crate) fn env(&self) -> Vec<(OsString, OsString)> {
        let home = self.path.join(HOME);
        let tmp = self.path.join(TMP);
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), crate::containers::TASK_PATH.into()),
            ("HOME".into(), home.into()),
            ("TMPDIR".into(), tmp.clone().into()),
            ("TMP".into(), tmp.clone().into()),
            ("TEMP".into(), tmp.into()),
        ];
        for key in PASSED_THROUGH {
            if let Some(value) = std::env::var_os(key) {
                env.push((key.into(), value));
            }
        }
        env
    }

    /// The action's program leads process group `pgid`: whatever is left
    /// of it is killed when the action ends.
    pub(crate) fn watch_group(&mut self, pgid: u32) {
        self.group = i32::try_from(pgid).ok().filter(|p| *p > 1);
    }

    /// Ends the action's processes and removes the dir, waiting for both.
    pub(crate) async fn finish(mut self) {
        self.kill_group();
        let path = self.path.clone();
        self.removed = true;
        match tokio::task::spawn_blocking(move || remove_logged(&path)).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "removing a resource action's dir panicked"),
        }
    }

    fn kill_group(&mut self) {
        if let Some(pgid) = self.group.take() {
            match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
                Ok(()) => {
                    tracing::debug!(pgid, "killed what was left of a resource action")
                }
                Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => {
                    tracing::warn!(pgid, error = %e, "cannot kill a resource action's processes")
                }
            }
        }
    }
}

impl Drop for ActionDir {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Cancelled (web hung up, the action timed out) or panicking: the
        // dir goes all the same.
        self.kill_group();
        let path = std::mem::take(&mut self.path);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || remove_logged(&path));
            }
            Err(_) => remove_logged(&path),
        }
    }
}

fn remove_logged(path: &Path) {
    if let Err(e) = remove_tree(path) {
        // The next worker start removes it.
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a resource action's dir");
    }
}

/// Removes a tree, first making its dirs writable if that is what stood in
/// the way (Go's module cache and some tools leave read-only dirs, which a
/// worker not running as root cannot empty).
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        // A stray file or link, not an action's dir.
        Ok(m) if !m.is_dir() => return fs::remove_file(path),
        _ => {}
    }
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_dirs_writable(path);
            match fs::remove_dir_all(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
        Ok(()) => Ok(()),
    }
}

fn make_dirs_writable(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        // Errors here show in the second removal's.
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
}

fn context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_makes_a_private_root_and_removes_leftovers_of_any_shape() {
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join(ACTIONS_DIR);
        fs::create_dir_all(root.join("old/tmp/clone/.git")).unwrap();
        fs::write(root.join("old/tmp/clone/.git/HEAD"), "x").unwrap();
        fs::write(root.join("stray-file"), "x").unwrap();
        // A read-only dir (Go's module cache makes them).
        fs::create_dir_all(root.join("ro/inner")).unwrap();
        fs::write(root.join("ro/inner/f"), "x").unwrap();
        fs::set_permissions(root.join("ro/inner"), fs::Permissions::from_mode(0o555)).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = ActionDirs::open(&root).unwrap();
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
        let mode = fs::metadata(dirs.root()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[tokio::test]
    async fn each_action_gets_a_fresh_dir_that_goes_when_it_ends() {
        let work = tempfile::tempdir().unwrap();
        let dirs = ActionDirs::open(&work.path().join(ACTIONS_DIR)).unwrap();
        let a = dirs.make().unwrap();
        let b = dirs.make().unwrap();
        assert_ne!(a.path(), b.path());
        let env: std::collections::BTreeMap<_, _> = a.env().into_iter().collect();
        let get = |k: &str| PathBuf::from(&env[&OsString::from(k)]);
        assert_eq!(get("HOME"), a.path().join("home"));
        for k in ["TMPDIR", "TMP", "TEMP"] {
            assert_eq!(get(k), a.path().join("tmp"), "{k}");
            assert!(get(k).is_dir());
        }
        assert!(env
            .keys()
            .all(|k| !k.to_string_lossy().starts_with("HANGAR_")));
        fs::write(a.path().join("tmp/state"), "x").unwrap();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        a.finish().await;
        assert!(!pa.exists());
        // Dropped without finish (a cancelled request): removed all the same.
        drop(b);
        for _ in 0..200 {
            if !pb.exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!pb.exists());
        // Dropped outside a runtime: removed at once.
        let c = dirs.make().unwrap();
        let pc = c.path().to_path_buf();
        std::thread::spawn(move || drop(c)).join().unwrap();
        assert!(!pc.exists());
    }

    #[test]
    fn a_dir_that_cannot_be_made_is_an_error_naming_it() {
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join(ACTIONS_DIR);
        let dirs = ActionDirs::open(&root).unwrap();
        // The work dir was wiped under the worker.
        fs::remove_dir(&root).unwrap();
        let e = dirs.make().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            e.to_string()
                .starts_with(&format!("create {}", root.display())),
            "{e}"
        );
    }
}
