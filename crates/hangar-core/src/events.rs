//! The kinds of lifecycle event hangar records, so an operator can see why a
//! worker changed.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A worker name registered for the first time (or after it was removed).
    Registered,
    /// The same name registered again with the same state identity: its work
    /// dir survived, so its volumes are kept.
    RestartedStateKept,
    /// The same name registered again with a different state identity: its
    /// work dir was wiped, so everything web knew of it is gone.
    RestartedStateLost,
    Stalled,
    Landing,
    Landed,
    Retiring,
    Retired,
    Pruned,
    RemovedAfterStallTimeout,
    RemovedEphemeral,
    /// A registration under the name of a worker that still answers was
    /// refused: nothing of the live worker changed.
    TakeoverRefused,
}

impl EventKind {
    pub const ALL: [EventKind; 12] = [
        EventKind::Registered,
        EventKind::RestartedStateKept,
        EventKind::RestartedStateLost,
        EventKind::Stalled,
        EventKind::Landing,
        EventKind::Landed,
        EventKind::Retiring,
        EventKind::Retired,
        EventKind::Pruned,
        EventKind::RemovedAfterStallTimeout,
        EventKind::RemovedEphemeral,
        EventKind::TakeoverRefused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Registered => "registered",
            EventKind::RestartedStateKept => "restarted-state-kept",
            EventKind::RestartedStateLost => "restarted-state-lost",
            EventKind::Stalled => "stalled",
            EventKind::Landing => "landing",
            EventKind::Landed => "landed",
            EventKind::Retiring => "retiring",
            EventKind::Retired => "retired",
            EventKind::Pruned => "pruned",
            EventKind::RemovedAfterStallTimeout => "removed-after-stall-timeout",
            EventKind::RemovedEphemeral => "removed-ephemeral",
            EventKind::TakeoverRefused => "takeover-refused",
        }
    }

    /// Whether this event is a restart of a worker that was already known.
    pub fn is_restart(self) -> bool {
        matches!(
            self,
            EventKind::RestartedStateKept | EventKind::RestartedStateLost
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown event kind {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_round_trips_through_its_name() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
        }
        assert!("exploded".parse::<EventKind>().is_err());
    }
}
