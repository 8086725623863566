//! The container manager with the process runtime outside the sandbox (a
//! worker that is not root, or lacks runc or cgroups; the sandboxed path
//! is `containers_sandbox_needs_root.rs`), running real processes:
//! mounts, exits, logs, destroy, a restarted worker picking up its
//! predecessor's containers, crash leftovers, and OOM under a memory limit
//! (root: the memory cgroup).

use std::fs;
use std::time::Duration;

use crate::containers_support::*;
use hangar_worker::containers::ContainerError;

#[test]
fn a_task_reads_its_input_writes_its_output_and_logs_stdout_and_stderr() {
    let host = Host::unsandboxed();
    let input = host.volume("in-1");
    fs::write(input.join("hello.txt"), "hello").unwrap();
    let output = host.volume("out-1");
    let mut spec = process_spec(
        "task-1",
        "echo hi; ls input; echo oops >&2; echo out > output/f",
    );
    spec.mounts = vec![mount("in-1", "input"), mount("out-1", "output")];

    let created = host.containers.create(spec).unwrap();
    assert_eq!(
        (created.state.as_str(), created.runtime.as_str()),
        ("running", "process")
    );
    let done = host.wait_exited("task-1");

    let exit = done.exit.unwrap();
    assert_eq!(
        (exit.code, exit.signal, exit.oom_killed, exit.lost),
        (Some(0), None, false, false)
    );
    assert_eq!(host.log("task-1"), "hi\nhello.txt\noops\n");
    assert_eq!(done.log_bytes, "hi\nhello.txt\noops\n".len() as u64);
    assert_eq!(fs::read_to_string(output.join("f")).unwrap(), "out\n");
}

#[test]
fn a_failing_task_reports_its_exit_code() {
    let host = Host::unsandboxed();
    host.containers
        .create(process_spec("fails", "exit 3"))
        .unwrap();
    let exit = host.wait_exited("fails").exit.unwrap();
    assert_eq!((exit.code, exit.signal, exit.lost), (Some(3), None, false));
}

#[test]
fn a_task_killed_by_a_signal_reports_the_signal_not_a_code() {
    let host = Host::unsandboxed();
    host.containers
        .create(process_spec("killed", "kill -TERM $$"))
        .unwrap();
    let exit = host.wait_exited("killed").exit.unwrap();
    assert_eq!((exit.code, exit.signal), (None, Some(15)));
}

#[test]
fn env_and_dir_reach_the_process_and_a_missing_program_is_exit_127() {
    let host = Host::unsandboxed();
    let mut spec = process_spec("env", r#"echo "$GREETING"; pwd"#);
    spec.env.insert("GREETING".into(), "hello there".into());
    spec.dir = Some("sub/dir".into());
    host.containers.create(spec).unwrap();
    assert_eq!(host.wait_exited("env").exit.unwrap().code, Some(0));
    let log = host.log("env");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "hello there");
    assert!(lines[1].ends_with("/containers/env/work/sub/dir"), "{log}");

    let mut spec = process_spec("missing", "");
    spec.path = "no-such-program-for-hangar".into();
    spec.args.clear();
    host.containers.create(spec).unwrap();
    assert_eq!(host.wait_exited("missing").exit.unwrap().code, Some(127));
}

#[test]
fn destroy_kills_a_running_task_and_forgets_it_and_destroying_again_is_fine() {
    let host = Host::unsandboxed();
    let gate = host.volume("gate");
    mkfifo(&gate.join("pid"));
    let mut spec = process_spec("sleeper", "echo started > gate/pid; exec sleep 1000");
    spec.mounts = vec![mount("gate", "gate")];
    host.containers.create(spec).unwrap();
    assert_eq!(read_fifo(&gate.join("pid")).trim(), "started");
    // The task's own `$$` is its pid in its PID namespace: find it on the
    // host by its working directory.
    let pid = wait_for_process_in(&host.container_dir("sleeper"), "sleep");
    assert!(!is_dead(pid));
    assert_eq!(host.containers.active_count().unwrap(), 1);

    host.containers.destroy("sleeper").unwrap();

    assert!(is_dead(pid), "sleep {pid} survived destroy");
    assert_eq!(host.containers.get("sleeper").unwrap(), None);
    assert!(!host.container_dir("sleeper").exists());
    assert_eq!(host.containers.active_count().unwrap(), 0);
    host.containers.destroy("sleeper").unwrap();
    host.containers.destroy("never-was").unwrap();
    // The volume it used is untouched.
    assert!(gate.join("pid").exists());
}

