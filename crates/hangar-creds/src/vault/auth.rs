//! Web's Vault token, kept alive in the background as Concourse keeps it:
//!
//! - A token given as is is used at once; while Vault says it is
//!   renewable and expires, it is renewed at half its TTL.
//! - With an auth backend, web logs in (retrying with a backoff from 1s to
//!   5 min while Vault refuses or is down), renews the token at half its
//!   lease, and logs in again when a renewal is refused, grants no more
//!   time (the token's max TTL on Vault's side), or
//!   `--vault-auth-backend-max-ttl` has passed since the login.
//!
//! Reads wait for the first login up to the login timeout, then fail with
//! the last login error. A token is never logged nor shown by `Debug`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Api, Auth, VaultConfig};
use crate::CredsError;

/// A Vault token.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// The `X-Vault-Token` header, marked sensitive so it is never shown.
    pub(crate) fn header(&self) -> Result<reqwest::header::HeaderValue, String> {
        let mut v = reqwest::header::HeaderValue::from_str(&self.0)
            .map_err(|_| "the Vault token is not a valid header value".to_string())?;
        v.set_sensitive(true);
        Ok(v)
    }

    fn same(&self, other: &Token) -> bool {
        self.0 == other.0
    }
}

#[derive(Default)]
struct State {
    token: Option<Token>,
    /// Why the last login failed, for reads that time out waiting.
    error: Option<String>,
}

/// The API and the current token, shared by reads and the keeper.
pub(crate) struct Session {
    api: Api,
    state: watch::Sender<State>,
    login_timeout: Duration,
    logins: AtomicU64,
    renewals: AtomicU64,
}

impl Session {
    pub(crate) fn api(&self) -> &Api {
        &self.api
    }

    pub(crate) fn logins(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }

    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// The current token, waiting up to the login timeout for the first.
    pub(crate) async fn token(&self) -> Result<Token, String> {
        let mut rx = self.state.subscribe();
        let waited =
            tokio::time::timeout(self.login_timeout, rx.wait_for(|s| s.token.is_some())).await;
        let token = match waited {
            Ok(Ok(state)) => state.token.clone(),
            _ => None,
        };
        token.ok_or_else(|| {
            let why = self.state.borrow().error.clone();
            format!(
                "web could not log in to Vault within {}s{}",
                self.login_timeout.as_secs_f32(),
                why.map(|w| format!(": {w}")).unwrap_or_default()
            )
        })
    }

    fn current(&self) -> Option<Token> {
        self.state.borrow().token.clone()
    }

    fn set_token(&self, token: Token) {
        self.state.send_modify(|s| {
            s.token = Some(token);
            s.error = None;
        });
    }

    fn set_error(&self, why: String) {
        self.state.send_modify(|s| s.error = Some(why));
    }
}

/// Stops the background task when the last [`super::VaultSecrets`] goes.
pub(crate) struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Checks the auth configuration and starts keeping the token.
pub(crate) fn start(api: Api, config: &VaultConfig) -> Result<(Arc<Session>, Keeper), CredsError> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| CredsError::Backend("Vault: no async runtime to log in from".into()))?;
    let session = Arc::new(Session {
        api,
        state: watch::Sender::new(State::default()),
        login_timeout: config.login_timeout,
        logins: AtomicU64::new(0),
        renewals: AtomicU64::new(0),
    });
    let task = match &config.auth {
        Auth::Token(token) => {
            let token = token.trim();
            if token.is_empty() {
                return Err(CredsError::Backend("--vault-client-token is empty".into()));
            }
            let token = Token(token.into());
            token
                .header()
                .map_err(|e| CredsError::Backend(format!("--vault-client-token: {e}")))?;
            session.set_token(token);
            runtime.spawn(keep_token(session.clone()))
        }
        Auth::Backend { backend, params } => {
            let path = login_path(backend, params).map_err(CredsError::Backend)?;
            runtime.spawn(keep_login(
                session.clone(),
                path,
                params.clone(),
                config.auth_max_ttl.filter(|d| !d.is_zero()),
            ))
        }
    };
    Ok((session, Keeper(task)))
}

/// `auth/<backend>/login`, and `/<username>` for the backends that take it
/// in the path (as Concourse).
fn login_path(backend: &str, params: &BTreeMap<String, String>) -> Result<String, String> {
    let backend = backend.trim_matches('/');
    let ok = |s: &str| {
        !s.is_empty()
            && s.split('/')
                .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
            && !s.chars().any(char::is_control)
    };
    if !ok(backend) {
        return Err(format!(
            "--vault-auth-backend {backend:?} is not a mount path"
        ));
    }
    let mut path = format!("auth/{backend}/login");
    if matches!(backend, "ldap" | "okta" | "userpass") {
        let user = params
            .get("username")
            .filter(|u| ok(u) && !u.contains('/'))
            .ok_or_else(|| {
                format!("--vault-auth-backend {backend} needs --vault-auth-param username:NAME")
            })?;
        path = format!("{path}/{user}");
    }
    Ok(path)
}

/// What Vault says of a token: the token, its time left, whether renewable.
struct Lease {
    token: Token,
    ttl: Duration,
    renewable: bool,
}

/// The `auth` of a login or renewal.
fn lease(body: &[u8]) -> Result<Lease, String> {
    #[derive(Deserialize)]
    struct Answer {
        auth: Option<AuthBlock>,
    }
    #[derive(Deserialize)]
    struct AuthBlock {
        client_token: String,
        #[serde(default)]
        lease_duration: u64,
        #[serde(default)]
        renewable: bool,
    }
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("Vault's answer is not a login: {e}"))?;
    let auth = answer
        .auth
        .filter(|a| !a.client_token.is_empty())
        .ok_or_else(|| "Vault's answer holds no token".to_string())?;
    Ok(Lease {
        token: Token(auth.client_token.into()),
        ttl: Duration::from_secs(auth.lease_duration.min(u32::MAX as u64)),
        renewable: auth.renewable,
    })
}

