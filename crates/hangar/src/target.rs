//! Where the user-side commands find web, and with what credentials: a
//! target saved by `hangar login` (`hangar -t NAME …`, fly's way), or
//! `--url`/`--token` (`HANGAR_URL`/`HANGAR_TOKEN`, for bootstrap with the
//! admin token and for automation).

use std::sync::OnceLock;
use std::time::Duration;

use hangar_client::Client;

use crate::rc::Rc;

/// The target `-t` picked for this run, if any.
static SELECTED: OnceLock<String> = OnceLock::new();

/// Picks the saved target every command of this run talks to.
pub(crate) fn select(name: String) -> anyhow::Result<()> {
    crate::rc::check_name(&name)?;
    let _ = SELECTED.set(name);
    Ok(())
}

pub(crate) fn selected() -> Option<&'static str> {
    SELECTED.get().map(String::as_str)
}

/// Web's URL when nothing names one.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Target {
    /// Web's URL (with -t: the target's).
    #[arg(long, env = "HANGAR_URL")]
    pub url: Option<String>,
    /// A token: the admin token, or a session's (with -t: the target's).
    #[arg(long, env = "HANGAR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Where a command goes: web's URL, the token, the target's team.
pub(crate) struct Resolved {
    pub url: String,
    pub token: Option<String>,
    pub team: Option<String>,
}

impl Target {
    /// With `-t`, the saved target (its login must not have expired);
    /// else `--url`/`--token`.
    pub(crate) fn resolve(&self) -> anyhow::Result<Resolved> {
        let Some(name) = selected() else {
            return Ok(Resolved {
                url: self.url.clone().unwrap_or_else(|| DEFAULT_URL.into()),
                token: self.token.clone(),
                team: None,
            });
        };
        let rc = Rc::load()?;
        let saved = rc.target(name)?;
        if let Some(at) = saved.expires_at {
            if at <= crate::format::now_ms() {
                anyhow::bail!("the login of target {name} has expired: hangar -t {name} login");
            }
        }
        Ok(Resolved {
            url: saved.api.clone(),
            token: saved.token.as_ref().map(|t| t.value.clone()),
            team: Some(saved.team.clone()),
        })
    }

    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        let r = self.resolve()?;
        let token = r.token.ok_or_else(|| match selected() {
            Some(name) => anyhow::anyhow!("target {name} is not logged in: hangar -t {name} login"),
            None => anyhow::anyhow!(
                "no credentials: log in (hangar -t NAME login -c URL), or pass --token or set \
                 HANGAR_TOKEN (quickstart prints how)"
            ),
        })?;
        Ok(Client::new(&r.url, &token, Duration::from_secs(30))?)
    }

    /// The team a command acts in: `--team`, else the target's, else main.
    pub(crate) fn team(&self, explicit: Option<&str>) -> anyhow::Result<String> {
        if let Some(t) = explicit {
            return Ok(t.to_string());
        }
        Ok(self
            .resolve()?
            .team
            .unwrap_or_else(|| hangar_core::tenancy::MAIN_TEAM.to_string()))
    }
}
