//! `hangar execute -v/-y/-l`: a task config's `((vars))` interpolated by the
//! CLI before anything is sent, an undefined var named before any upload,
//! and no secret in what hangar itself writes to the build log.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Output;

use crate::common::{has, Cluster};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

const SECRET: &str = "s3cr3t-Value-0451";

const TASK: &str = r#"
platform: linux
inputs: [{name: src}]
params:
  TOKEN: ((creds.password))
  URL: https://((host)):((port))/api
  COUNT: ((count))
  DB_USER: ((db.user))
  FROM_FILE: ((from-file))
  OVERRIDDEN: ((overridden))
run:
  path: sh
  args:
  - -c
  - |
    case "$TOKEN" in *'(('*) echo "token passed through literally";; esac
    [ -n "$TOKEN" ] && echo "token has ${#TOKEN} characters"
    echo "url=$URL count=$COUNT db-user=$DB_USER from-file=$FROM_FILE overridden=$OVERRIDDEN"
    cat src/in.txt
"#;

#[test]
fn vars_from_flags_and_files_fill_the_task_config() {
    let c = Cluster::start();
    let _w = c.worker("worker-v1");
    c.wait_until("the worker runs", |ws| has(ws, "worker-v1", "running"));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "task.yml", TASK);
    write(dir.path(), "src/in.txt", "the input\n");
    write(
        dir.path(),
        "vars.yml",
        "from-file: first\noverridden: from-first-file\nhost: example.org\n",
    );
    write(
        dir.path(),
        "later.yml",
        "overridden: from-later-file\nport: 8443\n",
    );
    let secret_var = format!("creds.password={SECRET}");

    // Undefined vars: every one named, nothing uploaded or created.
    let out = c.cli_in(
        dir.path(),
        &["execute", "-c", "task.yml", "-v", &secret_var],
    );
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "undefined vars: count, db.user, from-file, host, overridden, port (give each with -v"
        ),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
    let volumes = c.cli(&["volumes", "--json"]);
    assert_eq!(String::from_utf8_lossy(&volumes.stdout).trim(), "[]");

    let out = c.cli_in(
        dir.path(),
        &[
            "execute",
            "-c",
            "task.yml",
            "-i",
            "src=src",
            "-v",
            &secret_var,
            "-l",
            "vars.yml",
            "-l",
            "later.yml",
            "-y",
            "count=3",
            "-y",
            "db={host: h, user: app}",
            "-v",
            "overridden=from-flag",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("token has {} characters", SECRET.len())),
        "{stdout}"
    );
    assert!(!stdout.contains("passed through literally"), "{stdout}");
    // A YAML var keeps its type, and a field of a map var can be taken.
    assert!(
        stdout.contains(
            "url=https://example.org:8443/api count=3 db-user=app from-file=first overridden=from-flag"
        ),
        "{stdout}"
    );
    // Nothing hangar writes about the build carries the secret: not the
    // lines it prints, not the build's events, not web's or the worker's log.
    assert!(!stderr.contains(SECRET), "{stderr}");
    let builds: Vec<hangar_api::builds::Build> =
        serde_json::from_slice(&c.cli(&["builds", "--json"]).stdout).unwrap();
    let id = builds[0].id.to_string();
    let watched = c.cli(&["watch", "-b", &id]);
    let (log, infra) = text(&watched);
    assert!(
        !log.contains(SECRET) && !infra.contains(SECRET),
        "{log}\n{infra}"
    );
    for name in ["web.log", "worker-v1.log"] {
        let logged = std::fs::read_to_string(c.dir.path().join(name)).unwrap();
        assert!(!logged.contains(SECRET), "{name} holds the secret");
    }
}

#[test]
fn a_value_that_holds_a_var_is_refused_before_anything_is_sent() {
    let c = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "task.yml",
        "platform: linux\nparams: {A: ((a))}\nrun: {path: 'true'}\n",
    );
    let out = c.cli_in(dir.path(), &["execute", "-c", "task.yml", "-v", "a=((b))"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("a var's value holds ((b))"), "{err}");
    let builds = c.cli(&["builds", "--json"]);
    assert_eq!(String::from_utf8_lossy(&builds.stdout).trim(), "[]");
}
