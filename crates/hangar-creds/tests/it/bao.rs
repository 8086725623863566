//! A real OpenBao dev server (`bao server -dev`, in memory) per test, set
//! up through its HTTP API with its root token. `bao` must be on PATH
//! (`scripts/install-deps` installs it): a test fails without it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub(crate) struct Bao {
    pub(crate) url: String,
    pub(crate) root: String,
    /// The CA of a TLS server (`-dev-tls`).
    pub(crate) ca: Option<std::path::PathBuf>,
    http: reqwest::Client,
    _child: tokio::process::Child,
    _home: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A token nobody guesses: the tempdir's random name and the clock.
fn random_token(home: &std::path::Path) -> String {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    home.hash(&mut h);
    Instant::now().hash(&mut h);
    format!("root-{:016x}", h.finish())
}

impl Bao {
    pub(crate) async fn start() -> Bao {
        Bao::start_with(false).await
    }

    /// With `tls`, on https with a CA of its own (`ca`).
    pub(crate) async fn start_with(tls: bool) -> Bao {
        let home = tempfile::tempdir().unwrap();
        let root = random_token(home.path());
        let port = free_port();
        let log = std::fs::File::create(home.path().join("bao.log")).unwrap();
        let mut args = vec![
            "server".to_string(),
            "-dev".to_string(),
            format!("-dev-root-token-id={root}"),
            format!("-dev-listen-address=127.0.0.1:{port}"),
        ];
        if tls {
            args.push("-dev-tls".into());
            args.push(format!("-dev-tls-cert-dir={}", home.path().display()));
        }
        let child = tokio::process::Command::new("bao")
            .args(&args)
            // The dev server writes its token to ~/.vault-token.
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("`bao` (OpenBao) is not on PATH: run scripts/install-deps");
        let scheme = if tls { "https" } else { "http" };
        let mut bao = Bao {
            url: format!("{scheme}://127.0.0.1:{port}"),
            root,
            ca: tls.then(|| home.path().join("vault-ca.pem")),
            http: reqwest::Client::new(),
            _child: child,
            _home: home,
        };
        let until = Instant::now() + Duration::from_secs(30);
        let mut trusted = !tls;
        loop {
            // The CA is written as the server starts.
            if let Some(pem) = bao
                .ca
                .as_ref()
                .filter(|_| !trusted)
                .and_then(|p| std::fs::read(p).ok())
            {
                if let Ok(cert) = reqwest::Certificate::from_pem(&pem) {
                    bao.http = reqwest::Client::builder()
                        .add_root_certificate(cert)
                        .build()
                        .unwrap();
                    trusted = true;
                }
            }
            let health = bao
                .http
                .get(format!("{}/v1/sys/health", bao.url))
                .send()
                .await;
            if matches!(&health, Ok(r) if r.status().is_success()) {
                return bao;
            }
            if Instant::now() > until {
                let log = std::fs::read_to_string(bao._home.path().join("bao.log"));
                panic!("bao did not come up within 30s: {log:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One call with the root token; panics unless Vault says yes.
    pub(crate) async fn api(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        self.api_in(None, method, path, body).await
    }

    /// [`Bao::api`] in `namespace`.
    pub(crate) async fn api_in(
        &self,
        namespace: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Value {
        let mut request = self
            .http
            .request(method.clone(), format!("{}/v1/{path}", self.url))
            .header("X-Vault-Token", &self.root);
        if let Some(ns) = namespace {
            request = request.header("X-Vault-Namespace", ns);
        }
        if method != reqwest::Method::GET {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.api(reqwest::Method::POST, path, body).await
    }

    /// A KV mount of `version` at `path`.
    pub(crate) async fn mount_kv(&self, path: &str, version: u8) {
        self.post(
            &format!("sys/mounts/{path}"),
            json!({"type": "kv", "options": {"version": version.to_string()}}),
        )
        .await;
    }

    /// A policy that reads everything under `paths` (each a glob).
    pub(crate) async fn read_policy(&self, name: &str, paths: &[&str]) {
        let policy: String = paths
            .iter()
            .map(|p| format!("path \"{p}\" {{ capabilities = [\"read\"] }}\n"))
            .collect();
        self.api(
            reqwest::Method::PUT,
            &format!("sys/policies/acl/{name}"),
            json!({ "policy": policy }),
        )
        .await;
    }

    /// An AppRole `role` with `policy` and these token TTLs; its role id
    /// and a new secret id.
    pub(crate) async fn approle(
        &self,
        role: &str,
        policy: &str,
        ttl: &str,
        max_ttl: &str,
    ) -> (String, String) {
        let enabled = self
            .api(reqwest::Method::GET, "sys/auth", Value::Null)
            .await;
        if enabled["approle/"].is_null() && enabled["data"]["approle/"].is_null() {
            self.post("sys/auth/approle", json!({"type": "approle"}))
                .await;
        }
        self.post(
            &format!("auth/approle/role/{role}"),
            json!({"token_policies": policy, "token_ttl": ttl, "token_max_ttl": max_ttl}),
        )
        .await;
        let role_id = self
            .api(
                reqwest::Method::GET,
                &format!("auth/approle/role/{role}/role-id"),
                Value::Null,
            )
            .await["data"]["role_id"]
            .as_str()
            .unwrap()
            .to_string();
        let secret_id = self
            .post(&format!("auth/approle/role/{role}/secret-id"), json!({}))
            .await["data"]["secret_id"]
            .as_str()
            .unwrap()
            .to_string();
        (role_id, secret_id)
    }
}
