use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hangar_volumes::DriverKind;
use hangar_worker::{AgentExit, WorkerConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::duration;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The worker's name; a pod recreated under the same name is the same worker.
    #[arg(long, env = "HANGAR_NAME")]
    pub name: String,
    /// Where the worker keeps its volumes and its state identity.
    #[arg(long, env = "HANGAR_WORK_DIR")]
    pub work_dir: PathBuf,
    /// Web's URL.
    #[arg(long, env = "HANGAR_WEB")]
    pub web: String,
    /// The secret web accepts registrations with.
    #[arg(
        long,
        env = "HANGAR_WORKER_KEY",
        hide_env_values = true,
        required_unless_present = "worker_key_file",
        conflicts_with = "worker_key_file"
    )]
    pub worker_key: Option<String>,
    /// A file holding the worker key (not readable by other users), so the
    /// key is in neither the command line nor the environment. Read again
    /// at each registration: in Kubernetes it may be the pod's projected
    /// service-account token (web's --kubernetes-worker-account).
    #[arg(long, env = "HANGAR_WORKER_KEY_FILE")]
    pub worker_key_file: Option<PathBuf>,
    /// The user process tasks run as when the worker is root and the task
    /// sets no run.user: uid[:gid] or a name from /etc/passwd. Each running
    /// container takes the next free uid (and gid) from this one, so no two
    /// tasks share a user.
    #[arg(long, env = "HANGAR_TASK_USER", default_value = "2000000:2000000", value_parser = parse_task_user)]
    pub task_user: hangar_core::users::Ids,
    /// A host directory `import` volumes (a task's rootfs_uri) may copy
    /// from; repeat for more. Without one, imports are refused.
    #[arg(
        long = "allow-import-dir",
        env = "HANGAR_ALLOW_IMPORT_DIRS",
        value_delimiter = ','
    )]
    pub allow_import_dirs: Vec<PathBuf>,
    #[arg(long, env = "HANGAR_PLATFORM", default_value = std::env::consts::OS)]
    pub platform: String,
    /// Tags steps can ask for; repeat the flag or separate with commas.
    #[arg(long = "tag", env = "HANGAR_TAGS", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Serve only this team's builds.
    #[arg(long, env = "HANGAR_TEAM")]
    pub team: Option<String>,
    /// The worker's state does not outlive it: web removes it, rather than
    /// stalls it, when it goes silent.
    #[arg(long, env = "HANGAR_EPHEMERAL")]
    pub ephemeral: bool,
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[arg(long, env = "HANGAR_HEARTBEAT_INTERVAL", default_value = "5s", value_parser = duration::parse)]
    pub heartbeat_interval: Duration,
    /// How often the worker reports its full list of volumes to web.
    #[arg(long, env = "HANGAR_REPORT_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub report_interval: Duration,
    /// Volume driver: auto (overlay when it works here, else naive), naive or overlay.
    #[arg(long, env = "HANGAR_VOLUME_DRIVER", default_value = "auto", value_parser = parse_driver)]
    pub volume_driver: DriverChoice,
    /// Where the worker's volume API listens.
    #[arg(long, env = "HANGAR_API_BIND", default_value = "127.0.0.1:7788")]
    pub api_bind: String,
    /// The URL web reaches the volume API at (default: http://<api-bind>);
    /// needed when --api-bind is 0.0.0.0, e.g. the pod IP on Kubernetes.
    #[arg(long, env = "HANGAR_API_URL")]
    pub api_url: Option<String>,
    #[command(flatten)]
    pub health: HealthArgs,
    #[command(flatten)]
    pub http: super::http_flags::HttpFlags,
}

