//! What a process task can reach outside the sandbox (a root worker without
//! runc, or with `sandbox_process` off; `containers_sandbox_needs_root.rs`
//! tests the sandbox): not the worker's environment or memory, not the secrets and
//! database beside the work dir, not another task's volumes, not a listing
//! of the work dir; it runs as its own user (or its `run.user`) with an
//! environment of its own. Each check runs with the PID namespace and
//! without it (a host where `unshare --pid` does not work).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use crate::containers_support::*;
use hangar_api::containers::ContainerSpec;
use hangar_volumes::{DriverKind, Strategy, VolumeManager};
use hangar_worker::containers::{
    ContainerError, ContainerManager, ContainerOptions, Isolation, DEFAULT_TASK_IDS,
};

/// quickstart's layout: `<data>/{admin-token,hangar.db}` and the work dir
/// at `<data>/workers/w`, the data and workers dirs 0700.
struct Layout {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    work: PathBuf,
    volumes: Arc<VolumeManager>,
    containers: ContainerManager,
}

impl Layout {
    fn new(pid_namespace: bool) -> Layout {
        assert!(
            fs::metadata("/proc/self").unwrap().uid() == 0,
            "these tests need root (the worker drops tasks to other users): run them as root"
        );
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let work = data.join("workers/w");
        fs::create_dir_all(&work).unwrap();
        for d in [&data, &data.join("workers")] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
        }
        for f in ["admin-token", "hangar.db"] {
            fs::write(data.join(f), "secret-of-the-web-node").unwrap();
            fs::set_permissions(data.join(f), fs::Permissions::from_mode(0o600)).unwrap();
        }
        let volumes = Arc::new(VolumeManager::open(&work, DriverKind::Naive).unwrap());
        let containers = ContainerManager::open_with(
            &work.join("containers"),
            volumes.clone(),
            ContainerOptions {
                pid_namespace,
                sandbox_process: false,
                ..ContainerOptions::default()
            },
        )
        .unwrap();
        match (containers.isolation(), pid_namespace) {
            (
                Isolation::Drop {
                    pid_namespace: p, ..
                },
                want,
            ) => assert_eq!(*p, want),
            (other, _) => {
                panic!("a root worker should drop tasks with unshare (util-linux; scripts/install-deps installs it): {other:?}")
            }
        }
        Layout {
            _tmp: tmp,
            data,
            work,
            volumes,
            containers,
        }
    }

    fn volume(&self, handle: &str) -> PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, BTreeMap::new())
            .unwrap()
            .path
    }

    fn run(&self, spec: ContainerSpec) -> (Option<i32>, String) {
        let handle = spec.handle.clone();
        self.containers.create(spec).unwrap();
        let c = self.containers.wait(&handle, WAIT).unwrap();
        assert_eq!(c.state.to_string(), "exited", "{handle} still running");
        let log = fs::read_to_string(self.containers.log_path(&handle).unwrap()).unwrap();
        (c.exit.unwrap().code, log)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        for c in self.containers.list().unwrap_or_default() {
            let _ = self.containers.destroy(&c.handle);
        }
    }
}

/// A script that tries each command and prints `REACHED` or `refused`.
fn attempts(tries: &[String]) -> String {
    let mut s = String::from(
        "try() { if \"$@\" >/dev/null 2>&1; then echo \"REACHED: $*\"; else echo \"refused: $*\"; fi; }\n",
    );
    for t in tries {
        s.push_str(&format!("try {t}\n"));
    }
    s
}

fn assert_all_refused(log: &str, expected: usize) {
    let reached: Vec<&str> = log.lines().filter(|l| l.starts_with("REACHED")).collect();
    assert!(reached.is_empty(), "the task reached {reached:?}\n{log}");
    assert_eq!(
        log.lines().filter(|l| l.starts_with("refused")).count(),
        expected,
        "{log}"
    );
}

fn for_both(test: impl Fn(bool)) {
    for pid_namespace in [true, false] {
        test(pid_namespace);
    }
}

