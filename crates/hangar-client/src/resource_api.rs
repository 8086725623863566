//! Running resource type programs through a worker's API.

use hangar_api::resources::{ActionEvent, ResourceAction, ResourceActionResult, ACTION_EVENTS};
use reqwest::{header, Url};

use crate::{decode, ClientError, WorkerApi};

/// The longest line of a streamed answer: a stderr event is at most a
/// read of the program's pipe, a result at most its bounded answer.
const MAX_LINE: usize = 4 * 1024 * 1024;

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

    /// Runs `check` or `in` and reads its answer as it comes: its stderr
    /// while it runs, then its result (see [`ActionEvents`]).
    pub async fn resource_action_events(
        &self,
        action: &ResourceAction,
    ) -> Result<ActionEvents, ClientError> {
        let url = self.url(&["resource-actions"]);
        let req = self
            .http
            .post(url.clone())
            .header(header::ACCEPT, ACTION_EVENTS)
            .json(action);
        let resp = self.send(req, &url).await?;
        let streamed = resp.status().is_success()
            && resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with(ACTION_EVENTS));
        if streamed {
            return Ok(ActionEvents {
                url,
                resp: Some(resp),
                buf: Vec::new(),
                single: None,
            });
        }
        // An error status, an action that wrote nothing before it ended,
        // or an older worker: one answer.
        let result: ResourceActionResult = decode(url.clone(), resp).await?;
        Ok(ActionEvents {
            url,
            resp: None,
            buf: Vec::new(),
            single: Some(ActionEvent::Result(result)),
        })
    }
}

/// The events of a resource action, one at a time: [`ActionEvent::Stderr`]
/// while it runs, then one [`ActionEvent::Result`] or
/// [`ActionEvent::Error`]. `None` after the last, or when the answer broke
/// off before it (the caller treats that as the worker unreachable).
pub struct ActionEvents {
    url: Url,
    resp: Option<reqwest::Response>,
    buf: Vec<u8>,
    single: Option<ActionEvent>,
}

impl ActionEvents {
    pub async fn next(&mut self) -> Result<Option<ActionEvent>, ClientError> {
        if let Some(event) = self.single.take() {
            return Ok(Some(event));
        }
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                match serde_json::from_slice::<ActionEvent>(&line) {
                    Ok(event) => return Ok(Some(event)),
                    // A kind of event a newer worker sends: skipped, as
                    // responses tolerate what they do not know.
                    Err(_) if line.first() == Some(&b'{') => continue,
                    Err(e) => return Err(ClientError::Decode(format!("{}: {e}", self.url))),
                }
            }
            if self.buf.len() > MAX_LINE {
                return Err(ClientError::Decode(format!(
                    "{}: a line longer than {MAX_LINE} bytes",
                    self.url
                )));
            }
            let Some(resp) = self.resp.as_mut() else {
                return Ok(None);
            };
            match resp.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) => {
                    self.resp = None;
                    return Ok(None);
                }
                Err(source) => {
                    self.resp = None;
                    return Err(ClientError::Transport {
                        url: self.url.to_string(),
                        source,
                    });
                }
            }
        }
    }
}
