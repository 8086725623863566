//! Build leases between web nodes: how long a node holds a build it runs,
//! how often it renews, when it must stop on its own, and when another node
//! may take the build. Every web node over one database follows these
//! rules; the store enforces the fencing token (a build's claim counter) so
//! a node that lost its lease cannot write to the build whatever it thinks.

use crate::UnixMillis;

/// How long a build stays with its node without a renewal. A node killed
/// with SIGKILL holds its builds this long at most, so a survivor resumes
/// them within `BUILD_LEASE_MS` plus one claim pass (the 10 s bound of
/// issue 19). Long enough to ride out a PostgreSQL restart of a few
/// seconds without handing every build over.
pub const BUILD_LEASE_MS: i64 = 6_000;

/// How often a web node records that it is alive in `web_nodes`.
pub const WEB_NODE_HEARTBEAT_MS: i64 = 2_000;

/// How long a web node counts as alive after its last heartbeat.
pub const WEB_NODE_TTL_MS: i64 = 6_000;

// A node killed just after a renewal holds its builds a whole lease; a
// survivor's claim loop looks once a second: within issue 19's 10 s. Two
// missed renewals (or heartbeats) in a row do not lose the lease (or the
// node's liveness).
const _: () = assert!(BUILD_LEASE_MS + 1_000 <= 10_000);
const _: () = assert!(BUILD_LEASE_MS / 3 * 2 < BUILD_LEASE_MS);
const _: () = assert!(WEB_NODE_HEARTBEAT_MS * 2 < WEB_NODE_TTL_MS);

/// How often a lease of `lease_ms` is renewed: three renewals fit in one
/// lease, so two may fail (a database restart) before it runs out.
pub fn renew_every_ms(lease_ms: i64) -> i64 {
    (lease_ms / 3).max(1)
}

/// Whether the node holding a lease must stop the build by itself: its
/// last successful renewal (by its own clock) is a whole lease ago, so
/// another node may already run the build. Stopping here keeps a node cut
/// off from the database (or paused) from going on calling workers; the
/// store's fencing token keeps it from writing either way.
pub fn holder_must_stop(last_renewed_at: UnixMillis, now: UnixMillis, lease_ms: i64) -> bool {
    now.saturating_sub(last_renewed_at) >= lease_ms
}

/// Whether a web node counts as alive, from its last heartbeat.
pub fn web_node_alive(last_heartbeat_at: UnixMillis, now: UnixMillis, ttl_ms: i64) -> bool {
    now.saturating_sub(last_heartbeat_at) < ttl_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_renewed_three_times_within_its_length() {
        let cases = [(6_000, 2_000), (900, 300), (30_000, 10_000), (2, 1), (0, 1)];
        for (lease, every) in cases {
            assert_eq!(renew_every_ms(lease), every, "{lease}");
        }
    }

    #[test]
    fn the_holder_stops_once_a_whole_lease_went_by_without_renewal() {
        // (last renewed, now, lease, must stop)
        let cases = [
            (1_000, 1_000, 6_000, false),
            (1_000, 6_999, 6_000, false),
            (1_000, 7_000, 6_000, true),
            (1_000, 60_000, 6_000, true),
            // A clock that went back is not a lapse.
            (5_000, 1_000, 6_000, false),
        ];
        for (last, now, lease, stop) in cases {
            assert_eq!(holder_must_stop(last, now, lease), stop, "{last} {now}");
        }
    }

    #[test]
    fn a_web_node_is_alive_within_its_ttl_of_a_heartbeat() {
        let cases = [
            (1_000, 1_000, true),
            (1_000, 6_999, true),
            (1_000, 7_000, false),
            (1_000, 100_000, false),
        ];
        for (beat, now, alive) in cases {
            assert_eq!(
                web_node_alive(beat, now, WEB_NODE_TTL_MS),
                alive,
                "{beat} {now}"
            );
        }
    }
}
