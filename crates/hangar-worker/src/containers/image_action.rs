//! A resource type's action in a runc container, as Concourse runs it:
//! `/opt/resource/check`, `/opt/resource/in /tmp/build/get` or
//! `/opt/resource/out /tmp/build/put` with the request on stdin, working in
//! `/tmp/build/<check|get|put>`, the fetch's destination volume
//! bind-mounted at `/tmp/build/get`, a put's inputs at
//! `/tmp/build/put/<name>`. The root filesystem is either
//!
//! * a custom type's image: the action's own copy-on-write copy of it (web
//!   makes one per action), with the image's env and user; or
//! * a base type's root filesystem in Concourse's layout, unpacked once on
//!   the worker (`resource_types::rootfs`) and shared by the type's
//!   actions: each gets an overlay of it whose writes go to the action's
//!   own dir, as Concourse gives each container a copy-on-write volume of
//!   the type's.
//!
//! `/tmp` is, on top, a fresh dir of the action's own dir bind-mounted in,
//! and so is HOME of an image, so two actions never see each other's state
//! whatever volume they were given, and both go with the action's dir. The
//! bundle comes from `runc::bundle_config`, as a task container's does, in
//! the sandbox every container gets; a privileged type's container runs
//! privileged (the caller checked `--allow-privileged`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hangar_core::users::Ids;

use super::cgroup::{CgroupRef, CgroupVersion, Cgroups};
use super::sandbox::{self, RootMounts, Sandbox};
use super::{cgroup, image, runc, ContainerError};

/// Where `in` finds its destination, as in Concourse.
pub(crate) const GET_DIR: &str = "/tmp/build/get";
/// Where `out` finds its inputs, as in Concourse.
pub(crate) const PUT_DIR: &str = "/tmp/build/put";
/// Where the protocol's programs live in the image.
pub(crate) const RESOURCE_DIR: &str = "/opt/resource";
/// Prefix of the runc ids of action containers.
pub(crate) const ID_PREFIX: &str = "hangar-action-";

/// runc and its state dir, as the worker's containers use them, and the
/// memory cgroups actions run in: an action gets the default container
/// limit (`--default-container-memory`), so a resource type's check that
/// runs away is OOM-killed in its own cgroup instead of pressing on the
/// worker and its builds.
#[derive(Debug, Clone)]
pub struct ActionRuntime {
    pub(crate) runc: PathBuf,
    pub(crate) state: PathBuf,
    /// `None` where the worker cannot make cgroups (the action then runs
    /// unlimited, as before; the worker logged why at start).
    pub(crate) cgroups: Option<(Cgroups, CgroupVersion)>,
    /// The default container limit (0: none), as the worker sets it.
    pub(crate) memory_limit: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Where the image's root is mounted for runc (`None`: used where it
    /// is, on a worker that is not root).
    pub(crate) roots: Option<RootMounts>,
    /// The sandbox an action of an unprivileged type runs in.
    pub(crate) sandbox: Sandbox,
    /// The worker's task network, which actions are on as tasks are (a
    /// check reaches the outside, not the host); `None`: runc's own
    /// namespace, loopback only.
    pub(crate) network: Option<std::sync::Arc<super::network::TaskNetwork>>,
    /// Process tasks run in the sandbox on this worker (root, runc,
    /// cgroups, not `--no-process-sandbox`): so do the actions of base
    /// types in hangar's layout, over the host's system dirs.
    pub(crate) host_programs: bool,
}

impl ActionRuntime {
    /// Whether the actions of base types in hangar's layout (programs on
    /// the host) run in the sandbox here, as process tasks do.
    pub(crate) fn sandboxes_programs(&self) -> bool {
        self.host_programs && self.roots.is_some()
    }

    /// The host ids an unprivileged action's root is (`None`: a worker
    /// that cannot sandbox, not root).
    pub(crate) fn sandbox_ids(&self) -> Option<Ids> {
        self.sandbox.ids
    }

