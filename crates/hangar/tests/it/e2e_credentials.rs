//! `hangar web --credentials-dir`: a plan's remaining `((vars))` are read
//! from the credential manager, the task runs with the values, its output
//! shows `((redacted))` (a secret written in two pieces too), and neither
//! the build's events nor anything web stores on disk holds a value.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::common::{has, Cluster, ADMIN};
use hangar_api::builds::CreateBuild;
use hangar_client::{Client, ClientError};

const SECRET: &str = "s3cr3t-Value-0451-from-a-file";
const PASSWORD: &str = "pw-Field-9931";

fn secret_file(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn plan(params: serde_json::Value, script: &str) -> CreateBuild {
    CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("creds".into()),
        plan: serde_json::json!([{"task": "t", "config": {
            "platform": "linux",
            "params": params,
            "run": {"path": "sh", "args": ["-c", script]}
        }}]),
        artifacts: Default::default(),
        team: None,
    }
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    out.push(path.display().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn a_plan_var_is_read_from_the_credentials_dir_used_and_redacted() {
    let creds = tempfile::tempdir().unwrap();
    secret_file(creds.path(), "main/api-token", &format!("{SECRET}\n"));
    secret_file(
        creds.path(),
        "main/db",
        &format!("user: app\npassword: {PASSWORD}\n"),
    );
    // Every value read is redacted, as Concourse does, even a user name.
    // A pipeline's file is not a one-off build's.
    secret_file(creds.path(), "main/some-pipeline/api-token", "not-this-one");
    let dir_flag = creds.path().display().to_string();
    let c = Cluster::start_with(&["--credentials-dir", &dir_flag]);
    let _w = c.worker("worker-c1");
    c.wait_until("the worker runs", |ws| has(ws, "worker-c1", "running"));
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();

    // An unresolved var refuses the build, named; nothing is created.
    let refused = block(client.create_build(&plan(
        serde_json::json!({"A": "((api-token))", "B": "((nowhere))", "C": "((db.nope))"}),
        "true",
    )));
    match refused {
        Err(ClientError::Api { message, .. }) => assert_eq!(
            message,
            "plan: cannot resolve its vars: undefined vars: nowhere; missing field 'nope' in var: db.nope"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(block(client.builds(10)).unwrap().is_empty());

    let script = r#"
        [ "$TOKEN" = "$EXPECTED_PREFIX-0451-from-a-file" ] && echo "token is right"
        echo "token=$TOKEN user=$DB_USER password=$DB_PASSWORD"
        printf '%s' "${TOKEN%??????????}"; sleep 1; printf '%s\n' "${TOKEN#???????????????????}"
        echo "length ${#TOKEN}"
    "#;
    let build = block(client.create_build(&plan(
        serde_json::json!({
            "TOKEN": "((api-token))",
            "DB_USER": "((db.user))",
            "DB_PASSWORD": "((db.password))",
            "EXPECTED_PREFIX": "s3cr3t-Value",
        }),
        script,
    )))
    .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let out = String::from_utf8_lossy(&watch.stdout).into_owned();
    let err = String::from_utf8_lossy(&watch.stderr).into_owned();
    assert!(watch.status.success(), "{out}\n{err}");
    assert_eq!(
        out,
        format!(
            "token is right\ntoken=((redacted)) user=((redacted)) password=((redacted))\n((redacted))\nlength {}\n",
            SECRET.len()
        )
    );
    assert!(!err.contains(SECRET) && !err.contains(PASSWORD), "{err}");

    // Nothing web answers or stores holds a value: not the events, not the
    // build, not the database files (the plan keeps its references).
    let events = block(client.build_events(build.id, 0, 0)).unwrap();
    let all = format!("{events:?}{:?}", block(client.build(build.id)).unwrap());
    assert!(!all.contains(SECRET) && !all.contains(PASSWORD), "{all}");
    let web_dir = c.dir.path().join("web");
    assert!(!files_holding(&web_dir, "((api-token))").is_empty());
    assert_eq!(files_holding(&web_dir, SECRET), Vec::<String>::new());
    assert_eq!(files_holding(&web_dir, PASSWORD), Vec::<String>::new());

    // `hangar execute` leaves the vars its flags do not give to web's
    // credential manager; a flag still wins over the manager.
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("task.yml"),
        "platform: linux\nparams: {TOKEN: ((api-token)), GIVEN: ((given)), USER: ((db.user))}\n\
         run: {path: sh, args: [-c, 'echo \"t=$TOKEN g=$GIVEN u=$USER n=${#TOKEN}\"']}\n",
    )
    .unwrap();
    let out = c.cli_in(
        work.path(),
        &[
            "execute",
            "-c",
            "task.yml",
            "-v",
            "given=from-flag",
            "-v",
            "db.user=flag-user",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        format!(
            "t=((redacted)) g=from-flag u=flag-user n={}\n",
            SECRET.len()
        )
    );
    let out = c.cli_in(work.path(), &["execute", "-c", "task.yml"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("plan: cannot resolve its vars: undefined vars: given"),
        "{stderr}"
    );

    let logged = std::fs::read_to_string(c.dir.path().join("web.log")).unwrap();
    assert!(!logged.contains(SECRET), "web's log holds the secret");
}

#[test]
fn web_takes_one_credential_manager_and_refuses_what_it_cannot_use() {
    let data = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = crate::common::hangar()
            .args(["web", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data.path().join("web"))
            .args(extra)
            .env("HANGAR_ADMIN_TOKEN", ADMIN)
            .env("HANGAR_WORKER_KEY", crate::common::KEY)
            // Whether this test itself runs in a pod must not matter.
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--credentials-dir", "/tmp", "--credentials-kubernetes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) = run(&[
        "--credentials-kubernetes",
        "--credentials-kubernetes-url",
        "http://x",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--credentials-kubernetes-token-file"), "{err}");
    let (code, err) = run(&["--credentials-kubernetes"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
    let missing = data.path().join("missing");
    let (code, err) = run(&["--credentials-dir", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("credentials dir"), "{err}");
    // Refused before anything was made on disk.
    assert!(!data.path().join("web").exists());
}
