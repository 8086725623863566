//! How many wrong admin tokens a client may send to the dashboard's login
//! form: at most `max_failures` in a window of `window_ms`, counted from
//! the client's first failure of the window. Past that, every attempt
//! from the client (the right token too, or guessing would go on) is
//! refused until the window ends. A success clears the client's count.
//!
//! The table is bounded: windows that ended are dropped before a new
//! client is added, and when it is still full the client whose window
//! started first gives way, so a flood of addresses costs memory up to
//! the bound and no more.

use std::collections::HashMap;

use crate::UnixMillis;

/// The dashboard's limits: 5 wrong tokens per client in 5 minutes.
pub const MAX_FAILURES: u32 = 5;
pub const WINDOW_MS: i64 = 5 * 60 * 1000;
/// Clients remembered at once.
pub const MAX_CLIENTS: usize = 10_000;

/// Whether an attempt may be checked at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// Too many failures: try again in `retry_after_ms`.
    Limited {
        retry_after_ms: i64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    started_at: UnixMillis,
    failures: u32,
}

#[derive(Debug, Clone)]
pub struct LoginLimiter {
    max_failures: u32,
    window_ms: i64,
    max_clients: usize,
    clients: HashMap<String, Window>,
}

impl Default for LoginLimiter {
    fn default() -> LoginLimiter {
        LoginLimiter::new(MAX_FAILURES, WINDOW_MS, MAX_CLIENTS)
    }
}

impl LoginLimiter {
    pub fn new(max_failures: u32, window_ms: i64, max_clients: usize) -> LoginLimiter {
        LoginLimiter {
            max_failures: max_failures.max(1),
            window_ms: window_ms.max(1),
            max_clients: max_clients.max(1),
            clients: HashMap::new(),
        }
    }

    fn current(&self, client: &str, now: UnixMillis) -> Option<Window> {
        self.clients
            .get(client)
            .copied()
            .filter(|w| now - w.started_at < self.window_ms)
    }

    /// Asked before the token is compared.
    pub fn admit(&self, client: &str, now: UnixMillis) -> Admission {
        match self.current(client, now) {
            Some(w) if w.failures >= self.max_failures => Admission::Limited {
                retry_after_ms: w.started_at + self.window_ms - now,
            },
            _ => Admission::Allowed,
        }
    }

    /// A wrong token from `client`.
    pub fn failed(&mut self, client: &str, now: UnixMillis) {
        let window = match self.current(client, now) {
            Some(w) => Window {
                failures: w.failures.saturating_add(1),
                ..w
            },
            None => Window {
                started_at: now,
                failures: 1,
            },
        };
        if !self.clients.contains_key(client) && self.clients.len() >= self.max_clients {
            self.make_room(now);
        }
        self.clients.insert(client.to_string(), window);
    }

    /// The right token from `client`: its count starts again.
    pub fn succeeded(&mut self, client: &str) {
        self.clients.remove(client);
    }

    /// How many clients are remembered.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    fn make_room(&mut self, now: UnixMillis) {
        let window = self.window_ms;
        self.clients.retain(|_, w| now - w.started_at < window);
        if self.clients.len() >= self.max_clients {
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(name, w)| (w.started_at, name.as_str()))
                .map(|(name, _)| name.clone());
            if let Some(name) = oldest {
                self.clients.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    enum Op {
        Fail(&'static str, i64),
        Succeed(&'static str),
        /// Expects `admit(client, at)` to answer this.
        Admit(&'static str, i64, Admission),
    }
    use Op::*;

    const OK: Admission = Admission::Allowed;
    fn limited(ms: i64) -> Admission {
        Admission::Limited { retry_after_ms: ms }
    }

    #[test]
    fn failures_are_counted_per_client_within_a_window() {
        // 3 failures per 1,000 ms.
        let cases: Vec<(&str, Vec<Op>)> = vec![
            ("no failures", vec![Admit("a", 0, OK)]),
            (
                "below the limit",
                vec![Fail("a", 0), Fail("a", 10), Admit("a", 20, OK)],
            ),
            (
                "at the limit, until the window ends",
                vec![
                    Fail("a", 100),
                    Fail("a", 200),
                    Fail("a", 300),
                    Admit("a", 300, limited(800)),
                    Admit("a", 1099, limited(1)),
                    Admit("a", 1100, OK),
                ],
            ),
            (
                "another client is not limited",
                vec![Fail("a", 0), Fail("a", 0), Fail("a", 0), Admit("b", 1, OK)],
            ),
            (
                "a failure after the window starts a new one",
                vec![
                    Fail("a", 0),
                    Fail("a", 0),
                    Fail("a", 1000),
                    Admit("a", 1000, OK),
                    Fail("a", 1500),
                    Fail("a", 1600),
                    Admit("a", 1600, limited(400)),
                ],
            ),
            (
                "a success clears the count",
                vec![
                    Fail("a", 0),
                    Fail("a", 0),
                    Succeed("a"),
                    Fail("a", 1),
                    Fail("a", 1),
                    Admit("a", 2, OK),
                ],
            ),
            (
                "failures past the limit do not extend the window",
                vec![
                    Fail("a", 0),
                    Fail("a", 0),
                    Fail("a", 0),
                    Fail("a", 900),
                    Admit("a", 999, limited(1)),
                    Admit("a", 1000, OK),
                ],
            ),
        ];
        for (name, ops) in cases {
            let mut l = LoginLimiter::new(3, 1000, 100);
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Fail(c, at) => l.failed(c, at),
                    Succeed(c) => l.succeeded(c),
                    Admit(c, at, want) => {
                        assert_eq!(l.admit(c, at), want, "{name}: op {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_table_is_bounded() {
        // Two clients at most, 2 failures per 1,000 ms; then client "c"
        // fails at `at`.
        type Case = (&'static str, Vec<Op>, i64, Vec<(&'static str, Admission)>);
        let cases: Vec<Case> = vec![
            (
                "ended windows make room first",
                vec![Fail("a", 0), Fail("a", 0), Fail("b", 1500), Fail("b", 1500)],
                1600,
                vec![("a", OK), ("b", limited(900))],
            ),
            (
                "when still full, the oldest window gives way",
                vec![Fail("a", 0), Fail("a", 0), Fail("b", 10), Fail("b", 10)],
                20,
                vec![("a", OK), ("b", limited(990))],
            ),
        ];
        for (name, ops, at, want) in cases {
            let mut l = LoginLimiter::new(2, 1000, 2);
            for op in ops {
                if let Fail(c, t) = op {
                    l.failed(c, t);
                }
            }
            l.failed("c", at);
            assert_eq!(l.len(), 2, "{name}");
            for (client, admission) in want {
                assert_eq!(l.admit(client, at), admission, "{name}: {client}");
            }
        }
    }
}
