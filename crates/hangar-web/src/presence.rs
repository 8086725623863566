//! Each worker process holds one long-lived request to a web node beside
//! its heartbeats (`POST /workers/{name}/presence`): its body streams for
//! as long as the process lives, and the kernel closes it the moment the
//! process dies. A worker that stops on purpose (stop, land, retire) first
//! sends [`GOODBYE`]. When the body ends any other way, web asks the
//! worker's API with the worker's own token ([`probe`]): a process that is
//! gone (connection refused) is settled at once, as the heartbeat TTL
//! would settle it later (`hangar_core::lifecycle::plan_gone`, applied by
//! the store under the same guards); one that answers (a network blip, a
//! proxy that dropped the connection) is left alone; a host that does not
//! answer within [`PROBE_TIMEOUT`] is left to the TTL, which judges hosts
//! and networks. A node that stops serving ends its own presences without
//! probing anyone.
//!
//! Bounded: a node holds one presence per worker name (a newer one, which
//! must present the current registration's token, replaces the older),
//! and a held presence ends once its registration is no longer current
//! (looked at every heartbeat TTL), so the sockets of dead hosts do not
//! pile up. The answer streams a line as the presence begins (`held`) and
//! one as it ends (why), so the worker knows when to connect again.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use hangar_client::{ClientError, WorkerApi};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::Web;

/// What a worker that stops on purpose sends before it ends the body.
pub(crate) const GOODBYE: &[u8] = b"goodbye";

/// How long a worker's API has to answer web's probe. A live worker
/// answers in milliseconds and a dead process's port refuses at once; a
/// host that does not answer in this time is the TTL's to judge.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How a presence ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresenceOutcome {
    /// The worker said goodbye.
    Goodbye,
    /// A newer presence of the same worker took its place on this node.
    Replaced,
    /// This node began to stop serving.
    WebStopping,
    /// The registration it was held for is no longer current (the worker
    /// registered again, stalled or was removed).
    NotCurrent,
    /// Lost without a goodbye; the worker's API answered: alive.
    Answers,
    /// Lost without a goodbye; the worker's API did not answer in time (or
    /// could not be asked): left to the TTL.
    NoAnswer(String),
    /// Lost without a goodbye; the worker's process is gone. `settled`:
    /// whether this node stalled (or removed) it, rather than finding it
    /// already changed.
    Gone { settled: bool },
}

/// One presence's end, as [`Presences::ends`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceEnd {
    pub worker: String,
    pub generation: i64,
    pub outcome: PresenceOutcome,
}

/// The presences this node holds.
#[derive(Default)]
pub(crate) struct Presences {
    held: Mutex<HashMap<String, Held>>,
    next_id: AtomicU64,
    ends: std::sync::OnceLock<broadcast::Sender<PresenceEnd>>,
}

struct Held {
    id: u64,
    replaced: CancellationToken,
}

/// A held presence; dropping it forgets it (unless a newer one replaced it).
struct Hold {
    web: Web,
    name: String,
    id: u64,
    replaced: CancellationToken,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.web.presences().lock();
        if held.get(&self.name).is_some_and(|h| h.id == self.id) {
            held.remove(&self.name);
        }
    }
}

impl Presences {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sender(&self) -> &broadcast::Sender<PresenceEnd> {
        self.ends.get_or_init(|| broadcast::channel(256).0)
    }

    /// Every presence's end from now on.
    pub(crate) fn ends(&self) -> broadcast::Receiver<PresenceEnd> {
        self.sender().subscribe()
    }

    /// How many presences this node holds.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Holds `name`'s presence on `web`'s node, replacing the one held
    /// before.
    fn hold(web: &Web, name: &str) -> Hold {
        let presences = web.presences();
        let id = presences.next_id.fetch_add(1, Ordering::Relaxed);
        let replaced = CancellationToken::new();
        let old = presences.lock().insert(
            name.to_string(),
            Held {
                id,
                replaced: replaced.clone(),
            },
        );
        if let Some(old) = old {
            old.replaced.cancel();
        }
        Hold {
            web: web.clone(),
            name: name.to_string(),
            id,
            replaced,
        }
    }
}

