//! The sandbox every container runs in, whatever its runtime: what runc is
//! told besides the program (see `runc::bundle_config`), the ownership the
//! container's files need, and the root filesystems' mount points.
//!
//! An unprivileged container has a user namespace whose ids `0..ID_RANGE`
//! are the host's `base..base + ID_RANGE` (root inside is an unprivileged
//! host user, not uid 0), its own mount, PID, IPC, UTS and network
//! namespaces, `no_new_privs`, the seccomp filter of `seccomp`, Docker's
//! default capabilities without `NET_RAW`, a pids limit, volumes mounted
//! `nosuid,nodev`, and its own `/tmp` and `/dev/shm` that go with it.
//! Every unprivileged container of a worker maps to the same host range,
//! as Garden does: a range per container would need runc to map each
//! volume's owners per mount (idmapped mounts, runc 1.2) or a copy of every
//! image and input per container; what keeps two tasks apart is that
//! neither can see the other's files, processes, IPC or traffic.
//!
//! A privileged container (a step with `privileged: true`, on a worker
//! started with `--allow-privileged`) is real root with every capability
//! and no seccomp filter: root on that worker.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hangar_core::users::Ids;

/// How many ids a container's user namespace maps.
pub(crate) const ID_RANGE: u32 = 65_536;

/// The pids limit a container gets unless the worker sets another.
pub const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// Where a container's network namespace comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NetworkNs {
    /// A new one of runc's: loopback only (a worker without a task
    /// network: not root, or the plugins missing).
    New,
    /// One the worker made (`--task-network bridge` or `none`), by its
    /// path: what `network::TaskNetwork::attach` gives.
    Path(PathBuf),
    /// The host's own (`--task-network host`): no isolation.
    Host,
}

/// How one container is sandboxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sandbox {
    /// The host ids the container's ids start at; `None` is privileged:
    /// no user namespace, every capability, no seccomp filter.
    pub ids: Option<Ids>,
    pub network: NetworkNs,
    /// Bound read-only at `/etc/resolv.conf`: nameservers the container's
    /// network reaches (`network::TaskNetwork::resolv_conf`); `None` leaves
    /// the root's own.
    pub resolv_conf: Option<PathBuf>,
    /// At most this many tasks (processes and threads); `None`: no limit.
    pub pids_limit: Option<u64>,
    /// A worker that is not root: root inside is the worker's user, the
    /// other ids its subordinate ones, and slirp4netns its network (see
    /// `rootless`); `ids` is then the range the worker would use as root.
    pub rootless: Option<super::rootless::Rootless>,
}

impl Sandbox {
    pub(crate) fn privileged(&self) -> bool {
        self.ids.is_none()
    }
}

/// The host id that container id `id` is under a mapping starting at
/// `base`: ids the mapping holds move with it; ids of the range already
/// stay; any other (another range, an id past it) becomes the container's
/// root, which owns everything the container was given.
pub(crate) fn shifted(id: u32, base: u32) -> u32 {
    if (base..base.saturating_add(ID_RANGE)).contains(&id) {
        id
    } else if id < ID_RANGE {
        base + id
    } else {
        base
    }
}

