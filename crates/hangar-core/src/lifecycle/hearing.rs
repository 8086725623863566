//! Since when a web node could hear heartbeats: silence is judged only
//! from then. For one TTL after a node starts, and after its database
//! answers again following a failed pass (or a pass that waited for it
//! longer than a quarter of the TTL), no worker is declared dead for not
//! heartbeating, since its heartbeats could not land while web or its
//! database was down.

use crate::LifecycleConfig;

/// The lifecycle loop's memory between passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hearing {
    listening_since: i64,
    failing: bool,
}

impl Hearing {
    /// A node that began listening at `now`.
    pub fn new(now: i64) -> Hearing {
        Hearing {
            listening_since: now,
            failing: false,
        }
    }

    /// The rules for a pass starting at `now`: within one TTL of the time
    /// the node could hear again, silence expires no one.
    pub fn rules_for_pass(&mut self, config: &LifecycleConfig, now: i64) -> LifecycleConfig {
        if self.failing {
            self.listening_since = now;
        }
        judged_from(config, self.listening_since, now)
    }

    /// A pass that began at `started` ended at `done`, `ok` or not.
    pub fn pass_ended(&mut self, config: &LifecycleConfig, ok: bool, started: i64, done: i64) {
        self.failing = !ok;
        // A pass that waited long for the database saw it down (or stuck)
        // meanwhile: heartbeats could not land either.
        if ok && done - started > config.heartbeat_ttl_ms / 4 {
            self.listening_since = done;
        }
    }
}

/// The lifecycle rules for a pass at `now` by a node that has been able to
/// hear heartbeats since `listening_since`.
pub fn judged_from(config: &LifecycleConfig, listening_since: i64, now: i64) -> LifecycleConfig {
    let mut config = *config;
    if now < listening_since.saturating_add(config.heartbeat_ttl_ms) {
        config.heartbeat_ttl_ms = i64::MAX / 2;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::plan_lifecycle;
    use crate::{WorkerSnapshot, WorkerState};

    const TTL: i64 = 1_000;
    const DEAF: i64 = i64::MAX / 2;

    fn config() -> LifecycleConfig {
        LifecycleConfig {
            heartbeat_ttl_ms: TTL,
            stalled_worker_timeout_ms: Some(60_000),
        }
    }

    #[test]
    fn silence_is_not_judged_until_web_has_listened_for_a_ttl() {
        // (listening since, now, ttl used)
        let cases = [
            (10_000, 10_000, DEAF),
            (10_000, 10_999, DEAF),
            (10_000, 11_000, TTL),
            (10_000, 50_000, TTL),
        ];
        for (since, now, ttl) in cases {
            let got = judged_from(&config(), since, now);
            assert_eq!(got.heartbeat_ttl_ms, ttl, "since {since} now {now}");
            assert_eq!(got.stalled_worker_timeout_ms, Some(60_000));
        }
    }

    #[test]
    fn passes_move_the_time_from_which_silence_counts() {
        // Each row: a pass (start, end, ok) and the TTL the next pass, at
        // `next`, is judged with.
        struct Row {
            start: i64,
            done: i64,
            ok: bool,
            next: i64,
            ttl: i64,
        }
        let table = [
            // Started at 0: deaf for a TTL, then judging.
            Row {
                start: 0,
                done: 10,
                ok: true,
                next: 500,
                ttl: DEAF,
            },
            Row {
                start: 500,
                done: 510,
                ok: true,
                next: 1_000,
                ttl: TTL,
            },
            // A failed pass: the next one listens afresh from its start.
            Row {
                start: 1_000,
                done: 1_010,
                ok: false,
                next: 2_000,
                ttl: DEAF,
            },
            Row {
                start: 2_000,
                done: 2_010,
                ok: true,
                next: 2_999,
                ttl: DEAF,
            },
            Row {
                start: 2_999,
                done: 3_000,
                ok: true,
                next: 3_000,
                ttl: TTL,
            },
            // A pass that waited more than a quarter TTL: deaf from its end.
            Row {
                start: 3_000,
                done: 3_300,
                ok: true,
                next: 4_000,
                ttl: DEAF,
            },
            Row {
                start: 4_000,
                done: 4_010,
                ok: true,
                next: 4_300,
                ttl: TTL,
            },
        ];
        let mut hearing = Hearing::new(0);
        let mut rules = hearing.rules_for_pass(&config(), 0);
        assert_eq!(rules.heartbeat_ttl_ms, DEAF);
        for (i, row) in table.iter().enumerate() {
            hearing.pass_ended(&config(), row.ok, row.start, row.done);
            rules = hearing.rules_for_pass(&config(), row.next);
            assert_eq!(rules.heartbeat_ttl_ms, row.ttl, "row {i}");
        }
    }

    #[test]
    fn a_worker_silent_through_web_s_outage_is_not_stalled_at_once() {
        let config = LifecycleConfig {
            heartbeat_ttl_ms: TTL,
            stalled_worker_timeout_ms: None,
        };
        // Its last heartbeat landed before web went down for 5 s.
        let w = WorkerSnapshot {
            name: "w".into(),
            state: WorkerState::Running,
            generation: 1,
            ephemeral: false,
            last_heartbeat_at: 0,
            state_changed_at: 0,
            unfinished_work: 0,
        };
        let back = 5_000;
        let first_pass = judged_from(&config, back, back + 100);
        assert!(plan_lifecycle(std::slice::from_ref(&w), back + 100, &first_pass).is_empty());
        // Still silent a TTL after web came back: it is dead after all.
        let later = judged_from(&config, back, back + 1_100);
        assert_eq!(plan_lifecycle(&[w], back + 1_100, &later).len(), 1);
    }
}