#[test]
fn a_task_cannot_read_the_workers_environment_memory_secrets_database_or_work_dir() {
    for_both(|pid_namespace| {
        let l = Layout::new(pid_namespace);
        let own = l.volume("own");
        fs::write(own.join("mine"), "x\n").unwrap();
        let me = std::process::id();
        let d = l.data.display();
        let w = l.work.display();
        let script = attempts(&[
            format!("cat /proc/{me}/environ"),
            format!("cat /proc/{me}/maps"),
            format!("ls /proc/{me}/cwd/"),
            format!("cat {d}/admin-token"),
            format!("cat {d}/hangar.db"),
            // From the working dir: work, <handle>, containers, the work dir, workers.
            "cat ../../../../../admin-token".into(),
            "cat ../../../../../hangar.db".into(),
            "ls ../../../..".into(),
            "ls ../../..".into(),
            "ls ../..".into(),
            "ls ../../../volumes".into(),
            format!("ls {w}"),
            format!("ls {w}/volumes"),
            format!("cat {w}/containers/probe/spec.json"),
            format!("cat {w}/containers/probe/log"),
        ]) + "cat own/mine && echo >> own/mine && echo own ok\n";
        let mut spec = process_spec("probe", &script);
        spec.mounts = vec![mount("own", "own")];
        spec.env.insert("PARAM".into(), "secret-param".into());
        let (code, log) = l.run(spec);
        assert_eq!(code, Some(0), "{log}");
        assert!(
            log.ends_with("x\nown ok\n"),
            "its own volume stays usable: {log}"
        );
        assert_all_refused(&log, 15);
        // The worker's records of the task are root's alone.
        let spec_mode = fs::metadata(l.work.join("containers/probe/spec.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(spec_mode & 0o077, 0, "spec.json is readable by others");
    });
}

#[test]
fn a_task_cannot_read_another_tasks_volumes_while_it_runs_or_after() {
    for_both(|pid_namespace| {
        let l = Layout::new(pid_namespace);
        let theirs = l.volume("theirs");
        let gate = l.volume("gate");
        mkfifo(&gate.join("ready"));
        let mut spec = process_spec(
            "owner",
            "echo private > v/secret; chmod 644 v/secret; echo ready > gate/ready; exec sleep 1000",
        );
        spec.mounts = vec![mount("theirs", "v"), mount("gate", "gate")];
        l.containers.create(spec).unwrap();
        assert_eq!(read_fifo(&gate.join("ready")).trim(), "ready");
        let owner_pid = wait_for_process_in(&l.work.join("containers/owner"), "sleep");
        let tries = |pid: Option<u32>| {
            let mut t = vec![
                format!("cat {}/secret", theirs.display()),
                "cat ../../../volumes/theirs/data/secret".into(),
                "ls ../../owner/work/v/".into(),
                "cat ../../owner/work/v/secret".into(),
            ];
            if let Some(pid) = pid {
                t.push(format!("ls /proc/{pid}/cwd/"));
                t.push(format!("cat /proc/{pid}/environ"));
            }
            attempts(&t)
        };
        let (code, log) = l.run(process_spec("snoop", &tries(Some(owner_pid))));
        assert_eq!(code, Some(0), "{log}");
        assert_all_refused(&log, 6);

        l.containers.destroy("owner").unwrap();
        let (code, log) = l.run(process_spec("snoop-after", &tries(None)));
        assert_eq!(code, Some(0), "{log}");
        assert_all_refused(&log, 4);
        // The owner's file is still there, and root's: refusals changed nothing.
        assert_eq!(
            fs::read_to_string(theirs.join("secret")).unwrap(),
            "private\n"
        );
        assert_eq!(fs::metadata(&theirs).unwrap().uid(), 0);
    });
}

#[test]
fn tasks_run_as_their_run_user_or_each_as_a_user_of_its_own() {
    let l = Layout::new(true);
    let mut spec = process_spec("numeric", "id -u; id -g; id -G");
    spec.user = Some("4321:4322".into());
    assert_eq!(l.run(spec), (Some(0), "4321\n4322\n4322\n".into()));

    let nobody = fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("nobody:x:")
                .map(|r| r.split(':').next().unwrap().to_string())
        })
        .expect("this host has no nobody user in /etc/passwd");
    let mut spec = process_spec("named", "id -u");
    spec.user = Some("nobody".into());
    assert_eq!(l.run(spec), (Some(0), format!("{nobody}\n")));

    // Without run.user: the worker's range, one uid per running container.
    let gate = l.volume("gate");
    mkfifo(&gate.join("ready"));
    let mut first = process_spec("first", "id -u > gate/ready; exec sleep 1000");
    first.mounts = vec![mount("gate", "gate")];
    l.containers.create(first).unwrap();
    let first_uid: u32 = read_fifo(&gate.join("ready")).trim().parse().unwrap();
    let (_, second) = l.run(process_spec("second", "id -u; id -G"));
    let second_uid: u32 = second.lines().next().unwrap().parse().unwrap();
    assert!(first_uid >= DEFAULT_TASK_IDS.uid && second_uid >= DEFAULT_TASK_IDS.uid);
    assert_ne!(first_uid, second_uid);
    // No supplementary group of the worker (root's 0) is kept.
    assert_eq!(second.lines().nth(1).unwrap(), second_uid.to_string());
}

