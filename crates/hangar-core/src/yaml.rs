//! YAML read the way Concourse reads it, into JSON values.
//!
//! Concourse turns task and pipeline YAML into JSON with `sigs.k8s.io/yaml`,
//! which resolves plain scalars by YAML 1.1's rules (go-yaml v2): `yes`,
//! `on`, `y` are true; `0755` is the octal integer 493; `0x1F` is 31; `~`
//! and an empty value are null; merge keys (`<<: *defaults`) copy a
//! mapping's keys. Quoted and block scalars are always strings. A reader
//! with YAML 1.2's rules would hand a task `PERMS=0755` where Concourse hands
//! it `PERMS=493`, so this module resolves scalars itself, from the events
//! of a YAML 1.2 parser (`yaml-rust2`), which also gives it line and column
//! for every error.
//!
//! Where hangar is stricter than Concourse, for safety, the error says so:
//! a key given twice in one mapping (Concourse keeps the last one silently),
//! several documents in one file (Concourse reads the first), tags other
//! than YAML's standard ones, a document whose aliases expand past
//! [`MAX_VALUES`] values (a "billion laughs") or nested deeper than
//! [`MAX_DEPTH`].

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Number, Value};

use crate::names::shorten;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The most values (scalars, sequences, mappings; keys included) a document
/// may hold once its aliases are expanded.
pub const MAX_VALUES: usize = 100_000;

/// The deepest nesting of sequences and mappings.
pub const MAX_DEPTH: usize = 64;

/// Why a YAML document was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line and column, when the error is at a place in the text.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => write!(f, "line {line} column {column}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for YamlError {}

fn at(mark: Marker, message: impl Into<String>) -> YamlError {
    YamlError {
        position: Some((mark.line(), mark.col() + 1)),
        message: message.into(),
    }
}

/// Reads one YAML document into a JSON value. An empty document is null.
pub fn from_str(text: &str) -> Result<Value, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut builder = Builder::default();
    let mut documents = 0;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            let m = *e.marker();
            at(m, e.info().to_string())
        })?;
        match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => {}
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(at(
                        mark,
                        "the file holds more than one YAML document (---); Concourse would read \
                         the first and ignore the rest, hangar refuses so nothing is dropped",
                    ));
                }
            }
            event => builder.event(event, mark)?,
        }
    }
    Ok(builder.root.unwrap_or(Value::Null))
}

/// A mapping or sequence being read.
enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        spent_before: usize,
    },
    Map {
        entries: Map<String, Value>,
        /// Mappings named by merge keys, in the order given: the first
        /// wins among them, and explicit keys win over all of them.
        merges: Vec<Map<String, Value>>,
        key: Option<Key>,
        anchor: usize,
        spent_before: usize,
        mark: Marker,
    },
}

enum Key {
    Name(String),
    Merge(Marker),
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    /// Anchored values, with how many values each holds (what an alias to
    /// it costs).
    anchors: HashMap<usize, (Value, usize)>,
    spent: usize,
    root: Option<Value>,
}

impl Builder {
    fn spend(&mut self, n: usize, mark: Marker) -> Result<(), YamlError> {
        self.spent = self.spent.saturating_add(n);
        if self.spent > MAX_VALUES {
            return Err(at(
                mark,
                format!(
                    "the document holds more than {MAX_VALUES} values once its aliases are \
                     expanded"
                ),
            ));
        }
        Ok(())
    }

