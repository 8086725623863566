//! What a task can reach, end to end with real processes run as root: web
//! and a worker given their secrets in files, and quickstart. A task tries
//! the worker's and web's environment, the secrets, the database and the
//! work dir, and is refused each; it runs as an unprivileged user with an
//! environment of its own. Secret files open to other users are refused.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{hangar, has, Cluster, Proc, ADMIN, KEY};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn secret_file(path: &Path, value: &str, mode: u32) {
    std::fs::write(path, value).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A task (as JSON, which is YAML) that tries each command and prints
/// `REACHED` or `refused`, then its uid and environment.
fn probe_task(tries: &[String]) -> String {
    let mut script = String::from(
        "try() { if \"$@\" >/dev/null 2>&1; then echo \"REACHED: $*\"; else echo \"refused: $*\"; fi; }\n",
    );
    for t in tries {
        script.push_str(&format!("try {t}\n"));
    }
    // The host uid the task runs as: its uid through its uid_map (in the
    // sandbox, root inside is a high uid outside).
    script.push_str(
        "u=$(id -u); awk -v u=\"$u\" '$1 <= u && u < $1 + $3 {print \"uid=\" $2 + u - $1; exit}' /proc/self/uid_map\n",
    );
    script.push_str("env | sed 's/^/env: /'\n");
    serde_json::json!({
        "platform": "linux",
        "params": {"GREETING": "hello"},
        "run": {"path": "sh", "args": ["-c", script]},
    })
    .to_string()
}

/// Runs the probe with `hangar execute` and checks every try was refused.
fn run_probe(c: &Cluster, tries: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("probe.yml"), probe_task(tries)).unwrap();
    let o = c.cli_in(dir.path(), &["execute", "-c", "probe.yml"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    let reached: Vec<&str> = out.lines().filter(|l| l.contains("REACHED")).collect();
    assert!(reached.is_empty(), "the task reached {reached:?}\n{out}");
    assert_eq!(out.matches("refused: ").count(), tries.len(), "{out}");
    let uid: u32 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("uid="))
        .unwrap_or_else(|| panic!("no uid in {out}"))
        .parse()
        .unwrap();
    assert!(uid >= 2_000_000, "the task ran as uid {uid}\n{out}");
    assert!(!out.contains("env: HANGAR_"), "{out}");
    assert!(out.contains("env: GREETING=hello"), "{out}");
    out
}

fn wait_for_api(c: &Cluster, worker: &str) {
    c.wait_until("the worker runs", |ws| has(ws, worker, "running"));
}

#[test]
fn a_task_cannot_reach_the_secrets_database_environment_or_work_dir_of_web_and_worker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    secret_file(&d.join("admin-token"), ADMIN, 0o600);
    secret_file(&d.join("worker-key"), KEY, 0o400);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let web = hangar()
        .args(["web", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(d.join("web"))
        .arg("--admin-token-file")
        .arg(d.join("admin-token"))
        .env("HANGAR_WORKER_KEY_FILE", d.join("worker-key"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("web.log")).unwrap())
        .spawn()
        .unwrap();
    let c = Cluster {
        dir,
        url: url.clone(),
        web: Proc {
            child: web,
            name: "web".into(),
        },
    };
    let d = c.dir.path();
    let work = d.join("workers/iso");
    std::fs::create_dir_all(&work).unwrap();
    let worker = hangar()
        .args(["worker", "--name", "iso", "--web", &url])
        .args(["--api-bind", "127.0.0.1:0", "--volume-driver", "naive"])
        .args([
            "--disk-soft-threshold",
            "0.98",
            "--disk-hard-threshold",
            "0.99",
        ])
        .arg("--work-dir")
        .arg(&work)
        .arg("--worker-key-file")
        .arg(d.join("worker-key"))
        // A setting of the worker's that no task may see.
        .env("HANGAR_REPORT_INTERVAL", "10s")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("iso.log")).unwrap())
        .spawn()
        .unwrap();
    let worker = Proc {
        child: worker,
        name: "iso".into(),
    };
    wait_for_api(&c, "iso");
    // web made its data dir and database the owner's only.
    assert_eq!(mode(&d.join("web")), 0o700);
    assert_eq!(mode(&d.join("web/hangar.db")), 0o600);

    let (wpid, webpid) = (worker.child.id(), c.web.child.id());
    let (d, w) = (d.display(), work.display());
    let out = run_probe(
        &c,
        &[
            format!("cat /proc/{wpid}/environ"),
            format!("cat /proc/{webpid}/environ"),
            format!("cat /proc/{wpid}/maps"),
            format!("cat {d}/admin-token"),
            format!("cat {d}/worker-key"),
            format!("cat {d}/web/hangar.db"),
            format!("ls {d}/web"),
            format!("ls {w}"),
            format!("ls {w}/volumes"),
            format!("cat {w}/state-identity"),
            // The worker's volumes as seen from a working dir in its
            // containers dir (outside the sandbox).
            "ls ../../../volumes".into(),
        ],
    );
    assert!(!out.contains("private-setting"), "{out}");
}

