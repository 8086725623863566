//! The one owner of the control loops' tasks.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::{
    check_loop, gc_loop, lifecycle_loop, scheduler_loop, scheduler_wakeups, web_nodes_loop, Control,
};

/// Every loop of one node, started together and stopped together.
/// Dropping it aborts them; [`Supervisor::stop`] lets each finish what it
/// is doing (a check gives its claim back, the node its `web_nodes` row).
pub struct Supervisor {
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl Supervisor {
    /// Starts the loops `control`'s config asks for; they run until
    /// `shutdown` is cancelled.
    pub fn start(control: &Control, shutdown: CancellationToken) -> Supervisor {
        let mut tasks = JoinSet::new();
        let config = control.config();
        if let Some(interval) = config.lifecycle_interval {
            tasks.spawn(lifecycle_loop::run(
                control.clone(),
                interval,
                shutdown.clone(),
            ));
        }
        tasks.spawn(web_nodes_loop::run(control.clone(), shutdown.clone()));
        // Wake-ups go to the other nodes whether or not this one schedules.
        tasks.spawn(scheduler_wakeups::tell(control.clone(), shutdown.clone()));
        if config.run_builds {
            tasks.spawn(control.engine().clone().run(shutdown.clone()));
        }
        if let Some(interval) = config.check_interval {
            tasks.spawn(check_loop::run(control.clone(), interval, shutdown.clone()));
        }
        if let Some(interval) = config.scheduler_interval {
            tasks.spawn(scheduler_loop::run(
                control.clone(),
                interval,
                shutdown.clone(),
            ));
            tasks.spawn(scheduler_wakeups::listen(control.clone(), shutdown.clone()));
        }
        if let Some(interval) = config.gc_interval {
            tasks.spawn(gc_loop::run(control.clone(), interval, shutdown.clone()));
        }
        Supervisor { tasks, shutdown }
    }

    /// Stops every loop (cancels `shutdown`, if nothing else has) and
    /// waits for each to finish.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while let Some(ended) = self.tasks.join_next().await {
            if let Err(e) = ended {
                if e.is_panic() {
                    tracing::error!(error = %e, "a control loop panicked");
                }
            }
        }
    }
}
