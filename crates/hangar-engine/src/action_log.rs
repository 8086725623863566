//! A resource action's stderr in the build log as the worker hands it on,
//! attributed to the step it ran for (a get step, or the task whose image
//! it fetches), as Concourse shows a get step's `in` output under that
//! step. It goes the way a task's output goes: build events of kind `log`
//! that `hangar watch` and `hangar execute` print as they come.
//!
//! Bounded per step: a chatty or hostile action cannot fill web's memory
//! (pieces are written as they come, the channel from the worker is
//! bounded) nor the database (pieces arriving together are written as one
//! event, at most one every [`BATCH_WINDOW`] unless [`BATCH_BYTES`] fill
//! sooner, so a program writing a byte at a time makes few rows; past
//! [`MAX_PER_STEP`] bytes nothing more is kept, and the log says so once).
//! The count lives with the build on the node running it: a build resumed
//! by another node counts afresh.

use std::time::Duration;

use hangar_core::build::{human_bytes, BuildEventKind};
use tokio::sync::mpsc;

use crate::context::BuildContext;

/// The most bytes of resource action output kept per step, all its
/// actions (check, in, image fetches) and attempts together.
pub(crate) const MAX_PER_STEP: u64 = 1024 * 1024;

/// How long pieces are gathered into one event after the first arrives:
/// short enough to read as live.
const BATCH_WINDOW: Duration = Duration::from_millis(200);
/// An event is written once it holds this much, window or not.
const BATCH_BYTES: usize = 64 * 1024;

/// Writes what arrives on `stderr` into the step's log until the sender
/// is dropped (the action ended).
pub(crate) async fn copy(ctx: &BuildContext, step_id: &str, mut stderr: mpsc::Receiver<String>) {
    while let Some(mut text) = stderr.recv().await {
        let until = tokio::time::Instant::now() + BATCH_WINDOW;
        let mut ended = false;
        while text.len() < BATCH_BYTES {
            match tokio::time::timeout_at(until, stderr.recv()).await {
                Ok(Some(more)) => text.push_str(&more),
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(_) => break,
            }
        }
        write(ctx, step_id, &text).await;
        if ended {
            return;
        }
    }
}

/// Writes `text` into the step's log, within the step's bound.
pub(crate) async fn write(ctx: &BuildContext, step_id: &str, text: &str) {
    if text.is_empty() {
        return;
    }
    let (kept, cut_now) = {
        let mut counts = ctx.action_output.lock().unwrap_or_else(|p| p.into_inner());
        let used = counts.entry(step_id.to_string()).or_default();
        let (kept, cut_now) = within(*used, text);
        if cut_now || kept.is_empty() {
            // Past the bound: counted as full, so the note is said once.
            *used = MAX_PER_STEP + 1;
        } else {
            *used += kept.len() as u64;
        }
        (kept, cut_now)
    };
    if !kept.is_empty() {
        ctx.log(Some(step_id), BuildEventKind::Log, kept).await;
    }
    if cut_now {
        ctx.log(
            Some(step_id),
            BuildEventKind::Step,
            &format!(
                "output of resource actions cut at {}: the rest is not kept",
                human_bytes(MAX_PER_STEP)
            ),
        )
        .await;
    }
}

/// What of `text` fits after `used` bytes (cut at a character boundary),
/// and whether this is where the output is cut.
fn within(used: u64, text: &str) -> (&str, bool) {
    if used > MAX_PER_STEP {
        return ("", false);
    }
    let room = usize::try_from(MAX_PER_STEP - used).unwrap_or(usize::MAX);
    if text.len() <= room {
        return (text, false);
    }
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_cuts_at_a_character_and_then_keeps_nothing() {
        let full = MAX_PER_STEP;
        assert_eq!(within(0, "abc"), ("abc", false));
        assert_eq!(within(full - 2, "abc"), ("ab", true));
        // "é" is two bytes: one byte of room keeps none of it.
        assert_eq!(within(full - 1, "\u{e9}x"), ("", true));
        assert_eq!(within(full, "x"), ("", true));
        assert_eq!(within(full + 1, "x"), ("", false));
    }
}