async fn login(
    s: &Session,
    path: &str,
    params: &BTreeMap<String, String>,
) -> Result<Lease, String> {
    let body: serde_json::Map<String, Value> = params
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let answer = s
        .api
        .call(
            reqwest::Method::POST,
            path,
            None,
            Some(&Value::Object(body)),
        )
        .await
        .map_err(|e| format!("logging in at {path}: {e}"))?;
    if answer.status != 200 {
        return Err(format!(
            "Vault refused the login at {path} (HTTP {}): {}",
            answer.status,
            answer.message()
        ));
    }
    lease(&answer.body).map_err(|e| format!("logging in at {path}: {e}"))
}

async fn renew(s: &Session, token: &Token) -> Result<Lease, String> {
    let answer = s
        .api
        .call(
            reqwest::Method::POST,
            "auth/token/renew-self",
            Some(token),
            Some(&Value::Object(Default::default())),
        )
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "Vault refused to renew the token (HTTP {}): {}",
            answer.status,
            answer.message()
        ));
    }
    lease(&answer.body)
}

/// Whether a token expires and can be renewed, and its time left.
async fn lookup_self(s: &Session, token: &Token) -> Result<(bool, Duration), String> {
    #[derive(Deserialize)]
    struct Answer {
        data: Info,
    }
    #[derive(Deserialize)]
    struct Info {
        #[serde(default)]
        ttl: u64,
        #[serde(default)]
        renewable: bool,
    }
    let answer = s
        .api
        .call(
            reqwest::Method::GET,
            "auth/token/lookup-self",
            Some(token),
            None,
        )
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "Vault refused to look the token up (HTTP {}): {}",
            answer.status,
            answer.message()
        ));
    }
    let info: Answer = serde_json::from_slice(&answer.body)
        .map_err(|e| format!("Vault's answer is not a token's: {e}"))?;
    Ok((
        info.data.renewable,
        Duration::from_secs(info.data.ttl.min(u32::MAX as u64)),
    ))
}

/// Waits between failed attempts: 1s, doubling up to 5 min (Concourse's
/// defaults).
struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);

    fn new() -> Backoff {
        Backoff(Backoff::FIRST)
    }

    fn next(&mut self) -> Duration {
        let wait = self.0;
        self.0 = (self.0 * 2).min(Backoff::MAX);
        wait
    }
}

async fn keep_token(s: Arc<Session>) {
    let mut retry = Backoff::new();
    loop {
        let Some(token) = s.current() else { return };
        match lookup_self(&s, &token).await {
            Ok((true, ttl)) if !ttl.is_zero() => {
                tokio::time::sleep(ttl / 2).await;
                match renew(&s, &token).await {
                    Ok(_) => {
                        s.renewals.fetch_add(1, Ordering::Relaxed);
                        retry = Backoff::new();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing web's Vault token");
                        tokio::time::sleep(retry.next()).await;
                    }
                }
            }
            // A token that does not expire, or cannot be renewed: nothing
            // to keep.
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "looking web's Vault token up");
                tokio::time::sleep(retry.next()).await;
            }
        }
    }
}

async fn keep_login(
    s: Arc<Session>,
    path: String,
    params: BTreeMap<String, String>,
    max_ttl: Option<Duration>,
) {
    let mut retry = Backoff::new();
    loop {
        let lease = match login(&s, &path, &params).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(error = %e, "logging in to Vault; trying again");
                s.set_error(e);
                tokio::time::sleep(retry.next()).await;
                continue;
            }
        };
        retry = Backoff::new();
        s.logins.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            ttl_seconds = lease.ttl.as_secs(),
            renewable = lease.renewable,
            "logged in to Vault"
        );
        let logged_in = Instant::now();
        let log_in_again = max_ttl.map(|m| logged_in + m);
        let mut expires = (!lease.ttl.is_zero()).then(|| logged_in + lease.ttl);
        let renewable = lease.renewable;
        let mut token = lease.token;
        s.set_token(token.clone());
        loop {
            // Half the time left, or the max TTL if that comes first.
            let now = Instant::now();
            let half = expires.map(|e| now + e.saturating_duration_since(now) / 2);
            match (half, log_in_again) {
                (Some(h), Some(m)) => tokio::time::sleep_until(h.min(m)).await,
                (Some(h), None) => tokio::time::sleep_until(h).await,
                (None, Some(m)) => tokio::time::sleep_until(m).await,
                (None, None) => std::future::pending().await,
            }
            if log_in_again.is_some_and(|m| Instant::now() >= m) {
                tracing::info!("--vault-auth-backend-max-ttl reached; logging in to Vault again");
                break;
            }
            if !renewable {
                break;
            }
            match renew(&s, &token).await {
                Ok(renewed) if !renewed.ttl.is_zero() => {
                    s.renewals.fetch_add(1, Ordering::Relaxed);
                    expires = Some(Instant::now() + renewed.ttl);
                    if !renewed.token.same(&token) {
                        token = renewed.token;
                        s.set_token(token.clone());
                    }
                }
                Ok(_) => {
                    tracing::info!("Vault grants web's token no more time; logging in again");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing web's Vault token; logging in again");
                    break;
                }
            }
        }
    }
}
