//! A worker's life on one line, for its dashboard page: its lifecycle
//! events (registrations with their state kept or lost, stalls, removals)
//! and the steps the infrastructure retried elsewhere because of it, each
//! placed by its time, so an incident (a pod OOM-killed and recreated
//! under its name with its volumes wiped) reads at a glance.

use crate::events::EventKind;
use crate::UnixMillis;

/// How a mark on the timeline reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// The worker came (back) with what it had.
    Good,
    /// Something was lost or went wrong.
    Bad,
    /// An operator's doing (landing, retiring) or bookkeeping.
    Quiet,
}

impl Tone {
    pub fn as_str(self) -> &'static str {
        match self {
            Tone::Good => "good",
            Tone::Bad => "bad",
            Tone::Quiet => "quiet",
        }
    }
}

pub fn tone(kind: EventKind) -> Tone {
    match kind {
        EventKind::Registered | EventKind::RestartedStateKept => Tone::Good,
        EventKind::RestartedStateLost
        | EventKind::Stalled
        | EventKind::RemovedAfterStallTimeout
        | EventKind::TakeoverRefused => Tone::Bad,
        EventKind::Landing
        | EventKind::Landed
        | EventKind::Retiring
        | EventKind::Retired
        | EventKind::Pruned
        | EventKind::RemovedEphemeral => Tone::Quiet,
    }
}

/// The shortest stretch a timeline shows, so a few marks close together
/// do not fill it edge to edge.
pub const MIN_SPAN_MS: i64 = 60 * 1000;

/// How far back a timeline looks: its `?span=` on the worker's page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Hour,
    Day,
    Week,
    All,
}

impl Window {
    pub const ALL: [Window; 4] = [Window::Hour, Window::Day, Window::Week, Window::All];

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "24h",
            Window::Week => "7d",
            Window::All => "all",
        }
    }

    pub fn parse(s: &str) -> Option<Window> {
        Window::ALL.into_iter().find(|w| w.as_str() == s)
    }

    fn ms(self) -> Option<i64> {
        match self {
            Window::Hour => Some(3_600_000),
            Window::Day => Some(86_400_000),
            Window::Week => Some(7 * 86_400_000),
            Window::All => None,
        }
    }
}

/// The stretch of time the timeline shows: from the earliest mark within
/// `window` (a twentieth of the stretch before it, so it is not on the
/// edge; at least [`MIN_SPAN_MS`] in all) to `now` (or the latest mark,
/// if a clock put one after it). Marks before it are not drawn.
pub fn span(times: &[UnixMillis], now: UnixMillis, window: Window) -> (UnixMillis, UnixMillis) {
    let end = times.iter().copied().fold(now, i64::max);
    let from = window.ms().map_or(i64::MIN, |ms| end - ms);
    let earliest = times
        .iter()
        .copied()
        .filter(|&t| t >= from)
        .fold(end, i64::min);
    let start = (earliest - (end - earliest) / 20).min(end - MIN_SPAN_MS);
    (start, end)
}

/// Where `at` falls on a line `width` long showing `span`.
pub fn x_of(at: UnixMillis, span: (UnixMillis, UnixMillis), width: f64) -> f64 {
    let (start, end) = span;
    let len = (end - start).max(1) as f64;
    ((at - start) as f64 / len).clamp(0.0, 1.0) * width
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_tone() {
        for kind in EventKind::ALL {
            let t = tone(kind);
            let want = match kind.as_str() {
                "registered" | "restarted-state-kept" => Tone::Good,
                "restarted-state-lost"
                | "stalled"
                | "removed-after-stall-timeout"
                | "takeover-refused" => Tone::Bad,
                _ => Tone::Quiet,
            };
            assert_eq!(t, want, "{kind:?}");
        }
    }

    #[test]
    fn the_span_holds_the_windows_marks_and_at_least_a_minute() {
        let now = 1_000_000_000;
        let h = 3_600_000;
        // (marks, window, span)
        let cases: [(&[i64], Window, (i64, i64)); 6] = [
            (&[], Window::All, (now - MIN_SPAN_MS, now)),
            (&[now - 1000], Window::All, (now - MIN_SPAN_MS, now)),
            (&[now - 20 * h, now - 1], Window::All, (now - 21 * h, now)),
            // The day's window leaves out a mark of two days ago.
            (
                &[now - 48 * h, now - 2 * h],
                Window::Day,
                (now - 2 * h - 360_000, now),
            ),
            (&[now - 48 * h], Window::Day, (now - MIN_SPAN_MS, now)),
            // A mark ahead of now (another node's clock) stretches it.
            (
                &[now + 500],
                Window::Hour,
                (now + 500 - MIN_SPAN_MS, now + 500),
            ),
        ];
        for (marks, window, want) in cases {
            assert_eq!(span(marks, now, window), want, "{marks:?} {window:?}");
        }
        for w in Window::ALL {
            assert_eq!(Window::parse(w.as_str()), Some(w));
        }
        assert_eq!(Window::parse("2h"), None);
    }

    #[test]
    fn marks_fall_in_place_and_never_outside() {
        let s = (1_000, 3_000);
        let cases = [
            (1_000, 0.0),
            (2_000, 500.0),
            (3_000, 1000.0),
            (0, 0.0),
            (9_000, 1000.0),
        ];
        for (at, want) in cases {
            assert_eq!(x_of(at, s, 1000.0), want, "{at}");
        }
        assert_eq!(x_of(5, (5, 5), 1000.0), 0.0);
    }
}
