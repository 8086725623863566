//! The runc runtime: an OCI bundle (`config.json`) made from the spec, and
//! the runc commands that run, kill and delete it.
//!
//! Choices: the container is root (uid 0) unless the task's `run.user` says
//! otherwise, and runs in the sandbox `sandbox` describes (a user namespace,
//! its own network, seccomp, no `NET_RAW`, a pids limit, `nosuid,nodev`
//! volumes, a private `/tmp`). The root is the image's rootfs (the writable
//! copy the step was given, or in Concourse's image layout its `rootfs/`,
//! with the image's env and user, `image.rs`), or for the `process`
//! runtime the host's system dirs read-only; each volume is bind-mounted at
//! `/tmp/build/work/<path>`, the task's build dir whatever the image's
//! working directory. No rlimits are set: the container inherits the
//! worker's (raising them can be refused).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hangar_api::containers::ContainerSpec;
use serde_json::{json, Value};

use super::rootless::Rootless;
use super::sandbox::{NetworkNs, Sandbox, ID_RANGE};
use super::spec::CheckedSpec;

/// The working directory inside the container; mounts are relative to it.
pub(super) const WORK_DIR: &str = "/tmp/build/work";

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Docker's default capability set without `CAP_NET_RAW`, which would let
/// a task forge packets and open packet sockets.
pub(crate) const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability, for a privileged container, in the kernel's
/// numbering (the index is the capability's bit).
const ALL_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities of `wanted` the worker itself may hand on: those in
/// its bounding set (`CapBnd` of `/proc/self/status`). runc refuses to
/// start a container asking for one the worker lacks (a worker in a
/// container without `CAP_SYS_RESOURCE`, say), so a privileged container
/// gets every capability the worker has, as Docker's `--privileged` does.
fn available(wanted: &[&'static str]) -> Vec<&'static str> {
    static BOUNDING: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let bounding = *BOUNDING.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        bounding_set(&status)
    });
    filter_capabilities(wanted, bounding)
}

/// `CapBnd` of a `/proc/<pid>/status`.
fn bounding_set(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapBnd:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// `wanted` less what `bounding` lacks; all of it when the set is unknown.
fn filter_capabilities(wanted: &[&'static str], bounding: Option<u64>) -> Vec<&'static str> {
    wanted
        .iter()
        .copied()
        .filter(
            |cap| match (bounding, ALL_CAPABILITIES.iter().position(|c| c == cap)) {
                (Some(set), Some(bit)) => set & (1 << bit) != 0,
                _ => true,
            },
        )
        .collect()
}

/// A volume to bind into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BindMount {
    /// Normalized, relative to [`WORK_DIR`].
    pub path: String,
    /// The volume's data directory on the host.
    pub source: PathBuf,
    pub read_only: bool,
}

/// The container's working directory: [`WORK_DIR`] joined with `dir`.
pub(crate) fn container_cwd(checked: &CheckedSpec) -> String {
    if checked.dir.is_empty() {
        WORK_DIR.to_string()
    } else {
        format!("{WORK_DIR}/{}", checked.dir)
    }
}

/// The OCI runtime config for `spec`, with `env` the container's whole
/// environment (the image's and the task's params, see `image::merge_env`);
/// `PATH` gets a default when it sets none. `host_dirs` are the host's
/// system dirs bound read-only at the same place (the `process` runtime).
#[allow(clippy::too_many_arguments)]
pub(crate) fn config_json(
    spec: &ContainerSpec,
    checked: &CheckedSpec,
    rootfs: &Path,
    host_dirs: &[PathBuf],
    binds: &[BindMount],
    cgroups_path: Option<&str>,
    user: Option<hangar_core::users::Ids>,
    env: &[(String, String)],
    sandbox: &Sandbox,
) -> Value {
    let mut args = vec![spec.path.clone()];
    args.extend(spec.args.iter().cloned());
    // Parents before children, so a nested mount lands on top.
    let mut binds: Vec<&BindMount> = binds.iter().collect();
    // The working directory itself (`""`) first of all.
    binds.sort_by_key(|b| (depth(&b.path), b.path.clone()));
    let mut mounts: Vec<(String, &Path, bool)> = host_dirs
        .iter()
        .map(|d| (d.display().to_string(), d.as_path(), true))
        .collect();
    mounts.extend(binds.iter().map(|b| {
        let destination = if b.path.is_empty() {
            WORK_DIR.to_string()
        } else {
            format!("{WORK_DIR}/{}", b.path)
        };
        (destination, b.source.as_path(), b.read_only)
    }));
    bundle_config(&BundleProcess {
        args,
        env,
        cwd: container_cwd(checked),
        user,
        hostname: spec.handle.chars().take(63).collect(),
        cpu_shares: spec.cpu_shares,
        rootfs,
        readonly_root: !host_dirs.is_empty(),
        binds: &mounts,
        cgroups_path,
        sandbox,
    })
}

/// How deep a bind's path is below the working directory (`""`, the
/// directory itself, is 0).
fn depth(path: &str) -> usize {
    if path.is_empty() {
        0
    } else {
        path.split('/').count()
    }
}

/// What a bundle runs and where: the one place a runc `config.json` is
/// made, for task containers and resource type containers alike.
pub(crate) struct BundleProcess<'a> {
    pub args: Vec<String>,
    /// The whole environment; `PATH` gets a default when it sets none.
    pub env: &'a [(String, String)],
    pub cwd: String,
    /// The user inside the container (root when `None`).
    pub user: Option<hangar_core::users::Ids>,
    pub hostname: String,
    pub cpu_shares: Option<u64>,
    pub rootfs: &'a Path,
    /// The root is mounted read-only (the host's, for the process runtime).
    pub readonly_root: bool,
    /// (destination in the container, source on the host, read-only), in
    /// mount order.
    pub binds: &'a [(String, &'a Path, bool)],
    /// runc's cgroup for the container; `None` leaves runc its default.
    pub cgroups_path: Option<&'a str>,
    pub sandbox: &'a Sandbox,
}

