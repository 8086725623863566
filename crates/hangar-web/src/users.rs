//! Users who log in with a password: the local users web is started with
//! (`--add-local-user NAME:PASSWORD`, Concourse's flag; the password may be
//! given as a bcrypt hash, so it need not sit in a process list or a
//! manifest in the clear). Web keeps only bcrypt hashes.

use std::time::Duration;

use hangar_core::tenancy::TeamAuth;

/// The longest local user name.
pub(crate) const MAX_USER_LEN: usize = 64;
/// bcrypt reads at most 72 bytes of a password: a longer one would be
/// accepted with anything after its 72nd byte, so it is refused.
pub(crate) const MAX_PASSWORD_LEN: usize = 72;
/// The work factor of hashes web makes (bcrypt's default, ~70 ms here).
const COST: u32 = bcrypt::DEFAULT_COST;

/// A local user and the bcrypt hash of their password.
#[derive(Clone)]
pub struct LocalUser {
    pub name: String,
    hash: String,
}

/// Shows the name, never the hash.
impl std::fmt::Debug for LocalUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalUser")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn is_bcrypt_hash(s: &str) -> bool {
    ["$2a$", "$2b$", "$2y$"].iter().any(|p| s.starts_with(p)) && s.len() == 60
}

impl LocalUser {
    /// Reads `NAME:PASSWORD` (or `NAME:BCRYPT-HASH`), hashing a password.
    pub fn parse(flag: &str) -> Result<LocalUser, String> {
        let (name, secret) = flag
            .split_once(':')
            .ok_or("a local user is NAME:PASSWORD (or NAME:BCRYPT-HASH)")?;
        if name.is_empty() || name.len() > MAX_USER_LEN {
            return Err(format!(
                "a local user's name is 1 to {MAX_USER_LEN} characters"
            ));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
        {
            return Err(format!(
                "local user {:?}: a name is ASCII letters, digits, '-', '_', '.' and '@'",
                hangar_core::names::shorten(name)
            ));
        }
        let hash = if is_bcrypt_hash(secret) {
            <bcrypt::HashParts as std::str::FromStr>::from_str(secret)
                .map_err(|e| format!("local user {name}: the bcrypt hash does not parse: {e}"))?;
            secret.to_string()
        } else {
            if secret.len() < 8 {
                return Err(format!(
                    "local user {name}: a password of fewer than 8 characters is refused"
                ));
            }
            if secret.len() > MAX_PASSWORD_LEN {
                return Err(format!(
                    "local user {name}: a password of more than {MAX_PASSWORD_LEN} bytes is refused (bcrypt reads no further)"
                ));
            }
            bcrypt::hash(secret, COST).map_err(|e| format!("local user {name}: {e}"))?
        };
        Ok(LocalUser {
            name: name.to_string(),
            hash,
        })
    }
}

/// One hash of a password nobody has, checked when the name is unknown so
/// that a wrong name costs what a wrong password does.
static DECOY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| bcrypt::hash("hangar: no such user", COST).unwrap_or_default());

/// Who may log in, and for how long.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub local_users: Vec<LocalUser>,
    /// The main team's auth, written at every start (Concourse's
    /// `--main-team-local-user` and friends); `None` leaves it as it is.
    pub main_team: Option<TeamAuth>,
    /// A session ends this long after login, however used.
    pub session_ttl: Duration,
    /// A session unused this long ends.
    pub session_idle: Duration,
    /// Where browsers reach web (Concourse's `--external-url`): the OIDC
    /// provider sends them back under it, and when it is `https` every
    /// cookie web sets is `Secure`.
    pub external_url: Option<String>,
    /// The OIDC provider users may log in through.
    pub oidc: Option<crate::oidc::OidcConfig>,
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            local_users: Vec::new(),
            main_team: None,
            // Concourse's tokens last a day.
            session_ttl: Duration::from_secs(24 * 3600),
            session_idle: Duration::from_secs(8 * 3600),
            external_url: None,
            oidc: None,
        }
    }
}

impl AuthConfig {
    /// Whether cookies must be `Secure`: browsers reach web over TLS.
    pub(crate) fn secure_cookies(&self) -> bool {
        self.external_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    }

    /// Checks a local user's password (blocking: bcrypt is slow on
    /// purpose). Names compare without case, as Concourse's do.
    pub fn check_password(&self, name: &str, password: &str) -> Option<&LocalUser> {
        let user = self
            .local_users
            .iter()
            .find(|u| u.name.eq_ignore_ascii_case(name));
        let hash = user.map(|u| u.hash.as_str()).unwrap_or(DECOY.as_str());
        let ok =
            password.len() <= MAX_PASSWORD_LEN && bcrypt::verify(password, hash).unwrap_or(false);
        user.filter(|_| ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_user_logs_in_with_the_password_or_the_hash_it_was_given() {
        let hash = bcrypt::hash("hunter2-hunter2", 4).unwrap();
        let config = AuthConfig {
            local_users: vec![
                LocalUser::parse("alice:correct-horse").unwrap(),
                LocalUser::parse(&format!("bob:{hash}")).unwrap(),
            ],
            ..AuthConfig::default()
        };
        let cases = [
            ("alice", "correct-horse", Some("alice")),
            ("ALICE", "correct-horse", Some("alice")),
            ("alice", "correct-horsf", None),
            ("alice", "", None),
            ("bob", "hunter2-hunter2", Some("bob")),
            ("bob", &hash, None),
            ("carol", "correct-horse", None),
        ];
        for (name, password, who) in cases {
            assert_eq!(
                config
                    .check_password(name, password)
                    .map(|u| u.name.as_str()),
                who,
                "{name}:{password}"
            );
        }
        assert!(!format!("{config:?}").contains("$2"), "no hash is shown");
    }

    #[test]
    fn malformed_local_users_are_refused_saying_why() {
        let cases = [
            ("alice", "NAME:PASSWORD"),
            (":password1", "1 to 64"),
            ("al ice:password1", "ASCII letters"),
            ("al\u{202e}ice:password1", "ASCII letters"),
            ("alice:short", "fewer than 8"),
            (&format!("alice:{}", "x".repeat(73)), "more than 72 bytes"),
            (&format!("{}:password1", "a".repeat(65)), "1 to 64"),
        ];
        for (flag, expected) in cases {
            let e = LocalUser::parse(flag).unwrap_err();
            assert!(e.contains(expected), "{flag}: {e}");
        }
    }
}
