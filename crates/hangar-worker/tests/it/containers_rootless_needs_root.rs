//! A rootless worker's sandbox: the container manager opened by a user that
//! is not root but has subordinate ids (the `hangar-rootless` user that
//! `scripts/rootless-test-user` makes, and `scripts/install-deps --ci` runs),
//! with `newuidmap`, `newgidmap` and `slirp4netns`.
//!
//! The test runs as root only to start the same test binary again as that
//! user (`setpriv`), which opens a container manager in a work dir of its
//! own, runs a `process` task and a runc task on a busybox image, and
//! asserts what they saw; the root half listens on the host's loopback and
//! on a host address, and checks which of them the tasks reached.

// Blocking calls are the point: the tests drive containers and processes.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::containers_support::*;
use hangar_api::containers::ContainerSpec;
use hangar_volumes::{DriverKind, Strategy, VolumeManager};
use hangar_worker::containers::{ContainerManager, ContainerOptions};

const USER: &str = "hangar-rootless";
/// Set in the half that runs as the rootless user.
const CHILD: &str = "HANGAR_ROOTLESS_TEST_CHILD";
const TEST: &str = "a_rootless_worker_sandboxes_its_containers_in_its_subordinate_ids";

/// The test's full name in this binary (`containers_rootless_needs_root::…`,
/// without the crate's name), as `--exact` matches it: the test binary
/// holds every module of the crate's tests, and the rootless half runs
/// this one test alone.
fn exact_name() -> String {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_crate, module)| module);
    format!("{module}::{TEST}")
}

/// `name:start:count` of `/etc/subuid` or `/etc/subgid` for the test user.
fn subordinate(file: &str) -> (u32, u32) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut p = l.split(':');
            (p.next()? == USER).then_some(())?;
            Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?))
        })
        .find(|&(_, count): &(u32, u32)| count >= 65_536)
        .unwrap_or_else(|| {
            panic!("{file} gives {USER} no range of 65536 ids: run scripts/rootless-test-user as root (scripts/install-deps --ci does)")
        })
}

fn passwd_ids() -> (u32, u32, String) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{USER}:")))
        .unwrap_or_else(|| {
            panic!("no user {USER}: run scripts/rootless-test-user as root (scripts/install-deps --ci does)")
        });
    let f: Vec<&str> = line.split(':').collect();
    (
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
        f[5].to_string(),
    )
}

/// An IPv4 address of this host that is not loopback.
fn host_address() -> Ipv4Addr {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("ip (iproute2; scripts/install-deps installs it)");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
        .expect("this host has no IPv4 address besides loopback")
}

