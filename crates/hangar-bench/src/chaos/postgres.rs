//! The PostgreSQL cluster behind a chaos run: a fresh database on it for the
//! run (with `createdb`), and a stop and start of the whole cluster (with
//! `pg_ctl`, as the `postgres` user when we are root, since PostgreSQL
//! refuses to run as root).

// Blocking helpers: the harness calls them under spawn_blocking (start,
// stop) or once before the fleet starts (create_database).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Where the server binaries are (`pg_ctl`, `createdb`).
pub fn find_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|e| e.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs.push(PathBuf::from("/usr/local/pgsql/bin"));
    dirs.into_iter().find(|d| d.join("pg_ctl").is_file())
}

/// Host, port, user and database of a `postgres://user@host:port/db` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgUrl {
    pub user: String,
    pub host: String,
    pub port: u16,
    pub database: String,
    /// Everything after the database name (`?sslmode=…`).
    pub query: String,
}

impl PgUrl {
    pub fn parse(url: &str) -> anyhow::Result<PgUrl> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .context("a PostgreSQL URL starts with postgres://")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = authority
            .rsplit_once('@')
            .unwrap_or(("postgres", authority));
        let user = userinfo.split(':').next().unwrap_or("postgres").to_string();
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().context("port")?),
            None => (hostport.to_string(), 5432),
        };
        let (database, query) = match path.split_once('?') {
            Some((d, q)) => (d.to_string(), format!("?{q}")),
            None => (path.to_string(), String::new()),
        };
        Ok(PgUrl {
            user,
            host,
            port,
            database: if database.is_empty() {
                "postgres".into()
            } else {
                database
            },
            query,
        })
    }

    /// The same server, another database.
    pub fn with_database(&self, original: &str, database: &str) -> String {
        let base = original.split('?').next().unwrap_or(original);
        let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
        let authority = rest.split('/').next().unwrap_or(rest);
        format!("{scheme}://{authority}/{database}{}", self.query)
    }
}

fn as_postgres(bin: &Path, args: &[&str]) -> Command {
    if nix::unistd::Uid::effective().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin).args(args);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(args);
        c
    }
}

fn run(mut cmd: Command, what: &str) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates `database` on the server of `url` and returns its URL.
pub fn create_database(url: &str, database: &str) -> anyhow::Result<String> {
    let pg = PgUrl::parse(url)?;
    let bin = find_bin_dir().context("PostgreSQL binaries (createdb) not found")?;
    let port = pg.port.to_string();
    let cmd = as_postgres(
        &bin.join("createdb"),
        &["-h", &pg.host, "-p", &port, "-U", &pg.user, database],
    );
    run(cmd, "createdb")?;
    Ok(pg.with_database(url, database))
}

/// The data directory of the server listening on `port` (its postmaster
/// found as the benchmarks find it, `postgres_cpu::postmaster_on_port`).
pub fn find_data_dir(port: u16) -> Option<PathBuf> {
    crate::postgres_cpu::postmaster_on_port(port)
        .ok()
        .and_then(crate::postgres_cpu::data_dir_of)
}

/// Stops and starts one cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl Cluster {
    pub fn stop(&self) -> anyhow::Result<()> {
        let data = self.data_dir.to_string_lossy().into_owned();
        run(
            as_postgres(
                &self.bin.join("pg_ctl"),
                &["-D", &data, "-m", "fast", "-w", "stop"],
            ),
            "pg_ctl stop",
        )
    }

    /// Stops a cluster the run started for itself at once, and removes it.
    pub fn discard(&self, dir: &Path) {
        let data = self.data_dir.to_string_lossy().into_owned();
        let _ = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &data, "-m", "immediate", "-w", "stop"],
        )
        .output();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Starts it with the options of its last start (`postmaster.opts`).
    pub fn start(&self) -> anyhow::Result<()> {
        let opts = std::fs::read_to_string(self.data_dir.join("postmaster.opts"))
            .context("read postmaster.opts")?;
        // The first word is the server binary; the rest are its options,
        // quoted the way the shell pg_ctl uses reads them.
        let options = opts
            .trim()
            .split_once(' ')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default();
        let data = self.data_dir.to_string_lossy().into_owned();
        let log = self.log.to_string_lossy().into_owned();
        if let Some(parent) = self.log.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // The log file must be writable by the server's user.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log);
        let _ = Command::new("chmod").args(["666", &log]).status();
        run(
            as_postgres(
                &self.bin.join("pg_ctl"),
                &["-D", &data, "-l", &log, "-w", "-o", &options, "start"],
            ),
            "pg_ctl start",
        )
    }
}

/// A cluster the run starts for itself in `dir` (as
/// `scripts/postgres-throwaway.sh` does): `initdb`, then a server on a free
/// loopback port, run as the `postgres` user when we are root. Returns it
/// and its admin URL; [`Cluster::discard`] stops it for good.
pub fn start_throwaway(dir: &Path) -> anyhow::Result<(Cluster, String)> {
    let bin = find_bin_dir().context("PostgreSQL server binaries (initdb, pg_ctl) not found")?;
    std::fs::create_dir_all(dir)?;
    if nix::unistd::Uid::effective().is_root() {
        if nix::unistd::User::from_name("postgres")?.is_none() {
            run(
                {
                    let mut c = Command::new("useradd");
                    c.args(["--system", "--no-create-home", "postgres"]);
                    c
                },
                "useradd postgres",
            )?;
        }
        run(
            {
                let mut c = Command::new("chown");
                c.arg("postgres").arg(dir);
                c
            },
            "chown the PostgreSQL dir",
        )?;
    }
    let data = dir.join("data");
    let data_text = data.to_string_lossy().into_owned();
    run(
        as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                &data_text,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        ),
        "initdb",
    )?;
    let port = crate::procs::free_port()?;
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400",
        dir.display()
    );
    let log = dir.join("server.log");
    let log_text = log.to_string_lossy().into_owned();
    run(
        as_postgres(
            &bin.join("pg_ctl"),
            &[
                "-D", &data_text, "-l", &log_text, "-w", "-o", &options, "start",
            ],
        ),
        "pg_ctl start",
    )?;
    let cluster = Cluster {
        bin,
        data_dir: data,
        log,
    };
    Ok((
        cluster,
        format!("postgres://postgres@127.0.0.1:{port}/postgres"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_into_their_parts() {
        let u = PgUrl::parse("postgres://postgres@127.0.0.1:5433/postgres").unwrap();
        assert_eq!(
            (
                u.user.as_str(),
                u.host.as_str(),
                u.port,
                u.database.as_str()
            ),
            ("postgres", "127.0.0.1", 5433, "postgres")
        );
        assert_eq!(
            u.with_database("postgres://postgres@127.0.0.1:5433/postgres", "chaos_1"),
            "postgres://postgres@127.0.0.1:5433/chaos_1"
        );
        let q = PgUrl::parse("postgresql://me:pw@db:5432/x?sslmode=disable").unwrap();
        assert_eq!((q.user.as_str(), q.database.as_str()), ("me", "x"));
        assert_eq!(
            q.with_database("postgresql://me:pw@db:5432/x?sslmode=disable", "y"),
            "postgresql://me:pw@db:5432/y?sslmode=disable"
        );
        assert!(PgUrl::parse("mysql://x").is_err());
    }
}