/// `auto` is `None`: the worker tries the bridge at start.
/// How a worker runs its steps: the sandbox's network, limits and what it
/// allows, and the base resource types it offers. `worker` and
/// `quickstart` take the same flags.
#[derive(clap::Args, Debug)]
pub(crate) struct TaskArgs {
    /// A host directory the built-in resource types' actions may read, at
    /// its own path and read-only (a local repository as a `git` uri);
    /// repeat for more. Where those actions run in the sandbox they see
    /// nothing else of the host's disk.
    #[arg(
        long = "allow-resource-dir",
        env = "HANGAR_ALLOW_RESOURCE_DIRS",
        value_delimiter = ','
    )]
    pub allow_resource_dirs: Vec<PathBuf>,
    /// Run privileged steps (`privileged: true` on a task step, a
    /// privileged resource type, `execute --privileged`): they run as real
    /// root with all capabilities, which is root on this host. Off by
    /// default: web places no privileged step here and the worker refuses
    /// one that arrives anyway.
    #[arg(long, env = "HANGAR_ALLOW_PRIVILEGED")]
    pub allow_privileged: bool,
    /// How task containers are networked: bridge (their own network
    /// namespace on a host bridge, NAT to the outside, the host and other
    /// containers unreachable), none (loopback only) or host (the host's
    /// network: no isolation). auto: bridge where it works (root, runc,
    /// the CNI plugins and iptables), else loopback only, with a warning.
    #[arg(long, env = "HANGAR_TASK_NETWORK", default_value = "auto", value_parser = parse_network)]
    pub task_network: NetworkChoice,
    /// The IPv4 subnet task containers get addresses from (bridge).
    #[arg(long, env = "HANGAR_TASK_NETWORK_SUBNET", default_value = hangar_worker::containers::DEFAULT_TASK_SUBNET)]
    pub task_network_subnet: String,
    /// The host bridge task containers are on (bridge); the workers of one
    /// host share it.
    #[arg(long, env = "HANGAR_TASK_NETWORK_BRIDGE", default_value = hangar_worker::containers::DEFAULT_TASK_BRIDGE)]
    pub task_network_bridge: String,
    /// Run process tasks (no image) outside the sandbox: as a user of their
    /// own on the host, with the host's network and its /tmp; and the
    /// built-in resource types' actions as host programs of the worker's
    /// user. Only for a host where runc cannot run, or trusted pipelines; a
    /// worker that is not root, or has no runc or cgroups, runs them so
    /// anyway.
    #[arg(long, env = "HANGAR_NO_PROCESS_SANDBOX")]
    pub no_process_sandbox: bool,
    /// The most tasks (processes and threads) one container may run, so a
    /// fork bomb stops at it instead of taking the worker's; 0: no limit.
    #[arg(long, env = "HANGAR_CONTAINER_PIDS_LIMIT", default_value_t = hangar_worker::containers::DEFAULT_PIDS_LIMIT)]
    pub container_pids_limit: u64,
    /// A directory of base resource types (each a directory with check, in,
    /// out, or Concourse's resource_metadata.json beside rootfs.tgz or
    /// rootfs/: see docs/resource-types.md). By default the types shipped
    /// with hangar (docker-image, git, mock, registry-image, time) are installed in
    /// <work-dir>/resource-types and used.
    #[arg(long, env = "HANGAR_RESOURCE_TYPES_DIR")]
    pub resource_types_dir: Option<PathBuf>,
}

impl TaskArgs {
    /// The base resource types dir: the one given, else hangar's own
    /// installed under `work_dir`.
    pub(crate) fn resource_types_dir(&self, work_dir: &std::path::Path) -> anyhow::Result<PathBuf> {
        match &self.resource_types_dir {
            Some(dir) => Ok(dir.clone()),
            None => builtin_resource_types(work_dir),
        }
    }

    pub(crate) fn task_network(&self) -> hangar_worker::containers::TaskNetworkConfig {
        hangar_worker::containers::TaskNetworkConfig {
            mode: self.task_network.0,
            subnet: self.task_network_subnet.clone(),
            bridge: self.task_network_bridge.clone(),
        }
    }

