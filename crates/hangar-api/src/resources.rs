//! Running a resource type's programs on a worker (`check`, `in`, `out`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /resource-actions` on a worker's API.
///
/// Asked with `Accept: application/x-ndjson` ([`ACTION_EVENTS`]), the
/// worker answers, once the program wrote to stderr, with one
/// [`ActionEvent`] per line as it comes (its stderr live, then the end);
/// otherwise, or when the action ends before writing anything, with one
/// [`ResourceActionResult`] (or an error status) as before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceAction {
    /// A base resource type the worker advertises; with `image_volume`,
    /// the name of the custom type whose image that volume holds (for
    /// messages only).
    pub resource_type: String,
    /// `check`, `in` or `out`.
    pub action: String,
    /// For `in`: the volume to fetch into.
    #[serde(default)]
    pub volume: Option<String>,
    /// A volume in Concourse's image layout (`rootfs/`, `metadata.json`)
    /// holding a custom resource type's image: the action runs
    /// `/opt/resource/<action>` in a container of it instead of a base
    /// type's program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_volume: Option<String>,
    /// For `out`: the put's inputs, artifact name → volume on this worker,
    /// each at `<source dir>/<name>` as Concourse lays them out.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub inputs: std::collections::BTreeMap<String, String>,
    /// The JSON the program reads on stdin.
    pub request: Value,
    /// The custom type is `privileged` (Concourse's field of a
    /// `resource_types` entry): its container in `image_volume` runs as
    /// real root with every capability. A worker not started with
    /// `--allow-privileged` refuses the action. Left out when false.
    #[serde(default, skip_serializing_if = "crate::is_false")]
    pub privileged: bool,
}

/// The exit code with which a worker's own base resource type says its
/// failure was the infrastructure's (what it fetches from unreachable or
/// failing), `EX_TEMPFAIL` of sysexits.h. Only the worker's own programs
/// are taken at their word: a custom type's image exiting so is its own
/// failure.
pub const EXIT_INFRASTRUCTURE: i32 = 75;

/// The media type of a streamed answer: one JSON [`ActionEvent`] a line.
pub const ACTION_EVENTS: &str = "application/x-ndjson";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceActionResult {
    pub exit_code: i32,
    /// What the program printed on stdout, when it was JSON.
    pub response: Option<Value>,
    /// What it printed on stderr (its log), cut to a bounded size; empty
    /// when it was streamed as [`ActionEvent::Stderr`].
    pub stderr: String,
    /// Whose fault a non-zero exit is, as the worker knows it: a base type
    /// of the worker's own says when what it fetches from failed (an
    /// unreachable registry), so the step is tried on another worker.
    /// `None` (an older worker, or exit 0) is read as the program's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ActionFailure>,
}

impl ResourceActionResult {
    /// Whether the action failed for the infrastructure's sake.
    pub fn infrastructure_failure(&self) -> bool {
        self.exit_code != 0 && self.failure == Some(ActionFailure::Infrastructure)
    }
}

/// Whose fault a resource action's failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionFailure {
    /// The resource's own: its configuration, credentials, a version that
    /// does not exist, a corrupt or hostile artifact. Not retried.
    Own,
    /// What it fetches from could not be reached or failed (a registry
    /// down or answering 5xx, a stream cut): retried on another worker.
    Infrastructure,
}

impl ActionFailure {
    pub const ALL: [ActionFailure; 2] = [ActionFailure::Own, ActionFailure::Infrastructure];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionFailure::Own => "own",
            ActionFailure::Infrastructure => "infrastructure",
        }
    }
}

impl std::fmt::Display for ActionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a streamed answer to a resource action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionEvent {
    /// Text the program wrote on stderr, as it came (whole UTF-8
    /// characters; invalid bytes replaced).
    Stderr(String),
    /// The action ended: the last line.
    Result(ResourceActionResult),
    /// The action could not run to its end after it started writing: what
    /// an error status would have said. The last line.
    Error(ActionError),
}

/// An error ended a streamed action: the status and code the worker would
/// have answered with had it not started streaming.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionError {
    pub status: u16,
    pub code: String,
    pub message: String,
}
