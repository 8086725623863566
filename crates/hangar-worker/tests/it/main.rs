//! hangar-worker's integration tests, one module per former test file,
//! built as one test binary: linking a binary per file cost more build time
//! than the tests take to run. `containers_support` is the container tests'
//! shared harness.
//!
//! Every module's tests run on threads of this one process, side by side.
//! Each test's worker lives in temp dirs of its own (cgroups and sandbox
//! roots are named after it or randomly); what is the process's own is
//! shared with care: the worker settings some tests put in the environment
//! are set once (`containers_support::worker_settings_in_environment`),
//! and the rootless test starts this binary again naming its test by its
//! full module path.

mod agent_reports;
mod api_errors;
mod base_resource_types_needs_root;
mod containers_api;
mod containers_budget_needs_root;
mod containers_image_runc_needs_root;
mod containers_isolation_needs_root;
mod containers_process;
mod containers_rootless_needs_root;
mod containers_runc_needs_root;
mod containers_sandbox_needs_root;
mod containers_support;
mod disk_full_needs_root;
mod kube;
mod presence;
mod resource_actions;
mod resource_image_owners_needs_root;
mod resource_type_images_runc_needs_root;
mod sweeper;
mod volume_api;
mod volume_import;
mod volume_pull;
