//! A JSON value written as block YAML (`get-pipeline`'s output), so that
//! reading it back with [`crate::yaml::from_str`] gives the same value.
//!
//! A string is written plain only when it is made of a small safe set of
//! characters and reads back as itself under YAML 1.1's rules (`yes`,
//! `0755`, `null` do not); every other string is double-quoted with
//! JSON's escapes, which YAML's double-quoted style reads the same.

use std::fmt::Write;

use serde_json::Value;

pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => write_map(&mut out, m, 0),
        Value::Array(items) if !items.is_empty() => write_list(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn plain_is_safe(s: &str) -> bool {
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == '.');
    first_ok
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '@'))
        && crate::yaml::resolve_plain(s).ok() == Some(Value::String(s.to_string()))
}

fn string_text(s: &str) -> String {
    if plain_is_safe(s) {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string_text(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => false,
    }
}

fn write_map(out: &mut String, m: &serde_json::Map<String, Value>, indent: usize) {
    let pad = " ".repeat(indent);
    for (k, v) in m {
        let key = string_text(k);
        if is_block(v) {
            let _ = writeln!(out, "{pad}{key}:");
            match v {
                Value::Object(inner) => write_map(out, inner, indent + 2),
                Value::Array(items) => write_list(out, items, indent),
                _ => unreachable!("is_block"),
            }
        } else {
            let _ = writeln!(out, "{pad}{key}: {}", scalar_text(v));
        }
    }
}

fn write_list(out: &mut String, items: &[Value], indent: usize) {
    let pad = " ".repeat(indent);
    for item in items {
        match item {
            Value::Object(m) if !m.is_empty() => {
                // The first key on the dash's line, the rest under it.
                let mut first = String::new();
                write_map(&mut first, m, indent + 2);
                let _ = write!(out, "{pad}- {}", &first[indent + 2..]);
            }
            Value::Array(inner) if !inner.is_empty() => {
                let _ = writeln!(out, "{pad}-");
                write_list(out, inner, indent + 2);
            }
            scalar => {
                let _ = writeln!(out, "{pad}- {}", scalar_text(scalar));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_read_back_as_written() {
        let cases = [
            json!({"jobs": [{"name": "build", "plan": [{"get": "repo", "trigger": true}]}]}),
            json!({"s": ["yes", "no", "on", "0755", "1e3", "null", "~", "", " lead", "a: b",
                         "- x", "#c", "multi\nline", "tab\there", "quote\"s", "été", "*alias",
                         "&anchor", "!tag", "%x", "@x", "`x", "{x}", "[x]", "x,y", "?", "-", "1.0",
                         ".inf", "0x1F", "2001-01-01", "<<", "=", "plain-text_ok/v1.2"]}),
            json!({"n": [1, -2, 3.5, 1e300], "b": [true, false], "z": null, "e": {}, "l": []}),
            json!({"yes": 1, "0755": 2, "": 3, "a b": 4, "nested": [[1, [2]], [], {}]}),
            json!([{"a": {"b": {"c": [{"d": 1, "e": [1, 2]}]}}}, "x"]),
            json!("top"),
        ];
        for value in cases {
            let text = to_yaml(&value);
            let back = crate::yaml::from_str(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
            assert_eq!(back, value, "{text}");
        }
    }

    #[test]
    fn a_simple_config_reads_as_fly_prints_it() {
        let v = json!({"jobs": [{"name": "build", "plan": [{"get": "repo"}, {"task": "t", "file": "ci/t.yml"}]}]});
        assert_eq!(
            to_yaml(&v),
            // Keys come in JSON's order (sorted), as the stored config holds them.
            "jobs:\n- name: build\n  plan:\n  - get: repo\n  - file: ci/t.yml\n    task: t\n"
        );
    }
}