pub(crate) fn bundle_config(p: &BundleProcess<'_>) -> Value {
    let (uid, gid) = p.user.map_or((0, 0), |ids| (ids.uid, ids.gid));
    let privileged = p.sandbox.privileged();
    let mut env_list: Vec<String> = Vec::new();
    if !p.env.iter().any(|(k, _)| k == "PATH") {
        env_list.push(format!("PATH={DEFAULT_PATH}"));
    }
    env_list.extend(p.env.iter().map(|(k, v)| format!("{k}={v}")));
    let env = env_list;

    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
    ];
    // sysfs belongs to the network namespace's owner: a container in a user
    // namespace gets the host's, read-only, through a bind.
    if privileged {
        mounts.push(
            json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev"]}),
        );
    } else {
        mounts.push(
            json!({"destination": "/sys", "type": "bind", "source": "/sys",
               "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}),
        );
    }
    // runc shows the container its own cgroups there, not the host's.
    mounts.push(json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
           "options": ["nosuid", "noexec", "nodev", "relatime", if privileged { "rw" } else { "ro" }]}));
    // A private /tmp that goes with the container, unless one is bound.
    if !p.binds.iter().any(|(d, _, _)| d == "/tmp") {
        mounts.push(
            json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=1777"]}),
        );
    }
    for (destination, source, read_only) in p.binds {
        let mut options = vec!["rbind", if *read_only { "ro" } else { "rw" }];
        if !privileged {
            // A setuid file planted in a volume is no way up, here or in
            // the next container.
            options.extend(["nosuid", "nodev"]);
        }
        mounts.push(json!({
            "destination": destination,
            "type": "bind",
            "source": source,
            "options": options,
        }));
    }
    // Last: over the image's file, or the host's `/etc` of a process root.
    if let Some(resolv) = &p.sandbox.resolv_conf {
        mounts.push(json!({
            "destination": "/etc/resolv.conf",
            "type": "bind",
            "source": resolv,
            "options": ["bind", "ro", "nosuid", "nodev", "noexec"],
        }));
    }

    // The memory limit is on the parent cgroup, which is ours (see
    // `cgroup`); so is the CPU weight, but the shares go to runc as well,
    // the way Garden passes them, and runc applies them to its child.
    let mut resources = json!({"devices": [{"allow": privileged, "access": "rwm"}]});
    if let Some(shares) = p.cpu_shares {
        resources["cpu"] = json!({"shares": shares});
    }
    // A rootless worker without a cgroup: runc cannot apply a pids limit,
    // an rlimit stands in (see `Rootless::nproc_rlimit`).
    let mut rlimits = Vec::new();
    match (p.sandbox.pids_limit, &p.sandbox.rootless, p.cgroups_path) {
        (Some(limit), Some(rootless), None) if !privileged => {
            rlimits.push(rootless.nproc_rlimit(limit));
        }
        (Some(limit), _, _) => resources["pids"] = json!({"limit": limit}),
        (None, _, _) => {}
    }
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    match &p.sandbox.network {
        NetworkNs::New => namespaces.push(json!({"type": "network"})),
        NetworkNs::Path(path) => namespaces.push(json!({"type": "network", "path": path})),
        NetworkNs::Host => {}
    }
    let mut linux = json!({
        "resources": resources,
        "namespaces": namespaces,
        "maskedPaths": [
            "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
            "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
            "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
        ],
        "readonlyPaths": [
            "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
        ],
    });
    let mut hooks = None;
    if let Some(base) = p.sandbox.ids {
        linux["namespaces"]
            .as_array_mut()
            .expect("array")
            .push(json!({"type": "user"}));
        match &p.sandbox.rootless {
            Some(rootless) => {
                let (uids, gids) = rootless.mappings();
                linux["uidMappings"] = uids;
                linux["gidMappings"] = gids;
                if let (NetworkNs::New, Some(slirp)) = (&p.sandbox.network, &rootless.slirp4netns) {
                    hooks = Some(json!({"createRuntime": [Rootless::network_hook(slirp)]}));
                }
            }
            None => {
                linux["uidMappings"] =
                    json!([{"containerID": 0, "hostID": base.uid, "size": ID_RANGE}]);
                linux["gidMappings"] =
                    json!([{"containerID": 0, "hostID": base.gid, "size": ID_RANGE}]);
            }
        }
        linux["seccomp"] = super::seccomp::profile();
    }
    if let Some(path) = p.cgroups_path {
        linux["cgroupsPath"] = json!(path);
    }
    let caps = available(if privileged {
        ALL_CAPABILITIES
    } else {
        CAPABILITIES
    });
    let mut config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": uid, "gid": gid},
            "args": p.args,
            "env": env,
            "cwd": p.cwd,
            "capabilities": {
                "bounding": caps,
                "effective": caps,
                "permitted": caps,
            },
            "noNewPrivileges": !privileged,
        },
        "root": {"path": p.rootfs, "readonly": p.readonly_root},
        "hostname": p.hostname,
        "mounts": mounts,
        "linux": linux,
    });
    if let Some(hooks) = hooks {
        config["hooks"] = hooks;
    }
    if !rlimits.is_empty() {
        config["process"]["rlimits"] = json!(rlimits);
    }
    config
}