    fn cgroup(&self, id: &str) -> Option<(&Cgroups, CgroupRef)> {
        self.cgroups
            .as_ref()
            .map(|(cgroups, version)| (cgroups, Cgroups::reference(*version, id)))
    }

    /// Makes action `id`'s memory cgroup and answers the `cgroupsPath` its
    /// bundle gets; `None` (unlimited) where that cannot be done. Blocks.
    pub(crate) fn limit_memory(&self, id: &str) -> Option<String> {
        let (cgroups, cg) = self.cgroup(id)?;
        let limit = self.memory_limit.load(std::sync::atomic::Ordering::Relaxed);
        match cgroups.create(&cg, (limit > 0).then_some(limit), None) {
            Ok(()) => Some(format!("/{}/{}", cg.path, cgroup::RUNC_CHILD)),
            Err(why) => {
                tracing::warn!(%id, error = %why, "resource action runs without a memory cgroup");
                None
            }
        }
    }

    /// The limit actions get now, in bytes (0: none).
    pub(crate) fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the kernel OOM-killed action `id`'s process: a kill counted
    /// in its cgroup, or (`killed`: it died of SIGKILL) its cgroup having
    /// hit the limit, where the counter went with runc's child cgroup.
    pub(crate) fn oom_killed(&self, id: &str, killed: bool) -> bool {
        self.cgroup(id).is_some_and(|(cgroups, cg)| {
            cgroups.oom_kills(&cg).is_some_and(|n| n > 0) || (killed && cgroups.hit_limit(&cg))
        })
    }

    /// The command that runs the prepared bundle in the foreground.
    pub(crate) fn run_argv(&self, bundle: &Path, id: &str) -> Vec<OsString> {
        runc::run_foreground_command(&self.runc, &self.state, bundle, id)
    }

    /// Kills what is left of container `id` and forgets it; a container
    /// runc does not know is fine. Blocks.
    pub(crate) fn remove(&self, id: &str) {
        if let Err(e) = runc::kill(&self.runc, &self.state, id) {
            tracing::warn!(%id, error = %e, "cannot kill a resource action's container");
        }
        if let Err(e) = runc::delete(&self.runc, &self.state, id) {
            tracing::warn!(%id, error = %e, "cannot delete a resource action's container");
        }
        self.remove_cgroup(id);
    }

    /// Removes action `id`'s cgroup (with whatever is left in it) and its
    /// root's mount point. Blocks.
    pub(crate) fn remove_cgroup(&self, id: &str) {
        if let Some(roots) = &self.roots {
            roots.release(id);
        }
        if let Some(net) = &self.network {
            net.detach(id);
        }
        if let Some((cgroups, cg)) = self.cgroup(id) {
            if let Err(e) = cgroups.remove(&cg, std::time::Duration::from_secs(5)) {
                tracing::warn!(%id, error = %e, "cannot remove a resource action's cgroup");
            }
        }
    }

    /// Removes the action containers a worker process that died left in
    /// runc's state. Blocks.
    pub fn remove_leftovers(&self) {
        let Ok(entries) = fs::read_dir(&self.state) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(ID_PREFIX) {
                tracing::info!(id = %name, "removing a resource action container a previous worker process left");
                self.remove(&name);
            }
        }
    }
}

