//! The `sh` wrapper every container process runs under.
//!
//! It enters the working directory, runs the program (first moving an inner
//! shell into the container's cgroups and `exec`ing the program from there, so the
//! wrapper itself stays out of the cgroup and out of the OOM killer's way),
//! and when the program ends writes its status to `<dir>/exit` with a
//! rename. It does not depend on the worker process: a worker that dies or
//! restarts finds the exit on disk. The wrapper leads its own process group,
//! so one `killpg` reaches everything it started that did not leave.
//!
//! Paths are quoted into the script, not passed as arguments, so the
//! program's arguments are exactly `"$@"` and no shell variable of the
//! wrapper is set (and exported into the program) before the program runs.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::store::EXIT_FILE;

/// The wrapper's `$0` is this, a colon and the container dir: how a
/// restarted worker recognizes its wrapper in `/proc/<pid>/cmdline`.
const NAME: &str = "hangar-wrapper";

/// What to run and where.
pub(crate) struct Launch<'a> {
    /// The container's directory (the exit file goes there).
    pub dir: &'a Path,
    /// The working directory of the program.
    pub cwd: &'a Path,
    /// `cgroup.procs` of each cgroup to move the program into (the memory
    /// cgroup, and on cgroup v1 the cpu one).
    pub cgroup_procs: &'a [std::path::PathBuf],
    /// The program and its arguments.
    pub argv: Vec<OsString>,
    /// The program's whole environment: nothing of the worker's own
    /// (`HANGAR_WORKER_KEY`, ...) is passed on.
    pub env: Vec<(String, String)>,
    /// stdout and stderr (one open file description for both).
    pub log: File,
}

/// `'...'` with every `'` written as `'\''`: safe for any bytes but NUL.
fn sh_quote(s: &OsStr) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in s.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

fn marker(dir: &Path) -> OsString {
    let mut m = OsString::from(format!("{NAME}:"));
    m.push(dir.as_os_str());
    m
}

/// The script for `sh -c`.
pub(crate) fn script(dir: &Path, cwd: &Path, cgroup_procs: &[std::path::PathBuf]) -> OsString {
    let q = |p: &Path| sh_quote(p.as_os_str());
    let worker_path = OsStr::new(super::isolation::TASK_PATH);
    let mut s: Vec<u8> = Vec::new();
    s.extend_from_slice(b"if cd ");
    s.extend(q(cwd));
    s.extend_from_slice(b"; then\n");
    if cgroup_procs.is_empty() {
        s.extend_from_slice(b"  ( exec \"$@\" )\n");
    } else {
        // One inner shell per cgroup, each joining it and `exec`ing the
        // next (the same process, so the same `$$`), the last the program.
        s.extend_from_slice(b" ");
        for procs in cgroup_procs {
            s.extend_from_slice(
                b" /bin/sh -c 'echo $$ > \"$0\" || { echo \"hangar: cannot join the cgroup $0\" >&2; exit 125; }; exec \"$@\"' ",
            );
            s.extend(q(procs));
        }
        s.extend_from_slice(b" \"$@\"\n");
    }
    s.extend_from_slice(b"  st=$?\nelse\n  st=126\nfi\nPATH=");
    s.extend(sh_quote(worker_path));
    s.extend_from_slice(b"\nprintf '%s\\n' \"$st\" > ");
    let tmp = dir.join(format!("{EXIT_FILE}.tmp"));
    s.extend(q(&tmp));
    s.extend_from_slice(b" && mv -f ");
    s.extend(q(&tmp));
    s.push(b' ');
    s.extend(q(&dir.join(EXIT_FILE)));
    s.push(b'\n');
    OsString::from_vec(s)
}

/// Starts the wrapper in its own process group with exactly `launch.env`.
pub(crate) fn spawn(launch: Launch<'_>) -> std::io::Result<Child> {
    let stderr = launch.log.try_clone()?;
    let mut cmd = Command::new("/bin/sh");
    cmd.env_clear();
    cmd.arg("-c")
        .arg(script(launch.dir, launch.cwd, launch.cgroup_procs))
        .arg(marker(launch.dir))
        .args(&launch.argv)
        .envs(launch.env)
        .current_dir(launch.dir)
        .stdin(Stdio::null())
        .stdout(launch.log)
        .stderr(stderr)
        .process_group(0);
    cmd.spawn()
}

