use std::process::ExitCode;

use crate::format::{ago, coarse, now_ms, table};
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// How many builds, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
    /// Only the builds of this job: PIPELINE/JOB (an instance: NAME/KEY:VALUE,…/JOB).
    #[arg(short = 'j', long = "job")]
    pub job: Option<String>,
    /// The team owning the job's pipeline. Default: the target\'s, else main.
    #[arg(long, env = "HANGAR_TEAM")]
    pub team: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.target.client()?;
    let builds = match &args.job {
        Some(job) => {
            let (pipeline, job) = crate::cmd::pipelines::split_flag("job", job)?;
            client
                .job_builds(
                    &args.target.team(args.team.as_deref())?,
                    &pipeline,
                    &job,
                    args.limit,
                )
                .await?
        }
        None => client.builds(args.limit).await?,
    };
    if args.json {
        crate::format::emit_json(&builds)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = builds
        .iter()
        .map(|b| {
            let duration = match (b.started_at, b.finished_at) {
                (Some(s), Some(f)) => coarse(f - s),
                (Some(s), None) => format!("{} so far", coarse(now - s)),
                _ => "not started".into(),
            };
            vec![
                b.id.to_string(),
                b.name.clone(),
                b.status.to_string(),
                ago(now, b.created_at),
                duration,
                b.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    crate::format::emit(&table(
        &["id", "name", "status", "created", "duration", "error"],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct AbortArgs {
    #[command(flatten)]
    pub target: Target,
    /// The build to abort: its id, or with --job its number in the job
    /// (as fly's `abort-build -j P/J -b N`).
    #[arg(long, short = 'b')]
    pub build: i64,
    /// A job's build: PIPELINE/JOB (an instance: NAME/KEY:VALUE,…/JOB).
    #[arg(short = 'j', long = "job")]
    pub job: Option<String>,
    /// The team owning the job's pipeline. Default: the target\'s, else main.
    #[arg(long, env = "HANGAR_TEAM")]
    pub team: Option<String>,
}

/// Aborts a build (`fly abort-build`): a pending one at once, a started
/// one once its node stopped it and ran its `on_abort` and `ensure` hooks.
pub(crate) async fn abort(args: AbortArgs) -> anyhow::Result<ExitCode> {
    let client = args.target.client()?;
    let id = match &args.job {
        None => args.build,
        Some(job) => {
            let (pipeline, job) = crate::cmd::pipelines::split_flag("job", job)?;
            let team = args.target.team(args.team.as_deref())?;
            client
                .job_build(&team, &pipeline, &job, args.build)
                .await?
                .id
        }
    };
    let build = client.abort_build(id).await?;
    let line = match build.status {
        hangar_api::builds::BuildStatus::Started => {
            format!("build {}: aborting (`hangar watch` follows it)\n", build.id)
        }
        status => format!("build {}: {status}\n", build.id),
    };
    crate::format::emit(&line)?;
    Ok(ExitCode::SUCCESS)
}
