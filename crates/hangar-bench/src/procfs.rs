//! What `/proc` says about a process: CPU time, resident memory, and which
//! processes live under a directory (for leak counting).

use std::fs;
use std::path::{Path, PathBuf};

/// Clock ticks per second, the unit of CPU times in `/proc/<pid>/stat`.
pub fn clock_ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map(|t| t as f64)
        .unwrap_or(100.0)
}

/// Every process visible in `/proc` now, by pid.
pub fn pids() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
}

/// A process's command line, one string per argument (`None`: gone, or
/// not readable).
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|c| *c == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

/// User plus system CPU seconds a process used so far (all its threads).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&text).map(|t| t as f64 / clock_ticks_per_second())
}

/// utime + stime from the text of `/proc/<pid>/stat`. The command name (in
/// parentheses) may contain spaces, so fields are counted after its `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14 and stime 15 (1-based).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A process's resident memory now and at its peak, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rss {
    pub now: u64,
    pub peak: u64,
}

pub fn rss(pid: u32) -> Option<Rss> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss(&text)
}

/// VmRSS and VmHWM (kB) from the text of `/proc/<pid>/status`.
pub fn parse_rss(status: &str) -> Option<Rss> {
    let field = |name: &str| -> Option<u64> {
        status.lines().find_map(|l| {
            let v = l.strip_prefix(name)?.trim().trim_end_matches("kB").trim();
            v.parse::<u64>().ok().map(|kb| kb * 1024)
        })
    };
    Some(Rss {
        now: field("VmRSS:")?,
        peak: field("VmHWM:").unwrap_or(0),
    })
}

/// A process found under a directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FoundProcess {
    pub pid: u32,
    pub cmdline: String,
    pub cwd: Option<PathBuf>,
}

/// The parent of a process, from `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| {
            let rest = t[t.rfind(')')? + 1..].to_string();
            rest.split_whitespace().next().map(|s| s == "Z" || s == "X")
        })
        .unwrap_or(true)
}

/// This process and its ancestors (which may name the same dirs in their
/// command lines: a shell, `timeout`, CI).
fn me_and_ancestors() -> Vec<u32> {
    let mut out = vec![std::process::id()];
    while let Some(parent) = out.last().copied().and_then(parent_of) {
        if parent == 0 || out.contains(&parent) {
            break;
        }
        out.push(parent);
    }
    out
}

/// Every process (other than this one and its ancestors) whose working
/// directory or command line names a path under one of `dirs`.
pub fn processes_under(dirs: &[PathBuf]) -> Vec<FoundProcess> {
    let skip = me_and_ancestors();
    let mut found = Vec::new();
    for pid in pids() {
        if skip.contains(&pid) {
            continue;
        }
        let cmdline = cmdline(pid).unwrap_or_default().join(" ");
        // A zombie is already gone but for its exit status.
        if is_zombie(pid) {
            continue;
        }
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok();
        let under = |p: &Path| dirs.iter().any(|d| p.starts_with(d));
        let by_cwd = cwd.as_deref().is_some_and(|c| {
            // A deleted cwd reads as "<path> (deleted)".
            let text = c.to_string_lossy();
            under(Path::new(text.trim_end_matches(" (deleted)")))
        });
        let by_cmdline = dirs
            .iter()
            .any(|d| cmdline.contains(d.to_string_lossy().as_ref()));
        if by_cwd || by_cmdline {
            found.push(FoundProcess { pid, cmdline, cwd });
        }
    }
    found.sort_by_key(|p| p.pid);
    found
}

/// The number of CPU cores (online).
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // a test waits for the child it made
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn resident_memory_is_read_in_bytes() {
        let status = "Name:\thangar\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            parse_rss(status),
            Some(Rss {
                now: 10240 * 1024,
                peak: 20480 * 1024
            })
        );
        assert_eq!(parse_rss("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_readable_in_proc() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_some());
        assert!(rss(pid).is_some_and(|r| r.now > 0));
        assert!(parent_of(pid).is_some());
    }

    #[test]
    fn a_child_working_under_a_dir_is_found_and_its_ancestors_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&root)
            .spawn()
            .unwrap();
        let found = processes_under(std::slice::from_ref(&root));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![child.id()]
        );
    }
}