/// Whether `pid` is, right now, the live (not zombie) wrapper of `dir`.
pub(crate) fn is_wrapper_of(pid: u32, dir: &Path) -> bool {
    runs_as(pid, &marker(dir))
}

fn runs_as(pid: u32, want: &OsStr) -> bool {
    // A process in the middle of exec shows an empty command line for a
    // moment (the parent of a spawn is woken before the kernel has laid out
    // the new arguments); zombies and kernel threads show one for good.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        if !cmdline.is_empty() {
            // argv: /bin/sh -c <script> <marker> <program...>
            return cmdline.split(|b| *b == 0).nth(3) == Some(want.as_bytes());
        }
        let exec_in_progress =
            is_live(pid) && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok();
        if !exec_in_progress {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// State and process group from `/proc/<pid>/stat`.
fn stat_of(pid: u32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid pgrp ...`: the fields follow the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

fn is_running_state(state: &str) -> bool {
    !matches!(state, "Z" | "X")
}

/// Neither gone nor a zombie (state `Z`) or dead (`X`).
fn is_live(pid: u32) -> bool {
    stat_of(pid).is_some_and(|(state, _)| is_running_state(&state))
}

/// Whether any process of group `pgid` still runs (zombies waiting for
/// their reaper do not count).
pub(crate) fn group_has_live_members(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat_of)
        .any(|(state, pgrp)| pgrp == pgid && is_running_state(&state))
}

/// Looks through `/proc` for the wrapper of `dir` (for a container whose
/// pid file was never written).
pub(crate) fn find_wrapper(dir: &Path) -> Option<u32> {
    let want = marker(dir);
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| runs_as(*pid, &want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes_and_spaces() {
        let quoted = sh_quote(OsStr::new("it's a dir"));
        assert_eq!(quoted, b"'it'\\''s a dir'");
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(OsString::from_vec(
                [b"printf %s ".to_vec(), quoted].concat(),
            ))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"it's a dir");
    }

    #[test]
    fn the_script_runs_the_program_and_leaves_its_status_in_the_exit_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("odd 'name'");
        std::fs::create_dir(&d).unwrap();
        let log = File::create(d.join("log")).unwrap();
        let mut child = spawn(Launch {
            dir: &d,
            cwd: &d,
            cgroup_procs: &[],
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo \"$GREETING\"; exit 7".into(),
            ],
            env: vec![("GREETING".into(), "hello there".into())],
            log,
        })
        .unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(std::fs::read_to_string(d.join("exit")).unwrap(), "7\n");
        assert_eq!(
            std::fs::read_to_string(d.join("log")).unwrap(),
            "hello there\n"
        );
    }

    #[test]
    fn a_running_wrapper_is_recognized_by_its_dir_until_its_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut child = spawn(Launch {
            dir: d,
            cwd: d,
            cgroup_procs: &[],
            argv: vec!["sleep".into(), "1000".into()],
            env: vec![],
            log: File::create(d.join("log")).unwrap(),
        })
        .unwrap();
        let pid = child.id();
        /// Kills the group even when an assertion fails first.
        struct KillOnDrop(i32);
        impl Drop for KillOnDrop {
            fn drop(&mut self) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(self.0),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let group = KillOnDrop(pid as i32);
        assert!(is_wrapper_of(pid, d));
        assert!(!is_wrapper_of(pid, &d.join("other")));
        assert_eq!(find_wrapper(d), Some(pid));
        drop(group);
        child.wait().unwrap();
        assert!(!is_wrapper_of(pid, d));
        // Killed with the program, the wrapper wrote no exit.
        assert!(!d.join("exit").exists());
    }

    #[test]
    fn a_missing_program_is_status_127_and_a_missing_cwd_126() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |cwd: &Path| {
            let log = File::create(d.join("log")).unwrap();
            let mut child = spawn(Launch {
                dir: d,
                cwd,
                cgroup_procs: &[],
                argv: vec!["no-such-program-hangar".into()],
                env: vec![],
                log,
            })
            .unwrap();
            child.wait().unwrap();
            std::fs::read_to_string(d.join("exit")).unwrap()
        };
        assert_eq!(run(d), "127\n");
        assert_eq!(run(&d.join("missing")), "126\n");
    }
}
