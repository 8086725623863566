//! The container manager with the runc runtime: a busybox rootfs volume,
//! mounted volumes, OOM kills seen through the cgroup even when the main
//! process exits 0, and destroy. Needs root, runc and busybox-static (the
//! tests fail, saying what to install, without them).

use std::fs;

use crate::containers_support::*;

#[test]
fn runc_runs_a_task_in_its_rootfs_volume_that_sees_its_mounted_volumes() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    let input = host.volume("in-1");
    fs::write(input.join("hello.txt"), "hello from the input\n").unwrap();
    let output = host.volume("out-1");
    let mut spec = runc_spec(
        "runc-task",
        "rootfs",
        "cat input/hello.txt; pwd; echo $GREETING; \
         (echo x > input/new) 2>/dev/null || echo input is read-only; \
         echo out > output/f",
    );
    spec.env.insert("GREETING".into(), "hi".into());
    spec.mounts = vec![mount("in-1", "input"), mount("out-1", "output")];
    spec.mounts[0].read_only = true;

    let created = host.containers.create(spec).unwrap();
    assert_eq!(created.runtime.to_string(), "runc");
    let exit = host.wait_exited("runc-task").exit.unwrap();

    let log = host.log("runc-task");
    assert_eq!(
        (exit.code, exit.oom_killed, exit.lost),
        (Some(0), false, false),
        "log: {log}"
    );
    assert_eq!(
        log,
        "hello from the input\n/tmp/build/work\nhi\ninput is read-only\n"
    );
    assert_eq!(fs::read_to_string(output.join("f")).unwrap(), "out\n");
    assert!(!input.join("new").exists());
}

#[test]
fn runc_reports_an_oom_kill_even_when_the_main_process_exits_0() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    // The hog is a child; the main process shrugs and exits 0. The hog
    // raises its own OOM score so that the kernel picks it and not the
    // main shell: left to the kernel's estimate, a loaded machine
    // sometimes had the main shell killed first.
    let mut spec = runc_spec(
        "runc-hog",
        "rootfs",
        r#"sh -c "echo 1000 > /proc/self/oom_score_adj; $HOG"; echo after; exit 0"#,
    );
    spec.env.insert("HOG".into(), HOG.into());
    spec.memory_limit_bytes = Some(32 * MIB);

    host.containers.create(spec).unwrap();
    let exit = host.wait_exited("runc-hog").exit.unwrap();

    let log = host.log("runc-hog");
    assert_eq!(exit.code, Some(0), "log: {log}");
    assert!(exit.oom_killed, "not reported as OOM: {exit:?}\nlog: {log}");
    assert_eq!(exit.memory_limit_bytes, Some(32 * MIB));
    // (busybox may also say "Killed", before or after.)
    assert!(log.lines().any(|l| l == "after"), "{log}");
    assert!(!log.contains("done"), "{log}");
}

#[test]
fn a_non_zero_exit_inside_runc_is_the_containers_exit_code() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    host.containers
        .create(runc_spec("runc-fails", "rootfs", "echo failing; exit 42"))
        .unwrap();
    let exit = host.wait_exited("runc-fails").exit.unwrap();
    assert_eq!(
        (exit.code, exit.signal, exit.oom_killed),
        (Some(42), None, false)
    );
    assert_eq!(host.log("runc-fails"), "failing\n");
}

#[test]
fn destroying_a_running_runc_container_kills_it_and_removes_its_state_and_cgroups() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    let gate = host.volume("gate");
    mkfifo(&gate.join("ready"));
    let mut spec = runc_spec(
        "runc-sleeper",
        "rootfs",
        "echo up > gate/ready; exec sleep 1000",
    );
    spec.mounts = vec![mount("gate", "gate")];
    spec.memory_limit_bytes = Some(64 * MIB);
    host.containers.create(spec).unwrap();
    assert_eq!(read_fifo(&gate.join("ready")), "up\n");
    assert_eq!(host.containers.active_count().unwrap(), 1);
    let runc_state = host.containers.root().join(".runc").join("runc-sleeper");
    assert!(runc_state.exists());
    assert!(!cgroups_named("runc-sleeper-").is_empty());

    host.containers.destroy("runc-sleeper").unwrap();

    assert_eq!(host.containers.get("runc-sleeper").unwrap(), None);
    assert!(!runc_state.exists(), "runc still knows the container");
    assert_eq!(cgroups_named("runc-sleeper-"), Vec::<String>::new());
    host.containers.destroy("runc-sleeper").unwrap();
}

