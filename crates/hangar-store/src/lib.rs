//! The only crate in hangar that speaks SQL.
//!
//! One [`Store`] serves SQLite (embedded, the default) and PostgreSQL
//! (production, several web nodes) through `sqlx::Any`, with statements written
//! once in the dialect both accept (`$1` placeholders, `ON CONFLICT`,
//! `RETURNING`). Where the two differ (migrations, identity columns) each has
//! its own text. Times are passed in by the caller, never read here, so tests
//! drive the lifecycle in virtual time.

mod api_tokens;
mod build_versions;
mod builds;
mod bulk;
mod bulk_history;
mod checks;
mod containers;
mod db;
mod error;
mod events;
mod exposure;
mod gc;
mod generations;
mod handle_list;
mod health;
mod heartbeats;
mod job_builds;
mod latest_builds;
mod live;
mod log_retention;
mod packed;
mod pins;
mod pipelines;
mod placements;
mod records;
mod resource_caches;
mod scheduling;
mod scopes;
mod sessions;
mod teams;
mod versions;
mod volume_stamps;
mod volumes;
mod wakeups;
mod web_nodes;
mod workers;

#[cfg(test)]
mod corrupt_tests;
#[cfg(test)]
mod pipeline_rows_tests;
#[cfg(test)]
mod test_db;

pub use api_tokens::{TokenSealing, WorkerTokenKey, MAX_STORED_LEN, MAX_TOKEN_LEN};
pub use build_versions::BuildVersionRecord;
pub use builds::{AbortRequest, BuildEventRecord, BuildRecord, StepRecord};
pub use bulk::{fleet_volume, fleet_volume_handle};
pub use bulk_history::HistoricBuild;
pub use checks::{CheckMember, CheckStatus, ClaimedCheck, CLAIM_MARGIN_MS};
pub use containers::{ContainerRecord, TeamContainer};
pub use db::{Backend, Store};
pub use error::StoreError;
pub use events::WorkerRetry;
pub use exposure::BuildExposure;
pub use gc::GcTurn;
pub use heartbeats::HeartbeatRecord;
pub use job_builds::{BuildJob, BuildVersionShown, JobBuildRecord};
pub use latest_builds::{JobBuilds, JobSummary, LatestBuild};
pub use pins::ResourcePin;
pub use pipelines::{
    Created, JobRecord, PipelineRecord, ResourceRecord, ResourceTypeRecord, ResourceVersionRecord,
    SetOutcome, TeamRecord, VersionPage,
};
pub use records::{EventRecord, WorkerInfo, WorkerRecord};
pub use scheduling::{
    version_matches_pin, InputsPendingBuild, PlannedInput, SchedulablePipeline, SchedulingResource,
    StartState,
};
pub use sessions::{NewSession, SessionRecord, MAX_PENDING_LOGINS};
pub use teams::{TeamAuthRecord, TeamSet};
pub use volumes::{AppliedReport, NewVolume, VolumeRecord};
pub use wakeups::SchedulerListener;
pub use web_nodes::WebNodeRecord;
pub use workers::{
    CommandOutcome, Credentials, Expect, IncumbentRecord, RegisterOutcome, Registration,
    WorkerCredential,
};
