//! Unix signals mapped onto what the servers do: SIGTERM and SIGINT stop
//! gracefully; on a worker SIGUSR1 lands it and SIGUSR2 retires it.

use hangar_worker::AgentCommand;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
pub(crate) fn stop_on_terminate(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
            _ = shutdown.cancelled() => return,
        }
        shutdown.cancel();
    });
    Ok(())
}

/// Sends land on SIGUSR1 and retire on SIGUSR2 until `shutdown`.
pub(crate) fn worker_commands(
    commands: mpsc::Sender<AgentCommand>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        loop {
            let command = tokio::select! {
                _ = usr1.recv() => AgentCommand::Land,
                _ = usr2.recv() => AgentCommand::Retire,
                _ = shutdown.cancelled() => return,
            };
            tracing::info!(?command, "signal received");
            if commands.send(command).await.is_err() {
                return;
            }
        }
    });
    Ok(())
}
