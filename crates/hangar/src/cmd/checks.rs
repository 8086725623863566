//! fly's `check-resource` and `check-resource-type`: ask web for a check
//! now and wait for it to end, printing how it ended (exit 1 when the
//! check failed), as fly does. While the check waits (no worker fits it)
//! it says why, and it never waits without a bound: web fails a check no
//! worker of its kind joins for within its `--no-worker-timeout`, and the
//! command gives up a little after that, or after the check's own
//! timeout once it runs.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use hangar_api::checks::{CheckRequest, CheckStatus};
use hangar_client::Checked;
use serde_json::{Map, Value};

use crate::cmd::pipelines::{split_flag, TeamArgs};

/// How often the outcome is polled.
const POLL: Duration = Duration::from_millis(250);
/// How much longer than web's own bounds the command waits: web takes
/// up a check asked for at its next pass (a second by default).
const MARGIN: Duration = Duration::from_secs(30);
/// Web's bound on a wait for a worker when it does not say.
const DEFAULT_NO_WORKER_TIMEOUT: Duration = Duration::from_secs(60);
/// A check's own timeout when web does not say (Concourse's default).
const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(3_600);

/// Where a check asked for stands, as the command tells it.
#[derive(Debug, Clone, PartialEq)]
enum Stand {
    /// Ended (its status answers the request).
    Ended,
    /// Runs on a worker.
    Running,
    /// Not running: web has not taken it up yet, or gave it back for this
    /// reason.
    Waiting(Option<String>),
}

fn stand(status: &CheckStatus, requested_at: i64) -> Stand {
    if status.answers(requested_at) {
        Stand::Ended
    } else if status.checking && status.waiting.is_none() {
        Stand::Running
    } else {
        Stand::Waiting(status.waiting.clone())
    }
}

fn millis(ms: Option<i64>, default: Duration) -> Duration {
    ms.and_then(|ms| u64::try_from(ms).ok())
        .map_or(default, Duration::from_millis)
}

/// What the command says of a check that waits.
fn waiting_line(why: &str, status: &CheckStatus) -> String {
    match (status.waiting_since, status.no_worker_timeout_ms) {
        (Some(_), Some(bound)) => format!(
            "waiting: {why} (the check fails if none joins within {})",
            hangar_core::lifecycle::human_ms(bound)
        ),
        _ => format!("waiting: {why}"),
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct CheckResourceArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE (an instance: NAME/KEY:VALUE,…/RESOURCE).
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
        .request_check(&team.name()?, pipeline, what, name, &request)
        .await?;
    println!("checking {pipeline}/{name}");
    if no_wait {
        println!("check asked for");
        return Ok(ExitCode::SUCCESS);
    }
    // Each stretch of waiting and of running has its own bound, from
    // when the command first saw it.
    let mut said: Option<String> = None;
    let mut since = (Stand::Waiting(None), tokio::time::Instant::now());
    let spinner = crate::cmd::progress::Spinner::start(&format!("checking {pipeline}/{name}"));
    let status: CheckStatus = loop {
        let status = client
            .check_status(&team.name()?, pipeline, what, name)
            .await?;
        let now = stand(&status, asked.requested_at);
        match &now {
            Stand::Ended => break status,
            Stand::Waiting(Some(why)) if said.as_deref() != Some(why) => {
                spinner.println(&waiting_line(why, &status));
                said = Some(why.clone());
            }
            _ => {}
        }
        let running = now == Stand::Running;
        if running != (since.0 == Stand::Running) {
            since = (now.clone(), tokio::time::Instant::now());
        }
        let bound = if running {
            millis(status.check_timeout_ms, DEFAULT_CHECK_TIMEOUT)
        } else {
            millis(status.no_worker_timeout_ms, DEFAULT_NO_WORKER_TIMEOUT)
        } + MARGIN;
        if since.1.elapsed() > bound {
            let what = if running {
                "still running".to_string()
            } else {
                match &now {
                    Stand::Waiting(Some(why)) => format!("still waiting: {why}"),
                    _ => "not started by web".to_string(),
                }
            };
            bail!(
                "gave up after {}: the check is {what} (it stays asked for; `hangar resources` shows how it ends)",
                hangar_core::lifecycle::human_ms(
                    i64::try_from(since.1.elapsed().as_millis()).unwrap_or(i64::MAX)
                )
            );
        }
        tokio::time::sleep(POLL).await;
    };
    drop(spinner);
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
    use super::{parse_from, stand, waiting_line, Stand};
    use hangar_api::checks::CheckStatus;

    #[test]
    fn a_check_asked_for_waits_runs_or_has_ended() {
        let asked = 100;
        let waiting = CheckStatus {
            check_requested_at: Some(asked),
            waiting: Some("no worker has resource type mokc".into()),
            waiting_since: Some(101),
            no_worker_timeout_ms: Some(60_000),
            ..Default::default()
        };
        let why = Stand::Waiting(Some("no worker has resource type mokc".into()));
        assert_eq!(stand(&waiting, asked), why);
        assert_eq!(
            waiting_line("no worker has resource type mokc", &waiting),
            "waiting: no worker has resource type mokc (the check fails if none joins within 1m)"
        );
        // Tried again (claimed a moment), it still waits.
        let retried = CheckStatus {
            checking: true,
            ..waiting.clone()
        };
        assert_eq!(stand(&retried, asked), why);
        // A wait web does not bound says no bound.
        let busy = CheckStatus {
            waiting_since: None,
            ..waiting.clone()
        };
        assert_eq!(waiting_line("all busy", &busy), "waiting: all busy");
        let running = CheckStatus {
            check_requested_at: Some(asked),
            checking: true,
            ..Default::default()
        };
        assert_eq!(stand(&running, asked), Stand::Running);
        let not_taken = CheckStatus {
            check_requested_at: Some(asked),
            ..Default::default()
        };
        assert_eq!(stand(&not_taken, asked), Stand::Waiting(None));
        let ended = CheckStatus {
            last_check_started_at: Some(asked + 1),
            last_check_finished_at: Some(asked + 2),
            check_error: Some("no worker has resource type mokc".into()),
            ..Default::default()
        };
        assert_eq!(stand(&ended, asked), Stand::Ended);
    }

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
