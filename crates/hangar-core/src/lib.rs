//! The pure domain of hangar: the worker lifecycle state machine, registration
//! classification, heartbeat fencing and name rules.
//!
//! Nothing in this crate does I/O, reads a clock or spawns a task: callers pass
//! the time in, and get decisions out. That is what lets every rule here be
//! tested with a table of cases and no server.

pub mod agent;
pub mod backoff;
pub mod build;
pub mod build_log;
pub mod caches;
pub mod checks;
pub mod containers;
pub mod dashboard;
pub mod database;
pub mod engine;
pub mod events;
pub mod fencing;
pub mod gc;
pub mod import;
pub mod instance_vars;
pub mod leases;
pub mod lifecycle;
pub mod login_limit;
pub mod login_throttle;
pub mod names;
pub mod pipeline;
pub mod placement;
pub mod plan;
pub mod pressure;
pub mod registration;
pub mod resource_types;
pub mod rng;
pub mod scheduling;
pub mod task;
pub mod tenancy;
pub mod users;
pub mod vars;
pub mod volumes;
pub mod worker_timeline;
pub mod yaml;
pub mod yaml_write;

pub use events::EventKind;
pub use lifecycle::{
    LifecycleAction, LifecycleConfig, LifecycleStep, OperatorCommand, WorkerSnapshot, WorkerState,
};

/// Milliseconds since the Unix epoch. Every time in hangar's state is one of
/// these, so that the database, the wire and the tests agree on one unit.
pub type UnixMillis = i64;
