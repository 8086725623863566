//! Progress of `hangar execute`'s transfers, the way `fly execute` shows
//! it: a bar (or, when the size is not known, a counter) with bytes and the
//! rate, drawn on stderr only when stderr is a terminal. Otherwise nothing
//! is drawn, and a large transfer ends with one summary line.

use std::io::IsTerminal;
use std::time::Duration;

use hangar_core::build::human_bytes;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Below this, a transfer's summary line is left out when stderr is not a
/// terminal (a script's log need not hear about every small input).
const QUIET_BELOW: u64 = 8 << 20;

/// One upload or download being shown.
pub(crate) struct Transfer {
    bar: ProgressBar,
    /// "uploaded src", "downloaded out": what the summary line says.
    done: String,
    terminal: bool,
}

/// Whether progress is drawn: stderr is a terminal.
pub(crate) fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

impl Transfer {
    /// Starts showing a transfer. With `total`, a bar with percentage and
    /// time left; without, a counter.
    pub(crate) fn start(doing: &str, done: &str, total: Option<u64>) -> Transfer {
        let terminal = on_terminal();
        let target = if terminal {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(total, target);
        let template = match total {
            Some(_) => {
                "{prefix} [{wide_bar}] {binary_bytes}/{binary_total_bytes} \
                 {binary_bytes_per_sec} {eta}"
            }
            None => "{spinner} {prefix} {binary_bytes} {binary_bytes_per_sec} {elapsed}",
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(format!("hangar: {doing}"));
        if terminal {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Transfer {
            bar,
            done: done.to_string(),
            terminal,
        }
    }

    /// The counter to advance as bytes go (cheap to clone, for a stream's
    /// closure or a blocking thread).
    pub(crate) fn counter(&self) -> ProgressBar {
        self.bar.clone()
    }

    /// Ends the display with one line: `hangar: uploaded src: 20 MiB in
    /// 1.2s (12 MiB sent)`. Off a terminal, only for large transfers.
    pub(crate) fn finish(self, detail: &str) {
        let bytes = self.bar.position();
        let took = self.bar.elapsed();
        self.bar.finish_and_clear();
        if self.terminal || bytes >= QUIET_BELOW {
            eprintln!(
                "hangar: {}: {} in {:.2}s{detail}",
                self.done,
                human_bytes(bytes),
                took.as_secs_f64()
            );
        }
    }
}

/// Drops the bar from the screen when the transfer ends without
/// [`Transfer::finish`] (an error): its error is printed on a clean line.
impl Drop for Transfer {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

/// A spinner on stderr while a command waits (a check, a build not yet
/// started), on a terminal only; cleared when dropped.
pub(crate) struct Spinner(Option<ProgressBar>);

impl Spinner {
    pub(crate) fn start(what: &str) -> Spinner {
        if !on_terminal() {
            return Spinner(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_message(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner(Some(bar))
    }

    /// Prints `line` above the spinner (or as is, off a terminal).
    pub(crate) fn println(&self, line: &str) {
        match &self.0 {
            Some(bar) => bar.println(line),
            None => println!("{line}"),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
