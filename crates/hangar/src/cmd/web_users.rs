//! Web's flags for who logs in: Concourse's local users and main team.

use std::time::Duration;

use hangar_core::tenancy::oidc_claims::ClaimKeys;
use hangar_core::tenancy::pod_admission::AdmittedAccount;
use hangar_core::tenancy::TeamAuth;
use hangar_web::{AuthConfig, LocalUser, OidcConfig, TokenReviewConfig};

use crate::duration;

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct UserFlags {
    /// A local user, NAME:PASSWORD or NAME:BCRYPT-HASH (repeat the flag, or
    /// separate with commas). Passwords are kept only as bcrypt hashes.
    #[arg(
        long = "add-local-user",
        env = "HANGAR_ADD_LOCAL_USER",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub local_users: Vec<String>,
    /// A local user who owns team main, and so is an admin (repeat, or
    /// separate with commas). Main's auth is written from these at every
    /// start; without any, it is left as set-team last set it.
    #[arg(
        long = "main-team-local-user",
        env = "HANGAR_MAIN_TEAM_LOCAL_USER",
        value_delimiter = ','
    )]
    pub main_team_local_users: Vec<String>,
    /// An OIDC user who owns team main (repeat, or separate with commas).
    #[arg(
        long = "main-team-oidc-user",
        env = "HANGAR_MAIN_TEAM_OIDC_USER",
        value_delimiter = ','
    )]
    pub main_team_oidc_users: Vec<String>,
    /// An OIDC group whose members own team main (repeat, or separate with
    /// commas).
    #[arg(
        long = "main-team-oidc-group",
        env = "HANGAR_MAIN_TEAM_OIDC_GROUP",
        value_delimiter = ','
    )]
    pub main_team_oidc_groups: Vec<String>,
    /// Where browsers reach web (https://ci.example.com): the OIDC
    /// provider sends them back under it, and with https every cookie is
    /// Secure.
    #[arg(long, env = "HANGAR_EXTERNAL_URL")]
    pub external_url: Option<String>,
    #[command(flatten)]
    pub oidc: OidcFlags,
    /// How long a login lasts, however used (Concourse's --auth-duration).
    #[arg(long, env = "HANGAR_AUTH_DURATION", default_value = "24h", value_parser = duration::parse)]
    pub auth_duration: Duration,
    /// A login unused this long ends.
    #[arg(long, env = "HANGAR_SESSION_IDLE_TIMEOUT", default_value = "8h", value_parser = duration::parse)]
    pub session_idle_timeout: Duration,
    /// TEAM:PATH: a file holding the key that team's workers register with
    /// (Concourse's team authorized keys): a worker presenting it must be
    /// started with --team TEAM. Repeat the flag, or separate with commas.
    #[arg(
        long = "team-worker-key-file",
        env = "HANGAR_TEAM_WORKER_KEY_FILE",
        value_delimiter = ','
    )]
    pub team_worker_key_files: Vec<String>,
    /// NAME:PATH: a file holding the key one worker registers with, under
    /// that name only and as a shared worker. Repeat, or separate with
    /// commas.
    #[arg(
        long = "named-worker-key-file",
        env = "HANGAR_NAMED_WORKER_KEY_FILE",
        value_delimiter = ','
    )]
    pub named_worker_key_files: Vec<String>,
    /// NAMESPACE:SERVICEACCOUNT[:TEAM]: pods running as this service
    /// account register workers with their service-account token, checked
    /// by the API server (TokenReview), each under its pod's name only;
    /// with TEAM, as that team's workers. Repeat, or separate with commas.
    #[arg(
        long = "kubernetes-worker-account",
        env = "HANGAR_KUBERNETES_WORKER_ACCOUNT",
        value_delimiter = ','
    )]
    pub kubernetes_worker_accounts: Vec<String>,
    /// The audience those tokens must be for: the `audience` of the
    /// workers' projected service-account token.
    #[arg(
        long = "kubernetes-worker-audience",
        env = "HANGAR_KUBERNETES_WORKER_AUDIENCE",
        default_value = "hangar"
    )]
    pub kubernetes_worker_audience: String,
    /// The API server that checks workers' tokens (default: this pod's,
    /// from KUBERNETES_SERVICE_HOST and the service account).
    #[arg(
        long = "kubernetes-api-url",
        env = "HANGAR_KUBERNETES_API_URL",
        requires = "kubernetes_api_token_file"
    )]
    pub kubernetes_api_url: Option<String>,
    /// Web's bearer token for --kubernetes-api-url, read at each check.
    #[arg(
        long = "kubernetes-api-token-file",
        env = "HANGAR_KUBERNETES_API_TOKEN_FILE",
        requires = "kubernetes_api_url"
    )]
    pub kubernetes_api_token_file: Option<std::path::PathBuf>,
    /// The CA bundle of --kubernetes-api-url (default: the system's roots).
    #[arg(
        long = "kubernetes-api-ca-file",
        env = "HANGAR_KUBERNETES_API_CA_FILE",
        requires = "kubernetes_api_url"
    )]
    pub kubernetes_api_ca_file: Option<std::path::PathBuf>,
}

