//! Bounded exponential backoff for loops that retry a failing operation
//! (following a container, copying its log, writing a result), with the
//! change of state reported once: a loop logs when it starts failing and
//! when it recovers, not on every failure. A full disk fails every write at
//! once; without this a retry loop spins and logs as fast as it can.
//!
//! Pure: the caller sleeps for the delay it is given.

use std::time::Duration;

/// What one outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth a log line.
    Same,
    /// The first failure after a success (or the start): log it.
    StartedFailing,
    /// The first success after failures: log it, with how many there were.
    Recovered { failures: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    /// Failures in a row.
    failures: u32,
}

impl Backoff {
    /// Delays start at `min` and double up to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// Records a failure: how long to wait before the next try, and whether
    /// this failure began a run of them.
    pub fn failed(&mut self) -> (Duration, Change) {
        let change = if self.failures == 0 {
            Change::StartedFailing
        } else {
            Change::Same
        };
        let shift = self.failures.min(31);
        let delay = self
            .min
            .checked_mul(1u32 << shift)
            .unwrap_or(self.max)
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        (delay, change)
    }

    /// Records a success; the next failure starts from `min` again.
    pub fn succeeded(&mut self) -> Change {
        let failures = std::mem::take(&mut self.failures);
        if failures == 0 {
            Change::Same
        } else {
            Change::Recovered { failures }
        }
    }

    pub fn failing(&self) -> bool {
        self.failures > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_up_to_the_bound_and_only_state_changes_are_reported() {
        let mut b = Backoff::new(100 * MS, 1_000 * MS);
        // (delay, change) of each failure in a row
        let expected = [
            (100, Change::StartedFailing),
            (200, Change::Same),
            (400, Change::Same),
            (800, Change::Same),
            (1_000, Change::Same),
            (1_000, Change::Same),
        ];
        for (i, (ms, change)) in expected.into_iter().enumerate() {
            assert_eq!(b.failed(), (ms * MS, change), "failure {i}");
        }
        assert!(b.failing());
        assert_eq!(b.succeeded(), Change::Recovered { failures: 6 });
        assert_eq!(b.succeeded(), Change::Same);
        assert!(!b.failing());
        // After a recovery it starts over.
        assert_eq!(b.failed(), (100 * MS, Change::StartedFailing));
    }

    #[test]
    fn a_very_long_run_of_failures_stays_at_the_bound() {
        let mut b = Backoff::new(MS, 5_000 * MS);
        for _ in 0..100 {
            b.failed();
        }
        assert_eq!(b.failed().0, 5_000 * MS);
        // A bound below the start is raised to it.
        let mut odd = Backoff::new(10 * MS, MS);
        assert_eq!(odd.failed().0, 10 * MS);
    }
}