/// `runc --root <state> run --bundle <bundle> <id>` in the foreground: the
/// container's stdin, stdout and stderr are runc's (a resource action).
pub(crate) fn run_foreground_command(
    runc: &Path,
    state: &Path,
    bundle: &Path,
    id: &str,
) -> Vec<OsString> {
    vec![
        runc.into(),
        "--root".into(),
        state.into(),
        "run".into(),
        "--bundle".into(),
        bundle.into(),
        id.into(),
    ]
}

/// The runc binary: on `PATH`, or where distributions put it.
pub(crate) fn find_runc() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(
            [
                "/usr/sbin",
                "/usr/bin",
                "/usr/local/sbin",
                "/usr/local/bin",
                "/sbin",
            ]
            .map(PathBuf::from),
        )
        .map(|d| d.join("runc"))
        .find(|p| p.is_file())
}

/// `runc --root <state> exec --process <file> <id>`: one more process, as
/// the file describes it, in the running container `id`, in the
/// foreground (`intercept`).
pub(crate) fn exec_command(runc: &Path, state: &Path, process: &Path, id: &str) -> Vec<OsString> {
    vec![
        runc.into(),
        "--root".into(),
        state.into(),
        "exec".into(),
        "--process".into(),
        process.into(),
        id.into(),
    ]
}

