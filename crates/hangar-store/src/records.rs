use hangar_core::{EventKind, UnixMillis, WorkerState};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::error::{corrupt, decode, StoreError};

/// What a worker says of itself when it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    pub name: String,
    pub state_identity: String,
    pub platform: String,
    pub tags: Vec<String>,
    pub team: Option<String>,
    pub version: String,
    /// The base resource types as the JSON the worker sent; the store keeps
    /// it whole and does not look inside.
    pub resource_types_json: String,
    pub ephemeral: bool,
    pub containers: i64,
    pub volumes: i64,
    /// Where the worker serves its volume API, if it does.
    pub api_url: Option<String>,
    /// Started with `--allow-privileged`: privileged steps may go to it.
    pub allow_privileged: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRecord {
    pub info: WorkerInfo,
    pub state: WorkerState,
    pub generation: i64,
    pub first_registered_at: UnixMillis,
    pub registered_at: UnixMillis,
    pub last_heartbeat_at: UnixMillis,
    pub state_changed_at: UnixMillis,
    pub restarts: i64,
    pub last_event: Option<EventRecord>,
    /// The newest restart of the worker (state kept or lost), with its cause.
    pub last_restart: Option<EventRecord>,
    /// The worker's view of its condition from its last heartbeat, as JSON.
    pub condition: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub id: i64,
    pub worker: String,
    pub kind: EventKind,
    pub cause: String,
    pub generation: i64,
    pub at: UnixMillis,
}

pub(crate) const WORKER_COLUMNS: &str =
    "w.name, w.state, w.state_identity, w.generation, w.platform, \
     w.tags, w.team, w.version, w.resource_types, w.ephemeral, w.containers, w.volumes, \
     w.first_registered_at, w.registered_at, w.last_heartbeat_at, w.state_changed_at, w.restarts, w.api_url, w.condition, \
     w.allow_privileged";

/// A `workers` row's state.
pub(crate) fn parse_state(row: &AnyRow) -> Result<WorkerState, StoreError> {
    decode(row, "workers", &["name"], "state")
}

pub(crate) fn worker_from_row(row: &AnyRow) -> Result<WorkerRecord, StoreError> {
    let tags: String = row.try_get("tags")?;
    let tags =
        serde_json::from_str(&tags).map_err(|e| corrupt(row, "workers", &["name"], "tags", e))?;
    let joined_event = |prefix: &str| -> Result<Option<EventRecord>, StoreError> {
        match row.try_get::<Option<i64>, _>(format!("{prefix}_id").as_str())? {
            Some(id) => Ok(Some(EventRecord {
                id,
                worker: row.try_get("name")?,
                kind: decode(
                    row,
                    "worker_events",
                    &[&format!("{prefix}_id")],
                    &format!("{prefix}_kind"),
                )?,
                cause: row.try_get(format!("{prefix}_cause").as_str())?,
                generation: row.try_get(format!("{prefix}_generation").as_str())?,
                at: row.try_get(format!("{prefix}_at").as_str())?,
            })),
            None => Ok(None),
        }
    };
    let last_event = joined_event("event")?;
    let last_restart = joined_event("restart")?;
    Ok(WorkerRecord {
        info: WorkerInfo {
            name: row.try_get("name")?,
            state_identity: row.try_get("state_identity")?,
            platform: row.try_get("platform")?,
            tags,
            team: row.try_get("team")?,
            version: row.try_get("version")?,
            resource_types_json: row.try_get("resource_types")?,
            ephemeral: row.try_get::<i64, _>("ephemeral")? != 0,
            containers: row.try_get("containers")?,
            volumes: row.try_get("volumes")?,
            api_url: row.try_get("api_url")?,
            allow_privileged: row.try_get::<i64, _>("allow_privileged")? != 0,
        },
        state: parse_state(row)?,
        generation: row.try_get("generation")?,
        first_registered_at: row.try_get("first_registered_at")?,
        registered_at: row.try_get("registered_at")?,
        last_heartbeat_at: row.try_get("last_heartbeat_at")?,
        state_changed_at: row.try_get("state_changed_at")?,
        restarts: row.try_get("restarts")?,
        last_event,
        last_restart,
        condition: row.try_get("condition")?,
    })
}

pub(crate) fn event_from_row(row: &AnyRow) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        id: row.try_get("id")?,
        worker: row.try_get("worker")?,
        kind: decode(row, "worker_events", &["id"], "kind")?,
        cause: row.try_get("cause")?,
        generation: row.try_get("generation")?,
        at: row.try_get("at")?,
    })
}
