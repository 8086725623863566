//! The JSON wire types shared by web, the worker and the CLI.
//!
//! Requests (what a server receives) refuse unknown fields, so a typo in a
//! script or a client from a newer version fails loudly instead of being
//! half-understood. Responses (what a client receives) tolerate them, so a
//! newer web that adds a field does not break older workers and CLIs (types
//! in both, like [`WorkerCondition`], are strict only inside requests). An
//! enum value a client does not know is still refused. Durations on
//! the wire are integer milliseconds in fields ending `_ms`; times are
//! milliseconds since the Unix epoch in fields ending `_at`.

use serde::{Deserialize, Serialize};

pub use hangar_core::events::EventKind;
pub use hangar_core::lifecycle::WorkerState;
pub use hangar_core::pressure::Pressure;
pub use hangar_core::registration::RegistrationKind;
pub use hangar_core::volumes::{OwnerKind, Strategy, VolumeState};

pub mod builds;
pub mod checks;
pub mod containers;
pub mod credentials;
#[cfg(feature = "server")]
pub mod http;
pub mod intercept;
pub mod pins;
pub mod pipelines;
pub mod resources;
pub mod teams;
pub mod volume_grant;

/// The API version prefix every route lives under.
pub const API_PREFIX: &str = "/api/v1";

/// The largest JSON body web accepts on any route.
pub const MAX_JSON_BODY: usize = 64 * 1024;

/// A worker's registration: who it is and what it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterWorker {
    pub name: String,
    /// The identity of the worker's work dir; changes when the dir is wiped.
    pub state_identity: String,
    pub platform: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub team: Option<String>,
    pub version: String,
    #[serde(default, deserialize_with = "strict_vec")]
    pub resource_types: Vec<BaseResourceType>,
    #[serde(default)]
    pub ephemeral: bool,
    #[serde(default)]
    pub containers: i64,
    #[serde(default)]
    pub volumes: i64,
    /// Where the worker serves its volume API (`http://host:port`).
    #[serde(default)]
    pub api_url: Option<String>,
    /// How the worker's previous container ended, when it can tell (in a
    /// Kubernetes pod: from the pod's status), e.g. `OOMKilled (exit 137) at
    /// 2025-05-01T10:00:00Z`. Web records it in the registration event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_exit: Option<String>,
    /// The secret web must present to this worker process's API; made by
    /// the process at start and known only to it and web. Required with
    /// `api_url`. Presenting the incumbent's own token also shows that a
    /// registration comes from the incumbent process itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_token: Option<String>,
    /// The highest generation this work dir was ever given (kept on the
    /// worker's disk). Web never hands out a number at or below it, and a
    /// number it never issued tells it its database is not the one the
    /// fleet knew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_generation: Option<i64>,
    /// The worker was started with `--allow-privileged`: web may place
    /// privileged steps on it (they run as real root with every
    /// capability, root on the worker's host). Left out when false, so a
    /// web that predates the field still takes the registration.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_privileged: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Defines a wire struct that travels both ways: the struct itself tolerates
