//! Whether a registration may take a worker's name from its current holder.
//! The rule is the core's ([`takeover_rule`]); this is the I/O around it:
//! reading the holder, probing its API with its own credential, and
//! recording a refusal.

use std::net::SocketAddr;
use std::time::Duration;

use hangar_api::credentials::same_secret;
use hangar_api::RegisterWorker;
use hangar_client::{ClientError, WorkerApi};
use hangar_core::registration::{
    may_take_after, short_id, takeover_rule, Incumbent, ProbeAnswer, Takeover,
};
use hangar_store::{Expect, IncumbentRecord};

use crate::error::ApiError;
use crate::Web;

/// How long the holder has to answer a probe. A live worker answers in
/// milliseconds; a dead one's connection is refused at once, or (a pod
/// that is gone with its address) times out here. This bounds how long a
/// recreated pod waits to take its name back.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Decides on a registration, and returns whom it may replace, or the
/// refusal to answer with (already recorded as an event).
pub(crate) async fn check(
    web: &Web,
    req: &RegisterWorker,
    peer: Option<SocketAddr>,
) -> Result<Expect, ApiError> {
    let holder = web.store().worker_incumbent(&req.name).await?;
    let Some(h) = holder else {
        return Ok(Expect::Incumbent(None));
    };
    let same_process = match (&h.api_token, &req.api_token) {
        (Some(theirs), Some(ours)) => same_secret(theirs.as_bytes(), ours.as_bytes()),
        _ => false,
    };
    let incumbent = Incumbent {
        state: h.state,
        last_heartbeat_at: h.last_heartbeat_at,
        probeable: h.api_url.is_some() && h.api_token.is_some(),
        same_process,
    };
    let ttl = web.config().lifecycle.heartbeat_ttl_ms;
    let why = match takeover_rule(Some(&incumbent), web.now(), ttl) {
        Takeover::Free => return Ok(Expect::Incumbent(Some(h.generation))),
        Takeover::ProbeFirst => {
            let probe = probe(&h).await;
            if may_take_after(probe) {
                return Ok(Expect::Incumbent(Some(h.generation)));
            }
            let at = h.api_url.as_deref().unwrap_or("?");
            match probe {
                ProbeAnswer::Silent => format!(
                    "its current registration (generation {}) still heartbeats, and its API at {at} neither answered nor refused within {} ms (the name is free once its heartbeats lapse)",
                    h.generation,
                    PROBE_TIMEOUT.as_millis()
                ),
                _ => format!(
                    "its current registration (generation {}) still answers at {at} with its own credential",
                    h.generation,
                ),
            }
        }
        Takeover::Refuse => format!(
            "its current registration (generation {}) still heartbeats and serves no API web could ask",
            h.generation
        ),
    };
    let caller = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
    let cause = format!(
        "registration refused: {why}; the caller at {caller} claimed state identity {} and API {}",
        short_id(&req.state_identity),
        req.api_url.as_deref().unwrap_or("(none)")
    );
    tracing::warn!(worker = %req.name, %caller, "{cause}");
    web.store()
        .record_takeover_refused(&req.name, h.generation, &cause, web.now())
        .await?;
    Err(ApiError::takeover_refused(format!(
            "worker {} is alive: a registration under its name is refused while its current process answers \
             (a restarted worker is accepted once the old process is gone)",
            req.name
        ),
    ))
}

/// What the holder's API says when asked with the holder's own token. A
/// new process at the same address has another token and refuses it, so
/// it shows the holder gone.
async fn probe(h: &IncumbentRecord) -> ProbeAnswer {
    let (Some(url), Some(token)) = (&h.api_url, &h.api_token) else {
        return ProbeAnswer::Gone;
    };
    let Ok(api) = WorkerApi::new(url, token, PROBE_TIMEOUT) else {
        return ProbeAnswer::Gone;
    };
    match tokio::time::timeout(PROBE_TIMEOUT, api.incarnation()).await {
        Ok(result) => answer_of(&result),
        Err(_) => ProbeAnswer::Silent,
    }
}

/// A probe's result as an answer: only a refused connection, an address
/// that is gone or an HTTP refusal of the credential show the holder gone;
/// a timeout or a connection closed unanswered (a server at its
/// connection cap closes new ones) is silence.
fn answer_of(result: &Result<(), ClientError>) -> ProbeAnswer {
    match result {
        Ok(()) => ProbeAnswer::Answers,
        Err(ClientError::Api { .. }) => ProbeAnswer::Gone,
        Err(ClientError::Transport { source, .. }) if source.is_timeout() => ProbeAnswer::Silent,
        Err(ClientError::Transport { source, .. }) => {
            let mut cause: Option<&dyn std::error::Error> = Some(source);
            while let Some(e) = cause {
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    use std::io::ErrorKind::*;
                    if matches!(
                        io.kind(),
                        ConnectionRefused | HostUnreachable | NetworkUnreachable
                    ) {
                        return ProbeAnswer::Gone;
                    }
                }
                cause = e.source();
            }
            ProbeAnswer::Silent
        }
        Err(ClientError::Decode(_) | ClientError::BadUrl(..)) => ProbeAnswer::Silent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn probe_of(url: &str) -> ProbeAnswer {
        let api = WorkerApi::new(url, "token", PROBE_TIMEOUT).unwrap();
        let result = tokio::time::timeout(PROBE_TIMEOUT, api.incarnation()).await;
        result.map_or(ProbeAnswer::Silent, |r| answer_of(&r))
    }

    #[tokio::test]
    async fn a_closed_port_is_gone() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert_eq!(probe_of(&format!("http://{addr}")).await, ProbeAnswer::Gone);
    }

    /// A server that accepts and closes at once (one at its connection
    /// cap) is alive: silence, never gone.
    #[tokio::test]
    async fn a_connection_closed_unanswered_is_silence() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        assert_eq!(
            probe_of(&format!("http://{addr}")).await,
            ProbeAnswer::Silent
        );
    }

    /// A server that accepts and never answers (its threads busy).
    #[tokio::test]
    async fn a_connection_never_answered_is_silence() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                open.push(s);
            }
        });
        assert_eq!(
            probe_of(&format!("http://{addr}")).await,
            ProbeAnswer::Silent
        );
        held.abort();
    }
}
