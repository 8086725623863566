//! Vault (or OpenBao) KV secrets, read over Vault's HTTP API with a token
//! or a token from an auth backend (AppRole...), kept alive by [`auth`].
//!
//! Each path is read as Vault's own clients read it: first
//! `sys/internal/ui/mounts/<path>` says which mount holds it and whether
//! that mount is KV v2 (then `<mount>/data/<rest>` is read and the
//! secret is its `data.data`); otherwise `<path>` itself. A 404 means "not
//! here, try the next path"; every other answer that is not a secret (a
//! refusal, a server down, a body that is not the JSON expected, a body
//! too large) is an error naming the var and the path.

pub mod auth;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hangar_core::vars::credentials::vault::{kv2_data_path, VaultLookup};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::CredsError;
use auth::{Session, Token};

/// The largest answer read from Vault: a KV secret is small, and a hostile
/// or broken server must not make web hold an unbounded body.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// How long one request may take, whole.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Concourse's default `--vault-login-timeout`.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// How web gets its Vault token.
#[derive(Clone)]
pub enum Auth {
    /// A token given as is (`--vault-client-token`): renewed while it is
    /// renewable; it cannot be replaced.
    Token(String),
    /// A login with an auth backend (`--vault-auth-backend approle` and
    /// `--vault-auth-param role_id:...`), again when the token's time is up.
    Backend {
        backend: String,
        params: BTreeMap<String, String>,
    },
}

/// Names the backend and its parameters' names, never a value.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::Backend { backend, params } => f
                .debug_struct("Backend")
                .field("backend", backend)
                .field("params", &params.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// What `hangar web --vault-*` configures.
#[derive(Debug, Clone)]
pub struct VaultConfig {
    /// `https://vault:8200` (or `http://`).
    pub url: String,
    /// Vault Enterprise / OpenBao namespace, sent with every request.
    pub namespace: Option<String>,
    /// A PEM bundle to trust instead of the system's roots.
    pub ca_cert: Option<PathBuf>,
    pub auth: Auth,
    /// Log in again after this long even when the token could be renewed.
    pub auth_max_ttl: Option<Duration>,
    /// How long a read waits for the first login.
    pub login_timeout: Duration,
    pub request_timeout: Duration,
    pub path_prefix: String,
    /// Empty: Concourse's defaults.
    pub lookup_templates: Vec<String>,
    pub shared_path: Option<String>,
}

impl VaultConfig {
    /// A configuration with Concourse's defaults.
    pub fn new(url: &str, auth: Auth) -> VaultConfig {
        VaultConfig {
            url: url.to_string(),
            namespace: None,
            ca_cert: None,
            auth,
            auth_max_ttl: None,
            login_timeout: DEFAULT_LOGIN_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            path_prefix: hangar_core::vars::credentials::vault::DEFAULT_PATH_PREFIX.to_string(),
            lookup_templates: Vec::new(),
            shared_path: None,
        }
    }
}

/// The HTTP side: where Vault is and how to ask it.
pub(crate) struct Api {
    base: reqwest::Url,
    namespace: Option<reqwest::header::HeaderValue>,
    client: reqwest::Client,
    timeout: Duration,
}

/// Vault's answer: its status and body (at most [`MAX_RESPONSE_BYTES`]).
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    /// Vault's `errors`, or the start of the body, shortened and without
    /// control characters (a token is never in an error).
    pub(crate) fn message(&self) -> String {
        #[derive(Deserialize)]
        struct Errors {
            errors: Vec<String>,
        }
        let text = match serde_json::from_slice::<Errors>(&self.body) {
            Ok(e) if !e.errors.is_empty() => e.errors.join("; "),
            Ok(_) => String::new(),
            Err(_) => String::from_utf8_lossy(&self.body).into_owned(),
        };
        text.chars().filter(|c| !c.is_control()).take(200).collect()
    }
}

