//! Each worker's API token at rest: web must present the token itself, so
//! it cannot keep a digest; it keeps the token sealed (AES-256-GCM) with a
//! key that is not in the database and that workers do not hold, bound to
//! the worker's row by its name. A copy of the database then holds no
//! usable worker credential, and a sealed value copied onto another
//! worker's row does not open there.
//!
//! A stored value is `v1:<base64url(nonce ‖ ciphertext ‖ tag)>`. A value
//! without a version prefix is a token stored in plaintext before tokens
//! were sealed: it is still read (web nodes of the older version may write
//! one during an upgrade) and [`Store::seal_plaintext_api_tokens`] seals
//! it in place.

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// The prefix of a value sealed by this version.
const V1: &str = "v1:";
const TAG_LEN: usize = 16;
/// The longest token sealed (a registration allows 256 characters).
pub const MAX_TOKEN_LEN: usize = 1024;
/// The longest stored value read: a longer one is refused before decoding.
pub const MAX_STORED_LEN: usize = V1.len() + (NONCE_LEN + MAX_TOKEN_LEN + TAG_LEN).div_ceil(3) * 4;
/// The fixed context of the key derivation: a key made from the same
/// secret for anything else differs from this one.
const KDF_SALT: &[u8] = b"hangar web: workers.api_token at rest";
const KDF_INFO: &[u8] = b"v1 aes-256-gcm";

/// The key worker API tokens are sealed with, derived (HKDF-SHA256, a fixed
/// context) from a secret every web node of one installation holds and no
/// worker does. Its `Debug` shows only where it comes from.
pub struct WorkerTokenKey {
    key: LessSafeKey,
    /// What the key was derived from, named in errors ("the admin token").
    source: String,
}

impl std::fmt::Debug for WorkerTokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerTokenKey")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl WorkerTokenKey {
    /// The key derived from `secret` (high-entropy: this is no password
    /// hash); `source` names the secret in errors.
    pub fn derive(secret: &[u8], source: &str) -> WorkerTokenKey {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, KDF_SALT).extract(secret);
        let okm = prk
            .expand(&[KDF_INFO], &AES_256_GCM)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        WorkerTokenKey {
            key: LessSafeKey::new(UnboundKey::from(okm)),
            source: source.to_string(),
        }
    }
}

/// Why a token could not be sealed, or a stored value opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SealError {
    NoKey,
    TooLong(usize),
    Oversized(usize),
    Malformed(&'static str),
    UnknownVersion(String),
    /// Authentication failed: another key, another row, or altered.
    DoesNotOpen,
    Random,
}

impl SealError {
    /// The error, said of `worker`'s token with a key from `source`.
    fn describe(&self, worker: &str, source: Option<&str>) -> String {
        let source = source.unwrap_or("its secret");
        match self {
            SealError::NoKey => format!(
                "the API token of worker {worker} is sealed, and this store has no key to seal or open it with"
            ),
            SealError::TooLong(n) => format!(
                "the API token of worker {worker} is {n} bytes long; at most {MAX_TOKEN_LEN} are sealed"
            ),
            SealError::Oversized(n) => format!(
                "the stored API token of worker {worker} is {n} characters long, more than any sealed token \
                 ({MAX_STORED_LEN}): it was not written by web"
            ),
            SealError::Malformed(why) => {
                format!("the stored API token of worker {worker} is malformed: {why}")
            }
            SealError::UnknownVersion(v) => format!(
                "the stored API token of worker {worker} is sealed in format {v:?}, which this version of web does not know"
            ),
            SealError::DoesNotOpen => format!(
                "the stored API token of worker {worker} does not open with this web node's key (derived from {source}): \
                 {source} changed or differs between web nodes, or the value was sealed for another worker or altered; \
                 web can call this worker again once it registers again (restart it)"
            ),
            SealError::Random => "no random nonce could be drawn to seal an API token".to_string(),
        }
    }
}

/// A stored value, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored<'a> {
    /// Written before tokens were sealed.
    Plain(&'a str),
    /// `nonce ‖ ciphertext ‖ tag` of a `v1:` value.
    V1(Vec<u8>),
}

