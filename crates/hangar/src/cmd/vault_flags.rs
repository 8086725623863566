//! `hangar web --vault-*`: Concourse's Vault credential manager flags (the
//! ones that apply), read into a `hangar_creds::vault::VaultConfig`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hangar_creds::vault::{Auth, VaultConfig, VaultSecrets};

use crate::duration;

/// A flag's value that is a secret: `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct Hidden(String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

fn hidden(s: &str) -> Result<Hidden, String> {
    Ok(Hidden(s.to_string()))
}

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct VaultFlags {
    /// Read vars from Vault (or OpenBao) at this URL (https://vault:8200):
    /// KV v1 or v2 secrets at <prefix>/<team>/<pipeline>/<name> then
    /// <prefix>/<team>/<name>.
    #[arg(
        long,
        env = "HANGAR_VAULT_URL",
        conflicts_with_all = ["credentials_kubernetes", "credentials_dir"]
    )]
    pub vault_url: Option<String>,
    /// The path under which vars are looked up.
    #[arg(
        long,
        env = "HANGAR_VAULT_PATH_PREFIX",
        default_value = hangar_core::vars::credentials::vault::DEFAULT_PATH_PREFIX,
        requires = "vault_url"
    )]
    pub vault_path_prefix: String,
    /// A lookup path under the prefix, with {{.Team}}, {{.Pipeline}} and
    /// {{.Secret}}; tried in the order given (repeat the flag, or separate
    /// with commas). Default: /{{.Team}}/{{.Pipeline}}/{{.Secret}} then
    /// /{{.Team}}/{{.Secret}}.
    #[arg(
        long,
        env = "HANGAR_VAULT_LOOKUP_TEMPLATES",
        value_delimiter = ',',
        requires = "vault_url"
    )]
    pub vault_lookup_templates: Vec<String>,
    /// A path under the prefix tried after the lookup templates, for vars
    /// every team shares.
    #[arg(long, env = "HANGAR_VAULT_SHARED_PATH", requires = "vault_url")]
    pub vault_shared_path: Option<String>,
    /// The Vault namespace of logins and reads.
    #[arg(long, env = "HANGAR_VAULT_NAMESPACE", requires = "vault_url")]
    pub vault_namespace: Option<String>,
    /// A PEM file of the CAs that sign Vault's certificate (default: the
    /// system's roots).
    #[arg(long, env = "HANGAR_VAULT_CA_CERT", requires = "vault_url")]
    pub vault_ca_cert: Option<PathBuf>,
    /// The token web reads with (renewed while renewable).
    #[arg(
        long,
        env = "HANGAR_VAULT_CLIENT_TOKEN",
        hide_env_values = true,
        value_parser = hidden,
        requires = "vault_url",
        conflicts_with = "vault_auth_backend"
    )]
    pub vault_client_token: Option<Hidden>,
    /// The auth backend web logs in with (approle, ...), renewing its
    /// token and logging in again when Vault grants no more time.
    #[arg(long, env = "HANGAR_VAULT_AUTH_BACKEND", requires = "vault_url")]
    pub vault_auth_backend: Option<String>,
    /// NAME:VALUE, a login parameter of the auth backend (role_id:...,
    /// secret_id:...); repeat the flag for each.
    #[arg(
        long,
        env = "HANGAR_VAULT_AUTH_PARAM",
        hide_env_values = true,
        value_delimiter = ',',
        value_parser = hidden,
        requires = "vault_auth_backend"
    )]
    pub vault_auth_param: Vec<Hidden>,
    /// Log in again after this long even when the token could still be
    /// renewed (default: renew for as long as Vault allows).
    #[arg(
        long,
        env = "HANGAR_VAULT_AUTH_BACKEND_MAX_TTL",
        value_parser = duration::parse,
        requires = "vault_auth_backend"
    )]
    pub vault_auth_backend_max_ttl: Option<Duration>,
    /// How long a build waits for web's first login to Vault.
    #[arg(
        long,
        env = "HANGAR_VAULT_LOGIN_TIMEOUT",
        default_value = "60s",
        value_parser = duration::parse
    )]
    pub vault_login_timeout: Duration,
}

impl VaultFlags {
    /// The Vault manager, started, when `--vault-url` is given.
    pub(crate) fn open(&self) -> anyhow::Result<Option<VaultSecrets>> {
        let Some(url) = &self.vault_url else {
            return Ok(None);
        };
        let auth = match (&self.vault_client_token, &self.vault_auth_backend) {
            (Some(Hidden(token)), None) => Auth::Token(token.clone()),
            (None, Some(backend)) => {
                let mut params = BTreeMap::new();
                for Hidden(pair) in &self.vault_auth_param {
                    let Some((name, value)) = pair.split_once(':') else {
                        anyhow::bail!("--vault-auth-param takes NAME:VALUE (a name, then ':')");
                    };
                    params.insert(name.trim().to_string(), value.to_string());
                }
                Auth::Backend {
                    backend: backend.clone(),
                    params,
                }
            }
            _ => anyhow::bail!("--vault-url needs --vault-client-token or --vault-auth-backend"),
        };
        let mut config = VaultConfig::new(url, auth);
        config.path_prefix = self.vault_path_prefix.clone();
        config.lookup_templates = self.vault_lookup_templates.clone();
        config.shared_path = self.vault_shared_path.clone();
        config.namespace = self.vault_namespace.clone();
        config.ca_cert = self.vault_ca_cert.clone();
        config.auth_max_ttl = self.vault_auth_backend_max_ttl;
        config.login_timeout = self.vault_login_timeout;
        Ok(Some(VaultSecrets::start(config)?))
    }
}
