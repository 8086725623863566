//! Copies a container's log from its worker into the build log, from the
//! offset the step has reached, so a resumed build neither repeats nor loses
//! output.

use std::time::Duration;

use futures_util::StreamExt;
use hangar_client::WorkerApi;

use super::context::BuildContext;

/// Follows the log until the worker ends the stream after the container
/// exited; reconnects after a dropped connection. Returns the final offset.
/// The caller cancels it (drops the future) when the step is abandoned.
pub async fn pump(
    ctx: &BuildContext,
    step_id: &str,
    api: &WorkerApi,
    handle: &str,
    start: i64,
) -> i64 {
    let mut offset = start;
    let mut pending: Vec<u8> = Vec::new();
    loop {
        // After a reconnect, read again from the last byte written.
        pending.clear();
        let resp = match api.container_logs(handle, offset as u64, true).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%handle, error = %e, "log stream not available; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut stream = resp.bytes_stream();
        let mut broken = false;
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else {
                broken = true;
                break;
            };
            pending.extend_from_slice(&chunk);
            // Only whole UTF-8 characters go to the log; a split one waits
            // for the rest of its bytes.
            let cut = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => pending.len(), // invalid bytes: written lossily
            };
            let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
            let next = offset + cut as i64;
            if let Err(e) = ctx
                .web
                .store()
                .append_step_log(ctx.build_id, step_id, &text, next, ctx.web.now())
                .await
            {
                tracing::warn!(error = %e, "cannot write the build log; retrying the chunk");
                broken = true;
                break;
            }
            pending.drain(..cut);
            offset = next;
            ctx.web.build_events().notify_waiters();
        }
        if !broken {
            return offset;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
