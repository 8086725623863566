//! The seccomp filter of every unprivileged container: the system calls
//! that Docker's and containerd's default profile withholds from a
//! container without `CAP_SYS_ADMIN`, refused with `EPERM`.
//!
//! It is written as a deny list over an allowing default, not as Docker's
//! allow list: the effect on the calls named here is the same, and a call
//! the kernel adds later is not refused by surprise. What it withholds is
//! what would let a task leave or look past its namespaces: new namespaces
//! (`unshare`, `setns`, `clone` with a namespace flag — a user namespace of
//! its own would hand the task every capability again), mounts, the kernel
//! keyring, BPF, perf, kernel modules, `open_by_handle_at` (the "shocker"
//! escape), other processes' memory, the clock, reboot and swap.
//! `clone3` answers `ENOSYS`, as in Docker's profile: its flags sit behind
//! a pointer a filter cannot read, and libc then falls back to `clone`.

use serde_json::{json, Value};

/// `EPERM`, what a refused call returns.
const EPERM: u32 = 1;
/// `ENOSYS`, what `clone3` returns so that libc falls back to `clone`.
const ENOSYS: u32 = 38;

/// The calls refused whatever their arguments.
pub(crate) const REFUSED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "_sysctl",
    "sysfs",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// The `clone` flags that make a namespace: `CLONE_NEWNS`, `NEWCGROUP`,
/// `NEWUTS`, `NEWIPC`, `NEWUSER`, `NEWPID`, `NEWNET` and `NEWTIME`.
pub(crate) const NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000,
    0x0200_0000,
    0x0400_0000,
    0x0800_0000,
    0x1000_0000,
    0x2000_0000,
    0x4000_0000,
    0x0000_0080,
];

/// The OCI `linux.seccomp` object.
pub(crate) fn profile() -> Value {
    let mut syscalls = vec![
        json!({"names": REFUSED, "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}),
        json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}),
    ];
    // One rule per flag: a rule's conditions are all required, and a
    // masked compare tests one value, so "any of these bits" is a rule each.
    for flag in NAMESPACE_FLAGS {
        syscalls.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": syscalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_by_profile(name: &str) -> Option<u64> {
        profile()["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("args").is_none())
            .find(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
            .map(|r| r["errnoRet"].as_u64().unwrap())
    }

    #[test]
    fn the_escape_calls_are_refused_and_ordinary_ones_are_not() {
        let cases = [
            ("unshare", Some(1)),
            ("setns", Some(1)),
            ("mount", Some(1)),
            ("keyctl", Some(1)),
            ("bpf", Some(1)),
            ("open_by_handle_at", Some(1)),
            ("io_uring_setup", Some(1)),
            ("clone3", Some(38)),
            ("read", None),
            ("clone", None),
            ("ptrace", None),
            ("socket", None),
            ("execve", None),
        ];
        for (name, want) in cases {
            assert_eq!(refused_by_profile(name), want, "{name}");
        }
    }

    #[test]
    fn clone_is_refused_for_each_namespace_flag_and_only_those() {
        let p = profile();
        let rules: Vec<&Value> = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["names"] == json!(["clone"]))
            .collect();
        assert_eq!(rules.len(), NAMESPACE_FLAGS.len());
        // CLONE_NEWUSER is among them; CLONE_THREAD (0x10000) is not.
        let masks: Vec<u64> = rules
            .iter()
            .map(|r| r["args"][0]["value"].as_u64().unwrap())
            .collect();
        assert!(masks.contains(&0x1000_0000));
        assert!(!masks.contains(&0x0001_0000));
        for r in rules {
            assert_eq!(r["args"][0]["value"], r["args"][0]["valueTwo"]);
        }
    }
}
