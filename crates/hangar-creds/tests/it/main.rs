//! hangar-creds' integration tests, one module per credential manager,
//! built as one test binary: linking a binary per file cost more build
//! time than the tests take to run.

mod dir;
mod kube;
mod vault;
mod vault_hostile;