#[test]
fn a_rootless_worker_sandboxes_its_containers_in_its_subordinate_ids() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root (to start its other half as {USER}): run the tests as root"
    );
    require_runc();
    for tool in ["newuidmap", "newgidmap", "slirp4netns", "setpriv", "bash"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool} >/dev/null")])
                .status()
                .unwrap()
                .success(),
            "no {tool}: scripts/install-deps installs it (uidmap, slirp4netns, util-linux)"
        );
    }
    let (uid, gid, home) = passwd_ids();
    let sub_uid = subordinate("/etc/subuid");
    let sub_gid = subordinate("/etc/subgid");
    // The host's loopback (web, the worker API, PostgreSQL live there) and
    // a service on one of the host's other addresses.
    let loopback = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let address = host_address();
    let outside = TcpListener::bind((address, 0)).unwrap();
    loopback.set_nonblocking(true).unwrap();
    outside.set_nonblocking(true).unwrap();

    // The rootless half says it ran to its end in a file of its own.
    let done_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(done_dir.path(), Some(uid), Some(gid)).unwrap();
    let done = done_dir.path().join("done");
    // A copy of this test binary the user can run: the checkout may be
    // below a dir only root enters (`/root`).
    let exe = done_dir.path().join("rootless-half");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--init-groups",
            "--",
        ])
        .arg(&exe)
        .args(["--exact", &exact_name(), "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("HANGAR_TEST_DONE", &done)
        .env("HOME", &home)
        .env(
            "HANGAR_TEST_LOOPBACK_PORT",
            loopback.local_addr().unwrap().port().to_string(),
        )
        .env("HANGAR_TEST_HOST_ADDRESS", address.to_string())
        .env(
            "HANGAR_TEST_HOST_PORT",
            outside.local_addr().unwrap().port().to_string(),
        )
        .env("HANGAR_TEST_IDS", format!("{uid}:{gid}"))
        .env(
            "HANGAR_TEST_SUBORDINATE",
            format!("{}:{}", sub_uid.0, sub_gid.0),
        )
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the rootless half failed:\n{text}");
    assert_eq!(
        std::fs::read_to_string(&done).ok().as_deref(),
        Some("passed"),
        "the rootless half did not run:\n{text}"
    );
    // Nothing reached the host's loopback; the host address was reached
    // (through slirp4netns: the task's only route is its tap device).
    assert!(
        loopback.accept().is_err(),
        "a task reached the host's loopback:\n{text}"
    );
    let mut reached = outside
        .accept()
        .unwrap_or_else(|e| panic!("no task reached {address}: {e}\n{text}"))
        .0;
    reached.set_nonblocking(false).unwrap();
    reached
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut said = String::new();
    reached.read_to_string(&mut said).unwrap();
    assert_eq!(said, "from the task\n");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"))
}

/// The half that runs as the rootless user.
fn child() {
    assert!(!nix::unistd::Uid::effective().is_root());
    let (uid, gid) = env("HANGAR_TEST_IDS")
        .split_once(':')
        .map(|(u, g)| (u.to_string(), g.to_string()))
        .unwrap();
    let (sub_uid, sub_gid) = env("HANGAR_TEST_SUBORDINATE")
        .split_once(':')
        .map(|(u, g)| (u.to_string(), g.to_string()))
        .unwrap();
    let loopback_port = env("HANGAR_TEST_LOOPBACK_PORT");
    let address = env("HANGAR_TEST_HOST_ADDRESS");
    let host_port = env("HANGAR_TEST_HOST_PORT");

    let dir = tempfile::tempdir_in(env("HOME")).unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let containers = ContainerManager::open_with(
        &dir.path().join("containers"),
        volumes.clone(),
        ContainerOptions {
            allow_privileged: true,
            pids_limit: Some(64),
            ..ContainerOptions::default()
        },
    )
    .unwrap();
    assert!(
        containers.sandboxes_processes(),
        "a rootless worker with subordinate ids runs process tasks in the sandbox"
    );
    let input = volumes
        .create("input", Strategy::Empty, BTreeMap::new())
        .unwrap()
        .path;
    std::fs::create_dir_all(input.join("repo/src")).unwrap();
    std::fs::write(input.join("repo/src/main.c"), "int main() {}\n").unwrap();

    let maps = |uid: &str, sub: &str| format!("0 {uid} 1\n1 {sub} 65535");
    let uid_map = maps(&uid, &sub_uid);
    let gid_map = maps(&gid, &sub_gid);
    let norm = |s: &str| {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let run = |spec: ContainerSpec| -> String {
        let handle = spec.handle.clone();
        containers.create(spec).unwrap();
        let c = containers.wait(&handle, WAIT).unwrap();
        let log = std::fs::read_to_string(containers.log_path(&handle).unwrap()).unwrap();
        let exit = c
            .exit
            .unwrap_or_else(|| panic!("{handle} still running: {log}"));
        assert_eq!(exit.code, Some(0), "{handle}: {log}");
        containers.destroy(&handle).unwrap();
        log
    };

    // Who a task is, and what it is held by.
    let identity = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; id -u; \
                    cat /proc/self/uid_map; cat /proc/self/gid_map";
    let want = |shown: &str| format!("NoNewPrivs: 1\nSeccomp: 2\n0\n{uid_map}\n{gid_map}\n{shown}");

    // The process runtime: the host's system dirs, its input a real dir it
    // enters, its network slirp4netns's.
    let probe = format!(
        "{identity}; \
         cd input && find . -type f && du -s . | cut -f1 >/dev/null && cd ..; \
         tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; \
         awk '$2 == \"00000000\" {{print $1}}' /proc/net/route; \
         for to in 127.0.0.1 10.0.2.2 {address}; do \
           if timeout 5 bash -c \"exec 3<>/dev/tcp/$to/{loopback_port}\" 2>/dev/null; \
           then echo \"reached $to\"; else echo \"refused $to\"; fi; \
         done; \
         timeout 10 bash -c 'exec 3<>/dev/tcp/{address}/{host_port}; echo from the task >&3' \
           && echo outbound"
    );
    let mut spec = process_spec("process", &probe);
    spec.mounts = vec![mount("input", "input")];
    let log = run(spec);
    assert_eq!(
        norm(&log),
        want(
            "./repo/src/main.c\n\
             lo tap0\n\
             tap0\n\
             refused 127.0.0.1\n\
             refused 10.0.2.2\n\
             refused {address}"
        )
        .replace("{address}", &address)
        .trim_end()
        .to_string()
            + "\noutbound",
        "the process task's view:\n{log}"
    );

    // runc on an image: root inside is the worker's user, everyone else
    // its subordinate ids; the same filters.
    let busybox = static_busybox();
    let rootfs = volumes
        .create("rootfs", Strategy::Empty, BTreeMap::new())
        .unwrap()
        .path;
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::copy(&busybox, rootfs.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "grep", "id", "ls"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    let mut spec = runc_spec("image", "rootfs", &format!("{identity}; ls input/repo"));
    spec.mounts = vec![mount("input", "input")];
    let log = run(spec);
    assert_eq!(norm(&log), want("src"), "the image task's view:\n{log}");

    // run.user names a user inside: a subordinate id on the host.
    let mut spec = runc_spec("user", "rootfs", "id -u; cat /proc/self/uid_map");
    spec.user = Some("1000:1000".into());
    let log = run(spec);
    assert_eq!(norm(&log), format!("1000\n{uid_map}"), "{log}");

    // 5,000 forks stop at the pids limit (an rlimit here: this worker
    // was delegated no cgroup).
    let forks = r#"
import os, time
n = 0
for i in range(5000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)
"#;
    let mut spec = process_spec("forks", "");
    spec.path = "python3".into();
    spec.args = vec!["-c".into(), forks.into()];
    let log = run(spec);
    let forked: u32 = log.trim().parse().unwrap_or_else(|_| panic!("{log}"));
    assert!(forked < 64, "{forked} forks under a limit of 64");
    assert!(forked > 10, "{forked}: the limit stopped ordinary forks");

    // There is no real root to give a privileged step.
    let mut spec = process_spec("privileged", "id -u");
    spec.privileged = true;
    let refused = containers.create(spec).unwrap_err().to_string();
    assert!(refused.contains("not root"), "{refused}");
    // What the root half looks for: this half ran to its end, not a
    // filter that matched no test.
    std::fs::write(env("HANGAR_TEST_DONE"), "passed").unwrap();
}