/// Moves every entry of a tree into the range starting at `base` (see
/// [`shifted`]) without following links, so that a container whose root is
/// `base` owns what the host's root owned and its users what theirs did.
/// Returns how many entries changed. chown clears setuid and setgid bits,
/// which a sandboxed container could not use anyway (`nosuid`).
pub(crate) fn shift_tree(root: &Path, base: Ids) -> io::Result<u64> {
    let mut changed = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path)?;
        let (uid, gid) = (shifted(meta.uid(), base.uid), shifted(meta.gid(), base.gid));
        if (uid, gid) != (meta.uid(), meta.gid()) {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
            changed += 1;
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// Beside an image's `rootfs/`, in its volume (never in a container's
/// view): the range the image was moved into, so the containers of it and
/// of its copy-on-write copies (which inherit the file) skip the walk.
const SHIFT_STAMP: &str = ".hangar-sandbox-ids";

fn stamp_text(base: Ids) -> String {
    format!("{}:{}\n", base.uid, base.gid)
}

/// [`shift_tree`] of an image's volume (its `rootfs/` and config), then a
/// stamp saying it was done for `base`.
pub(crate) fn shift_image_volume(volume: &Path, base: Ids) -> io::Result<u64> {
    let changed = shift_tree(volume, base)?;
    fs::write(volume.join(SHIFT_STAMP), stamp_text(base))?;
    Ok(changed)
}

/// [`shift_tree`] of an image's `rootfs`, unless its volume's stamp says it
/// was moved into the range at `base` already. A forged stamp (a task that
/// wrote one into an output later used as an image) only leaves that
/// image's files owned by ids its own container does not map, which hurts
/// nobody else: no file of it runs setuid (`no_new_privs`).
pub(crate) fn shift_image_rootfs(rootfs: &Path, base: Ids) -> io::Result<u64> {
    let stamp = rootfs.parent().map(|volume| volume.join(SHIFT_STAMP));
    if let Some(stamp) = &stamp {
        if fs::read_to_string(stamp).is_ok_and(|s| s == stamp_text(base)) {
            return Ok(0);
        }
    }
    let changed = shift_tree(rootfs, base)?;
    if let Some(stamp) = &stamp {
        if let Err(e) = fs::write(stamp, stamp_text(base)) {
            tracing::debug!(path = %stamp.display(), error = %e, "cannot stamp a moved image; the next container walks it again");
        }
    }
    Ok(changed)
}

/// Beside the containers dir in a rootless worker's work dir: its
/// containers' process roots.
pub(crate) const ROOTLESS_ROOTS_DIR: &str = "sandbox-roots";

/// The host's directories a `process` container sees, read-only, as its
/// root filesystem: the system, never the worker's data or anyone's home.
/// Those that are links on the host (`/bin` -> `usr/bin`) are the same
/// links in the container.
pub(crate) const HOST_SYSTEM_DIRS: &[&str] = &[
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt",
];

/// The mount points a root filesystem needs before runc mounts onto it
/// (a read-only root cannot get them later).
const MOUNT_POINTS: &[&str] = &["proc", "dev", "sys", "tmp"];

/// A host system dir as the container gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostEntry {
    /// Bind-mounted read-only from the host's dir of the same name.
    Dir(String),
    /// A link with the host's target.
    Link(String, PathBuf),
}

/// What of [`HOST_SYSTEM_DIRS`] this host has, read under `host_root`
/// (`/`, or a test's tree).
pub(crate) fn host_entries(host_root: &Path) -> Vec<HostEntry> {
    HOST_SYSTEM_DIRS
        .iter()
        .filter_map(|name| {
            let path = host_root.join(name);
            let meta = fs::symlink_metadata(&path).ok()?;
            if meta.file_type().is_symlink() {
                Some(HostEntry::Link(
                    name.to_string(),
                    fs::read_link(&path).ok()?,
                ))
            } else if meta.is_dir() {
                Some(HostEntry::Dir(name.to_string()))
            } else {
                None
            }
        })
        .collect()
}

/// The root filesystems of the worker's containers, at a place runc can
/// reach from inside a user namespace.
///
/// runc mounts a container's root from inside the container's user
/// namespace, where root is an unprivileged host user that cannot pass
/// through a 0700 directory above the worker's data (quickstart's
/// `./hangar-data`, a home, a test's temp dir). So each root is made, or
/// bind-mounted, at `<dir>/<handle>` below a root-owned 0711 dir; volumes
/// need no such thing (runc opens bind sources before it enters the
/// namespace).
#[derive(Debug, Clone)]
pub(crate) struct RootMounts {
    dir: PathBuf,
    /// Images are bind-mounted (root); `false`: a worker that is not root
    /// cannot mount, and runc reaches the image where it is (root inside
    /// is the worker's user).
    mounts: bool,
}

impl RootMounts {
    /// `/run/hangar-sandbox/<key>`, the key telling the worker roots of one
    /// host apart.
    pub(crate) fn for_worker(worker_root: &Path) -> io::Result<RootMounts> {
        let base = Path::new("/run/hangar-sandbox");
        let dir = base.join(root_key(worker_root));
        for d in [base, dir.as_path()] {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            // Passable, not listable: nobody learns the handles.
            fs::set_permissions(d, fs::Permissions::from_mode(0o711))?;
            let meta = fs::symlink_metadata(d)?;
            if !meta.is_dir() || meta.uid() != 0 {
                return Err(io::Error::other(format!(
                    "{} is not a directory of root's",
                    d.display()
                )));
            }
        }
        Ok(RootMounts { dir, mounts: true })
    }

    /// For a worker that is not root: process roots are skeletons in
    /// `dir` (the worker's own, 0700), images are used where they are.
    pub(crate) fn for_rootless(dir: &Path) -> io::Result<RootMounts> {
        match fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        Ok(RootMounts {
            dir: dir.to_path_buf(),
            mounts: false,
        })
    }

    /// Whether images are mounted (a root worker); resource actions need
    /// it for their overlays.
    pub(crate) fn mounts(&self) -> bool {
        self.mounts
    }

    pub(crate) fn path(&self, handle: &str) -> PathBuf {
        self.dir.join(handle)
    }

