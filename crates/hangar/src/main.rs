//! `hangar`: one binary for the servers (web, worker, quickstart) and for
//! users (workers, events, land-worker, …). One file per subcommand.

// The subcommands are the CLI: their output (tables, JSON, build logs,
// quickstart's instructions, errors before logging starts) is printed.
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod cmd;
mod duration;
mod format;
mod rc;
mod secrets;
mod signals;
mod target;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "hangar",
    version,
    about = "A CI build runtime that keeps its picture of the fleet true"
)]
struct Cli {
    /// The saved target to talk to (`hangar -t NAME login -c URL` saves one).
    #[arg(short = 't', long = "target", global = true, env = "HANGAR_TARGET")]
    target: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The words after a verb this build leaves out, taken whatever they are
/// so the answer says why the verb is missing.
#[cfg(not(feature = "bench"))]
#[derive(clap::Args)]
struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    _args: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Log in to web and save the target (-t NAME): a local user's password
    /// (-u), or through the browser.
    #[command(visible_alias = "l")]
    Login(cmd::login::LoginArgs),
    /// End the target's session at web and forget its token.
    #[command(visible_alias = "o")]
    Logout(cmd::login::LogoutArgs),
    /// List the saved targets.
    #[command(visible_alias = "ts")]
    Targets(cmd::login::TargetsArgs),
    /// Who the target's token logs in as, and their roles.
    Userinfo(cmd::login::UserinfoArgs),
    /// Whether the target's login is still good (exit 0 when it is).
    Status(cmd::login::StatusArgs),
    /// Set a team's auth: its owners, or Concourse's roles file.
    #[command(visible_alias = "st")]
    SetTeam(cmd::teams::SetTeamArgs),
    /// List the teams the caller has a role on.
    #[command(visible_alias = "t")]
    Teams(cmd::teams::TeamsArgs),
    /// Rename a team.
    #[command(visible_alias = "rt")]
    RenameTeam(cmd::teams::RenameTeamArgs),
    /// Destroy a team with its pipelines and builds (admins only).
    #[command(visible_alias = "dt")]
    DestroyTeam(cmd::teams::DestroyTeamArgs),
    /// Start web and workers on SQLite in one process: no other setup.
    Quickstart(cmd::quickstart::Args),
    /// Run a web node: the API, the database and the lifecycle loop.
    Web(Box<cmd::web::Args>),
    /// Run a worker agent.
    Worker(cmd::worker::Args),
    /// List the workers.
    #[command(visible_alias = "ws")]
    Workers(cmd::workers::Args),
    /// List the volumes web knows, on every worker.
    #[command(visible_alias = "vs")]
    Volumes(cmd::volumes::Args),
    /// List the builds, newest first.
    #[command(visible_alias = "bs")]
    Builds(cmd::builds::Args),
    /// Abort a build; its on_abort and ensure hooks still run.
    #[command(visible_alias = "ab")]
    AbortBuild(cmd::builds::AbortArgs),
    /// Follow a build's log until it ends; exit with its exit code.
    #[command(visible_alias = "w")]
    Watch(cmd::watch::Args),
    /// Run one task with local directories as its inputs and outputs.
    #[command(visible_alias = "e")]
    Execute(cmd::execute::Args),
    /// List worker lifecycle events, newest first.
    Events(cmd::events::Args),
    /// Land a worker: it takes no new work, finishes what runs, then stops.
    #[command(visible_alias = "lw")]
    LandWorker(cmd::worker_commands::NameArgs),
    /// Retire a worker: like land, then it leaves the fleet for good.
    RetireWorker(cmd::worker_commands::NameArgs),
    /// Remove a worker that is not running (stalled, landed, …) from web.
    #[command(visible_alias = "pw")]
    PruneWorker(cmd::worker_commands::PruneArgs),
    /// Set a pipeline's config: shows the diff and asks first.
    #[command(visible_alias = "sp")]
    SetPipeline(cmd::set_pipeline::Args),
    /// Check a pipeline file without setting it: its YAML, vars and rules
    /// (-c FILE [--strict] [-o]).
    #[command(visible_alias = "vp")]
    ValidatePipeline(cmd::validate_pipeline::Args),
    /// Print a pipeline file with its keys in Concourse's order (-w writes
    /// it back).
    #[command(visible_alias = "fp")]
    FormatPipeline(cmd::validate_pipeline::FormatArgs),
    /// List a team's pipelines.
    #[command(visible_alias = "ps")]
    Pipelines(cmd::pipelines::ListArgs),
    /// Print a pipeline's config (YAML, or --json).
    #[command(visible_alias = "gp")]
    GetPipeline(cmd::pipelines::PipelineArgs),
    /// Remove a pipeline and everything under it (asks first).
    #[command(visible_alias = "dp")]
    DestroyPipeline(cmd::pipelines::DestroyArgs),
    /// Pause a pipeline.
    #[command(visible_alias = "pp")]
    PausePipeline(cmd::pipelines::NameArgs),
    /// Unpause a pipeline.
    #[command(visible_alias = "up")]
    UnpausePipeline(cmd::pipelines::NameArgs),
    /// Archive a pipeline: paused, its config emptied, its builds kept;
    /// set-pipeline brings it back.
    #[command(visible_alias = "ap")]
    ArchivePipeline(cmd::pipelines::ArchiveArgs),
    /// Order a team's pipelines: -p NAME… first, in that order, or
    /// --alphabetical.
    #[command(visible_alias = "op")]
    OrderPipelines(cmd::pipelines::OrderArgs),
    /// Remove the caches a resource's gets made: -r PIPELINE/RESOURCE
    /// [-v KEY:VALUE]; its next get fetches again.
    #[command(visible_alias = "crc")]
    ClearResourceCache(cmd::pipelines::ClearResourceCacheArgs),
    /// Run a command, or a shell on a terminal, in a step's running
    /// container (-j PIPELINE/JOB, -b BUILD, -s STEP, --handle H).
    #[command(visible_aliases = ["hijack", "i"])]
    Intercept(cmd::intercept::InterceptArgs),
    /// List the team's containers.
    #[command(visible_alias = "cs")]
    Containers(cmd::intercept::ContainersArgs),
    /// Remove a job's task step's caches: -j PIPELINE/JOB -s STEP [-c PATH].
    #[command(visible_alias = "ctc")]
    ClearTaskCache(cmd::pipelines::ClearTaskCacheArgs),
    /// Make a pipeline readable by anyone, logged in or not (its builds'
    /// logs and its config too).
    #[command(visible_alias = "ep")]
    ExposePipeline(cmd::pipelines::NameArgs),
    /// Hide an exposed pipeline again: its team's alone.
    #[command(visible_alias = "hp")]
    HidePipeline(cmd::pipelines::NameArgs),
    /// Rename a pipeline; its history stays.
    #[command(visible_alias = "rp")]
    RenamePipeline(cmd::pipelines::RenameArgs),
    /// List a pipeline's jobs.
    #[command(visible_alias = "js")]
    Jobs(cmd::pipelines::PipelineArgs),
    /// Start a build of a job from the pipeline's current config:
    /// -j PIPELINE/JOB; -w follows it and exits as it ended.
    #[command(visible_alias = "tj")]
    TriggerJob(cmd::pipelines::TriggerArgs),
    /// Run a job's build again with the versions it took: -j PIPELINE/JOB
    /// -b NUMBER; -w follows it.
    #[command(visible_alias = "rb")]
    RerunBuild(cmd::pipelines::RerunArgs),
    /// Pause a job: -j PIPELINE/JOB.
    #[command(visible_alias = "pj")]
    PauseJob(cmd::pipelines::JobArgs),
    /// Unpause a job: -j PIPELINE/JOB.
    #[command(visible_alias = "uj")]
    UnpauseJob(cmd::pipelines::JobArgs),
    /// List a pipeline's resources.
    #[command(visible_alias = "rs")]
    Resources(cmd::pipelines::PipelineArgs),
    /// List a resource's versions, newest first: -r PIPELINE/RESOURCE.
    #[command(visible_alias = "rvs")]
    ResourceVersions(cmd::pipelines::VersionsArgs),
    /// Check a resource now and wait for the outcome: -r PIPELINE/RESOURCE
    /// [-f KEY:VALUE ...].
    #[command(visible_alias = "cr")]
    CheckResource(cmd::checks::CheckResourceArgs),
    /// Check a resource type now and wait for the outcome: -r PIPELINE/TYPE.
    #[command(visible_alias = "crt")]
    CheckResourceType(cmd::checks::CheckResourceTypeArgs),
    /// Pin a resource to a version: -r PIPELINE/RESOURCE -v KEY:VALUE [-c COMMENT].
    #[command(visible_alias = "pr")]
    PinResource(cmd::pins::PinArgs),
    /// Remove a resource's pin: -r PIPELINE/RESOURCE.
    #[command(visible_alias = "ur")]
    UnpinResource(cmd::pins::UnpinArgs),
    /// Enable a version of a resource: -r PIPELINE/RESOURCE -v KEY:VALUE.
    #[command(visible_alias = "erv")]
    EnableResourceVersion(cmd::pins::VersionArgs),
    /// Disable a version of a resource: -r PIPELINE/RESOURCE -v KEY:VALUE.
    #[command(visible_alias = "drv")]
    DisableResourceVersion(cmd::pins::VersionArgs),
    /// Run a benchmark (docs/benchmarks.md): heartbeats, execute,
    /// agent-memory, image, scheduling, checks, webhook, death, spread,
    /// dashboard, artifacts.
    #[cfg(feature = "bench")]
    Bench(cmd::bench::Args),
    /// Run a seeded chaos run against real web and worker processes.
    #[cfg(feature = "bench")]
    Chaos(cmd::chaos::Args),
    /// Benchmarks (left out of this build).
    #[cfg(not(feature = "bench"))]
    #[command(hide = true)]
    Bench(NotBuilt),
    /// The chaos run (left out of this build).
    #[cfg(not(feature = "bench"))]
    #[command(hide = true)]
    Chaos(NotBuilt),
    /// Run a built-in resource type's action (the scripts a worker installs
    /// call this).
    #[command(hide = true)]
    ResourceType(cmd::resource_type::Args),
    /// Run a program as an unprivileged user (a root worker's process tasks).
    #[command(hide = true)]
    ExecAs(cmd::exec_as::Args),
}