/// Where an action's root filesystem comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ActionRoot<'a> {
    /// A volume in Concourse's image layout (`rootfs/`, `metadata.json`):
    /// the action's own copy of a custom type's image, used as it is.
    Image(&'a Path),
    /// A base type's root filesystem, ready (owners in the sandbox's
    /// range) and shared by the type's actions: the action gets an overlay
    /// of it.
    Base(&'a Path),
    /// A base type in hangar's layout: the host's system dirs read-only,
    /// as a process task gets them, with the type's dir (`type_dir`, whose
    /// `<action>` program runs) and `visible` (the worker's executable,
    /// which the built-in types' scripts run) bound read-only at their own
    /// paths.
    Host {
        type_dir: &'a Path,
        visible: &'a [PathBuf],
    },
}

/// One action's container.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActionSpec<'a> {
    pub root: ActionRoot<'a>,
    /// `check`, `in` or `out`.
    pub action: &'a str,
    /// For `in`: the volume it fetches into.
    pub dest: Option<&'a Path>,
    /// For `out`: the put's inputs, by name.
    pub inputs: &'a [(String, PathBuf)],
    /// Over the image's env (the worker's proxies).
    pub extra_env: &'a [(String, String)],
    /// Real root with every capability: allowed by the caller.
    pub privileged: bool,
}

