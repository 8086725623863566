//! A network namespace per task container, so a task reaches the outside
//! world but not the worker's host.
//!
//! Three modes ([`NetworkMode`]):
//!
//! - `bridge`: the container gets its own network namespace with a veth
//!   `eth0` on a host bridge (`hangar0`), an address from the worker's
//!   subnet and a default route through the bridge, whose address is the
//!   host's. Outbound traffic is NATed (masqueraded) behind the host's
//!   address. The plugins of Debian's `containernetworking-plugins` do the
//!   plumbing: `bridge` (veth, bridge, gateway address, masquerade rules),
//!   `host-local` (addresses, leased in files under the state dir) and
//!   `loopback`.
//! - `none`: its own namespace with nothing but `lo`.
//! - `host`: the host's namespace, shared (no isolation at all).
//!
//! The host is unreachable from a bridged container: the gateway address is
//! the host, so hangar keeps two iptables chains of its own per bridge,
//! `HANGAR-IN-<bridge>` (jumped to from `INPUT` for packets in on the
//! bridge: anything but replies to connections the host opened is
//! rejected, whichever host address it is sent to) and
//! `HANGAR-FWD-<bridge>` (jumped to from `FORWARD`: out of the bridge to
//! elsewhere is accepted, even on hosts whose `FORWARD` policy drops, as
//! Docker sets it; in from elsewhere only as replies; from the bridge back
//! to the bridge never). Services on the host's 127.0.0.1 are out of reach
//! anyway: the namespace has its own loopback. IPv6 is switched off on the
//! bridge, so the host has no link-local address there either (containers
//! get IPv4 only).
//!
//! Containers cannot reach one another: each host-side veth is an
//! *isolated* bridge port (the kernel's bridge port isolation forwards
//! nothing between two isolated ports), and the `FORWARD` chain rejects
//! what would be routed from the bridge back onto it. Tasks of different
//! jobs share a worker; one should not be able to probe another.
//!
//! A namespace is a bind mount of `/proc/thread-self/ns/net`, made in a
//! thread that unshared its network namespace, on a file
//! `/run/hangar-network/netns/<owner>/<handle>`: what `ip netns add` does,
//! in a dir of the worker's own (the owner is a hash of its state dir),
//! outside the work dir so that a wiped work dir is not held busy by the
//! mounts. Host-local leases are in `/run/hangar-network/ipam/`, shared by
//! the workers of the host (they share the bridge), each lease and NAT rule
//! marked with its worker's owner prefix. Both outlive the worker process,
//! so a worker restarted on the same state dir finds (and
//! [`TaskNetwork::sweep`]s) the namespaces, leases and NAT rules of
//! containers that are gone.

// Plugins and iptables run as child processes the worker waits for; async
// callers go through spawn_blocking (see the module above).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::statfs::{statfs, NSFS_MAGIC};
use serde_json::{json, Value};

/// Where Debian's package (`/usr/lib/cni`) and upstream's tarball
/// (`/opt/cni/bin`) put the plugins, in the order they are looked for.
pub(crate) const PLUGIN_DIRS: &[&str] = &["/usr/lib/cni", "/opt/cni/bin"];
/// The container's interface on the bridge.
const IFNAME: &str = "eth0";
/// The CNI spec version of the configs; the installed plugins (1.1.1)
/// support 0.1.0 to 1.0.0.
const CNI_VERSION: &str = "1.0.0";
/// How long one plugin or iptables run may take before it is killed:
/// iptables waits for the xtables lock, and a worker thread must not wait
/// forever behind a stuck one.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the host's rules, once found whole, go unchecked.
/// A host whose firewall is reloaded (hangar's rules flushed with the rest)
/// leaves the bridge open to the host for at most this long.
const RULES_RECHECK: Duration = Duration::from_secs(5);
/// The handle `detect` attaches and detaches to prove the mode works.
const PROBE_HANDLE: &str = "hangar-network-probe";
/// host-local's `dataDir`, shared by every worker on the host: workers on
/// one host share the bridge, so they must lease from one pool. On tmpfs,
/// so leases go with a reboot, as the namespaces do.
const HOST_IPAM_DIR: &str = "/run/hangar-network/ipam";
/// Where the namespaces' mount points are, a dir per worker (its owner
/// prefix): outside the work dir, so a worker's dir can be wiped (a pod
/// recreated on an emptied volume, an operator's `rm -rf`) while
/// namespaces of its containers are still mounted; on tmpfs, as `ip netns`
/// keeps them in `/run/netns`.
const HOST_NETNS_DIR: &str = "/run/hangar-network/netns";
/// A PATH with the sbin directories: the bridge plugin runs `iptables` by
/// name, and a worker started from a user's shell may lack them.
const TOOL_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where resolv.conf files with the real upstream nameservers are, when
/// `/etc/resolv.conf` names a local stub (systemd-resolved's 127.0.0.53,
/// NetworkManager's dnsmasq on 127.0.0.1) that a container cannot reach.
const RESOLV_SOURCES: &[&str] = &[
    "/etc/resolv.conf",
    "/run/systemd/resolve/resolv.conf",
    "/run/NetworkManager/no-stub-resolv.conf",
];

/// How a task container is networked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkMode {
    /// Its own namespace on the worker's bridge, NATed outbound, the host
    /// unreachable.
    Bridge,
    /// Its own namespace with only `lo`: no network at all.
    None,
    /// The host's namespace: everything the host reaches, the host included.
    Host,
}

impl FromStr for NetworkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bridge" => Ok(Self::Bridge),
            "none" => Ok(Self::None),
            "host" => Ok(Self::Host),
            _ => Err(format!(
                "network mode must be bridge, none or host, not {s:?}"
            )),
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bridge => "bridge",
            Self::None => "none",
            Self::Host => "host",
        })
    }
}

