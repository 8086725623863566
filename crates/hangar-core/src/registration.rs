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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
