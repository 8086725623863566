//! The real [`Workers`]: each call finds the worker's API and the token
//! that worker process made in its registration, and speaks HTTP to it.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use hangar_api::containers::{Container, ContainerSpec};
use hangar_api::resources::{ActionEvent, ResourceAction, ResourceActionResult};
use hangar_api::volume_grant;
use hangar_api::worker_api::{pull_codes, CreateVolume, PullVolume, Volume};
use hangar_client::{ClientError, WorkerApi};
use hangar_core::volumes::transfer::copy_encoding;
use hangar_store::Store;

use crate::workers::{ActionStderr, CallError, CopyError, LogStream, Workers};

/// Calls to workers over their HTTP API.
#[derive(Clone)]
pub struct HttpWorkers {
    store: Store,
    /// How long making a volume may take (half the age at which GC gives a
    /// `creating` row up, so a request still running never sees its row
    /// failed under it).
    create_timeout: Duration,
}

/// Long calls (an `in`, a copy of a big volume) end with the step's
/// cancellation or its worker's watch, not with a timer.
const LONG: Duration = Duration::from_secs(3600);
const SHORT: Duration = Duration::from_secs(60);

impl HttpWorkers {
    pub fn new(store: Store, create_timeout: Duration) -> HttpWorkers {
        HttpWorkers {
            store,
            create_timeout,
        }
    }

    /// The worker API client of a worker, from its registration. The token
    /// is the one this worker process made: web never presents a
    /// fleet-wide secret to a URL a worker named.
    pub async fn api(&self, worker: &str, timeout: Duration) -> Result<WorkerApi, CallError> {
        let (url, token) = self.endpoint(worker).await?;
        WorkerApi::new(&url, &token, timeout).map_err(|e| call_error(&e))
    }

    /// A worker's API address and its token, from its registration.
    async fn endpoint(&self, worker: &str) -> Result<(String, String), CallError> {
        let endpoint = self.store.worker_api_endpoint(worker).await.map_err(|e| {
            CallError::unreachable(format!("cannot read its API address and token: {e}"))
        })?;
        match endpoint {
            Some((Some(url), Some(token))) => Ok((url, token)),
            None => Err(CallError::refused(
                404,
                "not_found",
                format!("worker {worker} not found"),
            )),
            // Not the step's fault, nor a worker that broke: it was
            // registered without an API (web maps 409 to a conflict).
            Some(_) => Err(CallError::refused(
                409,
                "conflict",
                format!("worker {worker} serves no volume API"),
            )),
        }
    }
}

/// What a worker from before pulls answers to `PUT /volumes/{h}/pull`.
const NO_SUCH_ROUTE: &str = "no such route";

/// The encoding of a copy between the workers at these addresses
/// (`hangar_core::volumes::transfer::copy_encoding`).
fn encoding_between(source_url: &str, target: &WorkerApi) -> &'static str {
    let host = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default()
    };
    copy_encoding(&host(source_url), &host(target.base_url()))
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A copy through web, for a target worker that cannot pull: the source's
/// stream-out into the target's stream-in, gzipped. An error says whether
/// the source (`true`) or the target failed.
async fn relay(
    source: &WorkerApi,
    from_handle: &str,
    target: &WorkerApi,
    to_handle: &str,
) -> Result<(), (bool, CallError)> {
    let stream = source
        .stream_out(from_handle, "", true)
        .await
        .map_err(|e| (true, call_error(&e)))?;
    target
        .stream_in(
            to_handle,
            "",
            true,
            reqwest::Body::wrap_stream(stream.bytes_stream()),
        )
        .await
        .map(|_| ())
        .map_err(|e| (false, call_error(&e)))
}

/// The core's view of a client error.
pub fn call_error(e: &ClientError) -> CallError {
    match e {
        ClientError::Api {
            status,
            code,
            message,
        } => CallError::refused(status.as_u16(), code, message.clone()),
        other => CallError::unreachable(other.to_string()),
    }
}

