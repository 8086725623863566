//! The workspace's structural rules, checked by `cargo test` (see
//! `tests/tidy.rs`): which crate may depend on which, that every crate takes
//! the workspace's lints, and that SQL stays in `hangar-store`. The crate
//! has no code of its own; its test reads the workspace's manifests and
//! sources.
