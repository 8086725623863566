//! A root worker without util-linux `unshare` (the image has only busybox)
//! drops process tasks to their user with `hangar exec-as`: the task runs
//! as the worker's first task user with no supplementary group and still
//! cannot read the worker's environment or the secrets beside its work dir.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hangar_api::containers::{ContainerSpec, Runtime};
use hangar_volumes::{DriverKind, VolumeManager};
use hangar_worker::containers::{ContainerManager, ContainerOptions, Isolation};

fn spec(handle: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        runtime: Runtime::Process,
        rootfs_volume: None,
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: BTreeMap::new(),
        dir: None,
        mounts: vec![],
        memory_limit_bytes: None,
        cpu_shares: None,
        user: None,
        privileged: false,
    }
}

#[test]
fn without_unshare_a_root_worker_drops_tasks_with_exec_as_needs_root() {
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "this test needs root: run the tests as root"
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let work = data.join("workers/w");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(data.join("admin-token"), "secret").unwrap();
    let volumes = Arc::new(VolumeManager::open(&work, DriverKind::Naive).unwrap());
    let containers = ContainerManager::open_with(
        &work.join("containers"),
        volumes,
        ContainerOptions {
            use_unshare: false,
            // The path outside the sandbox (a host where runc cannot run).
            sandbox_process: false,
            hangar_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_hangar"))),
            ..ContainerOptions::default()
        },
    )
    .unwrap();
    assert!(
        matches!(containers.isolation(), Isolation::ExecAs { .. }),
        "{:?}",
        containers.isolation()
    );
    let me = std::process::id();
    let script = format!(
        "id -u; id -G; \
         cat /proc/{me}/environ >/dev/null 2>&1 && echo REACHED environ; \
         cat {}/admin-token >/dev/null 2>&1 && echo REACHED token; \
         cat ../../../../../admin-token >/dev/null 2>&1 && echo REACHED relative; \
         kill -TERM $$",
        data.display()
    );
    containers.create(spec("t", &script)).unwrap();
    let c = containers.wait("t", Duration::from_secs(60)).unwrap();
    let log = std::fs::read_to_string(containers.log_path("t").unwrap()).unwrap();
    // (The shell that waited may add "Terminated".)
    assert!(log.starts_with("2000000\n2000000\n"), "{log}");
    assert!(!log.contains("REACHED"), "{log}");
    let exit = c.exit.unwrap();
    // No PID namespace: the task's `kill $$` reaches its own shell.
    assert_eq!((exit.code, exit.signal), (None, Some(15)), "{log}");

    let mut root = spec("r", "id -u");
    root.user = Some("0".into());
    let err = containers.create(root).unwrap_err();
    assert!(
        err.to_string().contains("does not run tasks as root"),
        "{err}"
    );
    containers.destroy("t").unwrap();
}

#[test]
fn exec_as_refuses_root_and_reports_a_missing_program_as_127() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hangar"))
            .arg("exec-as")
            .args(args)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let o = run(&["0", "0", "--", "id"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not uid or gid 0"));
    let o = run(&["4242", "4243", "--", "no-such-program-hangar"]);
    assert_eq!(o.status.code(), Some(127));
    let o = run(&["4242", "4243", "--", "sh", "-c", "id -u; id -g; id -G"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "4242\n4243\n4243\n");
}