/// Writes the bundle of one action into `<action_dir>/bundle`, and the
/// container's private `/tmp` (and HOME, or root layer) beside it, and
/// answers the bundle's path. Blocks.
pub(crate) fn prepare(
    runtime: &ActionRuntime,
    action_dir: &Path,
    spec: &ActionSpec<'_>,
    hostname: &str,
    cgroups_path: Option<&str>,
) -> Result<PathBuf, ContainerError> {
    let action = spec.action;
    let bad = |reason: String| ContainerError::InvalidSpec {
        field: "image_volume".into(),
        reason,
    };
    let (rootfs, config, what) = match spec.root {
        ActionRoot::Image(volume) => {
            let (rootfs, config) = image::open(volume)?;
            (rootfs, config, "image")
        }
        ActionRoot::Base(rootfs) => (
            rootfs.to_path_buf(),
            image::ImageConfig::default(),
            "root filesystem",
        ),
        ActionRoot::Host { .. } => (
            PathBuf::new(),
            image::ImageConfig {
                env: vec![("PATH".into(), super::TASK_PATH.into())],
                ..Default::default()
            },
            "dir",
        ),
    };
    let (program, shown) = match spec.root {
        ActionRoot::Host { type_dir, .. } => (
            type_dir.join(action),
            type_dir.join(action).display().to_string(),
        ),
        _ => (
            rootfs
                .join(RESOURCE_DIR.trim_start_matches('/'))
                .join(action),
            format!("{RESOURCE_DIR}/{action}"),
        ),
    };
    match fs::metadata(&program) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
        _ => {
            return Err(bad(format!(
                "the resource type's {what} has no executable {shown}"
            )))
        }
    }
    // A base type runs as root, as Concourse runs it: inside the user
    // namespace, the task range's first id on the host.
    let user = match spec.root {
        ActionRoot::Image(_) => image_user(&rootfs, config.user.as_deref()).map_err(bad)?,
        ActionRoot::Base(_) | ActionRoot::Host { .. } => None,
    };
    let private_tmp = action_dir.join("container-tmp");
    let private_home = action_dir.join("container-home");
    // The program's working dir, Concourse's, there from the start (the
    // mount points below it come with the mounts).
    let work_dir = match action {
        "in" => GET_DIR.to_string(),
        "out" => PUT_DIR.to_string(),
        _ => "/tmp/build/check".to_string(),
    };
    let work_dir_on_host = private_tmp.join(work_dir.trim_start_matches("/tmp/"));
    let made = fs::create_dir(&private_tmp)
        .and_then(|_| fs::set_permissions(&private_tmp, fs::Permissions::from_mode(0o1777)))
        .and_then(|_| fs::create_dir_all(&work_dir_on_host))
        .and_then(|_| fs::create_dir(&private_home))
        .and_then(|_| fs::set_permissions(&private_home, fs::Permissions::from_mode(0o700)));
    made.map_err(|e| bad(format!("make the container's /tmp and HOME: {e}")))?;
    let mut sandbox = runtime.sandbox.clone();
    if spec.privileged {
        // Real root with every capability (root on this worker), no user
        // namespace, no seccomp filter, as a privileged task gets.
        sandbox.ids = None;
    }
    if let Some(net) = &runtime.network {
        super::attach_network(net, hostname, &mut sandbox).map_err(bad)?;
    }
    let sandbox = &sandbox;
    // The action's user as the host sees it: shifted into the sandbox's
    // range, so root inside owns what the image's root owned.
    let host_user = match (sandbox.ids, user) {
        (Some(base), user) if super::isolation::is_root() => {
            let user = user.unwrap_or(Ids { uid: 0, gid: 0 });
            // A base type's root was moved when it was made ready.
            if let ActionRoot::Image(_) = spec.root {
                sandbox::shift_image_rootfs(&rootfs, base)
                    .map_err(|e| bad(format!("give the image to the sandbox's users: {e}")))?;
            }
            Some(Ids {
                uid: sandbox::shifted(user.uid, base.uid),
                gid: sandbox::shifted(user.gid, base.gid),
            })
        }
        (_, user) => user,
    };
    if let Some(ids) = host_user {
        let build = private_tmp.join("build");
        let owned = spec.dest.into_iter().chain([
            private_home.as_path(),
            private_tmp.as_path(),
            build.as_path(),
            work_dir_on_host.as_path(),
        ]);
        for dir in owned {
            std::os::unix::fs::chown(dir, Some(ids.uid), Some(ids.gid))
                .map_err(|e| bad(format!("give {} to the action's user: {e}", dir.display())))?;
        }
        // A put's inputs (copies made for this action alone) moved into
        // the sandbox's range, their top dirs the action's user's, as a
        // task's mounts are: else a task's output, whose top dir went
        // back to the host's root, is unreadable to `out`.
        if let Some(base) = sandbox.ids {
            for (_, input) in spec.inputs {
                sandbox::shift_tree(input, base)
                    .and_then(|_| std::os::unix::fs::chown(input, Some(ids.uid), Some(ids.gid)))
                    .map_err(|e| {
                        bad(format!(
                            "give input {} to the action's user: {e}",
                            input.display()
                        ))
                    })?;
            }
        }
    }
    // The host's system dirs, bound read-only over a root of mount points
    // (a `Host` root only).
    let mut host_dirs: Vec<PathBuf> = Vec::new();
    let root = match (spec.root, &runtime.roots) {
        (ActionRoot::Image(_), Some(roots)) => roots
            .mount_image(hostname, &rootfs)
            .map_err(|e| bad(format!("mount the image's root: {e}")))?,
        (ActionRoot::Image(_), None) => rootfs.clone(),
        (ActionRoot::Base(lower), Some(roots)) => base_root(roots, hostname, lower, action_dir)
            .map_err(|e| bad(format!("mount the resource type's root filesystem: {e}")))?,
        (ActionRoot::Host { .. }, Some(roots)) => {
            let entries = sandbox::host_entries(Path::new("/"));
            host_dirs = host_system_dirs(&entries);
            roots
                .make_host_root(hostname, &entries, sandbox.ids)
                .map_err(|e| bad(format!("make the action's root: {e}")))?
        }
        (ActionRoot::Base(_) | ActionRoot::Host { .. }, None) => {
            return Err(ContainerError::Unsupported {
                reason: "a resource type's root filesystem needs a worker running as root".into(),
            })
        }
    };
    let mut over: BTreeMap<String, String> = spec.extra_env.iter().cloned().collect();
    if !config.env.iter().any(|(k, _)| k == "TMPDIR") {
        over.insert("TMPDIR".into(), "/tmp".into());
    }
    if let ActionRoot::Host { .. } = spec.root {
        // As the type's programs got them on the host.
        over.insert("TMP".into(), "/tmp".into());
        over.insert("TEMP".into(), "/tmp".into());
    }
    if !config.env.iter().any(|(k, _)| k == "HOME") {
        let home = match spec.root {
            ActionRoot::Image(_) => home_of(&rootfs, user),
            ActionRoot::Base(_) | ActionRoot::Host { .. } => "/root".into(),
        };
        over.insert("HOME".into(), home);
    }
    let env = image::merge_env(&config.env, &over);
    let home = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut args = vec![match spec.root {
        ActionRoot::Host { .. } => program.display().to_string(),
        _ => format!("{RESOURCE_DIR}/{action}"),
    }];
    match action {
        "in" => args.push(GET_DIR.to_string()),
        "out" => args.push(PUT_DIR.to_string()),
        _ => {}
    }
    // Parents before children: the host's dirs and /tmp, then what lands
    // in them.
    let mut binds: Vec<(String, &Path, bool)> = host_dirs
        .iter()
        .map(|d| (d.display().to_string(), d.as_path(), true))
        .collect();
    binds.push(("/tmp".into(), private_tmp.as_path(), false));
    // A HOME at the root or inside /tmp is private already, and so is all
    // of a base type's root.
    let private_root = matches!(spec.root, ActionRoot::Base(_));
    if !private_root
        && home.starts_with('/')
        && home != "/"
        && home != "/tmp"
        && !home.starts_with("/tmp/")
    {
        binds.push((home.clone(), private_home.as_path(), false));
    }
    if let ActionRoot::Host { type_dir, visible } = spec.root {
        // Where the scripts say they are; what the host's dirs show
        // already needs no bind. The deepest last, so none hides another.
        let mut shown: Vec<&Path> = std::iter::once(type_dir)
            .chain(visible.iter().map(PathBuf::as_path))
            .filter(|p| !under_host_dirs(p, &host_dirs))
            .collect();
        shown.sort_by_key(|p| p.components().count());
        shown.dedup();
        binds.extend(
            shown
                .into_iter()
                .map(|p| (p.display().to_string(), p, true)),
        );
    }
    binds.extend(spec.dest.map(|d| (GET_DIR.to_string(), d, false)));
    for (name, path) in spec.inputs {
        hangar_core::names::validate_label(name).map_err(|e| bad(format!("inputs: {e}")))?;
        binds.push((format!("{PUT_DIR}/{name}"), path.as_path(), false));
    }
    let config = runc::bundle_config(&runc::BundleProcess {
        args,
        env: &env,
        cwd: work_dir,
        user,
        hostname: hostname.chars().take(63).collect(),
        cpu_shares: None,
        rootfs: &root,
        readonly_root: matches!(spec.root, ActionRoot::Host { .. }),
        binds: &binds,
        cgroups_path,
        sandbox,
    });
    let bundle = action_dir.join("bundle");
    fs::create_dir(&bundle).map_err(|e| bad(format!("create the bundle: {e}")))?;
    super::write_private(
        &bundle.join("config.json"),
        &serde_json::to_vec_pretty(&config).expect("json"),
    )?;
    Ok(bundle)
}