/// For a container in a user namespace of its own and a network namespace
/// made outside it: that network's path, and runc's record of the
/// container without it (runc 1.1 joins the user namespace first, and
/// from inside it the network cannot be joined). `None`: a plain
/// `runc exec` joins everything.
pub(crate) fn exec_around_network(state: &Value) -> Option<(String, Value)> {
    let kind = |n: &Value| n.get("type").and_then(Value::as_str).map(str::to_string);
    let namespaces = state.pointer("/config/namespaces")?.as_array()?;
    namespaces
        .iter()
        .find(|n| kind(n).as_deref() == Some("NEWUSER"))?;
    let net = namespaces
        .iter()
        .find(|n| kind(n).as_deref() == Some("NEWNET"))?;
    // The live one (runc's record of the running container), else the
    // one the container was made in.
    let path = state
        .pointer("/namespace_paths/NEWNET")
        .or_else(|| net.get("path"))
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())?
        .to_string();
    let mut shadow = state.clone();
    // runc joins what the config lists, at the paths of the live init.
    shadow
        .pointer_mut("/config/namespaces")?
        .as_array_mut()?
        .retain(|n| kind(n).as_deref() != Some("NEWNET"));
    if let Some(paths) = shadow
        .get_mut("namespace_paths")
        .and_then(Value::as_object_mut)
    {
        paths.remove("NEWNET");
    }
    Some((path, shadow))
}

/// `runc --root <state> run --keep --bundle <bundle> <id>`: the program the
/// wrapper runs. `--keep` leaves the stopped container (and so its cgroup,
/// with the OOM counter) until [`delete`].
/// The bundle config that enters an exited container again (`intercept`
/// after its step): `config`, the container's own, with its `process`
/// replaced, a network namespace of its own instead of the task network's
/// (that one went when the program exited: the process gets loopback
/// only), and without the bind mounts whose source is gone (`exists` says).
/// Everything else stays: the root, the volumes, the user namespace, the
/// cgroup, the capabilities, seccomp. `None` when `config` is not a bundle
/// config.
pub(crate) fn reentry_config(
    config: &Value,
    process: Value,
    exists: impl Fn(&str) -> bool,
) -> Option<Value> {
    let mut config = config.clone();
    let obj = config.as_object_mut()?;
    obj.get("root")?;
    obj.insert("process".into(), process);
    if let Some(namespaces) = obj
        .get_mut("linux")
        .and_then(|l| l.get_mut("namespaces"))
        .and_then(Value::as_array_mut)
    {
        for ns in namespaces.iter_mut() {
            if ns.get("type").and_then(Value::as_str) == Some("network") {
                if let Some(ns) = ns.as_object_mut() {
                    ns.remove("path");
                }
            }
        }
    }
    if let Some(mounts) = obj.get_mut("mounts").and_then(Value::as_array_mut) {
        mounts.retain(|m| {
            m.get("type").and_then(Value::as_str) != Some("bind")
                || m.get("source").and_then(Value::as_str).is_some_and(&exists)
        });
    }
    Some(config)
}

pub(crate) fn run_command(runc: &Path, state: &Path, bundle: &Path, id: &str) -> Vec<OsString> {
    vec![
        runc.into(),
        "--root".into(),
        state.into(),
        "run".into(),
        "--keep".into(),
        "--bundle".into(),
        bundle.into(),
        id.into(),
    ]
}

