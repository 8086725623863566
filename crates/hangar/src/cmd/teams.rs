//! fly's team verbs: `set-team`, `teams`, `rename-team`, `destroy-team`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use hangar_core::tenancy::TeamAuth;

use crate::format::table;
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct SetTeamArgs {
    #[command(flatten)]
    pub target: Target,
    /// The team to set (made when it does not exist: admins only).
    #[arg(short = 'n', long = "team-name")]
    pub team: String,
    /// Concourse's roles file (roles: - name: owner, local: {users: […]}, …).
    #[arg(short = 'c', long, conflicts_with_all = ["local_users", "oidc_users", "oidc_groups"])]
    pub config: Option<PathBuf>,
    /// A local user who owns the team (repeat the flag).
    #[arg(long = "local-user")]
    pub local_users: Vec<String>,
    /// An OIDC user who owns the team (repeat the flag).
    #[arg(long = "oidc-user")]
    pub oidc_users: Vec<String>,
    /// An OIDC group whose members own the team (repeat the flag).
    #[arg(long = "oidc-group")]
    pub oidc_groups: Vec<String>,
    /// Set it without asking.
    #[arg(long)]
    pub non_interactive: bool,
}

/// The largest roles file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

pub(crate) async fn set_team(args: SetTeamArgs) -> anyhow::Result<ExitCode> {
    hangar_core::names::validate_label(&args.team).map_err(|e| anyhow::anyhow!("team: {e}"))?;
    let auth = match &args.config {
        Some(path) => {
            let len = std::fs::metadata(path)
                .with_context(|| format!("read {}", path.display()))?
                .len();
            if len > MAX_CONFIG_BYTES {
                anyhow::bail!("{}: {len} bytes, more than any roles file", path.display());
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let value = hangar_core::yaml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            TeamAuth::from_config(&value).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => TeamAuth::owners(&args.local_users, &args.oidc_users, &args.oidc_groups).map_err(
            |e| anyhow::anyhow!("{e} (give --local-user, --oidc-user, --oidc-group or --config)"),
        )?,
    };
    let shown = serde_json::to_value(&auth)?;
    eprintln!("setting team {}:", args.team);
    for (role, holders) in &auth.0 {
        eprintln!("  {role}:");
        for u in &holders.users {
            eprintln!("    user {u}");
        }
        for g in &holders.groups {
            eprintln!("    group {g}");
        }
    }
    if !args.non_interactive && !crate::cmd::pipelines::confirm("apply?").await? {
        eprintln!("bailing out");
        return Ok(ExitCode::FAILURE);
    }
    let saved = args.target.client()?.set_team(&args.team, shown).await?;
    eprintln!(
        "team {} {}",
        saved.team,
        if saved.created { "created" } else { "updated" }
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct TeamsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Show each team's users and groups (those the caller owns).
    #[arg(short = 'd', long)]
    pub details: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn teams(args: TeamsArgs) -> anyhow::Result<ExitCode> {
    let teams = args.target.client()?.teams().await?;
    if args.json {
        crate::format::emit_json(&teams)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.details {
        let rows: Vec<Vec<String>> = teams.iter().map(|t| vec![t.name.clone()]).collect();
        print!("{}", table(&["name"], &rows));
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for t in &teams {
        let auth: Option<TeamAuth> = t.auth.clone().and_then(|a| serde_json::from_value(a).ok());
        match auth {
            Some(auth) => {
                for (role, holders) in &auth.0 {
                    rows.push(vec![
                        t.name.clone(),
                        role.clone(),
                        holders.users.join(","),
                        holders.groups.join(","),
                    ]);
                }
            }
            None => rows.push(vec![t.name.clone(), "-".into(), "-".into(), "-".into()]),
        }
    }
    print!("{}", table(&["name", "role", "users", "groups"], &rows));
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct RenameTeamArgs {
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 'o', long = "old-name")]
    pub old: String,
    #[arg(short = 'n', long = "new-name")]
    pub new: String,
}

pub(crate) async fn rename_team(args: RenameTeamArgs) -> anyhow::Result<ExitCode> {
    for name in [&args.old, &args.new] {
        hangar_core::names::validate_label(name).map_err(|e| anyhow::anyhow!("team: {e}"))?;
    }
    args.target
        .client()?
        .rename_team(&args.old, &args.new)
        .await?;
    eprintln!("team {} renamed to {}", args.old, args.new);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct DestroyTeamArgs {
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 'n', long = "team-name")]
    pub team: String,
    /// Destroy it without asking.
    #[arg(long)]
    pub non_interactive: bool,
}

pub(crate) async fn destroy_team(args: DestroyTeamArgs) -> anyhow::Result<ExitCode> {
    hangar_core::names::validate_label(&args.team).map_err(|e| anyhow::anyhow!("team: {e}"))?;
    if !args.non_interactive {
        eprintln!(
            "!!! this will remove all of team {}'s data: its pipelines, builds and their logs",
            args.team
        );
        if !crate::cmd::pipelines::confirm(&format!("destroy team {}?", args.team)).await? {
            eprintln!("bailing out");
            return Ok(ExitCode::FAILURE);
        }
    }
    args.target.client()?.destroy_team(&args.team).await?;
    eprintln!("team {} destroyed", args.team);
    Ok(ExitCode::SUCCESS)
}
