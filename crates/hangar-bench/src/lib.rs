//! hangar's own measuring tools: the benchmarks behind `hangar bench` and
//! the chaos harness behind `hangar chaos`. (The deterministic simulation of
//! web's core logic is its own crate, `hangar-sim`.)
//!
//! The benchmarks and the harness start web and workers as real processes
//! from the `hangar` binary (the caller says which) on loopback, and talk to
//! them with the real client. They print figures; nothing here asserts a
//! time.

#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod artifacts;
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod artifacts_cli;
pub mod cgroup;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod checks;
// The benchmarks and the harness report to the person running them on
// stdout and stderr (`hangar bench`, `hangar chaos`).
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod chaos;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod dashboard;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod death;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod execute;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod heartbeats;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod image;
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod image_start;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod memory;
pub mod postgres_cpu;
pub mod procfs;
pub mod procs;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod scheduling;
pub mod stats;
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod webhook;

/// Writes `value` as pretty JSON to `path`.
pub fn write_json<T: serde::Serialize>(path: &std::path::Path, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))
}
