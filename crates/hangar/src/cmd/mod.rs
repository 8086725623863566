#[cfg(feature = "bench")]
pub(crate) mod bench;
pub(crate) mod browser_login;
pub(crate) mod builds;
#[cfg(feature = "bench")]
pub(crate) mod chaos;
pub(crate) mod checks;
pub(crate) mod events;
pub(crate) mod exec_as;
pub(crate) mod execute;
pub(crate) mod http_flags;
pub(crate) mod login;
pub(crate) mod pins;
pub(crate) mod pipelines;
pub(crate) mod progress;
pub(crate) mod quickstart;
pub(crate) mod resource_type;
pub(crate) mod set_pipeline;
pub(crate) mod teams;
mod upload_files;
mod vault_flags;
pub(crate) mod volumes;
pub(crate) mod watch;
pub(crate) mod web;
pub(crate) mod web_users;
pub(crate) mod worker;
pub(crate) mod worker_commands;
pub(crate) mod workers;
