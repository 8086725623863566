//! Builds and artifacts through web's API.

use hangar_api::builds::{Artifact, Build, BuildEvents, CreateBuild};
use reqwest::Method;

use crate::{decode, Client, ClientError};

impl Client {
    pub async fn create_build(&self, req: &CreateBuild) -> Result<Build, ClientError> {
        self.call(Method::POST, self.url(&["builds"]), Some(req))
            .await
    }

    pub async fn builds(&self, limit: u32) -> Result<Vec<Build>, ClientError> {
        let mut url = self.url(&["builds"]);
        url.query_pairs_mut()
            .append_pair("limit", &limit.to_string());
        self.call::<(), _>(Method::GET, url, None).await
    }

    pub async fn build(&self, id: i64) -> Result<Build, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["builds", &id.to_string()]), None)
            .await
    }

    /// Aborts the build (see `PUT /api/v1/builds/{id}/abort`); answers the
    /// build as it is right after.
    pub async fn abort_build(&self, id: i64) -> Result<Build, ClientError> {
        self.call::<(), _>(
            Method::PUT,
            self.url(&["builds", &id.to_string(), "abort"]),
            None,
        )
        .await
    }

    /// The build's events after `after`, waiting up to `wait_ms` for some.
    pub async fn build_events(
        &self,
        id: i64,
        after: i64,
        wait_ms: u64,
    ) -> Result<BuildEvents, ClientError> {
        let mut url = self.url(&["builds", &id.to_string(), "events"]);
        url.query_pairs_mut()
            .append_pair("after", &after.to_string())
            .append_pair("wait_ms", &wait_ms.to_string());
        self.call::<(), _>(Method::GET, url, None).await
    }

    /// Uploads a gzip tar as an artifact, on `worker` if given, else on a
    /// worker fitting `platform` and `tags`.
    pub async fn upload_artifact(
        &self,
        worker: Option<&str>,
        platform: &str,
        tags: &[String],
        body: reqwest::Body,
    ) -> Result<Artifact, ClientError> {
        self.upload_artifact_encoded(worker, platform, tags, "gzip", body)
            .await
    }

    /// As [`Client::upload_artifact`], a tar in `encoding` (`none`, `gzip`
    /// or `zstd`), which its content type says.
    pub async fn upload_artifact_encoded(
        &self,
        worker: Option<&str>,
        platform: &str,
        tags: &[String],
        encoding: &str,
        body: reqwest::Body,
    ) -> Result<Artifact, ClientError> {
        let mut url = self.url(&["artifacts"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(team) = &self.team {
                q.append_pair("team", team);
            }
            match worker {
                Some(w) => {
                    q.append_pair("worker", w);
                }
                None => {
                    q.append_pair("platform", platform);
                    if !tags.is_empty() {
                        q.append_pair("tags", &tags.join(","));
                    }
                }
            }
        }
        let sent = self
            .raw_request(Method::POST, url.clone())
            .header(
                "content-type",
                hangar_api::builds::tar_content_type(encoding),
            )
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(resp) => resp,
            Err(source) if cut_off_while_sending(&source) => {
                return Err(self.why_cut_off(url, source).await)
            }
            Err(source) => {
                return Err(ClientError::Transport {
                    url: url.to_string(),
                    source,
                })
            }
        };
        decode(url, resp).await
    }

    /// Web refuses a wrong token before it reads an upload and closes the
    /// connection; the client, still writing, gets a reset that can
    /// discard web's answer before it is read. A cheap authenticated
    /// question (one build by a key no build has) tells a refused token
    /// from a broken connection; anything else keeps the transport error.
    async fn why_cut_off(&self, url: reqwest::Url, source: reqwest::Error) -> ClientError {
        let probe = self.url(&["builds", "0"]);
        match self
            .call::<(), serde_json::Value>(Method::GET, probe, None)
            .await
        {
            Err(refused @ ClientError::Api { status, .. })
                if status == reqwest::StatusCode::UNAUTHORIZED
                    || status == reqwest::StatusCode::FORBIDDEN =>
            {
                refused
            }
            _ => ClientError::Transport {
                url: url.to_string(),
                source,
            },
        }
    }

    /// A build's artifact as a gzip tar; the caller reads the body.
    pub async fn download_artifact(
        &self,
        id: i64,
        name: &str,
    ) -> Result<reqwest::Response, ClientError> {
        self.download_artifact_encoded(id, name, "gzip").await
    }

    /// As [`Client::download_artifact`], the tar in `encoding`.
    pub async fn download_artifact_encoded(
        &self,
        id: i64,
        name: &str,
        encoding: &str,
    ) -> Result<reqwest::Response, ClientError> {
        let mut url = self.url(&["builds", &id.to_string(), "artifacts", name]);
        url.query_pairs_mut().append_pair("encoding", encoding);
        let resp = self
            .raw_request(Method::GET, url.clone())
            .send()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.to_string(),
                source,
            })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        match decode::<serde_json::Value>(url, resp).await {
            Err(e) => Err(e),
            Ok(_) => Err(ClientError::Decode(
                "an error status with a success body".into(),
            )),
        }
    }
}

/// Whether a request failed while its body was being written because the
/// other side closed (a broken pipe or a reset somewhere in the chain).
fn cut_off_while_sending(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) {
                return true;
            }
        }
        cause = c.source();
    }
    false
}