/// The answer's body: lines from the task watching the presence.
pub(crate) fn begin(web: &Web, name: String, generation: i64, body: Body) -> Body {
    // Held before the answer says so, in the order the requests came: a
    // newer presence always replaces an older one.
    let hold = Presences::hold(web, &name);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(4);
    // Room for the first line is there: the channel is new.
    let _ = tx.try_send(Ok(Bytes::from_static(b"held\n")));
    // The watch owns the request's body; it ends when the body does, when
    // replaced, or when the node stops.
    tokio::spawn(watch(web.clone(), hold, name, generation, body, tx));
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (line, rx))
    }))
}

/// How the watch saw the body end.
enum Ended {
    Goodbye,
    Replaced,
    WebStopping,
    NotCurrent,
    Lost(String),
}

async fn watch(
    web: Web,
    hold: Hold,
    name: String,
    generation: i64,
    body: Body,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    tracing::debug!(worker = %name, generation, "worker presence held");
    let mut frames = body.into_data_stream();
    let mut said: Vec<u8> = Vec::new();
    let ttl = Duration::from_millis(web.config().lifecycle.heartbeat_ttl_ms.max(1000) as u64);
    let mut current = tokio::time::interval_at(tokio::time::Instant::now() + ttl, ttl);
    let ended = loop {
        tokio::select! {
            biased;
            _ = web.stopping().cancelled() => break Ended::WebStopping,
            _ = hold.replaced.cancelled() => break Ended::Replaced,
            frame = frames.next() => match frame {
                Some(Ok(bytes)) => {
                    said.extend_from_slice(&bytes);
                    if said == GOODBYE {
                        break Ended::Goodbye;
                    }
                    if !GOODBYE.starts_with(&said) {
                        break Ended::Lost("the presence sent something other than a goodbye".into());
                    }
                }
                Some(Err(e)) => break Ended::Lost(format!("its connection to web closed ({})", root_cause(&e))),
                None => break Ended::Lost("its connection to web closed without a goodbye".into()),
            },
            _ = current.tick() => {
                if let Err(e) = web.store().check_worker_generation(&name, generation).await {
                    if matches!(e, hangar_store::StoreError::Refused { .. } | hangar_store::StoreError::NotFound(_)) {
                        break Ended::NotCurrent;
                    }
                }
            }
        }
    };
    drop(hold);
    let (line, outcome) = match ended {
        Ended::Goodbye => ("goodbye", PresenceOutcome::Goodbye),
        Ended::Replaced => ("replaced", PresenceOutcome::Replaced),
        Ended::WebStopping => ("web-stopping", PresenceOutcome::WebStopping),
        Ended::NotCurrent => ("not-current", PresenceOutcome::NotCurrent),
        Ended::Lost(how) => ("lost", lost(&web, &name, generation, &how).await),
    };
    let _ = tx.try_send(Ok(Bytes::from(format!("{line}\n"))));
    drop(tx);
    tracing::info!(worker = %name, generation, ?outcome, "worker presence ended");
    let _ = web.presences().sender().send(PresenceEnd {
        worker: name,
        generation,
        outcome,
    });
}

