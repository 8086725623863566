//! A short-lived cache of what a manager answered, as Concourse's secret
//! cache: off unless enabled; found secrets kept for the configured time
//! (Concourse's default when enabled: one minute), absent ones for at most
//! ten seconds (Concourse's not-found default), so a secret just created is
//! seen soon. Errors are never cached. Bounded: when full, expired entries
//! go first, then the oldest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Found;

/// The most entries kept.
pub const MAX_ENTRIES: usize = 1024;

/// How long an absent secret is remembered, at most.
pub const NOT_FOUND_TTL: Duration = Duration::from_secs(10);

pub struct Cache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Option<Found>)>>,
}

impl Cache {
    /// `ttl` zero: nothing is cached.
    pub fn new(ttl: Duration) -> Cache {
        Cache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn off() -> Cache {
        Cache::new(Duration::ZERO)
    }

    pub(crate) fn get(&self, key: &str) -> Option<Option<Found>> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((expires, found)) if *expires > Instant::now() => Some(found.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub(crate) fn put(&self, key: &str, found: Option<Found>) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let ttl = if found.is_some() {
            self.ttl
        } else {
            self.ttl.min(NOT_FOUND_TTL)
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(key) {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= MAX_ENTRIES {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key.to_string(), (now + ttl, found));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_keeps_nothing_and_on_is_bounded() {
        let off = Cache::off();
        off.put("a", Some(Found::File("x".into())));
        assert_eq!(off.get("a"), None);
        let on = Cache::new(Duration::from_secs(60));
        on.put("a", Some(Found::File("x".into())));
        on.put("b", None);
        assert_eq!(on.get("a"), Some(Some(Found::File("x".into()))));
        assert_eq!(on.get("b"), Some(None));
        assert_eq!(on.get("c"), None);
        for i in 0..MAX_ENTRIES + 10 {
            on.put(&format!("k{i}"), None);
        }
        assert_eq!(on.len(), MAX_ENTRIES);
    }

    #[test]
    fn entries_expire() {
        let c = Cache::new(Duration::from_millis(1));
        c.put("a", Some(Found::File("x".into())));
        let until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < until {}
        assert_eq!(c.get("a"), None);
        assert!(c.is_empty());
    }
}
