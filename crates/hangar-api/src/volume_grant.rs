//! A short-lived grant to stream out one volume of one worker: what web
//! hands a worker that pulls a volume straight from another
//! (`PUT /volumes/{handle}/pull` on the target). Web signs it with the
//! source worker's own API token, which the source checks it against; the
//! target never learns that token, and the grant opens nothing but that
//! volume's stream-out, for [`GRANT_TTL_MS`] at most.
//!
//! Form: `v1.<expires unix ms>.<hex HMAC-SHA256>.<handle>`, the MAC over
//! [`message`]. The handle is last so that a handle holding a dot still
//! parses; it must equal the route's.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header a grant travels in (never `Authorization`, which carries a
/// worker's own token: the two never mix on one request).
pub const GRANT_HEADER: &str = "x-hangar-volume-grant";

/// How long a grant is good for after web signs it: it is presented
/// within milliseconds; the rest covers clocks that differ between web and
/// the workers (keep them within a minute, as NTP does).
pub const GRANT_TTL_MS: i64 = 120_000;

/// Longest grant accepted, in bytes (a handle is at most 255).
const MAX_GRANT_LEN: usize = 512;

/// Why a presented grant opens nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantRefused {
    Malformed,
    OtherVolume,
    Expired,
    /// Expires further ahead than any grant web signs.
    TooLong,
    BadSignature,
}

impl std::fmt::Display for GrantRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GrantRefused::Malformed => "the volume grant is malformed",
            GrantRefused::OtherVolume => "the volume grant is for another volume",
            GrantRefused::Expired => "the volume grant has expired (or the clocks of web and this worker differ by more than its life)",
            GrantRefused::TooLong => "the volume grant lives longer than any web signs",
            GrantRefused::BadSignature => "the volume grant was not signed for this worker",
        })
    }
}

fn message(handle: &str, expires_ms: i64) -> String {
    format!("hangar volume grant v1\nstream-out\n{handle}\n{expires_ms}")
}

fn mac(token: &str) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC accepts any key length")
}

/// A grant to stream out `handle` from the worker whose API token is
/// `token`, good until `now_ms + GRANT_TTL_MS`.
pub fn sign(token: &str, handle: &str, now_ms: i64) -> String {
    signed_until(token, handle, now_ms.saturating_add(GRANT_TTL_MS))
}

fn signed_until(token: &str, handle: &str, expires: i64) -> String {
    let mut m = mac(token);
    m.update(message(handle, expires).as_bytes());
    let sig: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("v1.{expires}.{sig}.{handle}")
}

/// Whether `grant` lets its bearer stream out `handle` from the worker
/// whose token is `token`, at `now_ms`.
pub fn verify(token: &str, handle: &str, grant: &str, now_ms: i64) -> Result<(), GrantRefused> {
    if grant.len() > MAX_GRANT_LEN {
        return Err(GrantRefused::Malformed);
    }
    let mut parts = grant.splitn(4, '.');
    let (Some("v1"), Some(expires), Some(sig), Some(granted)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(GrantRefused::Malformed);
    };
    let expires: i64 = expires.parse().map_err(|_| GrantRefused::Malformed)?;
    let sig = unhex(sig).ok_or(GrantRefused::Malformed)?;
    if granted != handle {
        return Err(GrantRefused::OtherVolume);
    }
    if expires <= now_ms {
        return Err(GrantRefused::Expired);
    }
    if expires > now_ms.saturating_add(2 * GRANT_TTL_MS) {
        return Err(GrantRefused::TooLong);
    }
    let mut m = mac(token);
    m.update(message(handle, expires).as_bytes());
    // Constant time.
    m.verify_slice(&sig).map_err(|_| GrantRefused::BadSignature)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn a_grant_opens_its_volume_on_its_worker_for_its_life_and_nothing_else() {
        let grant = sign("source-token", "vol-1", NOW);
        let expires = NOW + GRANT_TTL_MS;
        let tampered_expiry =
            grant.replacen(&expires.to_string(), &(expires + 1000).to_string(), 1);
        let other_handle = format!("{}vol-2", &grant[..grant.len() - "vol-1".len()]);
        let mut flipped = grant.clone().into_bytes();
        let at = "v1.".len() + expires.to_string().len() + 1;
        flipped[at] = if flipped[at] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        let far = signed_until("source-token", "vol-1", NOW + 10 * GRANT_TTL_MS);
        // (token, handle, grant, now, expected)
        type Row<'a> = (&'a str, &'a str, &'a str, i64, Result<(), GrantRefused>);
        let table: Vec<Row> = vec![
            ("source-token", "vol-1", &grant, NOW, Ok(())),
            ("source-token", "vol-1", &grant, expires - 1, Ok(())),
            (
                "source-token",
                "vol-1",
                &grant,
                expires,
                Err(GrantRefused::Expired),
            ),
            (
                "other-token",
                "vol-1",
                &grant,
                NOW,
                Err(GrantRefused::BadSignature),
            ),
            (
                "source-token",
                "vol-2",
                &grant,
                NOW,
                Err(GrantRefused::OtherVolume),
            ),
            // Renamed to another volume, the signature no longer holds.
            (
                "source-token",
                "vol-2",
                &other_handle,
                NOW,
                Err(GrantRefused::BadSignature),
            ),
            (
                "source-token",
                "vol-1",
                &tampered_expiry,
                NOW,
                Err(GrantRefused::BadSignature),
            ),
            (
                "source-token",
                "vol-1",
                &flipped,
                NOW,
                Err(GrantRefused::BadSignature),
            ),
            (
                "source-token",
                "vol-1",
                &far,
                NOW,
                Err(GrantRefused::TooLong),
            ),
            (
                "source-token",
                "vol-1",
                "",
                NOW,
                Err(GrantRefused::Malformed),
            ),
            (
                "source-token",
                "vol-1",
                "v1.x.y.vol-1",
                NOW,
                Err(GrantRefused::Malformed),
            ),
            (
                "source-token",
                "vol-1",
                "v2.1.ab.vol-1",
                NOW,
                Err(GrantRefused::Malformed),
            ),
            (
                "source-token",
                "vol-1",
                "source-token",
                NOW,
                Err(GrantRefused::Malformed),
            ),
        ];
        for (token, handle, grant, now, expected) in table {
            assert_eq!(
                verify(token, handle, grant, now),
                expected,
                "{token} {handle} {grant} at {now}"
            );
        }
        let huge = format!("v1.{}.{}.{}", NOW + 1, "0".repeat(64), "h".repeat(1000));
        assert_eq!(
            verify("t", &"h".repeat(1000), &huge, NOW),
            Err(GrantRefused::Malformed)
        );
    }

    #[test]
    fn a_handle_with_dots_round_trips() {
        let grant = sign("t", "a.b.c", NOW);
        assert_eq!(verify("t", "a.b.c", &grant, NOW), Ok(()));
    }
}