/// A base type's root for one action, where runc reaches it: an overlay of
/// the shared `lower` whose upper layer is in the action's dir, owned and
/// moded as `lower`'s top is (the container's root makes its mount points
/// there). Where the work dir's filesystem takes no overlay, a copy of
/// `lower` in the action's dir instead: slower, the same to the action.
fn base_root(
    roots: &RootMounts,
    handle: &str,
    lower: &Path,
    action_dir: &Path,
) -> std::io::Result<PathBuf> {
    let top = fs::symlink_metadata(lower)?;
    let upper = action_dir.join("root-upper");
    let work = action_dir.join("root-work");
    fs::create_dir(&upper)?;
    fs::create_dir(&work)?;
    std::os::unix::fs::lchown(&upper, Some(top.uid()), Some(top.gid()))?;
    fs::set_permissions(&upper, fs::Permissions::from_mode(top.mode() & 0o7777))?;
    match roots.mount_overlay(handle, lower, &upper, &work) {
        Ok(root) => Ok(root),
        Err(e) => {
            tracing::warn!(error = %e, lower = %lower.display(), "no overlay of a resource type's root filesystem; the action gets a copy of it");
            let copy = action_dir.join("root-copy");
            hangar_volumes::copy_tree(lower, &copy)?;
            roots.mount_image(handle, &copy)
        }
    }
}

