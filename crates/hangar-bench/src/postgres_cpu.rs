//! PostgreSQL's own CPU while a benchmark runs, read from `/proc`: the
//! postmaster, every live child of it (backends, the writer, the WAL
//! writer, autovacuum) and the children it already reaped (its `cutime` and
//! `cstime`), so a backend that exits during the window still counts.
//!
//! The postmaster is either given (`--postgres-pid`) or found from the
//! database URL: for a host on loopback, the process holding the listening
//! TCP socket on the URL's port (`/proc/net/tcp` and `tcp6` give the
//! socket's inode, `/proc/<pid>/fd` the process that holds it). Anything
//! else is reported as not measured, never guessed.

use std::fs;

use crate::procfs;

/// The port of a `postgres://` URL whose host is on loopback; `None` for
/// other hosts (their CPU is not on this machine) and for URLs without a
/// host. A URL without a port means 5432.
pub fn loopback_port(url: &str) -> Option<u16> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))?;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        },
    };
    if !matches!(host, "127.0.0.1" | "localhost" | "::1") {
        return None;
    }
    match port {
        Some(p) => p.parse().ok(),
        None => Some(5432),
    }
}

/// Inodes of the sockets listening on `port` in the text of
/// `/proc/net/tcp` or `/proc/net/tcp6` (state `0A` is LISTEN).
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = f.get(1)?;
            let (_, hex_port) = local.rsplit_once(':')?;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(hex_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The process holding one of `inodes` open, by scanning `/proc/*/fd`
/// (another user's fds are readable only as root).
fn holder_of(inodes: &[u64]) -> Option<u32> {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    procfs::pids().find(|pid| {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        })
    })
}

/// A `postgres` process started with `-p <port>` on its command line
/// (readable for any user's processes).
fn started_on_port(port: u16) -> Option<u32> {
    let port = port.to_string();
    procfs::pids().find(|&pid| {
        procfs::cmdline(pid).is_some_and(|args| {
            is_postgres_program(&args) && flag_value(&args, "-p") == Some(port.as_str())
        })
    })
}

fn is_postgres_program(args: &[String]) -> bool {
    args.first()
        .is_some_and(|p| p == "postgres" || p.ends_with("/postgres"))
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.windows(2)
        .find(|w| w[0] == flag)
        .map(|w| w[1].as_str())
}

/// The postmaster behind `url`, or why it was not found.
pub fn find_postmaster(url: &str) -> Result<u32, String> {
    let port = loopback_port(url)
        .ok_or_else(|| "the database is not on loopback (give --postgres-pid)".to_string())?;
    postmaster_on_port(port)
}

/// The postmaster listening on `port` on this machine: the process that
/// holds the listening socket, or else the `postgres` started with
/// `-p <port>` (a cluster of another user, seen without root).
pub fn postmaster_on_port(port: u16) -> Result<u32, String> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return Err(format!("no socket listens on port {port}"));
    }
    let pid = holder_of(&inodes)
        .or_else(|| started_on_port(port))
        .ok_or_else(|| format!("no visible process holds the socket on port {port}"))?;
    check_postgres(pid)?;
    Ok(pid)
}

/// The data directory of a postmaster: its `-D`, or else its working
/// directory (PostgreSQL runs in its data directory).
pub fn data_dir_of(postmaster: u32) -> Option<std::path::PathBuf> {
    let args = procfs::cmdline(postmaster)?;
    match flag_value(&args, "-D") {
        Some(dir) => Some(dir.into()),
        None => fs::read_link(format!("/proc/{postmaster}/cwd")).ok(),
    }
}

/// Refuses a pid that is not a PostgreSQL server process.
pub fn check_postgres(pid: u32) -> Result<(), String> {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_err(|e| format!("process {pid}: {e}"))?;
    let comm = comm.trim();
    if comm == "postgres" || comm == "postmaster" {
        Ok(())
    } else {
        Err(format!("process {pid} is {comm:?}, not postgres"))
    }
}

/// The postmaster's CPU seconds so far, its reaped children's, and its
/// live children's.
pub fn tree_cpu_seconds(postmaster: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{postmaster}/stat")).ok()?;
    let own_and_reaped = parse_cpu_with_children(&stat)? as f64 / procfs::clock_ticks_per_second();
    let live: f64 = procfs::pids()
        .filter(|&pid| procfs::parent_of(pid) == Some(postmaster))
        .map(|pid| procfs::cpu_seconds(pid).unwrap_or(0.0))
        .sum();
    Some(own_and_reaped + live)
}

/// utime + stime + cutime + cstime (ticks) from `/proc/<pid>/stat`.
pub fn parse_cpu_with_children(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: utime, stime, cutime, cstime are fields 14-17.
    (11..=14).map(|i| f.get(i)?.parse::<u64>().ok()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_have_a_port_to_look_for() {
        let cases = [
            ("postgres://postgres@127.0.0.1:5433/db", Some(5433)),
            (
                "postgresql://u:p@localhost:6000/db?sslmode=disable",
                Some(6000),
            ),
            ("postgres://u@[::1]:7000/db", Some(7000)),
            ("postgres://u@127.0.0.1/db", Some(5432)),
            ("postgres://u@db.example.com:5432/db", None),
            ("postgres://u@10.0.0.2:5432/db", None),
            ("sqlite:///tmp/x.db", None),
            ("postgres://u@127.0.0.1:notaport/db", None),
        ];
        for (url, want) in cases {
            assert_eq!(loopback_port(url), want, "{url}");
        }
    }

    #[test]
    fn listening_sockets_are_found_by_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000   107        0 4242 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000   107        0 4343 1 0 100 0 0 10 0\n\
   2: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 8080), vec![4242]);
        assert_eq!(listening_inodes(table, 22), vec![4444]);
        assert!(listening_inodes(table, 5432).is_empty());
    }

    #[test]
    fn reaped_children_count_in_the_postmaster_cpu() {
        let stat = "99 (postgres) S 1 99 99 0 -1 4194560 100 0 0 0 250 50 700 300 20 0 4 0 100 0 0";
        assert_eq!(parse_cpu_with_children(stat), Some(1300));
        assert_eq!(parse_cpu_with_children("nonsense"), None);
    }

    #[test]
    fn a_process_that_is_not_postgres_is_refused() {
        let err = check_postgres(std::process::id()).unwrap_err();
        assert!(err.contains("not postgres"), "{err}");
    }

    /// The test cluster (`HANGAR_TEST_POSTGRES_URL`, which `scripts/test`
    /// always sets) is found by its port, with its data directory: what
    /// chaos restarts and the benchmarks measure. Without the variable the
    /// test fails, as every PostgreSQL test here does.
    #[test]
    fn the_test_clusters_postmaster_and_data_dir_are_found_by_port() {
        let url = std::env::var("HANGAR_TEST_POSTGRES_URL").expect(
            "HANGAR_TEST_POSTGRES_URL is not set: scripts/test starts a cluster and sets it",
        );
        let port = loopback_port(&url).expect("the test cluster is on loopback");
        let pid = postmaster_on_port(port).unwrap();
        assert!(tree_cpu_seconds(pid).is_some());
        let dir = data_dir_of(pid).expect("its data dir");
        assert!(dir.join("postmaster.opts").is_file(), "{}", dir.display());
        assert_eq!(crate::chaos::postgres::find_data_dir(port), Some(dir));
    }
}
