//! The sandbox, attacked as a task author would: every container, of the
//! `process` runtime (the host's system dirs read-only, no image) and of
//! runc with an image, runs in a user namespace of its own range, without
//! the host's network, `/tmp` or processes, under seccomp and
//! `no_new_privs`, with a pids limit. Each attack is asserted refused, and
//! the host unchanged by it. Needs root, runc, busybox-static, python3 and
//! git (scripts/install-deps installs them).

// Blocking calls are the point: the tests drive containers and git directly.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::containers_support::*;
use hangar_api::containers::ContainerSpec;
use hangar_worker::containers::{ContainerOptions, DEFAULT_TASK_IDS};

fn run(host: &Host, spec: ContainerSpec) -> (Option<i32>, String) {
    let handle = spec.handle.clone();
    host.containers.create(spec).unwrap();
    let exit = host.wait_exited(&handle).exit.unwrap();
    (exit.code, host.log(&handle))
}

/// Both runtimes: the process runtime, and runc on a busybox image.
fn both(host: &Host, handle: &str, script: &str) -> Vec<ContainerSpec> {
    busybox_rootfs(host, &format!("{handle}-rootfs"));
    vec![
        process_spec(&format!("{handle}-process"), script),
        runc_spec(
            &format!("{handle}-runc"),
            &format!("{handle}-rootfs"),
            script,
        ),
    ]
}

fn host_ids() -> String {
    format!("0 {} 65536", DEFAULT_TASK_IDS.uid)
}

#[test]
fn the_sandbox_is_in_force_in_every_container() {
    require_runc();
    let host = Host::sandboxed();
    assert!(host.containers.sandboxes_processes());
    let script = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; \
                  cat /proc/self/uid_map /proc/self/gid_map; id -u; \
                  tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; \
                  awk '$2 == \"00000000\" {print $1}' /proc/net/route; \
                  grep -c nameserver /etc/resolv.conf; \
                  ls /tmp | grep -vx build | wc -l";
    for spec in both(&host, "status", script) {
        let handle = spec.handle.clone();
        let (code, log) = run(&host, spec);
        assert_eq!(code, Some(0), "{handle}: {log}");
        let lines: Vec<String> = log
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            lines,
            [
                "NoNewPrivs: 1".to_string(),
                "Seccomp: 2".into(),
                host_ids(),
                host_ids(),
                "0".into(),
                // Loopback and the bridge's veth: no host interface.
                "eth0 lo".into(),
                // The default route goes out through the bridge.
                "eth0".into(),
                // Nameservers reachable from the bridge.
                "1".into(),
                // A /tmp of its own: only the build dir.
                "0".into(),
            ],
            "{handle}"
        );
    }
}

#[test]
fn a_setuid_file_planted_by_one_task_gives_the_next_no_root() {
    require_runc();
    let host = Host::sandboxed();
    busybox_rootfs(&host, "rootfs");
    let out = host.volume("planted");
    // An image task (root inside) plants a setuid copy of a shell.
    let mut plant = runc_spec(
        "plant",
        "rootfs",
        "cp /bin/busybox out/sh && chmod 4755 out/sh && ls -ln out/sh",
    );
    plant.mounts = vec![mount("planted", "out")];
    let (code, log) = run(&host, plant);
    assert_eq!(code, Some(0), "{log}");
    // On the host it is no root's: its owner is the sandbox's root.
    let meta = fs::metadata(out.join("sh")).unwrap();
    assert_eq!(meta.uid(), DEFAULT_TASK_IDS.uid, "{log}");
    // A process task as an unprivileged user runs it: still that user.
    let mut victim = process_spec("run-planted", "out/sh -c 'id -u; id -g'");
    victim.mounts = vec![mount("planted", "out")];
    victim.user = Some("1000:1000".into());
    let (code, log) = run(&host, victim);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(log, "1000\n1000\n");
}

#[test]
fn run_user_names_a_user_inside_never_one_of_the_host() {
    require_runc();
    let host = Host::sandboxed();
    // What the host's secrets and services are: root's, postgres's, a
    // group's.
    let probe = "id -u; id -g; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; \
                 (cat /etc/shadow >/dev/null 2>&1 && echo REACHED shadow) || echo refused shadow";
    for user in ["65534:42", "postgres", "1000", "0:0"] {
        if user == "postgres"
            && !fs::read_to_string("/etc/passwd")
                .unwrap()
                .contains("\npostgres:")
        {
            panic!("this test needs a postgres user (scripts/install-deps installs PostgreSQL)");
        }
        let mut spec = process_spec(&format!("user-{}", user.replace(':', "-")), probe);
        spec.user = Some(user.into());
        let (code, log) = run(&host, spec);
        assert_eq!(code, Some(0), "{user}: {log}");
        let lines: Vec<&str> = log.lines().collect();
        let uid: u32 = lines[0].parse().unwrap();
        assert!(uid < 65_536, "{user}: {log}");
        assert_eq!(lines[2], host_ids(), "{user}: {log}");
        assert_eq!(lines[3], "refused shadow", "{user}: {log}");
    }
}

