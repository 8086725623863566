//! hangar-store's integration tests, one module per area, built as one
//! test binary: linking a binary per file cost more build time than the
//! tests take to run. Each module's tests run on threads of this one
//! process, beside every other module's.

mod api_tokens;
mod build_abort;
mod build_leases;
mod bulk;
mod bulk_history;
mod checks;
mod containers;
mod dashboard_reads;
mod gc;
mod gc_property;
mod health;
mod heartbeats;
mod identity;
mod instance_vars;
mod job_builds;
mod pipelines;
mod placements;
mod quiet_reports;
mod registrations;
mod scheduling_stamps;
mod volumes;
mod wakeups;
mod worker_lifecycle;
