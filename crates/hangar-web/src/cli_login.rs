//! `hangar login` through the browser (fly's login without a password):
//! the CLI listens on a loopback port and opens web's login page with
//! that port and the SHA-256 of a secret of its own (`cli_port`,
//! `cli_challenge`). Once the browser has logged in (a local user's
//! password or the OIDC provider), web sends it to
//! `http://127.0.0.1:PORT/auth/callback?code=…` with a one-time code; the
//! CLI trades the code and its secret for a session
//! (`POST /api/v1/login/cli`). The session's token so never sits in a URL
//! or the browser's history, and a code read off the browser, or sent to
//! a port another program took, is useless without the CLI's secret.

use hangar_api::credentials::digest;
use hangar_core::tenancy::Identity;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::Web;

/// The pending login's kind in the store.
const PENDING_KIND: &str = "cli";
/// How long the CLI has to trade its code.
const CODE_TTL_MS: i64 = 2 * 60 * 1000;
/// The length of an S256 challenge: 32 bytes of SHA-256 in unpadded
/// base64url.
const CHALLENGE_LEN: usize = 43;

/// A CLI waiting for a browser login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CliLogin {
    pub port: u16,
    pub challenge: String,
}

impl CliLogin {
    /// From the login page's query: both parameters or neither.
    pub(crate) fn from_query(
        port: Option<&str>,
        challenge: Option<&str>,
    ) -> Result<Option<CliLogin>, String> {
        let (port, challenge) = match (port, challenge) {
            (None, None) => return Ok(None),
            (Some(p), Some(c)) => (p, c),
            _ => return Err("a CLI login needs both cli_port and cli_challenge".into()),
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or("cli_port is not a port")?;
        let well_formed = challenge.len() == CHALLENGE_LEN
            && challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed {
            return Err("cli_challenge is not an S256 challenge".into());
        }
        Ok(Some(CliLogin {
            port,
            challenge: challenge.to_string(),
        }))
    }

    /// The query that carries this login through the login page's links
    /// and forms.
    pub(crate) fn query(&self) -> String {
        format!("cli_port={}&cli_challenge={}", self.port, self.challenge)
    }
}

/// What a pending CLI login keeps until the CLI trades its code.
#[derive(Serialize, Deserialize)]
struct Pending {
    connector: String,
    user_id: String,
    user_name: String,
    groups: Vec<String>,
    challenge: String,
}

/// Keeps `identity` for the CLI `cli` under a new one-time code: the URL
/// on the CLI's listener to send the browser to.
pub(crate) async fn hand_over(
    web: &Web,
    identity: Identity,
    cli: &CliLogin,
) -> Result<String, ApiError> {
    let code =
        hangar_api::credentials::new_secret().map_err(|e| ApiError::internal(e.to_string()))?;
    let pending = Pending {
        connector: identity.connector,
        user_id: identity.user_id,
        user_name: identity.user_name,
        groups: identity.groups,
        challenge: cli.challenge.clone(),
    };
    let payload = serde_json::to_string(&pending).map_err(|e| ApiError::internal(e.to_string()))?;
    let now = web.now();
    let kept = web
        .store()
        .put_pending_login(
            PENDING_KIND,
            &digest(&code),
            &payload,
            now + CODE_TTL_MS,
            now,
        )
        .await?;
    if !kept {
        return Err(ApiError::too_many_requests(
            "too many logins are under way; try again in a few minutes",
        ));
    }
    // Always loopback: the page's query chooses only the port.
    Ok(format!(
        "http://127.0.0.1:{}/auth/callback?code={code}",
        cli.port
    ))
}

/// The identity a CLI's `code` was kept for, if `verifier` is the secret
/// whose digest the CLI sent. The code is spent either way.
pub(crate) async fn redeem(
    web: &Web,
    code: &str,
    verifier: &str,
) -> Result<Option<Identity>, ApiError> {
    if code.is_empty() || code.len() > 256 || verifier.len() > 256 {
        return Ok(None);
    }
    let Some(payload) = web
        .store()
        .take_pending_login(PENDING_KIND, &digest(code), web.now())
        .await?
    else {
        return Ok(None);
    };
    let pending: Pending =
        serde_json::from_str(&payload).map_err(|e| ApiError::internal(e.to_string()))?;
    let challenge = hangar_api::credentials::pkce_challenge(verifier);
    if !hangar_api::credentials::same_secret(challenge.as_bytes(), pending.challenge.as_bytes()) {
        return Ok(None);
    }
    Ok(Some(Identity {
        connector: pending.connector,
        user_id: pending.user_id,
        user_name: pending.user_name,
        groups: pending.groups,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cli_login_is_read_from_the_query_or_refused() {
        let c = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert_eq!(CliLogin::from_query(None, None), Ok(None));
        let ok = CliLogin::from_query(Some("4711"), Some(c))
            .unwrap()
            .unwrap();
        assert_eq!((ok.port, ok.challenge.as_str()), (4711, c));
        assert_eq!(ok.query(), format!("cli_port=4711&cli_challenge={c}"));
        let refused = [
            (Some("4711"), None),
            (None, Some(c)),
            (Some("0"), Some(c)),
            (Some("65536"), Some(c)),
            (Some("80@evil.example"), Some(c)),
            (Some("4711"), Some(&c[1..])),
            (
                Some("4711"),
                Some("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM"),
            ),
            (
                Some("4711"),
                Some("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-c&"),
            ),
        ];
        for (port, challenge) in refused {
            assert!(
                CliLogin::from_query(port, challenge).is_err(),
                "{port:?} {challenge:?}"
            );
        }
    }
}
