//! Pulling a volume straight from another worker (`PUT
//! /volumes/{handle}/pull`): web sends this worker the source's API
//! address and a grant for that one volume; this worker streams it out of
//! the source and into its own volume. Web never carries the bytes.
//!
//! A failure of the source (it lacks the volume, refuses the grant, cannot
//! be reached, or breaks off mid-stream) is answered as the source's
//! ([`error::pull_source`]), so web blames and avoids the right worker.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use futures_util::TryStreamExt;
use hangar_api::http::Json as JsonBody;
use hangar_api::volume_grant::GRANT_HEADER;
use hangar_api::worker_api::PullVolume;

use crate::api::{encoding, receive, stream_in_answer, stream_in_permit, ApiError, VolumeApi};
use crate::error;

/// How long the source may take to connect, and to send the next bytes:
/// a source host that stops answering fails the pull instead of holding
/// it (and its stream-in permit) open.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);
const NEXT_BYTES_WITHIN: Duration = Duration::from_secs(60);

/// The client pulls are made with.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_WITHIN)
        .read_timeout(NEXT_BYTES_WITHIN)
        // Below the source's wait for a next request head.
        .pool_idle_timeout(hangar_client::POOL_IDLE)
        // The source is named by web; a redirect would take the grant
        // somewhere web did not name.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("the worker's HTTP client builds")
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) async fn pull(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
    JsonBody(req): JsonBody<PullVolume>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let compression = encoding(req.encoding.as_deref())?;
    let url = source_url(&req)?;
    // Before the source is asked for anything.
    let permit = stream_in_permit(&api)?;
    let source = format!("source worker at {}", req.source_url);
    let resp = api
        .http
        .get(url)
        .header(GRANT_HEADER, &req.grant)
        .send()
        .await
        .map_err(|e| error::pull_source(false, format!("{source}: {}", plain(&e))))?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<hangar_api::ErrorBody>(&body)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| body.chars().take(500).collect());
        return Err(error::pull_source(
            status.as_u16() == 404,
            format!("{source} answered {}: {message}", status.as_u16()),
        ));
    }
    // A stream that breaks is the source's failure, not this worker's.
    let broke = Arc::new(AtomicBool::new(false));
    let seen = broke.clone();
    let stream = resp.bytes_stream().map_err(move |e| {
        seen.store(true, Ordering::Relaxed);
        io::Error::other(plain(&e))
    });
    let started = std::time::Instant::now();
    match receive(
        &api,
        permit,
        handle.clone(),
        String::new(),
        stream,
        compression,
    )
    .await
    {
        Ok(report) => {
            let secs = started.elapsed().as_secs_f64();
            tracing::info!(
                volume = %handle,
                from = %req.source_url,
                source_volume = %req.source_handle,
                encoding = req.encoding.as_deref().unwrap_or("none"),
                files = report.files,
                bytes = report.content_bytes,
                secs = format!("{secs:.2}"),
                "pulled volume from another worker"
            );
            Ok(Json(stream_in_answer(&report)))
        }
        Err(_) if broke.load(Ordering::Relaxed) => Err(error::pull_source(
            false,
            format!(
                "{source} broke off the stream of volume {}",
                req.source_handle
            ),
        )),
        Err(e) => Err(e),
    }
}

/// The source's stream-out, uncompressed unless the pull says otherwise.
fn source_url(req: &PullVolume) -> Result<reqwest::Url, ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("source_url {:?}: {why}", req.source_url));
    let mut url = reqwest::Url::parse(&req.source_url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad("not an http(s) address of a worker"));
    }
    hangar_volumes::validate_handle(&req.source_handle)
        .map_err(|e| ApiError::bad_request(format!("source_handle: {e}")))?;
    url.path_segments_mut()
        .map_err(|_| bad("cannot be a base"))?
        .pop_if_empty()
        .extend(["volumes", &req.source_handle, "stream-out"]);
    if let Some(encoding) = req.encoding.as_deref().filter(|e| !e.is_empty()) {
        url.query_pairs_mut().append_pair("encoding", encoding);
    }
    Ok(url)
}

/// A client error in a line: what failed (connecting, waiting, the
/// stream) and the innermost cause in the socket's own words; neither the
/// URL (the message names the source already) nor each layer that passed
/// the cause on.
fn plain(e: &reqwest::Error) -> String {
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the stream broke off"
    } else {
        "the request failed"
    };
    let mut deepest: Option<&dyn std::error::Error> = None;
    let mut next = std::error::Error::source(e);
    while let Some(inner) = next {
        deepest = Some(inner);
        next = inner.source();
    }
    match deepest {
        Some(cause) => format!("{what}: {cause}"),
        None => format!("{what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_said_in_one_line_without_the_url() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/volumes/v/stream-out",
            closed.local_addr().unwrap()
        );
        drop(closed);
        let e = client().get(&url).send().await.unwrap_err();
        let text = plain(&e);
        assert!(text.starts_with("cannot connect: "), "{text}");
        assert!(text.to_lowercase().contains("refused"), "{text}");
        assert!(!text.contains("http://"), "{text}");
    }
}
