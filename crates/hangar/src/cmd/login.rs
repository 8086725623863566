//! fly's session verbs: `login`, `logout`, `targets`, `userinfo`,
//! `status`. A login saves a target (web's URL, the team, the session
//! token) under the name `-t` gives, in the targets file (`crate::rc`).

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hangar_client::Client;

use crate::format::{now_ms, table};
use crate::rc::{Rc, SavedTarget, Token};
use crate::target::selected;

#[derive(clap::Args, Debug)]
pub(crate) struct LoginArgs {
    /// Web's URL (default: the target's, when it is saved).
    #[arg(short = 'c', long = "concourse-url", alias = "url")]
    pub url: Option<String>,
    /// The team to act in (default: the target's, else main).
    #[arg(short = 'n', long = "team-name")]
    pub team: Option<String>,
    /// A local user's name.
    #[arg(short = 'u', long)]
    pub username: Option<String>,
    /// The password (default: read a line from standard input).
    #[arg(short = 'p', long, env = "HANGAR_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Without -u, open the login page in the browser too (it is always
    /// printed).
    #[arg(short = 'b', long)]
    pub open_browser: bool,
}

fn target_name() -> anyhow::Result<&'static str> {
    selected().ok_or_else(|| anyhow::anyhow!("name the target: hangar -t NAME …"))
}

pub(crate) async fn login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let name = target_name()?;
    let mut rc = Rc::load()?;
    let saved = rc.targets.get(name).cloned();
    let url = args
        .url
        .or_else(|| saved.as_ref().map(|s| s.api.clone()))
        .ok_or_else(|| anyhow::anyhow!("target {name} is new: give web's URL with -c URL"))?;
    let team = args
        .team
        .or_else(|| saved.as_ref().map(|s| s.team.clone()))
        .unwrap_or_else(|| hangar_core::tenancy::MAIN_TEAM.to_string());
    hangar_core::names::validate_label(&team).map_err(|e| anyhow::anyhow!("team: {e}"))?;
    let client = Client::new(&url, "", Duration::from_secs(30))?;
    let session = match args.username {
        Some(username) => {
            let password = match args.password {
                Some(p) => p,
                None => {
                    eprint!("password: ");
                    let mut line = String::new();
                    std::io::stdin()
                        .lock()
                        .read_line(&mut line)
                        .context("read the password from standard input")?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
            };
            client.login(&username, &password).await?
        }
        None => crate::cmd::browser_login::log_in(&client, &url, args.open_browser).await?,
    };
    let user = &session.user;
    if !user.is_admin && !user.teams.contains_key(&team) {
        anyhow::bail!(
            "user {} has no role on team {team} (their teams: {})",
            user.user_name,
            if user.teams.is_empty() {
                "none".to_string()
            } else {
                user.teams.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        );
    }
    rc.targets.insert(
        name.to_string(),
        SavedTarget {
            api: url.clone(),
            team: team.clone(),
            token: Some(Token {
                kind: "Bearer".into(),
                value: session.token.clone(),
            }),
            expires_at: Some(session.expires_at),
        },
    );
    rc.save()?;
    eprintln!(
        "logged in to {url} as {} (team {team}); target {name} saved",
        user.user_name
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct LogoutArgs {
    /// Log out of every saved target.
    #[arg(short = 'a', long)]
    pub all: bool,
}

/// Ends the session at web (so the token is refused from now on, wherever
/// a copy of it is) and forgets the target's token.
pub(crate) async fn logout(args: LogoutArgs) -> anyhow::Result<ExitCode> {
    let mut rc = Rc::load()?;
    let names: Vec<String> = if args.all {
        rc.targets.keys().cloned().collect()
    } else {
        let name = target_name()?;
        rc.target(name)?;
        vec![name.to_string()]
    };
    for name in names {
        let Some(saved) = rc.targets.get_mut(&name) else {
            continue;
        };
        if let Some(token) = saved.token.take() {
            let client = Client::new(&saved.api, &token.value, Duration::from_secs(30))?;
            match client.logout().await {
                Ok(()) => eprintln!("logged out of target {name}"),
                // The token is gone from here either way: an expired
                // session is already over at web.
                Err(e) => eprintln!("target {name}: web did not end the session: {e}"),
            }
        }
        saved.expires_at = None;
        if !args.all {
            rc.targets.remove(&name);
        }
    }
    if args.all {
        rc.targets.clear();
    }
    rc.save()?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct TargetsArgs {}

pub(crate) async fn targets(_: TargetsArgs) -> anyhow::Result<ExitCode> {
    let rc = Rc::load()?;
    let now = now_ms();
    let rows: Vec<Vec<String>> = rc
        .targets
        .iter()
        .map(|(name, t)| {
            let expiry = match (&t.token, t.expires_at) {
                (None, _) => "logged out".to_string(),
                (Some(_), Some(at)) if at <= now => "expired".to_string(),
                (Some(_), Some(at)) => format!("in {}", crate::format::coarse(at - now)),
                (Some(_), None) => "n/a".to_string(),
            };
            vec![name.clone(), t.api.clone(), t.team.clone(), expiry]
        })
        .collect();
    print!("{}", table(&["name", "url", "team", "expiry"], &rows));
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct UserinfoArgs {
    #[command(flatten)]
    pub target: crate::target::Target,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn userinfo(args: UserinfoArgs) -> anyhow::Result<ExitCode> {
    let user = args.target.client()?.user().await?;
    if args.json {
        crate::format::emit_json(&user)?;
        return Ok(ExitCode::SUCCESS);
    }
    let teams: Vec<String> = user
        .teams
        .iter()
        .map(|(team, roles)| format!("{team}/{}", roles.join(",")))
        .collect();
    print!(
        "{}",
        table(
            &["name", "connector", "is_admin", "teams"],
            &[vec![
                user.user_name,
                user.connector,
                user.is_admin.to_string(),
                teams.join(" "),
            ]]
        )
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub target: crate::target::Target,
}

/// Whether the target's token is still good: exit 0 when it is.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let name = target_name()?;
    match args.target.client()?.user().await {
        Ok(_) => {
            println!("logged in successfully");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => anyhow::bail!("target {name}: {e}: log in again (hangar -t {name} login)"),
    }
}
