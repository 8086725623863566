//! fly's `check-resource` and `check-resource-type`: ask web for a check
//! now and wait for it to end, printing how it ended (exit 1 when the
//! check failed), as fly does.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use hangar_api::checks::{CheckRequest, CheckStatus};
use hangar_client::Checked;
use serde_json::{Map, Value};

use crate::cmd::pipelines::{split_flag, TeamArgs};

/// How often the outcome is polled.
const POLL: Duration = Duration::from_millis(250);

#[derive(clap::Args, Debug)]
pub(crate) struct CheckResourceArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Check from this version (KEY:VALUE, repeatable), as fly's -f.
    #[arg(short = 'f', long = "from")]
    pub from: Vec<String>,
    /// Check the resource alone, not its custom type first.
    #[arg(long)]
    pub shallow: bool,
    /// Do not wait for the check to end.
    #[arg(short = 'a', long = "async")]
    pub no_wait: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct CheckResourceTypeArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource type: PIPELINE/TYPE.
    #[arg(short = 'r', long = "resource-type")]
    pub resource_type: String,
    /// Check the type alone, not the type it is of first.
    #[arg(long)]
    pub shallow: bool,
    /// Do not wait for the check to end.
    #[arg(short = 'a', long = "async")]
    pub no_wait: bool,
}

/// `-f ref:abc -f branch:main` as a version.
fn parse_from(pairs: &[String]) -> anyhow::Result<Option<Map<String, Value>>> {
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut version = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once(':') else {
            bail!("-f {pair:?} is not KEY:VALUE");
        };
        if key.is_empty() {
            bail!("-f {pair:?} has an empty key");
        }
        version.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(Some(version))
}

pub(crate) async fn check_resource(args: CheckResourceArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, name) = split_flag("resource", &args.resource)?;
    let request = CheckRequest {
        from: parse_from(&args.from)?,
        shallow: args.shallow,
    };
    run(
        &args.team,
        &pipeline,
        Checked::Resource,
        &name,
        request,
        args.no_wait,
    )
    .await
}

pub(crate) async fn check_resource_type(args: CheckResourceTypeArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, name) = split_flag("resource type", &args.resource_type)?;
    let request = CheckRequest {
        from: None,
        shallow: args.shallow,
    };
    run(
        &args.team,
        &pipeline,
        Checked::ResourceType,
        &name,
        request,
        args.no_wait,
    )
    .await
}

// Printing the check's outcome is the command's point.
#[allow(clippy::print_stdout)]
async fn run(
    team: &TeamArgs,
    pipeline: &str,
    what: Checked,
    name: &str,
    request: CheckRequest,
    no_wait: bool,
) -> anyhow::Result<ExitCode> {
    let client = team.target.client()?;
    let asked = client
        .request_check(&team.team, pipeline, what, name, &request)
        .await?;
    println!("checking {pipeline}/{name}");
    if no_wait {
        println!("check asked for");
        return Ok(ExitCode::SUCCESS);
    }
    let status: CheckStatus = loop {
        let status = client
            .check_status(&team.team, pipeline, what, name)
            .await?;
        if status.answers(asked.requested_at) {
            break status;
        }
        tokio::time::sleep(POLL).await;
    };
    match status.check_error {
        None => {
            println!("succeeded");
            Ok(ExitCode::SUCCESS)
        }
        Some(error) => {
            println!("failed");
            println!("{error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_from;

    #[test]
    fn from_flags_are_key_value_pairs() {
        assert_eq!(parse_from(&[]).unwrap(), None);
        let v = parse_from(&["ref:abc".into(), "url:http://x:1".into()])
            .unwrap()
            .unwrap();
        assert_eq!(v["ref"], "abc");
        assert_eq!(v["url"], "http://x:1");
        for bad in ["nocolon", ":empty-key"] {
            assert!(parse_from(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
