//! The client of a worker's own volume API, used by web (and by other workers
//! to stream volumes between them).

use std::time::Duration;

use hangar_api::containers::{Container, ContainerSpec};
use hangar_api::worker_api::{CreateVolume, PullVolume, SetProperty, Volume};
use reqwest::{Method, Url};

use crate::{decode, ClientError};

#[derive(Clone, Debug)]
pub struct WorkerApi {
    pub(crate) base: Url,
    pub(crate) key: String,
    pub(crate) http: reqwest::Client,
}

/// Tar streams may be compressed.
pub(crate) const ENCODING_GZIP: &str = "gzip";

impl WorkerApi {
    pub fn new(url: &str, key: &str, timeout: Duration) -> Result<WorkerApi, ClientError> {
        let base =
            Url::parse(url).map_err(|e| ClientError::BadUrl(url.to_string(), e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::BadUrl(
                url.to_string(),
                "use http:// or https://".into(),
            ));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .read_timeout(timeout)
            .pool_idle_timeout(crate::POOL_IDLE)
            // A worker names its own URL: a redirect would take the
            // credential to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(WorkerApi {
            base,
            key: key.to_string(),
            http,
        })
    }

    /// The worker's API address.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().expect("http urls have paths");
            path.pop_if_empty();
            for s in segments {
                path.push(s);
            }
        }
        url
    }

    pub(crate) async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<reqwest::Response, ClientError> {
        req.bearer_auth(&self.key)
            .send()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.to_string(),
                source,
            })
    }

    pub async fn create_volume(&self, req: &CreateVolume) -> Result<Volume, ClientError> {
        let url = self.url(&["volumes"]);
        let resp = self
            .send(self.http.request(Method::POST, url.clone()).json(req), &url)
            .await?;
        decode(url, resp).await
    }

    pub async fn volumes(&self) -> Result<Vec<Volume>, ClientError> {
        let url = self.url(&["volumes"]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode(url, resp).await
    }

    pub async fn volume(&self, handle: &str) -> Result<Volume, ClientError> {
        let url = self.url(&["volumes", handle]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode(url, resp).await
    }

    /// Destroys a volume; a volume that is not there counts as destroyed.
    pub async fn destroy_volume(&self, handle: &str) -> Result<(), ClientError> {
        let url = self.url(&["volumes", handle]);
        let resp = self.send(self.http.delete(url.clone()), &url).await?;
        decode::<serde_json::Value>(url, resp).await.map(|_| ())
    }

    pub async fn set_property(
        &self,
        handle: &str,
        key: &str,
        value: &str,
    ) -> Result<Volume, ClientError> {
        let url = self.url(&["volumes", handle, "properties", key]);
        let body = SetProperty {
            value: value.into(),
        };
        let resp = self
            .send(self.http.put(url.clone()).json(&body), &url)
            .await?;
        decode(url, resp).await
    }

    fn stream_url(&self, handle: &str, direction: &str, path: &str, encoding: &str) -> Url {
        let mut url = self.url(&["volumes", handle, direction]);
        url.query_pairs_mut().append_pair("path", path);
        if encoding != "none" {
            url.query_pairs_mut().append_pair("encoding", encoding);
        }
        url
    }

    /// As [`WorkerApi::stream_in`], the stream in `encoding` (`none`,
    /// `gzip` or `zstd`).
    pub async fn stream_in_encoded(
        &self,
        handle: &str,
        path: &str,
        encoding: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<serde_json::Value, ClientError> {
        let url = self.stream_url(handle, "stream-in", path, encoding);
        let req = self
            .http
            .put(url.clone())
            .header("content-type", "application/x-tar")
            .body(body);
        let resp = self.send(req, &url).await?;
        decode(url, resp).await
    }

    /// As [`WorkerApi::stream_out`], the stream in `encoding`.
    pub async fn stream_out_encoded(
        &self,
        handle: &str,
        path: &str,
        encoding: &str,
    ) -> Result<reqwest::Response, ClientError> {
        let url = self.stream_url(handle, "stream-out", path, encoding);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(decode::<serde_json::Value>(url, resp).await.unwrap_err())
        }
    }

    /// Extracts a tar stream into the volume at `path` (relative).
    pub async fn stream_in(
        &self,
        handle: &str,
        path: &str,
        gzip: bool,
        body: impl Into<reqwest::Body>,
    ) -> Result<serde_json::Value, ClientError> {
        let encoding = if gzip { ENCODING_GZIP } else { "none" };
        self.stream_in_encoded(handle, path, encoding, body).await
    }

    /// Fills volume `handle` with another worker's volume, which this
    /// worker streams straight from that one (`req` names it and carries
    /// a grant for it). Answers what was extracted.
    pub async fn pull_volume(
        &self,
        handle: &str,
        req: &PullVolume,
    ) -> Result<serde_json::Value, ClientError> {
        let url = self.url(&["volumes", handle, "pull"]);
        let resp = self
            .send(self.http.put(url.clone()).json(req), &url)
            .await?;
        decode(url, resp).await
    }

    /// A tar stream of the volume at `path`; the caller reads the body.
    pub async fn stream_out(
        &self,
        handle: &str,
        path: &str,
        gzip: bool,
    ) -> Result<reqwest::Response, ClientError> {
        let encoding = if gzip { ENCODING_GZIP } else { "none" };
        self.stream_out_encoded(handle, path, encoding).await
    }

    /// One regular file of the volume, whole (the worker bounds its size
    /// and refuses any path leading out of the volume).
    pub async fn read_file(&self, handle: &str, path: &str) -> Result<Vec<u8>, ClientError> {
        let mut url = self.url(&["volumes", handle, "file"]);
        url.query_pairs_mut().append_pair("path", path);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        if !resp.status().is_success() {
            return Err(decode::<serde_json::Value>(url, resp).await.unwrap_err());
        }
        let body = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.to_string(),
                source,
            })?;
        Ok(body.to_vec())
    }

    /// Asks the worker process whether it is the one holding this client's
    /// token: only that process answers `Ok` (a new process at the same
    /// address has a token of its own and refuses).
    pub async fn incarnation(&self) -> Result<(), ClientError> {
        let url = self.url(&["incarnation"]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode::<serde_json::Value>(url, resp).await.map(|_| ())
    }

    pub async fn healthy(&self) -> Result<(), ClientError> {
        let url = self.url(&["healthz"]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode::<serde_json::Value>(url, resp).await.map(|_| ())
    }

    /// Starts a container; answers once its process runs.
    pub async fn create_container(&self, spec: &ContainerSpec) -> Result<Container, ClientError> {
        let url = self.url(&["containers"]);
        let resp = self
            .send(self.http.post(url.clone()).json(spec), &url)
            .await?;
        decode(url, resp).await
    }

    pub async fn container(&self, handle: &str) -> Result<Container, ClientError> {
        let url = self.url(&["containers", handle]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode(url, resp).await
    }

    pub async fn containers(&self) -> Result<Vec<Container>, ClientError> {
        let url = self.url(&["containers"]);
        let resp = self.send(self.http.get(url.clone()), &url).await?;
        decode(url, resp).await
    }

    /// The container's log (stdout and stderr) from byte `offset`; the
    /// caller reads the body. With `follow` the body goes on until the
    /// container has exited and its log is drained, however long that is
    /// (no read timeout applies).
    pub async fn container_logs(
        &self,
        handle: &str,
        offset: u64,
        follow: bool,
    ) -> Result<reqwest::Response, ClientError> {
        let mut url = self.url(&["containers", handle, "logs"]);
        url.query_pairs_mut()
            .append_pair("offset", &offset.to_string())
            .append_pair("follow", if follow { "true" } else { "false" });
        let resp = self.send(long_poll_client().get(url.clone()), &url).await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(decode::<serde_json::Value>(url, resp).await.unwrap_err())
        }
    }

    /// Waits until the container has exited or `timeout` passes, and
    /// returns it either way (check `state`). The worker holds one request
    /// for at most a minute; longer waits are several requests.
    pub async fn wait_container(
        &self,
        handle: &str,
        timeout: Duration,
    ) -> Result<Container, ClientError> {
        const MAX_PER_REQUEST: Duration = Duration::from_secs(60);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let step = deadline
                .saturating_duration_since(std::time::Instant::now())
                .min(MAX_PER_REQUEST);
            let mut url = self.url(&["containers", handle, "wait"]);
            url.query_pairs_mut()
                .append_pair("timeout_ms", &step.as_millis().to_string());
            let resp = self.send(long_poll_client().get(url.clone()), &url).await?;
            let c: Container = decode(url, resp).await?;
            if c.exit.is_some() || std::time::Instant::now() >= deadline {
                return Ok(c);
            }
        }
    }

    /// Kills and removes a container; one that is not there counts as
    /// destroyed.
    pub async fn destroy_container(&self, handle: &str) -> Result<(), ClientError> {
        let url = self.url(&["containers", handle]);
        let resp = self.send(self.http.delete(url.clone()), &url).await?;
        decode::<serde_json::Value>(url, resp).await.map(|_| ())
    }
}

/// A client without a read timeout, for requests the worker holds open
/// (waits, followed logs); TCP keepalive notices a dead peer. It keeps no
/// idle connections: it is shared by every runtime of the process, and a
/// pooled connection belongs to the runtime that made it.
fn long_poll_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tcp_keepalive(Duration::from_secs(30))
            .pool_max_idle_per_host(0)
            .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with static settings builds")
    })
}
