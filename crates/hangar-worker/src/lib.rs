//! The worker agent: keeps the worker registered with web, heartbeats, and
//! carries out land, retire and stop.
//!
//! The agent is driven by [`AgentCommand`]s so that the binary can map Unix
//! signals onto them and `quickstart` and tests can send them directly.

pub mod action_dir;
mod action_output;
mod agent;
mod answer;
pub mod api;
pub mod containers;
mod containers_api;
pub mod disk;
pub mod error;
pub mod exec_api;
mod file_writes;
pub mod health;
pub mod kube;
mod presence;
mod pull;
mod resource_types;
pub mod resources_api;
mod state_identity;
pub mod sweeper;

pub use agent::{run, AgentCommand, AgentExit, WorkerConfig};
pub use resource_types::discover_resource_types;
pub use state_identity::{load_or_create_state_identity, STATE_IDENTITY_FILE};