/// Concourse's generic OIDC connector flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct OidcFlags {
    /// The OIDC provider's issuer URL (its discovery document is at
    /// ISSUER/.well-known/openid-configuration). Setting it turns OIDC
    /// login on.
    #[arg(long = "oidc-issuer", env = "HANGAR_OIDC_ISSUER")]
    pub issuer: Option<String>,
    /// What the login page's button says.
    #[arg(
        long = "oidc-display-name",
        env = "HANGAR_OIDC_DISPLAY_NAME",
        default_value = "OIDC"
    )]
    pub display_name: String,
    #[arg(long = "oidc-client-id", env = "HANGAR_OIDC_CLIENT_ID")]
    pub client_id: Option<String>,
    #[arg(
        long = "oidc-client-secret",
        env = "HANGAR_OIDC_CLIENT_SECRET",
        hide_env_values = true
    )]
    pub client_secret: Option<String>,
    /// A scope to ask for besides openid (repeat; default: profile and
    /// email).
    #[arg(long = "oidc-scope", env = "HANGAR_OIDC_SCOPE", value_delimiter = ',')]
    pub scopes: Vec<String>,
    /// The claim that holds the groups users' roles are granted to.
    #[arg(
        long = "oidc-groups-key",
        env = "HANGAR_OIDC_GROUPS_KEY",
        default_value = "groups"
    )]
    pub groups_key: String,
    /// The claim that holds the user name teams name (falls back to
    /// preferred_username).
    #[arg(
        long = "oidc-user-name-key",
        env = "HANGAR_OIDC_USER_NAME_KEY",
        default_value = "username"
    )]
    pub user_name_key: String,
    /// A PEM file of CA certificates to trust the provider with, besides
    /// the system's (repeat).
    #[arg(
        long = "oidc-ca-cert",
        env = "HANGAR_OIDC_CA_CERT",
        value_delimiter = ','
    )]
    pub ca_certs: Vec<std::path::PathBuf>,
    /// Trust whatever certificate the provider shows (never in production).
    #[arg(
        long = "oidc-skip-ssl-validation",
        env = "HANGAR_OIDC_SKIP_SSL_VALIDATION"
    )]
    pub skip_ssl_validation: bool,
    /// Ignore the groups claim: roles go to users only.
    #[arg(long = "oidc-disable-groups", env = "HANGAR_OIDC_DISABLE_GROUPS")]
    pub disable_groups: bool,
}

