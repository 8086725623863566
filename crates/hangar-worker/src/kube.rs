//! Why the worker's previous container ended, when the worker runs in a
//! Kubernetes pod.
//!
//! A container that the kernel killed for memory (or that crashed) is
//! restarted by the kubelet in the same pod; the pod's status keeps how the
//! previous container ended (`status.containerStatuses[].lastState.terminated`).
//! The worker reads it once at start, through the API server with the pod's
//! service account, and sends it with its registration so that web records
//! it in the registration event: the operator sees `OOMKilled (exit 137)`
//! next to `restarted-state-kept` instead of guessing.
//!
//! Nothing here is required: outside a pod, without a token, or when the
//! API server refuses, the worker registers without the cause.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Where Kubernetes mounts the service account's token, CA and namespace.
pub const DEFAULT_SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The container whose previous end is read, unless `HANGAR_KUBE_CONTAINER` says otherwise.
pub const DEFAULT_CONTAINER: &str = "worker";
/// How long the worker waits for the API server before registering without the cause.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest pod object read.
const MAX_POD_BYTES: usize = 4 * 1024 * 1024;
/// The longest reason and timestamp kept (they come from outside).
const MAX_FIELD: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("pod {namespace}/{pod} not found")]
    NotFound { namespace: String, pod: String },
    /// The service account may not read the pod (RBAC missing): 401 or 403.
    #[error("not allowed to read pod {namespace}/{pod} (HTTP {status}): {message}")]
    Forbidden {
        namespace: String,
        pod: String,
        status: u16,
        message: String,
    },
    #[error("the API server answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the pod status is not what was expected: {0}")]
    Malformed(String),
    #[error("cannot reach the API server: {0}")]
    Http(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The pod this process runs in, and how to ask the API server about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// The API server, e.g. `https://10.96.0.1:443` (plain `http://` for tests).
    pub api_base: String,
    /// The service account dir: `token`, `ca.crt`, `namespace`.
    pub sa_dir: PathBuf,
    pub namespace: String,
    pub pod: String,
    /// The container whose previous end is wanted.
    pub container: String,
}

impl PodRef {
    /// The pod from the process environment; `None` when not in a pod.
    pub fn from_env() -> Result<Option<PodRef>, KubeError> {
        PodRef::from_vars(|k| std::env::var(k).ok(), Path::new(DEFAULT_SA_DIR))
    }

    /// The pod from `var` (an environment) and a service account dir.
    ///
    /// In a pod when `KUBERNETES_SERVICE_HOST` is set and the dir holds a
    /// token. The pod's name is `POD_NAME` (the manifests set it from the
    /// downward API) or else `HOSTNAME`; its namespace `POD_NAMESPACE` or
    /// else the service account's `namespace` file.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        sa_dir: &Path,
    ) -> Result<Option<PodRef>, KubeError> {
        let non_empty = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let Some(host) = non_empty("KUBERNETES_SERVICE_HOST") else {
            return Ok(None);
        };
        if !sa_dir.join("token").is_file() {
            return Ok(None);
        }
        let port = non_empty("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into());
        let host = host.trim();
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let Some(pod) = non_empty("POD_NAME").or_else(|| non_empty("HOSTNAME")) else {
            return Ok(None);
        };
        let namespace = match non_empty("POD_NAMESPACE") {
            Some(ns) => ns,
            None => read_trimmed(&sa_dir.join("namespace"))?,
        };
        Ok(Some(PodRef {
            api_base: format!("https://{host}:{}", port.trim()),
            sa_dir: sa_dir.to_path_buf(),
            namespace: namespace.trim().to_string(),
            pod: pod.trim().to_string(),
            container: non_empty("HANGAR_KUBE_CONTAINER")
                .unwrap_or_else(|| DEFAULT_CONTAINER.into()),
        }))
    }
}

fn read_trimmed(path: &Path) -> Result<String, KubeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| KubeError::Io {
            context: format!("read {}", path.display()),
            source,
        })
}