// A command's error is its last word to the user, on stderr.
#[allow(clippy::print_stderr)]
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(name) = cli.target {
        if let Err(e) = target::select(name) {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    }
    // A resource type's action is synchronous and may start an async
    // runtime of its own (registry-image), which cannot be done on a thread
    // that drives one: it runs before this process starts any.
    let command = match cli.command {
        Command::ResourceType(args) => return exit_code(cmd::resource_type::run(args)),
        command => command,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Login(args) => cmd::login::login(args).await,
            Command::Logout(args) => cmd::login::logout(args).await,
            Command::Targets(args) => cmd::login::targets(args).await,
            Command::Userinfo(args) => cmd::login::userinfo(args).await,
            Command::Status(args) => cmd::login::status(args).await,
            Command::SetTeam(args) => cmd::teams::set_team(args).await,
            Command::Teams(args) => cmd::teams::teams(args).await,
            Command::RenameTeam(args) => cmd::teams::rename_team(args).await,
            Command::DestroyTeam(args) => cmd::teams::destroy_team(args).await,
            Command::Quickstart(args) => cmd::quickstart::run(args).await,
            Command::Web(args) => cmd::web::run(*args).await,
            Command::Worker(args) => cmd::worker::run(args).await,
            Command::Workers(args) => cmd::workers::run(args).await,
            Command::Volumes(args) => cmd::volumes::run(args).await,
            Command::Builds(args) => cmd::builds::run(args).await,
            Command::Watch(args) => cmd::watch::run(args).await,
            Command::AbortBuild(args) => cmd::builds::abort(args).await,
            Command::Execute(args) => cmd::execute::run(args).await,
            Command::Events(args) => cmd::events::run(args).await,
            Command::LandWorker(args) => cmd::worker_commands::land(args).await,
            Command::RetireWorker(args) => cmd::worker_commands::retire(args).await,
            Command::PruneWorker(args) => cmd::worker_commands::prune(args).await,
            Command::SetPipeline(args) => cmd::set_pipeline::run(args).await,
            Command::Pipelines(args) => cmd::pipelines::list(args).await,
            Command::GetPipeline(args) => cmd::pipelines::get(args).await,
            Command::DestroyPipeline(args) => cmd::pipelines::destroy(args).await,
            Command::PausePipeline(args) => cmd::pipelines::pause(args).await,
            Command::UnpausePipeline(args) => cmd::pipelines::unpause(args).await,
            Command::ExposePipeline(args) => cmd::pipelines::expose(args).await,
            Command::RerunBuild(args) => cmd::pipelines::rerun_build(args).await,
            Command::ArchivePipeline(args) => cmd::pipelines::archive(args).await,
            Command::OrderPipelines(args) => cmd::pipelines::order(args).await,
            Command::ClearResourceCache(args) => cmd::pipelines::clear_resource_cache(args).await,
            Command::Intercept(args) => cmd::intercept::intercept(args).await,
            Command::Containers(args) => cmd::intercept::containers(args).await,
            Command::ClearTaskCache(args) => cmd::pipelines::clear_task_cache(args).await,
            Command::ValidatePipeline(args) => cmd::validate_pipeline::run(args).await,
            Command::FormatPipeline(args) => cmd::validate_pipeline::format(args).await,
            Command::HidePipeline(args) => cmd::pipelines::hide(args).await,
            Command::RenamePipeline(args) => cmd::pipelines::rename(args).await,
            Command::Jobs(args) => cmd::pipelines::jobs(args).await,
            Command::TriggerJob(args) => cmd::pipelines::trigger_job(args).await,
            Command::PauseJob(args) => cmd::pipelines::pause_job(args).await,
            Command::UnpauseJob(args) => cmd::pipelines::unpause_job(args).await,
            Command::Resources(args) => cmd::pipelines::resources(args).await,
            Command::ResourceVersions(args) => cmd::pipelines::versions(args).await,
            Command::CheckResource(args) => cmd::checks::check_resource(args).await,
            Command::CheckResourceType(args) => cmd::checks::check_resource_type(args).await,
            Command::PinResource(args) => cmd::pins::pin(args).await,
            Command::UnpinResource(args) => cmd::pins::unpin(args).await,
            Command::EnableResourceVersion(args) => cmd::pins::set_enabled(args, true).await,
            Command::DisableResourceVersion(args) => cmd::pins::set_enabled(args, false).await,
            #[cfg(feature = "bench")]
            Command::Bench(args) => cmd::bench::run(args).await,
            #[cfg(feature = "bench")]
            Command::Chaos(args) => cmd::chaos::run(args).await,
            #[cfg(not(feature = "bench"))]
            Command::Bench(_) | Command::Chaos(_) => Err(anyhow::anyhow!(
                "this hangar was built without its benchmarks and chaos run (the release image \
                 leaves them out): build it from the source tree with `cargo build -p hangar` \
                 (feature `bench`, on by default)"
            )),
            Command::ResourceType(_) => unreachable!("run before the runtime starts"),
            Command::ExecAs(args) => cmd::exec_as::run(args),
        }
    });
    exit_code(result)
}

/// The process's exit status for a command's result.
#[allow(clippy::print_stderr)]
fn exit_code(result: anyhow::Result<std::process::ExitCode>) -> std::process::ExitCode {
    match result {
        Ok(code) => code,
        // `hangar builds | head`: the reader of our standard output left.
        // End quietly, with the status a shell shows for a command that
        // SIGPIPE ended. Any other broken pipe (web closing an upload) is an
        // error like any other.
        Err(e) if format::is_stdout_closed(&e) => std::process::ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {}", format::error_words(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Sets up logging for the servers: `HANGAR_LOG` (or `RUST_LOG`) filters,
/// default `info`.
pub fn init_logging() {
    let filter = std::env::var("HANGAR_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
