//! What keeps a `process` task away from the worker: the user it runs as,
//! its own PID namespace, and the ownership and modes of what it may touch.
//!
//! A worker running as root never runs a process task as root. The wrapper
//! stays root (it joins the memory cgroup and writes the exit file in a
//! root-only dir) and runs the program through util-linux `unshare`, which
//! drops to the task's uid and gid (and all supplementary groups) and, where
//! the kernel lets it, puts the program in a new PID namespace with its own
//! `/proc`. Whether that works is found out once, when the worker starts.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use hangar_core::users::Ids;

/// The ids of the first slot of a worker's default task users: a range no
/// distribution allocates (above the usual user ranges, `nobody` and the
/// first `/etc/subuid` blocks), below the 2097151 a ustar tar header holds,
/// so streamed-out volumes keep their owners.
pub const DEFAULT_TASK_IDS: Ids = Ids {
    uid: 2_000_000,
    gid: 2_000_000,
};

/// The PATH of a process task that sets none.
pub(crate) const TASK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How process tasks are kept apart from the worker on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// The worker is not root: tasks run as the worker's own user (nothing
    /// to drop to), with an environment of their own.
    AsWorker,
    /// Root: tasks drop to their user through `unshare`, in a PID
    /// namespace of their own when `pid_namespace`.
    Drop {
        unshare: PathBuf,
        pid_namespace: bool,
    },
    /// Root without a usable util-linux `unshare` (an image with busybox
    /// only): tasks drop to their user through `hangar exec-as`, with no
    /// PID namespace of their own.
    ExecAs { hangar: PathBuf },
    /// Root, but no way to drop: process tasks are refused, since they
    /// would run as root beside the worker.
    Unavailable(String),
}

/// The `hangar exec-as` arguments that run a program as `ids`.
pub(crate) fn exec_as_prefix(hangar: &Path, ids: Ids) -> Vec<OsString> {
    vec![
        hangar.into(),
        "exec-as".into(),
        ids.uid.to_string().into(),
        ids.gid.to_string().into(),
        "--".into(),
    ]
}

/// The arguments that run a program as `ids` under `isolation`; empty when
/// there is nobody to drop to.
pub(crate) fn drop_prefix(isolation: &Isolation, ids: Option<Ids>) -> Vec<OsString> {
    match (isolation, ids) {
        (
            Isolation::Drop {
                unshare,
                pid_namespace,
            },
            Some(ids),
        ) => unshare_prefix(unshare, *pid_namespace, ids),
        (Isolation::ExecAs { hangar }, Some(ids)) => exec_as_prefix(hangar, ids),
        _ => vec![],
    }
}

pub(crate) fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The `unshare` arguments that run a program as `ids`.
pub(crate) fn unshare_prefix(unshare: &Path, pid_namespace: bool, ids: Ids) -> Vec<OsString> {
    let drop: [OsString; 4] = [
        "--setgid".into(),
        ids.gid.to_string().into(),
        "--setuid".into(),
        ids.uid.to_string().into(),
    ];
    if pid_namespace {
        return pid_namespace_prefix(unshare, &drop, "hangar-task-init");
    }
    let mut argv: Vec<OsString> = vec![unshare.into()];
    argv.extend(drop);
    argv.push("--".into());
    argv
}

/// The `unshare` arguments that run a program in a PID namespace of its
/// own (with `extra` options, the drop to a user), its init named `init`.
pub(crate) fn pid_namespace_prefix(
    unshare: &Path,
    extra: &[OsString],
    init: &str,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![unshare.into()];
    // --kill-child: the program goes with unshare when the group is killed,
    // and everything in the namespace goes with its PID 1.
    for a in ["--pid", "--fork", "--kill-child", "--mount-proc"] {
        argv.push(a.into());
    }
    argv.extend(extra.iter().cloned());
    argv.push("--".into());
    // A shell is PID 1 of the namespace, not the program: the kernel
    // drops signals a PID 1 sends itself without a handler, and a
    // program's `kill $$` must work as it does on the host.
    for a in ["/bin/sh", "-c", "\"$@\"; exit $?", init] {
        argv.push(a.into());
    }
    argv
}

