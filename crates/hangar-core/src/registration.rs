//! What a registration means, given what web already knew of the name.

use crate::events::EventKind;
use crate::lifecycle::WorkerState;

/// What web knew of a worker name when a registration for it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownWorker {
    pub state: WorkerState,
    pub state_identity: String,
    pub generation: i64,
}

/// The meaning of one registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistrationKind {
    /// No row for the name: a new worker.
    New,
    /// Same name, same state identity: the process restarted (or recovered
    /// from a stall) and its work dir survived; its volumes are still valid.
    StateKept,
    /// Same name, new state identity: the work dir was wiped (a recreated pod,
    /// a new disk); whatever web knew of the old one is false.
    StateLost,
}

impl RegistrationKind {
    pub const ALL: [RegistrationKind; 3] = [
        RegistrationKind::New,
        RegistrationKind::StateKept,
        RegistrationKind::StateLost,
    ];

    pub fn event(self) -> EventKind {
        match self {
            RegistrationKind::New => EventKind::Registered,
            RegistrationKind::StateKept => EventKind::RestartedStateKept,
            RegistrationKind::StateLost => EventKind::RestartedStateLost,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RegistrationKind::New => "new",
            RegistrationKind::StateKept => "state-kept",
            RegistrationKind::StateLost => "state-lost",
        }
    }
}

impl std::fmt::Display for RegistrationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub fn classify_registration(
    known: Option<&KnownWorker>,
    state_identity: &str,
) -> RegistrationKind {
    match known {
        None => RegistrationKind::New,
        Some(k) if k.state_identity == state_identity => RegistrationKind::StateKept,
        Some(_) => RegistrationKind::StateLost,
    }
}

/// The cause recorded with a registration event, in plain words.
pub fn registration_cause(
    known: Option<&KnownWorker>,
    kind: RegistrationKind,
    generation: i64,
) -> String {
    match (known, kind) {
        (Some(k), RegistrationKind::StateLost) => format!(
            "registered as generation {generation} with state identity changed (was {} in generation {}, {}): its work dir was wiped",
            short_id(&k.state_identity),
            k.generation,
            k.state
        ),
        (Some(k), _) => format!(
            "registered as generation {generation} with the same state identity (was generation {}, {})",
            k.generation, k.state
        ),
        (None, _) => format!("registered as generation {generation}"),
    }
}

/// The first 8 characters of an identity: enough for a human to compare two.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// The incarnation that holds a name when a registration for it arrives,
/// as far as deciding whether it may be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incumbent {
    pub state: WorkerState,
    pub last_heartbeat_at: i64,
    /// Whether web can call the incumbent's API with the incumbent's own
    /// credential (a worker that registered with an API URL and token).
    pub probeable: bool,
    /// The registration comes from the incumbent process itself (it
    /// presented the incumbent's own API token): re-registering after a
    /// stall or a self-landing is no takeover.
    pub same_process: bool,
}

/// What web must do before a registration may replace the incumbent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Nothing holds the name, or what holds it is known to be gone.
    Free,
    /// The incumbent still heartbeats: call its API with its own credential;
    /// the registration is accepted only if it does not answer.
    ProbeFirst,
    /// The incumbent still heartbeats and cannot be called: the name is
    /// taken until its heartbeats lapse.
    Refuse,
}

/// Decides whether a registration may take a name over. A heartbeat within
/// the TTL is a sign of life that only a failed probe can outweigh; a stalled
/// or silent incumbent is gone already, so the common case (a pod recreated
/// after its process died) never waits.
pub fn takeover_rule(incumbent: Option<&Incumbent>, now: i64, ttl_ms: i64) -> Takeover {
    let Some(i) = incumbent else {
        return Takeover::Free;
    };
    let silent = now.saturating_sub(i.last_heartbeat_at) >= ttl_ms;
    if i.same_process || silent || i.state == WorkerState::Stalled {
        Takeover::Free
    } else if i.probeable {
        Takeover::ProbeFirst
    } else {
        Takeover::Refuse
    }
}

