//! Checks of a [`ContainerSpec`] that need nothing but the spec itself.
//! Whether the volumes exist and the runtime is installed is the manager's
//! business.

use hangar_api::containers::{ContainerSpec, Runtime};

use super::ContainerError;

/// The smallest memory limit accepted: below this even a shell (or runc's
/// own init) cannot start, and the failure would look like an OOM of the task.
pub const MIN_MEMORY_LIMIT_BYTES: u64 = 4 * 1024 * 1024;

/// The CPU shares a container may ask for: the kernel's range for cgroup v1
/// `cpu.shares` (`MIN_SHARES` and `MAX_SHARES`), which cgroup v2's
/// `cpu.weight` (1 to 10000) is converted from.
pub const CPU_SHARES_RANGE: std::ops::RangeInclusive<u64> = 2..=262_144;

/// A mount after validation: the path normalized (`a//b/` becomes `a/b`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedMount {
    pub volume: String,
    pub path: String,
    pub read_only: bool,
}

/// A spec that passed [`validate_spec`], with its paths normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedSpec {
    /// `""` for the working directory itself.
    pub dir: String,
    pub mounts: Vec<CheckedMount>,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ContainerError {
    ContainerError::InvalidSpec {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Checks every field and names the first bad one, for a worker whose
/// process runtime mounts by symlink (outside the sandbox).
#[cfg(test)]
pub(crate) fn validate_spec(spec: &ContainerSpec) -> Result<CheckedSpec, ContainerError> {
    validate_spec_with(spec, true)
}

/// [`validate_spec`]; `symlink_mounts`: process containers mount volumes
/// by symlink, which cannot nest (a sandboxed one binds them, which can).
pub(crate) fn validate_spec_with(
    spec: &ContainerSpec,
    symlink_mounts: bool,
) -> Result<CheckedSpec, ContainerError> {
    hangar_volumes::validate_handle(&spec.handle).map_err(|e| invalid("handle", e.to_string()))?;
    match spec.runtime {
        Runtime::Process => {
            if spec.rootfs_volume.is_some() {
                return Err(invalid(
                    "rootfs_volume",
                    "only the runc runtime takes a root filesystem",
                ));
            }
        }
        Runtime::Runc => match &spec.rootfs_volume {
            None => {
                return Err(invalid(
                    "rootfs_volume",
                    "the runc runtime needs a volume holding the root filesystem",
                ))
            }
            Some(v) => hangar_volumes::validate_handle(v)
                .map_err(|e| invalid("rootfs_volume", e.to_string()))?,
        },
    }
    if spec.path.is_empty() {
        return Err(invalid("path", "the program is empty"));
    }
    if spec.path.contains('\0') {
        return Err(invalid("path", "contains a NUL byte"));
    }
    if let Some(i) = spec.args.iter().position(|a| a.contains('\0')) {
        return Err(invalid(format!("args[{i}]"), "contains a NUL byte"));
    }
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(invalid(
                format!("env.{key}"),
                "a variable name must be non-empty without '=' or NUL",
            ));
        }
        if value.contains('\0') {
            return Err(invalid(
                format!("env.{key}"),
                "the value contains a NUL byte",
            ));
        }
    }
    let dir = match &spec.dir {
        None => String::new(),
        Some(d) => relative_path(d, true).map_err(|reason| invalid("dir", reason))?,
    };
    let mut mounts: Vec<CheckedMount> = Vec::with_capacity(spec.mounts.len());
    for (i, m) in spec.mounts.iter().enumerate() {
        hangar_volumes::validate_handle(&m.volume)
            .map_err(|e| invalid(format!("mounts[{i}].volume"), e.to_string()))?;
        // A volume at the working directory itself (a task's `path: .`) is
        // bound there, the others inside it; a symlink cannot be the dir.
        let symlinked = spec.runtime == Runtime::Process && symlink_mounts;
        let path = relative_path(&m.path, !symlinked).map_err(|r| {
            let r = if symlinked && relative_path(&m.path, true).is_ok() {
                format!(
                    "{r}: an artifact at the working directory needs the sandbox (this worker \
                     runs process tasks unsandboxed, their artifacts as symlinks)"
                )
            } else {
                r
            };
            invalid(format!("mounts[{i}].path"), r)
        })?;
        for (j, earlier) in mounts.iter().enumerate() {
            if earlier.path == path {
                return Err(invalid(
                    format!("mounts[{i}].path"),
                    format!("{path:?} is already the path of mounts[{j}]"),
                ));
            }
            // The process runtime mounts by symlink: a mount inside another
            // would be created inside the other volume.
            if spec.runtime == Runtime::Process
                && symlink_mounts
                && (is_within(&path, &earlier.path) || is_within(&earlier.path, &path))
            {
                return Err(invalid(
                    format!("mounts[{i}].path"),
                    format!(
                        "{path:?} and mounts[{j}] ({:?}) nest, which the process runtime cannot do",
                        earlier.path
                    ),
                ));
            }
        }
        mounts.push(CheckedMount {
            volume: m.volume.clone(),
            path,
            read_only: m.read_only,
        });
    }
    if let Some(limit) = spec.memory_limit_bytes {
        if limit < MIN_MEMORY_LIMIT_BYTES {
            return Err(invalid(
                "memory_limit_bytes",
                format!("{limit} is below the minimum of {MIN_MEMORY_LIMIT_BYTES} bytes"),
            ));
        }
    }
    if let Some(shares) = spec.cpu_shares {
        check_cpu_shares(shares).map_err(|reason| invalid("cpu_shares", reason))?;
    }
    Ok(CheckedSpec { dir, mounts })
}