fn find_unshare() -> Option<PathBuf> {
    ["/usr/bin/unshare", "/bin/unshare", "/usr/sbin/unshare"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Runs `true` the way a task would run, to see if it works here.
fn works(argv: Vec<OsString>) -> Result<(), String> {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["/bin/sh", "-c", "exit 0"])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", argv[0].to_string_lossy()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Finds out, once, how this worker can isolate process tasks: util-linux
/// `unshare` with a PID namespace, without one, else `hangar exec-as` when
/// the worker is the hangar binary (`hangar`).
pub(super) fn detect(
    probe: Ids,
    want_pid_namespace: bool,
    hangar: Option<&Path>,
    use_unshare: bool,
) -> Isolation {
    if !is_root() {
        return Isolation::AsWorker;
    }
    let mut why = Vec::new();
    match find_unshare().filter(|_| use_unshare) {
        None => why.push("no util-linux unshare".to_string()),
        Some(unshare) => {
            let with_pid = if want_pid_namespace {
                works(unshare_prefix(&unshare, true, probe))
            } else {
                Err("turned off".into())
            };
            match with_pid {
                Ok(()) => {
                    return Isolation::Drop {
                        unshare,
                        pid_namespace: true,
                    }
                }
                Err(e) => why.push(format!("{} --pid: {e}", unshare.display())),
            }
            match works(unshare_prefix(&unshare, false, probe)) {
                Ok(()) => {
                    tracing::warn!(reason = %why.join("; "), "no PID namespace for process tasks: they run as their own user but see the host's processes");
                    return Isolation::Drop {
                        unshare,
                        pid_namespace: false,
                    };
                }
                Err(e) => why.push(format!("{}: {e}", unshare.display())),
            }
        }
    }
    if let Some(hangar) = hangar {
        match works(exec_as_prefix(hangar, probe)) {
            Ok(()) => {
                tracing::warn!(reason = %why.join("; "), "no util-linux unshare: process tasks drop to their user with hangar exec-as, without a PID namespace");
                return Isolation::ExecAs {
                    hangar: hangar.to_path_buf(),
                };
            }
            Err(e) => why.push(format!("{} exec-as: {e}", hangar.display())),
        }
    }
    Isolation::Unavailable(format!(
        "the worker runs as root and cannot run a process task as an unprivileged user ({}): install util-linux, or run the task in an image (runc)",
        why.join("; ")
    ))
}

/// Gives a tree to `ids` without following links: every entry, the root
/// included. Returns how many entries were changed.
pub(crate) fn chown_tree(root: &Path, ids: Ids) -> io::Result<u64> {
    let mut changed = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path)?;
        if meta.uid() != ids.uid || meta.gid() != ids.gid {
            std::os::unix::fs::lchown(&path, Some(ids.uid), Some(ids.gid))?;
            changed += 1;
            // chown clears setuid/setgid bits of files; a program of the
            // task that relied on them was not going to work as a user anyway.
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// Gives a fresh volume's files to `ids` ahead of the tasks that will
/// mount copies of it (no copy exists yet, so no overlay layer is touched
/// under a mount), keeping its top dir root's (0700) until a container
/// mounts it. Only a root worker does it.
pub fn hand_to_task_user(path: &Path, ids: Ids) -> io::Result<()> {
    if !is_root() {
        return Ok(());
    }
    chown_tree(path, ids)?;
    keep_top_for_root(path)
}

/// The second half of [`hand_to_task_user`], for a volume whose entries
/// were made the task user's as they were written: its top dir stays
/// root's (0700) until a container mounts it.
pub fn keep_top_for_root(path: &Path) -> io::Result<()> {
    if !is_root() {
        return Ok(());
    }
    own_dir(path, Ids { uid: 0, gid: 0 }, 0o700)
}

/// Moves an image's files into the sandbox's id range starting at `base`,
/// keeping who owns what inside it (see `sandbox::shift_tree`). Only a
/// root worker does it.
pub fn hand_image_to_sandbox(path: &Path, base: Ids) -> io::Result<()> {
    if !is_root() {
        return Ok(());
    }
    super::sandbox::shift_image_volume(path, base).map(|_| ())
}

/// Makes `path` a directory only `ids` (or root) may enter.
pub(crate) fn own_dir(path: &Path, ids: Ids, mode: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(ids.uid), Some(ids.gid))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Sets a directory's mode (the worker's own dirs: `0o711`, so tasks pass
/// through but cannot list them).
pub(crate) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// `target` as a path relative to the directory `from` (both absolute and
/// free of `..`): a task that cannot pass through the directories above the
/// work dir still follows it.
pub(crate) fn relative_to(from: &Path, target: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// The worker's own settings in its environment (`HANGAR_WORKER_KEY`, ...):
/// what a program it starts with the rest of its environment (runc) must
/// not get. Resource types get an environment made from nothing instead
/// (`action_dir`).
pub fn private_env_keys() -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt;
    std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| k.as_bytes().starts_with(b"HANGAR_"))
        .collect()
}

/// The host's `/etc/passwd`, for task users given by name.
pub(crate) fn host_passwd() -> Option<String> {
    fs::read_to_string("/etc/passwd").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_climb_to_the_common_dir() {
        let cases = [
            (
                "/w/containers/h/work",
                "/w/volumes/v/data",
                "../../../volumes/v/data",
            ),
            (
                "/w/containers/h/work/cache",
                "/w/volumes/v/data",
                "../../../../volumes/v/data",
            ),
            ("/w/a", "/w/a/b", "b"),
            ("/x", "/y/z", "../y/z"),
        ];
        for (from, to, want) in cases {
            assert_eq!(
                relative_to(Path::new(from), Path::new(to)),
                PathBuf::from(want)
            );
        }
    }

    #[test]
    fn the_unshare_prefix_drops_ids_and_adds_a_pid_namespace_when_asked() {
        let ids = Ids { uid: 7, gid: 8 };
        let argv = unshare_prefix(Path::new("/usr/bin/unshare"), true, ids);
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            argv,
            [
                "/usr/bin/unshare",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--setgid",
                "8",
                "--setuid",
                "7",
                "--",
                "/bin/sh",
                "-c",
                "\"$@\"; exit $?",
                "hangar-task-init"
            ]
        );
        let argv = unshare_prefix(Path::new("/u"), false, ids);
        assert_eq!(argv.len(), 6);
    }

    #[test]
    fn chown_tree_changes_every_entry_and_follows_no_link_needs_root() {
        assert!(
            is_root(),
            "this test needs root (only root gives files away): run the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("data");
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/f"), "x").unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, "y").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        let ids = Ids {
            uid: 4242,
            gid: 4343,
        };
        assert_eq!(chown_tree(&d, ids).unwrap(), 5);
        for p in ["", "a", "a/b", "a/b/f", "link"] {
            let m = fs::symlink_metadata(d.join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), (4242, 4343), "{p}");
        }
        assert_eq!(fs::metadata(&outside).unwrap().uid(), 0);
        // Done already: nothing changes the second time.
        assert_eq!(chown_tree(&d, ids).unwrap(), 0);
    }
}