#[test]
fn root_and_unknown_run_users_are_refused_and_nothing_is_made() {
    let l = Layout::new(true);
    for (user, expected) in [
        ("root", "does not run tasks as root"),
        ("0", "does not run tasks as root"),
        ("0:0", "does not run tasks as root"),
        ("no-such-user-hangar", "not in /etc/passwd"),
        ("a b", "neither"),
    ] {
        let mut spec = process_spec("as-root", "id -u");
        spec.user = Some(user.into());
        match l.containers.create(spec) {
            Err(ContainerError::InvalidSpec { field, reason }) => {
                assert_eq!(field, "user");
                assert!(reason.contains(expected), "{user}: {reason}");
            }
            other => panic!("{user}: expected a refusal, got {other:?}"),
        }
        assert!(l.containers.list().unwrap().is_empty());
        assert!(!l.work.join("containers/as-root").exists());
    }
}

#[test]
fn a_tasks_environment_is_its_own_not_the_workers() {
    // What a worker started with its key in the environment has.
    worker_settings_in_environment();
    let l = Layout::new(true);
    let mut spec = process_spec("env", "env");
    spec.env.insert("GREETING".into(), "hello".into());
    let (code, log) = l.run(spec);
    assert_eq!(code, Some(0), "{log}");
    let vars: BTreeMap<&str, &str> = log.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(
        !log.contains("HANGAR_") && !log.contains("worker-only"),
        "{log}"
    );
    assert_eq!(vars.get("GREETING"), Some(&"hello"));
    assert_eq!(
        vars.get("PATH"),
        Some(&"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    );
    assert!(vars["HOME"].ends_with("/containers/env/work"), "{log}");
    // Only the base, the shell's own and the params.
    for key in vars.keys() {
        assert!(
            ["PATH", "HOME", "PWD", "SHLVL", "OLDPWD", "_", "GREETING"].contains(key),
            "unexpected variable {key} in {log}"
        );
    }
}

#[test]
fn a_task_may_change_inputs_made_by_root() {
    let l = Layout::new(true);
    let input = l.volume("input");
    fs::create_dir(input.join("sub")).unwrap();
    fs::write(input.join("sub/f"), "a\n").unwrap();
    let mut spec = process_spec(
        "edit",
        "echo b >> input/sub/f && touch input/sub/new && rm input/sub/f",
    );
    spec.mounts = vec![mount("input", "input")];
    let (code, log) = l.run(spec);
    assert_eq!(code, Some(0), "{log}");
    assert!(input.join("sub/new").exists() && !input.join("sub/f").exists());
}

#[test]
fn two_tasks_sharing_a_volume_run_as_one_user_and_both_keep_writing_to_it() {
    let l = Layout::new(true);
    let cache = l.volume("cache");
    mkfifo(&cache.join("ready"));
    mkfifo(&cache.join("go"));
    // The first writes, waits for the second to have run, then writes again.
    let mut first = process_spec(
        "first",
        "touch cache/a; echo ready > cache/ready; cat cache/go; touch cache/c; id -u",
    );
    first.mounts = vec![mount("cache", "cache")];
    l.containers.create(first).unwrap();
    assert_eq!(read_fifo(&cache.join("ready")).trim(), "ready");
    let mut second = process_spec("second", "touch cache/b && id -u");
    second.mounts = vec![mount("cache", "cache")];
    let (code, second_log) = l.run(second);
    assert_eq!(code, Some(0), "{second_log}");
    write_fifo(&cache.join("go"), "go\n").join().unwrap();
    let c = l.containers.wait("first", WAIT).unwrap();
    let first_log = fs::read_to_string(l.containers.log_path("first").unwrap()).unwrap();
    assert_eq!(c.exit.unwrap().code, Some(0), "{first_log}");
    assert_eq!(first_log.lines().last(), second_log.lines().last());
    for f in ["a", "b", "c"] {
        assert!(cache.join(f).exists(), "{f}");
    }
}
