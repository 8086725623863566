//! Running a resource type's programs on a worker (`check`, `in`, `out`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /resource-actions` on a worker's API.
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceActionResult {
    pub exit_code: i32,
    /// What the program printed on stdout, when it was JSON.
    pub response: Option<Value>,
    /// What it printed on stderr (its log), cut to a bounded size.
    pub stderr: String,
}
