//! `pin-resource`, `unpin-resource`, `enable-resource-version` and
//! `disable-resource-version`, as fly's.

use std::process::ExitCode;

use hangar_api::pins::parse_version_flags;

use super::pipelines::{split_flag, TeamArgs};

#[derive(clap::Args, Debug)]
pub(crate) struct PinArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE (an instance: NAME/KEY:VALUE,…/RESOURCE).
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// A field of the version, KEY:VALUE (repeat for more); the newest
    /// version having them all is meant.
    #[arg(short = 'v', long = "version", required = true)]
    pub version: Vec<String>,
    /// Why it is pinned (shown with the pin).
    #[arg(short = 'c', long = "comment")]
    pub comment: Option<String>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct UnpinArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE (an instance: NAME/KEY:VALUE,…/RESOURCE).
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
}

#[derive(clap::Args, Debug)]
pub(crate) struct VersionArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE (an instance: NAME/KEY:VALUE,…/RESOURCE).
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// A field of the version, KEY:VALUE (repeat for more).
    #[arg(short = 'v', long = "version", required = true)]
    pub version: Vec<String>,
}

pub(crate) async fn pin(args: PinArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, resource) = split_flag("resource", &args.resource)?;
    let version = parse_version_flags(&args.version).map_err(anyhow::Error::msg)?;
    args.team
        .target
        .client()?
        .pin_resource(
            &args.team.name()?,
            &pipeline,
            &resource,
            version,
            args.comment,
        )
        .await?;
    println!("pinned '{pipeline}/{resource}'");
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn unpin(args: UnpinArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, resource) = split_flag("resource", &args.resource)?;
    args.team
        .target
        .client()?
        .unpin_resource(&args.team.name()?, &pipeline, &resource)
        .await?;
    println!("unpinned '{pipeline}/{resource}'");
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn set_enabled(args: VersionArgs, enabled: bool) -> anyhow::Result<ExitCode> {
    let (pipeline, resource) = split_flag("resource", &args.resource)?;
    let version = parse_version_flags(&args.version).map_err(anyhow::Error::msg)?;
    args.team
        .target
        .client()?
        .set_resource_version_enabled(&args.team.name()?, &pipeline, &resource, version, enabled)
        .await?;
    let what = if enabled { "enabled" } else { "disabled" };
    println!("{what} version of '{pipeline}/{resource}'");
    Ok(ExitCode::SUCCESS)
}
