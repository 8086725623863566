//! The worker process's presence at web: one long-lived request
//! (`POST /workers/{name}/presence`, under the current registration's own
//! token) whose body streams for as long as the process lives. When the
//! process dies the kernel closes the connection and web, after probing the
//! worker's API, settles the worker at once instead of waiting for the
//! heartbeat TTL (web's `presence.rs` says how). A process that stops on
//! purpose says goodbye first, so web leaves it to its command or the TTL.
//!
//! The answer streams web's lines: `held` once the presence is held, then
//! why it ended (`replaced`, `web-stopping`, `not-current`, …). Whenever
//! it ends, or cannot be made, the worker connects again after a backoff
//! (100 ms doubling to 2 s, back to 100 ms after a presence was held), so a
//! restarted web, or another node behind the same URL, holds it again
//! within a couple of seconds. A new registration (a new token) ends the
//! old presence with a goodbye and opens one under the new token.

use std::time::Duration;

use axum::body::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What the body says before a worker that stops on purpose ends it
/// (web's `presence::GOODBYE`).
const GOODBYE: &[u8] = b"goodbye";

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// How long a goodbye waits for web's answer before the process goes on.
const GOODBYE_WAIT: Duration = Duration::from_secs(1);

/// How long the worker waits before it asks again a web that has no
/// presence route (a web of an earlier version: heartbeats alone tell it
/// of this worker).
const UNSUPPORTED_WAIT: Duration = Duration::from_secs(300);

/// Holds the presence of worker `name` at `web_url` under the token of the
/// registration `sessions` holds (none while registering again), until
/// `stop`, and then says goodbye.
pub(crate) async fn hold<S: Send + Sync + 'static>(
    web_url: &str,
    name: &str,
    mut sessions: watch::Receiver<Option<S>>,
    token_of: fn(&S) -> String,
    stop: CancellationToken,
) {
    let Some(url) = presence_url(web_url, name) else {
        tracing::warn!(%web_url, "web's URL has no path: no presence is held");
        return;
    };
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("hangar/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!(error = %e, "cannot make the presence's HTTP client: no presence is held");
            return;
        }
    };
    let mut backoff = BACKOFF_MIN;
    loop {
        let token = sessions.borrow_and_update().as_ref().map(token_of);
        let Some(token) = token else {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = sessions.changed() => if changed.is_err() { return },
            }
            continue;
        };
        let (say, said) = mpsc::channel::<Bytes>(1);
        let mut conversation = tokio::spawn(converse(http.clone(), url.clone(), token, said));
        tokio::select! {
            _ = stop.cancelled() => {
                goodbye(say, conversation).await;
                return;
            }
            changed = sessions.changed() => {
                goodbye(say, conversation).await;
                if changed.is_err() {
                    return;
                }
                backoff = BACKOFF_MIN;
                continue;
            }
            ended = &mut conversation => {
                match ended {
                    Ok(end) if end.unsupported => {
                        tracing::info!("web holds no presences (an earlier version): it learns of this worker's death from its heartbeats alone");
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            changed = sessions.changed() => if changed.is_err() { return },
                            _ = tokio::time::sleep(UNSUPPORTED_WAIT) => {}
                        }
                        continue;
                    }
                    Ok(end) => {
                        if end.held {
                            backoff = BACKOFF_MIN;
                        }
                        tracing::info!(why = %end.why, "presence at web ended; connecting again");
                    }
                    Err(e) => tracing::warn!(error = %e, "presence task failed"),
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Says goodbye on the body, ends it and gives web a moment to answer.
async fn goodbye(say: mpsc::Sender<Bytes>, conversation: tokio::task::JoinHandle<End>) {
    let _ = say.send(Bytes::from_static(GOODBYE)).await;
    drop(say);
    let abort = conversation.abort_handle();
    if tokio::time::timeout(GOODBYE_WAIT, conversation)
        .await
        .is_err()
    {
        abort.abort();
    }
}

/// How one presence went.
#[derive(Default)]
struct End {
    held: bool,
    /// Web has no such route.
    unsupported: bool,
    why: String,
}

async fn converse(
    http: reqwest::Client,
    url: reqwest::Url,
    token: String,
    said: mpsc::Receiver<Bytes>,
) -> End {
    let body = futures_util::stream::unfold(said, |mut said| async move {
        said.recv()
            .await
            .map(|bytes| (Ok::<_, std::io::Error>(bytes), said))
    });
    let answer = http
        .post(url)
        .bearer_auth(token)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await;
    let response = match answer {
        Ok(r) => r,
        Err(e) => {
            return End {
                why: format!("cannot reach web: {e}"),
                ..End::default()
            }
        }
    };
    if !response.status().is_success() {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        // An unknown worker is a 404 too, and registering again mends it.
        if status.as_u16() == 405 || (status.as_u16() == 404 && text.contains("no such route")) {
            return End {
                unsupported: true,
                ..End::default()
            };
        }
        tracing::warn!(%status, answer = %text.trim(), "web refused the presence");
        return End {
            why: format!("refused ({status})"),
            ..End::default()
        };
    }
    let mut held = false;
    let mut last = String::new();
    let mut lines = response.bytes_stream();
    while let Some(chunk) = lines.next().await {
        match chunk {
            Ok(bytes) => {
                for line in String::from_utf8_lossy(&bytes).lines() {
                    if line == "held" && !held {
                        held = true;
                        tracing::info!("presence held by web");
                    }
                    last = line.to_string();
                }
            }
            Err(e) => {
                return End {
                    held,
                    why: format!("connection to web broke: {e}"),
                    ..End::default()
                }
            }
        }
    }
    End {
        held,
        why: format!("web ended it: {last}"),
        ..End::default()
    }
}

/// `<web>/api/v1/workers/<name>/presence`.
fn presence_url(web_url: &str, name: &str) -> Option<reqwest::Url> {
    let mut url = reqwest::Url::parse(web_url).ok()?;
    {
        let mut path = url.path_segments_mut().ok()?;
        path.pop_if_empty();
        for s in hangar_api::API_PREFIX.trim_start_matches('/').split('/') {
            path.push(s);
        }
        path.extend(["workers", name, "presence"]);
    }
    Some(url)
}
