//! Resource checks: asking for one (`check-resource`,
//! `check-resource-type`, a webhook) and reading a resource's check state.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST …/resources/{r}/check` and `…/resource-types/{t}/check`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// Check from this version (`check-resource -f`), as Concourse's
    /// `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Map<String, Value>>,
    /// Check the resource alone, not its custom type first (`--shallow`).
    #[serde(default)]
    pub shallow: bool,
}

/// A check was asked for: the check that answers it starts at or after
/// `requested_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRequested {
    pub requested_at: i64,
}

/// The check state of a resource or resource type (shared by every
/// resource with its type and source in the team).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckStatus {
    #[serde(default)]
    pub last_check_started_at: Option<i64>,
    #[serde(default)]
    pub last_check_finished_at: Option<i64>,
    /// The last check's failure (its script's exit and stderr, or a
    /// timeout); none once a check succeeds.
    #[serde(default)]
    pub check_error: Option<String>,
    /// A check asked for and not started yet.
    #[serde(default)]
    pub check_requested_at: Option<i64>,
    /// A web node is checking it now.
    #[serde(default)]
    pub checking: bool,
    /// When the next periodic check is due; none for `check_every: never`
    /// or a paused pipeline.
    #[serde(default)]
    pub next_check_at: Option<i64>,
    /// Why the check asked for or due has not run: its last try was given
    /// back without running (`no worker has resource type X`, every worker
    /// that fits under pressure, …). None once a check runs on a worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Since when no worker of the kind the check needs is registered at
    /// all: the check fails at `waiting_since + no_worker_timeout_ms` if
    /// none joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<i64>,
    /// How long web lets a check wait for a worker of its kind
    /// (`--no-worker-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_worker_timeout_ms: Option<i64>,
    /// The longest the check runs once on a worker (`check_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_timeout_ms: Option<i64>,
}

impl CheckStatus {
    /// Whether the check asked for at `requested_at` has ended.
    pub fn answers(&self, requested_at: i64) -> bool {
        !self.checking
            && self.check_requested_at.is_none()
            && self
                .last_check_started_at
                .is_some_and(|s| s >= requested_at)
            && self.last_check_finished_at.is_some()
    }
}
