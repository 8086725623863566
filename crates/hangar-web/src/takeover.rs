//! Whether a registration may take a worker's name from its current holder.
//! The rule is the core's ([`takeover_rule`]); this is the I/O around it:
//! reading the holder, probing its API with its own credential, and
//! recording a refusal.

use std::net::SocketAddr;
use std::time::Duration;

use hangar_api::credentials::same_secret;
use hangar_api::RegisterWorker;
use hangar_client::WorkerApi;
use hangar_core::registration::{short_id, takeover_rule, Incumbent, Takeover};
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
            if !answers(&h).await {
                return Ok(Expect::Incumbent(Some(h.generation)));
            }
            format!(
                "its current registration (generation {}) still answers at {} with its own credential",
                h.generation,
                h.api_url.as_deref().unwrap_or("?")
            )
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

/// Whether the holder's own process answers its API with its own token. A
/// new process at the same address has another token and is refused there,
/// so it does not count as the holder.
async fn answers(h: &IncumbentRecord) -> bool {
    let (Some(url), Some(token)) = (&h.api_url, &h.api_token) else {
        return false;
    };
    let Ok(api) = WorkerApi::new(url, token, PROBE_TIMEOUT) else {
        return false;
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, api.incarnation()).await,
        Ok(Ok(()))
    )
}