impl Workers for HttpWorkers {
    fn create_volume<'a>(
        &'a self,
        worker: &'a str,
        req: &'a CreateVolume,
    ) -> BoxFuture<'a, Result<Volume, CallError>> {
        async move {
            let api = self.api(worker, self.create_timeout).await?;
            api.create_volume(req).await.map_err(|e| call_error(&e))
        }
        .boxed()
    }

    fn copy_volume<'a>(
        &'a self,
        from_worker: &'a str,
        from_handle: &'a str,
        to_worker: &'a str,
        to_handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CopyError>> {
        async move {
            let side = |worker: &str| {
                let worker = worker.to_string();
                move |error| CopyError { worker, error }
            };
            let (source_url, source_token) = self
                .endpoint(from_worker)
                .await
                .map_err(side(from_worker))?;
            let target = self.api(to_worker, LONG).await.map_err(side(to_worker))?;
            let pull = PullVolume {
                grant: volume_grant::sign(&source_token, from_handle, unix_ms()),
                encoding: Some(encoding_between(&source_url, &target).to_string()),
                source_url: source_url.clone(),
                source_handle: from_handle.to_string(),
            };
            match target.pull_volume(to_handle, &pull).await {
                Ok(_) => Ok(()),
                Err(ClientError::Api { code, message, .. })
                    if code == pull_codes::SOURCE_NOT_FOUND =>
                {
                    Err(side(from_worker)(CallError::refused(
                        404,
                        "not_found",
                        message,
                    )))
                }
                Err(ClientError::Api { code, message, .. })
                    if code == pull_codes::SOURCE_FAILED =>
                {
                    Err(side(from_worker)(CallError::unreachable(message)))
                }
                // A worker from before pulls: the bytes pass through web.
                Err(ClientError::Api {
                    status, message, ..
                }) if status.as_u16() == 404 && message == NO_SUCH_ROUTE => {
                    let source = WorkerApi::new(&source_url, &source_token, LONG)
                        .map_err(|e| side(from_worker)(call_error(&e)))?;
                    relay(&source, from_handle, &target, to_handle)
                        .await
                        .map_err(|(source_side, e)| {
                            side(if source_side { from_worker } else { to_worker })(e)
                        })
                }
                Err(e) => Err(side(to_worker)(call_error(&e))),
            }
        }
        .boxed()
    }

    fn resource_action<'a>(
        &'a self,
        worker: &'a str,
        req: &'a ResourceAction,
        stderr: ActionStderr,
    ) -> BoxFuture<'a, Result<ResourceActionResult, CallError>> {
        async move {
            let api = self.api(worker, LONG).await?;
            let mut events = api
                .resource_action_events(req)
                .await
                .map_err(|e| call_error(&e))?;
            loop {
                match events.next().await.map_err(|e| call_error(&e))? {
                    Some(ActionEvent::Stderr(text)) => {
                        // The step gone (its receiver dropped): the rest
                        // is read and dropped until the end.
                        let _ = stderr.send(text).await;
                    }
                    Some(ActionEvent::Result(result)) => return Ok(result),
                    Some(ActionEvent::Error(e)) => {
                        return Err(CallError::refused(e.status, &e.code, e.message))
                    }
                    None => {
                        return Err(CallError::unreachable(format!(
                            "worker {worker}'s answer to {} {} broke off before its end",
                            req.resource_type, req.action
                        )))
                    }
                }
            }
        }
        .boxed()
    }

    fn read_file<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, CallError>> {
        async move {
            let api = self.api(worker, SHORT).await?;
            api.read_file(handle, path)
                .await
                .map_err(|e| call_error(&e))
        }
        .boxed()
    }

    fn create_container<'a>(
        &'a self,
        worker: &'a str,
        spec: &'a ContainerSpec,
    ) -> BoxFuture<'a, Result<Container, CallError>> {
        async move {
            let api = self.api(worker, SHORT).await?;
            api.create_container(spec).await.map_err(|e| call_error(&e))
        }
        .boxed()
    }

    fn wait_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Container, CallError>> {
        async move {
            let api = self.api(worker, SHORT).await?;
            api.wait_container(handle, timeout)
                .await
                .map_err(|e| call_error(&e))
        }
        .boxed()
    }

    fn container_logs<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        offset: u64,
    ) -> BoxFuture<'a, Result<LogStream, CallError>> {
        async move {
            let api = self.api(worker, SHORT).await?;
            let resp = api
                .container_logs(handle, offset, true)
                .await
                .map_err(|e| call_error(&e))?;
            Ok(resp
                .bytes_stream()
                .map_err(|e| CallError::unreachable(e.to_string()))
                .boxed())
        }
        .boxed()
    }

    fn destroy_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        async move {
            let api = self.api(worker, SHORT).await?;
            api.destroy_container(handle)
                .await
                .map_err(|e| call_error(&e))
        }
        .boxed()
    }
}
