//! Running resource type programs through a worker's API.

use hangar_api::resources::{ResourceAction, ResourceActionResult};

use crate::{decode, ClientError, WorkerApi};

impl WorkerApi {
    /// Runs `check` or `in` of a base resource type on the worker and waits
    /// for it to end.
    pub async fn resource_action(
        &self,
        action: &ResourceAction,
    ) -> Result<ResourceActionResult, ClientError> {
        let url = self.url(&["resource-actions"]);
        let resp = self
            .send(self.http.post(url.clone()).json(action), &url)
            .await?;
        decode(url, resp).await
    }
}