    /// The image's root filesystem `source`, bind-mounted where runc can
    /// reach it.
    pub(crate) fn mount_image(&self, handle: &str, source: &Path) -> io::Result<PathBuf> {
        use nix::mount::{mount, MsFlags};
        if !self.mounts {
            return Ok(source.to_path_buf());
        }
        let target = self.path(handle);
        self.release(handle);
        fs::create_dir(&target)?;
        mount(
            Some(source),
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| {
            let _ = fs::remove_dir(&target);
            io::Error::other(format!(
                "bind {} at {}: {e}",
                source.display(),
                target.display()
            ))
        })?;
        Ok(target)
    }

    /// An overlay of `lower` (shared, never written) with `upper` and
    /// `work` (a container's own) where runc can reach it: what the
    /// container writes lands in `upper`.
    pub(crate) fn mount_overlay(
        &self,
        handle: &str,
        lower: &Path,
        upper: &Path,
        work: &Path,
    ) -> io::Result<PathBuf> {
        use hangar_volumes::os::{Os, OverlayMount, RealOs};
        let target = self.path(handle);
        self.release(handle);
        fs::create_dir(&target)?;
        let overlay = OverlayMount {
            lower: vec![lower.to_path_buf()],
            upper: upper.to_path_buf(),
            work: work.to_path_buf(),
            target: target.clone(),
        };
        RealOs.mount_overlay(&overlay).map_err(|e| {
            let _ = fs::remove_dir(&target);
            io::Error::new(
                e.kind(),
                format!("overlay {} at {}: {e}", lower.display(), target.display()),
            )
        })?;
        Ok(target)
    }

    /// A root of mount points and links for a `process` container, owned
    /// by the container's root (`owner`) so runc can mount onto it.
    pub(crate) fn make_host_root(
        &self,
        handle: &str,
        entries: &[HostEntry],
        owner: Option<Ids>,
    ) -> io::Result<PathBuf> {
        let target = self.path(handle);
        self.release(handle);
        fs::create_dir(&target)?;
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755))?;
        for entry in entries {
            match entry {
                HostEntry::Dir(name) => fs::create_dir(target.join(name))?,
                HostEntry::Link(name, to) => std::os::unix::fs::symlink(to, target.join(name))?,
            }
        }
        for name in MOUNT_POINTS {
            fs::create_dir(target.join(name))?;
        }
        if let Some(ids) = owner {
            std::os::unix::fs::lchown(&target, Some(ids.uid), Some(ids.gid))?;
        }
        Ok(target)
    }

    /// Unmounts and removes `handle`'s root; nothing there is fine. Only
    /// empty dirs and links are removed, never a file: a root still mounted
    /// (an unmount that failed) keeps the image's files.
    pub(crate) fn release(&self, handle: &str) {
        let target = self.path(handle);
        if fs::symlink_metadata(&target).is_err() {
            return;
        }
        if self.mounts && is_mount_point(&target) {
            if let Err(e) = nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH) {
                tracing::warn!(path = %target.display(), error = %e, "cannot unmount a container's root");
                return;
            }
        }
        if let Err(e) = remove_skeleton(&target) {
            tracing::warn!(path = %target.display(), error = %e, "cannot remove a container's root");
        }
    }

    /// Releases the roots of containers not in `live` (a worker that died
    /// left them).
    pub(crate) fn sweep(&self, live: &BTreeSet<String>) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                self.release(&name);
                removed.push(entry.path());
            }
        }
        removed
    }
}

