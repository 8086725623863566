//! Web's flags for who logs in: Concourse's local users and main team.

use std::time::Duration;

use hangar_core::tenancy::TeamAuth;
use hangar_web::{AuthConfig, LocalUser};

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
}

impl UserFlags {
    /// Team → key, read from each `--team-worker-key-file`.
    pub(crate) fn team_worker_keys(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        keys_from_files("--team-worker-key-file", &self.team_worker_key_files)
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
        let main_team = if self.main_team_local_users.is_empty() {
            None
        } else {
            Some(
                TeamAuth::owners(&self.main_team_local_users, &[], &[])
                    .map_err(|e| anyhow::anyhow!("--main-team-local-user: {e}"))?,
            )
        };
        Ok(AuthConfig {
            local_users,
            main_team,
            session_ttl: self.auth_duration,
            session_idle: self.session_idle_timeout,
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
