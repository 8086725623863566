//! The typed HTTP client of web's API, used by the worker agent and the CLI.

use std::time::Duration;

use hangar_api::{
    CommandDone, CreateVolume, ErrorBody, Heartbeat, HeartbeatAccepted, Info, Pruned,
    RegisterWorker, Registered, Volume, VolumeReport, VolumeReportAnswer, Worker, WorkerEvent,
    API_PREFIX,
};

mod body_reader;
mod builds;
mod checks;
pub mod chunks;
pub mod intercept;
mod pins;
mod pipelines;
mod resource_api;
mod teams;
mod worker_api;
pub use body_reader::{blocking_body_reader, BlockingBodyReader};
pub use checks::Checked;
use reqwest::{Method, StatusCode, Url};
pub use resource_api::ActionEvents;
use serde::de::DeserializeOwned;
use serde::Serialize;
pub use worker_api::WorkerApi;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Web answered with an error body.
    #[error("{message} ({status})")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
    },
    /// Web could not be reached or the connection broke. Only the innermost
    /// cause is shown: reqwest's own chain repeats the URL at every level.
    #[error("cannot reach {url}: {}", root_cause(source))]
    Transport { url: String, source: reqwest::Error },
    #[error("unexpected answer from web: {0}")]
    Decode(String),
    #[error("invalid web url {0:?}: {1}")]
    BadUrl(String, String),
}

impl ClientError {
    /// The API error code, when web answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        format!("timed out ({cause})")
    } else {
        cause.to_string()
    }
}

/// How long an idle pooled connection is kept: less than the servers'
/// wait for the next request head (`hangar_http::Limits`, 30 s), so
/// a request is never sent on a connection the server is closing.
pub const POOL_IDLE: Duration = Duration::from_secs(20);

#[derive(Clone, Debug)]
pub struct Client {
    base: Url,
    token: String,
    http: reqwest::Client,
    /// For uploads and downloads: a whole-request timeout would cut them.
    streaming: reqwest::Client,
    /// The team uploads are for (web's default, main, when none).
    team: Option<String>,
}

impl Client {
    /// A client of the web node at `url`, presenting `token` (the admin token
    /// for users, the worker key for workers).
    pub fn new(url: &str, token: &str, timeout: Duration) -> Result<Client, ClientError> {
        let no_scheme = || {
            ClientError::BadUrl(
                url.to_string(),
                format!("it names no scheme: did you mean http://{url} (or https://)?"),
            )
        };
        let mut base = match Url::parse(url) {
            Ok(base) => base,
            Err(url::ParseError::RelativeUrlWithoutBase) => return Err(no_scheme()),
            Err(e) => return Err(ClientError::BadUrl(url.to_string(), e.to_string())),
        };
        if !matches!(base.scheme(), "http" | "https") {
            // `localhost:8080` reads as the scheme `localhost`.
            if !url.contains("://") {
                return Err(no_scheme());
            }
            return Err(ClientError::BadUrl(
                url.to_string(),
                "use http:// or https://".into(),
            ));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .pool_idle_timeout(POOL_IDLE)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        let streaming = reqwest::Client::builder()
            .pool_idle_timeout(POOL_IDLE)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .read_timeout(timeout)
            .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(Client {
            base,
            token: token.to_string(),
            http,
            streaming,
            team: None,
        })
    }

    /// The same client presenting another credential (a worker, once its
    /// registration returned its own token).
    pub fn with_token(&self, token: &str) -> Client {
        Client {
            token: token.to_string(),
            ..self.clone()
        }
    }

    /// The same client uploading artifacts for `team`.
    pub fn in_team(&self, team: &str) -> Client {
        Client {
            team: Some(team.to_string()),
            ..self.clone()
        }
    }

    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// A request with credentials and no timeout on the whole body (streams).
    pub(crate) fn raw_request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        self.authorized(self.streaming.request(method, url))
    }

