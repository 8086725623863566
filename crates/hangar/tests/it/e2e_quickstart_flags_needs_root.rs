//! quickstart takes the worker's flags for how steps run: a resource types
//! dir of the operator's (here one type of hangar's layout, in place of the
//! built-in ones) and the task network (`none`: a task sees loopback only).

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{hangar, text, Proc};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn quickstart_runs_its_workers_with_the_types_and_network_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let types = d.join("types/echo");
    std::fs::create_dir_all(&types).unwrap();
    for action in ["check", "in", "out"] {
        let p = types.join(action);
        std::fs::write(&p, "#!/bin/sh\necho '[]'\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let data = d.join("hangar-data");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let child = hangar()
        .args(["quickstart", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(&data)
        .arg("--resource-types-dir")
        .arg(d.join("types"))
        .args(["--task-network", "none"])
        .args([
            "--disk-soft-threshold",
            "0.98",
            "--disk-hard-threshold",
            "0.99",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("quickstart.log")).unwrap())
        .spawn()
        .unwrap();
    let _proc = Proc {
        child,
        name: "quickstart".into(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !data.join("admin-token").exists() {
        assert!(Instant::now() < deadline, "quickstart made no admin token");
        std::thread::sleep(Duration::from_millis(50));
    }
    let token = std::fs::read_to_string(data.join("admin-token")).unwrap();
    let cli = |args: &[&str]| -> Output {
        hangar()
            .args(args)
            .current_dir(d)
            .env("HANGAR_URL", &url)
            .env("HANGAR_TOKEN", token.trim())
            .output()
            .unwrap()
    };
    let worker = loop {
        let o = cli(&["workers", "--json"]);
        if o.status.success() {
            let ws: Vec<hangar_api::Worker> = serde_json::from_slice(&o.stdout).unwrap();
            if let Some(w) = ws.into_iter().find(|w| w.state.as_str() == "running") {
                break w;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no worker ran: {}",
            std::fs::read_to_string(d.join("quickstart.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let offered: Vec<String> = worker
        .resource_types
        .iter()
        .map(|t| t.type_name.clone())
        .collect();
    assert_eq!(
        offered,
        ["echo"],
        "the operator's dir in place of the built-in types"
    );

    std::fs::write(
        d.join("net.yml"),
        "platform: linux\nrun: {path: sh, args: [-c, 'echo nics: $(tail -n +3 /proc/net/dev | cut -d: -f1)']}\n",
    )
    .unwrap();
    let run = cli(&["execute", "-c", "net.yml"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("nics: lo\n"), "{out}\n{err}");
}
