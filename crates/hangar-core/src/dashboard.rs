//! What the web dashboard computes without I/O: the column each job of a
//! pipeline's graph stands in (and the whole graph's layout, [`graph`]),
//! names shortened to fit a box, and how long things took, in words.

use std::borrow::Cow;
use std::collections::BTreeMap;

pub mod graph;

/// Each job's column in the pipeline graph: 0 for a job no `passed`
/// constraint feeds, else one more than the deepest job it passes from.
/// `passed` maps a job to the jobs its gets' `passed` name. A cycle (which
/// config validation lets through only across distinct resources) cannot
/// make the walk loop: a job already on the path counts as depth 0.
pub fn job_columns(jobs: &[String], passed: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
    for job in jobs {
        let mut on_path = Vec::new();
        depth_of(job, passed, &mut depth, &mut on_path);
    }
    let width = depth.values().copied().max().map_or(0, |d| d + 1);
    let mut columns = vec![Vec::new(); width];
    for job in jobs {
        columns[depth[job.as_str()]].push(job.clone());
    }
    // A cycle can leave a depth nobody stands at.
    columns.retain(|c| !c.is_empty());
    columns
}

fn depth_of<'a>(
    job: &'a str,
    passed: &'a BTreeMap<String, Vec<String>>,
    depth: &mut BTreeMap<&'a str, usize>,
    on_path: &mut Vec<&'a str>,
) -> usize {
    if let Some(d) = depth.get(job) {
        return *d;
    }
    if on_path.contains(&job) {
        return 0;
    }
    on_path.push(job);
    let d = passed
        .get(job)
        .into_iter()
        .flatten()
        .filter(|upstream| upstream.as_str() != job)
        .map(|upstream| depth_of(upstream, passed, depth, on_path) + 1)
        .max()
        .unwrap_or(0);
    on_path.pop();
    depth.insert(job, d);
    d
}

/// A name cut to at most `max` characters, its end replaced by `…` when
/// it had to be cut (the page shows the whole name beside it, in a title).
pub fn shorten(name: &str, max: usize) -> Cow<'_, str> {
    if name.chars().count() <= max {
        return Cow::Borrowed(name);
    }
    let kept: String = name.chars().take(max.saturating_sub(1)).collect();
    Cow::Owned(format!("{kept}…"))
}

/// Whether a version (its JSON) is the one a pin (its JSON) names: every
/// field of the pin has the version's value. A config's `version:` may
/// name fewer fields than the versions have, as Concourse allows.
pub fn pin_names_version(pin: &str, version: &str) -> bool {
    let parse =
        |text: &str| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text);
    match (parse(pin), parse(version)) {
        (Ok(pin), Ok(version)) => {
            !pin.is_empty() && pin.iter().all(|(k, v)| version.get(k) == Some(v))
        }
        _ => false,
    }
}

/// A duration as a person reads it: `850ms`, `42s`, `3m 05s`, `2h 10m`.
pub fn duration_words(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A moment as UTC `YYYY-MM-DD HH:MM:SS` (the civil date from days since
/// the epoch, Howard Hinnant's algorithm), so an operator can line events
/// up with other logs.
pub fn utc_words(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn columns_follow_passed_depth() {
        // (jobs in config order, each job's passed jobs, the columns)
        type Case<'a> = (
            &'a [&'a str],
            &'a [(&'a str, &'a [&'a str])],
            &'a [&'a [&'a str]],
        );
        let cases: &[Case] = &[
            (&[], &[], &[]),
            (&["a", "b"], &[], &[&["a", "b"]]),
            (
                &["unit", "integration", "deploy"],
                &[("integration", &["unit"]), ("deploy", &["integration"])],
                &[&["unit"], &["integration"], &["deploy"]],
            ),
            // The deepest upstream decides; config order is kept within a column.
            (
                &["deploy", "a", "b"],
                &[("deploy", &["a", "b"]), ("b", &["a"])],
                &[&["a"], &["b"], &["deploy"]],
            ),
            // A cycle ends instead of looping.
            (
                &["x", "y"],
                &[("x", &["y"]), ("y", &["x"])],
                &[&["y"], &["x"]],
            ),
            // A job passing from itself or from an unknown job.
            (&["s"], &[("s", &["s"])], &[&["s"]]),
        ];
        for (jobs, edges, want) in cases {
            let passed = edges
                .iter()
                .map(|(j, up)| (j.to_string(), names(up)))
                .collect();
            let want: Vec<Vec<String>> = want.iter().map(|c| names(c)).collect();
            assert_eq!(
                job_columns(&names(jobs), &passed),
                want,
                "{jobs:?} {edges:?}"
            );
        }
    }

    #[test]
    fn long_names_are_cut_with_an_ellipsis() {
        for (name, max, want) in [
            ("unit", 10, "unit"),
            ("exactly-10", 10, "exactly-10"),
            ("one-too-long", 11, "one-too-lo…"),
            // Characters, not bytes: a cut never splits one.
            ("ééééé", 3, "éé…"),
            ("xy", 1, "…"),
        ] {
            assert_eq!(shorten(name, max), want, "{name} {max}");
        }
    }

    #[test]
    fn a_pin_names_the_versions_holding_its_fields() {
        for (pin, version, want) in [
            (r#"{"ref":"a"}"#, r#"{"ref":"a"}"#, true),
            (r#"{"ref":"a"}"#, r#"{"ref":"a","tag":"v1"}"#, true),
            (r#"{"ref":"a"}"#, r#"{"ref":"b"}"#, false),
            (r#"{"ref":"a","tag":"v1"}"#, r#"{"ref":"a"}"#, false),
            (r#"{}"#, r#"{"ref":"a"}"#, false),
            ("not json", r#"{"ref":"a"}"#, false),
        ] {
            assert_eq!(pin_names_version(pin, version), want, "{pin} {version}");
        }
    }

    #[test]
    fn durations_read_as_words() {
        for (ms, want) in [
            (-5, "0ms"),
            (850, "850ms"),
            (42_000, "42s"),
            (185_000, "3m 05s"),
            (7_800_000, "2h 10m"),
        ] {
            assert_eq!(duration_words(ms), want, "{ms}");
        }
    }

    #[test]
    fn moments_read_as_utc() {
        for (ms, want) in [
            (0, "1970-01-01 00:00:00"),
            (1_700_000_000_000, "2023-11-14 22:13:20"),
            (951_782_400_000, "2000-02-29 00:00:00"),
            (-1000, "1969-12-31 23:59:59"),
        ] {
            assert_eq!(utc_words(ms), want, "{ms}");
        }
    }
}
