//! `build_log_retention` applied on each garbage collection pass: for
//! every active job with a policy, the builds
//! `hangar_core::pipeline::log_retention` names lose their events, and the
//! build says when (`logs_reaped_at`), so the API and `hangar watch` tell
//! a reaped log from an empty one. A running build is never reaped.

use hangar_core::pipeline::log_retention::{builds_to_reap, LogRetention};

use crate::Control;

/// Reaps what the jobs' policies say; the number of logs reaped. A job
/// whose builds cannot be read is skipped (and logged), not the pass.
pub(crate) async fn reap(control: &Control) -> Result<u64, hangar_store::StoreError> {
    let mut reaped = 0;
    for (job_id, config) in control.store().active_job_configs().await? {
        let Some(policy) = serde_json::from_str(&config)
            .ok()
            .and_then(|c| LogRetention::of_job_json(&c))
        else {
            continue;
        };
        let builds = match control.store().builds_with_logs(job_id).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "cannot read the job's builds for build_log_retention");
                continue;
            }
        };
        for build in builds_to_reap(&builds, &policy, control.now()) {
            match control.store().reap_build_logs(build, control.now()).await {
                Ok(true) => reaped += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(build, error = %e, "cannot reap the build's log; next pass");
                }
            }
        }
    }
    Ok(reaped)
}
