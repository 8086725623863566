//! The workspace's structural rules, checked by `cargo test` (see
//! `tests/it/tidy.rs`): which crate may depend on which, that every crate
//! takes the workspace's lints, that SQL stays in `hangar-store`, that HTTP
//! statuses are chosen only in the servers' error tables, and that the
//! engine's and the loops' modules form no circle and detach no task. The crate
//! has no code of its own; its test reads the workspace's manifests and
//! sources.