/// The host's system dirs of `entries` (not their links), as paths.
fn host_system_dirs(entries: &[sandbox::HostEntry]) -> Vec<PathBuf> {
    entries
        .iter()
        .filter_map(|e| match e {
            sandbox::HostEntry::Dir(name) => Some(Path::new("/").join(name)),
            sandbox::HostEntry::Link(..) => None,
        })
        .collect()
}

/// Whether `path` (absolute, without links) is in one of `dirs`, which the
/// container sees already.
fn under_host_dirs(path: &Path, dirs: &[PathBuf]) -> bool {
    dirs.iter().any(|d| path.starts_with(d))
}

/// The image's user as ids: root when it names none (or `root`, which a
/// `FROM scratch` image may name without a passwd file).
fn image_user(rootfs: &Path, user: Option<&str>) -> Result<Option<Ids>, String> {
    use hangar_core::users::{parse_user, resolve_user};
    match user {
        None | Some("root") => Ok(None),
        Some(user) => {
            let spec = parse_user(user).map_err(|e| format!("metadata.json: user: {e}"))?;
            let passwd = fs::read_to_string(rootfs.join("etc/passwd")).ok();
            let ids = resolve_user(&spec, passwd.as_deref())
                .map_err(|e| format!("metadata.json: user: {e}"))?;
            Ok((ids.uid != 0 || ids.gid != 0).then_some(ids))
        }
    }
}