/// Parses a stored value without opening it. A value with a version prefix
/// must be well formed; one without is a plaintext token of the shape a
/// registration allows (printable ASCII without spaces).
pub(crate) fn parse(stored: &str) -> Result<Stored<'_>, SealError> {
    if stored.len() > MAX_STORED_LEN {
        return Err(SealError::Oversized(stored.len()));
    }
    if let Some(body) = stored.strip_prefix(V1) {
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SealError::Malformed("not base64url without padding"))?;
        if bytes.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Malformed("shorter than a nonce and a tag"));
        }
        return Ok(Stored::V1(bytes));
    }
    if let Some(version) = version_prefix(stored) {
        return Err(SealError::UnknownVersion(version.to_string()));
    }
    if stored.is_empty() || !stored.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SealError::Malformed(
            "neither sealed nor a plaintext token (printable ASCII without spaces)",
        ));
    }
    Ok(Stored::Plain(stored))
}

/// `v<digits>` when `stored` begins with `v<digits>:`.
fn version_prefix(stored: &str) -> Option<&str> {
    let (head, _) = stored.split_once(':')?;
    let digits = head.strip_prefix('v')?;
    (!digits.is_empty() && digits.len() <= 9 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then_some(head)
}

/// What binds a sealed value to its row.
fn aad(worker: &str) -> Vec<u8> {
    format!("hangar workers.api_token of {worker}").into_bytes()
}

/// Seals `token` for `worker`'s row, with a fresh random nonce.
pub(crate) fn seal(key: &WorkerTokenKey, worker: &str, token: &str) -> Result<String, SealError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(SealError::TooLong(token.len()));
    }
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| SealError::Random)?;
    let mut sealed = Vec::with_capacity(NONCE_LEN + token.len() + TAG_LEN);
    sealed.extend_from_slice(&nonce);
    let mut body = token.as_bytes().to_vec();
    key.key
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(worker)),
            &mut body,
        )
        .map_err(|_| SealError::TooLong(token.len()))?;
    sealed.extend_from_slice(&body);
    Ok(format!("{V1}{}", URL_SAFE_NO_PAD.encode(sealed)))
}

/// The token a stored value of `worker`'s row holds.
pub(crate) fn open(
    key: Option<&WorkerTokenKey>,
    worker: &str,
    stored: &str,
) -> Result<String, SealError> {
    let bytes = match parse(stored)? {
        Stored::Plain(token) => return Ok(token.to_string()),
        Stored::V1(bytes) => bytes,
    };
    let key = key.ok_or(SealError::NoKey)?;
    let (nonce, body) = bytes.split_at(NONCE_LEN);
    let nonce =
        Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed("bad nonce"))?;
    let mut body = body.to_vec();
    let token = key
        .key
        .open_in_place(nonce, Aad::from(aad(worker)), &mut body)
        .map_err(|_| SealError::DoesNotOpen)?;
    let token = std::str::from_utf8(token)
        .map_err(|_| SealError::Malformed("the opened token is not UTF-8"))?;
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SealError::Malformed(
            "the opened token is not printable ASCII without spaces",
        ));
    }
    Ok(token.to_string())
}

/// What [`Store::seal_plaintext_api_tokens`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenSealing {
    /// Workers whose plaintext token was sealed in place.
    pub sealed: Vec<String>,
    /// Workers whose stored token this node cannot open, with why: web
    /// cannot call them until they register again.
    pub unreadable: Vec<(String, String)>,
}

impl Store {
    /// This store, sealing and opening worker API tokens with `key`. Without
    /// a key a registration with an API token is refused, and a sealed token
    /// cannot be read.
    pub fn with_worker_token_key(mut self, key: WorkerTokenKey) -> Store {
        self.worker_token_key = Some(Arc::new(key));
        self
    }

    /// Leaves volume rows younger than `ms` unjudged by reports that do not
    /// list them (web: `hangar_core::volumes::YOUNG_VOLUME_MS`): the
    /// worker's listing may predate them.
    pub fn with_young_volume_grace(mut self, ms: i64) -> Store {
        self.young_volume_ms = ms.max(0);
        self
    }

    fn token_error(&self, worker: &str, e: &SealError) -> StoreError {
        let source = self.worker_token_key.as_deref().map(|k| k.source.as_str());
        StoreError::Sealed(e.describe(worker, source))
    }

    /// `token`, sealed for `worker`'s row.
    pub(crate) fn seal_api_token(&self, worker: &str, token: &str) -> Result<String, StoreError> {
        let key = self
            .worker_token_key
            .as_deref()
            .ok_or_else(|| self.token_error(worker, &SealError::NoKey))?;
        seal(key, worker, token).map_err(|e| self.token_error(worker, &e))
    }

    /// The token `stored` in `worker`'s row holds.
    pub(crate) fn open_api_token(
        &self,
        worker: &str,
        stored: Option<String>,
    ) -> Result<Option<String>, StoreError> {
        stored
            .map(|s| {
                open(self.worker_token_key.as_deref(), worker, &s)
                    .map_err(|e| self.token_error(worker, &e))
            })
            .transpose()
    }