#[test]
fn secret_files_open_to_other_users_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    secret_file(&d.join("worker-key"), KEY, 0o644);
    let out = hangar()
        .args(["worker", "--name", "loose", "--web", "http://127.0.0.1:9"])
        .arg("--work-dir")
        .arg(d.join("work"))
        .arg("--worker-key-file")
        .arg(d.join("worker-key"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("open to other users (mode 0644)") && err.contains("chmod 600"),
        "{err}"
    );
    // Refused before anything was made.
    assert!(!d.join("work").exists());

    secret_file(&d.join("admin-token"), ADMIN, 0o604);
    let out = hangar()
        .args(["web", "--bind", "127.0.0.1:0", "--worker-key", KEY])
        .arg("--data-dir")
        .arg(d.join("web"))
        .arg("--admin-token-file")
        .arg(d.join("admin-token"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("open to other users (mode 0604)"), "{err}");
    assert!(!d.join("web").exists());
}

#[test]
fn quickstarts_secrets_and_database_are_out_of_a_tasks_reach() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("hangar-data");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let child = hangar()
        .args(["quickstart", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--disk-soft-threshold",
            "0.98",
            "--disk-hard-threshold",
            "0.99",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("quickstart.log")).unwrap())
        .spawn()
        .unwrap();
    let proc = Proc {
        child,
        name: "quickstart".into(),
    };
    // quickstart writes its token before it serves.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !data.join("admin-token").exists() {
        assert!(Instant::now() < deadline, "quickstart made no admin token");
        std::thread::sleep(Duration::from_millis(50));
    }
    let token = std::fs::read_to_string(data.join("admin-token")).unwrap();
    let c = QuickCluster {
        url,
        token,
        _proc: proc,
        dir,
    };
    c.wait_running("quickstart-worker-1");

    for (path, want) in [
        ("", 0o700),
        ("admin-token", 0o600),
        ("worker-key", 0o600),
        ("hangar.db", 0o600),
        ("workers", 0o700),
    ] {
        assert_eq!(mode(&data.join(path)), want, "{path}");
        assert_eq!(std::fs::metadata(data.join(path)).unwrap().uid(), 0);
    }
    let q = data.display();
    let tries = [
        format!("cat {q}/admin-token"),
        format!("cat {q}/worker-key"),
        format!("cat {q}/hangar.db"),
        format!("ls {q}"),
        format!("ls {q}/workers"),
        // From the working dir: work, <handle>, containers, the worker's
        // dir, workers, the data dir.
        "cat ../../../../../admin-token".into(),
        "cat ../../../../../hangar.db".into(),
        "cat ../../../../admin-token".into(),
        "ls ../../../../workers".into(),
    ];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("probe.yml"), probe_task(&tries)).unwrap();
    let o = hangar()
        .args(["execute", "-c", "probe.yml"])
        .current_dir(dir.path())
        .env("HANGAR_URL", &c.url)
        .env("HANGAR_TOKEN", c.token.trim())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.contains("REACHED"), "{out}");
    assert_eq!(out.matches("refused: ").count(), tries.len(), "{out}");
    assert!(out.contains("uid=2000000"), "{out}");
}

struct QuickCluster {
    url: String,
    token: String,
    _proc: Proc,
    dir: tempfile::TempDir,
}

impl QuickCluster {
    fn wait_running(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = hangar()
                .args(["workers", "--json"])
                .env("HANGAR_URL", &self.url)
                .env("HANGAR_TOKEN", self.token.trim())
                .output()
                .unwrap();
            if o.status.success() {
                let ws: Vec<hangar_api::Worker> = serde_json::from_slice(&o.stdout).unwrap();
                if has(&ws, name, "running") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} never ran: {}",
                std::fs::read_to_string(self.dir.path().join("quickstart.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