    fn event(&mut self, event: Event, mark: Marker) -> Result<(), YamlError> {
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                self.spend(1, mark)?;
                // A key is read as a scalar too; `<<` there is a merge key.
                if self.wants_key() {
                    let key = scalar_key(&text, style, tag.as_ref(), mark)?;
                    return self.set_key(key, mark);
                }
                let value = scalar(&text, style, tag.as_ref(), mark)?;
                if anchor > 0 {
                    self.anchors.insert(anchor, (value.clone(), 1));
                }
                self.attach(value, mark)
            }
            Event::Alias(id) => {
                let Some((value, cost)) = self.anchors.get(&id).cloned() else {
                    return Err(at(
                        mark,
                        "an alias (*name) to an anchor not defined before it",
                    ));
                };
                self.spend(cost, mark)?;
                if self.wants_key() {
                    return match value {
                        Value::String(s) => self.set_key(Key::Name(s), mark),
                        other => {
                            let key = key_text(&other).map_err(|m| at(mark, m))?;
                            self.set_key(Key::Name(key), mark)
                        }
                    };
                }
                self.attach(value, mark)
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_collection_tag(tag.as_ref(), "seq", mark)?;
                self.open(mark)?;
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    spent_before: self.spent,
                });
                Ok(())
            }
            Event::MappingStart(anchor, tag) => {
                self.check_collection_tag(tag.as_ref(), "map", mark)?;
                self.open(mark)?;
                self.stack.push(Frame::Map {
                    entries: Map::new(),
                    merges: Vec::new(),
                    key: None,
                    anchor,
                    spent_before: self.spent,
                    mark,
                });
                Ok(())
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = self
                    .stack
                    .pop()
                    .ok_or_else(|| at(mark, "unbalanced YAML"))?;
                let (value, anchor, spent_before) = match frame {
                    Frame::Seq {
                        items,
                        anchor,
                        spent_before,
                    } => (Value::Array(items), anchor, spent_before),
                    Frame::Map {
                        mut entries,
                        merges,
                        anchor,
                        spent_before,
                        ..
                    } => {
                        for merged in merges {
                            for (k, v) in merged {
                                entries.entry(k).or_insert(v);
                            }
                        }
                        (Value::Object(entries), anchor, spent_before)
                    }
                };
                if anchor > 0 {
                    let cost = self.spent - spent_before;
                    self.anchors.insert(anchor, (value.clone(), cost));
                }
                self.attach(value, mark)
            }
            _ => Ok(()),
        }
    }

    /// A collection starts: counted, and refused as a key or too deep.
    fn open(&mut self, mark: Marker) -> Result<(), YamlError> {
        self.spend(1, mark)?;
        if self.wants_key() {
            return Err(at(
                mark,
                "a mapping key must be a scalar, not a mapping or a list",
            ));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(at(
                mark,
                format!("the document is nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn check_collection_tag(
        &self,
        tag: Option<&Tag>,
        standard: &str,
        mark: Marker,
    ) -> Result<(), YamlError> {
        match tag {
            None => Ok(()),
            Some(t) if is_standard(t, standard) => Ok(()),
            Some(t) => Err(unsupported_tag(t, mark)),
        }
    }

    fn wants_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    fn set_key(&mut self, key: Key, mark: Marker) -> Result<(), YamlError> {
        if let (
            Some(Frame::Map {
                entries, key: slot, ..
            }),
            Key::Name(name),
        ) = (self.stack.last(), &key)
        {
            debug_assert!(slot.is_none());
            if entries.contains_key(name) {
                return Err(at(
                    mark,
                    format!(
                        "the key {:?} appears twice in this mapping; Concourse would keep the \
                         last one silently, hangar refuses so a repeated key cannot hide a value",
                        shorten(name)
                    ),
                ));
            }
        }
        if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
            *slot = Some(key);
        }
        Ok(())
    }

    /// A finished value goes to its parent (or becomes the document).
    fn attach(&mut self, value: Value, mark: Marker) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                self.root = Some(value);
                Ok(())
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(value);
                Ok(())
            }
            Some(Frame::Map {
                entries,
                merges,
                key,
                mark: map_mark,
                ..
            }) => match key.take() {
                Some(Key::Name(name)) => {
                    entries.insert(name, value);
                    Ok(())
                }
                Some(Key::Merge(merge_mark)) => {
                    let bad = || {
                        at(
                            merge_mark,
                            "a merge key (<<) takes a mapping or a list of mappings",
                        )
                    };
                    match value {
                        Value::Object(m) => merges.push(m),
                        Value::Array(list) => {
                            for item in list {
                                match item {
                                    Value::Object(m) => merges.push(m),
                                    _ => return Err(bad()),
                                }
                            }
                        }
                        _ => return Err(bad()),
                    }
                    Ok(())
                }
                None => Err(at(
                    if mark.line() > 0 { mark } else { *map_mark },
                    "a value with no key",
                )),
            },
        }
    }
}

/// A scalar in a key's place: `<<` (plain, untagged) is a merge key; any
/// other key is the text of its value (`1:` is "1", `yes:` is "true", as
/// Concourse turns YAML keys into JSON's string keys).
fn scalar_key(
    text: &str,
    style: TScalarStyle,
    tag: Option<&Tag>,
    mark: Marker,
) -> Result<Key, YamlError> {
    if text == "<<" && style == TScalarStyle::Plain && tag.is_none() {
        return Ok(Key::Merge(mark));
    }
    let value = scalar(text, style, tag, mark)?;
    let key = key_text(&value).map_err(|m| at(mark, m))?;
    Ok(Key::Name(key))
}

fn key_text(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(go_number_text(n)),
        Value::Null => Err("a mapping key must not be null (~ or empty)".into()),
        _ => Err("a mapping key must be a scalar, not a mapping or a list".into()),
    }
}

const YAML_TAG_PREFIX: &str = "tag:yaml.org,2002:";

fn is_standard(tag: &Tag, name: &str) -> bool {
    tag.handle == YAML_TAG_PREFIX && tag.suffix == name
}

fn unsupported_tag(tag: &Tag, mark: Marker) -> YamlError {
    let shown = if tag.handle == YAML_TAG_PREFIX {
        format!("!!{}", tag.suffix)
    } else {
        format!("{}{}", tag.handle, tag.suffix)
    };
    at(
        mark,
        format!(
            "the YAML tag {:?} is not supported (only !!str, !!int, !!float, !!bool, !!null, \
             !!map and !!seq)",
            shorten(&shown)
        ),
    )
}

