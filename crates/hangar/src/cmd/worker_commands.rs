use std::process::ExitCode;

use crate::format::emit;
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct NameArgs {
    #[command(flatten)]
    pub target: Target,
    /// The worker's name.
    #[arg(short = 'w', long = "worker")]
    pub worker: String,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["worker", "all_stalled"])))]
pub(crate) struct PruneArgs {
    #[command(flatten)]
    pub target: Target,
    /// The worker's name.
    #[arg(short = 'w', long = "worker")]
    pub worker: Option<String>,
    /// Prune every stalled worker.
    #[arg(long)]
    pub all_stalled: bool,
}

pub(crate) async fn land(args: NameArgs) -> anyhow::Result<ExitCode> {
    let done = args.target.client()?.land(&args.worker).await?;
    report(&done.worker, &done.state, done.changed)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn retire(args: NameArgs) -> anyhow::Result<ExitCode> {
    let done = args.target.client()?.retire(&args.worker).await?;
    report(&done.worker, &done.state, done.changed)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn prune(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let client = args.target.client()?;
    match args.worker {
        Some(name) => {
            client.prune(&name).await?;
            emit(&format!("pruned worker {name}\n"))?;
        }
        None => {
            let pruned = client.prune_stalled().await?.pruned;
            if pruned.is_empty() {
                emit("no stalled workers\n")?;
            }
            for name in pruned {
                emit(&format!("pruned worker {name}\n"))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn report(worker: &str, state: &hangar_api::CommandState, changed: bool) -> anyhow::Result<()> {
    if changed {
        emit(&format!("worker {worker} is {state}\n"))
    } else {
        emit(&format!("worker {worker} was already {state}\n"))
    }
}
