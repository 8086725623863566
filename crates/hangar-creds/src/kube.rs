//! Kubernetes secrets, read from the API server with web's service account
//! (in a pod) or an explicit URL and token file.
//!
//! `GET /api/v1/namespaces/{ns}/secrets/{name}`; the secret's `data` is
//! base64 and decoded here. 404 means "not here, try the next name"; every
//! other answer that is not a secret (401/403 from RBAC, 5xx, a timeout, a
//! body that does not decode) is an error naming the var and the secret,
//! so the build fails rather than run without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use hangar_core::vars::credentials::KubeSecret;
use serde::Deserialize;

use crate::CredsError;

/// Where Kubernetes mounts a pod's service account.
pub const DEFAULT_SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The largest secret object read (Kubernetes itself caps a secret at
/// 1 MiB of data; base64 and JSON make the object larger).
pub const MAX_SECRET_BYTES: usize = 2 * 1024 * 1024;

/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach the API server.
pub struct KubeSecrets {
    api_base: String,
    token_file: PathBuf,
    namespace_prefix: String,
    client: reqwest::Client,
    /// How long one request may take, whole.
    timeout: Duration,
}

impl KubeSecrets {
    /// In a pod: `KUBERNETES_SERVICE_HOST`/`PORT`, the service account's
    /// token and CA.
    pub fn in_cluster(
        var: impl Fn(&str) -> Option<String>,
        sa_dir: &Path,
        namespace_prefix: &str,
    ) -> Result<KubeSecrets, CredsError> {
        let non_empty = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let host = non_empty("KUBERNETES_SERVICE_HOST").ok_or_else(|| {
            CredsError::Backend(
                "--credentials-kubernetes: KUBERNETES_SERVICE_HOST is not set (not in a pod); \
                 give --credentials-kubernetes-url and --credentials-kubernetes-token-file"
                    .into(),
            )
        })?;
        let port = non_empty("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into());
        let host = host.trim();
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let ca = sa_dir.join("ca.crt");
        KubeSecrets::new(
            &format!("https://{host}:{}", port.trim()),
            &sa_dir.join("token"),
            ca.is_file().then_some(ca.as_path()),
            namespace_prefix,
        )
    }

    /// An explicit API server: `api_base` like `https://10.0.0.1:6443` (or
    /// `http://` for tests), a token file read at every request (a
    /// projected token is rotated), and an optional CA bundle.
    pub fn new(
        api_base: &str,
        token_file: &Path,
        ca_file: Option<&Path>,
        namespace_prefix: &str,
    ) -> Result<KubeSecrets, CredsError> {
        if !(api_base.starts_with("https://") || api_base.starts_with("http://")) {
            return Err(CredsError::Backend(format!(
                "Kubernetes API URL {api_base:?} must start with https:// or http://"
            )));
        }
        read_token(token_file)?;
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                CredsError::Backend(format!("cannot read the CA {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| CredsError::Backend(format!("the CA in {}: {e}", ca.display())))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| CredsError::Backend(format!("Kubernetes client: {e}")))?;
        Ok(KubeSecrets {
            api_base: api_base.trim_end_matches('/').to_string(),
            token_file: token_file.to_path_buf(),
            namespace_prefix: namespace_prefix.to_string(),
            client,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// Another limit for one request than [`REQUEST_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> KubeSecrets {
        self.timeout = timeout;
        self
    }

    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    pub fn namespace_prefix(&self) -> &str {
        &self.namespace_prefix
    }

    /// The secret's decoded data, or `None` when it does not exist.
    pub async fn get(
        &self,
        secret: &KubeSecret,
        var: &str,
    ) -> Result<Option<BTreeMap<String, String>>, CredsError> {
        let fail = |why: String| {
            CredsError::Backend(format!(
                "var {var}: secret {}/{}: {why}",
                secret.namespace, secret.name
            ))
        };
        // Names were checked to be DNS names: nothing to escape.
        let url = format!(
            "{}/api/v1/namespaces/{}/secrets/{}",
            self.api_base, secret.namespace, secret.name
        );
        // Read at every request, so a rotated (projected) token is used;
        // off the async thread, as every file read here.
        let token_file = self.token_file.clone();
        let token = tokio::task::spawn_blocking(move || read_token(&token_file))
            .await
            .map_err(|e| CredsError::Backend(format!("reading the Kubernetes token: {e}")))??;
        let exchange = async {
            let mut response = self
                .client
                .get(&url)
                .bearer_auth(token)
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| fail(format!("cannot reach the Kubernetes API server: {e}")))?;
            let status = response.status();
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| fail(format!("reading the answer: {e}")))?
            {
                if body.len() + chunk.len() > MAX_SECRET_BYTES {
                    return Err(fail(format!(
                        "the secret object is larger than {MAX_SECRET_BYTES} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok((status, body))
        };
        // The whole exchange, a body trickling in included.
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                fail(format!(
                    "the Kubernetes API server did not answer within {}ms",
                    self.timeout.as_millis()
                ))
            })??;
        match status.as_u16() {
            200 => decode(&body).map(Some).map_err(fail),
            404 => Ok(None),
            code @ (401 | 403) => Err(fail(format!(
                "the API server refused (HTTP {code}): {}; web's service account needs \
                 `get` on secrets in namespace {}",
                status_message(&body),
                secret.namespace
            ))),
            code => Err(fail(format!(
                "the API server answered HTTP {code}: {}",
                status_message(&body)
            ))),
        }
    }
}

fn read_token(path: &Path) -> Result<String, CredsError> {
    let token = std::fs::read_to_string(path).map_err(|e| {
        CredsError::Backend(format!(
            "cannot read the Kubernetes token {}: {e}",
            path.display()
        ))
    })?;
    let token = token.trim();
    if token.is_empty() || token.contains(['\n', '\r']) {
        return Err(CredsError::Backend(format!(
            "the Kubernetes token {} is empty or not one line",
            path.display()
        )));
    }
    Ok(token.to_string())
}

#[derive(Deserialize)]
struct Secret {
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
}

/// A secret object's `data`, each value base64-decoded and UTF-8.
fn decode(body: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let secret: Secret =
        serde_json::from_slice(body).map_err(|e| format!("not a secret object: {e}"))?;
    let mut out = BTreeMap::new();
    for (key, encoded) in secret.data.unwrap_or_default() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| format!("key {key:?} is not base64: {e}"))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            format!("key {key:?} is not UTF-8 text (binary secrets cannot be vars)")
        })?;
        out.insert(key, text);
    }
    Ok(out)
}

/// The `message` of a Kubernetes `Status` object, or the start of the body,
/// shortened and without control characters.
fn status_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        message: Option<String>,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(Status { message: Some(m) }) => m,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}