impl Api {
    fn new(config: &VaultConfig) -> Result<Api, CredsError> {
        let fail =
            |why: String| CredsError::Backend(format!("--vault-url {:?}: {why}", config.url));
        let base = reqwest::Url::parse(&config.url).map_err(|e| fail(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(fail("must be http:// or https:// and a host".into()));
        }
        if base.cannot_be_a_base() || base.query().is_some() {
            return Err(fail("must be a base URL".into()));
        }
        let namespace = match config.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => Some(reqwest::header::HeaderValue::from_str(n).map_err(|_| {
                CredsError::Backend(format!("--vault-namespace {n:?} is not a header value"))
            })?),
            None => None,
        };
        let mut builder = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &config.ca_cert {
            let pem = std::fs::read(ca).map_err(|e| {
                CredsError::Backend(format!("cannot read the Vault CA {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                CredsError::Backend(format!("the Vault CA in {}: {e}", ca.display()))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| CredsError::Backend(format!("Vault client: {e}")))?;
        Ok(Api {
            base,
            namespace,
            client,
            timeout: config.request_timeout,
        })
    }

    /// `/v1/<path>`, each segment escaped.
    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().push("v1");
            segments.extend(path.split('/'));
        }
        url
    }

    /// One request, the whole exchange within the timeout and the body
    /// bounded. The error is "why", for the caller to say what was asked.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&Token>,
        body: Option<&Value>,
    ) -> Result<Answer, String> {
        let mut request = self.client.request(method, self.url(path));
        if let Some(t) = token {
            request = request.header("X-Vault-Token", t.header()?);
        }
        if let Some(ns) = &self.namespace {
            request = request.header("X-Vault-Namespace", ns.clone());
        }
        if let Some(b) = body {
            request = request.json(b);
        }
        let exchange = async {
            let mut response = request
                .send()
                .await
                .map_err(|e| format!("cannot reach Vault: {}", without_url(&e)))?;
            let status = response.status().as_u16();
            if response
                .content_length()
                .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
            {
                return Err(format!(
                    "Vault's answer is larger than {MAX_RESPONSE_BYTES} bytes"
                ));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| format!("reading Vault's answer: {}", without_url(&e)))?
            {
                if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(format!(
                        "Vault's answer is larger than {MAX_RESPONSE_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("Vault did not answer within {}ms", self.timeout.as_millis()))?
    }
}

/// reqwest's error without its URL (the message says the path already),
/// with its causes (a certificate refused says so only there).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// Vault's KV secrets, as the Vault credential manager reads them.
/// Cloning shares the client and its session; the session is kept alive
/// until the last clone is dropped.
#[derive(Clone)]
pub struct VaultSecrets {
    url: String,
    lookup: VaultLookup,
    session: Arc<Session>,
    _keeper: Arc<auth::Keeper>,
}

impl VaultSecrets {
    /// Checks the configuration and starts logging in (in the background,
    /// as reads wait for the login up to the login timeout). Must be
    /// called within a Tokio runtime.
    pub fn start(config: VaultConfig) -> Result<VaultSecrets, CredsError> {
        let lookup = VaultLookup::new(
            &config.path_prefix,
            &config.lookup_templates,
            config.shared_path.as_deref(),
        )
        .map_err(|e| CredsError::Backend(format!("Vault: {e}")))?;
        let api = Api::new(&config)?;
        let (session, keeper) = auth::start(api, &config)?;
        Ok(VaultSecrets {
            url: config.url.trim_end_matches('/').to_string(),
            lookup,
            session,
            _keeper: Arc::new(keeper),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn lookup(&self) -> &VaultLookup {
        &self.lookup
    }

    /// How many times web logged in, and renewed its token (for tests and
    /// logs).
    pub fn logins(&self) -> u64 {
        self.session.logins()
    }

    pub fn renewals(&self) -> u64 {
        self.session.renewals()
    }

    /// The secret's data at `path` (as [`VaultLookup::candidates`] gives
    /// it), or `None` when there is none.
    pub async fn read(
        &self,
        path: &str,
        var: &str,
    ) -> Result<Option<Map<String, Value>>, CredsError> {
        let fail =
            |why: String| CredsError::Backend(format!("var {var}: Vault path {path}: {why}"));
        let token = self.session.token().await.map_err(fail)?;
        let api = self.session.api();
        let read_path = match self.kv2_mount(path, &token).await.map_err(fail)? {
            Some(mount) => kv2_data_path(path, &mount).ok_or_else(|| {
                fail(format!(
                    "Vault says the path is in mount {mount:?}, which does not hold it"
                ))
            })?,
            None => path.to_string(),
        };
        let kv2 = read_path != path;
        let answer = api
            .call(reqwest::Method::GET, &read_path, Some(&token), None)
            .await
            .map_err(fail)?;
        match answer.status {
            200 => secret_data(&answer.body, kv2).map_err(fail),
            404 => Ok(None),
            code @ (401 | 403) => Err(fail(format!(
                "Vault refused (HTTP {code}): {}; web's token needs `read` on it",
                answer.message()
            ))),
            code => Err(fail(format!(
                "Vault answered HTTP {code}: {}",
                answer.message()
            ))),
        }
    }

    /// The KV v2 mount holding `path` (`secret/`), or `None` for KV v1 or
    /// no mount: what Vault's own clients ask before a read. A 403 or 404
    /// here is not an answer (an old Vault, a path in no mount, a token
    /// that may not see the mount): the read itself then says.
    async fn kv2_mount(&self, path: &str, token: &Token) -> Result<Option<String>, String> {
        let answer = self
            .session
            .api()
            .call(
                reqwest::Method::GET,
                &format!("sys/internal/ui/mounts/{path}"),
                Some(token),
                None,
            )
            .await
            .map_err(|e| format!("asking for its mount: {e}"))?;
        match answer.status {
            200 => {}
            403 | 404 => return Ok(None),
            code => {
                return Err(format!(
                    "asking for its mount: Vault answered HTTP {code}: {}",
                    answer.message()
                ))
            }
        }
        #[derive(Deserialize)]
        struct Mount {
            data: MountData,
        }
        #[derive(Deserialize)]
        struct MountData {
            #[serde(default)]
            path: String,
            #[serde(default)]
            options: Option<BTreeMap<String, Value>>,
        }
        let mount: Mount = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("Vault's answer about its mount is not a mount: {e}"))?;
        let version = mount
            .data
            .options
            .as_ref()
            .and_then(|o| o.get("version"))
            .and_then(Value::as_str);
        Ok((version == Some("2")).then_some(mount.data.path))
    }
}

/// A read's `data` (KV v1) or `data.data` (KV v2; `null` for a deleted
/// version, which is no secret).
fn secret_data(body: &[u8], kv2: bool) -> Result<Option<Map<String, Value>>, String> {
    #[derive(Deserialize)]
    struct Read {
        data: Option<Value>,
    }
    let read: Read =
        serde_json::from_slice(body).map_err(|e| format!("Vault's answer is not a secret: {e}"))?;
    let data = match (read.data, kv2) {
        (Some(Value::Object(mut m)), true) => match m.remove("data") {
            Some(Value::Object(d)) => return Ok(Some(d)),
            Some(Value::Null) | None => return Ok(None),
            Some(_) => return Err("Vault's KV v2 answer has a data that is not a map".into()),
        },
        (data, _) => data,
    };
    match data {
        Some(Value::Object(m)) => Ok(Some(m)),
        _ => Err("Vault's answer has no data map".into()),
    }
}
