//! `intercept` (fly's `hijack`) and `containers` end to end, against a
//! real web and worker: a command in a running task's container sees the
//! task's files, runs as the task's user in the task's sandbox (not the
//! host's), passes its exit status and stdin through; an interactive shell
//! through a pseudo-terminal driven from here, resized on SIGWINCH; and
//! nothing once the build is over.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{hangar, has, text, wait_for, Cluster, ADMIN};

/// A task that leaves a mark and its user's id in its working dir, says
/// so, and waits.
const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: work
    config:
      platform: linux
      run:
        path: sh
        args: [-c, "echo secret-of-the-task > marker; id -u > task-uid; echo ready; exec sleep 300"]
"#;

/// `f` until it answers, within `within`; the panic says its last error.
fn retry<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("timed out waiting for {what}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = c.cli(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}: {out}\n{err}");
    out
}

const SELECT: [&str; 6] = ["-j", "p/build", "-b", "1", "-s", "work"];

fn intercept(c: &Cluster, command: &[&str]) -> std::process::Output {
    let mut args = vec!["intercept"];
    args.extend(SELECT);
    args.push("--");
    args.extend(command);
    c.cli(&args)
}

#[test]
fn e2e_intercept_runs_in_the_tasks_container_as_the_task() {
    let c = Cluster::start();
    let _w = c.worker("icpt-w1");
    c.wait_until("the worker runs", |ws| has(ws, "icpt-w1", "running"));
    let file = c.dir.path().join("p.yml");
    std::fs::write(&file, PIPELINE).unwrap();
    ok(&c, &["sp", "-p", "p", "-c", file.to_str().unwrap(), "-n"]);
    ok(&c, &["up", "-p", "p"]);
    ok(&c, &["tj", "-j", "p/build"]);

    // The task has started and left its mark.
    let out = retry("the task's mark", Duration::from_secs(60), || {
        let o = intercept(&c, &["cat", "marker"]);
        let (out, err) = text(&o);
        if o.status.success() {
            Ok(out)
        } else {
            let listed = text(&c.cli(&["containers", "--json"]));
            Err(format!("{err} (containers: {} {})", listed.0, listed.1))
        }
    });
    assert_eq!(out, "secret-of-the-task\n");

    // `containers` (`cs`) lists it as fly does.
    let out = ok(&c, &["cs"]);
    let row = out
        .lines()
        .find(|l| l.contains("icpt-w1"))
        .unwrap_or_else(|| panic!("{out}"));
    for cell in ["p", "build", "task", "work", "created"] {
        assert!(row.split_whitespace().any(|w| w == cell), "{cell}: {row}");
    }

    // The task's user, not the worker's; the task's process tree, not the
    // host's (its pid 1 is the task's own program).
    let o = intercept(
        &c,
        &[
            "sh",
            "-c",
            "id -u; cat task-uid; cat /proc/1/cmdline | tr '\\0' ' '",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], lines[1],
        "the intercepted process runs as the task: {out}"
    );
    if nix::unistd::geteuid().is_root() {
        // A root worker sandboxes tasks: a user namespace and a PID
        // namespace of their own.
        assert_eq!(lines[2].trim(), "sleep 300", "pid 1 is the task's: {out}");
        let host_ns = std::fs::read_link("/proc/self/ns/user").unwrap();
        let o = intercept(&c, &["readlink", "/proc/self/ns/user"]);
        let (ns, _) = text(&o);
        assert_ne!(
            ns.trim(),
            host_ns.to_str().unwrap(),
            "not the host's user namespace"
        );
    }

    // The exit status comes back as the CLI's own; stdin goes in.
    let o = intercept(&c, &["sh", "-c", "echo to-stderr >&2; exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(text(&o).1, "to-stderr\n", "stderr stays stderr");
    let mut child = hangar()
        .args(["hijack"])
        .args(SELECT)
        .args(["--", "sh", "-c", "tr a-z A-Z > shouted; cat shouted"])
        .env("HANGAR_URL", &c.url)
        .env("HANGAR_TOKEN", ADMIN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"through stdin\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "THROUGH STDIN\n");
    let out = wait_for("the file in the task's dir", Duration::from_secs(5), || {
        let o = intercept(&c, &["cat", "shouted"]);
        o.status.success().then(|| text(&o).0)
    });
    assert_eq!(
        out, "THROUGH STDIN\n",
        "the session wrote in the task's own dir"
    );

    interactive_session(&c);

    // Several containers would match nothing wrong, but none matches this.
    let o = c.cli(&["intercept", "-j", "p/build", "-s", "nope", "--", "true"]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("no running or kept container matches"),
        "{}",
        text(&o).1
    );

    // Once the build is over its container is gone, and so is intercept.
    let list: serde_json::Value = serde_json::from_str(&ok(&c, &["containers", "--json"])).unwrap();
    let id = list[0]["build_id"].as_i64().unwrap().to_string();
    ok(&c, &["ab", "-b", &id]);
    wait_for("the container to go", Duration::from_secs(30), || {
        let o = intercept(&c, &["true"]);
        (!o.status.success()).then_some(())
    });
}

/// A shell on a pseudo-terminal made here: what is typed runs, the
/// terminal's size reaches the container's, a SIGWINCH resizes it, and
/// `exit 3` ends the CLI with 3.
fn interactive_session(c: &Cluster) {
    let size = nix::pty::Winsize {
        ws_row: 30,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut master = std::fs::File::from(pty.master);
    let mut child = hangar()
        .args(["i"])
        .args(SELECT)
        .args(["--", "sh"])
        .env("HANGAR_URL", &c.url)
        .env("HANGAR_TOKEN", ADMIN)
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let mut reader = master.try_clone().unwrap();
    let sink = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let wait_seen = |what: &str| {
        wait_for(what, Duration::from_secs(20), || {
            seen.lock().unwrap().contains(what).then_some(())
        })
    };
    // The arithmetic happens in the container's shell: the echo of what
    // was typed does not hold the answer.
    master.write_all(b"echo hi-$((40+2))\r").unwrap();
    wait_seen("hi-42");
    master.write_all(b"stty size; cat marker\r").unwrap();
    wait_seen("30 100");
    wait_seen("secret-of-the-task");
    // A resize: the terminal here, then the signal a terminal emulator's
    // resize sends its foreground process.
    let bigger = rustix::termios::Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&master, bigger).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGWINCH,
    )
    .unwrap();
    wait_for("the new size inside", Duration::from_secs(20), || {
        master.write_all(b"stty size\r").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        seen.lock().unwrap().contains("40 120").then_some(())
    });
    master.write_all(b"exit 3\r").unwrap();
    let status = wait_for("the CLI to end", Duration::from_secs(20), || {
        child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(3), "{}", seen.lock().unwrap());
}

/// A task that fails after leaving what a user would want to look at in
/// its output (its working dir itself is its private `/tmp`, which goes
/// with the program).
const FAILING: &str = r#"
jobs:
- name: flaky
  plan:
  - task: work
    config:
      platform: linux
      outputs: [{name: out}]
      run:
        path: sh
        args: [-c, "echo evidence-of-the-failure > out/marker; id -u > out/task-uid; exit 1"]
"#;

const KEPT: [&str; 6] = ["-j", "p/flaky", "-b", "1", "-s", "work"];

fn intercept_kept(c: &Cluster, command: &[&str]) -> std::process::Output {
    let mut args = vec!["intercept"];
    args.extend(KEPT);
    args.push("--");
    args.extend(command);
    c.cli(&args)
}

#[test]
fn e2e_a_failed_tasks_container_is_entered_after_the_build_and_collected_at_the_next() {
    let c = Cluster::start_with(&["--gc-interval", "1s"]);
    let _w = c.worker("kept-w1");
    c.wait_until("the worker runs", |ws| has(ws, "kept-w1", "running"));
    let file = c.dir.path().join("p.yml");
    std::fs::write(&file, FAILING).unwrap();
    ok(&c, &["sp", "-p", "p", "-c", file.to_str().unwrap(), "-n"]);
    ok(&c, &["up", "-p", "p"]);
    let o = c.cli(&["tj", "-j", "p/flaky", "-w"]);
    assert!(!o.status.success(), "the build fails: {}", text(&o).0);

    // The build is over; its failed task's container stays, listed as such.
    let out = ok(&c, &["cs"]);
    let row = out
        .lines()
        .find(|l| l.contains("kept-w1"))
        .unwrap_or_else(|| panic!("the failed task's container is listed: {out}"));
    assert!(row.contains("exited, kept for"), "{row}");
    let list: serde_json::Value = serde_json::from_str(&ok(&c, &["cs", "--json"])).unwrap();
    let first = list[0]["handle"].as_str().unwrap().to_string();

    // Entered after its program exited: its files, its user.
    let o = intercept_kept(&c, &["sh", "-c", "cat out/marker; id -u; cat out/task-uid"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "evidence-of-the-failure", "{out}");
    assert_eq!(lines[1], lines[2], "the session runs as the task: {out}");
    if nix::unistd::geteuid().is_root() {
        let host_ns = std::fs::read_link("/proc/self/ns/user").unwrap();
        let o = intercept_kept(&c, &["readlink", "/proc/self/ns/user"]);
        assert!(o.status.success(), "{}", text(&o).1);
        assert_ne!(text(&o).0.trim(), host_ns.to_str().unwrap(), "sandboxed");
    }
    // What one session leaves, the next finds; a status comes back.
    let o = intercept_kept(&c, &["sh", "-c", "echo looked > out/notes; exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o).1);
    assert_eq!(
        text(&intercept_kept(&c, &["cat", "out/notes"])).0,
        "looked\n"
    );

    // One session at a time in an exited container; the next once it ends.
    // The first says it is in before a second one is tried: started side
    // by side, either could be the one refused.
    let mut holder = hangar()
        .arg("intercept")
        .args(KEPT)
        .args(["--", "sh", "-c", "echo entered; exec sleep 120"])
        .env("HANGAR_URL", &c.url)
        .env("HANGAR_TOKEN", ADMIN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut first_line,
    )
    .unwrap();
    if first_line != "entered\n" {
        let mut said = String::new();
        let _ = holder.stderr.take().unwrap().read_to_string(&mut said);
        panic!("the first session did not get in: {first_line:?} {said}");
    }
    let o = intercept_kept(&c, &["true"]);
    let refused = text(&o).1;
    assert!(!o.status.success(), "a second session got in");
    assert!(refused.contains("one at a time"), "{refused}");
    assert!(refused.contains("another session"), "{refused}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    retry(
        "a session after the first ended",
        Duration::from_secs(30),
        || {
            let o = intercept_kept(&c, &["cat", "out/marker"]);
            o.status.success().then_some(()).ok_or_else(|| text(&o).1)
        },
    );

    // The job's next build starts: the kept container goes, on web and on
    // the worker; the new failure's is kept in its place.
    let o = c.cli(&["tj", "-j", "p/flaky", "-w"]);
    assert!(!o.status.success());
    wait_for(
        "the first build's container to go",
        Duration::from_secs(60),
        || {
            let list: serde_json::Value = serde_json::from_str(&ok(&c, &["cs", "--json"])).unwrap();
            let handles: Vec<&str> = list
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["handle"].as_str())
                .collect();
            (!handles.contains(&first.as_str()) && handles.len() == 1).then_some(())
        },
    );
    let o = intercept_kept(&c, &["true"]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("no running or kept container matches"),
        "{}",
        text(&o).1
    );
    let on_disk = |root: &std::path::Path| {
        walk(root, 4)
            .into_iter()
            .any(|p| p.file_name().is_some_and(|n| n == first.as_str()))
    };
    wait_for("the worker to destroy it", Duration::from_secs(60), || {
        (!on_disk(&c.work_dir("kept-w1"))).then_some(())
    });
    let o = c.cli(&[
        "intercept",
        "-j",
        "p/flaky",
        "-b",
        "2",
        "--",
        "cat",
        "out/marker",
    ]);
    assert_eq!(text(&o).0, "evidence-of-the-failure\n", "{}", text(&o).1);
}

/// Every path under `root`, `depth` levels down.
fn walk(root: &std::path::Path, depth: usize) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path, depth - 1));
        }
        out.push(path);
    }
    out
}
