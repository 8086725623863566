//! Pipelines on the wire, under `/api/v1/teams/{team}/pipelines`.
//!
//! A config is sent as its YAML (or JSON) text, the body `fly
//! set-pipeline` sends, and read back as JSON in Concourse's `get-pipeline`
//! shape with its version.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The header of `PUT …/config` naming the version a change was made from
/// (Concourse's `X-Concourse-Config-Version`); `0` for a pipeline that must
/// not exist yet. Another current version is refused with 409.
pub const CONFIG_VERSION_HEADER: &str = "X-Hangar-Config-Version";

/// A pipeline of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    pub id: i64,
    pub team: String,
    pub name: String,
    pub paused: bool,
    /// The current config version.
    pub config_version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// An instance's vars (Concourse's `instance_vars`); absent for a
    /// pipeline that is not an instance.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub instance_vars: serde_json::Map<String, Value>,
    /// Archived: paused, its config emptied, until it is set again.
    #[serde(default)]
    pub archived: bool,
}

impl Pipeline {
    /// How fly names it: `name`, or `name/key:value,…` for an instance; the
    /// text every API path and CLI flag takes in the pipeline's place.
    pub fn reference(&self) -> String {
        match hangar_core::instance_vars::InstanceVars::from_value(Value::Object(
            self.instance_vars.clone(),
        )) {
            Ok(vars) => hangar_core::instance_vars::PipelineRef {
                name: self.name.clone(),
                instance_vars: vars,
            }
            .to_string(),
            Err(_) => self.name.clone(),
        }
    }
}

/// One warning of an accepted config (`configvalidate`'s kinds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigWarning {
    pub kind: String,
    pub message: String,
}

/// The answer to `PUT …/pipelines/{name}/config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineSaved {
    pub pipeline: Pipeline,
    /// True when the set made the pipeline (it starts paused).
    pub created: bool,
    #[serde(default)]
    pub warnings: Vec<ConfigWarning>,
}

/// `GET …/pipelines/{name}/config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineConfig {
    /// The config as JSON, in Concourse's `get-pipeline` shape.
    pub config: Value,
    pub version: i64,
}

/// `PUT …/pipelines/{name}/rename`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenamePipeline {
    pub name: String,
}

/// A job of a pipeline's current config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    pub team: String,
    pub pipeline: String,
    pub name: String,
    pub paused: bool,
    /// The number the job's next build takes (`P/J #N`).
    pub next_build_number: i64,
    /// Why the scheduler did not start a build at its last look; none
    /// when it created one or has not looked yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<JobWaiting>,
    /// The newest build that ended (Concourse's `finished_build`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_build: Option<JobBuildSummary>,
    /// The newest build still pending or running (Concourse's
    /// `next_build`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_build: Option<JobBuildSummary>,
}

/// What `clear-task-cache` removed (Concourse's answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachesRemoved {
    pub caches_removed: u64,
}

/// A job's build, as a job's listing names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobBuildSummary {
    pub id: i64,
    /// Its number in the job (`P/J #N`).
    pub name: String,
    pub status: hangar_core::build::BuildStatus,
}

/// Why a job waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWaiting {
    /// `no_version`, `pinned_version_not_found`, `not_passed`,
    /// `too_many_builds`, `no_new_versions`, `pipeline_paused`,
    /// `job_paused`, `start_limit` or `plan_error`.
    pub reason: String,
    /// The input it is about, if one.
    #[serde(default)]
    pub input: Option<String>,
    /// The reason in words.
    pub message: String,
}

/// A resource of a pipeline's current config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub id: i64,
    pub team: String,
    pub pipeline: String,
    pub name: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The version the resource is pinned to: the config's `version:`, else
    /// the one `pin-resource` set.
    #[serde(default)]
    pub pinned_version: Option<Value>,
    /// Whether the pin is `pin-resource`'s (false: the config's, or none).
    #[serde(default)]
    pub pinned_by_api: bool,
    /// `pin-resource`'s comment on the pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_comment: Option<String>,
    /// When its last check ended (shared with every resource of its type
    /// and source in the team).
    #[serde(default)]
    pub last_checked_at: Option<i64>,
    /// The last check's failure; none once a check succeeds.
    #[serde(default)]
    pub check_error: Option<String>,
    /// Why a check asked for or due has not run yet (no worker fits it),
    /// while none runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_waiting: Option<String>,
}

/// A version of a resource that a check or put found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceVersion {
    pub id: i64,
    pub version: Value,
    pub metadata: Value,
    pub enabled: bool,
    pub check_order: i64,
    pub created_at: i64,
}

/// `GET …/resources/{resource}/versions?limit=&before=&after=`: newest
/// first; `before`/`after` are version ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionsQuery {
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub before: Option<i64>,
    #[serde(default)]
    pub after: Option<i64>,
}

/// The most versions one page holds, and the page size without `limit`.
pub const MAX_VERSIONS_PAGE: i64 = 500;
pub const DEFAULT_VERSIONS_PAGE: i64 = 100;
