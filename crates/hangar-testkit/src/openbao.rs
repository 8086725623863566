//! A real OpenBao dev server (`bao server -dev`, in memory) for a test,
//! set up through its HTTP API with its root token, and its identity OIDC
//! provider with users who log in with a password (userpass) and belong
//! to groups. `bao` must be on PATH (`scripts/install-deps` installs it):
//! a test fails without it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Bao {
    pub url: String,
    pub root: String,
    http: reqwest::Client,
    _child: tokio::process::Child,
    home: tempfile::TempDir,
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
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A root token nobody guesses: the hasher's keys are random.
fn random_token(home: &std::path::Path) -> String {
    use std::hash::BuildHasher;
    let h = std::collections::hash_map::RandomState::new();
    format!("root-{:016x}", h.hash_one(home))
}

/// The provider's name, in its issuer URL.
const PROVIDER: &str = "hangar";

impl Bao {
    pub async fn start() -> Bao {
        let home = tempfile::tempdir().expect("a temporary dir");
        let root = random_token(home.path());
        let port = free_port();
        let log = std::fs::File::create(home.path().join("bao.log")).expect("bao's log");
        let child = tokio::process::Command::new("bao")
            .args([
                "server",
                "-dev",
                &format!("-dev-root-token-id={root}"),
                &format!("-dev-listen-address=127.0.0.1:{port}"),
            ])
            // The dev server writes its token to ~/.vault-token.
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("bao's log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("`bao` (OpenBao) is not on PATH: run scripts/install-deps");
        let bao = Bao {
            url: format!("http://127.0.0.1:{port}"),
            root,
            http: reqwest::Client::new(),
            _child: child,
            home,
        };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let health = bao
                .http
                .get(format!("{}/v1/sys/health", bao.url))
                .send()
                .await;
            if matches!(&health, Ok(r) if r.status().is_success()) {
                return bao;
            }
            if Instant::now() > until {
                let log = std::fs::read_to_string(bao.home.path().join("bao.log"));
                panic!("bao did not come up within 30s: {log:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.call(None, reqwest::Method::POST, path, body).await
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