/// unknown fields (it is what responses hold), and a private twin with the
/// same fields refuses them, for the request fields that carry it (through
/// [`strict_vec`] or [`strict_option`]). One field list serves both.
macro_rules! both_ways {
    (
        $(#[$meta:meta])*
        pub struct $name:ident / $strict:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $name { $( $(#[$fmeta])* pub $field: $ty, )* }

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $strict { $( $(#[$fmeta])* $field: $ty, )* }

        impl Strict for $name {
            type Twin = $strict;
        }

        impl From<$strict> for $name {
            fn from(s: $strict) -> Self {
                $name { $( $field: s.$field, )* }
            }
        }
    };
}

/// A type whose requests refuse unknown fields through a strict twin.
trait Strict: From<Self::Twin> {
    type Twin: serde::de::DeserializeOwned;
}

/// Deserializes a request's list through the items' strict twin.
fn strict_vec<'de, D: serde::Deserializer<'de>, T: Strict>(d: D) -> Result<Vec<T>, D::Error> {
    let twins = Vec::<T::Twin>::deserialize(d)?;
    Ok(twins.into_iter().map(T::from).collect())
}

/// Deserializes a request's optional value through its strict twin.
fn strict_option<'de, D: serde::Deserializer<'de>, T: Strict>(d: D) -> Result<Option<T>, D::Error> {
    Ok(Option::<T::Twin>::deserialize(d)?.map(T::from))
}

both_ways! {
    /// A resource type the worker has on disk: a directory with `check`,
    /// `in`, `out`, or Concourse's layout (`resource_metadata.json` beside
    /// `rootfs.tgz` or `rootfs/`). Strict inside a registration, tolerant
    /// inside a [`Worker`].
    pub struct BaseResourceType / StrictBaseResourceType {
        #[serde(rename = "type")]
        pub type_name: String,
        /// Where the type lives on the worker's disk.
        pub path: String,
        #[serde(default)]
        pub version: Option<String>,
        /// Its `resource_metadata.json` says `privileged`: its actions run
        /// in privileged containers. Left out when false, so a registration
        /// without privileged types reads as before.
        #[serde(default, skip_serializing_if = "is_false")]
        pub privileged: bool,
    }
}

/// Web's answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    /// The generation this process must present from now on.
    pub generation: i64,
    /// `new`, `state-kept` or `state-lost`.
    pub kind: RegistrationKind,
    /// The heartbeat interval web asks for, if it dictates one.
    pub heartbeat_interval_ms: Option<i64>,
    pub heartbeat_ttl_ms: i64,
    /// This registration's own credential: every later call of the process
    /// (heartbeat, report, land, retire) presents it instead of the fleet's
    /// worker key, which only admits a worker. Web keeps only its hash.
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub generation: i64,
    pub containers: i64,
    pub volumes: i64,
    /// How the worker judges itself: pressure, health, memory and disk.
    #[serde(default, deserialize_with = "strict_option")]
    pub condition: Option<WorkerCondition>,
}

both_ways! {
    /// A worker's own view of its condition, sent with every heartbeat. Web
    /// places no work on a worker under pressure or unhealthy, and none that
    /// needs more memory than the worker has free. Strict inside a
    /// heartbeat, tolerant inside a [`Worker`].
    pub struct WorkerCondition / StrictWorkerCondition {
        /// `none`, `soft` (no new work) or `hard` (landing itself).
        pub pressure: Pressure,
        #[serde(default)]
        pub pressure_reason: Option<String>,
        pub healthy: bool,
        /// What failed in the last self-check.
        #[serde(default)]
        pub unhealthy_reason: Option<String>,
        pub memory_used: u64,
        pub memory_limit: u64,
        /// Memory promised to running containers (the sum of their limits).
        pub memory_reserved: u64,
        pub disk_used: u64,
        pub disk_total: u64,
    }
}

impl WorkerCondition {
    pub fn accepting_work(&self) -> bool {
        self.healthy && self.pressure == Pressure::None
    }

    pub fn memory_free(&self) -> u64 {
        self.memory_limit.saturating_sub(self.memory_reserved)
    }

    /// Memory, disk, pressure and health in one line, what is wrong first:
    /// `ok mem 1.2 GiB/4 GiB (512 MiB promised) disk 40%` (the CLI's
    /// `workers` and the dashboard's fleet say it alike).
    pub fn summary(&self) -> String {
        let human = hangar_core::build::human_bytes;
        let disk = (self.disk_used * 100)
            .checked_div(self.disk_total)
            .unwrap_or(0);
        let state = if !self.healthy {
            format!(
                "unhealthy ({})",
                self.unhealthy_reason.as_deref().unwrap_or("?")
            )
        } else if self.pressure != Pressure::None {
            format!(
                "pressure {} ({})",
                self.pressure,
                self.pressure_reason.as_deref().unwrap_or("?")
            )
        } else {
            "ok".into()
        };
        format!(
            "{state} mem {}/{} ({} promised) disk {disk}%",
            human(self.memory_used),
            human(self.memory_limit),
            human(self.memory_reserved)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAccepted {
    /// The worker's state after the heartbeat (`running`, `landing`, …).
    pub state: WorkerState,
}

/// A worker as `hangar workers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    pub name: String,
    pub state: WorkerState,
    pub state_identity: String,
    pub generation: i64,
    pub platform: String,
    pub tags: Vec<String>,
    pub team: Option<String>,
    pub version: String,
    pub resource_types: Vec<BaseResourceType>,
    pub ephemeral: bool,
    pub containers: i64,
    pub volumes: i64,
    /// When the name first registered (since it was last removed).
    pub first_registered_at: i64,
    /// When the current generation registered.
    pub registered_at: i64,
    pub last_heartbeat_at: i64,
    pub state_changed_at: i64,
    /// How many times the name registered again while web still knew it.
    pub restarts: i64,
    pub api_url: Option<String>,
    pub last_event: Option<WorkerEvent>,
    /// The newest restart, with its cause (state kept or lost, how many rows
    /// it invalidated).
    #[serde(default)]
    pub last_restart: Option<WorkerEvent>,
    /// As of the last heartbeat.
    #[serde(default)]
    pub condition: Option<WorkerCondition>,
    /// Started with `--allow-privileged`: runs privileged steps.
    #[serde(default)]
    pub allow_privileged: bool,
}

/// One lifecycle event of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEvent {
    pub id: i64,
    pub worker: String,
    pub kind: EventKind,
    pub cause: String,
    pub generation: i64,
    pub at: i64,
}

/// The worker's state after a land or retire command, or `removed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandDone {
    pub worker: String,
    pub state: CommandState,
    /// False when the worker was already in the asked-for state.
    pub changed: bool,
}

/// A worker's state after an operator's command: one of [`WorkerState`]'s,
/// or `removed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CommandState {
    Worker(WorkerState),
    Removed(Removed),
}

/// The word `removed` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Removed {
    Removed,
}

impl CommandState {
    pub const REMOVED: CommandState = CommandState::Removed(Removed::Removed);

    pub fn as_str(self) -> &'static str {
        match self {
            CommandState::Worker(s) => s.as_str(),
            CommandState::Removed(_) => "removed",
        }
    }
}

impl std::fmt::Display for CommandState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    pub pruned: Vec<String>,
}

/// The largest volume report web accepts: 100,000 handles of 128 bytes.
pub const MAX_REPORT_BODY: usize = 16 * 1024 * 1024;

/// A volume as web knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub handle: String,
    pub worker: String,
    /// `creating`, `created`, `destroying` or `failed`.
    pub state: VolumeState,
    pub parent: Option<String>,
    /// `base-resource-type`, `resource-cache`, `task-cache`, `container`, `artifact`.
    pub owner_kind: OwnerKind,
    pub owner_id: Option<String>,
    /// `empty`, `cow` or `import`.
    pub strategy: Strategy,
    pub size_bytes: Option<i64>,
    pub created_at: i64,
    /// Set while the worker does not report the volume: it is treated as
    /// absent from that moment and collected after the grace period.
    pub missing_since: Option<i64>,
    /// When a step last reused it (caches); the caches collector keeps a
    /// cache used within its retention.
    #[serde(default)]
    pub last_used_at: Option<i64>,
}

/// `POST /api/v1/volumes`: make a volume on a worker, through web, so the
/// row exists before the volume does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub worker: String,
    /// `empty`, `cow` (needs `parent`) or `import` (needs `import_path`).
    pub strategy: Strategy,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub import_path: Option<String>,
    pub owner_kind: OwnerKind,
    #[serde(default)]
    pub owner_id: Option<String>,
}

