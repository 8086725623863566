use hangar_api::builds::{BuildEventKind, BuildStatus};
use std::process::ExitCode;

use hangar_client::Client;

use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// The build: its id, or with --job its number in the job (default:
    /// the job's latest build).
    #[arg(short = 'b', long = "build")]
    pub build: Option<i64>,
    /// A job's build: PIPELINE/JOB (an instance: NAME/KEY:VALUE,…/JOB).
    #[arg(short = 'j', long = "job")]
    pub job: Option<String>,
    /// The team owning the job's pipeline. Default: the target\'s, else main.
    #[arg(long, env = "HANGAR_TEAM")]
    pub team: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.target.client()?;
    let team = args.target.team(args.team.as_deref())?;
    let (build, job) = match (&args.job, args.build) {
        (None, Some(id)) => (client.build(id).await?, None),
        (None, None) => anyhow::bail!("say which build: -b ID, or -j PIPELINE/JOB [-b NUMBER]"),
        (Some(job), number) => {
            let (pipeline, job) = crate::cmd::pipelines::split_flag("job", job)?;
            let build = match number {
                Some(n) => client.job_build(&team, &pipeline, &job, n).await?,
                None => match client
                    .job_builds(&team, &pipeline, &job, 1)
                    .await?
                    .into_iter()
                    .next()
                {
                    Some(b) => b,
                    None => anyhow::bail!("job {pipeline}/{job} has no builds yet"),
                },
            };
            (build, Some((pipeline, job)))
        }
    };
    if build.logs_reaped_at.is_some() {
        // Said rather than showing an empty log as if the build wrote none.
        eprintln!(
            "hangar: the log of build {} was removed by its job's build_log_retention",
            build.name
        );
        print_versions(&build);
        return Ok(exit_code(build.status, build.exit_code));
    }
    let code = follow(&client, build.id).await?;
    // A job build's versions, as recorded once it ended.
    if let Some((pipeline, job)) = job {
        let number = build_number(&build.name);
        if let Some(n) = number {
            let done = client.job_build(&team, &pipeline, &job, n).await?;
            print_versions(&done);
        }
    }
    Ok(code)
}

/// A job build's number from its name (`P/J #N`).
fn build_number(name: &str) -> Option<i64> {
    name.rsplit_once(" #")?.1.parse().ok()
}

/// The versions a job build used and produced, one a line, on stderr with
/// hangar's other lines.
fn print_versions(build: &hangar_api::builds::Build) {
    for i in &build.inputs {
        eprintln!("hangar: input {} ({}): {}", i.name, i.resource, i.version);
    }
    for o in &build.outputs {
        eprintln!("hangar: output {}: {}", o.resource, o.version);
    }
}

/// Prints a build's log as it grows (its output on stdout, what hangar did
/// on stderr) until the build ends; exits with the build's exit code.
pub(crate) async fn follow(client: &Client, id: i64) -> anyhow::Result<ExitCode> {
    let mut after = 0;
    // Until the build says anything (it waits for a worker, its inputs,
    // its turn), a spinner on a terminal shows it is waited for.
    let mut waiting = Some(crate::cmd::progress::Spinner::start(&format!(
        "waiting for build {id} to start"
    )));
    loop {
        let page = client.build_events(id, after, 25_000).await?;
        if !page.events.is_empty() || page.status.is_final() {
            // Cleared before anything is printed.
            drop(waiting.take());
        }
        for e in &page.events {
            after = e.id;
            match e.kind {
                BuildEventKind::Log => crate::format::emit(&e.payload)?,
                BuildEventKind::Infra => eprintln!("hangar: {}", e.payload),
                BuildEventKind::Status if e.payload == "started" => {}
                _ => eprintln!("hangar: {}", e.payload),
            }
        }
        let done = page.status.is_final();
        if done && page.events.is_empty() {
            return Ok(exit_code(page.status, page.exit_code));
        }
    }
}

/// The task's own exit code when it has one; otherwise 1 for a failed
/// build and 2 for one that errored or was aborted.
pub(crate) fn exit_code(status: BuildStatus, code: Option<i64>) -> ExitCode {
    match (status, code) {
        (BuildStatus::Succeeded, _) => ExitCode::SUCCESS,
        (BuildStatus::Failed, Some(c)) if (1..=255).contains(&c) => ExitCode::from(c as u8),
        (BuildStatus::Failed, _) => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}