/// A short stable name for a worker root: its path's FNV-1a hash.
fn root_key(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in root.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Whether `path` is where a filesystem is mounted: its device differs from
/// its parent's, or /proc/self/mountinfo lists it (a bind mount of the same
/// filesystem).
fn is_mount_point(path: &Path) -> bool {
    let parent_dev = path
        .parent()
        .and_then(|p| fs::metadata(p).ok())
        .map(|m| m.dev());
    if fs::symlink_metadata(path).ok().map(|m| m.dev()) != parent_dev {
        return true;
    }
    let want = path.to_string_lossy();
    fs::read_to_string("/proc/self/mountinfo")
        .map(|text| {
            text.lines()
                .any(|line| line.split(' ').nth(4) == Some(want.as_ref()))
        })
        .unwrap_or(true)
}

/// Removes a tree of empty dirs, links and empty files (the mount points
/// runc made for files bound in); a file with anything in it is an error,
/// and stays.
fn remove_skeleton(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() || (meta.is_file() && meta.len() == 0) {
        return fs::remove_file(path);
    }
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is a file, not part of a container's root",
            path.display()
        )));
    }
    for entry in fs::read_dir(path)? {
        remove_skeleton(&entry?.path())?;
    }
    fs::remove_dir(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_shift_into_the_range_once() {
        let base = 2_000_000;
        let cases = [
            (0, 2_000_000),
            (1000, 2_001_000),
            (65_535, 2_065_535),
            // In the range already: stays.
            (2_000_000, 2_000_000),
            (2_065_535, 2_065_535),
            // Past the range or from another one: the container's root.
            (65_536, 2_000_000),
            (2_065_536, 2_000_000),
            (u32::MAX, 2_000_000),
        ];
        for (id, want) in cases {
            assert_eq!(shifted(id, base), want, "{id}");
        }
    }

    #[test]
    fn host_entries_keep_links_and_skip_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("usr")).unwrap();
        fs::create_dir(dir.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("usr/bin", dir.path().join("bin")).unwrap();
        fs::write(dir.path().join("opt"), "a file, not a dir").unwrap();
        fs::create_dir(dir.path().join("home")).unwrap();
        let got = host_entries(dir.path());
        assert_eq!(
            got,
            [
                HostEntry::Link("bin".into(), "usr/bin".into()),
                HostEntry::Dir("usr".into()),
                HostEntry::Dir("etc".into()),
            ]
        );
    }

    #[test]
    fn a_skeleton_with_a_file_in_it_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().join("s");
        fs::create_dir_all(s.join("usr")).unwrap();
        std::os::unix::fs::symlink("usr/bin", s.join("bin")).unwrap();
        fs::write(s.join("usr/data"), "image file").unwrap();
        // An empty file is a mount point runc made for a file bound in.
        fs::create_dir_all(s.join("work/bin")).unwrap();
        fs::write(s.join("work/bin/hangar"), "").unwrap();
        assert!(remove_skeleton(&s).is_err());
        assert_eq!(
            fs::read_to_string(s.join("usr/data")).unwrap(),
            "image file"
        );
        fs::remove_file(s.join("usr/data")).unwrap();
        remove_skeleton(&s).unwrap();
        assert!(!s.exists());
    }

    #[test]
    fn shift_tree_moves_owners_into_the_range_and_follows_no_link_needs_root() {
        assert!(
            crate::containers::isolation::is_root(),
            "this test needs root (only root gives files away): run the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("data");
        fs::create_dir_all(d.join("home/bot")).unwrap();
        std::os::unix::fs::lchown(d.join("home/bot"), Some(1000), Some(1000)).unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, "y").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        let base = Ids {
            uid: 3_000_000,
            gid: 3_000_000,
        };
        assert_eq!(shift_tree(&d, base).unwrap(), 4);
        let owner = |p: &str| {
            let m = fs::symlink_metadata(d.join(p)).unwrap();
            (m.uid(), m.gid())
        };
        assert_eq!(owner(""), (3_000_000, 3_000_000));
        assert_eq!(owner("home/bot"), (3_001_000, 3_001_000));
        assert_eq!(owner("link"), (3_000_000, 3_000_000));
        assert_eq!(fs::metadata(&outside).unwrap().uid(), 0);
        assert_eq!(shift_tree(&d, base).unwrap(), 0, "shifted once");
    }

    #[test]
    fn an_image_moved_once_is_stamped_and_not_walked_again() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path();
        let rootfs = volume.join("rootfs");
        fs::create_dir_all(rootfs.join("etc")).unwrap();
        let base = Ids {
            uid: 3_000_000,
            gid: 3_000_000,
        };
        assert!(shift_image_volume(volume, base).unwrap() >= 3);
        assert_eq!(
            fs::read_to_string(volume.join(SHIFT_STAMP)).unwrap(),
            "3000000:3000000\n"
        );
        // A file the stamp does not know of is not moved: the walk is skipped.
        fs::write(rootfs.join("etc/new"), "x").unwrap();
        assert_eq!(shift_image_rootfs(&rootfs, base).unwrap(), 0);
        assert_eq!(fs::metadata(rootfs.join("etc/new")).unwrap().uid(), 0);
        // Another range is another stamp: walked, and stamped for it.
        let other = Ids {
            uid: 4_000_000,
            gid: 4_000_000,
        };
        assert!(shift_image_rootfs(&rootfs, other).unwrap() >= 3);
        assert_eq!(
            fs::metadata(rootfs.join("etc/new")).unwrap().uid(),
            4_000_000
        );
        assert_eq!(shift_image_rootfs(&rootfs, other).unwrap(), 0);
        // Without a stamp (an image volume unpacked elsewhere), the walk runs.
        fs::remove_file(volume.join(SHIFT_STAMP)).unwrap();
        fs::write(rootfs.join("etc/newer"), "y").unwrap();
        assert_eq!(shift_image_rootfs(&rootfs, other).unwrap(), 1);
    }
}
