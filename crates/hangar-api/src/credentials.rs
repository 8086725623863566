//! Credentials between web and workers, in one place so both sides make and
//! check them the same way.
//!
//! - The fleet's worker key only admits a worker: it is good for
//!   registering and nothing else.
//! - A registration gets an **incarnation token** of its own,
//!   `<generation>.<64 hex>`; every later call of that process presents it.
//!   Web keeps only its [`digest`], so a copy of the database holds no
//!   usable worker credential.
//! - Each worker process makes an **API token** at start and gives it to
//!   web with its registration; web presents it to that worker's API and to
//!   nobody else, so a worker that lies about its API URL learns only the
//!   token it made itself.

use sha2::{Digest, Sha256};

/// 32 random bytes from the operating system, as 64 hex digits.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex(&bytes))
}

/// The incarnation token of `generation` with the secret `secret`.
pub fn incarnation_token(generation: i64, secret: &str) -> String {
    format!("{generation}.{secret}")
}

/// The generation an incarnation token claims to belong to and its secret,
/// if it has the token's shape. The claim proves nothing until the secret's
/// digest matches what web stored.
pub fn parse_incarnation_token(token: &str) -> Option<(i64, &str)> {
    let (generation, secret) = token.split_once('.')?;
    let well_formed = secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed || !generation.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((generation.parse().ok()?, secret))
}

/// What web stores of a secret: its SHA-256, as hex. The secret is 256
/// random bits, so no salt or stretching is needed.
pub fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Compares secrets in time independent of where they first differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a worker's API token is acceptable: long enough to be a secret,
/// and plain enough to travel in a header.
pub fn valid_api_token(token: &str) -> bool {
    (32..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// The S256 challenge of a PKCE verifier (RFC 7636): the unpadded
/// base64url of its SHA-256. A CLI's browser login sends it to web.
pub fn pkce_challenge(verifier: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::pkce_challenge;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    use super::*;

    #[test]
    fn an_incarnation_token_names_its_generation_and_secret() {
        let secret = new_secret().unwrap();
        let token = incarnation_token(42, &secret);
        assert_eq!(parse_incarnation_token(&token), Some((42, secret.as_str())));
        assert_ne!(secret, new_secret().unwrap());
    }

    #[test]
    fn malformed_tokens_claim_no_generation() {
        let secret = "a".repeat(64);
        for token in [
            String::new(),
            "42".into(),
            "42.".into(),
            format!("x.{secret}"),
            format!("42.{}", "a".repeat(63)),
            format!("42.{}g", "a".repeat(63)),
            format!("42.{secret}.1"),
            format!("-4.{secret}"),
            format!("+4.{secret}"),
            format!("99999999999999999999.{secret}"),
        ] {
            assert_eq!(parse_incarnation_token(&token), None, "{token:?}");
        }
    }

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn secrets_match_only_when_equal() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }

    #[test]
    fn api_tokens_must_be_secret_sized_and_header_safe() {
        assert!(valid_api_token(&new_secret().unwrap()));
        assert!(!valid_api_token("short"));
        assert!(!valid_api_token(&format!("{} x", "a".repeat(40))));
        assert!(!valid_api_token(&"a".repeat(257)));
    }
}