/// A worker's full list of the volume handles it has, and of its container
/// handles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeReport {
    pub generation: i64,
    pub handles: Vec<String>,
    /// Every container the worker has (running or exited). Absent: the
    /// worker does not report containers, and web leaves their rows be
    /// (an empty list means it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeReportAnswer {
    /// Handles the worker must destroy, children before parents.
    pub destroy: Vec<String>,
    /// Containers the worker must destroy: unknown to web, or ones web
    /// wants gone.
    #[serde(default)]
    pub destroy_containers: Vec<String>,
}

/// The worker's own volume API (served by each worker, called by web).
pub mod worker_api {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    pub use super::Strategy;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct CreateVolume {
        pub handle: String,
        /// `empty`, `cow` or `import`.
        pub strategy: Strategy,
        #[serde(default)]
        pub parent: Option<String>,
        #[serde(default)]
        pub import_path: Option<String>,
        #[serde(default)]
        pub properties: BTreeMap<String, String>,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Volume {
        pub handle: String,
        pub parent: Option<String>,
        /// The data directory on the worker's disk.
        pub path: String,
        pub properties: BTreeMap<String, String>,
        pub size_bytes: Option<u64>,
        pub created_at: i64,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct SetProperty {
        pub value: String,
    }

    /// `PUT /volumes/{handle}/pull`: fill the volume with another
    /// worker's, streamed straight from that worker.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct PullVolume {
        /// The source worker's API (`http://host:port`).
        pub source_url: String,
        pub source_handle: String,
        /// A grant for that volume on that worker
        /// ([`crate::volume_grant`]).
        pub grant: String,
        /// `none`, `gzip` or `zstd`: what the stream is compressed with.
        #[serde(default)]
        pub encoding: Option<String>,
    }