/// An IPv4 network, `10.223.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Subnet {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Subnet {
    fn parse(s: &str) -> Result<Subnet, String> {
        let bad = |why: &str| format!("subnet {s:?}: {why}");
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| bad("not an IPv4 network like 10.223.0.0/16"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| bad("not an IPv4 network like 10.223.0.0/16"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| bad("the prefix length is not a number"))?;
        // Below /8 it would swallow whole swaths of the internet; above
        // /29 too few addresses remain beside the gateway for containers.
        if !(8..=29).contains(&prefix) {
            return Err(bad("the prefix length must be 8 to 29"));
        }
        let net = Subnet { addr, prefix };
        if net.network() != addr {
            return Err(bad(&format!(
                "not a network address (host bits set): did you mean {}/{prefix}?",
                net.network()
            )));
        }
        Ok(net)
    }

    fn mask(&self) -> u32 {
        mask(self.prefix)
    }

    fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    /// Whether two networks share any address: one contains the other.
    fn overlaps(&self, other: &Subnet) -> bool {
        let m = self.mask() & other.mask();
        u32::from(self.addr) & m == u32::from(other.addr) & m
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// The network of task containers on this worker: the mode, and for
/// `bridge` where the plugins are and what they are given.
#[derive(Clone, Debug)]
pub(crate) struct TaskNetwork {
    mode: NetworkMode,
    state_dir: PathBuf,
    /// `bridge` only.
    subnet: Option<Subnet>,
    bridge: String,
    /// The directory with the plugins; empty for `host`.
    cni_path: PathBuf,
    /// host-local's `dataDir` (shared by the workers of a host).
    ipam_dir: PathBuf,
    /// What this worker's CNI container ids start with (from its state
    /// dir), so that leases and NAT rules of other workers on the same
    /// bridge are never taken for leftovers of this one.
    owner: String,
    /// Held while the host's iptables rules are checked and repaired, so
    /// two attaches do not insert the same jump twice; when they were last
    /// found whole.
    host_rules: Arc<Mutex<Option<Instant>>>,
}

impl TaskNetwork {
    /// Finds out once, at worker start, whether `mode` works here and
    /// prepares the host for it: for `bridge` and `none` the plugins must be
    /// in `/usr/lib/cni` or `/opt/cni/bin` and the worker must be able to
    /// make namespaces (root); for `bridge` the subnet must not overlap a
    /// route of the host, and iptables must work (the host's rules are
    /// installed here). Then one probe container is attached and detached,
    /// so what fails fails now, with its reason, not in a task.
    ///
    /// `state_dir` is worker-private: it holds `resolv.conf`, the
    /// containers' DNS config, and names the worker's namespaces and leases
    /// (see the module's doc). `subnet` (`10.223.0.0/16`) and `bridge` (`hangar0`) are
    /// ignored for `host` and `none`.
    pub(crate) fn detect(
        mode: NetworkMode,
        state_dir: &Path,
        subnet: &str,
        bridge: &str,
    ) -> Result<TaskNetwork, String> {
        let dirs: Vec<PathBuf> = PLUGIN_DIRS.iter().map(PathBuf::from).collect();
        Self::detect_with(mode, state_dir, subnet, bridge, &dirs)
    }

    /// [`Self::detect`] with the plugin directories to look in.
    fn detect_with(
        mode: NetworkMode,
        state_dir: &Path,
        subnet: &str,
        bridge: &str,
        plugin_dirs: &[PathBuf],
    ) -> Result<TaskNetwork, String> {
        let fail = |e: String| format!("network mode {mode}: {e}");
        let mut net = TaskNetwork {
            mode,
            state_dir: state_dir.to_path_buf(),
            subnet: None,
            bridge: String::new(),
            cni_path: PathBuf::new(),
            ipam_dir: PathBuf::from(HOST_IPAM_DIR),
            owner: owner_of(state_dir),
            host_rules: Arc::new(Mutex::new(None)),
        };
        let plugins: &[&str] = match mode {
            NetworkMode::Host => return Ok(net),
            NetworkMode::None => &["loopback"],
            NetworkMode::Bridge => {
                net.subnet = Some(Subnet::parse(subnet).map_err(fail)?);
                validate_bridge_name(bridge).map_err(fail)?;
                net.bridge = bridge.to_string();
                &["bridge", "host-local", "loopback"]
            }
        };
        net.cni_path = find_plugins(plugin_dirs, plugins).map_err(fail)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(net.netns_dir())
            .map_err(|e| fail(format!("creating {}: {e}", net.netns_dir().display())))?;
        if let (NetworkMode::Bridge, Some(subnet)) = (mode, net.subnet) {
            let routes = fs::read_to_string("/proc/net/route")
                .map_err(|e| fail(format!("reading /proc/net/route: {e}")))?;
            if let Some(route) = route_conflict(&routes, &subnet, bridge) {
                return Err(fail(format!(
                    "subnet {subnet} overlaps the host's route to {route}: \
                     containers could not reach those addresses; pick another subnet"
                )));
            }
            // The bridge plugin turns forwarding on as well (isGateway);
            // doing it here makes a read-only /proc/sys fail at start.
            fs::write("/proc/sys/net/ipv4/ip_forward", "1")
                .map_err(|e| fail(format!("turning on net.ipv4.ip_forward: {e}")))?;
            net.ensure_host_rules().map_err(fail)?;
        }
        net.attach(PROBE_HANDLE)
            .map_err(|e| fail(format!("attaching a probe container: {e}")))?;
        net.detach(PROBE_HANDLE);
        Ok(net)
    }

    pub(crate) fn mode(&self) -> NetworkMode {
        self.mode
    }

    /// Makes the network namespace of container `handle` and returns its
    /// path, for the OCI config's `linux.namespaces` entry
    /// `{"type": "network", "path": ...}`; `None` for `host` (the container
    /// shares the host's). `none`: only `lo`, up. `bridge`: also `eth0`
    /// with an address from the subnet and a default route via the bridge.
    ///
    /// Leftovers of an earlier attach under the same handle (a crashed
    /// worker, a retried create) are detached first. On failure nothing of
    /// this attach remains.
    pub(crate) fn attach(&self, handle: &str) -> Result<Option<PathBuf>, String> {
        if self.mode == NetworkMode::Host {
            return Ok(None);
        }
        hangar_volumes::validate_handle(handle).map_err(|e| e.to_string())?;
        let ns = self.netns_path(handle);
        let leased =
            self.mode == NetworkMode::Bridge && self.leases().iter().any(|(_, id)| id == handle);
        if leased || fs::symlink_metadata(&ns).is_ok() {
            self.detach(handle);
        }
        create_netns(&ns)?;
        let plumbed = (|| {
            self.run_plugin("ADD", handle, Some(&ns), &loopback_config())?;
            if let Some(subnet) = self.subnet {
                // Checked on every attach: a firewall reload (or an admin's
                // `iptables -F`) may have dropped them since the start, and
                // without them the host is open to containers.
                self.ensure_host_rules()?;
                let config = bridge_config(&self.bridge, &subnet, &self.ipam_dir());
                let result = self.run_plugin("ADD", handle, Some(&ns), &config)?;
                self.isolate_port(&result)?;
                self.bridge_without_ipv6()?;
            }
            Ok::<_, String>(())
        })();
        match plumbed {
            Ok(()) => Ok(Some(ns)),
            Err(e) => {
                self.detach(handle);
                Err(format!("network of container {handle:?}: {e}"))
            }
        }
    }

    /// Undoes [`Self::attach`]: the bridge plugin's DEL (veth, lease, NAT
    /// rules), then the namespace. Idempotent: fine when nothing, or only
    /// part, exists. Failures are logged, not returned: a container is
    /// removed regardless, and [`Self::sweep`] catches what is left.
    pub(crate) fn detach(&self, handle: &str) {
        if self.mode == NetworkMode::Host || hangar_volumes::validate_handle(handle).is_err() {
            return;
        }
        let ns = self.netns_path(handle);
        if let Some(subnet) = self.subnet {
            // Without a live namespace (after a reboot the file is a plain
            // empty file) the plugin only releases the lease.
            let live = is_netns(&ns);
            let config = bridge_config(&self.bridge, &subnet, &self.ipam_dir());
            if let Err(e) = self.run_plugin("DEL", handle, live.then_some(ns.as_path()), &config) {
                tracing::warn!(handle, error = %e, "releasing a container's network");
            }
        }
        // The loopback plugin's DEL would only take `lo` down: the
        // namespace goes away with it.
        remove_netns(&ns);
    }

    /// Removes what containers not in `live` left behind (a worker that
    /// crashed or was killed between attach and detach): their
    /// namespaces, leases and NAT rules.
    pub(crate) fn sweep(&self, live: &BTreeSet<String>) {
        if self.mode == NetworkMode::Host {
            return;
        }
        let mut dead = BTreeSet::new();
        if let Ok(entries) = fs::read_dir(self.netns_dir()) {
            for e in entries.flatten() {
                if let Some(name) = e.file_name().to_str() {
                    dead.insert(name.to_string());
                }
            }
        }
        for (_, id) in self.leases() {
            dead.insert(id);
        }
        dead.retain(|h| !live.contains(h));
        for handle in &dead {
            tracing::info!(handle, "removing the network of a container that is gone");
            self.detach(handle);
        }
        if self.mode == NetworkMode::Bridge {
            // DEL removes a container's NAT rules only while its `eth0`
            // exists (the plugin learns the address from it): rules of a
            // namespace that vanished first are found by their comment.
            let dead = |id: &str| self.own_handle(id).is_some_and(|h| !live.contains(h));
            if let Err(e) = self.remove_nat_rules(dead) {
                tracing::warn!(error = %e, "removing NAT rules of containers that are gone");
            }
        }
    }

    /// A file to bind-mount (read-only) at `/etc/resolv.conf` in a
    /// container, or `None` to leave the image's own:
    ///
    /// - `bridge`: the host's `/etc/resolv.conf` when its nameservers are
    ///   reachable from a container, that is IPv4 (containers get no IPv6),
    ///   not loopback and not an address of the host itself (the host is
    ///   unreachable); unreachable ones are left out. When none remains
    ///   (systemd-resolved's 127.0.0.53, a dnsmasq on 127.0.0.1), the
    ///   upstream servers those stubs forward to, from
    ///   `/run/systemd/resolve/resolv.conf` or NetworkManager's
    ///   `/run/NetworkManager/no-stub-resolv.conf`, filtered the same way.
    ///   Else `None`.
    /// - `host`: the host's file as it is (loopback stubs are reachable in
    ///   the host's namespace).
    /// - `none`: `None`: there is no network to resolve names on.
    ///
    /// The file is a copy in the state dir, rewritten when the host's
    /// changes (a container keeps the copy it was started with): never the
    /// host's own file, which a writable mount would let a task change.
    pub(crate) fn resolv_conf(&self) -> Option<PathBuf> {
        let content = match self.mode {
            NetworkMode::None => return None,
            NetworkMode::Host => fs::read_to_string(RESOLV_SOURCES[0]).ok()?,
            NetworkMode::Bridge => {
                let sources: Vec<&Path> = RESOLV_SOURCES.iter().map(Path::new).collect();
                resolv_from(&sources, |ip| !is_host_address(ip))?
            }
        };
        let path = self.state_dir.join("resolv.conf");
        match write_if_changed(&path, &content) {
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "writing the containers' resolv.conf");
                None
            }
        }
    }

    fn netns_dir(&self) -> PathBuf {
        Path::new(HOST_NETNS_DIR).join(self.owner.trim_end_matches('.'))
    }

    fn netns_path(&self, handle: &str) -> PathBuf {
        self.netns_dir().join(handle)
    }

    /// host-local's `dataDir`; it keeps its leases in `<dataDir>/<network
    /// name>/`, and the network is named after the bridge.
    fn ipam_dir(&self) -> PathBuf {
        self.ipam_dir.clone()
    }

    /// The CNI container id of container `handle`: the worker's owner
    /// prefix and the handle.
    fn cni_id(&self, handle: &str) -> String {
        format!("{}{handle}", self.owner)
    }

    /// The handle of a CNI container id of this worker's; `None` for
    /// another worker's.
    fn own_handle<'a>(&self, id: &'a str) -> Option<&'a str> {
        id.strip_prefix(&self.owner)
    }

    /// This worker's host-local leases: (address, container handle) from
    /// its files, named after the address and holding `<id>\r\n<ifname>`.
    fn leases(&self) -> Vec<(IpAddr, String)> {
        let Ok(entries) = fs::read_dir(self.ipam_dir().join(&self.bridge)) else {
            return vec![];
        };
        let mut out = vec![];
        for e in entries.flatten() {
            let Some(ip) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue; // its lock and last_reserved_ip files
            };
            if let Ok(text) = fs::read_to_string(e.path()) {
                let id = text.lines().next().map(str::trim).unwrap_or_default();
                if let Some(handle) = self.own_handle(id).filter(|h| !h.is_empty()) {
                    out.push((ip, handle.to_string()));
                }
            }
        }
        out
    }

    /// Runs a CNI plugin (`config["type"]`) with the CNI environment and
    /// `config` on stdin; its result, for ADD.
    fn run_plugin(
        &self,
        command: &str,
        handle: &str,
        netns: Option<&Path>,
        config: &Value,
    ) -> Result<Value, String> {
        let plugin = config["type"].as_str().unwrap_or_default();
        let mut cmd = Command::new(self.cni_path.join(plugin));
        cmd.env_clear()
            .env("PATH", TOOL_PATH)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", self.cni_id(handle))
            .env("CNI_NETNS", netns.map(Path::as_os_str).unwrap_or_default())
            .env("CNI_IFNAME", IFNAME)
            .env("CNI_PATH", &self.cni_path);
        let out = run(cmd, config.to_string().as_bytes())?;
        if !out.status.success() {
            return Err(format!(
                "CNI {plugin} {command}: {}",
                plugin_error(&out.stdout, &out.stderr, out.status)
            ));
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null); // DEL prints nothing
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("CNI {plugin} {command}: its result is not JSON: {e}"))
    }

    /// Makes the container's host-side veth an isolated bridge port: the
    /// bridge then forwards nothing between it and another isolated port
    /// (every other container), while the host is still reached (and
    /// filtered by the INPUT chain).
    fn isolate_port(&self, result: &Value) -> Result<(), String> {
        let veth = host_veth(result, &self.bridge).ok_or_else(|| {
            format!("the bridge plugin's result names no host-side veth: {result}")
        })?;
        let knob = Path::new("/sys/class/net")
            .join(veth)
            .join("brport/isolated");
        fs::write(&knob, "1").map_err(|e| {
            format!(
                "isolating bridge port {veth} ({}): {e} (bridge port isolation needs Linux 4.18)",
                knob.display()
            )
        })
    }

    /// Switches IPv6 off on the bridge: containers get IPv4 only, and the
    /// host must have no link-local address there they could connect to.
    /// (The bridge exists from the first ADD on, before any container
    /// process runs.)
    fn bridge_without_ipv6(&self) -> Result<(), String> {
        let knob = PathBuf::from(format!(
            "/proc/sys/net/ipv6/conf/{}/disable_ipv6",
            self.bridge
        ));
        match fs::read_to_string(&knob) {
            Ok(v) if v.trim() == "1" => Ok(()),
            Ok(_) => fs::write(&knob, "1")
                .map_err(|e| format!("switching off IPv6 on {}: {e}", self.bridge)),
            // A kernel without IPv6 (or booted with ipv6.disable=1).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("reading {}: {e}", knob.display())),
        }
    }

    /// Checks the host's iptables rules for the bridge and puts back what
    /// is missing, at most once every [`RULES_RECHECK`]: on a host with
    /// thousands of rules (a Kubernetes node's) listing them on every
    /// container start would cost more than the start.
    fn ensure_host_rules(&self) -> Result<(), String> {
        let mut checked = self.host_rules.lock().unwrap_or_else(|e| e.into_inner());
        if checked.is_some_and(|at| at.elapsed() < RULES_RECHECK) {
            return Ok(());
        }
        self.repair_host_rules()?;
        *checked = Some(Instant::now());
        Ok(())
    }

    /// One check and repair of the rules: `iptables -S` of the filter
    /// table and of nat `POSTROUTING`.
    fn repair_host_rules(&self) -> Result<(), String> {
        let rules = match self.subnet {
            Some(subnet) => HostRules::with_subnet(&self.bridge, subnet),
            None => HostRules::new(&self.bridge),
        };
        if let Some(spec) = rules.masquerade() {
            let listing = iptables(&["-t", "nat", "-S", "POSTROUTING"])?;
            let line = format!("-A POSTROUTING {}", spec.join(" "));
            if !listing.lines().any(|l| l == line) {
                let mut args = vec!["-t", "nat", "-A", "POSTROUTING"];
                args.extend(spec.iter().map(String::as_str));
                iptables(&args)?;
            }
        }
        let listing = iptables(&["-t", "filter", "-S"])?;
        let (chains_ok, missing_jumps) = rules.check(&listing);
        if !chains_ok {
            // One atomic commit: a declared chain is flushed and refilled,
            // so the bridge is never left without its rules.
            let out = run(
                iptables_command("iptables-restore", &["--noflush"]),
                rules.restore().as_bytes(),
            )?;
            if !out.status.success() {
                return Err(format!(
                    "iptables-restore of hangar's chains: {}",
                    tool_error(&out.stderr, out.status)
                ));
            }
        }
        for (chain, spec) in missing_jumps {
            // First: the host's own ACCEPT rules must not let containers
            // in before hangar's chain is asked.
            let mut args = vec!["-t", "filter", "-I", chain, "1"];
            args.extend(spec.iter().map(String::as_str));
            iptables(&args)?;
        }
        Ok(())
    }

    /// Deletes the NAT rules (and their chains) that the bridge plugin made
    /// for containers `dead(id)` says are gone.
    fn remove_nat_rules(&self, dead: impl Fn(&str) -> bool) -> Result<(), String> {
        let listing = iptables(&["-t", "nat", "-S", "POSTROUTING"])?;
        for rule in nat_rules(&listing, &self.bridge) {
            if !dead(&rule.id) {
                continue;
            }
            let mut args = vec!["-t", "nat", "-D", "POSTROUTING"];
            args.extend(rule.spec.iter().map(String::as_str));
            iptables(&args)?;
            // The chain may be shared by several rules of the same id
            // (one per address); the last -D leaves it empty.
            if iptables(&["-t", "nat", "-F", &rule.chain]).is_ok() {
                let _ = iptables(&["-t", "nat", "-X", &rule.chain]);
            }
        }
        Ok(())
    }

    /// Removes the host's rules for the bridge (the jumps and the chains).
    /// The worker keeps them (they guard containers that outlive it);
    /// tests leave the host as they found it.
    #[cfg(test)]
    fn remove_host_rules(&self) {
        let rules = match self.subnet {
            Some(subnet) => HostRules::with_subnet(&self.bridge, subnet),
            None => HostRules::new(&self.bridge),
        };
        if let Some(spec) = rules.masquerade() {
            let mut args = vec!["-t", "nat", "-D", "POSTROUTING"];
            args.extend(spec.iter().map(String::as_str));
            while iptables(&args).is_ok() {}
        }
        for (chain, spec) in rules.jumps() {
            let mut args = vec!["-t", "filter", "-D", chain];
            args.extend(spec.iter().map(String::as_str));
            while iptables(&args).is_ok() {}
        }
        for chain in [&rules.input, &rules.forward] {
            let _ = iptables(&["-t", "filter", "-F", chain]);
            let _ = iptables(&["-t", "filter", "-X", chain]);
        }
    }
}