/// CPU shares outside the kernel's range are refused, not clamped: the
/// kernel would silently clamp a v1 `cpu.shares` (runc then fails reading
/// back a value it did not write), and a weight the task did not ask for is
/// a limit accepted and not applied. `0` is refused too: in Concourse it
/// leaves the default in place, which is what leaving the field out does.
fn check_cpu_shares(shares: u64) -> Result<(), String> {
    let (min, max) = (*CPU_SHARES_RANGE.start(), *CPU_SHARES_RANGE.end());
    match shares {
        0 => Err(format!(
            "container_limits.cpu is 0; CPU shares go from {min} to {max} (1024 is the default weight): \
             leave the field out for no CPU limit"
        )),
        s if s < min => Err(format!(
            "container_limits.cpu {s} is below the kernel's minimum of {min} CPU shares"
        )),
        s if s > max => Err(format!(
            "container_limits.cpu {s} is above the kernel's maximum of {max} CPU shares"
        )),
        _ => Ok(()),
    }
}

/// `inner` is `outer` or below it (both normalized).
fn is_within(inner: &str, outer: &str) -> bool {
    inner == outer || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

/// Normalizes a path relative to the working directory: no leading `/`, no
/// `..`; empty and `.` components are dropped. `allow_empty` admits the
/// working directory itself (`""` or `.`).
pub(crate) fn relative_path(path: &str, allow_empty: bool) -> Result<String, String> {
    if path.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if path.starts_with('/') {
        return Err(format!(
            "{path:?} must be relative to the working directory"
        ));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("{path:?} must not contain '..'")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() && !allow_empty {
        return Err(format!("{path:?} names the working directory itself"));
    }
    let joined = parts.join("/");
    if joined.len() > 1024 {
        return Err("is longer than 1024 bytes".into());
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hangar_api::containers::Mount;

    use super::*;

    fn process(handle: &str) -> ContainerSpec {
        ContainerSpec {
            handle: handle.into(),
            runtime: Runtime::Process,
            rootfs_volume: None,
            path: "sh".into(),
            args: vec!["-c".into(), "true".into()],
            env: BTreeMap::new(),
            dir: None,
            mounts: vec![],
            memory_limit_bytes: None,
            cpu_shares: None,
            user: None,
            privileged: false,
        }
    }

    fn mount(volume: &str, path: &str) -> Mount {
        Mount {
            volume: volume.into(),
            path: path.into(),
            read_only: false,
        }
    }

    fn field_of(spec: &ContainerSpec) -> String {
        match validate_spec(spec) {
            Err(ContainerError::InvalidSpec { field, .. }) => field,
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_process_spec_is_accepted_with_the_working_directory_as_dir() {
        let checked = validate_spec(&process("task-1")).unwrap();
        assert_eq!(checked.dir, "");
        assert!(checked.mounts.is_empty());
    }

    #[test]
    fn bad_handles_are_refused_naming_the_handle_field() {
        for handle in ["", "-x", "a/b", "a..b", &"x".repeat(129), "a b"] {
            assert_eq!(field_of(&process(handle)), "handle", "{handle:?}");
        }
        assert!(validate_spec(&process(&"x".repeat(128))).is_ok());
    }

    #[test]
    fn unknown_runtimes_are_refused_naming_both_known_ones() {
        let mut spec = serde_json::to_value(process("t")).unwrap();
        spec["runtime"] = "docker".into();
        let err = serde_json::from_value::<ContainerSpec>(spec)
            .unwrap_err()
            .to_string();
        assert!(err.contains("docker") && err.contains("process") && err.contains("runc"));
    }

    #[test]
    fn runc_needs_a_rootfs_volume_and_process_refuses_one() {
        let mut spec = process("t");
        spec.runtime = Runtime::Runc;
        assert_eq!(field_of(&spec), "rootfs_volume");
        spec.rootfs_volume = Some("../etc".into());
        assert_eq!(field_of(&spec), "rootfs_volume");
        spec.rootfs_volume = Some("busybox".into());
        assert!(validate_spec(&spec).is_ok());
        spec.runtime = Runtime::Process;
        assert_eq!(field_of(&spec), "rootfs_volume");
    }

    #[test]
    fn mount_paths_must_be_relative_without_dotdot_and_are_normalized() {
        let mut spec = process("t");
        spec.mounts = vec![mount("v", "/abs")];
        assert_eq!(field_of(&spec), "mounts[0].path");
        spec.mounts = vec![mount("v", "a/../b")];
        assert_eq!(field_of(&spec), "mounts[0].path");
        spec.mounts = vec![mount("v", ".")];
        assert_eq!(field_of(&spec), "mounts[0].path");
        spec.mounts = vec![mount("v", "./cache//go/")];
        let checked = validate_spec(&spec).unwrap();
        assert_eq!(checked.mounts[0].path, "cache/go");
    }

    #[test]
    fn a_mount_at_the_working_directory_is_taken_where_the_runtime_can_bind_it() {
        let mut spec = process("t");
        spec.mounts = vec![mount("v1", "."), mount("v2", "out")];
        let checked = validate_spec_with(&spec, false).unwrap();
        assert_eq!(checked.mounts[0].path, "");
        let err = validate_spec_with(&spec, true).unwrap_err().to_string();
        assert!(
            err.contains("an artifact at the working directory needs the sandbox"),
            "{err}"
        );
        spec.mounts[1].path = "./".into();
        let err = validate_spec_with(&spec, false).unwrap_err().to_string();
        assert!(err.contains("is already the path of mounts[0]"), "{err}");
    }

    #[test]
    fn duplicate_mount_paths_are_refused_even_when_spelled_differently() {
        let mut spec = process("t");
        spec.mounts = vec![mount("a", "input"), mount("b", "./input/")];
        let err = validate_spec(&spec).unwrap_err().to_string();
        assert!(
            err.contains("mounts[1].path") && err.contains("mounts[0]"),
            "{err}"
        );
    }

    #[test]
    fn nested_mounts_are_refused_for_process_but_allowed_for_runc() {
        let mut spec = process("t");
        spec.mounts = vec![mount("a", "cache"), mount("b", "cache/go")];
        assert_eq!(field_of(&spec), "mounts[1].path");
        // A shared prefix that is not a parent is fine.
        spec.mounts = vec![mount("a", "cache"), mount("b", "cache-go")];
        assert!(validate_spec(&spec).is_ok());
        spec.mounts = vec![mount("a", "cache"), mount("b", "cache/go")];
        spec.runtime = Runtime::Runc;
        spec.rootfs_volume = Some("root".into());
        assert!(validate_spec(&spec).is_ok());
    }

    #[test]
    fn mount_volumes_must_be_valid_handles() {
        let mut spec = process("t");
        spec.mounts = vec![mount("in", "a"), mount("../x", "b")];
        assert_eq!(field_of(&spec), "mounts[1].volume");
    }

    #[test]
    fn dir_may_be_the_working_directory_but_not_escape_it() {
        let mut spec = process("t");
        spec.dir = Some(".".into());
        assert_eq!(validate_spec(&spec).unwrap().dir, "");
        spec.dir = Some("src/app/".into());
        assert_eq!(validate_spec(&spec).unwrap().dir, "src/app");
        spec.dir = Some("../up".into());
        assert_eq!(field_of(&spec), "dir");
        spec.dir = Some("/tmp".into());
        assert_eq!(field_of(&spec), "dir");
    }

    #[test]
    fn program_args_and_env_are_checked_for_what_exec_cannot_take() {
        let mut spec = process("t");
        spec.path = String::new();
        assert_eq!(field_of(&spec), "path");
        let mut spec = process("t");
        spec.args.push("a\0b".into());
        assert_eq!(field_of(&spec), "args[2]");
        let mut spec = process("t");
        spec.env.insert("A=B".into(), "x".into());
        assert_eq!(field_of(&spec), "env.A=B");
        let mut spec = process("t");
        spec.env.insert("OK".into(), "x\0".into());
        assert_eq!(field_of(&spec), "env.OK");
    }

    #[test]
    fn cpu_shares_outside_the_kernel_s_range_are_refused_naming_container_limits_cpu() {
        let mut spec = process("t");
        for shares in [0, 1, 262_145, u64::MAX] {
            spec.cpu_shares = Some(shares);
            let err = validate_spec(&spec).unwrap_err().to_string();
            assert!(
                err.contains("invalid cpu_shares") && err.contains("container_limits.cpu"),
                "{shares}: {err}"
            );
        }
        spec.cpu_shares = Some(0);
        let err = validate_spec(&spec).unwrap_err().to_string();
        assert!(err.contains("leave the field out"), "{err}");
        for shares in [2, 512, 1024, 262_144] {
            spec.cpu_shares = Some(shares);
            assert!(validate_spec(&spec).is_ok(), "{shares}");
        }
    }

    #[test]
    fn tiny_memory_limits_are_refused() {
        let mut spec = process("t");
        spec.memory_limit_bytes = Some(4096);
        assert_eq!(field_of(&spec), "memory_limit_bytes");
        spec.memory_limit_bytes = Some(32 * 1024 * 1024);
        assert!(validate_spec(&spec).is_ok());
    }
}