fn quiet(runc: &Path, state: &Path, args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new(runc);
    for key in super::isolation::private_env_keys() {
        cmd.env_remove(key);
    }
    let out = cmd
        .arg("--root")
        .arg(state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", runc.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// SIGKILLs every process of the container; a container runc does not
/// know is fine.
pub(crate) fn kill(runc: &Path, state: &Path, id: &str) -> Result<(), String> {
    match quiet(runc, state, &["kill", "--all", id, "KILL"]) {
        Err(e) if !(e.contains("does not exist") || e.contains("not running")) => Err(e),
        _ => Ok(()),
    }
}

/// Forgets the container (and removes runc's cgroup of it).
pub(crate) fn delete(runc: &Path, state: &Path, id: &str) -> Result<(), String> {
    match quiet(runc, state, &["delete", "--force", id]) {
        Err(e) if !e.contains("does not exist") => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hangar_api::containers::Runtime;

    use super::*;
    use crate::containers::spec::validate_spec;
    use hangar_api::containers::Mount;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            handle: "build-42".into(),
            runtime: Runtime::Runc,
            rootfs_volume: Some("rootfs".into()),
            path: "sh".into(),
            args: vec!["-c".into(), "make test".into()],
            env: BTreeMap::from([("GOFLAGS".to_string(), "-mod=vendor".to_string())]),
            dir: Some("repo".into()),
            mounts: vec![
                Mount {
                    volume: "v-go".into(),
                    path: "repo/cache/go".into(),
                    read_only: false,
                },
                Mount {
                    volume: "v-repo".into(),
                    path: "repo".into(),
                    read_only: true,
                },
            ],
            memory_limit_bytes: Some(1 << 30),
            cpu_shares: None,
            user: None,
            privileged: false,
        }
    }

    fn sandbox() -> Sandbox {
        Sandbox {
            ids: Some(hangar_core::users::Ids {
                uid: 2_000_000,
                gid: 2_000_000,
            }),
            network: NetworkNs::New,
            resolv_conf: None,
            pids_limit: Some(4096),
            rootless: None,
        }
    }

    fn env_of(spec: &ContainerSpec) -> Vec<(String, String)> {
        crate::containers::image::merge_env(&[], &spec.env)
    }

    fn config() -> Value {
        let spec = spec();
        let checked = validate_spec(&spec).unwrap();
        let binds = vec![
            BindMount {
                path: "repo/cache/go".into(),
                source: "/work/volumes/v-go/data".into(),
                read_only: false,
            },
            BindMount {
                path: "repo".into(),
                source: "/work/volumes/v-repo/data".into(),
                read_only: true,
            },
        ];
        config_json(
            &spec,
            &checked,
            Path::new("/work/volumes/rootfs/data"),
            &[],
            &binds,
            Some("/hangar/build-42-abc/ctr"),
            None,
            &env_of(&spec),
            &sandbox(),
        )
    }

    #[test]
    fn an_exec_joins_a_host_made_network_from_outside_its_user_namespace() {
        let state = json!({"id": "c", "init_process_pid": 42,
            "config": {"namespaces": [
                {"type": "NEWUSER", "path": ""},
                {"type": "NEWNET", "path": "/var/run/netns/c"},
                {"type": "NEWPID", "path": ""}]},
            "namespace_paths": {
                "NEWUSER": "/proc/42/ns/user", "NEWNET": "/proc/42/ns/net",
                "NEWPID": "/proc/42/ns/pid"}});
        let (net, shadow) = exec_around_network(&state).unwrap();
        assert_eq!(net, "/proc/42/ns/net");
        assert_eq!(
            shadow["config"]["namespaces"],
            json!([{"type": "NEWUSER", "path": ""}, {"type": "NEWPID", "path": ""}])
        );
        assert_eq!(
            shadow["namespace_paths"],
            json!({"NEWUSER": "/proc/42/ns/user", "NEWPID": "/proc/42/ns/pid"})
        );
        assert_eq!(
            shadow["init_process_pid"], 42,
            "the rest of the record stays"
        );
        // Without a user namespace runc joins the network itself.
        let plain = json!({"config": {"namespaces": [{"type": "NEWNET", "path": "/x"}]}});
        assert!(exec_around_network(&plain).is_none());
        assert!(exec_around_network(&json!({})).is_none());
    }

    #[test]
    fn the_process_runs_the_spec_program_in_the_work_dir_without_a_terminal() {
        let c = config();
        assert_eq!(c["ociVersion"], "1.0.2");
        assert_eq!(c["process"]["terminal"], false);
        assert_eq!(c["process"]["args"], json!(["sh", "-c", "make test"]));
        assert_eq!(c["process"]["cwd"], "/tmp/build/work/repo");
        assert_eq!(c["process"]["user"]["uid"], 0);
    }

    #[test]
    fn run_user_becomes_the_oci_process_user() {
        let spec = spec();
        let checked = validate_spec(&spec).unwrap();
        let ids = hangar_core::users::Ids { uid: 1000, gid: 50 };
        let c = config_json(
            &spec,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            Some("/x"),
            Some(ids),
            &env_of(&spec),
            &sandbox(),
        );
        assert_eq!(c["process"]["user"], json!({"uid": 1000, "gid": 50}));
    }

    #[test]
    fn the_env_gets_a_default_path_unless_the_spec_sets_one() {
        let c = config();
        assert_eq!(
            c["process"]["env"],
            json!([format!("PATH={DEFAULT_PATH}"), "GOFLAGS=-mod=vendor"])
        );
        let mut s = spec();
        s.env.insert("PATH".into(), "/opt/bin".into());
        let checked = validate_spec(&s).unwrap();
        let c = config_json(
            &s,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            Some("/x"),
            None,
            &env_of(&s),
            &sandbox(),
        );
        assert_eq!(
            c["process"]["env"],
            json!(["GOFLAGS=-mod=vendor", "PATH=/opt/bin"])
        );
    }

    #[test]
    fn an_image_env_comes_first_its_path_replaces_the_default_and_params_win() {
        let mut s = spec();
        s.env.insert("LANG".into(), "en_US".into());
        let checked = validate_spec(&s).unwrap();
        let image = [
            ("PATH".to_string(), "/image/bin".to_string()),
            ("LANG".to_string(), "C".to_string()),
        ];
        let env = crate::containers::image::merge_env(&image, &s.env);
        let c = config_json(
            &s,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            Some("/x"),
            None,
            &env,
            &sandbox(),
        );
        assert_eq!(
            c["process"]["env"],
            json!(["PATH=/image/bin", "GOFLAGS=-mod=vendor", "LANG=en_US"])
        );
    }

    #[test]
    fn the_root_is_the_writable_rootfs_volume() {
        let c = config();
        assert_eq!(c["root"]["path"], "/work/volumes/rootfs/data");
        assert_eq!(c["root"]["readonly"], false);
    }

    #[test]
    fn volumes_are_bind_mounted_under_the_work_dir_parents_first() {
        let c = config();
        let binds: Vec<&Value> = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "bind" && m["destination"] != "/sys")
            .collect();
        assert_eq!(binds.len(), 2);
        assert_eq!(binds[0]["destination"], "/tmp/build/work/repo");
        assert_eq!(binds[0]["source"], "/work/volumes/v-repo/data");
        assert_eq!(
            binds[0]["options"],
            json!(["rbind", "ro", "nosuid", "nodev"])
        );
        assert_eq!(binds[1]["destination"], "/tmp/build/work/repo/cache/go");
        assert_eq!(
            binds[1]["options"],
            json!(["rbind", "rw", "nosuid", "nodev"])
        );
    }

    #[test]
    fn the_standard_filesystems_are_mounted() {
        let c = config();
        let destinations: Vec<&str> = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        for d in ["/proc", "/dev", "/dev/pts", "/dev/shm", "/sys"] {
            assert!(
                destinations.contains(&d),
                "{d} missing from {destinations:?}"
            );
        }
    }

    #[test]
    fn the_cgroup_is_the_given_child_and_the_sandbox_has_every_namespace() {
        let c = config();
        assert_eq!(c["linux"]["cgroupsPath"], "/hangar/build-42-abc/ctr");
        let kinds: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["pid", "ipc", "uts", "mount", "network", "user"]);
        // The limit is on our parent cgroup, not runc's.
        assert!(c["linux"]["resources"].get("memory").is_none());
        assert!(c["linux"]["resources"].get("cpu").is_none());
    }

    #[test]
    fn an_unprivileged_container_maps_its_ids_and_loses_raw_sockets_and_escapes() {
        let c = config();
        let map = json!([{"containerID": 0, "hostID": 2_000_000, "size": 65_536}]);
        assert_eq!(c["linux"]["uidMappings"], map);
        assert_eq!(c["linux"]["gidMappings"], map);
        assert_eq!(c["process"]["noNewPrivileges"], true);
        let caps = c["process"]["capabilities"]["bounding"].as_array().unwrap();
        assert!(!caps.iter().any(|x| x == "CAP_NET_RAW"));
        assert!(!caps.iter().any(|x| x == "CAP_SYS_ADMIN"));
        assert_eq!(c["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(c["linux"]["resources"]["pids"], json!({"limit": 4096}));
        assert_eq!(
            c["linux"]["resources"]["devices"],
            json!([{"allow": false, "access": "rwm"}])
        );
        // A private /tmp under the work dir's mounts.
        let mounts = c["mounts"].as_array().unwrap();
        let tmp = mounts
            .iter()
            .position(|m| m["destination"] == "/tmp")
            .unwrap();
        assert_eq!(mounts[tmp]["type"], "tmpfs");
        let work = mounts
            .iter()
            .position(|m| m["destination"] == "/tmp/build/work/repo")
            .unwrap();
        assert!(tmp < work);
    }

    #[test]
    fn a_privileged_container_is_real_root_with_every_capability() {
        let spec = spec();
        let checked = validate_spec(&spec).unwrap();
        let mut sb = sandbox();
        sb.ids = None;
        let c = config_json(
            &spec,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            Some("/x"),
            None,
            &env_of(&spec),
            &sb,
        );
        assert!(c["linux"].get("uidMappings").is_none());
        assert!(c["linux"].get("seccomp").is_none());
        let kinds: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert!(!kinds.contains(&"user"));
        let caps = c["process"]["capabilities"]["bounding"].as_array().unwrap();
        assert!(caps.iter().any(|x| x == "CAP_SYS_ADMIN"));
        assert_eq!(c["process"]["noNewPrivileges"], false);
    }

    #[test]
    fn host_dirs_are_bound_read_only_over_a_read_only_root() {
        let mut s = spec();
        s.runtime = hangar_api::containers::Runtime::Process;
        s.rootfs_volume = None;
        let checked = crate::containers::spec::validate_spec_with(&s, false).unwrap();
        let c = config_json(
            &s,
            &checked,
            Path::new("/run/r"),
            &[PathBuf::from("/usr"), PathBuf::from("/etc")],
            &[],
            Some("/x"),
            None,
            &env_of(&s),
            &sandbox(),
        );
        assert_eq!(c["root"]["readonly"], true);
        let usr = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/usr")
            .unwrap();
        assert_eq!(usr["source"], "/usr");
        assert_eq!(usr["options"], json!(["rbind", "ro", "nosuid", "nodev"]));
    }

    #[test]
    fn cpu_shares_reach_runc_as_oci_cpu_shares() {
        let mut s = spec();
        s.cpu_shares = Some(512);
        let checked = validate_spec(&s).unwrap();
        let c = config_json(
            &s,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            Some("/x"),
            None,
            &env_of(&s),
            &sandbox(),
        );
        assert_eq!(c["linux"]["resources"]["cpu"], json!({"shares": 512}));
        // The device rule stays.
        assert_eq!(
            c["linux"]["resources"]["devices"],
            json!([{"allow": false, "access": "rwm"}])
        );
    }

    #[test]
    fn the_run_command_keeps_the_container_for_its_oom_counter() {
        let cmd = run_command(
            Path::new("/usr/sbin/runc"),
            Path::new("/w/containers/.runc"),
            Path::new("/w/containers/b/bundle"),
            "b",
        );
        let cmd: Vec<&str> = cmd.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(
            cmd,
            [
                "/usr/sbin/runc",
                "--root",
                "/w/containers/.runc",
                "run",
                "--keep",
                "--bundle",
                "/w/containers/b/bundle",
                "b"
            ]
        );
    }

    #[test]
    fn a_rootless_container_maps_into_subordinate_ids_with_slirp_and_an_nproc_limit() {
        let spec = spec();
        let checked = validate_spec(&spec).unwrap();
        let sb = Sandbox {
            rootless: Some(Rootless {
                uid: 1001,
                gid: 1001,
                sub_uid: (100_000, 65_536),
                sub_gid: (100_000, 65_536),
                slirp4netns: Some("/usr/bin/slirp4netns".into()),
                resolv_conf: None,
                nproc_hard: None,
            }),
            ..sandbox()
        };
        let c = config_json(
            &spec,
            &checked,
            Path::new("/r"),
            &[],
            &[],
            None,
            None,
            &env_of(&spec),
            &sb,
        );
        assert_eq!(c["linux"]["uidMappings"][0]["hostID"], 1001);
        assert_eq!(c["linux"]["uidMappings"][1]["hostID"], 100_000);
        assert!(c["linux"]["seccomp"].is_object());
        assert_eq!(c["process"]["noNewPrivileges"], true);
        // No cgroup: an rlimit instead of runc's pids limit.
        assert!(c["linux"].get("cgroupsPath").is_none());
        assert!(c["linux"]["resources"].get("pids").is_none());
        assert_eq!(c["process"]["rlimits"][0]["type"], "RLIMIT_NPROC");
        assert_eq!(c["process"]["rlimits"][0]["hard"], 4096);
        let hook = &c["hooks"]["createRuntime"][0];
        assert_eq!(hook["args"][4], "/usr/bin/slirp4netns");
        // A root worker's container has neither.
        let root = config();
        assert!(root.get("hooks").is_none());
        assert!(root["process"].get("rlimits").is_none());
        assert_eq!(root["linux"]["resources"]["pids"]["limit"], 4096);
    }

    #[test]
    fn capabilities_the_worker_lacks_are_left_out() {
        let status = "Name:\tx\nCapBnd:\t000001fffeffffff\nCapAmb:\t0\n";
        let set = bounding_set(status);
        assert_eq!(set, Some(0x1fffeffffff));
        let all = filter_capabilities(ALL_CAPABILITIES, set);
        assert!(
            !all.contains(&"CAP_SYS_RESOURCE"),
            "bit 24 is not in the set"
        );
        assert_eq!(all.len(), ALL_CAPABILITIES.len() - 1);
        assert!(all.contains(&"CAP_SYS_ADMIN") && all.contains(&"CAP_CHECKPOINT_RESTORE"));
        assert_eq!(filter_capabilities(CAPABILITIES, set), CAPABILITIES);
        assert_eq!(
            filter_capabilities(CAPABILITIES, Some(0)),
            Vec::<&str>::new()
        );
        assert_eq!(
            filter_capabilities(ALL_CAPABILITIES, None),
            ALL_CAPABILITIES
        );
        assert_eq!(bounding_set("CapBnd:\tzz\n"), None);
        assert_eq!(ALL_CAPABILITIES[21], "CAP_SYS_ADMIN");
        assert_eq!(ALL_CAPABILITIES[40], "CAP_CHECKPOINT_RESTORE");
    }

    #[test]
    fn reentry_keeps_the_sandbox_but_the_network_and_gone_binds() {
        let config = json!({
            "root": {"path": "/r", "readonly": false},
            "process": {"args": ["/bin/task"], "user": {"uid": 5}},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/in", "type": "bind", "source": "/v/in", "options": ["rbind"]},
                {"destination": "/etc/resolv.conf", "type": "bind", "source": "/net/gone"},
            ],
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "network", "path": "/run/netns/x"},
                               {"type": "user"}],
                "cgroupsPath": "/hangar/c/ctr",
                "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}],
            },
        });
        let process = json!({"args": ["sh"], "user": {"uid": 5}, "terminal": true});
        let out = reentry_config(&config, process.clone(), |s| s != "/net/gone").unwrap();
        assert_eq!(out["process"], process);
        assert_eq!(out["root"], config["root"]);
        assert_eq!(
            out["linux"]["namespaces"],
            json!([{"type": "pid"}, {"type": "network"}, {"type": "user"}])
        );
        assert_eq!(out["linux"]["cgroupsPath"], "/hangar/c/ctr");
        assert_eq!(out["linux"]["uidMappings"], config["linux"]["uidMappings"]);
        let dests: Vec<&str> = out["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        assert_eq!(dests, ["/proc", "/in"]);
        // The host's network (a privileged step's) stays the host's.
        let host = json!({"root": {"path": "/r"}, "linux": {"namespaces": [{"type": "pid"}]}});
        let out = reentry_config(&host, json!({}), |_| true).unwrap();
        assert_eq!(out["linux"]["namespaces"], json!([{"type": "pid"}]));
        assert!(reentry_config(&json!({"process": {}}), json!({}), |_| true).is_none());
        assert!(reentry_config(&json!([1]), json!({}), |_| true).is_none());
    }
}
