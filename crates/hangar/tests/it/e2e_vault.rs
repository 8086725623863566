//! `hangar web --vault-url` against a real OpenBao dev server (`bao`, from
//! `scripts/install-deps`), logging in with AppRole through the flags: a
//! one-off build's vars and then a pipeline job's come from a KV v2 mount
//! (the pipeline's own path before the team's), the tasks run with them
//! and its output shows `((redacted))`.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{hangar, has, text, Cluster, Proc, ADMIN, KEY};
use hangar_api::builds::CreateBuild;
use hangar_client::{Client, ClientError};

const SECRET: &str = "v4ult-Secret-7731-from-kv2";
const PASSWORD: &str = "pw-From-Vault-2210";
/// The pipeline's own secret, under `/concourse/main/app/`: found before
/// the team's.
const PIPELINE_SECRET: &str = "pipeline-Scoped-Secret-5519";

/// A pipeline whose job's task reads its vars from Vault.
const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: t
    config:
      platform: linux
      params:
        TOKEN: ((api-token))
        DB_PASSWORD: ((db.password))
        EXPECTED: pipeline-Scoped-Secret-5519
      run:
        path: sh
        args:
        - -c
        - |
          [ "$TOKEN" = "$EXPECTED" ] && echo pipeline-token-is-right
          echo "t=$TOKEN p=$DB_PASSWORD"
"#;

/// A `bao server -dev` (`hangar_testkit::openbao`), driven here with the
/// `bao` CLI as an operator would; killed with the test.
struct Bao {
    server: hangar_testkit::openbao::Bao,
    url: String,
    home: tempfile::TempDir,
    // The server's process was spawned on it.
    _rt: tokio::runtime::Runtime,
}

impl Bao {
    fn start() -> Bao {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(hangar_testkit::openbao::Bao::start());
        Bao {
            url: server.url.clone(),
            server,
            home: tempfile::tempdir().unwrap(),
            _rt: rt,
        }
    }

    /// `bao ARGS` as root against this server.
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("bao")
            .args(args)
            .env("BAO_ADDR", &self.url)
            .env("BAO_TOKEN", &self.server.root)
            .env("HOME", self.home.path())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert!(o.status.success(), "bao {args:?}: {:?}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    }
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
        name: Some("vault".into()),
        plan: serde_json::json!([{"task": "t", "config": {
            "platform": "linux",
            "params": params,
            "run": {"path": "sh", "args": ["-c", script]}
        }}]),
        artifacts: Default::default(),
        team: None,
    }
}

