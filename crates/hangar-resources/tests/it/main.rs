//! hangar-resources' integration tests, one module per area, built as one
//! test binary: linking a binary per file cost more build time than the
//! tests take to run.

mod git;
mod git_fields;
