//! Shared by the container test files: a worker's volume and container
//! stores in a temp dir, specs, and the tools the runc tests need.
#![allow(dead_code)]
// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_api::containers::{Container, ContainerSpec, Mount, Runtime};
use hangar_volumes::{DriverKind, Strategy, VolumeManager};
use hangar_worker::containers::{ContainerManager, ContainerOptions};

/// Long enough for any test task on a loaded CI machine.
pub(crate) const WAIT: Duration = Duration::from_secs(60);
pub(crate) const MIB: u64 = 1024 * 1024;

/// Fills a shell variable with 200 MB: far past a 32 MiB limit.
pub(crate) const HOG: &str = r#"x=$(head -c 200000000 /dev/zero | tr '\0' a); echo done"#;

pub(crate) struct Host {
    pub dir: tempfile::TempDir,
    pub volumes: Arc<VolumeManager>,
    pub containers: ContainerManager,
}

impl Host {
    pub(crate) fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let containers =
            ContainerManager::open(&dir.path().join("containers"), volumes.clone()).unwrap();
        Host {
            dir,
            volumes,
            containers,
        }
    }

    /// A worker that runs process containers outside the sandbox, as a
    /// worker that is not root (or lacks runc or cgroups) does.
    pub(crate) fn unsandboxed() -> Host {
        Host::with_options(ContainerOptions {
            sandbox_process: false,
            ..ContainerOptions::default()
        })
    }

    /// A worker that runs process containers in the sandbox too.
    pub(crate) fn sandboxed() -> Host {
        Host::with_options(ContainerOptions {
            sandbox_process: true,
            ..ContainerOptions::default()
        })
    }

    /// A worker that looks for cgroups under `cgroup_root`.
    pub(crate) fn with_cgroup_root(cgroup_root: &Path) -> Host {
        Host::with_options(ContainerOptions {
            cgroup_root: cgroup_root.to_path_buf(),
            ..ContainerOptions::default()
        })
    }

    pub(crate) fn with_options(options: ContainerOptions) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let containers =
            ContainerManager::open_with(&dir.path().join("containers"), volumes.clone(), options)
                .unwrap();
        Host {
            dir,
            volumes,
            containers,
        }
    }

    /// A second manager on the same dir: what a restarted worker opens.
    pub(crate) fn reopen(&self) -> ContainerManager {
        ContainerManager::open(&self.dir.path().join("containers"), self.volumes.clone()).unwrap()
    }

    /// An empty volume; returns its data dir.
    pub(crate) fn volume(&self, handle: &str) -> PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, BTreeMap::new())
            .unwrap()
            .path
    }

    /// The container's directory (tests of crash recovery reach into it).
    pub(crate) fn container_dir(&self, handle: &str) -> PathBuf {
        self.containers.root().join(handle)
    }

    pub(crate) fn log(&self, handle: &str) -> String {
        std::fs::read_to_string(self.containers.log_path(handle).unwrap()).unwrap()
    }

    pub(crate) fn wait_exited(&self, handle: &str) -> Container {
        let c = self.containers.wait(handle, WAIT).unwrap();
        assert_eq!(
            c.state.to_string(),
            "exited",
            "{handle} still running after {WAIT:?}: {c:?}"
        );
        c
    }
}

impl Drop for Host {
    /// Destroys what a test left, so no process or cgroup outlives it.
    fn drop(&mut self) {
        if let Ok(all) = self.containers.list() {
            for c in all {
                let _ = self.containers.destroy(&c.handle);
            }
        }
    }
}

/// Gone, or a zombie waiting for init to reap it: dead either way.
pub(crate) fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next();
            matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => true,
    }
}

/// `sh -c <script>` on the host.
pub(crate) fn process_spec(handle: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        runtime: Runtime::Process,
        rootfs_volume: None,
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: BTreeMap::new(),
        dir: None,
        mounts: vec![],
        memory_limit_bytes: None,
        cpu_shares: None,
        user: None,
        privileged: false,
    }
}

/// `sh -c <script>` in a runc container on `rootfs`.
pub(crate) fn runc_spec(handle: &str, rootfs: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        runtime: Runtime::Runc,
        rootfs_volume: Some(rootfs.into()),
        ..process_spec(handle, script)
    }
}