#[test]
fn e2e_vault_a_one_off_build_and_a_pipeline_run_with_vars_read_from_vault_through_approle() {
    let bao = Bao::start();
    bao.ok(&["secrets", "enable", "-path=concourse", "-version=2", "kv"]);
    bao.ok(&[
        "kv",
        "put",
        "concourse/main/api-token",
        &format!("value={SECRET}"),
    ]);
    bao.ok(&[
        "kv",
        "put",
        "concourse/main/db",
        "user=app",
        &format!("password={PASSWORD}"),
    ]);
    bao.ok(&[
        "kv",
        "put",
        "concourse/main/app/api-token",
        &format!("value={PIPELINE_SECRET}"),
    ]);
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        "path \"concourse/*\" { capabilities = [\"read\"] }\n",
    )
    .unwrap();
    bao.ok(&[
        "policy",
        "write",
        "ci",
        &policy.path().display().to_string(),
    ]);
    bao.ok(&["auth", "enable", "approle"]);
    bao.ok(&[
        "write",
        "auth/approle/role/web",
        "token_policies=ci",
        "token_ttl=2s",
        "token_max_ttl=1h",
    ]);
    let role_id = bao.ok(&["read", "-field=role_id", "auth/approle/role/web/role-id"]);
    let secret_id = bao.ok(&[
        "write",
        "-f",
        "-field=secret_id",
        "auth/approle/role/web/secret-id",
    ]);

    let role_param = format!("role_id:{role_id}");
    let secret_param = format!("secret_id:{secret_id}");
    let c = Cluster::start_with(&[
        "--vault-url",
        &bao.url,
        "--vault-auth-backend",
        "approle",
        "--vault-auth-param",
        &role_param,
        "--vault-auth-param",
        &secret_param,
    ]);
    let _w = c.worker("worker-v1");
    c.wait_until("the worker runs", |ws| has(ws, "worker-v1", "running"));
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();

    match block(client.create_build(&plan(
        serde_json::json!({"A": "((api-token))", "B": "((nowhere))"}),
        "true",
    ))) {
        Err(ClientError::Api { message, .. }) => assert_eq!(
            message,
            "plan: cannot resolve its vars: undefined vars: nowhere"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // Past the token's 2s TTL: web renewed it.
    std::thread::sleep(Duration::from_secs(3));
    let build = block(client.create_build(&plan(
        serde_json::json!({
            "TOKEN": "((api-token))",
            "DB_PASSWORD": "((db.password))",
            "EXPECTED": SECRET,
        }),
        r#"[ "$TOKEN" = "$EXPECTED" ] && echo "token is right"; echo "t=$TOKEN p=$DB_PASSWORD""#,
    )))
    .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = text(&watch);
    assert!(watch.status.success(), "{out}\n{err}");
    assert_eq!(out, "token is right\nt=((redacted)) p=((redacted))\n");
    assert!(!err.contains(SECRET) && !err.contains(PASSWORD), "{err}");
    // A pipeline's job: its vars from Concourse's paths, the pipeline's
    // (`/concourse/main/app/api-token`) before the team's.
    let config = c.dir.path().join("app.yml");
    std::fs::write(&config, PIPELINE).unwrap();
    for args in [
        vec![
            "set-pipeline",
            "-p",
            "app",
            "-c",
            config.to_str().unwrap(),
            "--non-interactive",
        ],
        vec!["unpause-pipeline", "-p", "app"],
    ] {
        let o = c.cli(&args);
        assert!(o.status.success(), "{args:?}: {:?}", text(&o));
    }
    let run = c.cli(&["trigger-job", "-j", "app/build", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("pipeline-token-is-right"), "{out}");
    assert!(out.contains("t=((redacted)) p=((redacted))"), "{out}");
    for hidden in [SECRET, PASSWORD, PIPELINE_SECRET] {
        assert!(
            !out.contains(hidden) && !err.contains(hidden),
            "{out}\n{err}"
        );
    }
    // Web logged its login, never the secret id nor a secret.
    let log = std::fs::read_to_string(c.dir.path().join("web.log")).unwrap();
    assert!(log.contains("logged in to Vault"), "{log}");
    for hidden in [secret_id.as_str(), SECRET, PASSWORD, PIPELINE_SECRET] {
        assert!(!log.contains(hidden), "web.log holds a secret: {log}");
    }
}

#[test]
fn e2e_vault_web_refuses_vault_with_another_manager_or_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let dir_flag = dir.path().display().to_string();
    for (args, want) in [
        (
            vec![
                "--vault-url",
                "http://127.0.0.1:9",
                "--vault-client-token",
                "t",
                "--credentials-dir",
                &dir_flag,
            ],
            "cannot be used with",
        ),
        (
            vec!["--vault-url", "http://127.0.0.1:9"],
            "--vault-url needs --vault-client-token or --vault-auth-backend",
        ),
    ] {
        let log = dir.path().join("web.err");
        let child = hangar()
            .args(["web", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("web"))
            .args(&args)
            .env("HANGAR_ADMIN_TOKEN", ADMIN)
            .env("HANGAR_WORKER_KEY", KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // A web that started would run until killed: bounded wait.
        let code = Proc {
            child,
            name: "web".into(),
        }
        .wait_exit(Duration::from_secs(30));
        let err = std::fs::read_to_string(&log).unwrap();
        assert!(
            code.is_some_and(|c| c != 0) && err.contains(want),
            "{args:?}: {code:?} {err}"
        );
    }
}