    pub(crate) fn pids_limit(&self) -> Option<u64> {
        (self.container_pids_limit > 0).then_some(self.container_pids_limit)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct NetworkChoice(Option<hangar_worker::containers::NetworkMode>);

fn parse_network(s: &str) -> Result<NetworkChoice, String> {
    match s {
        "auto" => Ok(NetworkChoice(None)),
        other => other
            .parse()
            .map(|m| NetworkChoice(Some(m)))
            .map_err(|_| format!("must be auto, bridge, none or host, not {other:?}")),
    }
}

/// `auto` is `None`: the worker probes for overlay at start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DriverChoice(Option<DriverKind>);

/// What the worker watches of itself, shared by `worker` and `quickstart`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HealthArgs {
    /// The memory the worker may use (e.g. 4GiB); default its cgroup's
    /// limit, else the host's memory. On Kubernetes, its pod limit.
    #[arg(long, env = "HANGAR_MEMORY_LIMIT", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// Above this fraction of its memory (and of its disk, unless
    /// --disk-soft-threshold says otherwise), the worker takes no new work.
    #[arg(long, env = "HANGAR_SOFT_THRESHOLD", default_value_t = 0.80, value_parser = parse_fraction)]
    pub soft_threshold: f64,
    /// Above this fraction, it lands itself until the pressure clears.
    #[arg(long, env = "HANGAR_HARD_THRESHOLD", default_value_t = 0.95, value_parser = parse_fraction)]
    pub hard_threshold: f64,
    /// The soft threshold for the work dir's disk; default --soft-threshold.
    /// A disk fills slowly and is often shared: some want it higher.
    #[arg(long, env = "HANGAR_DISK_SOFT_THRESHOLD", value_parser = parse_fraction)]
    pub disk_soft_threshold: Option<f64>,
    /// The hard threshold for the work dir's disk; default --hard-threshold.
    #[arg(long, env = "HANGAR_DISK_HARD_THRESHOLD", value_parser = parse_fraction)]
    pub disk_hard_threshold: Option<f64>,
    /// The memory limit of a container whose task sets none (applied where
    /// the worker can enforce limits).
    #[arg(long, env = "HANGAR_DEFAULT_CONTAINER_MEMORY", default_value = "2GiB", value_parser = parse_size)]
    pub default_container_memory: u64,
    /// How often the worker checks itself (work dir, a trivial container, web).
    #[arg(long, env = "HANGAR_HEALTH_CHECK_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub health_check_interval: Duration,
}

impl HealthArgs {
    pub(crate) fn config(
        &self,
        heartbeat_interval: Duration,
    ) -> anyhow::Result<hangar_worker::health::HealthConfig> {
        if self.soft_threshold >= self.hard_threshold {
            anyhow::bail!("--soft-threshold must be below --hard-threshold");
        }
        let disk_soft = self.disk_soft_threshold.unwrap_or(self.soft_threshold);
        let disk_hard = self.disk_hard_threshold.unwrap_or(self.hard_threshold);
        if disk_soft >= disk_hard {
            anyhow::bail!(
                "the disk's soft threshold ({disk_soft}) must be below its hard threshold ({disk_hard})"
            );
        }
        if self.health_check_interval.is_zero() {
            anyhow::bail!("--health-check-interval must be more than 0");
        }
        Ok(hangar_worker::health::HealthConfig {
            memory_limit: self.memory_limit,
            memory_thresholds: hangar_core::pressure::Thresholds {
                soft: self.soft_threshold,
                hard: self.hard_threshold,
                hysteresis: 0.05,
            },
            disk_thresholds: hangar_core::pressure::Thresholds {
                soft: disk_soft,
                hard: disk_hard,
                hysteresis: 0.05,
            },
            check_interval: self.health_check_interval,
            web_timeout: heartbeat_interval * 3,
            default_container_memory: Some(self.default_container_memory),
        })
    }
}

fn parse_task_user(s: &str) -> Result<hangar_core::users::Ids, String> {
    use hangar_core::users::{parse_user, resolve_user};
    let passwd = std::fs::read_to_string("/etc/passwd").ok();
    let ids = resolve_user(&parse_user(s)?, passwd.as_deref())?;
    if ids.uid == 0 || ids.gid == 0 {
        return Err("tasks must not run as root (uid or gid 0)".into());
    }
    Ok(ids)
}

fn parse_size(s: &str) -> Result<u64, String> {
    hangar_core::task::parse_memory_size(s)
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let f: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.05..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("{f} is not a fraction between 0.05 and 1"))
    }
}

