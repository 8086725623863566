//! Scheduling: which versions a job's next build takes, whether that build
//! is due, and which pending builds may start.
//!
//! Input resolution follows Concourse's algorithm (v6 and later):
//!
//! - an input without `passed` takes the newest enabled version of its
//!   resource (`latest`), the version after the newest one this job used
//!   (`version: every`), or its pin;
//! - inputs with `passed` are resolved together with every other input that
//!   shares one of their `passed` jobs: a version satisfies `passed: [a, b]`
//!   when a succeeded build of `a` *and* one of `b` had it as an input or an
//!   output, and versions of several inputs that share a passed job must come
//!   from the *same* build of that job. The search walks the passed jobs'
//!   succeeded builds newest first and backtracks, as Concourse's does.
//!
//! The resolver is pure and works over a [`Window`]: a bounded slice of
//! history the store loads with indexed queries (the newest builds of each
//! passed job, the newest enabled versions). When the answer may lie beyond
//! what was loaded, it says so ([`Resolution::NeedMore`]) and the caller
//! loads a wider window; it never needs a pipeline's whole history in
//! memory, which is how Concourse's first algorithm ran web out of memory.

mod config;
mod decide;
mod resolve;
mod stamps;
mod start;
pub mod trigger;

pub use config::{job_inputs, jobs_downstream_of, jobs_reading, NamedInput, NamedVersion};
pub use decide::{decide, JobGate, NextBuild, Waiting};
pub use resolve::{resolve, NeedMore, Resolution, Resolved, Unresolved};
pub use stamps::{job_stamp, BuildStamp, JobStamp, PipelineStamps, ResourceStamp};
pub use start::{startable, PendingBuild, RunningBuild, StartLimits};

use std::collections::{BTreeMap, BTreeSet};

pub type JobId = i64;
pub type ResourceId = i64;
/// A `resource_versions` row: one version of one resource (scope).
pub type VersionId = i64;
pub type BuildId = i64;

/// Which versions an input takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputVersion {
    Latest,
    Every,
    /// The input's (or its resource's) pinned version; `None` when no
    /// version of the resource matches the pin (yet).
    Pinned(Option<VersionId>),
}

/// One `get` of a job, as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub resource: ResourceId,
    pub passed: BTreeSet<JobId>,
    pub version: InputVersion,
    pub trigger: bool,
}

/// A succeeded build of a passed job, with the versions it had (its
/// inputs and outputs) of the resources the resolution is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassedBuild {
    pub id: BuildId,
    pub versions: Vec<(ResourceId, VersionId)>,
}

/// Succeeded builds of one passed job, in the order they are to be tried
/// (newest first), and whether that is all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildList {
    pub builds: Vec<PassedBuild>,
    pub complete: bool,
}

/// For a `version: every` input without `passed`: the version after the
/// newest one this job used, and whether another follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EveryNext {
    pub version: VersionId,
    pub has_next: bool,
}

/// The slice of history one resolution of one job works on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// The newest enabled version of each input's resource.
    pub latest: BTreeMap<ResourceId, VersionId>,
    /// `version: every` inputs without `passed`, by input name.
    pub every_next: BTreeMap<String, EveryNext>,
    /// Disabled versions of the resources of inputs with `passed`.
    pub disabled: BTreeSet<(ResourceId, VersionId)>,
    /// Succeeded builds of each passed job.
    pub passed_builds: BTreeMap<JobId, BuildList>,
}

#[cfg(test)]
mod tests;
