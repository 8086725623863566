//! Teams, users and roles: who may do what, as Concourse decides it.
//!
//! - [`roles`]: the four roles and the role (or other access) each API
//!   action needs: Concourse's `requiredRoles` and its auth wrapper, in one
//!   table.
//! - [`team_auth`]: a team's auth config (which users and groups hold which
//!   role), read from Concourse's `set-team --config` file or its flags, and
//!   the role it gives an identity.
//! - [`oidc_claims`]: the identity an OIDC login's verified ID token makes.
//! - [`pod_admission`]: the worker a pod's service-account token may
//!   register (Kubernetes TokenReview).
//! - [`decide`]: whether a caller may do an action in a team; the one
//!   function every route's check goes through.

pub mod decide;
pub mod oidc_claims;
pub mod pod_admission;
pub mod roles;
pub mod team_auth;

pub use decide::{decide, Caller, Denied, Identity, Target};
pub use roles::{act, Access, Action, ActionOf, Role};
pub use team_auth::{TeamAuth, TeamAuthError};

/// The team whose owners are admins (Concourse's admin team).
pub const MAIN_TEAM: &str = "main";
