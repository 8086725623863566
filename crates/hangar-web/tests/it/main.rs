//! hangar-web's integration tests, one module per former test file, built
//! as one test binary: linking a binary per file cost more build time than
//! the tests take to run. `common` is the in-process web node every module
//! starts (`common::TestWeb`).
//!
//! Every module's tests run on threads of this one process, side by side.
//! None changes what is the process's own: each test serves its own web
//! node on port 0 with its own manual clock, on a database of its own (an
//! in-memory SQLite, a fresh PostgreSQL database or a SQLite file in a temp
//! dir), and its workers' APIs and fake servers listen on port 0 too.

mod abort_api;
mod api;
mod checks_api;
mod common;
mod credentials;
mod credentials_api;
mod dashboard;
mod dashboard_browser;
mod dashboard_graph;
mod dashboard_rules;
mod dashboard_scale;
mod database_health;
mod errors_api;
mod gc_api;
mod job_builds_api;
mod log_retention_api;
mod oidc_login;
mod open_endpoints;
mod pipelines_api;
mod plan_steps_api;
mod pod_tokens_api;
mod presence;
mod previous_exit;
mod resource_types_api;
mod scheduler_api;
mod shutdown;
mod tenancy_api;
mod vars_api;
mod volumes_api;
mod worker_tokens_at_rest;