    /// The request with this client's credential; a client without one
    /// (logging in) sends none, so web sees an anonymous caller.
    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if self.token.is_empty() {
            req
        } else {
            req.bearer_auth(&self.token)
        }
    }

    /// The URL of an API route; every segment is percent-encoded.
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().expect("http urls have paths");
            path.pop_if_empty();
            for s in API_PREFIX.trim_start_matches('/').split('/') {
                path.push(s);
            }
            for s in segments {
                path.push(s);
            }
        }
        url
    }

    pub(crate) async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let mut req = self.authorized(self.http.request(method, url.clone()));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })?;
        decode(url, resp).await
    }

    pub async fn info(&self) -> Result<Info, ClientError> {
        // /info answers 503 with a full body while the database is down.
        let url = self.url(&["info"]);
        let resp =
            self.http
                .get(url.clone())
                .send()
                .await
                .map_err(|source| ClientError::Transport {
                    url: url.to_string(),
                    source,
                })?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.to_string(),
                source,
            })?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()))
    }

    pub async fn register(&self, req: &RegisterWorker) -> Result<Registered, ClientError> {
        self.call(Method::POST, self.url(&["workers"]), Some(req))
            .await
    }

    pub async fn heartbeat(
        &self,
        name: &str,
        hb: &Heartbeat,
    ) -> Result<HeartbeatAccepted, ClientError> {
        self.call(
            Method::PUT,
            self.url(&["workers", name, "heartbeat"]),
            Some(hb),
        )
        .await
    }

    pub async fn workers(&self) -> Result<Vec<Worker>, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["workers"]), None)
            .await
    }

    pub async fn worker(&self, name: &str) -> Result<Worker, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["workers", name]), None)
            .await
    }

    pub async fn land(&self, name: &str) -> Result<CommandDone, ClientError> {
        self.call::<(), _>(Method::PUT, self.url(&["workers", name, "land"]), None)
            .await
    }

    pub async fn retire(&self, name: &str) -> Result<CommandDone, ClientError> {
        self.call::<(), _>(Method::PUT, self.url(&["workers", name, "retire"]), None)
            .await
    }

    pub async fn prune(&self, name: &str) -> Result<CommandDone, ClientError> {
        self.call::<(), _>(Method::DELETE, self.url(&["workers", name]), None)
            .await
    }

    pub async fn prune_stalled(&self) -> Result<Pruned, ClientError> {
        self.call::<(), _>(Method::POST, self.url(&["stalled-workers", "prune"]), None)
            .await
    }

    pub async fn create_volume(&self, req: &CreateVolume) -> Result<Volume, ClientError> {
        self.call(Method::POST, self.url(&["volumes"]), Some(req))
            .await
    }

    pub async fn volumes(&self, worker: Option<&str>) -> Result<Vec<Volume>, ClientError> {
        let mut url = self.url(&["volumes"]);
        if let Some(w) = worker {
            url.query_pairs_mut().append_pair("worker", w);
        }
        self.call::<(), _>(Method::GET, url, None).await
    }

    pub async fn volume(&self, handle: &str) -> Result<Volume, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["volumes", handle]), None)
            .await
    }

    pub async fn destroy_volume(&self, handle: &str) -> Result<Volume, ClientError> {
        self.call::<(), _>(Method::DELETE, self.url(&["volumes", handle]), None)
            .await
    }

    /// A worker's full report of its volume handles; the answer lists what
    /// it must destroy.
    pub async fn report_volumes(
        &self,
        worker: &str,
        report: &VolumeReport,
    ) -> Result<VolumeReportAnswer, ClientError> {
        self.call(
            Method::PUT,
            self.url(&["workers", worker, "volumes"]),
            Some(report),
        )
        .await
    }

    pub async fn events(
        &self,
        worker: Option<&str>,
        limit: u32,
    ) -> Result<Vec<WorkerEvent>, ClientError> {
        let mut url = self.url(&["events"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(w) = worker {
                q.append_pair("worker", w);
            }
            q.append_pair("limit", &limit.to_string());
        }
        self.call::<(), _>(Method::GET, url, None).await
    }
}

/// Reads an answer: the JSON body on success, else the error body.
pub(crate) async fn decode<T: DeserializeOwned>(
    url: Url,
    resp: reqwest::Response,
) -> Result<T, ClientError> {
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })?;
    if !status.is_success() {
        return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => ClientError::Api {
                status,
                code: body.error.code,
                message: body.error.message,
            },
            Err(_) => ClientError::Api {
                status,
                code: "http".into(),
                message: format!(
                    "web answered {status}: {}",
                    String::from_utf8_lossy(&bytes)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            },
        });
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ClientError::Decode(format!("{e} in answer from {url}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_segments_are_percent_encoded_under_the_base_path() {
        let c = Client::new("http://web:8080/ci", "t", Duration::from_secs(1)).unwrap();
        assert_eq!(
            c.url(&["workers", "a/b c", "land"]).as_str(),
            "http://web:8080/ci/api/v1/workers/a%2Fb%20c/land"
        );
        let c = Client::new("http://web:8080", "t", Duration::from_secs(1)).unwrap();
        assert_eq!(c.url(&["info"]).as_str(), "http://web:8080/api/v1/info");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused() {
        assert!(Client::new("ftp://x", "t", Duration::from_secs(1)).is_err());
        assert!(Client::new("not a url", "t", Duration::from_secs(1)).is_err());
    }
}
