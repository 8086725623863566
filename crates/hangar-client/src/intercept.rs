//! Sessions of [`hangar_api::intercept`]: opening one (web's route for the
//! CLI, a worker's for web) and reading and writing its frames.

use std::time::Duration;

use hangar_api::intercept::{ExecRequest, Frame, TeamContainer, HEADER_LEN, UPGRADE_PROTOCOL};
use reqwest::header::{CONNECTION, UPGRADE};
use reqwest::{Method, StatusCode, Url};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{decode, Client, ClientError, WorkerApi};

/// The bytes of a session, both ways.
pub type Session = reqwest::Upgraded;

/// Reads the next frame; `None` at a clean end of the stream between
/// frames. A hostile length is refused before its payload is read.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; HEADER_LEN];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..]).await?;
    let invalid = |e: hangar_api::intercept::FrameError| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let (kind, len) = Frame::header(head).map_err(invalid)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Frame::decode(kind, payload).map(Some).map_err(invalid)
}

/// Writes one frame and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    w.write_all(&frame.encode()).await?;
    w.flush().await
}

/// A client for sessions: no timeout on reads (a shell waits for its user
/// as long as the user likes).
fn session_http(connect: Duration) -> Result<reqwest::Client, ClientError> {
    reqwest::Client::builder()
        .connect_timeout(connect)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ClientError::Decode(e.to_string()))
}

/// Sends the upgrade request and answers the session, or the error the
/// server gave instead of its `101`.
async fn open(req: reqwest::RequestBuilder, url: Url) -> Result<Session, ClientError> {
    let resp = req
        .header(CONNECTION, "upgrade")
        .header(UPGRADE, UPGRADE_PROTOCOL)
        .send()
        .await
        .map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        if resp.status().is_success() {
            return Err(ClientError::Decode(format!(
                "{url} answered {} where a session was asked for",
                resp.status()
            )));
        }
        return Err(decode::<serde_json::Value>(url, resp)
            .await
            .expect_err("an error status is an error"));
    }
    resp.upgrade()
        .await
        .map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })
}

fn with_process(mut url: Url, req: &ExecRequest) -> Url {
    let process = serde_json::to_string(req).expect("an ExecRequest serializes");
    url.query_pairs_mut().append_pair("process", &process);
    url
}

impl WorkerApi {
    /// Runs `req` in container `handle` on this worker: the session.
    pub async fn exec(&self, handle: &str, req: &ExecRequest) -> Result<Session, ClientError> {
        let url = with_process(self.url(&["containers", handle, "exec"]), req);
        let http = session_http(Duration::from_secs(5))?;
        open(
            http.request(Method::GET, url.clone())
                .bearer_auth(&self.key),
            url,
        )
        .await
    }
}

impl Client {
    /// `team`'s containers.
    pub async fn containers(&self, team: &str) -> Result<Vec<TeamContainer>, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["teams", team, "containers"]), None)
            .await
    }

    /// Runs `req` in `team`'s container `handle`, through web: the session.
    pub async fn intercept(
        &self,
        team: &str,
        handle: &str,
        req: &ExecRequest,
    ) -> Result<Session, ClientError> {
        let url = with_process(
            self.url(&["teams", team, "containers", handle, "intercept"]),
            req,
        );
        let http = session_http(Duration::from_secs(5))?;
        let mut request = http.request(Method::GET, url.clone());
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        }
        open(request, url).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_cross_a_stream_and_a_bad_one_stops_the_reader() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let frames = [
            Frame::Stdout(b"hello".to_vec()),
            Frame::Resize { cols: 1, rows: 2 },
            Frame::Exit(3),
        ];
        for f in &frames {
            write_frame(&mut a, f).await.unwrap();
        }
        drop(a);
        for f in &frames {
            assert_eq!(read_frame(&mut b).await.unwrap().as_ref(), Some(f));
        }
        assert_eq!(read_frame(&mut b).await.unwrap(), None, "a clean end");

        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[3, 0xff, 0xff, 0xff, 0xff]).await.unwrap();
        let e = read_frame(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);

        // A header cut short is an error, not a clean end.
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[3, 0]).await.unwrap();
        drop(a);
        assert!(read_frame(&mut b).await.is_err());
    }
}