/// A bridge name: what Linux takes as an interface name (at most 15
/// bytes), kept to characters iptables chain names and paths take as is.
fn validate_bridge_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if name.is_empty() || name.len() > 15 || !ok_chars {
        return Err(format!(
            "bridge name {name:?}: must be 1 to 15 letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

/// The first of `dirs` with all of `plugins` as executables.
fn find_plugins(dirs: &[PathBuf], plugins: &[&str]) -> Result<PathBuf, String> {
    let executable = |p: PathBuf| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    dirs.iter()
        .find(|d| plugins.iter().all(|p| executable(d.join(p))))
        .cloned()
        .ok_or_else(|| {
            let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!(
                "no CNI plugins: none of {} has {} (install containernetworking-plugins)",
                dirs.join(", "),
                plugins.join(", ")
            )
        })
}

/// The first route of the host (from `/proc/net/route`) whose network
/// overlaps `subnet`, as `network/prefix on iface`; default routes and
/// routes on the bridge itself (from an earlier run) do not count.
fn route_conflict(routes: &str, subnet: &Subnet, bridge: &str) -> Option<String> {
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ...; the
    // addresses are the kernel's u32 in hex, in the machine's byte order.
    let addr = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|v| Ipv4Addr::from(v.to_ne_bytes()))
    };
    routes.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (iface, dst, mask) = (*f.first()?, addr(f.get(1)?)?, addr(f.get(7)?)?);
        let prefix = u32::from(mask).count_ones() as u8;
        if iface == bridge || prefix == 0 {
            return None;
        }
        let route = Subnet { addr: dst, prefix };
        route
            .overlaps(subnet)
            .then(|| format!("{dst}/{prefix} on {iface}"))
    })
}

/// The prefix of a worker's CNI container ids: 8 hex digits of a hash of
/// its state dir, and a dot (handles never hold one first).
fn owner_of(state_dir: &Path) -> String {
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut hash: u32 = 0x811c_9dc5;
    for b in state_dir.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}.")
}

/// The bridge plugin's config: the network is named after the bridge, so
/// its leases (`<ipam_dir>/<bridge>/`) and NAT rule comments are its own.
fn bridge_config(bridge: &str, subnet: &Subnet, ipam_dir: &Path) -> Value {
    json!({
        "cniVersion": CNI_VERSION,
        "name": bridge,
        "type": "bridge",
        "bridge": bridge,
        // The bridge gets the subnet's first address and is the
        // containers' gateway.
        "isGateway": true,
        // Outbound traffic leaves with the host's address through one rule
        // for the whole subnet (`HostRules`), not one chain per container:
        // the plugin's own ipMasq costs several iptables runs on each
        // container's start and end.
        "ipMasq": false,
        // A container's own packets are not reflected back to it.
        "hairpinMode": false,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet.to_string()}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": ipam_dir,
        },
    })
}

fn loopback_config() -> Value {
    json!({"cniVersion": CNI_VERSION, "name": "lo", "type": "loopback"})
}

/// The host-side veth in a bridge plugin result: the interface not in the
/// container (no `sandbox`) that is not the bridge.
fn host_veth<'a>(result: &'a Value, bridge: &str) -> Option<&'a str> {
    result["interfaces"].as_array()?.iter().find_map(|i| {
        let name = i["name"].as_str()?;
        let sandbox = i["sandbox"].as_str().unwrap_or_default();
        (sandbox.is_empty() && name != bridge).then_some(name)
    })
}

/// What a plugin said when it failed: the `msg` and `details` of the CNI
/// error it prints, else its stderr.
fn plugin_error(stdout: &[u8], stderr: &[u8], status: ExitStatus) -> String {
    if let Ok(err) = serde_json::from_slice::<Value>(stdout) {
        if let Some(msg) = err["msg"].as_str() {
            return match err["details"].as_str().filter(|d| !d.is_empty()) {
                Some(d) => format!("{msg}: {d}"),
                None => msg.to_string(),
            };
        }
    }
    tool_error(stderr, status)
}

/// A tool's stderr without iptables-nft's notice about legacy tables, else
/// its exit status.
fn tool_error(stderr: &[u8], status: ExitStatus) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("# Warning: iptables-legacy tables present"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        status.to_string()
    } else {
        lines.join("; ")
    }
}

/// hangar's iptables rules for one bridge.
struct HostRules {
    bridge: String,
    input: String,
    forward: String,
    /// The bridge's subnet, masqueraded as it leaves (`None`: not yet known,
    /// as in tests of the filter rules alone).
    subnet: Option<Subnet>,
}

