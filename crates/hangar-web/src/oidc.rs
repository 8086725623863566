//! Logging in through an OpenID Connect provider (Concourse's `--oidc-*`
//! flags): the authorization code flow with PKCE.
//!
//! [`Oidc::begin`] keeps a random state, nonce and PKCE verifier as a
//! pending login (keyed by the state's digest; any web node can finish
//! it) and sends the browser to the provider with the state, also set in
//! a cookie of its own. [`Oidc::finish`] takes that pending login once,
//! only for the browser that holds the state's cookie, trades the code
//! and verifier for an ID token, checks the token's signature (the
//! provider's published keys), issuer, audience, expiry and nonce, and
//! reads the user and groups from its claims
//! (`hangar_core::tenancy::oidc_claims`). What roles that identity holds
//! is read from the teams at each request, as for any session.

use std::time::Duration;

use base64::Engine as _;
use hangar_api::credentials::digest;
use hangar_core::tenancy::oidc_claims::{identity_from_claims, ClaimKeys};
use hangar_core::tenancy::Identity;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope,
};
use serde::{Deserialize, Serialize};

use crate::cli_login::CliLogin;
use crate::Web;

/// Where the provider sends the browser back, under web's external URL.
pub(crate) const CALLBACK_PATH: &str = "/auth/oidc/callback";
/// The pending login's kind in the store.
const PENDING_KIND: &str = "oidc";
/// How long a browser may spend at the provider.
const PENDING_TTL_MS: i64 = 10 * 60 * 1000;
/// How long the provider's discovery document and keys are reused before
/// they are read again (a key rotation is picked up within this, or at
/// once when a token names a key not yet known).
const METADATA_TTL: Duration = Duration::from_secs(10 * 60);
/// The scopes asked for when none are configured (Concourse's).
const DEFAULT_SCOPES: [&str; 3] = ["openid", "profile", "email"];

/// An OIDC provider's settings (Concourse's `--oidc-*` flags).
#[derive(Clone)]
pub struct OidcConfig {
    /// What the login page's button says (`--oidc-display-name`).
    pub display_name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Scopes asked for besides `openid` (default: profile and email).
    pub scopes: Vec<String>,
    pub keys: ClaimKeys,
    /// PEM CA certificates to trust the provider with, besides the
    /// system's.
    pub ca_certs: Vec<Vec<u8>>,
    /// Trust any certificate the provider shows (`--oidc-skip-ssl-validation`).
    pub skip_tls_verify: bool,
}

/// Shows everything but the client secret.
impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("display_name", &self.display_name)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("keys", &self.keys)
            .field("skip_tls_verify", &self.skip_tls_verify)
            .finish_non_exhaustive()
    }
}

/// What a pending OIDC login keeps until the provider's callback.
#[derive(Serialize, Deserialize)]
struct Pending {
    verifier: String,
    nonce: String,
    #[serde(default)]
    cli: Option<CliLogin>,
}

/// A configured provider, its discovery document cached.
pub(crate) struct Oidc {
    config: OidcConfig,
    issuer: IssuerUrl,
    redirect: RedirectUrl,
    http: reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(CoreProviderMetadata, std::time::Instant)>>,
}