#[test]
fn runc_gives_a_container_its_cpu_shares_in_the_bundle_and_its_cgroup() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    let gate = host.volume("gate");
    mkfifo(&gate.join("ready"));
    let mut spec = runc_spec(
        "runc-cpu",
        "rootfs",
        "cat /proc/self/cgroup > gate/cgroups; echo up > gate/ready; exec sleep 1000",
    );
    spec.mounts = vec![mount("gate", "gate")];
    spec.cpu_shares = Some(512);
    host.containers.create(spec).unwrap();
    assert_eq!(read_fifo(&gate.join("ready")), "up\n");

    let config = fs::read(host.container_dir("runc-cpu").join("bundle/config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(
        config["linux"]["resources"]["cpu"],
        serde_json::json!({"shares": 512})
    );
    // The weight that counts against the other containers is on our
    // cgroup; runc put the shares on its child of it as well.
    let (file, weight, path) = cpu_cgroup(&host, "runc-cpu");
    assert_eq!(fs::read_to_string(&file).unwrap().trim(), weight);
    let child = file
        .parent()
        .unwrap()
        .join("ctr")
        .join(file.file_name().unwrap());
    let child = fs::read_to_string(&child).unwrap();
    // On v2 a runc older than 1.3.2 converts shares with its linear
    // formula (512 -> 20); ours is the weight that counts.
    let runc_may_write = if weight == "512" {
        &["512"][..]
    } else {
        &["59", "20"]
    };
    assert!(
        runc_may_write.contains(&child.trim()),
        "runc's child: {child}"
    );
    let cgroups = fs::read_to_string(gate.join("cgroups")).unwrap();
    assert!(
        in_cpu_cgroup(&cgroups, &format!("{path}/ctr")),
        "the task is not in {path}/ctr:\n{cgroups}"
    );

    host.containers.destroy("runc-cpu").unwrap();
    assert_eq!(cgroups_named("runc-cpu-"), Vec::<String>::new());
}

/// Every cgroup dir under any hierarchy's `hangar/` whose name starts so.
fn cgroups_named(prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for hierarchy in fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let Ok(entries) = fs::read_dir(hierarchy.path().join("hangar")) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) && e.path().is_dir() {
                found.push(e.path().display().to_string());
            }
        }
    }
    found
}

#[test]
fn runc_honours_run_user_by_number_or_by_the_images_passwd_and_refuses_unknown_names() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    let rootfs = host.volumes.get("rootfs").unwrap().unwrap().path;
    fs::create_dir_all(rootfs.join("etc")).unwrap();
    fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0::/:/bin/sh\nbuilder:x:1234:1235::/:/bin/sh\n",
    )
    .unwrap();
    let out = host.volume("out");
    let cases = [
        (None, "0 0\n"),
        (Some("4321:4322"), "4321 4322\n"),
        (Some("builder"), "1234 1235\n"),
    ];
    for (i, (user, expected)) in cases.into_iter().enumerate() {
        let handle = format!("runc-user-{i}");
        let mut spec = runc_spec(
            &handle,
            "rootfs",
            "echo $(id -u) $(id -g); touch out/made-by-$(id -u)",
        );
        spec.user = user.map(Into::into);
        spec.mounts = vec![mount("out", "out")];
        host.containers.create(spec).unwrap();
        let exit = host.wait_exited(&handle).exit.unwrap();
        let log = host.log(&handle);
        assert_eq!((exit.code, log.as_str()), (Some(0), expected), "{user:?}");
        host.containers.destroy(&handle).unwrap();
    }
    // The mounted volume was the task user's to write in.
    for uid in ["0", "4321", "1234"] {
        assert!(out.join(format!("made-by-{uid}")).exists(), "{uid}");
    }
    let mut spec = runc_spec("runc-ghost", "rootfs", "true");
    spec.user = Some("ghost".into());
    let err = host.containers.create(spec).unwrap_err();
    assert!(err.to_string().contains("ghost"), "{err}");
    assert!(host.containers.get("runc-ghost").unwrap().is_none());
}

#[test]
fn a_runc_task_cannot_read_the_workers_environment_or_the_work_dir() {
    let host = Host::new();
    busybox_rootfs(&host, "rootfs");
    let me = std::process::id();
    let work = host.dir.path().display().to_string();
    let script = format!(
        "for p in /proc/{me}/environ {work}/volumes {work}/containers; do \
           if cat $p >/dev/null 2>&1 || ls $p >/dev/null 2>&1; then echo REACHED $p; else echo refused $p; fi; \
         done"
    );
    host.containers
        .create(runc_spec("runc-snoop", "rootfs", &script))
        .unwrap();
    let exit = host.wait_exited("runc-snoop").exit.unwrap();
    let log = host.log("runc-snoop");
    assert_eq!(exit.code, Some(0), "{log}");
    assert_eq!(log.matches("refused").count(), 3, "{log}");
    assert!(!log.contains("REACHED"), "{log}");
}
