//! Teams, logging in, and who the caller is (Concourse's shapes where it
//! has them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A team as `GET /api/v1/teams` lists it. `auth` (role → users and
/// groups) is shown only to the team's owners and admins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Team {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
}

/// `PUT /api/v1/teams/{team}`: the team's auth config as Concourse stores
/// it (`{"owner": {"users": ["local:alice"], "groups": []}, …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetTeam {
    pub auth: Value,
}

/// What a set-team did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamSaved {
    pub team: String,
    pub created: bool,
}

/// `PUT /api/v1/teams/{team}/rename`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameTeam {
    pub name: String,
}

/// `POST /api/v1/login`: a local user's name and password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    pub username: String,
    pub password: String,
}

/// Shows the name, never the password.
impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// `POST /api/v1/login/cli`: the CLI trades the one-time code a browser
/// login handed it, with the secret whose SHA-256 it sent to the login
/// page, for a session.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliCode {
    pub code: String,
    pub verifier: String,
}

/// Shows neither.
impl std::fmt::Debug for CliCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliCode").finish_non_exhaustive()
    }
}

/// A session: the bearer token to send, and when it ends at the latest.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub token: String,
    /// Unix millis.
    pub expires_at: i64,
    pub user: UserInfo,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("expires_at", &self.expires_at)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// `GET /api/v1/user`: who the caller is (Concourse's userinfo).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// `local`, `oidc`, or `token` for the admin token.
    pub connector: String,
    pub user_id: String,
    pub user_name: String,
    pub is_admin: bool,
    /// Team → the caller's roles there.
    pub teams: BTreeMap<String, Vec<String>>,
}
