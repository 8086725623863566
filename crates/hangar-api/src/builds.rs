//! Builds on the wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use hangar_core::build::{BuildEventKind, BuildStatus, StepKind, StepState};

/// The largest build plan body web accepts.
pub const MAX_PLAN_BODY: usize = 1024 * 1024;

/// `POST /api/v1/builds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBuild {
    /// The job's name; one-off builds (`hangar execute`) leave it out.
    #[serde(default)]
    pub name: Option<String>,
    /// A list of steps: `get`, `task`, `do`, `in_parallel` (Concourse's shape).
    pub plan: Value,
    /// Artifacts the build starts with: name → volume handle (uploaded
    /// inputs of `hangar execute`).
    #[serde(default)]
    pub artifacts: BTreeMap<String, String>,
    /// Concourse's `resource_types`: custom types the plan's get steps may
    /// name, each an image fetched with its own `type` (`Null` for none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub resource_types: Value,
    /// The team the build belongs to (`main` when left out); the caller
    /// needs the member role there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// A job's inputs as a trigger now would fetch them (`GET
/// …/jobs/{job}/inputs`, for `hangar execute --inputs-from`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInputs {
    /// Each get step of the job's plan, by type and source, its version
    /// fixed.
    pub inputs: Vec<Value>,
    /// The pipeline's resource types (`Null` for none).
    #[serde(default)]
    pub resource_types: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    pub id: i64,
    pub name: String,
    /// `pending`, `started`, `succeeded`, `failed`, `errored`, `aborted`.
    pub status: BuildStatus,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The exit code of the step that decided the build, if it has one.
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    #[serde(default)]
    pub steps: Vec<BuildStep>,
    /// A job build's inputs: the versions its gets of pipeline resources
    /// fetched, by step name (a job's builds only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<BuildInput>,
    /// A job build's outputs: the versions its puts made and, once it
    /// succeeded, its inputs, as Concourse records them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<BuildOutput>,
    /// When the job's `build_log_retention` removed the build's log: its
    /// events are gone, not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_reaped_at: Option<i64>,
}

/// A version a job build used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInput {
    /// The get step's name (the artifact).
    pub name: String,
    pub resource: String,
    pub version: serde_json::Value,
}

/// A version a job build produced (or, on success, used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildOutput {
    pub resource: String,
    pub version: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildStep {
    pub step_id: String,
    pub name: String,
    pub kind: StepKind,
    pub state: StepState,
    pub attempt: i64,
    pub worker: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The version a get step fetched, or a put step's `out` answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<serde_json::Value>,
}

/// One entry of a build's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildEvent {
    /// Increasing within a build: ask for events `after` the last one seen.
    pub id: i64,
    pub step: Option<String>,
    /// `log` (the step's output), `step` (a step started or ended), `infra`
    /// (what the infrastructure did: a worker lost, a retry), `status`.
    pub kind: BuildEventKind,
    pub payload: String,
    pub at: i64,
}

/// `GET /api/v1/builds/{id}/events?after=N&wait_ms=M`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildEvents {
    pub events: Vec<BuildEvent>,
    pub status: BuildStatus,
    pub exit_code: Option<i64>,
}

/// An uploaded artifact: a volume on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub handle: String,
    pub worker: String,
}

/// The content type of a tar stream in `encoding` (an upload's body, a
/// download's answer): `application/x-tar`, `application/gzip` or
/// `application/zstd`.
pub fn tar_content_type(encoding: &str) -> &'static str {
    match encoding {
        "gzip" => "application/gzip",
        "zstd" => "application/zstd",
        _ => "application/x-tar",
    }
}

/// The encoding an upload's content type names; none given is gzip (what
/// every client sent before others were accepted).
pub fn tar_encoding(content_type: Option<&str>) -> Option<&'static str> {
    let essence = content_type.map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    match essence.as_deref() {
        None | Some("") | Some("application/gzip") | Some("application/x-gzip") => Some("gzip"),
        Some("application/zstd") => Some("zstd"),
        Some("application/x-tar") => Some("none"),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tar_encoding_tests {
    use super::*;

    #[test]
    fn an_upload_s_content_type_names_its_encoding_and_the_answer_s_names_it_back() {
        let table = [
            (None, Some("gzip")),
            (Some(""), Some("gzip")),
            (Some("application/gzip"), Some("gzip")),
            (Some("Application/GZIP; charset=binary"), Some("gzip")),
            (Some("application/x-gzip"), Some("gzip")),
            (Some("application/zstd"), Some("zstd")),
            (Some("application/x-tar"), Some("none")),
            (Some("application/json"), None),
            (Some("text/plain"), None),
            (Some("application/zstd-but-not"), None),
        ];
        for (content_type, expected) in table {
            assert_eq!(tar_encoding(content_type), expected, "{content_type:?}");
            if let Some(encoding) = expected {
                assert_eq!(
                    tar_encoding(Some(tar_content_type(encoding))),
                    Some(encoding)
                );
            }
        }
    }
}
