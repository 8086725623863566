//! Plain-text tables and times for the listings.

/// Renders rows as left-aligned columns separated by two spaces.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                l.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// "3s ago", "5m ago"; times in the future (clock skew) read "just now".
pub(crate) fn ago(now_ms: i64, at_ms: i64) -> String {
    let d = now_ms - at_ms;
    if d < 1000 {
        return "just now".into();
    }
    format!("{} ago", coarse(d))
}

/// A duration rounded to its largest unit: 42s, 5m, 3h, 2d.
pub(crate) fn coarse(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Local wall-clock time would need a time zone database; UTC is unambiguous.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// This process's standard output has no reader any more (`hangar builds |
/// head -1`). The one error that ends the CLI without a word: every other
/// broken pipe (to web, to a child) is a failure to report.
#[derive(Debug)]
pub(crate) struct StdoutClosed(pub std::io::Error);

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutClosed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// An error writing to stdout, as the CLI reports it: a broken pipe becomes
/// [`StdoutClosed`].
pub(crate) fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed(e))
    } else {
        anyhow::Error::new(e).context("write to standard output")
    }
}

/// Writes `text` to stdout and flushes it, returning an error (never
/// panicking, as `print!` does) when stdout is closed.
pub(crate) fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(stdout_error)
}

/// Writes `value` to stdout as pretty JSON and a newline (`--json`).
pub(crate) fn emit_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// Whether the error is this process's standard output losing its reader,
/// anywhere in its chain. A broken pipe to anything else is not.
pub(crate) fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_closed_stdout_is_silent() {
        let pipe = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(is_stdout_closed(&stdout_error(pipe())));
        assert!(is_stdout_closed(
            &stdout_error(pipe()).context("print the build log")
        ));
        // A broken pipe anywhere else (web closing an upload) is reported.
        assert!(!is_stdout_closed(
            &anyhow::Error::new(pipe()).context("upload input src")
        ));
        assert!(!is_stdout_closed(&stdout_error(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied
        ))));
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["name", "state"],
            &[
                vec!["w-1".into(), "running".into()],
                vec!["worker-10".into(), "stalled".into()],
            ],
        );
        assert_eq!(
            t,
            "name       state\nw-1        running\nworker-10  stalled\n"
        );
    }

    #[test]
    fn times_read_plainly() {
        assert_eq!(ago(10_000, 9_500), "just now");
        assert_eq!(ago(10_000, 5_000), "5s ago");
        assert_eq!(ago(400_000, 100_000), "5m ago");
        assert_eq!(coarse(3 * 86_400_000), "3d");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(1_764_694_800_000), "2025-12-02 17:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00Z");
    }
}

/// An error as the user reads it: each cause once (a cause whose words the
/// line already holds is left out: reqwest's chain repeats itself), and
/// what to do when web cannot be reached at all.
pub(crate) fn error_words(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let words = cause.to_string();
        if line.contains(&words) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&words);
        // Its display holds the root cause; reqwest's chain below it says
        // the same at every level.
        if matches!(
            cause.downcast_ref::<hangar_client::ClientError>(),
            Some(hangar_client::ClientError::Transport { .. })
        ) {
            break;
        }
    }
    let refused = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<hangar_client::ClientError>(),
            Some(hangar_client::ClientError::Transport { source, .. }) if source.is_connect()
        )
    });
    if refused {
        line.push_str(
            "\n  is web running there? Check the URL (--url, HANGAR_URL or the target's, \
             `hangar targets`); `hangar quickstart` starts one on this machine",
        );
    }
    line
}

#[cfg(test)]
mod error_words_tests {
    use super::error_words;

    #[test]
    fn each_cause_is_said_once() {
        let inner = std::io::Error::other("Connection refused (os error 111)");
        let e = anyhow::Error::new(inner)
            .context("cannot reach http://x/: Connection refused (os error 111)")
            .context("list workers");
        assert_eq!(
            error_words(&e),
            "list workers: cannot reach http://x/: Connection refused (os error 111)"
        );
    }
}
