//! How many wrong passwords web takes, per account and in all, without
//! letting a stranger lock a user out.
//!
//! Three windows of [`LoginLimiter`], checked before a password is:
//!
//! - per account and client address (5 in 5 minutes): one client guessing
//!   one account;
//! - per account (20 in 5 minutes): many addresses guessing one account
//!   (ten loopback addresses are as easy to hold as one);
//! - in all (100 a minute): many accounts guessed at once.
//!
//! The last two would let a stranger lock a user out by guessing wrong on
//! purpose; so an address the account has logged in from within
//! [`KNOWN_FOR_MS`] passes them, and is held only to its own per-address
//! window. The admin who has logged in before keeps logging in through an
//! attack; a stranger's fresh addresses do not.

use std::collections::HashMap;

use crate::login_limit::{Admission, LoginLimiter};
use crate::UnixMillis;

pub const PER_CLIENT: (u32, i64) = (5, 5 * 60_000);
pub const PER_ACCOUNT: (u32, i64) = (20, 5 * 60_000);
pub const OVERALL: (u32, i64) = (100, 60_000);
/// How long an address an account logged in from stays known.
pub const KNOWN_FOR_MS: i64 = 30 * 24 * 3600 * 1000;
/// Known (account, address) pairs remembered at once.
pub const MAX_KNOWN: usize = 10_000;

#[derive(Debug, Clone)]
pub struct LoginThrottle {
    per_client: LoginLimiter,
    per_account: LoginLimiter,
    overall: LoginLimiter,
    /// (account, address) → when it last logged in.
    known: HashMap<(String, String), UnixMillis>,
}

impl Default for LoginThrottle {
    fn default() -> LoginThrottle {
        LoginThrottle {
            per_client: LoginLimiter::new(PER_CLIENT.0, PER_CLIENT.1, 10_000),
            per_account: LoginLimiter::new(PER_ACCOUNT.0, PER_ACCOUNT.1, 10_000),
            overall: LoginLimiter::new(OVERALL.0, OVERALL.1, 1),
            known: HashMap::new(),
        }
    }
}

fn pair(account: &str, client: &str) -> String {
    format!("{account}\u{0}{client}")
}

impl LoginThrottle {
    fn is_known(&self, account: &str, client: &str, now: UnixMillis) -> bool {
        self.known
            .get(&(account.to_string(), client.to_string()))
            .is_some_and(|at| now - at < KNOWN_FOR_MS)
    }

    /// Asked before the password is checked. Accounts are compared
    /// without case, as logins are.
    pub fn admit(&self, account: &str, client: &str, now: UnixMillis) -> Admission {
        let account = account.to_lowercase();
        let mine = self.per_client.admit(&pair(&account, client), now);
        if mine != Admission::Allowed || self.is_known(&account, client, now) {
            return mine;
        }
        match self.per_account.admit(&account, now) {
            Admission::Allowed => self.overall.admit("", now),
            limited => limited,
        }
    }

    /// A wrong password.
    pub fn failed(&mut self, account: &str, client: &str, now: UnixMillis) {
        let account = account.to_lowercase();
        self.per_client.failed(&pair(&account, client), now);
        self.per_account.failed(&account, now);
        self.overall.failed("", now);
    }

    /// The right password: the address becomes known for the account.
    pub fn succeeded(&mut self, account: &str, client: &str, now: UnixMillis) {
        let account = account.to_lowercase();
        self.per_client.succeeded(&pair(&account, client));
        if self.known.len() >= MAX_KNOWN {
            self.known.retain(|_, at| now - *at < KNOWN_FOR_MS);
            if self.known.len() >= MAX_KNOWN {
                let oldest = self
                    .known
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.known.remove(&k);
                }
            }
        }
        self.known.insert((account, client.to_string()), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(a: Admission) -> bool {
        a != Admission::Allowed
    }

    #[test]
    fn one_client_gets_five_guesses_at_one_account() {
        let mut t = LoginThrottle::default();
        for _ in 0..5 {
            assert!(!limited(t.admit("admin", "1.1.1.1", 0)));
            t.failed("admin", "1.1.1.1", 0);
        }
        assert!(limited(t.admit("admin", "1.1.1.1", 1)));
        assert!(limited(t.admit("ADMIN", "1.1.1.1", 1)));
        // Another account from that client, and that account from another
        // client, are not held by it.
        assert!(!limited(t.admit("bob", "1.1.1.1", 1)));
        assert!(!limited(t.admit("admin", "2.2.2.2", 1)));
        assert!(!limited(t.admit("admin", "1.1.1.1", PER_CLIENT.1)));
    }

    #[test]
    fn many_addresses_get_twenty_guesses_at_one_account_and_the_known_admin_still_logs_in() {
        let mut t = LoginThrottle::default();
        t.succeeded("admin", "10.0.0.1", 0);
        for i in 0..20 {
            let client = format!("127.0.0.{}", i % 10 + 2);
            assert!(!limited(t.admit("admin", &client, 1)), "guess {i}");
            t.failed("admin", &client, 1);
        }
        assert!(limited(t.admit("admin", "127.0.0.99", 2)));
        assert!(
            !limited(t.admit("admin", "10.0.0.1", 2)),
            "the known address"
        );
        assert!(!limited(t.admit("bob", "127.0.0.99", 2)));
        // A known address stays held to its own five.
        for _ in 0..5 {
            t.failed("admin", "10.0.0.1", 3);
        }
        assert!(limited(t.admit("admin", "10.0.0.1", 3)));
    }

    #[test]
    fn a_hundred_failures_a_minute_hold_every_unknown_login() {
        let mut t = LoginThrottle::default();
        t.succeeded("carol", "9.9.9.9", 0);
        for i in 0..100 {
            t.failed(
                &format!("user{i}"),
                &format!("10.1.{}.{}", i / 250, i % 250),
                1,
            );
        }
        assert!(limited(t.admit("dave", "10.2.0.1", 2)));
        assert!(!limited(t.admit("carol", "9.9.9.9", 2)));
        assert!(!limited(t.admit("dave", "10.2.0.1", OVERALL.1 + 1)));
    }

    #[test]
    fn known_addresses_are_bounded_and_forgotten() {
        let mut t = LoginThrottle::default();
        for i in 0..MAX_KNOWN + 10 {
            t.succeeded(&format!("u{i}"), "a", i as i64);
        }
        assert!(t.known.len() <= MAX_KNOWN);
        assert!(t.is_known("u10009", "a", 10_009));
        assert!(!t.is_known("u10009", "a", 10_009 + KNOWN_FOR_MS));
    }
}
