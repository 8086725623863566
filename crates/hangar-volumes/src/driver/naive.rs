//! Naive driver: plain directories, copy-on-write by full copy.

use std::io;
use std::path::Path;

use super::names;
use crate::os::{CopyStats, Os};

/// Fill `staging/data` with a `cp -a` of `source` (a parent's data dir, or
/// a host directory being imported).
pub(crate) fn copy_into(os: &dyn Os, staging: &Path, source: &Path) -> io::Result<CopyStats> {
    os.copy_tree(source, &staging.join(names::DATA))
}

/// Make an empty `staging/data`.
pub(crate) fn make_empty(os: &dyn Os, staging: &Path) -> io::Result<()> {
    os.create_dir(&staging.join(names::DATA))
}
