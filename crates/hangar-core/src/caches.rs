//! The keys under which workers hold caches, so a later step can find (and
//! placement can prefer) a worker that already has what the step needs.

use serde_json::Value;

/// A fetched resource version: the same type, source, params and version
/// are the same bytes, whichever build fetched them (Concourse's resource
/// cache is keyed the same way). Params are part of it because they change
/// what `in` fetches (a shallow `depth`, `submodules`, a file glob): a get
/// with other params must not find a cache fetched with these.
///
/// Absent params (`null`) and empty ones (`{}`) are one key: a resource
/// gets no params either way, and a get without params keeps the key it had
/// before params counted, so caches already on workers stay usable.
/// Object key order never matters (the JSON is written canonically, keys
/// sorted at every level, whatever map order serde_json was built with).
pub fn resource_cache_key(
    resource_type: &str,
    source: &Value,
    params: &Value,
    version: &Value,
) -> String {
    let mut text = format!(
        "{resource_type}\u{0}{}\u{0}{}",
        canonical(source),
        canonical(version)
    );
    let no_params = match params {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    };
    if !no_params {
        // NUL never occurs in JSON text, so a fourth part cannot be
        // mistaken for the end of the version.
        text.push('\u{0}');
        text.push_str(&canonical(params));
    }
    format!("{resource_type}@{}", digest(text.as_bytes()))
}

/// JSON text with every object's keys sorted, so equal values give equal
/// text even if serde_json's `preserve_order` is turned on by some crate.
fn canonical(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// The job part of a task cache's scope: a job build's job (by id, so the
/// caches outlive a rename, as Concourse's), else a one-off build's name.
/// A job build's name holds its number, which would give every build
/// caches of its own.
pub fn cache_job(job_id: Option<i64>, build_name: &str) -> String {
    match job_id {
        Some(id) => format!("job-{id}"),
        None => build_name.to_string(),
    }
}

/// Whose task caches a step's are: its team's job's task. The team is part
/// of it: two teams' pipelines may name a job and a task alike, and one
/// team's build must never mount (read, or poison) another team's cache on
/// a shared worker.
pub fn task_cache_scope(team: &str, job: &str, task: &str) -> String {
    format!("{team}/{job}/{task}")
}

/// A task cache: one directory of one step of one job, kept across builds.
pub fn task_cache_key(scope: &str, path: &str) -> String {
    format!("{scope}:{}", digest(path.as_bytes()))
}

/// 128 bits of two FNV-1a passes: a stable name, not a security boundary
/// (keys only choose which cache to reuse; contents are never trusted by key).
fn digest(bytes: &[u8]) -> String {
    let fnv = |seed: u64| {
        bytes.iter().fold(seed, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The key of a `git` get of `{"uri": "u", "branch": "main"}` at
    /// `{"ref": "abc"}` with these params.
    fn git_key(params: Value) -> String {
        resource_cache_key(
            "git",
            &json!({"uri": "u", "branch": "main"}),
            &params,
            &json!({"ref": "abc"}),
        )
    }

    #[test]
    fn equal_json_gives_equal_keys_and_any_difference_another() {
        let a = git_key(Value::Null);
        let b = resource_cache_key(
            "git",
            &json!({"branch": "main", "uri": "u"}),
            &Value::Null,
            &json!({"ref": "abc"}),
        );
        let c = resource_cache_key(
            "git",
            &json!({"uri": "u", "branch": "main"}),
            &Value::Null,
            &json!({"ref": "abd"}),
        );
        let d = resource_cache_key(
            "mock",
            &json!({"uri": "u", "branch": "main"}),
            &Value::Null,
            &json!({"ref": "abc"}),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(a.starts_with("git@") && a.len() == 4 + 32, "{a}");
        assert_ne!(
            task_cache_key(&task_cache_scope("a", "job", "t"), "go"),
            task_cache_key(&task_cache_scope("b", "job", "t"), "go"),
            "another team's job and task of the same names have other caches"
        );
        assert_ne!(
            task_cache_key("job/t", "go"),
            task_cache_key("job/t", "npm")
        );
        assert_eq!(task_cache_key("job/t", "go"), task_cache_key("job/t", "go"));
    }

    #[test]
    fn params_are_part_of_the_key_in_any_key_order() {
        let none = git_key(Value::Null);
        // (params, same key as no params)
        let cases = [
            (json!({}), true),
            (json!({"depth": 1}), false),
            (json!({"depth": 2}), false),
            (json!({"depth": "1"}), false),
            (json!({"depth": 1, "submodules": "none"}), false),
            (json!({"submodules": "none"}), false),
            (json!({"nested": {}}), false),
            (json!([]), false),
            (json!(""), false),
        ];
        let mut seen = std::collections::BTreeMap::new();
        for (params, same) in cases {
            let key = git_key(params.clone());
            assert_eq!(key == none, same, "{params}");
            if !same {
                // Every different params gives a key of its own.
                if let Some(other) = seen.insert(key, params.clone()) {
                    panic!("{params} and {other} share a key");
                }
            }
        }
        assert_eq!(
            git_key(json!({"depth": 1, "submodules": {"b": 1, "a": [2, {"y": 1, "x": 0}]}})),
            git_key(json!({"submodules": {"a": [2, {"x": 0, "y": 1}], "b": 1}, "depth": 1})),
        );
        // Params are not confused with the version next to them.
        assert_ne!(
            resource_cache_key("t", &json!({}), &json!({"a": 1}), &json!({"v": 1})),
            resource_cache_key("t", &json!({}), &json!({"v": 1}), &json!({"a": 1})),
        );
    }

    #[test]
    fn a_get_without_params_keeps_the_key_of_earlier_releases() {
        // The key before params counted: caches on workers stay usable.
        let text = "git\u{0}{\"branch\":\"main\",\"uri\":\"u\"}\u{0}{\"ref\":\"abc\"}";
        assert_eq!(
            git_key(Value::Null),
            format!("git@{}", digest(text.as_bytes()))
        );
    }

    #[test]
    fn canonical_text_sorts_keys_at_every_level_and_escapes_them() {
        assert_eq!(
            canonical(&json!({"b": [1, {"d": null, "c": "x\"y"}], "a\n": true})),
            r#"{"a\n":true,"b":[1,{"c":"x\"y","d":null}]}"#
        );
    }
}
