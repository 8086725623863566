//! Pins and enabled versions of a pipeline's resources.

use hangar_api::pins::{PinRequest, ResourcePin, VersionRequest};
use reqwest::Method;
use serde_json::{Map, Value};

use crate::{Client, ClientError};

impl Client {
    /// Pins the resource to its newest version having `version`'s fields.
    pub async fn pin_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Map<String, Value>,
        comment: Option<String>,
    ) -> Result<(), ClientError> {
        self.call_no_content(
            Method::PUT,
            self.pipelines_url(team, &[pipeline, "resources", resource, "pin"]),
            Some(&PinRequest { version, comment }),
        )
        .await
    }

    pub async fn unpin_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<(), ClientError> {
        self.call_no_content::<()>(
            Method::PUT,
            self.pipelines_url(team, &[pipeline, "resources", resource, "unpin"]),
            None,
        )
        .await
    }

    /// The resource's pin, if any.
    pub async fn resource_pin(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<Option<ResourcePin>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            self.pipelines_url(team, &[pipeline, "resources", resource, "pin"]),
            None,
        )
        .await
    }

    /// Enables or disables the resource's newest version having
    /// `version`'s fields.
    pub async fn set_resource_version_enabled(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Map<String, Value>,
        enabled: bool,
    ) -> Result<(), ClientError> {
        let verb = if enabled { "enable" } else { "disable" };
        self.call_no_content(
            Method::PUT,
            self.pipelines_url(team, &[pipeline, "resources", resource, "versions", verb]),
            Some(&VersionRequest { version }),
        )
        .await
    }
}