#[test]
fn a_restarted_worker_lists_waits_on_and_reads_the_log_of_its_predecessors_container() {
    let host = Host::unsandboxed();
    let gate = host.volume("gate");
    mkfifo(&gate.join("go"));
    let mut spec = process_spec("long", r#"echo first; read x < gate/go; echo "second $x""#);
    spec.mounts = vec![mount("gate", "gate")];
    host.containers.create(spec).unwrap();

    let restarted = host.reopen();
    assert!(restarted.open_report().lost.is_empty());
    let seen = restarted.get("long").unwrap().unwrap();
    assert_eq!(seen.state.to_string(), "running");
    assert_eq!(restarted.active_count().unwrap(), 1);
    assert_eq!(restarted.list().unwrap().len(), 1);
    // Still running: a short wait returns it as it is.
    let waited = restarted.wait("long", Duration::from_millis(100)).unwrap();
    assert_eq!(waited.state.to_string(), "running");

    let writer = write_fifo(&gate.join("go"), "go\n");
    let done = restarted.wait("long", WAIT).unwrap();
    writer.join().unwrap();
    assert_eq!(done.state.to_string(), "exited");
    assert_eq!(done.exit.unwrap().code, Some(0));
    let log = fs::read_to_string(restarted.log_path("long").unwrap()).unwrap();
    assert_eq!(log, "first\nsecond go\n");
    assert_eq!(restarted.active_count().unwrap(), 0);
}

#[test]
fn a_restarted_worker_finds_a_wrapper_whose_pid_file_was_never_written() {
    let host = Host::unsandboxed();
    host.containers
        .create(process_spec("orphan", "exec sleep 1000"))
        .unwrap();
    // As if the worker died between starting the process and noting its pid.
    fs::remove_file(host.container_dir("orphan").join("pid")).unwrap();

    let restarted = host.reopen();
    assert!(restarted.open_report().lost.is_empty());
    assert_eq!(
        restarted.get("orphan").unwrap().unwrap().state.to_string(),
        "running"
    );
    assert!(host.container_dir("orphan").join("pid").exists());
    restarted.destroy("orphan").unwrap();
    assert_eq!(restarted.get("orphan").unwrap(), None);
}

#[test]
fn a_container_whose_processes_vanished_without_an_exit_status_is_reported_lost() {
    let host = Host::unsandboxed();
    host.containers
        .create(process_spec("vanishes", "exec sleep 1000"))
        .unwrap();
    let pid: i32 = fs::read_to_string(host.container_dir("vanishes").join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The wrapper and its program die together (a reboot, an OOM of the
    // wrapper): nobody writes the exit file.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let exit = host.wait_exited("vanishes").exit.unwrap();
    assert!(exit.lost);
    assert_eq!(
        (exit.code, exit.signal, exit.oom_killed),
        (None, None, false)
    );
    // A restarted worker reads the same.
    let restarted = host.reopen();
    let again = restarted.get("vanishes").unwrap().unwrap();
    assert_eq!(again.exit.unwrap(), exit);
}

#[test]
fn opening_removes_leftovers_of_creations_a_crash_interrupted() {
    let host = Host::unsandboxed();
    host.containers
        .create(process_spec("kept", "true"))
        .unwrap();
    host.wait_exited("kept");
    let root = host.containers.root().to_path_buf();
    fs::create_dir_all(root.join(".creating-half-0123456789ab/work")).unwrap();
    fs::create_dir_all(root.join(".destroying-gone-0123456789ab")).unwrap();
    fs::create_dir_all(root.join("no-spec/work")).unwrap();

    let restarted = host.reopen();
    let mut removed: Vec<String> = restarted
        .open_report()
        .removed
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    removed.sort();
    assert_eq!(
        removed,
        [
            ".creating-half-0123456789ab",
            ".destroying-gone-0123456789ab",
            "no-spec"
        ]
    );
    assert!(!root.join("no-spec").exists());
    let handles: Vec<String> = restarted
        .list()
        .unwrap()
        .into_iter()
        .map(|c| c.handle)
        .collect();
    assert_eq!(handles, ["kept"]);
}

#[test]
fn creation_refuses_bad_specs_unknown_volumes_and_taken_handles() {
    let host = Host::unsandboxed();
    let mut spec = process_spec("bad", "true");
    spec.mounts = vec![mount("in", "/etc")];
    let err = host.containers.create(spec).unwrap_err();
    assert!(
        matches!(&err, ContainerError::InvalidSpec { field, .. } if field == "mounts[0].path"),
        "{err}"
    );

    let mut spec = process_spec("no-volume", "true");
    spec.mounts = vec![mount("missing", "input")];
    let err = host.containers.create(spec).unwrap_err();
    assert!(matches!(&err, ContainerError::VolumeNotFound { volume, .. } if volume == "missing"));
    assert_eq!(host.containers.get("no-volume").unwrap(), None);

    host.containers
        .create(process_spec("taken", "true"))
        .unwrap();
    let err = host
        .containers
        .create(process_spec("taken", "true"))
        .unwrap_err();
    assert!(matches!(err, ContainerError::AlreadyExists { .. }));
    // Nothing half-made is left by the refusals.
    let entries: Vec<String> = fs::read_dir(host.containers.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // The runc and network state dirs and the disk reserve are the
        // manager's own.
        .filter(|n| !n.starts_with('.') && n != hangar_worker::disk::RESERVE_FILE)
        .collect();
    assert_eq!(entries, ["taken"]);
}

#[test]
fn a_memory_hog_under_a_32_mib_limit_is_reported_oom_killed_needs_root() {
    let host = Host::unsandboxed();
    let mut spec = process_spec("hog", HOG);
    spec.memory_limit_bytes = Some(32 * MIB);
    host.containers.create(spec).unwrap_or_else(|e| {
        panic!("this test needs root and a memory cgroup (run the tests as root): {e}")
    });
    let exit = host.wait_exited("hog").exit.unwrap();
    assert!(
        exit.oom_killed,
        "not reported as OOM: {exit:?}\nlog: {}",
        host.log("hog")
    );
    assert_eq!(exit.memory_limit_bytes, Some(32 * MIB));
    assert!(!exit.lost);
}

#[test]
fn a_task_with_cpu_shares_runs_in_a_cgroup_of_that_weight_needs_root() {
    let host = Host::unsandboxed();
    let gate = host.volume("gate");
    mkfifo(&gate.join("ready"));
    let mut spec = process_spec(
        "cpu",
        "cat /proc/self/cgroup > gate/cgroups; echo up > gate/ready; exec sleep 1000",
    );
    spec.mounts = vec![mount("gate", "gate")];
    spec.cpu_shares = Some(512);
    host.containers.create(spec).unwrap_or_else(|e| {
        panic!("this test needs root and a cpu cgroup (run the tests as root): {e}")
    });
    assert_eq!(read_fifo(&gate.join("ready")), "up\n");

    let (file, weight, path) = cpu_cgroup(&host, "cpu");
    assert_eq!(fs::read_to_string(&file).unwrap().trim(), weight);
    let cgroups = fs::read_to_string(gate.join("cgroups")).unwrap();
    assert!(
        in_cpu_cgroup(&cgroups, &path),
        "the task is not in {path}:\n{cgroups}"
    );

    host.containers.destroy("cpu").unwrap();
    assert!(!file.exists(), "{} outlived its container", file.display());
}

#[test]
fn a_task_without_cpu_shares_keeps_the_default_weight_needs_root() {
    let host = Host::unsandboxed();
    let mut spec = process_spec("no-cpu", "cat /proc/self/cgroup");
    spec.memory_limit_bytes = Some(32 * MIB);
    host.containers.create(spec).unwrap_or_else(|e| {
        panic!("this test needs root and a memory cgroup (run the tests as root): {e}")
    });
    assert_eq!(host.wait_exited("no-cpu").exit.unwrap().code, Some(0));
    // Its cgroup is the memory one only: the cpu line is the worker's own.
    let log = host.log("no-cpu");
    assert!(!log.contains(":cpu:/hangar/"), "{log}");
}

/// A worker without cgroups (none mounted where it looks) refuses a limit
/// it cannot apply, naming it, and leaves nothing behind; a container
/// asking for no limit still runs.
#[test]
fn limits_are_refused_where_there_is_no_cgroup_and_nothing_is_left() {
    let nothing = tempfile::tempdir().unwrap();
    let host = Host::with_cgroup_root(nothing.path());
    assert!(host.containers.cpu_limits_enforceable().is_err());
    let mut spec = process_spec("cpu", "true");
    spec.cpu_shares = Some(512);
    let err = host.containers.create(spec).unwrap_err();
    let ContainerError::Unsupported { reason } = &err else {
        panic!("expected unsupported, got {err:?}");
    };
    assert!(
        reason.contains("container_limits.cpu (512 shares) cannot be applied")
            && reason.contains("no memory cgroup"),
        "{reason}"
    );
    let mut spec = process_spec("memory", "true");
    spec.memory_limit_bytes = Some(32 * MIB);
    let err = host.containers.create(spec).unwrap_err().to_string();
    assert!(
        err.contains("memory_limit_bytes cannot be enforced"),
        "{err}"
    );
    assert_eq!(host.containers.handles().unwrap(), Vec::<String>::new());

    host.containers
        .create(process_spec("plain", "true"))
        .unwrap();
    assert_eq!(host.wait_exited("plain").exit.unwrap().code, Some(0));
}

/// A worker whose cgroups have no cpu controller refuses CPU shares (and
/// only them) saying so.
#[test]
fn cpu_shares_are_refused_where_the_cgroups_have_no_cpu_controller() {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("cgroup.controllers"), "memory pids\n").unwrap();
    let host = Host::with_cgroup_root(root.path());
    let why = host.containers.cpu_limits_enforceable().unwrap_err();
    assert!(why.contains("does not offer the cpu controller"), "{why}");
    let mut spec = process_spec("cpu", "true");
    spec.cpu_shares = Some(2048);
    let err = host.containers.create(spec).unwrap_err().to_string();
    assert!(
        err.contains("unsupported on this worker: container_limits.cpu (2048 shares)")
            && err.contains("does not offer the cpu controller"),
        "{err}"
    );
    assert_eq!(host.containers.handles().unwrap(), Vec::<String>::new());
}

#[test]
fn cpu_shares_out_of_the_kernel_s_range_are_an_invalid_spec() {
    let host = Host::unsandboxed();
    for shares in [0, 1, 262_145] {
        let mut spec = process_spec("cpu", "true");
        spec.cpu_shares = Some(shares);
        let err = host.containers.create(spec).unwrap_err();
        assert!(
            matches!(&err, ContainerError::InvalidSpec { field, reason }
                if field == "cpu_shares" && reason.contains("container_limits.cpu")),
            "{shares}: {err:?}"
        );
    }
}

#[test]
fn a_task_within_its_memory_limit_is_not_oom_killed_needs_root() {
    let host = Host::unsandboxed();
    let mut spec = process_spec(
        "small",
        "x=$(head -c 1000000 /dev/zero | tr '\\0' a); echo ${#x}",
    );
    spec.memory_limit_bytes = Some(32 * MIB);
    host.containers.create(spec).unwrap_or_else(|e| {
        panic!("this test needs root and a memory cgroup (run the tests as root): {e}")
    });
    let exit = host.wait_exited("small").exit.unwrap();
    assert_eq!((exit.code, exit.oom_killed), (Some(0), false));
    assert_eq!(host.log("small"), "1000000\n");
}
