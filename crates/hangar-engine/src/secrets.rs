//! A stored plan's `((vars))` resolved through the credential manager.
//!
//! The stored plan keeps the `((var))` references: the values are read
//! again each time a node runs (or resumes) the build, and live only in
//! that node's memory, so they are never in the database nor in any answer
//! of the API. What they are is also handed to the build's redactor.

use hangar_core::vars::credentials::Resolved;
use hangar_core::vars::interpolate_keeping_local;
use hangar_core::vars::redact::Secrets;
use serde_json::Value;

/// The team a build of the plan API belongs to when it names none (and
/// builds made before builds had teams).
pub const BUILD_TEAM: &str = "main";

/// The longest the vars of one plan may take to resolve (each request has
/// its own shorter timeout; a plan of many vars is bounded as a whole).
pub const RESOLVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// `plan` with every var read from `credentials`, and the values to
/// redact. A job build's vars (`pipeline`: its pipeline reference) are
/// looked up under the pipeline first, then its team, as Concourse's; a
/// build of the plan API has no pipeline and reads its own team's paths
/// only. An error names every var that could not be resolved, or why the
/// manager could not answer.
pub async fn resolve_plan(
    credentials: &hangar_creds::Credentials,
    plan: &Value,
    team: &str,
    pipeline: Option<&str>,
) -> Result<(Value, Secrets), PlanVarsError> {
    // An instance's secrets are its group's, as in Concourse: the paths
    // hold the pipeline's name, not its instance vars.
    let pipeline = pipeline.map(|p| p.split_once('/').map_or(p, |(name, _)| name));
    if hangar_core::vars::find_unresolved_except_local(plan).is_empty() {
        return Ok((plan.clone(), Secrets::default()));
    }
    let resolved: Resolved =
        tokio::time::timeout(RESOLVE_WITHIN, credentials.resolve(plan, team, pipeline))
            .await
            .map_err(|_| {
                PlanVarsError::Unavailable(format!(
                    "credentials: the credential manager did not answer for all the plan's \
                     vars within {}s",
                    RESOLVE_WITHIN.as_secs()
                ))
            })?
            .map_err(|e| match e {
                hangar_creds::CredsError::Invalid(m) => {
                    PlanVarsError::Refused(format!("credentials: {m}"))
                }
                hangar_creds::CredsError::Backend(m) => {
                    PlanVarsError::Unavailable(format!("credentials: {m}"))
                }
            })?;
    // Local vars (`((.:x))`) exist once the build's load_var steps ran:
    // they stay for the engine to fill in step by step.
    let out = interpolate_keeping_local(plan, &resolved)
        .map_err(|e| PlanVarsError::Refused(e.to_string()))?;
    Ok((out, Secrets::new(resolved.secret_values())))
}

/// Why a plan's vars could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanVarsError {
    /// The plan's fault: a var undefined, a field missing, a name that
    /// cannot name a credential.
    #[error("{0}")]
    Refused(String),
    /// The credential manager's: it refused web or did not answer.
    #[error("{0}")]
    Unavailable(String),
}
