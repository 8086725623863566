//! A worker that is not root but has subordinate ids: its containers get a
//! user namespace whose root is the worker's own user and whose other ids
//! (`1..`) are the user's subordinate range of `/etc/subuid` and
//! `/etc/subgid` (runc maps them with `newuidmap` and `newgidmap`), and a
//! network namespace of their own that `slirp4netns` connects to the
//! outside, with the host's loopback out of reach.
//!
//! What such a worker cannot do without root: mount roots elsewhere (runc
//! reaches the worker's own files: root inside is the worker's user), move
//! files into a range of host ids, make cgroups it was not delegated (no
//! memory limit or CPU weight then, and an `RLIMIT_NPROC` for the pids
//! limit), or put containers on a bridge.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::sandbox::ID_RANGE;

/// The address slirp4netns answers DNS on, inside the container.
pub(crate) const SLIRP_DNS: &str = "10.0.2.3";

/// What a rootless worker maps its containers' ids to, and how it
/// networks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rootless {
    /// The worker's own uid and gid: root inside.
    pub uid: u32,
    pub gid: u32,
    /// The first subordinate id and how many (ids `1..=count` inside).
    pub sub_uid: (u32, u32),
    pub sub_gid: (u32, u32),
    /// slirp4netns, which gives each container outbound network; `None`:
    /// loopback only.
    pub slirp4netns: Option<PathBuf>,
    /// Bound at `/etc/resolv.conf` where slirp4netns networks the
    /// container: its DNS forwarder, [`SLIRP_DNS`].
    pub resolv_conf: Option<PathBuf>,
    /// The worker's own hard `RLIMIT_NPROC` (`None`: unlimited), which a
    /// container's cannot exceed.
    pub nproc_hard: Option<u64>,
}

impl Rootless {
    /// Finds the worker user's subordinate ids and `newuidmap` and
    /// `newgidmap`; the error names what is missing.
    pub(crate) fn detect() -> Result<Rootless, String> {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name);
        let read = |file: &str, id: u32| -> Result<(u32, u32), String> {
            let text = fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
            subordinate_range(&text, name.as_deref(), id).ok_or_else(|| {
                format!(
                    "{file} gives the worker's user ({}, {id}) no range of at least 65536 ids \
                     (add a line `{}:100000:65536`)",
                    name.as_deref().unwrap_or("no name"),
                    name.as_deref().unwrap_or("<user>")
                )
            })
        };
        let sub_uid = read("/etc/subuid", uid)?;
        let sub_gid = read("/etc/subgid", gid)?;
        for tool in ["newuidmap", "newgidmap"] {
            if find_tool(tool).is_none() {
                return Err(format!(
                    "no {tool} on PATH or in /usr/bin (install Debian's uidmap package)"
                ));
            }
        }
        Ok(Rootless {
            uid,
            gid,
            sub_uid,
            sub_gid,
            slirp4netns: find_tool("slirp4netns"),
            resolv_conf: None,
            nproc_hard: fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|text| nproc_hard_limit(&text)),
        })
    }

    /// The `RLIMIT_NPROC` that stands in for a pids limit where the worker
    /// has no cgroup: processes of one user inside one container (the
    /// kernel counts them per user namespace) stop at `limit`. A task
    /// that switches among users inside gets `limit` for each.
    pub(crate) fn nproc_rlimit(&self, limit: u64) -> Value {
        let limit = self.nproc_hard.map_or(limit, |hard| limit.min(hard));
        json!({"type": "RLIMIT_NPROC", "hard": limit, "soft": limit})
    }

    /// Writes the resolv.conf of slirp4netns's DNS forwarder into the work
    /// dir `work_dir` (readable by every user of a container).
    pub(crate) fn write_resolv_conf(&mut self, work_dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let path = work_dir.join("sandbox-resolv.conf");
        fs::write(&path, format!("nameserver {SLIRP_DNS}\n"))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        self.resolv_conf = Some(path);
        Ok(())
    }

    /// How many ids a container maps besides root.
    fn size(range: (u32, u32)) -> u32 {
        range.1.min(ID_RANGE - 1)
    }

    /// runc's `uidMappings` and `gidMappings`.
    pub(crate) fn mappings(&self) -> (Value, Value) {
        let map = |own: u32, sub: (u32, u32)| {
            json!([
                {"containerID": 0, "hostID": own, "size": 1},
                {"containerID": 1, "hostID": sub.0, "size": Self::size(sub)},
            ])
        };
        (map(self.uid, self.sub_uid), map(self.gid, self.sub_gid))
    }

    /// The OCI hook that connects a container's new network namespace to
    /// the outside before its program starts: slirp4netns (on
    /// `10.0.2.100/24`, DNS at [`SLIRP_DNS`]) with the host's loopback
    /// disabled, and a watcher that ends it when the container's first
    /// process is gone. The hook returns once slirp4netns said it is ready.
    pub(crate) fn network_hook(slirp4netns: &Path) -> Value {
        json!({
            "path": "/bin/sh",
            "args": ["sh", "-c", SLIRP_HOOK, "slirp-hook", slirp4netns],
            "timeout": 30,
        })
    }
}

