//! The hangar binary's integration tests, one module per former test file,
//! built as one test binary: linking a binary per file cost more build time
//! than the tests take to run. Most start the `hangar` binary
//! (`CARGO_BIN_EXE_hangar`) as web, worker and CLI processes; `common` is
//! their shared harness (a web process and workers on loopback).
//!
//! Every module's tests run on threads of this one process, side by side.
//! None changes what is the process's own (environment, working dir,
//! umask, signal handlers): the processes a test starts get their settings
//! as arguments and their own environment, each test's web, workers and
//! data live in temp dirs of its own and listen on free loopback ports,
//! and the tmpfs mounts, read-only bind mounts and memory cgroup some root
//! tests make are on their own dirs or named after this process.

mod common;
mod e2e_across;
mod e2e_artifact_pull;
mod e2e_builds;
mod e2e_credentials;
mod e2e_custom_type_put_needs_root;
mod e2e_dashboard_browser;
mod e2e_database;
mod e2e_disk_full_needs_root;
mod e2e_execute_errors;
mod e2e_execute_inputs_from;
mod e2e_execute_vars;
mod e2e_file_steps;
mod e2e_fly_verbs;
mod e2e_get_local_vars;
mod e2e_health_needs_root;
mod e2e_instanced_pipelines;
mod e2e_intercept;
mod e2e_isolation_needs_root;
mod e2e_job_builds;
mod e2e_job_lifecycle;
mod e2e_lifecycle;
mod e2e_no_worker;
mod e2e_oidc;
mod e2e_outputs;
mod e2e_pipeline_registry_needs_root;
mod e2e_pipelines;
mod e2e_presence;
mod e2e_privileged;
mod e2e_quickstart_flags_needs_root;
mod e2e_recovery;
mod e2e_registry_image_needs_root;
mod e2e_resource_checks;
mod e2e_resource_isolation;
mod e2e_resource_types_needs_root;
mod e2e_socket_flood;
mod e2e_task_files;
mod e2e_task_images_needs_root;
mod e2e_team_workers;
mod e2e_teams;
mod e2e_time_resource;
mod e2e_vault;
mod e2e_volumes;
mod e2e_web_nodes;
mod e2e_work_dir_artifacts;
mod exec_as;
mod registry_image_progress;
mod resource_sandbox_needs_root;
mod resource_types;
