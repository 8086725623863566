//! Where the user-side commands find web, and with what credentials.

use std::time::Duration;

use hangar_client::Client;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Target {
    /// Web's URL.
    #[arg(long, env = "HANGAR_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The admin token (quickstart prints where it is).
    #[arg(long, env = "HANGAR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl Target {
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        let token = self.token.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "no credentials: pass --token or set HANGAR_TOKEN (quickstart prints how)"
            )
        })?;
        Ok(Client::new(&self.url, token, Duration::from_secs(30))?)
    }
}