impl Oidc {
    /// The provider of `config`, called back at `external_url`.
    pub(crate) fn new(config: OidcConfig, external_url: &str) -> Result<Oidc, String> {
        let issuer = IssuerUrl::new(config.issuer.clone())
            .map_err(|e| format!("--oidc-issuer {}: {e}", config.issuer))?;
        let redirect = RedirectUrl::new(format!(
            "{}{CALLBACK_PATH}",
            external_url.trim_end_matches('/')
        ))
        .map_err(|e| format!("--external-url {external_url}: {e}"))?;
        // Following redirects would let a provider's answer send web to
        // any address (the openidconnect crate's advice).
        let mut http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .danger_accept_invalid_certs(config.skip_tls_verify);
        for pem in &config.ca_certs {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|e| format!("--oidc-ca-cert: not a PEM certificate: {e}"))?;
            http = http.add_root_certificate(cert);
        }
        Ok(Oidc {
            http: http.build().map_err(|e| e.to_string())?,
            config,
            issuer,
            redirect,
            metadata: tokio::sync::Mutex::new(None),
        })
    }

    pub(crate) fn display_name(&self) -> &str {
        &self.config.display_name
    }

    /// The provider's discovery document and keys: cached, or read again
    /// when older than [`METADATA_TTL`] or when `fresh`.
    async fn metadata(&self, fresh: bool) -> Result<CoreProviderMetadata, String> {
        let mut cached = self.metadata.lock().await;
        if let Some((m, at)) = cached.as_ref() {
            if !fresh && at.elapsed() < METADATA_TTL {
                return Ok(m.clone());
            }
        }
        let m = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.http)
            .await
            .map_err(|e| {
                format!(
                    "cannot read the OIDC provider's configuration at {}: {}",
                    self.config.issuer,
                    error_chain(&e)
                )
            })?;
        *cached = Some((m.clone(), std::time::Instant::now()));
        Ok(m)
    }

    fn client(
        &self,
        metadata: CoreProviderMetadata,
    ) -> openidconnect::core::CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(self.config.client_secret.clone())),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// Starts a login: the provider's URL to send the browser to, and the
    /// state to set in the browser's cookie.
    pub(crate) async fn begin(
        &self,
        web: &Web,
        cli: Option<CliLogin>,
    ) -> Result<(String, String), String> {
        let client = self.client(self.metadata(false).await?);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        let scopes: Vec<String> = if self.config.scopes.is_empty() {
            DEFAULT_SCOPES[1..].iter().map(|s| s.to_string()).collect()
        } else {
            self.config.scopes.clone()
        };
        for scope in scopes.into_iter().filter(|s| s != "openid") {
            request = request.add_scope(Scope::new(scope));
        }
        let (url, state, nonce) = request.url();
        let pending = Pending {
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
            cli,
        };
        let payload = serde_json::to_string(&pending).map_err(|e| e.to_string())?;
        let now = web.now();
        let kept = web
            .store()
            .put_pending_login(
                PENDING_KIND,
                &digest(state.secret()),
                &payload,
                now + PENDING_TTL_MS,
                now,
            )
            .await
            .map_err(|e| e.to_string())?;
        if !kept {
            return Err("too many logins are under way; try again in a few minutes".into());
        }
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Finishes the login whose `state` came back with `code`: who logged
    /// in, and the CLI waiting for it if one started it. `cookie_state` is
    /// the state the browser's cookie holds: a callback from any other
    /// browser (a login forced on a victim) is refused.
    pub(crate) async fn finish(
        &self,
        web: &Web,
        code: &str,
        state: &str,
        cookie_state: Option<&str>,
    ) -> Result<(Identity, Option<CliLogin>), String> {
        let from_this_browser = cookie_state
            .is_some_and(|c| hangar_api::credentials::same_secret(c.as_bytes(), state.as_bytes()));
        if state.is_empty() || state.len() > 256 || !from_this_browser {
            return Err(
                "this login did not start in this browser, or its cookie is gone: start again"
                    .into(),
            );
        }
        let payload = web
            .store()
            .take_pending_login(PENDING_KIND, &digest(state), web.now())
            .await
            .map_err(|e| e.to_string())?
            .ok_or("this login is over (used or expired): start again")?;
        let pending: Pending = serde_json::from_str(&payload).map_err(|e| e.to_string())?;
        let metadata = self.metadata(false).await?;
        let response = self
            .client(metadata)
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| e.to_string())?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| format!("the OIDC provider refused the login: {}", error_chain(&e)))?;
        use openidconnect::TokenResponse as _;
        let id_token = response
            .id_token()
            .ok_or("the OIDC provider sent no ID token")?;
        let nonce = Nonce::new(pending.nonce);
        let check = |metadata: CoreProviderMetadata| {
            let client = self.client(metadata);
            let verifier = client.id_token_verifier();
            let checked = id_token.claims(&verifier, &nonce).map(|_| ());
            checked
        };
        let verified = match check(self.metadata(false).await?) {
            // The provider may have rotated its keys since they were read:
            // read them again once.
            Err(openidconnect::ClaimsVerificationError::SignatureVerification(_)) => {
                check(self.metadata(true).await?)
            }
            other => other,
        };
        verified.map_err(|e| format!("the ID token does not check out: {e}"))?;
        let claims = payload_of(&id_token.to_string())?;
        let identity = identity_from_claims(&claims, &self.config.keys)?;
        Ok((identity, pending.cli))
    }
}

/// The claims of a compact JWT whose signature has been checked.
fn payload_of(jwt: &str) -> Result<serde_json::Value, String> {
    let part = jwt.split('.').nth(1).ok_or("the ID token is not a JWT")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| format!("the ID token's claims: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the ID token's claims: {e}"))
}

/// An error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