/// A presence ended without a goodbye: probe, and settle a gone process.
async fn lost(web: &Web, name: &str, generation: i64, how: &str) -> PresenceOutcome {
    if web.stopping().is_cancelled() {
        // This node dropped it: the worker is not to blame.
        return PresenceOutcome::WebStopping;
    }
    // A database that is busy for a moment (SQLite's one writer) does not
    // leave a dead worker to the TTL: the look-up and the write are tried
    // a few times.
    let mut tries = 0;
    let gone = loop {
        tries += 1;
        match probe(web, name, generation).await {
            Probe::Lookup(e) if tries < 3 => {
                tracing::warn!(worker = %name, error = %e, "cannot look up a worker whose presence closed; trying again");
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            other => break other,
        }
    };
    let gone = match gone {
        Probe::Lookup(e) => {
            tracing::warn!(worker = %name, error = %e, "cannot look up a worker whose presence closed: left to the heartbeat TTL");
            return PresenceOutcome::NoAnswer(format!("could not be looked up: {e}"));
        }
        Probe::Answers => {
            tracing::info!(worker = %name, generation, "{how}, but its API answers: alive");
            return PresenceOutcome::Answers;
        }
        Probe::NoAnswer(why) => {
            tracing::info!(worker = %name, generation, "{how} and its API {why}: left to the heartbeat TTL");
            return PresenceOutcome::NoAnswer(why);
        }
        Probe::NotCurrent => return PresenceOutcome::NotCurrent,
        Probe::Gone(why) => why,
    };
    let cause = format!("process gone: {how} and its API {gone}");
    let mut tries = 0;
    let settled = loop {
        tries += 1;
        match web
            .store()
            .settle_gone_worker(name, generation, &cause, web.now())
            .await
        {
            Err(e) if tries < 3 => {
                tracing::warn!(worker = %name, error = %e, "cannot settle a worker whose process is gone; trying again");
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            other => break other,
        }
    };
    match settled {
        Ok(Some(action)) => {
            tracing::info!(worker = %name, event = %action.event, cause = %action.cause, "worker lifecycle");
            web.metrics().count_lifecycle_event(action.event);
            PresenceOutcome::Gone { settled: true }
        }
        Ok(None) => PresenceOutcome::Gone { settled: false },
        Err(e) => {
            tracing::warn!(worker = %name, error = %e, "cannot settle a worker whose process is gone; the TTL will");
            PresenceOutcome::NoAnswer(format!("could not be settled: {e}"))
        }
    }
}

/// What the probe of a worker's API found.
enum Probe {
    Answers,
    /// The process is gone, in words.
    Gone(String),
    /// No answer in time, or no way to ask.
    NoAnswer(String),
    /// The registration changed or is not expected to be alive.
    NotCurrent,
    /// The worker's row could not be read.
    Lookup(hangar_store::StoreError),
}

/// Asks the registration `generation` of `name` whether it is alive, with
/// its own token, as a takeover does.
async fn probe(web: &Web, name: &str, generation: i64) -> Probe {
    let holder = match web.store().worker_incumbent(name).await {
        Ok(Some(h)) => h,
        Ok(None) => return Probe::NotCurrent,
        Err(e) => return Probe::Lookup(e),
    };
    if holder.generation != generation || !holder.state.expects_heartbeats() {
        return Probe::NotCurrent;
    }
    let (Some(url), Some(token)) = (&holder.api_url, &holder.api_token) else {
        return Probe::NoAnswer("cannot be asked (no API web can call)".into());
    };
    let api = match WorkerApi::new(url, token, PROBE_TIMEOUT) {
        Ok(api) => api,
        Err(e) => return Probe::NoAnswer(format!("cannot be asked: {e}")),
    };
    match tokio::time::timeout(PROBE_TIMEOUT, api.incarnation()).await {
        Ok(Ok(())) => Probe::Answers,
        Ok(Err(ClientError::Transport { source, .. }))
            if source.is_connect() && !source.is_timeout() =>
        {
            Probe::Gone(format!(
                "at {url} refuses connections ({})",
                root_cause(&source)
            ))
        }
        // Another process answers at the address and refuses this
        // registration's token: the one web asked for is gone.
        Ok(Err(ClientError::Api { status, .. })) if matches!(status.as_u16(), 401 | 403) => {
            Probe::Gone(format!("at {url} is another process's"))
        }
        Ok(Err(ClientError::Transport { source, .. })) if source.is_timeout() => {
            Probe::NoAnswer(format!("did not answer within {PROBE_TIMEOUT:?}"))
        }
        Ok(Err(e)) => Probe::NoAnswer(format!("failed: {e}")),
        Err(_) => Probe::NoAnswer(format!("did not answer within {PROBE_TIMEOUT:?}")),
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