impl HostRules {
    fn new(bridge: &str) -> HostRules {
        HostRules {
            bridge: bridge.to_string(),
            input: format!("HANGAR-IN-{bridge}"),
            forward: format!("HANGAR-FWD-{bridge}"),
            subnet: None,
        }
    }

    fn with_subnet(bridge: &str, subnet: Subnet) -> HostRules {
        HostRules {
            subnet: Some(subnet),
            ..HostRules::new(bridge)
        }
    }

    /// The one `nat POSTROUTING` rule (as `-S` prints it, less `-A
    /// POSTROUTING`) that NATs the subnet's traffic leaving by any other
    /// interface than the bridge.
    fn masquerade(&self) -> Option<Vec<String>> {
        let subnet = self.subnet?;
        Some(
            [
                "-s".to_string(),
                subnet.to_string(),
                "!".into(),
                "-o".into(),
                self.bridge.clone(),
                "-m".into(),
                "comment".into(),
                "--comment".into(),
                format!("hangar-{}", self.bridge),
                "-j".into(),
                "MASQUERADE".into(),
            ]
            .to_vec(),
        )
    }

    /// The chains' rules, as `iptables -S` prints them (so a listing can
    /// be compared with them).
    fn chain_rules(&self) -> Vec<String> {
        let (b, i, f) = (&self.bridge, &self.input, &self.forward);
        let reject = "-j REJECT --reject-with icmp-admin-prohibited";
        vec![
            // In from the bridge, to any address of the host: replies to
            // what the host opened go on to the host's own rules; anything
            // else is refused (at once, rather than left to time out).
            format!("-A {i} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"),
            format!("-A {i} {reject}"),
            // Routed from the bridge back onto it: one container to
            // another through the gateway.
            format!("-A {f} -i {b} -o {b} {reject}"),
            // Out to the world (masqueraded in nat POSTROUTING).
            format!("-A {f} -i {b} -j ACCEPT"),
            format!("-A {f} -o {b} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
            // In from elsewhere, unasked: containers serve no one.
            format!("-A {f} -o {b} -j DROP"),
        ]
    }

    /// The jumps to the chains: (built-in chain, rule spec).
    fn jumps(&self) -> Vec<(&'static str, Vec<String>)> {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        vec![
            ("INPUT", s(&["-i", &self.bridge, "-j", &self.input])),
            ("FORWARD", s(&["-j", &self.forward])),
        ]
    }

