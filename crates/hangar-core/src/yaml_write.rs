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
    write_document(&Ordered::from(value))
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

/// A JSON document whose objects keep their keys in the order they were
/// written: a typed value serialized (a pipeline config) comes out in its
/// fields' order, which is Concourse's, where a [`Value`] sorts them.
#[derive(Debug, Clone, PartialEq)]
enum Ordered {
    Scalar(Value),
    List(Vec<Ordered>),
    Map(Vec<(String, Ordered)>),
}

impl From<&Value> for Ordered {
    fn from(v: &Value) -> Ordered {
        match v {
            Value::Array(items) => Ordered::List(items.iter().map(Ordered::from).collect()),
            Value::Object(m) => Ordered::Map(
                m.iter()
                    .map(|(k, v)| (k.clone(), Ordered::from(v)))
                    .collect(),
            ),
            scalar => Ordered::Scalar(scalar.clone()),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Bool(b)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::from(n)))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::from(n)))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::from(n)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::String(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::String(s)))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::List(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Ordered>()? {
                    entries.push((k, v));
                }
                Ok(Ordered::Map(entries))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// `value` written as block YAML with its fields in the order it
/// serializes them (a pipeline config: Concourse's order), not sorted.
pub fn to_yaml_ordered<T: serde::Serialize>(value: &T) -> String {
    let ordered = serde_json::to_string(value)
        .ok()
        .and_then(|text| serde_json::from_str::<Ordered>(&text).ok())
        .unwrap_or(Ordered::Scalar(Value::Null));
    write_document(&ordered)
}

/// [`to_yaml_ordered`], with a map's first key among `lead` moved to the
/// front (a step's kind, `get: repo`, before its fields: a step is
/// serialized through a sorted map).
pub fn to_yaml_ordered_leading<T: serde::Serialize>(value: &T, lead: &[&str]) -> String {
    let mut ordered = serde_json::to_string(value)
        .ok()
        .and_then(|text| serde_json::from_str::<Ordered>(&text).ok())
        .unwrap_or(Ordered::Scalar(Value::Null));
    lead_first(&mut ordered, lead);
    write_document(&ordered)
}

fn lead_first(value: &mut Ordered, lead: &[&str]) {
    match value {
        Ordered::Map(entries) => {
            if let Some(i) = entries.iter().position(|(k, _)| lead.contains(&k.as_str())) {
                let entry = entries.remove(i);
                entries.insert(0, entry);
            }
            for (_, v) in entries.iter_mut() {
                lead_first(v, lead);
            }
        }
        Ordered::List(items) => items.iter_mut().for_each(|v| lead_first(v, lead)),
        Ordered::Scalar(_) => {}
    }
}

fn write_document(value: &Ordered) -> String {
    let mut out = String::new();
    match value {
        Ordered::Map(m) if !m.is_empty() => write_map(&mut out, m, 0),
        Ordered::List(items) if !items.is_empty() => write_list(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn scalar_text(v: &Ordered) -> String {
    match v {
        Ordered::Scalar(Value::Null) => "null".into(),
        Ordered::Scalar(Value::Bool(b)) => b.to_string(),
        Ordered::Scalar(Value::Number(n)) => n.to_string(),
        Ordered::Scalar(Value::String(s)) => string_text(s),
        Ordered::Scalar(_) | Ordered::List(_) => "[]".into(),
        Ordered::Map(_) => "{}".into(),
    }
}

fn is_block(v: &Ordered) -> bool {
    match v {
        Ordered::Map(m) => !m.is_empty(),
        Ordered::List(items) => !items.is_empty(),
        Ordered::Scalar(_) => false,
    }
}

fn write_map(out: &mut String, m: &[(String, Ordered)], indent: usize) {
    let pad = " ".repeat(indent);
    for (k, v) in m {
        let key = string_text(k);
        if is_block(v) {
            let _ = writeln!(out, "{pad}{key}:");
            match v {
                Ordered::Map(inner) => write_map(out, inner, indent + 2),
                Ordered::List(items) => write_list(out, items, indent),
                Ordered::Scalar(_) => unreachable!("is_block"),
            }
        } else {
            let _ = writeln!(out, "{pad}{key}: {}", scalar_text(v));
        }
    }
}

fn write_list(out: &mut String, items: &[Ordered], indent: usize) {
    let pad = " ".repeat(indent);
    for item in items {
        match item {
            Ordered::Map(m) if !m.is_empty() => {
                // The first key on the dash's line, the rest under it.
                let mut first = String::new();
                write_map(&mut first, m, indent + 2);
                let _ = write!(out, "{pad}- {}", &first[indent + 2..]);
            }
            Ordered::List(inner) if !inner.is_empty() => {
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
    fn a_typed_value_keeps_its_fields_order_and_reads_back() {
        #[derive(serde::Serialize)]
        struct Step {
            task: &'static str,
            file: &'static str,
            zz: Vec<u8>,
            aa: serde_json::Value,
        }
        let step = Step {
            task: "t",
            file: "ci/t.yml",
            zz: vec![1, 2],
            aa: json!({"b": 1, "a": "yes"}),
        };
        let text = to_yaml_ordered(&vec![step]);
        assert_eq!(
            text,
            "- task: t\n  file: ci/t.yml\n  zz:\n  - 1\n  - 2\n  aa:\n    a: \"yes\"\n    b: 1\n"
        );
        let back = crate::yaml::from_str(&text).unwrap();
        assert_eq!(
            back,
            json!([{"task": "t", "file": "ci/t.yml", "zz": [1, 2], "aa": {"a": "yes", "b": 1}}])
        );
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