/// One scalar's value: quoted and block scalars are strings, plain ones are
/// resolved by YAML 1.1's rules as Concourse resolves them, and a standard
/// tag forces a type.
fn scalar(
    text: &str,
    style: TScalarStyle,
    tag: Option<&Tag>,
    mark: Marker,
) -> Result<Value, YamlError> {
    let plain = style == TScalarStyle::Plain;
    let Some(tag) = tag else {
        return if plain {
            resolve_plain(text).map_err(|m| at(mark, m))
        } else {
            Ok(Value::String(text.to_string()))
        };
    };
    if tag.handle != YAML_TAG_PREFIX {
        // `! value` is the non-specific tag: a string.
        if tag.handle.is_empty() && tag.suffix == "!" {
            return Ok(Value::String(text.to_string()));
        }
        return Err(unsupported_tag(tag, mark));
    }
    let resolved = resolve_plain(text).map_err(|m| at(mark, m));
    let wrong = |kind: &str| at(mark, format!("{:?} is not a valid !!{kind}", shorten(text)));
    match tag.suffix.as_str() {
        "str" => Ok(Value::String(text.to_string())),
        "int" => match resolved? {
            Value::Number(n) if !n.is_f64() => Ok(Value::Number(n)),
            _ => Err(wrong("int")),
        },
        "float" => match resolved? {
            Value::Number(n) => Ok(Value::Number(
                n.as_f64()
                    .and_then(Number::from_f64)
                    .ok_or_else(|| wrong("float"))?,
            )),
            _ => Err(wrong("float")),
        },
        "bool" => match resolved? {
            v @ Value::Bool(_) => Ok(v),
            _ => Err(wrong("bool")),
        },
        "null" => match resolved? {
            Value::Null => Ok(Value::Null),
            _ => Err(wrong("null")),
        },
        _ => Err(unsupported_tag(tag, mark)),
    }
}

/// YAML 1.1's resolution of a plain scalar, as go-yaml v2 does it.
pub fn resolve_plain(text: &str) -> Result<Value, String> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Ok(Value::Bool(true))
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Ok(Value::Bool(false))
        }
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF"
        | "-.inf" | "-.Inf" | "-.INF" => {
            return Err(format!(
                "{text} is not a number JSON can hold (Concourse refuses it too): quote it \
                 for the text"
            ))
        }
        _ => {}
    }
    if !text.starts_with(|c: char| "+-.0123456789".contains(c)) {
        return Ok(Value::String(text.to_string()));
    }
    // go-yaml v2 reads numbers with their underscores removed.
    let plain = text.replace('_', "");
    if let Some(n) = go_parse_int(&plain) {
        return Ok(Value::Number(n));
    }
    if is_yaml_float(&plain) {
        if let Some(n) = plain.parse::<f64>().ok().and_then(Number::from_f64) {
            if n.as_f64().is_some_and(f64::is_finite) {
                return Ok(Value::Number(n));
            }
        }
    }
    Ok(Value::String(text.to_string()))
}

/// Go's `strconv.ParseInt(s, 0, 64)`, then `ParseUint`: a sign, a base
/// prefix (`0x`, `0o`, `0b`, or `0` for octal), digits. `None` when it is not such an integer or does not fit.
fn go_parse_int(text: &str) -> Option<Number> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(digits, radix).ok()?;
    if negative {
        let v = i128::try_from(magnitude).ok()?.checked_neg()?;
        i64::try_from(v).ok().map(Number::from)
    } else if let Ok(v) = i64::try_from(magnitude) {
        Some(Number::from(v))
    } else if text.starts_with('+') {
        // Go's ParseUint takes no sign.
        None
    } else {
        u64::try_from(magnitude).ok().map(Number::from)
    }
}

/// go-yaml v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_yaml_float(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// A number as Go's `encoding/json` writes it: integers as they are, floats
/// in the shortest form that reads back, with an exponent below 1e-6 and
/// from 1e21 (`1e+21`, `1e-7`), and no `.0` on whole floats.
pub fn go_number_text(n: &Number) -> String {
    if !n.is_f64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        format!("{f}")
    } else {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => text,
        }
    }
}

/// A value as Go's `json.Marshal` writes it (what Concourse passes for a
/// param that is a list or a mapping): compact, keys sorted, `<`, `>` and
/// `&` escaped as `\u003c`, `\u003e`, `\u0026`, numbers by
/// [`go_number_text`].
pub fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go_json(value, &mut out);
    out
}

fn write_go_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number_text(n)),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            // serde_json's map is ordered by key, as Go sorts map keys.
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(v, out);
            }
            out.push('}');
        }
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests;
