//! A resource action's stderr as it is written: read from the program's
//! pipe, cut into whole UTF-8 characters and handed on (to web, line by
//! line of a streamed answer) while the program runs, as Concourse shows a
//! get step's output live.
//!
//! Bounded: at most [`MAX_STDERR`] bytes of it are handed on; the rest is
//! read and dropped (a program blocked on a full pipe would otherwise run
//! into its timeout), and a last line says how much was dropped.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use hangar_api::http::ApiError;
use hangar_api::resources::{ActionEvent, ResourceActionResult, ACTION_EVENTS};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::resources_api::ActionError;

/// The most of an action's stderr the worker hands on.
pub(crate) const MAX_STDERR: u64 = 1024 * 1024;

/// How much is read from the pipe at a time: one event at most.
const CHUNK: usize = 16 * 1024;

/// Reads `pipe` to its end, sending its text to `out` as it comes.
pub(crate) async fn forward(
    mut pipe: impl AsyncRead + Unpin,
    out: mpsc::Sender<String>,
    what: &str,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let mut sent: u64 = 0;
    let mut dropped: u64 = 0;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(action = %what, error = %e, "cannot read the program's stderr; handing on what was read");
                break;
            }
        };
        let room = usize::try_from(MAX_STDERR - sent).unwrap_or(usize::MAX);
        let kept = n.min(room);
        dropped += (n - kept) as u64;
        if kept == 0 {
            continue;
        }
        sent += kept as u64;
        pending.extend_from_slice(&buf[..kept]);
        let text = take_text(&mut pending, sent == MAX_STDERR);
        // A receiver that went away (web hung up) ends the action anyway;
        // the pipe is still drained so the program is not blocked on it.
        if !text.is_empty() && out.send(text).await.is_err() {
            tracing::debug!(action = %what, "nobody reads the action's stderr any more");
        }
    }
    let mut last = take_text(&mut pending, true);
    if dropped > 0 {
        last.push_str(&format!(
            "\n[stderr cut: {dropped} more byte(s) past the first {MAX_STDERR} dropped on the worker]\n"
        ));
    }
    if !last.is_empty() {
        let _ = out.send(last).await;
    }
}

/// The whole UTF-8 characters at the start of `pending` (invalid bytes
/// replaced), leaving a character split by the read for the next one;
/// with `all`, everything.
pub(crate) fn take_text(pending: &mut Vec<u8>, all: bool) -> String {
    let cut = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        // At most 3 bytes of an unfinished character wait for the rest.
        Err(e) if e.error_len().is_none() && !all => e.valid_up_to(),
        Err(_) => pending.len(),
    };
    let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
    pending.drain(..cut);
    text
}

/// A running action, aborted (its program killed, its dir removed) when
/// whoever waits for it goes away.
pub(crate) struct Running(pub JoinHandle<Result<ResourceActionResult, ActionError>>);

impl Running {
    pub(crate) async fn finish(&mut self) -> Result<ResourceActionResult, ActionError> {
        (&mut self.0).await.map_err(ActionError::Panicked)?
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The answer to a resource action: without `streamed`, or when the
/// action ends before writing anything, one result (or error status) with
/// its stderr in it; otherwise one [`ActionEvent`] a line, as they come.
pub(crate) async fn respond(
    mut running: Running,
    mut stderr: mpsc::Receiver<String>,
    streamed: bool,
) -> Result<Response, ApiError> {
    let first = if streamed { stderr.recv().await } else { None };
    let Some(first) = first else {
        let mut text = String::new();
        while let Some(chunk) = stderr.recv().await {
            text.push_str(&chunk);
        }
        let mut result = running.finish().await?;
        result.stderr = text;
        return Ok(axum::Json(result).into_response());
    };
    let state = Some((running, stderr, Some(first)));
    let events = futures_util::stream::unfold(state, |state| async move {
        let (mut running, mut stderr, first) = state?;
        let next = match first {
            Some(text) => Some(text),
            None => stderr.recv().await,
        };
        let (event, rest) = match next {
            Some(text) => (ActionEvent::Stderr(text), Some((running, stderr, None))),
            // The pipe is done: the action's end is the last line.
            None => (end_event(running.finish().await), None),
        };
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(line), rest))
    });
    Ok((
        [(header::CONTENT_TYPE, ACTION_EVENTS)],
        Body::from_stream(events),
    )
        .into_response())
}

fn end_event(end: Result<ResourceActionResult, ActionError>) -> ActionEvent {
    match end {
        Ok(result) => ActionEvent::Result(result),
        Err(e) => {
            let e = ApiError::from(e);
            ActionEvent::Error(hangar_api::resources::ActionError {
                status: e.status.as_u16(),
                code: e.code.to_string(),
                message: e.message,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_for_their_rest_and_invalid_bytes_are_replaced() {
        let mut pending = "a\u{e9}".as_bytes().to_vec();
        let last = pending.pop().unwrap();
        assert_eq!(take_text(&mut pending, false), "a");
        pending.push(last);
        assert_eq!(take_text(&mut pending, false), "\u{e9}");
        let mut bad = vec![b'x', 0xff, b'y'];
        assert_eq!(take_text(&mut bad, false), "x\u{fffd}y");
        let mut cut = vec![b'z', 0xc3];
        assert_eq!(take_text(&mut cut, true), "z\u{fffd}");
        assert!(cut.is_empty());
    }

    #[tokio::test]
    async fn a_flood_is_cut_at_the_cap_and_drained_to_its_end() {
        let (mut w, r) = tokio::io::duplex(64 * 1024);
        let (tx, mut rx) = mpsc::channel(4);
        let reader = tokio::spawn(async move { forward(r, tx, "test").await });
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // 3 MiB of one line with invalid bytes in it.
            let mut block = vec![b'x'; 1024 * 1024];
            block[10] = 0xff;
            for _ in 0..3 {
                w.write_all(&block).await.unwrap();
            }
        });
        let mut got = String::new();
        while let Some(t) = rx.recv().await {
            got.push_str(&t);
        }
        writer.await.unwrap();
        reader.await.unwrap();
        assert!(got.contains('\u{fffd}'));
        assert!(
            got.ends_with(&format!(
                "[stderr cut: {} more byte(s) past the first {MAX_STDERR} dropped on the worker]\n",
                2 * 1024 * 1024
            )),
            "{}",
            &got[got.len() - 200..]
        );
        assert!(got.len() < MAX_STDERR as usize + 200);
    }
}