fn parse_driver(s: &str) -> Result<DriverChoice, String> {
    match s {
        "auto" => Ok(DriverChoice(None)),
        "naive" => Ok(DriverChoice(Some(DriverKind::Naive))),
        "overlay" => Ok(DriverChoice(Some(DriverKind::Overlay))),
        other => Err(format!(
            "unknown volume driver {other:?}: use auto, naive or overlay"
        )),
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::init_logging();
    if args.heartbeat_interval.is_zero() || args.report_interval.is_zero() {
        anyhow::bail!("--heartbeat-interval and --report-interval must be more than 0");
    }
    // The key first: a refused key file leaves nothing made on disk.
    let worker_key = crate::secrets::flag_or_file(
        args.worker_key,
        args.worker_key_file.as_deref(),
        "--worker-key",
    )?;
    let worker_key_file = args.worker_key_file.clone();
    let resource_types_dir = args.tasks.resource_types_dir(&args.work_dir)?;
    let config = WorkerConfig {
        name: args.name,
        work_dir: args.work_dir,
        web_url: args.web,
        worker_key,
        worker_key_file,
        http_limits: args.http.limits(hangar_http::Limits::worker())?,
        platform: args.platform,
        tags: args.tags,
        team: args.team,
        ephemeral: args.ephemeral,
        heartbeat_interval: args.heartbeat_interval,
        resource_types_dir: Some(resource_types_dir),
        volume_driver: args.volume_driver.0,
        api_bind: args.api_bind,
        api_url: args.api_url,
        report_interval: args.report_interval,
        health: args.health.config(args.heartbeat_interval)?,
        task_user: args.task_user,
        allow_import_dirs: args.allow_import_dirs,
        allow_resource_dirs: args.tasks.allow_resource_dirs.clone(),
        allow_privileged: args.tasks.allow_privileged,
        task_network: args.tasks.task_network(),
        process_sandbox: !args.tasks.no_process_sandbox,
        pids_limit: args.tasks.pids_limit(),
    };
    let shutdown = CancellationToken::new();
    let (tx, rx) = mpsc::channel(4);
    crate::signals::stop_on_terminate(shutdown.clone())?;
    crate::signals::worker_commands(tx, shutdown.clone())?;
    let exit = hangar_worker::run(config, rx, shutdown.clone()).await;
    shutdown.cancel();
    match exit? {
        AgentExit::Superseded(why) => {
            eprintln!("error: {why}");
            // A distinct code so a supervisor can tell a fenced zombie apart.
            Ok(ExitCode::from(3))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Installs the resource types shipped with hangar under the work dir, as
/// small scripts that run this binary.
pub(crate) fn builtin_resource_types(work_dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let dir = work_dir.join("resource-types");
    let exe = std::env::current_exe().context("find the hangar binary")?;
    hangar_resources::install_builtin_types(&dir, &exe)
        .with_context(|| format!("install resource types in {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::HealthArgs;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        health: HealthArgs,
    }

    fn config(args: &[&str]) -> Result<hangar_worker::health::HealthConfig, String> {
        let flags = Flags::try_parse_from(std::iter::once("worker").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        flags
            .health
            .config(Duration::from_secs(5))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn disk_thresholds_default_to_the_memory_ones_and_may_differ() {
        let c = config(&["--soft-threshold", "0.7", "--hard-threshold", "0.9"]).unwrap();
        assert_eq!((c.disk_thresholds.soft, c.disk_thresholds.hard), (0.7, 0.9));
        let c = config(&[
            "--disk-soft-threshold",
            "0.9",
            "--disk-hard-threshold",
            "0.97",
        ])
        .unwrap();
        assert_eq!(
            (c.memory_thresholds.soft, c.memory_thresholds.hard),
            (0.8, 0.95)
        );
        assert_eq!(
            (c.disk_thresholds.soft, c.disk_thresholds.hard),
            (0.9, 0.97)
        );
    }

    #[test]
    fn thresholds_out_of_order_or_range_are_refused_clearly() {
        let cases: [(&[&str], &str); 4] = [
            (
                &["--soft-threshold", "0.96"],
                "--soft-threshold must be below",
            ),
            (
                &["--disk-soft-threshold", "0.99"],
                "the disk's soft threshold (0.99)",
            ),
            (
                &["--disk-hard-threshold", "0.5"],
                "must be below its hard threshold (0.5)",
            ),
            (&["--disk-soft-threshold", "1.5"], "1.5"),
        ];
        for (args, expected) in cases {
            let err = config(args).expect_err(&format!("{args:?} was accepted"));
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }
}
