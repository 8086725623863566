//! fly's pipeline verbs other than set-pipeline: list, get, destroy, pause,
//! unpause, rename; jobs and their pause; resources and their versions.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::bail;
use hangar_api::pipelines::{VersionsQuery, DEFAULT_VERSIONS_PAGE, MAX_VERSIONS_PAGE};

use crate::format::{ago, now_ms, table};
use crate::target::Target;

/// Where the pipeline lives: web, and the team.
#[derive(clap::Args, Debug)]
pub(crate) struct TeamArgs {
    #[command(flatten)]
    pub target: Target,
    /// The team owning the pipelines (default: the target's, else main).
    #[arg(long = "team", env = "HANGAR_TEAM")]
    pub team_flag: Option<String>,
}

impl TeamArgs {
    /// The team: `--team`, else the target's, else main.
    pub(crate) fn name(&self) -> anyhow::Result<String> {
        self.target.team(self.team_flag.as_deref())
    }
}

/// Refuses a name web would refuse, before anything is sent (a `..` or a
/// `/` would change the URL itself).
pub(crate) fn check_name(what: &str, name: &str) -> anyhow::Result<()> {
    hangar_core::pipeline::check_name(what, name).map_err(anyhow::Error::msg)
}

/// Asks `question [yN]` on the terminal; off a terminal there is no one to
/// ask, and the command says to pass --non-interactive.
pub(crate) async fn confirm(question: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("standard input is not a terminal to ask \"{question}\" on: pass --non-interactive to go ahead without asking");
    }
    print!("{question} [yN]: ");
    use std::io::Write;
    std::io::stdout().flush()?;
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `P/J` (or `P/R`) as fly's `-j` and `-r` take it; the pipeline may be an
/// instance (`P/KEY:VALUE,…/J`). The pipeline comes back as hangar prints
/// its reference.
pub(crate) fn split_flag(what: &str, value: &str) -> anyhow::Result<(String, String)> {
    let (pipeline, name) = hangar_core::instance_vars::split_qualified(value)
        .map_err(|e| anyhow::anyhow!("{what} {e}"))?;
    check_name(what, name)?;
    Ok((pipeline.to_string(), name.to_string()))
}

