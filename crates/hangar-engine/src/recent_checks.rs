//! The versions that image checks found lately, by what was checked.
//!
//! Concourse does not check a task's `image_resource` (or a custom
//! resource type's image) again when the same type and source were checked
//! successfully less than the check interval ago (1 minute by default):
//! the build uses the version that check found. hangar does the same, so a
//! task on a cached image starts without a registry round trip. A build
//! that must see a tag's newest digest at once pins the `version`, as in
//! Concourse.
//!
//! Kept in the memory of the web node running the build: another node
//! checks once for itself. Bounded: past [`MAX_ENTRIES`] the stale entries
//! go, and if every entry is fresh, all of them.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

/// Concourse's default check interval.
pub(crate) const DEFAULT_INTERVAL_MS: i64 = 60_000;

const MAX_ENTRIES: usize = 10_000;

#[derive(Default)]
pub(crate) struct RecentChecks {
    /// scope → (version found, when the check ended, ms).
    entries: Mutex<HashMap<String, (Value, i64)>>,
}

impl RecentChecks {
    /// The version a check of `scope` found less than `interval_ms` before
    /// `now`, and how long ago (ms).
    pub(crate) fn fresh(&self, scope: &str, now: i64, interval_ms: i64) -> Option<(Value, i64)> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (version, at) = entries.get(scope)?;
        let age = now - at;
        (0..interval_ms)
            .contains(&age)
            .then(|| (version.clone(), age))
    }

    pub(crate) fn record(&self, scope: String, version: Value, now: i64, interval_ms: i64) {
        if interval_ms <= 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&scope) {
            entries.retain(|_, (_, at)| (0..interval_ms).contains(&(now - *at)));
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(scope, (version, now));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_check_is_reused_only_within_the_interval() {
        let checks = RecentChecks::default();
        checks.record("s".into(), json!({"digest": "a"}), 1_000, 60_000);
        let cases = [
            (1_000, Some(0)),
            (30_000, Some(29_000)),
            (60_999, Some(59_999)),
            (61_000, None),
            // A clock that went back does not make a check fresh.
            (999, None),
        ];
        for (now, age) in cases {
            assert_eq!(
                checks.fresh("s", now, 60_000).map(|(_, a)| a),
                age,
                "at {now}"
            );
        }
        assert_eq!(
            checks.fresh("s", 2_000, 60_000).unwrap().0,
            json!({"digest": "a"})
        );
        assert!(checks.fresh("other", 2_000, 60_000).is_none());
    }

    #[test]
    fn an_interval_of_zero_reuses_nothing() {
        let checks = RecentChecks::default();
        checks.record("s".into(), json!({}), 1_000, 0);
        assert!(checks.fresh("s", 1_000, 0).is_none());
        assert!(checks.fresh("s", 1_000, 60_000).is_none());
    }

    #[test]
    fn the_memory_is_bounded() {
        let checks = RecentChecks::default();
        for i in 0..MAX_ENTRIES {
            checks.record(format!("old{i}"), json!({}), 0, 60_000);
        }
        // All stale by now: they make room.
        checks.record("new".into(), json!({}), 120_000, 60_000);
        let len = checks.entries.lock().unwrap().len();
        assert_eq!(len, 1);
        for i in 0..MAX_ENTRIES {
            checks.record(format!("fresh{i}"), json!({}), 120_000, 60_000);
        }
        assert!(checks.entries.lock().unwrap().len() <= MAX_ENTRIES);
    }
}
