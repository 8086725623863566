use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hangar_worker::WorkerConfig;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cmd::web::{database_url, open_web, Lifecycle};
use crate::format::emit;
use crate::secrets;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Where the database, the secrets and the workers' work dirs live.
    #[arg(long, env = "HANGAR_DATA_DIR", default_value = "hangar-data")]
    pub data_dir: PathBuf,
    /// Address to serve the API on.
    #[arg(long, env = "HANGAR_BIND", default_value = "127.0.0.1:8080")]
    pub bind: String,
    /// How many workers to start.
    #[arg(long, env = "HANGAR_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    #[command(flatten)]
    pub lifecycle: Lifecycle,
    #[command(flatten)]
    pub health: crate::cmd::worker::HealthArgs,
    #[command(flatten)]
    pub tasks: crate::cmd::worker::TaskArgs,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::init_logging();
    let data_dir = std::path::absolute(&args.data_dir)
        .with_context(|| format!("resolve data dir {}", args.data_dir.display()))?;
    // The data dir and the workers dir are root's alone (0700): a task
    // runs as its own user in a work dir below them and cannot climb out
    // to the secrets or the database (see docs/security.md).
    secrets::private_dir(&data_dir)?;
    secrets::private_dir(&data_dir.join("workers"))?;
    let token_file = data_dir.join("admin-token");
    let admin_token = secrets::load_or_create(&token_file)?;
    let worker_key = secrets::load_or_create(&data_dir.join("worker-key"))?;
    let db = database_url(None, &data_dir)?;
    let web = open_web(
        &db,
        args.lifecycle.web_config(admin_token, worker_key.clone())?,
        args.lifecycle.accept_new_database,
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(&args.bind)
        .await
        .with_context(|| {
            format!(
                "listen on {} (pass --bind to use another address)",
                args.bind
            )
        })?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");

    let shutdown = CancellationToken::new();
    crate::signals::stop_on_terminate(shutdown.clone())?;
    let serving = tokio::spawn(super::web::run_node(
        listener,
        web.clone(),
        shutdown.clone(),
    ));
    let mut workers = tokio::task::JoinSet::new();
    let mut names = Vec::new();
    // Senders are kept so the agents' command channels stay open.
    let mut senders = Vec::new();
    for i in 1..=args.workers {
        let name = format!("quickstart-worker-{i}");
        let work_dir = data_dir.join("workers").join(&name);
        let resource_types = args.tasks.resource_types_dir(&work_dir)?;
        let config = WorkerConfig {
            name: name.clone(),
            work_dir,
            web_url: url.clone(),
            worker_key: worker_key.clone(),
            worker_key_file: None,
            http_limits: hangar_http::Limits::worker(),
            platform: std::env::consts::OS.to_string(),
            tags: vec![],
            team: None,
            ephemeral: false,
            heartbeat_interval: Duration::from_secs(5),
            resource_types_dir: Some(resource_types),
            volume_driver: None,
            // Each worker's volume API on a free loopback port.
            api_bind: "127.0.0.1:0".into(),
            api_url: None,
            report_interval: Duration::from_secs(10),
            health: args.health.config(Duration::from_secs(5))?,
            task_user: hangar_worker::containers::DEFAULT_TASK_IDS,
            allow_import_dirs: vec![],
            allow_resource_dirs: args.tasks.allow_resource_dirs.clone(),
            allow_privileged: args.tasks.allow_privileged,
            task_network: args.tasks.task_network(),
            process_sandbox: !args.tasks.no_process_sandbox,
            pids_limit: args.tasks.pids_limit(),
        };
        let (tx, rx) = mpsc::channel(4);
        senders.push(tx);
        let shutdown = shutdown.clone();
        let name_for_log = name.clone();
        workers.spawn(async move {
            let exit = hangar_worker::run(config, rx, shutdown).await;
            (name_for_log, exit)
        });
        names.push(name);
    }

    // A server goes on when nobody reads its banner (`quickstart | head`):
    // a closed stdout is not a reason to stop.
    let _ = emit(&format!(
        "hangar is running\n  api:      {url}\n  database: {db}\n  workers:  {} (work dirs in {})\n\n\
         Point the CLI at it (in another shell):\n  export HANGAR_URL={url}\n  \
         export HANGAR_TOKEN=$(cat {})\n  hangar workers\n\nStop with Ctrl-C.\n",
        names.join(", "),
        data_dir.join("workers").display(),
        token_file.display()
    ));

    // A worker that lands or retires ends its own task and leaves the others
    // running; web ending (an error, or Ctrl-C) stops everything.
    tokio::pin!(serving);
    let served = loop {
        tokio::select! {
            served = &mut serving => break served,
            Some(joined) = workers.join_next() => match joined {
                Ok((name, Ok(exit))) => {
                    let _ = emit(&format!("worker {name} ended: {exit:?}\n"));
                }
                Ok((name, Err(e))) => eprintln!("worker {name} failed: {e:#}"),
                Err(e) => eprintln!("a worker task failed: {e}"),
            },
        }
    };
    shutdown.cancel();
    while workers.join_next().await.is_some() {}
    drop(senders);
    web.store().close().await;
    served??;
    Ok(ExitCode::SUCCESS)
}