/// HOME for the action's user: its passwd entry's, else `/root` for root
/// and `/tmp` for anyone else.
fn home_of(rootfs: &Path, user: Option<Ids>) -> String {
    let uid = user.map_or(0, |ids| ids.uid);
    let from_passwd = fs::read_to_string(rootfs.join("etc/passwd"))
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.len() >= 6 && fields[2].parse::<u32>().ok() == Some(uid))
                    .then(|| fields[5].to_string())
                    .filter(|h| h.starts_with('/'))
            })
        });
    from_passwd.unwrap_or_else(|| if uid == 0 { "/root" } else { "/tmp" }.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bundles only, never run: no root mounts, no id shift.
    fn test_runtime() -> ActionRuntime {
        ActionRuntime {
            runc: "/nonexistent/runc".into(),
            state: "/nonexistent/state".into(),
            cgroups: None,
            memory_limit: Default::default(),
            roots: None,
            sandbox: Sandbox {
                ids: None,
                network: sandbox::NetworkNs::New,
                resolv_conf: None,
                pids_limit: None,
                rootless: None,
            },
            network: None,
            host_programs: false,
        }
    }

    fn image(dir: &Path, metadata: &str, program: bool) -> PathBuf {
        let volume = dir.join("image");
        fs::create_dir_all(volume.join("rootfs/opt/resource")).unwrap();
        fs::create_dir_all(volume.join("rootfs/etc")).unwrap();
        fs::write(
            volume.join("rootfs/etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nbot:x:1000:1000::/home/bot:/bin/sh\n",
        )
        .unwrap();
        fs::write(volume.join("metadata.json"), metadata).unwrap();
        if program {
            let check = volume.join("rootfs/opt/resource/check");
            fs::write(&check, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&check, fs::Permissions::from_mode(0o755)).unwrap();
        }
        volume
    }

    fn spec<'a>(root: ActionRoot<'a>, action: &'a str) -> ActionSpec<'a> {
        ActionSpec {
            root,
            action,
            dest: None,
            inputs: &[],
            extra_env: &[],
            privileged: false,
        }
    }

    fn config(bundle: &Path) -> serde_json::Value {
        serde_json::from_slice(&fs::read(bundle.join("config.json")).unwrap()).unwrap()
    }

    #[test]
    fn check_runs_opt_resource_check_with_the_image_env_and_its_own_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let volume = image(dir.path(), r#"{"env": ["PATH=/bin", "A=1"]}"#, true);
        let proxy = [("http_proxy".to_string(), "http://p".to_string())];
        let spec = ActionSpec {
            extra_env: &proxy,
            ..spec(ActionRoot::Image(&volume), "check")
        };
        let bundle = prepare(&test_runtime(), dir.path(), &spec, "hangar-action-x", None).unwrap();
        let c = config(&bundle);
        assert_eq!(
            c["process"]["args"],
            serde_json::json!(["/opt/resource/check"])
        );
        assert_eq!(
            c["process"]["env"],
            serde_json::json!([
                "PATH=/bin",
                "A=1",
                "HOME=/root",
                "TMPDIR=/tmp",
                "http_proxy=http://p"
            ])
        );
        assert_eq!(
            c["process"]["user"],
            serde_json::json!({"uid": 0, "gid": 0})
        );
        assert_eq!(c["root"]["path"], serde_json::json!(volume.join("rootfs")));
        assert!(c["linux"].get("cgroupsPath").is_none());
        let tmp = fs::metadata(dir.path().join("container-tmp")).unwrap();
        assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777);
        let binds: Vec<(&str, &str)> = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "bind")
            .map(|m| {
                (
                    m["destination"].as_str().unwrap(),
                    m["source"].as_str().unwrap(),
                )
            })
            .collect();
        let own = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
        assert_eq!(
            binds,
            [
                ("/tmp", own("container-tmp").as_str()),
                ("/root", own("container-home").as_str())
            ]
        );
    }

    #[test]
    fn in_gets_the_destination_at_tmp_build_get_and_runs_as_the_image_user() {
        let dir = tempfile::tempdir().unwrap();
        let volume = image(dir.path(), r#"{"user": "bot"}"#, true);
        let exe = volume.join("rootfs/opt/resource/in");
        fs::write(&exe, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        let dest = dir.path().join("dest");
        fs::create_dir(&dest).unwrap();
        // Giving the destination to uid 1000 needs root; elsewhere the
        // image's user is root's.
        let as_root =
            std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").unwrap()) == 0;
        let metadata = if as_root { r#"{"user": "bot"}"# } else { "{}" };
        fs::write(volume.join("metadata.json"), metadata).unwrap();
        let spec = ActionSpec {
            dest: Some(&dest),
            ..spec(ActionRoot::Image(&volume), "in")
        };
        let bundle = prepare(
            &test_runtime(),
            dir.path(),
            &spec,
            "h",
            Some("/hangar/hangar-action-h/ctr"),
        )
        .unwrap();
        let c = config(&bundle);
        assert_eq!(
            c["process"]["args"],
            serde_json::json!(["/opt/resource/in", "/tmp/build/get"])
        );
        let bind = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == GET_DIR)
            .unwrap();
        assert_eq!(bind["destination"], "/tmp/build/get");
        assert_eq!(bind["source"], serde_json::json!(dest));
        // The action runs in the memory cgroup the worker made for it.
        assert_eq!(
            c["linux"]["cgroupsPath"],
            serde_json::json!("/hangar/hangar-action-h/ctr")
        );
        if as_root {
            assert_eq!(
                c["process"]["user"],
                serde_json::json!({"uid": 1000, "gid": 1000})
            );
            assert!(c["process"]["env"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("HOME=/home/bot")));
        }
    }

    #[test]
    fn an_image_without_the_program_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let volume = image(dir.path(), "{}", false);
        let err = prepare(
            &test_runtime(),
            dir.path(),
            &spec(ActionRoot::Image(&volume), "check"),
            "h",
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("no executable /opt/resource/check"),
            "{err}"
        );
    }
}