/// Run by runc with the container's state on stdin (its `pid`).
/// slirp4netns's output goes nowhere: runc waits for the hook's stdout to
/// close. `--ready-fd` writes `1` once the tap device is up and configured.
const SLIRP_HOOK: &str = r#"set -eu
pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p')
[ -n "$pid" ] || { echo "no pid in the container's state" >&2; exit 1; }
d=$(mktemp -d)
mkfifo "$d/ready"
"$1" --configure --mtu=65520 --disable-host-loopback --ready-fd=3 "$pid" tap0 \
  3>"$d/ready" >/dev/null 2>&1 </dev/null &
slirp=$!
(while kill -0 "$pid" 2>/dev/null; do sleep 1; done; kill "$slirp" 2>/dev/null) \
  >/dev/null 2>&1 </dev/null &
ready=$(head -c1 "$d/ready" || true)
rm -rf "$d"
[ "$ready" = 1 ] || { echo "slirp4netns did not start" >&2; exit 1; }
"#;

/// The hard limit of `Max processes` in `/proc/self/limits`'s `text`;
/// `None` when unlimited or not there.
fn nproc_hard_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max processes"))?;
    line["Max processes".len()..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A program in `PATH` or the usual dirs.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The first range of `/etc/subuid`'s (or `subgid`'s) `text` for the user
/// `name` or id `id` that holds at least [`ID_RANGE`] - 1 ids.
pub(crate) fn subordinate_range(text: &str, name: Option<&str>, id: u32) -> Option<(u32, u32)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let mut parts = line.split(':');
            let (who, start, count) = (parts.next()?, parts.next()?, parts.next()?);
            let mine = Some(who) == name || who.parse::<u32>().ok() == Some(id);
            let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
            (mine && count >= ID_RANGE - 1).then_some((start, count))
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_range_is_found_by_name_or_id() {
        let text = "# comment\nother:100000:65536\nbot:165536:65536\n1001:300000:70000\n";
        assert_eq!(
            subordinate_range(text, Some("bot"), 1000),
            Some((165_536, 65_536))
        );
        assert_eq!(
            subordinate_range(text, Some("nobody-here"), 1001),
            Some((300_000, 70_000))
        );
        assert_eq!(subordinate_range(text, Some("x"), 7), None);
        // Too small a range is no range.
        assert_eq!(subordinate_range("bot:1:100\n", Some("bot"), 1), None);
    }

    #[test]
    fn root_inside_is_the_worker_and_the_rest_its_subordinate_ids() {
        let r = Rootless {
            uid: 1001,
            gid: 1002,
            sub_uid: (100_000, 65_536),
            sub_gid: (200_000, 1_000_000),
            slirp4netns: None,
            resolv_conf: None,
            nproc_hard: Some(100),
        };
        let (uids, gids) = r.mappings();
        assert_eq!(
            uids,
            json!([{"containerID": 0, "hostID": 1001, "size": 1},
                   {"containerID": 1, "hostID": 100_000, "size": 65_535}])
        );
        assert_eq!(gids[0]["hostID"], 1002);
        assert_eq!(gids[1]["hostID"], 200_000);
        assert_eq!(gids[1]["size"], 65_535);
    }

    #[test]
    fn the_nproc_limit_stays_within_the_workers_own() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max processes             96367                96367                processes\n";
        assert_eq!(nproc_hard_limit(limits), Some(96_367));
        assert_eq!(
            nproc_hard_limit("Max processes  unlimited  unlimited  processes\n"),
            None
        );
        let r = Rootless {
            uid: 1,
            gid: 1,
            sub_uid: (100_000, 65_536),
            sub_gid: (100_000, 65_536),
            slirp4netns: None,
            resolv_conf: None,
            nproc_hard: Some(100),
        };
        assert_eq!(r.nproc_rlimit(4096)["hard"], 100);
        assert_eq!(r.nproc_rlimit(64)["soft"], 64);
    }

    #[test]
    fn the_network_hook_disables_the_hosts_loopback() {
        let hook = Rootless::network_hook(Path::new("/usr/bin/slirp4netns"));
        assert_eq!(hook["path"], "/bin/sh");
        let script = hook["args"][2].as_str().unwrap();
        assert!(script.contains("--disable-host-loopback"), "{script}");
        assert_eq!(hook["args"][4], "/usr/bin/slirp4netns");
    }
}
