//! Durations on the command line, in the `5s` / `5m` / `250ms` form.

use std::time::Duration;

/// Parses a duration; `0` alone means zero (used for "never" where a flag says so).
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); use forms like 250ms, 5s, 10m"))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_flag_forms() {
        let cases = [
            ("5s", Some(5_000)),
            ("15s", Some(15_000)),
            ("10m", Some(600_000)),
            ("250ms", Some(250)),
            ("1m30s", Some(90_000)),
            ("0", Some(0)),
            ("0s", Some(0)),
            ("5", None),
            ("five seconds", None),
            ("-5s", None),
            ("", None),
        ];
        for (text, ms) in cases {
            assert_eq!(parse(text).ok().map(millis), ms, "{text:?}");
        }
    }
}