#[test]
fn a_task_reaches_no_host_port_and_opens_no_packet_socket() {
    require_runc();
    let host = Host::sandboxed();
    // A listener of the test's own on every address of the host, and
    // every port the host listens on, at each of the host's addresses:
    // loopback, its own interfaces' and the bridge's (the containers'
    // gateway, which is the host).
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut ports = listening_ports();
    ports.push(listener.local_addr().unwrap().port());
    ports.sort();
    ports.dedup();
    let mut addrs = host_addresses();
    addrs.extend(["127.0.0.1".to_string(), "::1".into(), "10.223.0.1".into()]);
    addrs.sort();
    addrs.dedup();
    let script = format!(
        r#"
import socket
reached = []
for port in {ports:?}:
    for addr in {addrs:?}:
        try:
            s = socket.create_connection((addr, port), timeout=1)
            reached.append((addr, port))
            s.close()
        except OSError:
            pass
print("reached", reached)
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    print("REACHED packet socket")
except PermissionError:
    print("refused packet socket")
"#
    );
    let mut spec = process_spec("ports", "");
    spec.path = "python3".into();
    spec.args = vec!["-c".into(), script];
    let (code, log) = run(&host, spec);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        log, "reached []\nrefused packet socket\n",
        "ports {ports:?} at {addrs:?}"
    );
    // Nobody knocked.
    assert!(listener.accept().is_err());
}

/// The host's own IPv4 addresses (`ip -o -4 addr`).
fn host_addresses() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            Some(words.next()?.split('/').next()?.to_string())
        })
        .collect()
}

/// The TCP ports something listens on in the host's network namespace.
fn listening_ports() -> Vec<u16> {
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // State 0A is LISTEN.
            if fields.get(3) == Some(&"0A") {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

#[test]
fn five_thousand_forks_stop_at_the_pids_limit() {
    require_runc();
    let host = Host::with_options(ContainerOptions {
        pids_limit: Some(64),
        sandbox_process: true,
        ..ContainerOptions::default()
    });
    let script = r#"
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
    spec.args = vec!["-c".into(), script.into()];
    let (code, log) = run(&host, spec);
    host.containers.destroy("forks").unwrap();
    assert_eq!(code, Some(0), "{log}");
    let forked: u32 = log.trim().parse().unwrap();
    assert!(forked < 64, "{forked} forks under a limit of 64");
    assert!(forked > 10, "{forked}: the limit stopped ordinary forks");
}

#[test]
fn tmp_and_dev_shm_go_with_the_container() {
    require_runc();
    let host = Host::sandboxed();
    let plant = "echo planted > /tmp/planted && echo planted > /dev/shm/planted && echo ok";
    let look = "ls /tmp/planted /dev/shm/planted 2>/dev/null | wc -l";
    for (i, runtime) in ["process", "runc"].iter().enumerate() {
        let specs = both(&host, &format!("plant{i}"), plant);
        let (code, log) = run(&host, specs[i].clone());
        assert_eq!((code, log.as_str()), (Some(0), "ok\n"), "{runtime}");
        let specs = both(&host, &format!("look{i}"), look);
        let (code, log) = run(&host, specs[i].clone());
        assert_eq!((code, log.trim()), (Some(0), "0"), "{runtime}");
    }
    // Nothing reached the host's.
    assert!(!std::path::Path::new("/tmp/planted").exists());
    assert!(!std::path::Path::new("/dev/shm/planted").exists());
}

#[test]
fn a_task_enters_its_inputs_as_directories_and_the_next_step_reads_its_outputs() {
    require_runc();
    let host = Host::sandboxed();
    let src = host.volume("src");
    fs::create_dir_all(src.join("repo/sub")).unwrap();
    fs::write(src.join("repo/sub/a.txt"), "hello\n").unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-C", src.join("repo").to_str().unwrap()])
            .args(["-c", "user.name=t", "-c", "user.email=t@e"])
            .args(args)
            .output()
            .expect("git is not installed (scripts/install-deps installs it)");
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "first commit"]);
    host.volume("out");
    let mut first = process_spec(
        "enter",
        "cd src && find . -type f -path './repo/sub/*' && du -s . | cut -f1 | grep -qv '^0$' && \
         git -C \"$PWD/repo\" log --format=%s && cd .. && pwd && \
         ln -s sub/a.txt out/link && cp src/repo/sub/a.txt out/copy && echo written",
    );
    first.mounts = vec![mount("src", "src"), mount("out", "out")];
    let (code, log) = run(&host, first);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        log,
        "./repo/sub/a.txt\nfirst commit\n/tmp/build/work\nwritten\n"
    );
    // The next step, in an image, reads what the first wrote.
    busybox_rootfs(&host, "rootfs");
    let mut next = runc_spec(
        "next",
        "rootfs",
        "cat in/copy; ls -l in/link | grep -o 'sub/a.txt'",
    );
    next.mounts = vec![mount("out", "in")];
    let (code, log) = run(&host, next);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(log, "hello\nsub/a.txt\n");
}

#[test]
fn the_workers_files_and_environment_are_out_of_sight() {
    require_runc();
    worker_settings_in_environment();
    let host = Host::sandboxed();
    let secret = host.dir.path().join("admin-token");
    fs::write(&secret, "secret-of-the-web-node").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
    let me = std::process::id();
    let script = format!(
        "for p in {} {} /proc/{me}/environ /root /home /var/lib; do \
           (ls \"$p\" >/dev/null 2>&1 || cat \"$p\" >/dev/null 2>&1) && echo \"REACHED $p\" || echo \"refused $p\"; \
         done; env | grep -c HANGAR_ || true",
        secret.display(),
        host.containers.root().display(),
    );
    let (code, log) = run(&host, process_spec("snoop", &script));
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("REACHED"), "{log}");
    assert_eq!(log.lines().filter(|l| l.starts_with("refused")).count(), 6);
    assert_eq!(log.lines().last(), Some("0"));
}
