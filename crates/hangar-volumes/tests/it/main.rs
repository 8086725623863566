//! hangar-volumes' integration tests, one module per area, built as one
//! test binary: linking a binary per file cost more build time than the
//! tests take to run. `common` holds the helpers and the
//! `on_both_drivers!` macro they share, so it comes first.

#[macro_use]
mod common;

mod hostile_tar;
mod owners;
mod volumes;
