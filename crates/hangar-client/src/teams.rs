//! Logging in and out, who the caller is, and teams.

use hangar_api::teams::{CliCode, Login, RenameTeam, Session, SetTeam, Team, TeamSaved, UserInfo};
use reqwest::Method;

use crate::{Client, ClientError};

impl Client {
    /// Logs a local user in (a client without a token may call this).
    pub async fn login(&self, username: &str, password: &str) -> Result<Session, ClientError> {
        let body = Login {
            username: username.to_string(),
            password: password.to_string(),
        };
        self.call(Method::POST, self.url(&["login"]), Some(&body))
            .await
    }

    /// Trades the one-time code a browser login handed the CLI, and the
    /// secret whose SHA-256 it gave the login page, for a session.
    pub async fn login_with_code(
        &self,
        code: &str,
        verifier: &str,
    ) -> Result<Session, ClientError> {
        let body = CliCode {
            code: code.to_string(),
            verifier: verifier.to_string(),
        };
        self.call(Method::POST, self.url(&["login", "cli"]), Some(&body))
            .await
    }

    /// Ends this client's session.
    pub async fn logout(&self) -> Result<(), ClientError> {
        self.call_no_content::<()>(Method::POST, self.url(&["logout"]), None)
            .await
    }

    pub async fn user(&self) -> Result<UserInfo, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["user"]), None)
            .await
    }

    pub async fn teams(&self) -> Result<Vec<Team>, ClientError> {
        self.call::<(), _>(Method::GET, self.url(&["teams"]), None)
            .await
    }

    pub async fn set_team(
        &self,
        team: &str,
        auth: serde_json::Value,
    ) -> Result<TeamSaved, ClientError> {
        self.call(
            Method::PUT,
            self.url(&["teams", team]),
            Some(&SetTeam { auth }),
        )
        .await
    }

    pub async fn rename_team(&self, team: &str, name: &str) -> Result<(), ClientError> {
        let body = RenameTeam {
            name: name.to_string(),
        };
        self.call_no_content(
            Method::PUT,
            self.url(&["teams", team, "rename"]),
            Some(&body),
        )
        .await
    }

    pub async fn destroy_team(&self, team: &str) -> Result<(), ClientError> {
        self.call_no_content::<()>(Method::DELETE, self.url(&["teams", team]), None)
            .await
    }
}