/// The container's cgroup as its metadata names it: the file holding its
/// CPU weight on this host (`cpu.shares` in the v1 cpu hierarchy,
/// `cpu.weight` on v2), what 512 shares read as there, and the cgroup's
/// path (`/hangar/<name>`, as `/proc/<pid>/cgroup` shows it).
pub(crate) fn cpu_cgroup(host: &Host, handle: &str) -> (PathBuf, &'static str, String) {
    let meta = std::fs::read(host.container_dir(handle).join("meta.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    let path = meta["cgroup"]["path"]
        .as_str()
        .expect("a cgroup")
        .to_string();
    let root = Path::new("/sys/fs/cgroup");
    let (file, weight) = match meta["cgroup"]["version"].as_str() {
        Some("v1") => (root.join("cpu").join(&path).join("cpu.shares"), "512"),
        _ => (root.join(&path).join("cpu.weight"), "59"),
    };
    (file, weight, format!("/{path}"))
}

/// Whether `/proc/<pid>/cgroup` text puts the process in `path` for the
/// cpu controller (v1: a line naming `cpu`; v2: the one `0::` line).
pub(crate) fn in_cpu_cgroup(proc_cgroup: &str, path: &str) -> bool {
    proc_cgroup.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, at) = (fields.next(), fields.next(), fields.next());
        let cpu = controllers.is_some_and(|c| c.is_empty() || c.split(',').any(|c| c == "cpu"));
        cpu && at == Some(path)
    })
}

pub(crate) fn mount(volume: &str, path: &str) -> Mount {
    Mount {
        volume: volume.into(),
        path: path.into(),
        read_only: false,
    }
}

pub(crate) fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Reads a FIFO whole on a thread: returns once a writer has opened,
/// written and closed it (an event, not a sleep), or fails after `WAIT`.
pub(crate) fn read_fifo(path: &Path) -> String {
    let path = path.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(&path));
    });
    rx.recv_timeout(WAIT)
        .expect("nobody wrote the fifo")
        .unwrap()
}

/// Writes a FIFO on a thread (opening blocks until a reader opens it).
pub(crate) fn write_fifo(path: &Path, text: &str) -> std::thread::JoinHandle<()> {
    let (path, text) = (path.to_path_buf(), text.to_string());
    std::thread::spawn(move || std::fs::write(path, text).unwrap())
}

/// Puts a worker's own settings in this process's environment, as a worker
/// started with its key in the environment has them, for the tests that
/// check no task sees them. Every module's tests share this process, and
/// the environment is the process's: it is set once, to the same values
/// whichever test asks first, and never unset, so no test finds it
/// changing under it.
pub(crate) fn worker_settings_in_environment() {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        std::env::set_var("HANGAR_WORKER_KEY", "key-of-the-worker-0123456789");
        std::env::set_var("SOME_WORKER_SETTING", "worker-only");
    });
}

/// runc, or a failure saying what to install.
pub(crate) fn require_runc() {
    let found = [
        "/usr/sbin/runc",
        "/usr/bin/runc",
        "/usr/local/sbin/runc",
        "/sbin/runc",
    ]
    .iter()
    .any(|p| Path::new(p).is_file())
        || std::process::Command::new("runc")
            .arg("--version")
            .output()
            .is_ok();
    assert!(
        found,
        "runc is not installed: the runc tests need it, and root (scripts/install-deps installs it; \
         apt-get install -y runc)"
    );
}

/// The static busybox binary, or a failure saying what to install.
pub(crate) fn static_busybox() -> PathBuf {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("busybox is not installed: the runc tests build their rootfs from a static busybox (scripts/install-deps installs it; apt-get install -y busybox-static)")
        });
    let elf = std::fs::read(&path).unwrap();
    assert!(
        !has_interpreter(&elf),
        "{} is dynamically linked and cannot run alone in a rootfs: scripts/install-deps installs busybox-static",
        path.display()
    );
    path
}

/// Whether a 64-bit little-endian ELF asks for a dynamic loader (PT_INTERP).
fn has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "busybox is not a 64-bit ELF");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| u32_at(phoff + i * phentsize) == 3)
}

/// A rootfs volume: busybox with the applets the tests use.
pub(crate) fn busybox_rootfs(host: &Host, handle: &str) {
    require_runc();
    let busybox = static_busybox();
    let root = host.volume(handle);
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(&busybox, bin.join("busybox")).unwrap();
    for applet in [
        "sh", "ls", "cat", "echo", "head", "tr", "sleep", "pwd", "mkdir", "id", "touch",
    ] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
}

/// The host pid of the one process `comm` whose working directory is under
/// `dir` (a task's `$$` is its pid in its own PID namespace). Waits for it:
/// a task that announced itself may not have exec'd the program yet.
pub(crate) fn wait_for_process_in(dir: &Path, comm: &str) -> u32 {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
                    && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == comm)
            })
            .collect();
        match pids[..] {
            [pid] => return pid,
            [] if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => panic!(
                "expected one {comm} working in {}, found {pids:?}",
                dir.display()
            ),
        }
    }
}
