//! Resource checks: when a scope is due, how long a check may take, and
//! what a `check` script's answer means.
//!
//! A scope (the resources and resource types of one team sharing a type
//! and source) is checked as often as the most eager of its members asks
//! (`check_every`, Concourse's default 1m; `never` only on request) and
//! for as long as the most patient allows (`check_timeout`, default 1h).
//! Members in paused pipelines do not count: Concourse does not check
//! their resources until the pipeline is unpaused (explicit checks still
//! run).

use serde_json::Value;

use crate::task::parse_go_duration;

/// Concourse's default `check_every`.
pub const DEFAULT_CHECK_EVERY_MS: i64 = 60_000;
/// Concourse's default `check_timeout`.
pub const DEFAULT_CHECK_TIMEOUT_MS: i64 = 3_600_000;
/// The most versions one check may report; past it the check fails
/// rather than filling the database.
pub const MAX_VERSIONS_PER_CHECK: usize = 10_000;

/// One member's check settings, as its config says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSettings {
    /// `None`: `check_every: never`.
    pub every_ms: Option<i64>,
    pub timeout_ms: i64,
}

/// Reads `check_every` and `check_timeout` from a stored resource or
/// resource type config (the JSON the pipeline's set wrote). A value that
/// does not parse takes the default: the config was validated when set.
pub fn settings_of(config: &Value) -> CheckSettings {
    let millis = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .and_then(|s| parse_go_duration(s).ok())
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    let every_ms = match config.get("check_every") {
        Some(Value::String(s)) if s == "never" => None,
        other => Some(millis(other).unwrap_or(DEFAULT_CHECK_EVERY_MS).max(1)),
    };
    CheckSettings {
        every_ms,
        timeout_ms: millis(config.get("check_timeout")).unwrap_or(DEFAULT_CHECK_TIMEOUT_MS),
    }
}

/// A scope's settings from its checkable members: the shortest interval
/// (never only when every member says never) and the longest timeout.
/// No member: the scope is not checked periodically.
pub fn scope_settings(members: &[CheckSettings]) -> Option<CheckSettings> {
    let first = members.first()?;
    Some(CheckSettings {
        every_ms: members.iter().filter_map(|m| m.every_ms).min(),
        timeout_ms: members
            .iter()
            .map(|m| m.timeout_ms)
            .max()
            .unwrap_or(first.timeout_ms),
    })
}

/// When a scope is next due: never without an interval; at once if it was
/// never checked; else an interval after its last check ended.
pub fn next_check_at(every_ms: Option<i64>, last_finished: Option<i64>, now: i64) -> Option<i64> {
    let every = every_ms?;
    Some(match last_finished {
        None => now,
        Some(at) => at.saturating_add(every),
    })
}

/// The versions a `check` script printed, oldest first, as Concourse
/// reads them: a JSON array of objects whose values are strings.
pub fn versions_from_check(response: Option<&Value>) -> Result<Vec<Value>, String> {
    let Some(response) = response else {
        return Err("the check printed no JSON on stdout".into());
    };
    let Some(list) = response.as_array() else {
        return Err(format!(
            "the check printed {}, not a list of versions",
            kind(response)
        ));
    };
    if list.len() > MAX_VERSIONS_PER_CHECK {
        return Err(format!(
            "the check printed {} versions, more than the {MAX_VERSIONS_PER_CHECK} allowed",
            list.len()
        ));
    }
    for (i, v) in list.iter().enumerate() {
        let Some(fields) = v.as_object() else {
            return Err(format!("version {i} is {}, not an object", kind(v)));
        };
        if let Some((k, bad)) = fields.iter().find(|(_, f)| !f.is_string()) {
            return Err(format!(
                "version {i}: field {k:?} is {}, not a string",
                kind(bad)
            ));
        }
    }
    Ok(list.clone())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn s(every_ms: Option<i64>, timeout_ms: i64) -> CheckSettings {
        CheckSettings {
            every_ms,
            timeout_ms,
        }
    }

    #[test]
    fn settings_are_read_from_a_stored_config_with_concourse_defaults() {
        let cases = [
            (json!({}), s(Some(60_000), 3_600_000)),
            (json!({"check_every": "10s"}), s(Some(10_000), 3_600_000)),
            (json!({"check_every": "never"}), s(None, 3_600_000)),
            (json!({"check_timeout": "5m"}), s(Some(60_000), 300_000)),
            (
                json!({"check_every": "1h30m", "check_timeout": "1s"}),
                s(Some(5_400_000), 1_000),
            ),
            // Validated at set; something else stored reads as the default.
            (json!({"check_every": 5}), s(Some(60_000), 3_600_000)),
            // A zero interval would make a scope due in a loop.
            (json!({"check_every": "0s"}), s(Some(1), 3_600_000)),
        ];
        for (config, want) in cases {
            assert_eq!(settings_of(&config), want, "{config}");
        }
    }

    #[test]
    fn a_scope_takes_the_shortest_interval_and_the_longest_timeout() {
        let cases: &[(&[CheckSettings], Option<CheckSettings>)] = &[
            (&[], None),
            (&[s(None, 10)], Some(s(None, 10))),
            (&[s(None, 10), s(Some(60), 5)], Some(s(Some(60), 10))),
            (&[s(Some(60), 10), s(Some(30), 20)], Some(s(Some(30), 20))),
        ];
        for (members, want) in cases {
            assert_eq!(scope_settings(members), *want, "{members:?}");
        }
    }

    #[test]
    fn next_check_times() {
        let cases = [
            (None, None, None),
            (None, Some(5), None),
            (Some(60), None, Some(1_000)),
            (Some(60), Some(500), Some(560)),
            (Some(i64::MAX), Some(500), Some(i64::MAX)),
        ];
        for (every, last, want) in cases {
            assert_eq!(
                next_check_at(every, last, 1_000),
                want,
                "{every:?} {last:?}"
            );
        }
    }

    #[test]
    fn check_output_must_be_a_list_of_string_maps() {
        let ok = json!([{"ref": "a"}, {"ref": "b", "n": "2"}]);
        assert_eq!(versions_from_check(Some(&ok)).unwrap().len(), 2);
        assert_eq!(versions_from_check(Some(&json!([]))).unwrap().len(), 0);
        let bad = [
            (None, "printed no JSON"),
            (Some(json!({"ref": "a"})), "an object, not a list"),
            (Some(json!(["a"])), "version 0 is a string"),
            (Some(json!([{"ref": 1}])), "field \"ref\" is a number"),
            (Some(json!([{"ref": "a"}, null])), "version 1 is null"),
        ];
        for (response, says) in bad {
            let err = versions_from_check(response.as_ref()).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        let many = Value::Array(vec![json!({"r": "x"}); MAX_VERSIONS_PER_CHECK + 1]);
        assert!(versions_from_check(Some(&many))
            .unwrap_err()
            .contains("more than"));
    }
}
