//! `hangar bench scheduling`: how long a new version takes to become the
//! builds it triggers, and web's memory, as a pipeline's history grows.

pub mod history;
