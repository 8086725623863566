pub mod events;
pub mod quickstart;
pub mod volumes;
pub mod web;
pub mod worker;
pub mod worker_commands;
pub mod workers;
