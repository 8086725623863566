//! Copies a container's log from its worker into the build log, from the
//! offset the step has reached, so a resumed build neither repeats nor loses
//! output.

use std::time::Duration;

use futures_util::StreamExt;
use hangar_core::backoff::{Backoff, Change};
use hangar_core::vars::redact::Redactor;

use super::context::BuildContext;

/// Follows the log until the worker ends the stream after the container
/// exited; reconnects after a dropped connection. Returns the final offset.
/// The caller cancels it (drops the future) when the step is abandoned.
pub(crate) async fn pump(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    handle: &str,
    start: i64,
) -> i64 {
    let mut offset = start;
    let mut pending: Vec<u8> = Vec::new();
    // Secrets split between two chunks are redacted too: the redactor holds
    // back what could begin one, and `offset` counts only what was written.
    let mut redactor = Redactor::new(ctx.secrets());
    // The worker refusing the stream and the build log refusing a chunk
    // (web's own disk full) each back off, and each says so once.
    let mut stream_errors = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut write_errors = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        // After a reconnect, read again from the last byte written.
        pending.clear();
        redactor.reset();
        let logs = ctx
            .engine
            .workers()
            .container_logs(worker, handle, offset as u64)
            .await;
        let mut stream = match logs {
            Ok(r) => {
                if let Change::Recovered { failures } = stream_errors.succeeded() {
                    tracing::info!(%handle, failures, "the container's log stream is back");
                }
                r
            }
            Err(e) => {
                let (delay, change) = stream_errors.failed();
                if change == Change::StartedFailing {
                    tracing::debug!(%handle, error = %e, "log stream not available; retrying with backoff");
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
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
            let held_before = redactor.held_len();
            let text = redactor.push(&String::from_utf8_lossy(&pending[..cut]));
            let next = offset + (held_before + cut).saturating_sub(redactor.held_len()) as i64;
            if let Err(e) = ctx
                .engine
                .store()
                .append_step_log(ctx.build_id, step_id, &text, next, ctx.engine.now())
                .await
            {
                let (delay, change) = write_errors.failed();
                if change == Change::StartedFailing {
                    tracing::warn!(error = %e, "cannot write the build log; retrying the chunk with backoff");
                }
                tokio::time::sleep(delay).await;
                broken = true;
                break;
            }
            if let Change::Recovered { failures } = write_errors.succeeded() {
                tracing::info!(failures, "the build log takes writes again");
            }
            pending.drain(..cut);
            offset = next;
            ctx.engine.build_events().notify_waiters();
        }
        if !broken && redactor.held_len() > 0 {
            let next = offset + redactor.held_len() as i64;
            let text = redactor.finish();
            match ctx
                .engine
                .store()
                .append_step_log(ctx.build_id, step_id, &text, next, ctx.engine.now())
                .await
            {
                Ok(()) => {
                    offset = next;
                    ctx.engine.build_events().notify_waiters();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write the end of the build log; reading it again");
                    broken = true;
                }
            }
        }
        if !broken {
            return offset;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