/// Refuses a pipeline reference (`NAME`, or `NAME/KEY:VALUE,…` for an
/// instance) web would refuse, before anything is sent.
pub(crate) fn check_pipeline(reference: &str) -> anyhow::Result<()> {
    hangar_core::instance_vars::PipelineRef::parse_checked(reference)
        .map(drop)
        .map_err(anyhow::Error::msg)
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

#[derive(clap::Args, Debug)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// List archived pipelines too (fly's --include-archived).
    #[arg(long)]
    pub include_archived: bool,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let team = &args.team.name()?;
    let mut pipelines = args.team.target.client()?.pipelines(team).await?;
    pipelines.retain(|p| args.include_archived || !p.archived);
    if args.json {
        crate::format::emit_json(&pipelines)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = pipelines
        .iter()
        .map(|p| {
            vec![
                p.id.to_string(),
                p.reference(),
                p.team.clone(),
                yes_no(p.paused),
                p.config_version.to_string(),
                ago(now, p.updated_at),
                yes_no(p.archived),
            ]
        })
        .collect();
    crate::format::emit(&table(
        &[
            "id", "name", "team", "paused", "version", "updated", "archived",
        ],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct PipelineArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: NAME, or NAME/KEY:VALUE,… for an instance.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn get(args: PipelineArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let team = &args.team.name()?;
    let Some(config) = args
        .team
        .target
        .client()?
        .pipeline_config(team, &args.pipeline)
        .await?
    else {
        bail!("pipeline {team}/{} not found", args.pipeline);
    };
    if args.json {
        crate::format::emit_json(&config.config)?;
    } else {
        // Keys in Concourse's order (name, type, source; get, passed, …),
        // as fly prints them, not sorted.
        let yaml = match hangar_core::pipeline::parse_pipeline_value(&config.config) {
            Ok(parsed) => hangar_core::pipeline::to_yaml(&parsed.config),
            Err(_) => hangar_core::yaml_write::to_yaml(&config.config),
        };
        crate::format::emit(&yaml)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct NameArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: NAME, or NAME/KEY:VALUE,… for an instance.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DestroyArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: NAME, or NAME/KEY:VALUE,… for an instance.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
    /// Destroy without asking. Off a terminal it is required.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

pub(crate) async fn destroy(args: DestroyArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let team = &args.team.name()?;
    let client = args.team.target.client()?;
    println!(
        "!!! this will remove all data for pipeline `{}`",
        args.pipeline
    );
    if !args.non_interactive && !confirm("are you sure?").await? {
        println!("bailing out");
        return Ok(ExitCode::FAILURE);
    }
    client.destroy_pipeline(team, &args.pipeline).await?;
    println!("`{}` deleted", args.pipeline);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct ClearTaskCacheArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// The task step whose caches go.
    #[arg(short = 's', long = "step")]
    pub step: String,
    /// Only the cache at this path (as the task's `caches:` names it).
    #[arg(short = 'c', long = "cache-path")]
    pub cache_path: Option<String>,
    /// Clear without asking. Off a terminal it is required.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

/// `clear-task-cache -j P/J -s STEP [-c PATH]`: the step's next run starts
/// with empty caches.
pub(crate) async fn clear_task_cache(args: ClearTaskCacheArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, job) = split_flag("job", &args.job.job)?;
    check_name("step", &args.step)?;
    let what = match &args.cache_path {
        Some(p) => format!("the cache {p} of step {} of {pipeline}/{job}", args.step),
        None => format!("every cache of step {} of {pipeline}/{job}", args.step),
    };
    if !args.non_interactive && !confirm(&format!("remove {what}?")).await? {
        println!("bailing out");
        return Ok(ExitCode::FAILURE);
    }
    let removed = args
        .job
        .team
        .target
        .client()?
        .clear_task_cache(
            &args.job.team.name()?,
            &pipeline,
            &job,
            &args.step,
            args.cache_path.as_deref(),
        )
        .await?;
    println!("{} caches removed", removed.caches_removed);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct ClearResourceCacheArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Only the caches of versions with this field, KEY:VALUE (repeat for
    /// more).
    #[arg(short = 'v', long = "version")]
    pub version: Vec<String>,
    /// Clear without asking. Off a terminal it is required.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

/// `clear-resource-cache -r P/R [-v K:V]…`: the resource's next get runs
/// `in` again.
pub(crate) async fn clear_resource_cache(args: ClearResourceCacheArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, resource) = split_flag("resource", &args.resource)?;
    let version = if args.version.is_empty() {
        None
    } else {
        Some(hangar_api::pins::parse_version_flags(&args.version).map_err(anyhow::Error::msg)?)
    };
    let what = match &version {
        Some(_) => format!(
            "the caches of {pipeline}/{resource} at {}",
            args.version.join(", ")
        ),
        None => format!("every cache of {pipeline}/{resource}"),
    };
    if !args.non_interactive && !confirm(&format!("remove {what}?")).await? {
        println!("bailing out");
        return Ok(ExitCode::FAILURE);
    }
    let removed = args
        .team
        .target
        .client()?
        .clear_resource_cache(&args.team.name()?, &pipeline, &resource, version.as_ref())
        .await?;
    println!("{} caches removed", removed.caches_removed);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct OrderArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// A pipeline's name, in the order wanted (repeat); the others follow
    /// as they were.
    #[arg(
        short = 'p',
        long = "pipeline",
        required_unless_present = "alphabetical"
    )]
    pub pipelines: Vec<String>,
    /// Order every pipeline by name.
    #[arg(short = 'a', long, conflicts_with = "pipelines")]
    pub alphabetical: bool,
}

pub(crate) async fn order(args: OrderArgs) -> anyhow::Result<ExitCode> {
    let team = &args.team.name()?;
    let client = args.team.target.client()?;
    let names = if args.alphabetical {
        let mut names: Vec<String> = client
            .pipelines(team)
            .await?
            .into_iter()
            .map(|p| p.name)
            .collect();
        names.sort();
        names.dedup();
        names
    } else {
        for p in &args.pipelines {
            check_name("pipeline", p)?;
        }
        args.pipelines.clone()
    };
    client.order_pipelines(team, &names).await?;
    println!("ordered pipelines");
    for name in &names {
        println!("  - {name}");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct ArchiveArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: NAME, or NAME/KEY:VALUE,… for an instance.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
    /// Archive without asking. Off a terminal it is required.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

pub(crate) async fn archive(args: ArchiveArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let team = &args.team.name()?;
    let client = args.team.target.client()?;
    if !args.non_interactive && !confirm(&format!("archive pipeline {}?", args.pipeline)).await? {
        println!("bailing out");
        return Ok(ExitCode::FAILURE);
    }
    client.archive_pipeline(team, &args.pipeline).await?;
    println!(
        "archived '{}': it neither checks nor builds, and keeps its builds; set-pipeline brings it back",
        args.pipeline
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn expose(args: NameArgs) -> anyhow::Result<ExitCode> {
    set_exposed(args, true).await
}

pub(crate) async fn hide(args: NameArgs) -> anyhow::Result<ExitCode> {
    set_exposed(args, false).await
}

async fn set_exposed(args: NameArgs, exposed: bool) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let team = &args.team.name()?;
    args.team
        .target
        .client()?
        .expose_pipeline(team, &args.pipeline, exposed)
        .await?;
    println!(
        "{} '{}'",
        if exposed { "exposed" } else { "hid" },
        args.pipeline
    );
    Ok(ExitCode::SUCCESS)
}

async fn set_paused(args: NameArgs, paused: bool) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let team = &args.team.name()?;
    args.team
        .target
        .client()?
        .pause_pipeline(team, &args.pipeline, paused)
        .await?;
    println!(
        "{} '{}'",
        if paused { "paused" } else { "unpaused" },
        args.pipeline
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn pause(args: NameArgs) -> anyhow::Result<ExitCode> {
    set_paused(args, true).await
}

pub(crate) async fn unpause(args: NameArgs) -> anyhow::Result<ExitCode> {
    set_paused(args, false).await
}

#[derive(clap::Args, Debug)]
pub(crate) struct RenameArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: its current NAME, or NAME/KEY:VALUE,… for an
    /// instance (which keeps its vars).
    #[arg(short = 'o', long = "old-name")]
    pub old: String,
    /// The new name.
    #[arg(short = 'n', long = "new-name")]
    pub new: String,
}

pub(crate) async fn rename(args: RenameArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.old)?;
    check_name("new pipeline name", &args.new)?;
    args.team
        .target
        .client()?
        .rename_pipeline(&args.team.name()?, &args.old, &args.new)
        .await?;
    println!("pipeline successfully renamed to '{}'", args.new);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn jobs(args: PipelineArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let jobs = args
        .team
        .target
        .client()?
        .jobs(&args.team.name()?, &args.pipeline)
        .await?;
    if args.json {
        crate::format::emit_json(&jobs)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let status = |b: &Option<hangar_api::pipelines::JobBuildSummary>| {
                b.as_ref()
                    .map_or_else(|| "n/a".to_string(), |b| b.status.to_string())
            };
            vec![
                j.name.clone(),
                yes_no(j.paused),
                status(&j.finished_build),
                status(&j.next_build),
                j.waiting
                    .as_ref()
                    .map(|w| w.message.clone())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    // fly's columns, and why the scheduler waits.
    crate::format::emit(&table(
        &["name", "paused", "status", "next", "waiting"],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct JobArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The job: PIPELINE/JOB (an instance: NAME/KEY:VALUE,…/JOB).
    #[arg(short = 'j', long = "job")]
    pub job: String,
}

async fn set_job_paused(args: JobArgs, paused: bool) -> anyhow::Result<ExitCode> {
    let (pipeline, job) = split_flag("job", &args.job)?;
    args.team
        .target
        .client()?
        .pause_job(&args.team.name()?, &pipeline, &job, paused)
        .await?;
    println!("{} '{job}'", if paused { "paused" } else { "unpaused" });
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn pause_job(args: JobArgs) -> anyhow::Result<ExitCode> {
    set_job_paused(args, true).await
}

pub(crate) async fn unpause_job(args: JobArgs) -> anyhow::Result<ExitCode> {
    set_job_paused(args, false).await
}

pub(crate) async fn resources(args: PipelineArgs) -> anyhow::Result<ExitCode> {
    check_pipeline(&args.pipeline)?;
    let resources = args
        .team
        .target
        .client()?
        .resources(&args.team.name()?, &args.pipeline)
        .await?;
    if args.json {
        crate::format::emit_json(&resources)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = resources
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.resource_type.clone(),
                match (&r.pinned_version, r.pinned_by_api) {
                    (Some(v), false) => format!("{v} (config)"),
                    (Some(v), true) => format!("{v} (pin-resource)"),
                    (None, _) => "n/a".into(),
                },
                r.last_checked_at
                    .map(|at| ago(now, at))
                    .unwrap_or_else(|| "never".into()),
                // The error's first line (`--json` has it whole), or why a
                // check waits.
                match (&r.check_error, &r.check_waiting) {
                    (Some(e), _) => e.lines().next().unwrap_or_default().to_string(),
                    (None, Some(why)) => format!("(waiting: {why})"),
                    (None, None) => "n/a".into(),
                },
            ]
        })
        .collect();
    crate::format::emit(&table(
        &["name", "type", "pinned", "last checked", "check error"],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub(crate) struct VersionsArgs {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The resource: PIPELINE/RESOURCE (an instance: NAME/KEY:VALUE,…/RESOURCE).
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// How many versions, newest first.
    #[arg(long, default_value_t = DEFAULT_VERSIONS_PAGE,
          value_parser = clap::value_parser!(i64).range(1..=MAX_VERSIONS_PAGE))]
    pub count: i64,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn versions(args: VersionsArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, resource) = split_flag("resource", &args.resource)?;
    let client = args.team.target.client()?;
    let pin = client
        .resource_pin(&args.team.name()?, &pipeline, &resource)
        .await?;
    let versions = client
        .resource_versions(
            &args.team.name()?,
            &pipeline,
            &resource,
            VersionsQuery {
                limit: Some(args.count),
                before: None,
                after: None,
            },
        )
        .await?;
    if args.json {
        crate::format::emit_json(&versions)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            vec![
                v.id.to_string(),
                v.version.to_string(),
                if v.enabled { "yes" } else { "no" }.to_string(),
                pinned_mark(pin.as_ref(), &v.version),
            ]
        })
        .collect();
    crate::format::emit(&table(&["id", "version", "enabled", "pinned"], &rows))?;
    Ok(ExitCode::SUCCESS)
}

/// "yes" on a version having every field of the pin ("yes (config)" for
/// the config's `version:`); an API pin is a whole stored version.
fn pinned_mark(pin: Option<&hangar_api::pins::ResourcePin>, version: &serde_json::Value) -> String {
    let Some(pin) = pin else { return String::new() };
    let (Some(fields), Some(version)) = (pin.version.as_object(), version.as_object()) else {
        return String::new();
    };
    if !fields.iter().all(|(k, v)| version.get(k) == Some(v)) {
        return String::new();
    }
    if pin.from_config {
        "yes (config)"
    } else {
        "yes"
    }
    .to_string()
}

#[derive(clap::Args, Debug)]
pub(crate) struct TriggerArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Follow the build's log until it ends, and exit as it did.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct RerunArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// The build of the job to run again: its number (`P/J #N`).
    #[arg(short = 'b', long = "build")]
    pub build: i64,
    /// Follow the new build's log until it ends, and exit as it did.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// `rerun-build -j P/J -b N [-w]`: build N's input versions again, in a
/// new build of the job.
pub(crate) async fn rerun_build(args: RerunArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, job) = split_flag("job", &args.job.job)?;
    let client = args.job.team.target.client()?;
    let build = client
        .rerun_job_build(&args.job.team.name()?, &pipeline, &job, args.build)
        .await?;
    println!(
        "started {} (build {}), a rerun of #{}",
        build.name, build.id, args.build
    );
    if args.watch {
        return crate::cmd::watch::follow(&client, build.id).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// `trigger-job -j P/J [-w]`: a build of the job from the pipeline's
/// current config.
pub(crate) async fn trigger_job(args: TriggerArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, job) = split_flag("job", &args.job.job)?;
    let client = args.job.team.target.client()?;
    let build = client
        .trigger_job(&args.job.team.name()?, &pipeline, &job)
        .await?;
    println!("started {} (build {})", build.name, build.id);
    if args.watch {
        return crate::cmd::watch::follow(&client, build.id).await;
    }
    Ok(ExitCode::SUCCESS)
}
