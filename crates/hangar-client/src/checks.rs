//! Resource checks through web's API: ask for one, read a resource's (or
//! resource type's) check state.

use hangar_api::checks::{CheckRequest, CheckRequested, CheckStatus};
use reqwest::Method;

use crate::{Client, ClientError};

/// Which of a pipeline's things is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Resource,
    ResourceType,
}

impl Checked {
    fn segment(self) -> &'static str {
        match self {
            Checked::Resource => "resources",
            Checked::ResourceType => "resource-types",
        }
    }
}

impl Client {
    /// Asks for a check of a resource or resource type now.
    pub async fn request_check(
        &self,
        team: &str,
        pipeline: &str,
        what: Checked,
        name: &str,
        request: &CheckRequest,
    ) -> Result<CheckRequested, ClientError> {
        let url = self.url(&[
            "teams",
            team,
            "pipelines",
            pipeline,
            what.segment(),
            name,
            "check",
        ]);
        self.call(Method::POST, url, Some(request)).await
    }

    /// A resource's or resource type's check state.
    pub async fn check_status(
        &self,
        team: &str,
        pipeline: &str,
        what: Checked,
        name: &str,
    ) -> Result<CheckStatus, ClientError> {
        let url = self.url(&[
            "teams",
            team,
            "pipelines",
            pipeline,
            what.segment(),
            name,
            "check",
        ]);
        self.call::<(), _>(Method::GET, url, None).await
    }
}