impl OidcFlags {
    fn config(&self) -> anyhow::Result<Option<OidcConfig>> {
        let Some(issuer) = &self.issuer else {
            if self.client_id.is_some() || self.client_secret.is_some() {
                anyhow::bail!("--oidc-client-id and --oidc-client-secret need --oidc-issuer");
            }
            return Ok(None);
        };
        let (Some(client_id), Some(client_secret)) = (&self.client_id, &self.client_secret) else {
            anyhow::bail!("--oidc-issuer needs --oidc-client-id and --oidc-client-secret");
        };
        if self.user_name_key.is_empty() || self.groups_key.is_empty() {
            anyhow::bail!("--oidc-user-name-key and --oidc-groups-key name a claim: not empty");
        }
        let ca_certs = self
            .ca_certs
            .iter()
            .map(|p| {
                std::fs::read(p).map_err(|e| anyhow::anyhow!("--oidc-ca-cert {}: {e}", p.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Some(OidcConfig {
            display_name: self.display_name.clone(),
            issuer: issuer.clone(),
            client_id: client_id.clone(),
            client_secret: client_secret.clone(),
            scopes: self.scopes.clone(),
            keys: ClaimKeys {
                user_name: self.user_name_key.clone(),
                groups: (!self.disable_groups).then(|| self.groups_key.clone()),
            },
            ca_certs,
            skip_tls_verify: self.skip_ssl_validation,
        }))
    }
}

/// Checks `--external-url`: an absolute http(s) URL with no query.
fn check_external_url(url: &str) -> anyhow::Result<()> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| anyhow::anyhow!("--external-url {url}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        anyhow::bail!("--external-url {url}: expected http(s)://HOST[:PORT][/PATH]");
    }
    Ok(())
}

impl UserFlags {
    /// Team → key, read from each `--team-worker-key-file`.
    pub(crate) fn team_worker_keys(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        keys_from_files("--team-worker-key-file", &self.team_worker_key_files)
    }

    /// Who registers with a pod's service-account token, and the API
    /// server that checks it.
    pub(crate) fn token_review(&self) -> anyhow::Result<Option<TokenReviewConfig>> {
        if self.kubernetes_worker_accounts.is_empty() {
            if self.kubernetes_api_url.is_some() {
                anyhow::bail!("--kubernetes-api-url is for --kubernetes-worker-account");
            }
            return Ok(None);
        }
        let accounts = self
            .kubernetes_worker_accounts
            .iter()
            .map(|a| {
                AdmittedAccount::parse(a)
                    .map_err(|e| anyhow::anyhow!("--kubernetes-worker-account {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if self.kubernetes_worker_audience.trim().is_empty() {
            anyhow::bail!("--kubernetes-worker-audience must not be empty");
        }
        let sa = std::path::Path::new(hangar_creds::kube::DEFAULT_SA_DIR);
        let (api_base, token_file, ca_file) = match (
            &self.kubernetes_api_url,
            &self.kubernetes_api_token_file,
        ) {
            (Some(url), Some(token)) => (
                url.clone(),
                token.clone(),
                self.kubernetes_api_ca_file.clone(),
            ),
            _ => {
                let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                    anyhow::anyhow!(
                        "--kubernetes-worker-account outside a pod needs --kubernetes-api-url and --kubernetes-api-token-file"
                    )
                })?;
                let port =
                    std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                (
                    format!("https://{host}:{port}"),
                    sa.join("token"),
                    Some(sa.join("ca.crt")),
                )
            }
        };
        Ok(Some(TokenReviewConfig {
            api_base,
            token_file,
            ca_file,
            audience: self.kubernetes_worker_audience.clone(),
            accounts,
        }))
    }

    /// Worker name → key, read from each `--named-worker-key-file`.
    pub(crate) fn named_worker_keys(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        keys_from_files("--named-worker-key-file", &self.named_worker_key_files)
    }

    pub(crate) fn auth_config(&self) -> anyhow::Result<AuthConfig> {
        if self.auth_duration.is_zero() || self.session_idle_timeout.is_zero() {
            anyhow::bail!("--auth-duration and --session-idle-timeout must be more than 0");
        }
        let local_users = self
            .local_users
            .iter()
            .map(|flag| {
                LocalUser::parse(flag).map_err(|e| anyhow::anyhow!("--add-local-user: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        for name in &self.main_team_local_users {
            if !local_users
                .iter()
                .any(|u| u.name.eq_ignore_ascii_case(name))
            {
                anyhow::bail!(
                    "--main-team-local-user {name}: no such local user (add it with --add-local-user {name}:PASSWORD)"
                );
            }
        }
        let oidc = self.oidc.config()?;
        if (!self.main_team_oidc_users.is_empty() || !self.main_team_oidc_groups.is_empty())
            && oidc.is_none()
        {
            anyhow::bail!("--main-team-oidc-user and --main-team-oidc-group need --oidc-issuer");
        }
        if let Some(url) = &self.external_url {
            check_external_url(url)?;
        } else if oidc.is_some() {
            anyhow::bail!(
                "--oidc-issuer needs --external-url: the provider sends browsers back there"
            );
        }
        let main_team = if self.main_team_local_users.is_empty()
            && self.main_team_oidc_users.is_empty()
            && self.main_team_oidc_groups.is_empty()
        {
            None
        } else {
            Some(
                TeamAuth::owners(
                    &self.main_team_local_users,
                    &self.main_team_oidc_users,
                    &self.main_team_oidc_groups,
                )
                .map_err(|e| anyhow::anyhow!("--main-team-*: {e}"))?,
            )
        };
        Ok(AuthConfig {
            local_users,
            main_team,
            session_ttl: self.auth_duration,
            session_idle: self.session_idle_timeout,
            external_url: self.external_url.clone(),
            oidc,
        })
    }
}

/// `NAME:PATH` flags read into name → the file's key (trimmed).
fn keys_from_files(
    flag: &str,
    values: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut keys = std::collections::BTreeMap::new();
    for value in values {
        let (name, path) = value
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("{flag} {value}: expected NAME:PATH"))?;
        hangar_core::names::validate_label(name).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        let key = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{flag} {name}: read {path}: {e}"))?
            .trim()
            .to_string();
        if keys.insert(name.to_string(), key).is_some() {
            anyhow::bail!("{flag}: {name} is given twice");
        }
    }
    Ok(keys)
}
