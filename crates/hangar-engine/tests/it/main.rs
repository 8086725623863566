//! hangar-engine's integration tests, one module per area, built as one
//! test binary: linking a binary per file cost more build time than the
//! tests take to run. `support` is the harness they share.

mod action_output;
mod build_versions;
mod credentials;
mod engine;
mod file_steps;
mod get_local_vars;
mod no_worker;
mod placement;
mod privileged;
mod put_steps;
mod resource_types;
mod step_semantics;
mod support;
mod takeover;
mod task_configs;
mod task_images;