    /// Seals in place every API token stored in plaintext (by a version of
    /// web before tokens were sealed), and lists the stored tokens this
    /// node's key does not open. Each row is changed only if it still holds
    /// the plaintext read, so a registration at the same time is kept.
    pub async fn seal_plaintext_api_tokens(&self) -> Result<TokenSealing, StoreError> {
        let key = self.worker_token_key.as_deref().ok_or_else(|| {
            StoreError::Sealed("this store has no key to seal worker API tokens with".into())
        })?;
        let rows = sqlx::query(
            "SELECT name, api_token FROM workers WHERE api_token IS NOT NULL ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut found = TokenSealing::default();
        for row in rows {
            let name: String = row.try_get("name")?;
            let stored: String = row.try_get("api_token")?;
            let plain = match parse(&stored) {
                Ok(Stored::Plain(plain)) => plain,
                Ok(Stored::V1(_)) => match open(Some(key), &name, &stored) {
                    Ok(_) => continue,
                    Err(e) => {
                        let why = e.describe(&name, Some(&key.source));
                        found.unreadable.push((name, why));
                        continue;
                    }
                },
                Err(e) => {
                    let why = e.describe(&name, Some(&key.source));
                    found.unreadable.push((name, why));
                    continue;
                }
            };
            let sealed = self.seal_api_token(&name, plain)?;
            let changed =
                sqlx::query("UPDATE workers SET api_token = $1 WHERE name = $2 AND api_token = $3")
                    .bind(&sealed)
                    .bind(&name)
                    .bind(&stored)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
            if changed > 0 {
                found.sealed.push(name);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1";

    fn key() -> WorkerTokenKey {
        WorkerTokenKey::derive(b"admin-token-0123456789", "the admin token")
    }

    fn body(stored: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD
            .decode(stored.strip_prefix(V1).unwrap())
            .unwrap()
    }

    fn v1(bytes: &[u8]) -> String {
        format!("{V1}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    #[test]
    fn a_sealed_token_opens_only_for_its_row_with_its_key() {
        let k = key();
        let sealed = seal(&k, "w1", TOKEN).unwrap();
        assert!(sealed.starts_with(V1), "{sealed}");
        assert!(!sealed.contains(TOKEN));
        assert!(sealed.len() <= MAX_STORED_LEN);
        assert_eq!(open(Some(&k), "w1", &sealed).unwrap(), TOKEN);
        // A nonce per value: the same token seals differently each time.
        assert_ne!(seal(&k, "w1", TOKEN).unwrap(), sealed);

        let other_key = WorkerTokenKey::derive(b"admin-token-9876543210", "the admin token");
        let cases: [(Option<&WorkerTokenKey>, &str, SealError); 5] = [
            (Some(&k), "w2", SealError::DoesNotOpen),
            (Some(&k), "w1 ", SealError::DoesNotOpen),
            (Some(&k), "", SealError::DoesNotOpen),
            (Some(&other_key), "w1", SealError::DoesNotOpen),
            (None, "w1", SealError::NoKey),
        ];
        for (key, worker, want) in cases {
            assert_eq!(open(key, worker, &sealed), Err(want), "{worker:?}");
        }
    }

    #[test]
    fn the_key_depends_on_the_secret_only_through_the_fixed_context() {
        // Same secret, same key (every web node of one installation).
        let a = seal(&key(), "w1", TOKEN).unwrap();
        assert_eq!(open(Some(&key()), "w1", &a).unwrap(), TOKEN);
        // One byte more of secret is another key.
        let longer = WorkerTokenKey::derive(b"admin-token-01234567890", "the admin token");
        assert_eq!(open(Some(&longer), "w1", &a), Err(SealError::DoesNotOpen));
        let shown = format!("{:?}", key());
        assert!(!shown.contains("0123456789"), "{shown}");
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let k = key();
        let sealed = seal(&k, "w1", TOKEN).unwrap();
        let bytes = body(&sealed);
        for i in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[i] ^= 0x01;
            assert_eq!(
                open(Some(&k), "w1", &v1(&altered)),
                Err(SealError::DoesNotOpen),
                "byte {i}"
            );
        }
        // Cut short, or grown by a byte.
        let mut cut = bytes.clone();
        cut.pop();
        assert_eq!(open(Some(&k), "w1", &v1(&cut)), Err(SealError::DoesNotOpen));
        let mut grown = bytes.clone();
        grown.push(0);
        assert_eq!(
            open(Some(&k), "w1", &v1(&grown)),
            Err(SealError::DoesNotOpen)
        );
    }

    #[test]
    fn stored_values_parse_or_are_refused() {
        let k = key();
        let sealed = seal(&k, "w1", TOKEN).unwrap();
        let oversized = format!("{V1}{}", "A".repeat(MAX_STORED_LEN));
        let plain_too_long = "a".repeat(MAX_STORED_LEN + 1);
        let short = v1(&[0u8; NONCE_LEN + TAG_LEN - 1]);
        let cases: Vec<(&str, Result<&str, SealError>)> = vec![
            (TOKEN, Ok("plain")),
            ("api-token-of-a-test-worker-0123456789", Ok("plain")),
            (&sealed, Ok("v1")),
            ("", Err(SealError::Malformed(""))),
            ("has a space", Err(SealError::Malformed(""))),
            ("tab\there", Err(SealError::Malformed(""))),
            ("nul\0byte", Err(SealError::Malformed(""))),
            ("é-not-ascii", Err(SealError::Malformed(""))),
            ("v1:", Err(SealError::Malformed(""))),
            ("v1:!!!!", Err(SealError::Malformed(""))),
            ("v1:AAAA=", Err(SealError::Malformed(""))),
            ("v1:AAAA AAAA", Err(SealError::Malformed(""))),
            (&short, Err(SealError::Malformed(""))),
            ("v2:AAAA", Err(SealError::UnknownVersion("v2".into()))),
            ("v0:", Err(SealError::UnknownVersion("v0".into()))),
            ("v10:x", Err(SealError::UnknownVersion("v10".into()))),
            // Not a version: a plaintext token that happens to hold a colon.
            ("v:abc", Ok("plain")),
            ("vx1:abc", Ok("plain")),
            ("V1:abc", Ok("plain")),
            (&oversized, Err(SealError::Oversized(oversized.len()))),
            (
                &plain_too_long,
                Err(SealError::Oversized(plain_too_long.len())),
            ),
        ];
        for (stored, want) in cases {
            let got = parse(stored);
            let shown: String = stored.chars().take(40).collect();
            match (got, want) {
                (Ok(Stored::Plain(p)), Ok("plain")) => assert_eq!(p, stored),
                (Ok(Stored::V1(_)), Ok("v1")) => {}
                (Err(SealError::Malformed(_)), Err(SealError::Malformed(_))) => {}
                (Err(e), Err(w)) => assert_eq!(e, w, "{shown:?}"),
                (got, want) => panic!("{shown:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_plaintext_value_reads_as_itself_without_a_key() {
        assert_eq!(open(None, "w1", TOKEN).unwrap(), TOKEN);
        assert_eq!(open(Some(&key()), "w1", TOKEN).unwrap(), TOKEN);
    }

    #[test]
    fn what_a_token_may_be_when_sealed() {
        let k = key();
        for len in [1, 32, 256, MAX_TOKEN_LEN] {
            let token = "t".repeat(len);
            let sealed = seal(&k, "w", &token).unwrap();
            assert!(sealed.len() <= MAX_STORED_LEN, "{len}");
            assert_eq!(open(Some(&k), "w", &sealed).unwrap(), token);
        }
        assert_eq!(
            seal(&k, "w", &"t".repeat(MAX_TOKEN_LEN + 1)),
            Err(SealError::TooLong(MAX_TOKEN_LEN + 1))
        );
        // Sealed by someone holding the key, but not a token web would
        // put in a header: refused when opened.
        for token in ["", "two words", "line\nbreak", "é"] {
            let sealed = seal(&k, "w", token).unwrap();
            assert!(
                matches!(open(Some(&k), "w", &sealed), Err(SealError::Malformed(_))),
                "{token:?}"
            );
        }
        // Hostile worker names are only bound, never parsed.
        for name in ["", "w:1", "v1:", "名前", &"n".repeat(10_000)] {
            let sealed = seal(&k, name, TOKEN).unwrap();
            assert_eq!(open(Some(&k), name, &sealed).unwrap(), TOKEN);
        }
    }

    #[test]
    fn errors_say_what_to_do() {
        let m = SealError::DoesNotOpen.describe("w1", Some("the admin token"));
        for part in ["w1", "the admin token", "another worker", "registers again"] {
            assert!(m.contains(part), "{m}");
        }
        let m = SealError::UnknownVersion("v2".into()).describe("w1", None);
        assert!(m.contains("\"v2\"") && m.contains("w1"), "{m}");
    }
}