    /// Whether `listing` (`iptables -S` of the filter table) has the chains
    /// exactly, and which jumps it lacks.
    fn check(&self, listing: &str) -> (bool, Vec<(&'static str, Vec<String>)>) {
        // Chain by chain: iptables lists chains in its own order (by name),
        // not in the order they were made.
        let rules = self.chain_rules();
        let chains_ok = [&self.input, &self.forward].iter().all(|c| {
            let prefix = format!("-A {c} ");
            let listed = listing.lines().filter(|l| l.starts_with(&prefix));
            let wanted = rules.iter().filter(|l| l.starts_with(&prefix));
            listed.eq(wanted.map(String::as_str))
        });
        let missing = self
            .jumps()
            .into_iter()
            .filter(|(chain, spec)| {
                let line = format!("-A {chain} {}", spec.join(" "));
                !listing.lines().any(|l| l == line)
            })
            .collect();
        (chains_ok, missing)
    }

    /// `iptables-restore --noflush` input that (re)creates the chains.
    fn restore(&self) -> String {
        let mut s = format!(
            "*filter\n:{} - [0:0]\n:{} - [0:0]\n",
            self.input, self.forward
        );
        for r in self.chain_rules() {
            s.push_str(&r);
            s.push('\n');
        }
        s.push_str("COMMIT\n");
        s
    }
}

/// A bridge plugin NAT rule in `nat POSTROUTING`.
#[derive(Debug, PartialEq, Eq)]
struct NatRule {
    /// The container id from the rule's comment.
    id: String,
    /// The per-container chain it jumps to.
    chain: String,
    /// The rule's spec, for `-D POSTROUTING`.
    spec: Vec<String>,
}

/// The rules of network `name` in `iptables -t nat -S POSTROUTING`:
/// `-A POSTROUTING -s 10.223.0.2/32 -m comment --comment "name: \"hangar0\"
/// id: \"task-1\"" -j CNI-…`.
fn nat_rules(listing: &str, name: &str) -> Vec<NatRule> {
    let prefix = format!("name: \"{name}\" id: \"");
    listing
        .lines()
        .filter_map(|line| {
            let words = split_iptables_words(line);
            if words.first()? != "-A" || words.get(1)? != "POSTROUTING" {
                return None;
            }
            let after = |flag: &str| {
                words
                    .iter()
                    .position(|w| w == flag)
                    .and_then(|i| words.get(i + 1))
            };
            let comment = after("--comment")?;
            let id = comment.strip_prefix(&prefix)?.strip_suffix('"')?;
            Some(NatRule {
                id: id.to_string(),
                chain: after("-j")?.clone(),
                spec: words[2..].to_vec(),
            })
        })
        .collect()
}

/// Splits an `iptables -S` line into words: spaces separate, `"…"` quotes,
/// `\` escapes within quotes.
fn split_iptables_words(line: &str) -> Vec<String> {
    let mut words = vec![];
    let mut word = String::new();
    let (mut quoted, mut in_word) = (false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The resolv.conf for a container from a host's `text`: its
/// `nameserver` lines that `reachable` keeps (IPv4 only, never loopback),
/// everything else as it is; `None` when no nameserver remains. Text whose
/// nameservers all remain comes back unchanged.
fn container_resolv_conf(text: &str, reachable: impl Fn(Ipv4Addr) -> bool) -> Option<String> {
    let mut out = String::new();
    let mut kept = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("nameserver") {
            let usable = match words.next().and_then(|a| a.parse::<IpAddr>().ok()) {
                Some(IpAddr::V4(ip)) => !ip.is_loopback() && !ip.is_unspecified() && reachable(ip),
                // IPv6 (containers have none), or unparsable.
                _ => false,
            };
            if !usable {
                continue;
            }
            kept += 1;
        }
        out.push_str(line);
        out.push('\n');
    }
    if kept == 0 {
        return None;
    }
    let unchanged = out.trim_end() == text.trim_end();
    Some(if unchanged { text.to_string() } else { out })
}

/// The first of `sources` (resolv.conf files) that gives a container
/// usable nameservers, as [`container_resolv_conf`] makes it.
fn resolv_from(sources: &[&Path], reachable: impl Fn(Ipv4Addr) -> bool) -> Option<String> {
    sources.iter().find_map(|p| {
        let text = fs::read_to_string(p).ok()?;
        container_resolv_conf(&text, &reachable)
    })
}

/// Whether `ip` is an address of this host (a socket binds to it), which
/// containers cannot reach. With `ip_nonlocal_bind` on, any address binds
/// and none can be told apart: then none counts as the host's.
fn is_host_address(ip: Ipv4Addr) -> bool {
    let nonlocal =
        fs::read_to_string("/proc/sys/net/ipv4/ip_nonlocal_bind").is_ok_and(|v| v.trim() != "0");
    !nonlocal && UdpSocket::bind((ip, 0)).is_ok()
}

/// Replaces `path` with `content` (atomically, readable by all) unless it
/// holds it already.
fn write_if_changed(path: &Path, content: &str) -> io::Result<()> {
    if fs::read_to_string(path).is_ok_and(|c| c == content) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        // `host` mode makes no state dir at detect.
        fs::create_dir_all(dir)?;
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(content.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Makes a network namespace and bind-mounts it on `path`, as `ip netns
/// add` does: a fresh thread unshares its network namespace (only that
/// thread moves; the worker stays in the host's) and the mount keeps the
/// namespace alive after the thread ends.
fn create_netns(path: &Path) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    let target = path.to_path_buf();
    let made = thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("making a network namespace: {e} (the worker must be root)"))?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| {
            format!(
                "bind-mounting a network namespace on {}: {e}",
                target.display()
            )
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the thread making a network namespace panicked".into()));
    if made.is_err() {
        let _ = fs::remove_file(path);
    }
    made
}

/// Whether `path` is a namespace mount (not, say, the empty file left
/// after a reboot).
fn is_netns(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| s.filesystem_type() == NSFS_MAGIC)
}

/// Unmounts and removes a namespace file; fine if it is not there. The
/// namespace itself ends when its last process does. Copies of the mount
/// in other mount namespaces (a container's, made while this one
/// existed) are detached by the kernel when the file is removed.
fn remove_netns(path: &Path) {
    // Mounted twice by accident is unmounted twice.
    for _ in 0..8 {
        match umount2(path, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(Errno::EINVAL | Errno::ENOENT) => break,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unmounting a network namespace");
                break;
            }
        }
    }
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "removing a network namespace file");
        }
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn iptables_command(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    // -w: wait for the xtables lock rather than fail when another program
    // (the bridge plugin, Docker) holds it.
    cmd.env("PATH", TOOL_PATH).arg("-w").args(args);
    cmd
}

/// Runs `iptables -w <args>`; its stdout.
fn iptables(args: &[&str]) -> Result<String, String> {
    let out = run(iptables_command("iptables", args), b"")?;
    if !out.status.success() {
        return Err(format!(
            "iptables {}: {}",
            args.join(" "),
            tool_error(&out.stderr, out.status)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` with `input` on its stdin and collects its output, killing
/// it after [`RUN_TIMEOUT`].
fn run(mut cmd: Command, input: &[u8]) -> Result<Output, String> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("running {name}: {e}"))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = vec![];
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    if let Some(mut stdin) = child.stdin.take() {
        // A program that exits without reading (a failing plugin) breaks
        // the pipe: what it says about that is in its output.
        let _ = stdin.write_all(input);
    }
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name} did not finish within {RUN_TIMEOUT:?}"));
            }
            Ok(None) => thread::sleep(Duration::from_millis(1)),
            Err(e) => return Err(format!("waiting for {name}: {e}")),
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};

    use nix::sched::setns;

    // ---- pure logic: no root needed ----

    #[test]
    fn modes_parse_from_their_names_and_print_back() {
        let cases: [(&str, Option<NetworkMode>); 6] = [
            ("bridge", Some(NetworkMode::Bridge)),
            ("none", Some(NetworkMode::None)),
            ("host", Some(NetworkMode::Host)),
            ("Bridge", None),
            ("", None),
            ("nat", None),
        ];
        for (s, want) in cases {
            match (s.parse::<NetworkMode>(), want) {
                (Ok(got), Some(want)) => {
                    assert_eq!(got, want, "{s:?}");
                    assert_eq!(got.to_string(), s);
                }
                (Err(e), None) => assert_eq!(
                    e,
                    format!("network mode must be bridge, none or host, not {s:?}")
                ),
                (got, want) => panic!("{s:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn subnets_are_ipv4_networks_of_a_sensible_size() {
        let cases: [(&str, Result<&str, &str>); 9] = [
            ("10.223.0.0/16", Ok("10.223.0.0/16")),
            ("198.18.7.0/24", Ok("198.18.7.0/24")),
            ("10.0.0.0/8", Ok("10.0.0.0/8")),
            ("10.223.0.1/16", Err("did you mean 10.223.0.0/16?")),
            ("10.0.0.0/7", Err("must be 8 to 29")),
            ("10.0.0.0/30", Err("must be 8 to 29")),
            ("10.223.0.0", Err("not an IPv4 network")),
            ("fd00::/64", Err("not an IPv4 network")),
            ("10.223.0.0/x", Err("not a number")),
        ];
        for (s, want) in cases {
            match (Subnet::parse(s), want) {
                (Ok(got), Ok(want)) => assert_eq!(got.to_string(), want),
                (Err(e), Err(want)) => assert!(e.contains(want), "{s:?}: {e}"),
                (got, want) => panic!("{s:?}: got {got:?}, want {want:?}"),
            }
        }
        let net = |s| Subnet::parse(s).unwrap();
        let overlaps = [
            ("10.0.0.0/8", "10.223.0.0/16", true),
            ("10.223.0.0/16", "10.0.0.0/8", true),
            ("10.223.0.0/16", "10.223.128.0/24", true),
            ("10.223.0.0/16", "10.224.0.0/16", false),
            ("192.168.0.0/24", "192.168.1.0/24", false),
        ];
        for (a, b, want) in overlaps {
            assert_eq!(net(a).overlaps(&net(b)), want, "{a} {b}");
        }
    }

    #[test]
    fn bridge_names_fit_an_interface_and_a_chain_name() {
        for ok in ["hangar0", "h", "a-b_c", "abcdefghijklmno"] {
            assert_eq!(validate_bridge_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "abcdefghijklmnop", "han gar", "a/b", "a.b", "brück"] {
            assert!(validate_bridge_name(bad).is_err(), "{bad:?}");
        }
    }

    /// A `/proc/net/route` as the kernel writes it (addresses in the
    /// machine's byte order).
    fn proc_net_route(routes: &[(&str, [u8; 4], [u8; 4])]) -> String {
        let hex = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
        let mut s =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                .to_string();
        for (iface, dst, mask) in routes {
            s.push_str(&format!(
                "{iface}\t{}\t00000000\t0001\t0\t0\t0\t{}\t0\t0\t0\n",
                hex(*dst),
                hex(*mask)
            ));
        }
        s
    }

    #[test]
    fn a_subnet_overlapping_a_host_route_is_found() {
        let routes = proc_net_route(&[
            ("eth0", [0, 0, 0, 0], [0, 0, 0, 0]),
            ("eth0", [192, 0, 2, 0], [255, 255, 255, 0]),
            ("docker0", [172, 17, 0, 0], [255, 255, 0, 0]),
            ("hangar0", [10, 223, 0, 0], [255, 255, 0, 0]),
            ("wg0", [10, 0, 0, 0], [255, 0, 0, 0]),
        ]);
        let cases = [
            // The default route overlaps everything and counts for nothing.
            ("198.18.0.0/24", "hangar0", None),
            ("172.17.5.0/24", "hangar0", Some("172.17.0.0/16 on docker0")),
            ("172.16.0.0/12", "hangar0", Some("172.17.0.0/16 on docker0")),
            ("192.0.2.0/28", "hangar0", Some("192.0.2.0/24 on eth0")),
            // The bridge's own route (left by an earlier run) is no
            // conflict; a wider route elsewhere still is.
            ("10.223.0.0/16", "hangar0", Some("10.0.0.0/8 on wg0")),
            ("10.223.0.0/16", "other", Some("10.223.0.0/16 on hangar0")),
        ];
        for (subnet, bridge, want) in cases {
            let got = route_conflict(&routes, &Subnet::parse(subnet).unwrap(), bridge);
            assert_eq!(got.as_deref(), want, "{subnet} on {bridge}");
        }
    }

    #[test]
    fn the_bridge_config_names_the_network_after_the_bridge() {
        let got = bridge_config(
            "hangar0",
            &Subnet::parse("10.223.0.0/16").unwrap(),
            Path::new("/var/lib/hangar/net/ipam"),
        );
        let want = json!({
            "cniVersion": "1.0.0",
            "name": "hangar0",
            "type": "bridge",
            "bridge": "hangar0",
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.223.0.0/16"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": "/var/lib/hangar/net/ipam",
            },
        });
        assert_eq!(got, want);
        assert_eq!(
            loopback_config(),
            json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
        );
    }

    #[test]
    fn the_host_side_veth_is_read_from_the_bridge_result() {
        let result = json!({"cniVersion": "1.0.0", "interfaces": [
            {"name": "hangar0", "mac": "aa:aa:aa:aa:aa:aa"},
            {"name": "veth1234abcd", "mac": "bb:bb:bb:bb:bb:bb"},
            {"name": "eth0", "mac": "cc:cc:cc:cc:cc:cc", "sandbox": "/x/netns/t"},
        ]});
        assert_eq!(host_veth(&result, "hangar0"), Some("veth1234abcd"));
        let no_veth = json!({"interfaces": [
            {"name": "hangar0"},
            {"name": "eth0", "sandbox": "/x/netns/t"},
        ]});
        assert_eq!(host_veth(&no_veth, "hangar0"), None);
        assert_eq!(host_veth(&json!({}), "hangar0"), None);
    }

    #[test]
    fn a_plugin_failure_reads_as_its_cni_error() {
        use std::os::unix::process::ExitStatusExt;
        let failed = ExitStatus::from_raw(1 << 8);
        let cases: [(&str, &str, &str); 4] = [
            (
                r#"{"code":999,"msg":"failed to set bridge addr","details":"file exists"}"#,
                "",
                "failed to set bridge addr: file exists",
            ),
            (r#"{"code":7,"msg":"invalid config"}"#, "", "invalid config"),
            (
                "",
                "# Warning: iptables-legacy tables present, use iptables-legacy to see them\niptables: No chain/target/match by that name.\n",
                "iptables: No chain/target/match by that name.",
            ),
            ("", "", "exit status: 1"),
        ];
        for (stdout, stderr, want) in cases {
            assert_eq!(
                plugin_error(stdout.as_bytes(), stderr.as_bytes(), failed),
                want
            );
        }
    }

    #[test]
    fn hosts_rules_are_checked_against_an_iptables_listing() {
        let rules = HostRules::new("hangar0");
        // As iptables lists them: the chains by name, so FWD before IN.
        let chains = {
            let mut r = rules.chain_rules();
            r.sort_by_key(|l| !l.starts_with("-A HANGAR-FWD-"));
            assert!(r[0].starts_with("-A HANGAR-FWD-") && r[5].starts_with("-A HANGAR-IN-"));
            r.join("\n")
        };
        let input_jump = "-A INPUT -i hangar0 -j HANGAR-IN-hangar0";
        let forward_jump = "-A FORWARD -j HANGAR-FWD-hangar0";
        let reordered = {
            let mut r = rules.chain_rules();
            r.swap(2, 3);
            r.join("\n")
        };
        let cases: Vec<(String, bool, Vec<&str>)> = vec![
            (String::new(), false, vec!["INPUT", "FORWARD"]),
            (
                format!("-P INPUT ACCEPT\n-N HANGAR-IN-hangar0\n{input_jump}\n{forward_jump}\n{chains}\n"),
                true,
                vec![],
            ),
            (format!("{forward_jump}\n{chains}"), true, vec!["INPUT"]),
            // Listed chain after chain in another order: as good.
            (
                format!(
                    "{input_jump}\n{forward_jump}\n{}",
                    rules.chain_rules().join("\n")
                ),
                true,
                vec![],
            ),
            // A rule someone added, or the rules out of order: rewritten.
            (
                format!("{input_jump}\n{forward_jump}\n{chains}\n-A HANGAR-IN-hangar0 -j ACCEPT"),
                false,
                vec![],
            ),
            (format!("{input_jump}\n{forward_jump}\n{reordered}"), false, vec![]),
            // Another bridge's chains are not these.
            (
                format!(
                    "{input_jump}\n{forward_jump}\n{chains}\n{}",
                    HostRules::new("hangar01").chain_rules().join("\n")
                ),
                true,
                vec![],
            ),
            (
                format!("-A INPUT -i hangar01 -j HANGAR-IN-hangar01\n{forward_jump}\n{chains}"),
                true,
                vec!["INPUT"],
            ),
        ];
        for (i, (listing, want_ok, want_missing)) in cases.into_iter().enumerate() {
            let (ok, missing) = rules.check(&listing);
            let missing: Vec<&str> = missing.iter().map(|(c, _)| *c).collect();
            assert_eq!((ok, missing), (want_ok, want_missing), "case {i}");
        }
        let restore = rules.restore();
        assert!(restore.starts_with(
            "*filter\n:HANGAR-IN-hangar0 - [0:0]\n:HANGAR-FWD-hangar0 - [0:0]\n-A HANGAR-IN-hangar0 "
        ));
        assert!(restore.ends_with("-A HANGAR-FWD-hangar0 -o hangar0 -j DROP\nCOMMIT\n"));
    }

    #[test]
    fn nat_rules_of_the_network_are_found_by_their_comment() {
        let listing = concat!(
            "-P POSTROUTING ACCEPT\n",
            "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE\n",
            "-A POSTROUTING -s 10.223.0.2/32 -m comment --comment \"name: \\\"hangar0\\\" id: \\\"task-1\\\"\" -j CNI-aaaa\n",
            "-A POSTROUTING -s 10.223.0.3/32 -m comment --comment \"name: \\\"other\\\" id: \\\"task-2\\\"\" -j CNI-bbbb\n",
            "-A POSTROUTING -s 10.223.0.4/32 -m comment --comment \"name: \\\"hangar01\\\" id: \\\"task-3\\\"\" -j CNI-cccc\n",
            "-A POSTROUTING -s 10.223.0.5/32 -m comment --comment \"name: \\\"hangar0\\\" id: \\\"a.b_c-9\\\"\" -j CNI-dddd\n",
        );
        let spec = |ip: &str, id: &str, chain: &str| {
            [
                "-s",
                ip,
                "-m",
                "comment",
                "--comment",
                &format!("name: \"hangar0\" id: \"{id}\""),
                "-j",
                chain,
            ]
            .map(String::from)
            .to_vec()
        };
        assert_eq!(
            nat_rules(listing, "hangar0"),
            vec![
                NatRule {
                    id: "task-1".into(),
                    chain: "CNI-aaaa".into(),
                    spec: spec("10.223.0.2/32", "task-1", "CNI-aaaa"),
                },
                NatRule {
                    id: "a.b_c-9".into(),
                    chain: "CNI-dddd".into(),
                    spec: spec("10.223.0.5/32", "a.b_c-9", "CNI-dddd"),
                },
            ]
        );
        assert_eq!(
            split_iptables_words(r#"-A X  -m comment --comment "a \"b\" c" -j Y"#),
            [
                "-A",
                "X",
                "-m",
                "comment",
                "--comment",
                r#"a "b" c"#,
                "-j",
                "Y"
            ]
        );
    }

    #[test]
    fn a_containers_resolv_conf_keeps_only_nameservers_it_can_reach() {
        let host = Ipv4Addr::new(192, 0, 2, 2);
        let reachable = |ip: Ipv4Addr| ip != host;
        let cases: [(&str, Option<&str>); 10] = [
            // Reachable as it is: unchanged, to the byte.
            ("nameserver 10.255.255.53\n", Some("nameserver 10.255.255.53\n")),
            ("nameserver 1.1.1.1", Some("nameserver 1.1.1.1")),
            (
                "search corp\nnameserver 198.51.100.1\nnameserver 198.51.100.2\noptions ndots:2\n",
                Some("search corp\nnameserver 198.51.100.1\nnameserver 198.51.100.2\noptions ndots:2\n"),
            ),
            // systemd-resolved's stub: nothing a container could use.
            ("nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp\n", None),
            (
                "# dnsmasq\nnameserver 127.0.0.1\nnameserver 198.51.100.1\nsearch x\n",
                Some("# dnsmasq\nnameserver 198.51.100.1\nsearch x\n"),
            ),
            // Containers have no IPv6.
            ("nameserver ::1\nnameserver 2001:db8::53\n", None),
            (
                "nameserver fe80::1%eth0\nnameserver 198.51.100.1\n",
                Some("nameserver 198.51.100.1\n"),
            ),
            // The host is unreachable, whichever of its addresses.
            ("nameserver 192.0.2.2\n", None),
            ("nameserver 0.0.0.0\nnameserver\nnameserver nonsense\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                container_resolv_conf(text, reachable).as_deref(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn without_reachable_nameservers_the_stubs_upstreams_are_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            fs::write(&p, text).unwrap();
            p
        };
        let stub = file(
            "stub",
            "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp\n",
        );
        let upstream = file("upstream", "nameserver 198.51.100.7\nsearch corp\n");
        let direct = file("direct", "nameserver 198.51.100.9\n");
        let missing = dir.path().join("missing");
        let all = |_: Ipv4Addr| true;
        let cases: [(Vec<&Path>, Option<&str>); 5] = [
            (vec![&direct, &upstream], Some("nameserver 198.51.100.9\n")),
            (
                vec![&stub, &upstream],
                Some("nameserver 198.51.100.7\nsearch corp\n"),
            ),
            (
                vec![&stub, &missing, &upstream],
                Some("nameserver 198.51.100.7\nsearch corp\n"),
            ),
            (vec![&stub, &missing], None),
            (vec![], None),
        ];
        for (i, (sources, want)) in cases.into_iter().enumerate() {
            assert_eq!(resolv_from(&sources, all).as_deref(), want, "case {i}");
        }
    }

    #[test]
    fn detect_says_when_the_plugins_are_missing() {
        let dir = tempfile::tempdir().unwrap();
        let bogus = dir.path().join("no-such-cni");
        for mode in [NetworkMode::Bridge, NetworkMode::None] {
            let err = TaskNetwork::detect_with(
                mode,
                &dir.path().join("state"),
                "198.18.0.0/24",
                "hgtbogus",
                std::slice::from_ref(&bogus),
            )
            .unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "network mode {mode}: no CNI plugins: none of {}",
                    bogus.display()
                )),
                "{err}"
            );
            assert!(err.contains("install containernetworking-plugins"), "{err}");
        }
        // A directory with some of them is no better than none.
        let partial = dir.path().join("partial");
        fs::create_dir(&partial).unwrap();
        for p in ["bridge", "loopback"] {
            fs::write(partial.join(p), "").unwrap();
            fs::set_permissions(partial.join(p), fs::Permissions::from_mode(0o755)).unwrap();
        }
        let err = find_plugins(
            std::slice::from_ref(&partial),
            &["bridge", "host-local", "loopback"],
        )
        .unwrap_err();
        assert!(err.contains("has bridge, host-local, loopback"), "{err}");
        assert_eq!(
            find_plugins(&[bogus, partial.clone()], &["loopback"]),
            Ok(partial)
        );
    }

    #[test]
    fn detect_refuses_a_bad_subnet_or_bridge_before_touching_anything() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let dirs: Vec<PathBuf> = PLUGIN_DIRS.iter().map(PathBuf::from).collect();
        let cases = [
            (
                "10.223.0.1/16",
                "hangar0",
                "subnet \"10.223.0.1/16\": not a network address",
            ),
            (
                "10.223.0.0/16",
                "bridge-name-too-long",
                "bridge name \"bridge-name-too-long\"",
            ),
        ];
        for (subnet, bridge, want) in cases {
            let err = TaskNetwork::detect_with(NetworkMode::Bridge, &state, subnet, bridge, &dirs)
                .unwrap_err();
            assert!(
                err.starts_with(&format!("network mode bridge: {want}")),
                "{err}"
            );
        }
        assert!(!state.exists());
    }

    #[test]
    fn host_mode_shares_the_hosts_network_and_needs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let net = TaskNetwork::detect_with(
            NetworkMode::Host,
            &dir.path().join("state"),
            "",
            "",
            &[dir.path().join("no-such-cni")],
        )
        .unwrap();
        assert_eq!(net.mode(), NetworkMode::Host);
        assert_eq!(net.attach("task-1"), Ok(None));
        net.detach("task-1");
        net.sweep(&BTreeSet::new());
        let host = fs::read_to_string(RESOLV_SOURCES[0]).ok();
        let copy = net.resolv_conf().map(|p| fs::read_to_string(p).unwrap());
        assert_eq!(copy, host);
    }

    // ---- as root: real namespaces, plugins and iptables ----

    /// Root tests need root to make namespaces; elsewhere they say so and
    /// pass (CI runs them as root).
    fn root(test: &str) -> bool {
        let root = super::super::isolation::is_root();
        if !root {
            eprintln!("{test}: skipped: needs root");
        }
        root
    }

    /// `args[0]` with the rest, which must succeed; its stdout.
    fn sh(args: &[&str]) -> String {
        let out = Command::new(args[0])
            .args(&args[1..])
            .env("PATH", TOOL_PATH)
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `ip -j <args>` in namespace `ns` (the host's for None), as JSON.
    fn ip_json(ns: Option<&Path>, args: &[&str]) -> Vec<Value> {
        let mut argv = vec![];
        let enter;
        if let Some(ns) = ns {
            enter = format!("--net={}", ns.display());
            argv.extend(["nsenter", enter.as_str()]);
        }
        argv.extend(["ip", "-j"]);
        argv.extend(args);
        let out = sh(&argv);
        if out.trim().is_empty() {
            return vec![];
        }
        serde_json::from_str(&out).unwrap()
    }

    /// Runs `f` in a thread that entered namespace `ns`; sockets it makes
    /// stay in `ns`.
    fn in_netns<T: Send + 'static>(ns: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = fs::File::open(ns).unwrap();
        thread::spawn(move || {
            setns(&file, CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
        .join()
        .unwrap()
    }

    /// A TCP connection from namespace `ns` to `to`: whether it was made.
    /// Refused, rejected and timed out all count as not.
    fn connects(ns: &Path, to: SocketAddr) -> bool {
        in_netns(ns, move || {
            TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_ok()
        })
    }

    /// Whether `listener` has a connection waiting (not accepted yet).
    fn has_pending(listener: &TcpListener) -> bool {
        listener.set_nonblocking(true).unwrap();
        let got = listener.accept().is_ok();
        listener.set_nonblocking(false).unwrap();
        got
    }

    /// The IPv4 address and prefix of `dev` in `ns`.
    fn ipv4(ns: Option<&Path>, dev: &str) -> Option<(Ipv4Addr, u64)> {
        let addrs = ip_json(ns, &["-4", "addr", "show", "dev", dev]);
        let a = addrs.first()?["addr_info"].as_array()?.first()?.clone();
        Some((a["local"].as_str()?.parse().ok()?, a["prefixlen"].as_u64()?))
    }

    /// What `eth0` in the calling thread's namespace received (packets).
    fn rx_packets() -> u64 {
        let dev = fs::read_to_string("/proc/thread-self/net/dev").unwrap();
        let line = dev
            .lines()
            .find(|l| l.trim_start().starts_with("eth0:"))
            .unwrap();
        line.split(':')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }

    /// One test's network: its own bridge, subnet and state dir, so tests
    /// (and a worker) on the same host do not meet. Dropping it removes all
    /// it made: namespaces, leases, NAT rules, iptables chains, bridge,
    /// veths, and puts ip_forward back.
    struct Lab {
        net: TaskNetwork,
        subnet: Subnet,
        tag: String,
        links: Vec<String>,
        netns: Vec<PathBuf>,
        ip_forward: String,
        dir: tempfile::TempDir,
    }

    impl Lab {
        /// Lab `idx` (0 to 4) of this test process: bridge `hgt<pid><idx>`,
        /// subnet in 198.18.0.0/15 (reserved for benchmarking: no one's
        /// real network).
        fn new(idx: u32, mode: NetworkMode) -> Lab {
            let pid = std::process::id();
            let n = (pid % 100) * 5 + idx;
            let tag = format!("{}{idx}", pid % 1_000_000);
            let subnet = Subnet::parse(&format!("198.{}.{}.0/24", 18 + n / 256, n % 256)).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let bridge = format!("hgt{tag}");
            // What detect makes, so that Drop cleans up even if detect
            // fails halfway.
            let net = TaskNetwork {
                mode,
                state_dir: dir.path().join("state"),
                subnet: (mode == NetworkMode::Bridge).then_some(subnet),
                bridge: bridge.clone(),
                cni_path: PathBuf::from(PLUGIN_DIRS[0]),
                ipam_dir: PathBuf::from(HOST_IPAM_DIR),
                owner: owner_of(&dir.path().join("state")),
                host_rules: Arc::new(Mutex::new(None)),
            };
            let mut lab = Lab {
                net,
                subnet,
                tag,
                links: vec![],
                netns: vec![],
                ip_forward: fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
                dir,
            };
            lab.net = TaskNetwork::detect(
                mode,
                &lab.dir.path().join("state"),
                &subnet.to_string(),
                &bridge,
            )
            .unwrap_or_else(|e| panic!("detect: {e}"));
            lab
        }

        fn gateway(&self) -> Ipv4Addr {
            Ipv4Addr::from(u32::from(self.subnet.addr) + 1)
        }

        fn leased(&self, handle: &str) -> bool {
            self.net.leases().iter().any(|(_, id)| id == handle)
        }

        fn nat_ids(&self) -> Vec<String> {
            let listing = iptables(&["-t", "nat", "-S", "POSTROUTING"]).unwrap();
            nat_rules(&listing, &self.net.bridge)
                .into_iter()
                .filter_map(|r| self.net.own_handle(&r.id).map(str::to_string))
                .collect()
        }

        /// An "outside" network the test owns: a namespace joined to the
        /// host by a veth, host side `100.x.y.1/30`, outside `.2/30`
        /// (100.64.0.0/10, shared address space: inside this test's
        /// namespaces only). Returns (namespace, host side, outside).
        fn outside(&mut self) -> (PathBuf, Ipv4Addr, Ipv4Addr) {
            let pid = std::process::id();
            let n = (pid % 100) * 5 + self.tag.as_bytes()[self.tag.len() - 1] as u32 % 5;
            let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + n * 4;
            let (host_ip, out_ip) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
            let ns = self.dir.path().join("outside");
            create_netns(&ns).unwrap();
            self.netns.push(ns.clone());
            let (host_if, out_if) = (format!("hgo{}", self.tag), format!("hgp{}", self.tag));
            let ns_arg = ns.display().to_string();
            sh(&[
                "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &out_if, "netns",
                &ns_arg,
            ]);
            self.links.push(host_if.clone());
            sh(&[
                "ip",
                "addr",
                "add",
                &format!("{host_ip}/30"),
                "dev",
                &host_if,
            ]);
            sh(&["ip", "link", "set", &host_if, "up"]);
            let enter = format!("--net={ns_arg}");
            sh(&[
                "nsenter",
                &enter,
                "ip",
                "addr",
                "add",
                &format!("{out_ip}/30"),
                "dev",
                &out_if,
            ]);
            sh(&["nsenter", &enter, "ip", "link", "set", &out_if, "up"]);
            sh(&["nsenter", &enter, "ip", "link", "set", "lo", "up"]);
            (ns, host_ip, out_ip)
        }
    }

    impl Drop for Lab {
        fn drop(&mut self) {
            self.net.sweep(&BTreeSet::new());
            for ns in &self.netns {
                remove_netns(ns);
            }
            let run = |args: &[&str]| {
                let _ = Command::new(args[0])
                    .args(&args[1..])
                    .env("PATH", TOOL_PATH)
                    .output();
            };
            for link in &self.links {
                run(&["ip", "link", "del", link]);
            }
            if self.net.mode == NetworkMode::Bridge {
                self.net.remove_host_rules();
                run(&["ip", "link", "del", &self.net.bridge]);
                let _ = fs::remove_dir_all(self.net.ipam_dir.join(&self.net.bridge));
            }
            let _ = fs::write("/proc/sys/net/ipv4/ip_forward", &self.ip_forward);
        }
    }

    #[test]
    fn a_bridged_container_reaches_out_through_nat_but_not_the_host_or_its_neighbour() {
        if !root("bridged") {
            return;
        }
        let mut lab = Lab::new(0, NetworkMode::Bridge);
        let (outside, host_veth_ip, outside_ip) = lab.outside();
        let (bridge, gw) = (lab.net.bridge.clone(), lab.gateway());

        let t = Instant::now();
        let a = lab.net.attach("task-a").unwrap().unwrap();
        let attach_a = t.elapsed();
        let t = Instant::now();
        let b = lab.net.attach("task-b").unwrap().unwrap();
        let attach_b = t.elapsed();
        assert_eq!(a, lab.net.netns_dir().join("task-a"));
        assert!(is_netns(&a) && is_netns(&b));

        // eth0 with an address in the subnet, the default route via the
        // bridge, whose address is the gateway; lo up.
        let (a_ip, prefix) = ipv4(Some(&a), "eth0").expect("eth0 of task-a has an address");
        let (b_ip, _) = ipv4(Some(&b), "eth0").expect("eth0 of task-b has an address");
        assert_eq!(prefix, 24);
        for ip in [a_ip, b_ip] {
            assert!(
                lab.subnet.overlaps(&Subnet {
                    addr: ip,
                    prefix: 32
                }),
                "{ip} in {}",
                lab.subnet
            );
            assert_ne!(ip, gw);
        }
        assert_ne!(a_ip, b_ip);
        let routes = ip_json(Some(&a), &["-4", "route", "show", "default"]);
        assert_eq!(routes.len(), 1, "{routes:?}");
        assert_eq!(routes[0]["gateway"], json!(gw.to_string()));
        assert_eq!(routes[0]["dev"], json!("eth0"));
        assert_eq!(ipv4(None, &bridge), Some((gw, 24)));
        let lo = ip_json(Some(&a), &["link", "show", "lo"]);
        assert!(
            lo[0]["flags"].as_array().unwrap().contains(&json!("UP")),
            "{lo:?}"
        );

        // Each namespace has its own interfaces: lo and eth0, nothing of
        // the host's, different eth0s.
        let links = |ns: &Path| {
            ip_json(Some(ns), &["link"])
                .iter()
                .map(|l| {
                    (
                        l["ifname"].as_str().unwrap().to_string(),
                        l["address"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let (a_links, b_links) = (links(&a), links(&b));
        let names = |l: &[(String, Value)]| l.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a_links), ["lo", "eth0"]);
        assert_eq!(names(&b_links), ["lo", "eth0"]);
        assert_ne!(a_links[1].1, b_links[1].1, "the same eth0 MAC");

        // Every container's port on the bridge is isolated (the bridge
        // forwards nothing between them).
        let ports: Vec<PathBuf> = fs::read_dir(format!("/sys/class/net/{bridge}/brif"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(ports.len(), 2, "{ports:?}");
        for p in ports {
            let isolated = fs::read_to_string(p.join("isolated")).unwrap();
            assert_eq!(isolated.trim(), "1", "{}", p.display());
        }

        // The host has no IPv6 address on the bridge to be reached at.
        assert!(ip_json(None, &["-6", "addr", "show", "dev", &bridge])
            .iter()
            .all(|i| i["addr_info"].as_array().is_none_or(|a| a.is_empty())));

        // Out: to a listener in the outside namespace, through the host,
        // arriving from the host's address there (masqueraded).
        let out_listener = in_netns(&outside, move || {
            TcpListener::bind((outside_ip, 0)).unwrap()
        });
        let out_addr = out_listener.local_addr().unwrap();
        let b_rx_before = in_netns(&b, rx_packets);
        // The outside answers on its own thread: the container's side
        // waits for the answer in its namespace's thread.
        let server = thread::spawn(move || {
            let (mut conn, peer) = out_listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = [0; 4];
            conn.read_exact(&mut got).unwrap();
            conn.write_all(b"pong").unwrap();
            (got, peer)
        });
        let reply = in_netns(&a, move || {
            let mut s = TcpStream::connect_timeout(&out_addr, Duration::from_secs(5))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"ping")?;
            let mut reply = String::new();
            s.read_to_string(&mut reply)?;
            Ok::<_, io::Error>(reply)
        });
        // (On failure the server thread is left waiting: joining it would
        // hang the test.)
        assert_eq!(reply.expect("task-a reaches the outside"), "pong");
        let (got, peer) = server.join().unwrap();
        assert_eq!(&got, b"ping");
        assert_eq!(peer.ip(), IpAddr::V4(host_veth_ip), "not masqueraded");
        // task-b saw none of that exchange on its eth0.
        assert_eq!(
            in_netns(&b, rx_packets),
            b_rx_before,
            "task-b received packets"
        );

        // The host: a service on its 127.0.0.1 is not the container's
        // 127.0.0.1.
        let local = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(!connects(&a, local.local_addr().unwrap()));
        assert!(!has_pending(&local));
        // A service on all of the host's addresses: not via the gateway,
        // not via another host address; yet the outside namespace reaches
        // it (so it is the rule that keeps containers out).
        let any = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = any.local_addr().unwrap().port();
        assert!(
            !connects(&a, (gw, port).into()),
            "the host is reachable via the gateway"
        );
        assert!(
            !connects(&a, (host_veth_ip, port).into()),
            "the host is reachable via {host_veth_ip}"
        );
        assert!(!has_pending(&any));
        assert!(connects(&outside, (host_veth_ip, port).into()));
        assert!(has_pending(&any));

        // The neighbour: task-b's listener is reached from the host, not
        // from task-a, neither across the bridge nor routed via the gateway.
        let b_listener = in_netns(&b, || TcpListener::bind("0.0.0.0:0").unwrap());
        let b_addr: SocketAddr = (b_ip, b_listener.local_addr().unwrap().port()).into();
        assert!(TcpStream::connect_timeout(&b_addr, Duration::from_secs(2)).is_ok());
        assert!(has_pending(&b_listener));
        assert!(
            !connects(&a, b_addr),
            "task-a reaches task-b across the bridge"
        );
        let enter = format!("--net={}", a.display());
        sh(&[
            "nsenter",
            &enter,
            "ip",
            "route",
            "add",
            &format!("{b_ip}/32"),
            "via",
            &gw.to_string(),
        ]);
        assert!(!connects(&a, b_addr));
        assert!(!has_pending(&b_listener));
        // That fails anyway, as task-b answers across the bridge; but even
        // one-way datagrams routed via the gateway are refused.
        let b_udp = in_netns(&b, || UdpSocket::bind("0.0.0.0:0").unwrap());
        b_udp
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let b_udp_addr: SocketAddr = (b_ip, b_udp.local_addr().unwrap().port()).into();
        let mut buf = [0; 16];
        let host_udp = UdpSocket::bind("0.0.0.0:0").unwrap();
        host_udp.send_to(b"control", b_udp_addr).unwrap();
        assert_eq!(b_udp.recv(&mut buf).ok(), Some(7), "control: from the host");
        in_netns(&a, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for _ in 0..3 {
                // The second send may see the first one's rejection.
                let _ = s.send_to(b"from-a", b_udp_addr);
            }
        });
        assert!(
            b_udp.recv(&mut buf).is_err(),
            "task-a reaches task-b through the gateway"
        );

        // Nothing outside opens a connection to a container, even one
        // that routes the subnet via the host.
        let a_listener = in_netns(&a, || TcpListener::bind("0.0.0.0:0").unwrap());
        let a_addr: SocketAddr = (a_ip, a_listener.local_addr().unwrap().port()).into();
        let enter_outside = format!("--net={}", outside.display());
        sh(&[
            "nsenter",
            &enter_outside,
            "ip",
            "route",
            "add",
            &lab.subnet.to_string(),
            "via",
            &host_veth_ip.to_string(),
        ]);
        assert!(!connects(&outside, a_addr), "the outside reaches task-a");
        assert!(!has_pending(&a_listener));

        // The rules are put back by the first attach after RULES_RECHECK
        // if someone flushed them.
        let input_chain = format!("HANGAR-IN-{bridge}");
        sh(&["iptables", "-w", "-F", &input_chain]);
        sh(&[
            "iptables",
            "-w",
            "-D",
            "INPUT",
            "-i",
            &bridge,
            "-j",
            &input_chain,
        ]);
        assert!(
            connects(&a, (gw, port).into()),
            "control: without the rules the host is reachable"
        );
        assert!(has_pending(&any));
        // As if RULES_RECHECK had passed since they were last checked.
        *lab.net.host_rules.lock().unwrap() = None;
        let c = lab.net.attach("task-c").unwrap().unwrap();
        assert!(!connects(&a, (gw, port).into()));
        assert!(!connects(&c, (gw, port).into()));
        // A second detect (a restarted worker) adds nothing twice.
        TaskNetwork::detect(
            NetworkMode::Bridge,
            &lab.dir.path().join("state"),
            &lab.subnet.to_string(),
            &bridge,
        )
        .unwrap();
        let listing = sh(&["iptables", "-w", "-S"]);
        for jump in HostRules::new(&bridge).jumps() {
            let line = format!("-A {} {}", jump.0, jump.1.join(" "));
            assert_eq!(listing.lines().filter(|l| *l == line).count(), 1, "{line}");
        }
        assert!(HostRules::new(&bridge).check(&listing).0, "{listing}");
        // One masquerade rule for the subnet, however many workers and
        // containers: none of the plugin's per-container chains.
        let nat = sh(&["iptables", "-w", "-t", "nat", "-S", "POSTROUTING"]);
        let masq = HostRules::with_subnet(&bridge, lab.subnet)
            .masquerade()
            .unwrap();
        let line = format!("-A POSTROUTING {}", masq.join(" "));
        assert_eq!(nat.lines().filter(|l| *l == line).count(), 1, "{nat}");
        assert!(lab.nat_ids().is_empty(), "{nat}");
        lab.net.detach("task-c");

        // resolv.conf: a copy with nameservers the container can reach.
        if let Some(p) = lab.net.resolv_conf() {
            assert!(p.starts_with(lab.dir.path()));
            let text = fs::read_to_string(&p).unwrap();
            assert_eq!(
                container_resolv_conf(&text, |_| true).as_deref(),
                Some(text.as_str())
            );
        }

        // Detach: namespace file, lease and NAT rules gone; twice is fine.
        assert!(lab.leased("task-a"));
        let t = Instant::now();
        lab.net.detach("task-a");
        let detach_a = t.elapsed();
        lab.net.detach("task-a");
        assert!(!a.exists());
        assert!(!lab.leased("task-a"));
        assert!(!lab.nat_ids().contains(&"task-a".to_string()));
        assert!(lab.leased("task-b"));
        let t = Instant::now();
        lab.net.detach("task-b");
        let detach_b = t.elapsed();
        assert!(lab.net.leases().is_empty() && lab.nat_ids().is_empty());
        assert_eq!(fs::read_dir(lab.net.netns_dir()).unwrap().count(), 0);
        eprintln!("attach {attach_a:?} then {attach_b:?}; detach {detach_a:?} then {detach_b:?}");
    }

    #[test]
    fn sweep_removes_what_gone_containers_left_and_keeps_the_live() {
        if !root("sweep") {
            return;
        }
        let lab = Lab::new(1, NetworkMode::Bridge);
        let ns = |h: &str| lab.net.netns_dir().join(h);
        for h in ["live", "gone", "crashed"] {
            lab.net.attach(h).unwrap();
        }
        // Attaching a handle again replaces what it had.
        lab.net.attach("live").unwrap();
        assert_eq!(
            lab.net
                .leases()
                .iter()
                .filter(|(_, id)| id == "live")
                .count(),
            1
        );
        // "crashed": its namespace vanished before DEL ran, so the plugin
        // cannot learn its address to remove its NAT rule.
        remove_netns(&ns("crashed"));
        // "rebooted": a lease whose namespace file is a plain file.
        fs::write(ns("rebooted"), "").unwrap();
        let ipam = lab.net.ipam_dir.join(&lab.net.bridge);
        let stale_ip = Ipv4Addr::from(u32::from(lab.subnet.addr) + 200);
        let stale = format!("{}rebooted\r\neth0", lab.net.owner);
        fs::write(ipam.join(stale_ip.to_string()), stale).unwrap();
        // Another worker on the same bridge: its lease is not this one's.
        let foreign_ip = Ipv4Addr::from(u32::from(lab.subnet.addr) + 201);
        let foreign = ipam.join(foreign_ip.to_string());
        fs::write(&foreign, "0badc0de.other\r\neth0").unwrap();
        assert!(lab.leased("crashed") && lab.leased("rebooted"));
        assert!(!lab.net.leases().iter().any(|(_, id)| id.contains("other")));

        lab.net.sweep(&BTreeSet::from(["live".to_string()]));

        assert!(is_netns(&ns("live")));
        assert!(lab.leased("live"));
        assert!(lab.nat_ids().is_empty());
        for h in ["gone", "crashed", "rebooted"] {
            assert!(!ns(h).exists(), "{h}'s namespace");
            assert!(!lab.leased(h), "{h}'s lease");
        }
        assert!(foreign.exists(), "another worker's lease is left alone");
        fs::remove_file(&foreign).unwrap();
        // The survivor still works.
        assert!(ipv4(Some(&ns("live")), "eth0").is_some());
    }

    #[test]
    fn none_has_only_loopback_and_host_shares_the_hosts() {
        if !root("none") {
            return;
        }
        let lab = Lab::new(2, NetworkMode::None);
        let t = Instant::now();
        let ns = lab.net.attach("quiet").unwrap().unwrap();
        let took = t.elapsed();
        let links = ip_json(Some(&ns), &["link"]);
        assert_eq!(links.len(), 1, "{links:?}");
        assert_eq!(links[0]["ifname"], json!("lo"));
        assert!(links[0]["flags"].as_array().unwrap().contains(&json!("UP")));
        // Its own loopback works; the host's is not it.
        let own = in_netns(&ns, || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            TcpStream::connect(l.local_addr().unwrap()).is_ok()
        });
        assert!(own);
        let local = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(!connects(&ns, local.local_addr().unwrap()));
        assert!(!has_pending(&local));
        assert_eq!(lab.net.resolv_conf(), None);
        let t = Instant::now();
        lab.net.detach("quiet");
        eprintln!("none: attach {took:?}, detach {:?}", t.elapsed());
        assert!(!ns.exists());
        lab.net.detach("quiet");
    }
}