    /// What a pull answers when the source worker failed it (the target
    /// is fine): the source does not have the volume, or it could not be
    /// reached, refused, or broke off mid-stream.
    pub mod pull_codes {
        pub const SOURCE_NOT_FOUND: &str = "source_not_found";
        pub const SOURCE_FAILED: &str = "source_failed";
    }
}

/// `GET /api/v1/info`: answers without credentials, for probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub version: String,
    pub database: DatabaseStatus,
    /// Web reads the `((vars))` left in a plan from a credential manager:
    /// `hangar execute` then leaves the vars its flags do not give to web.
    /// Which manager, and where, is not said.
    #[serde(default)]
    pub credential_manager: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseStatus {
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Whether the database took web's write probe just now.
    pub reachable: bool,
    /// The database is not the one web started on (its file was deleted or
    /// replaced): web refuses every write until it is restarted.
    #[serde(default)]
    pub lost: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every error web returns has this body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable word scripts can branch on (`unauthorized`, `not_found`, …).
    pub code: String,
    /// The thing and the cause in plain words.
    pub message: String,
}

/// Error codes scripts and the worker branch on.
pub mod codes {
    pub const BAD_REQUEST: &str = "bad_request";
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const FORBIDDEN: &str = "forbidden";
    pub const NOT_FOUND: &str = "not_found";
    pub const CONFLICT: &str = "conflict";
    pub const TOO_LARGE: &str = "payload_too_large";
    pub const UNSUPPORTED_MEDIA: &str = "unsupported_media_type";
    /// The worker process's generation was superseded: it must stop.
    pub const SUPERSEDED: &str = "superseded";
    /// The worker was declared stalled: it must register again.
    pub const REREGISTER: &str = "reregister";
    pub const UNAVAILABLE: &str = "unavailable";
    /// A registration under the name of a worker that still answers.
    pub const TAKEOVER_REFUSED: &str = "takeover_refused";
    /// A worker arrived with a generation this database never issued: the
    /// database is empty, restored or replaced.
    pub const DATABASE_MISMATCH: &str = "database_mismatch";
    /// The database is not the one web started on: nothing is written.
    pub const DATABASE_LOST: &str = "database_lost";
    pub const INTERNAL: &str = "internal";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// The worker's disk (or quota) is full: try another worker, or later.
    pub const INSUFFICIENT_STORAGE: &str = "insufficient_storage";
    /// A file asked of a volume is missing, not a regular file, too large
    /// or out of the volume: the asker's fault, not the worker's.
    pub const FILE_UNREADABLE: &str = hangar_core::engine::FILE_UNREADABLE;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_with_an_unknown_field_is_refused() {
        let json =
            r#"{"name":"w","state_identity":"x","platform":"linux","version":"1","surprise":1}"#;
        let err = serde_json::from_str::<RegisterWorker>(json).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `surprise`"),
            "{err}"
        );
    }

    #[test]
    fn a_minimal_registration_takes_defaults() {
        let json = r#"{"name":"w","state_identity":"x","platform":"linux","version":"1"}"#;
        let reg: RegisterWorker = serde_json::from_str(json).unwrap();
        assert_eq!(
            (reg.tags.len(), reg.ephemeral, reg.containers),
            (0, false, 0)
        );
    }

    #[test]
    fn a_resource_type_is_spelled_type_on_the_wire() {
        let rt = BaseResourceType {
            type_name: "git".into(),
            path: "/rt/git".into(),
            version: None,
            privileged: false,
        };
        let json = serde_json::to_string(&rt).unwrap();
        assert_eq!(json, r#"{"type":"git","path":"/rt/git","version":null}"#);
        let privileged = BaseResourceType {
            privileged: true,
            ..rt
        };
        let json = serde_json::to_string(&privileged).unwrap();
        assert_eq!(
            json,
            r#"{"type":"git","path":"/rt/git","version":null,"privileged":true}"#
        );
        let back: BaseResourceType = serde_json::from_str(&json).unwrap();
        assert_eq!(back, privileged);
    }
}

#[cfg(test)]
mod wire_tests;
