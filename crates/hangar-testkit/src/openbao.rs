//! A real OpenBao dev server (`bao server -dev`, in memory) for a test,
//! set up through its HTTP API with its root token: Vault's KV mounts,
//! policies and AppRole for the credential manager's tests, and its
//! identity OIDC provider with users who log in with a password (userpass)
//! and belong to groups. `bao` must be on PATH (`scripts/install-deps`
//! installs it): a test fails without it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Bao {
    pub url: String,
    pub root: String,
    /// The CA of a TLS server (`-dev-tls`).
    pub ca: Option<std::path::PathBuf>,
    http: reqwest::Client,
    _child: tokio::process::Child,
    _home: tempfile::TempDir,
}

/// An OIDC provider on a [`Bao`], and the client web logs in as.
#[derive(Debug, Clone)]
pub struct OidcProvider {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
}

/// A user of the provider: name, password, groups.
pub struct User<'a> {
    pub name: &'a str,
    pub password: &'a str,
    pub groups: &'a [&'a str],
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

/// The OIDC provider's name, in its issuer URL.
const PROVIDER: &str = "hangar";

impl Bao {
    pub async fn start() -> Bao {
        Bao::start_with(false).await
    }

    /// With `tls`, on https with a CA of its own (`ca`).
    pub async fn start_with(tls: bool) -> Bao {
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
    pub async fn api(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        self.api_in(None, method, path, body).await
    }

    /// [`Bao::api`] in `namespace`.
    pub async fn api_in(
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

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.api(reqwest::Method::POST, path, body).await
    }

    /// A KV mount of `version` at `path`.
    pub async fn mount_kv(&self, path: &str, version: u8) {
        self.post(
            &format!("sys/mounts/{path}"),
            json!({"type": "kv", "options": {"version": version.to_string()}}),
        )
        .await;
    }

    /// A policy that reads everything under `paths` (each a glob).
    pub async fn read_policy(&self, name: &str, paths: &[&str]) {
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
    pub async fn approle(
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

    /// One call with `token` (the root token when `None`); panics unless
    /// OpenBao says yes.
    pub async fn call(
        &self,
        token: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Value {
        let mut request = self
            .http
            .request(method.clone(), format!("{}/v1/{path}", self.url))
            .header("X-Vault-Token", token.unwrap_or(&self.root));
        if method != reqwest::Method::GET {
            request = request.json(&body);
        }
        let response = request.send().await.expect("OpenBao answers");
        let status = response.status();
        let text = response.text().await.expect("OpenBao's answer");
        assert!(status.is_success(), "{method} {path}: {status}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub async fn get(&self, path: &str) -> Value {
        self.call(None, reqwest::Method::GET, path, Value::Null)
            .await
    }

    /// An OIDC provider whose client may send browsers back to
    /// `redirect_uri`, with `users` (userpass logins, each an identity
    /// entity in its groups). Its ID tokens carry `username` and `groups`
    /// claims (the `user` and `groups` scopes), as Concourse's defaults
    /// expect.
    pub async fn oidc_provider(&self, redirect_uri: &str, users: &[User<'_>]) -> OidcProvider {
        self.post("sys/auth/userpass", json!({"type": "userpass"}))
            .await;
        let accessor = self.get("sys/auth").await["userpass/"]["accessor"]
            .as_str()
            .expect("the userpass mount's accessor")
            .to_string();
        let mut entities = Vec::new();
        let mut groups: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for user in users {
            self.post(
                &format!("auth/userpass/users/{}", user.name),
                json!({"password": user.password, "token_policies": "default"}),
            )
            .await;
            let entity = self
                .post("identity/entity", json!({"name": user.name}))
                .await["data"]["id"]
                .as_str()
                .expect("an entity id")
                .to_string();
            self.post(
                "identity/entity-alias",
                json!({"name": user.name, "canonical_id": entity, "mount_accessor": accessor}),
            )
            .await;
            for g in user.groups {
                groups.entry(g).or_default().push(entity.clone());
            }
            entities.push(entity);
        }
        let mut group_ids = Vec::new();
        for (name, members) in groups {
            let id = self
                .post(
                    "identity/group",
                    json!({"name": name, "member_entity_ids": members}),
                )
                .await["data"]["id"]
                .as_str()
                .expect("a group id")
                .to_string();
            group_ids.push(id);
        }
        self.post(
            "identity/oidc/assignment/hangar",
            json!({"entity_ids": entities, "group_ids": group_ids}),
        )
        .await;
        self.post(
            "identity/oidc/key/hangar",
            json!({"allowed_client_ids": "*", "algorithm": "RS256",
                   "verification_ttl": "2h", "rotation_period": "1h"}),
        )
        .await;
        self.post(
            "identity/oidc/client/hangar",
            json!({"redirect_uris": [redirect_uri], "assignments": ["hangar"],
                   "key": "hangar", "id_token_ttl": "30m", "access_token_ttl": "1h"}),
        )
        .await;
        let client = &self.get("identity/oidc/client/hangar").await["data"];
        let client_id = client["client_id"]
            .as_str()
            .expect("a client id")
            .to_string();
        let client_secret = client["client_secret"]
            .as_str()
            .expect("a client secret")
            .to_string();
        self.post(
            "identity/oidc/scope/user",
            json!({"template": r#"{"username": {{identity.entity.name}}}"#}),
        )
        .await;
        self.post(
            "identity/oidc/scope/groups",
            json!({"template": r#"{"groups": {{identity.entity.groups.names}}}"#}),
        )
        .await;
        self.post(
            &format!("identity/oidc/provider/{PROVIDER}"),
            json!({"allowed_client_ids": [client_id], "scopes_supported": ["user", "groups"]}),
        )
        .await;
        OidcProvider {
            issuer: format!("{}/v1/identity/oidc/provider/{PROVIDER}", self.url),
            client_id,
            client_secret,
        }
    }

    /// A Vault token of a userpass user, as its login page would get.
    pub async fn log_in(&self, user: &str, password: &str) -> String {
        let response = self
            .http
            .post(format!("{}/v1/auth/userpass/login/{user}", self.url))
            .json(&json!({ "password": password }))
            .send()
            .await
            .expect("OpenBao answers");
        let body: Value = response.json().await.expect("a login's answer");
        body["auth"]["client_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{user} cannot log in: {body}"))
            .to_string()
    }

    /// What the provider's login page does once `token`'s user has logged
    /// in: answers the authorization request of `authorize_url` (the URL
    /// web sent the browser to, under `/ui/`) through the API. The code
    /// and state, or the provider's error.
    pub async fn authorize(
        &self,
        token: &str,
        authorize_url: &str,
    ) -> Result<(String, String), String> {
        let query = authorize_url
            .split_once('?')
            .map(|(_, q)| q)
            .ok_or("an authorization URL without a query")?;
        let response = self
            .http
            .get(format!(
                "{}/v1/identity/oidc/provider/{PROVIDER}/authorize?{query}",
                self.url
            ))
            .header("X-Vault-Token", token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        match (body["code"].as_str(), body["state"].as_str()) {
            (Some(code), Some(state)) => Ok((code.to_string(), state.to_string())),
            _ => Err(body.to_string()),
        }
    }
}