/// What a probe of the incumbent's API found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// Its own process answered with its own credential.
    Answers,
    /// Nothing listens at its address any more, the address is gone, or
    /// another process answers there (it refuses the incumbent's
    /// credential).
    Gone,
    /// No answer either way in time: a host that is gone, or a live
    /// process too busy to answer (a flood of connections, say).
    Silent,
}

/// Whether a registration may take the name after [`Takeover::ProbeFirst`].
/// Only a probe that shows the incumbent gone frees the name: silence
/// does not, or anyone able to keep a live worker busy could take its name
/// (and its builds); a silent incumbent is free once its heartbeats lapse.
pub fn may_take_after(probe: ProbeAnswer) -> bool {
    match probe {
        ProbeAnswer::Gone => true,
        ProbeAnswer::Answers | ProbeAnswer::Silent => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_probe_that_shows_the_incumbent_gone_frees_the_name() {
        for (probe, free) in [
            (ProbeAnswer::Answers, false),
            (ProbeAnswer::Gone, true),
            (ProbeAnswer::Silent, false),
        ] {
            assert_eq!(may_take_after(probe), free, "{probe:?}");
        }
    }

    #[test]
    fn only_an_incumbent_that_may_be_alive_is_probed() {
        let ttl = 15_000;
        let now = 100_000;
        let incumbent = |state, heartbeat_ago: i64, probeable, same_process| Incumbent {
            state,
            last_heartbeat_at: now - heartbeat_ago,
            probeable,
            same_process,
        };
        use Takeover::*;
        use WorkerState::*;
        let cases = [
            (None, Free),
            (Some(incumbent(Running, 1_000, true, false)), ProbeFirst),
            (Some(incumbent(Landing, 1_000, true, false)), ProbeFirst),
            (Some(incumbent(Landed, 1_000, true, false)), ProbeFirst),
            (Some(incumbent(Retiring, 1_000, true, false)), ProbeFirst),
            // Alive by its heartbeats and no way to ask it: the name is taken.
            (Some(incumbent(Running, 1_000, false, false)), Refuse),
            // Silent for a whole TTL: gone, whatever the loop has not yet written.
            (Some(incumbent(Running, ttl, true, false)), Free),
            (Some(incumbent(Running, ttl, false, false)), Free),
            (Some(incumbent(Stalled, 1_000, false, false)), Free),
            // The incumbent itself registering again (after a stall or a
            // self-landing) takes nothing from anyone.
            (Some(incumbent(Landed, 1_000, true, true)), Free),
            (Some(incumbent(Running, 1_000, false, true)), Free),
        ];
        for (i, expected) in cases {
            assert_eq!(takeover_rule(i.as_ref(), now, ttl), expected, "{i:?}");
        }
    }

    fn known(identity: &str) -> KnownWorker {
        KnownWorker {
            state: WorkerState::Stalled,
            state_identity: identity.into(),
            generation: 4,
        }
    }

    #[test]
    fn registrations_are_classified_by_state_identity() {
        let cases = [
            (None, "abc", RegistrationKind::New, EventKind::Registered),
            (
                Some(known("abc")),
                "abc",
                RegistrationKind::StateKept,
                EventKind::RestartedStateKept,
            ),
            (
                Some(known("abc")),
                "xyz",
                RegistrationKind::StateLost,
                EventKind::RestartedStateLost,
            ),
        ];
        for (k, id, kind, event) in cases {
            let got = classify_registration(k.as_ref(), id);
            assert_eq!((got, got.event()), (kind, event), "{k:?} {id}");
        }
    }

    #[test]
    fn a_lost_state_cause_names_the_old_identity_and_generation() {
        let k = known("0123456789abcdef");
        let cause = registration_cause(Some(&k), RegistrationKind::StateLost, 9);
        assert_eq!(
            cause,
            "registered as generation 9 with state identity changed (was 01234567 in generation 4, stalled): its work dir was wiped"
        );
    }
}