/// Asks the API server how the previous container of `pod.container` ended.
/// `Ok(None)` when it has no previous container (the pod is new).
pub async fn previous_exit(pod: &PodRef, timeout: Duration) -> Result<Option<String>, KubeError> {
    let token = read_trimmed(&pod.sa_dir.join("token"))?;
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout);
    let ca = pod.sa_dir.join("ca.crt");
    if pod.api_base.starts_with("https://") && ca.is_file() {
        let pem = std::fs::read(&ca).map_err(|source| KubeError::Io {
            context: format!("read {}", ca.display()),
            source,
        })?;
        // The file may hold a bundle (a CA being rotated has two).
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| KubeError::Http(format!("the CA in {}: {e}", ca.display())))?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder
        .build()
        .map_err(|e| KubeError::Http(e.to_string()))?;
    let url = format!(
        "{}/api/v1/namespaces/{}/pods/{}",
        pod.api_base.trim_end_matches('/'),
        segment(&pod.namespace),
        segment(&pod.pod)
    );
    let mut response = client
        .get(&url)
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| KubeError::Http(e.to_string()))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| KubeError::Http(e.to_string()))?
    {
        if body.len() + chunk.len() > MAX_POD_BYTES {
            return Err(KubeError::Malformed(format!(
                "the pod object is larger than {MAX_POD_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    match status.as_u16() {
        200..=299 => previous_exit_from_pod(&body, &pod.container),
        404 => Err(KubeError::NotFound {
            namespace: pod.namespace.clone(),
            pod: pod.pod.clone(),
        }),
        code @ (401 | 403) => Err(KubeError::Forbidden {
            namespace: pod.namespace.clone(),
            pod: pod.pod.clone(),
            status: code,
            message: status_message(&body),
        }),
        code => Err(KubeError::Status {
            status: code,
            message: status_message(&body),
        }),
    }
}

/// Percent-encodes what is not safe in a path segment (names are DNS labels,
/// but the values come from the environment).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `message` of a Kubernetes `Status` object, or the start of the body.
fn status_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        message: Option<String>,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(Status { message: Some(m) }) => m,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    clean(&text, 200)
}

#[derive(Deserialize)]
struct Pod {
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    #[serde(default)]
    container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    name: String,
    #[serde(default)]
    last_state: Option<ContainerState>,
}

#[derive(Deserialize)]
struct ContainerState {
    #[serde(default)]
    terminated: Option<Terminated>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Terminated {
    exit_code: i32,
    #[serde(default)]
    signal: Option<i32>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    finished_at: Option<String>,
}

/// The cause from a pod object (the API's JSON): e.g.
/// `OOMKilled (exit 137) at 2025-05-01T10:00:00Z`. `Ok(None)` when the
/// container has no previous end.
pub fn previous_exit_from_pod(json: &[u8], container: &str) -> Result<Option<String>, KubeError> {
    let pod: Pod = serde_json::from_slice(json).map_err(|e| KubeError::Malformed(e.to_string()))?;
    let statuses = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    let Some(status) = statuses.into_iter().find(|s| s.name == container) else {
        return Ok(None);
    };
    let Some(t) = status.last_state.and_then(|s| s.terminated) else {
        return Ok(None);
    };
    let reason = t
        .reason
        .map(|r| clean(&r, MAX_FIELD))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "Terminated".into());
    let mut cause = format!("{reason} (exit {}", t.exit_code);
    if let Some(signal) = t.signal.filter(|s| *s != 0) {
        cause.push_str(&format!(", signal {signal}"));
    }
    cause.push(')');
    if let Some(at) = t.finished_at.map(|a| clean(&a, MAX_FIELD)) {
        if !at.is_empty() {
            cause.push_str(&format!(" at {at}"));
        }
    }
    Ok(Some(cause))
}

/// Drops control characters and cuts to `max` characters.
fn clean(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect::<String>()
        .trim()
        .to_string()
}

/// What the agent calls at start: the cause when in a pod and the API server
/// tells it; every failure is logged and yields `None`, so a missing Role
/// never stops a worker from registering.
pub async fn previous_exit_from_env() -> Option<String> {
    let pod = match PodRef::from_env() {
        Ok(Some(pod)) => pod,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "in a pod, but cannot tell which; not reading why the previous container ended");
            return None;
        }
    };
    match previous_exit(&pod, LOOKUP_TIMEOUT).await {
        Ok(Some(cause)) => {
            tracing::warn!(pod = %pod.pod, container = %pod.container, %cause, "the previous container of this worker ended");
            Some(cause)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(pod = %pod.pod, error = %e, "cannot read why the previous container ended");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_read_from_the_named_container() {
        let pod = br#"{"status":{"containerStatuses":[
            {"name":"sidecar","lastState":{"terminated":{"exitCode":1,"reason":"Error"}}},
            {"name":"worker","restartCount":2,"lastState":{"terminated":{
                "exitCode":137,"reason":"OOMKilled","finishedAt":"2025-05-01T10:00:00Z"}}}]}}"#;
        assert_eq!(
            previous_exit_from_pod(pod, "worker").unwrap().as_deref(),
            Some("OOMKilled (exit 137) at 2025-05-01T10:00:00Z")
        );
        assert_eq!(
            previous_exit_from_pod(pod, "sidecar").unwrap().as_deref(),
            Some("Error (exit 1)")
        );
        assert_eq!(previous_exit_from_pod(pod, "other").unwrap(), None);
    }

    #[test]
    fn odd_but_valid_objects_give_no_cause_or_a_clean_one() {
        let cases: [(&[u8], Option<&str>); 6] = [
            (br#"{}"#, None),
            (br#"{"status":{}}"#, None),
            (br#"{"status":{"containerStatuses":null}}"#, None),
            (
                br#"{"status":{"containerStatuses":[{"name":"worker","lastState":{}}]}}"#,
                None,
            ),
            (
                br#"{"status":{"containerStatuses":[{"name":"worker","lastState":{"terminated":{"exitCode":2,"signal":9}}}]}}"#,
                Some("Terminated (exit 2, signal 9)"),
            ),
            (
                br#"{"status":{"containerStatuses":[{"name":"worker","lastState":{"terminated":{"exitCode":1,"reason":"Bad\nThing"}}}]}}"#,
                Some("BadThing (exit 1)"),
            ),
        ];
        for (json, want) in cases {
            assert_eq!(
                previous_exit_from_pod(json, "worker").unwrap().as_deref(),
                want,
                "{}",
                String::from_utf8_lossy(json)
            );
        }
    }

    #[test]
    fn the_pod_is_found_from_the_environment_only_inside_a_pod() {
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let in_pod: &[(&str, &str)] = &[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("POD_NAME", "hangar-worker-0"),
        ];
        // No token yet: not usable.
        assert_eq!(PodRef::from_vars(env(in_pod), sa).unwrap(), None);
        std::fs::write(sa.join("token"), "t0k3n\n").unwrap();
        // No namespace from either source.
        assert!(matches!(
            PodRef::from_vars(env(in_pod), sa),
            Err(KubeError::Io { .. })
        ));
        std::fs::write(sa.join("namespace"), "ci\n").unwrap();
        assert_eq!(
            PodRef::from_vars(env(in_pod), sa).unwrap(),
            Some(PodRef {
                api_base: "https://10.96.0.1:443".into(),
                sa_dir: sa.to_path_buf(),
                namespace: "ci".into(),
                pod: "hangar-worker-0".into(),
                container: "worker".into(),
            })
        );
        let v6: &[(&str, &str)] = &[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("HOSTNAME", "w-abc"),
            ("POD_NAMESPACE", "other"),
            ("HANGAR_KUBE_CONTAINER", "agent"),
        ];
        let p = PodRef::from_vars(env(v6), sa).unwrap().unwrap();
        assert_eq!(p.api_base, "https://[fd00::1]:443");
        assert_eq!((p.pod.as_str(), p.namespace.as_str()), ("w-abc", "other"));
        assert_eq!(p.container, "agent");
        // Not in a pod.
        assert_eq!(PodRef::from_vars(env(&[]), sa).unwrap(), None);
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("hangar-worker-0"), "hangar-worker-0");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
