//! Instanced pipelines: a pipeline's identity is its team, its name and its
//! instance vars, a JSON object. Pipelines of one name form an instance group.
//!
//! This module holds the rules every layer shares: which instance vars are
//! accepted, their canonical JSON (what the store keys on), fly's `-i
//! key=value` flag and fly's pipeline reference `name/key:value,key2:value2`.
//!
//! Bounds: the canonical JSON is at most [`MAX_JSON_BYTES`] bytes, holds at
//! most [`MAX_KEYS`] keys counted at every depth and nests objects at most
//! [`MAX_DEPTH`] deep. A key is 1 to 64 characters and holds no control
//! character, white space, nor any of `/ , : = . "` (they delimit references
//! and flags).

use serde_json::{Map, Value};
use std::fmt;

/// The longest canonical JSON of one pipeline's instance vars.
pub const MAX_JSON_BYTES: usize = 4096;
/// The most keys, counted at every depth, in one pipeline's instance vars.
pub const MAX_KEYS: usize = 32;
/// The deepest nesting of objects and arrays.
pub const MAX_DEPTH: usize = 8;
/// The longest key.
pub const MAX_KEY_LEN: usize = 64;

/// Instance vars, checked. Keys are held sorted, so two equal sets of vars have
/// one canonical JSON text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceVars(Map<String, Value>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceVarsError(pub String);

impl fmt::Display for InstanceVarsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InstanceVarsError {}

fn err<T>(message: impl Into<String>) -> Result<T, InstanceVarsError> {
    Err(InstanceVarsError(message.into()))
}

/// Whether a key is one hangar accepts (see the module's rules).
pub fn check_key(key: &str) -> Result<(), InstanceVarsError> {
    if key.is_empty() {
        return err("instance var keys must not be empty");
    }
    if key.chars().count() > MAX_KEY_LEN {
        return err(format!(
            "instance var key {:?} is longer than {MAX_KEY_LEN} characters",
            crate::names::shorten(key)
        ));
    }
    if let Some(c) = key
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || "/,:=.\"".contains(*c))
    {
        return err(format!(
            "instance var key {:?} holds {c:?}, which is not allowed in a key",
            crate::names::shorten(key)
        ));
    }
    Ok(())
}

fn walk(value: &Value, depth: usize, keys: &mut usize) -> Result<(), InstanceVarsError> {
    if depth > MAX_DEPTH {
        return err(format!("instance vars nest deeper than {MAX_DEPTH}"));
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                check_key(k)?;
                *keys += 1;
                if *keys > MAX_KEYS {
                    return err(format!("instance vars hold more than {MAX_KEYS} keys"));
                }
                walk(v, depth + 1, keys)?;
            }
        }
        Value::Array(items) => {
            for v in items {
                walk(v, depth + 1, keys)?;
            }
        }
        _ => {}
    }
    Ok(())
}

impl InstanceVars {
    /// No instance vars: the pipeline is not an instance.
    pub fn empty() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Checks a JSON value as instance vars: an object within the bounds.
    pub fn from_value(value: Value) -> Result<Self, InstanceVarsError> {
        let Value::Object(map) = value else {
            return err(format!(
                "instance vars must be an object, not {}",
                kind(&value)
            ));
        };
        let mut keys = 0;
        walk(&Value::Object(map.clone()), 0, &mut keys)?;
        let vars = Self(map);
        let len = vars.canonical_json().len();
        if len > MAX_JSON_BYTES {
            return err(format!(
                "instance vars take {len} bytes of JSON, more than {MAX_JSON_BYTES}"
            ));
        }
        Ok(vars)
    }

    /// Reads instance vars from JSON text, as the API's `vars` parameter and
    /// the store's column hold them. Oversized text is refused before parsing.
    pub fn from_json(text: &str) -> Result<Self, InstanceVarsError> {
        if text.len() > MAX_JSON_BYTES * 4 {
            return err(format!(
                "instance vars take {} bytes of JSON, more than {MAX_JSON_BYTES}",
                text.len()
            ));
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return err(format!("instance vars are not valid JSON: {e}")),
        };
        Self::from_value(value)
    }

    /// The canonical JSON: compact, keys sorted at every depth. `{}` when empty.
    pub fn canonical_json(&self) -> String {
        // serde_json's map is ordered by key (no preserve_order here), so its
        // compact text is already canonical.
        serde_json::to_string(&self.0).unwrap_or_else(|_| "{}".into())
    }

    /// Sets the value at a dotted path (`a.b` sets `{a: {b: ...}}`),
    /// replacing what was there.
    pub fn set_path(&mut self, path: &str, value: Value) -> Result<(), InstanceVarsError> {
        let parts: Vec<&str> = path.split('.').collect();
        for p in &parts {
            check_key(p)?;
        }
        let mut map = &mut self.0;
        for p in &parts[..parts.len() - 1] {
            let slot = map
                .entry(p.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            map = slot.as_object_mut().expect("made an object above");
        }
        map.insert(parts[parts.len() - 1].to_string(), value);
        let checked = Self::from_value(Value::Object(std::mem::take(&mut self.0)));
        match checked {
            Ok(v) => {
                *self = v;
                Ok(())
            }
            Err(e) => err(e.0),
        }
    }

    /// Reads fly's `-i key=value` flags: the value is YAML, a dotted key sets
    /// a nested field. A flag without `=` is refused.
    pub fn from_flags<S: AsRef<str>>(flags: &[S]) -> Result<Self, InstanceVarsError> {
        let mut vars = Self::empty();
        for flag in flags {
            let flag = flag.as_ref();
            let Some((key, value)) = flag.split_once('=') else {
                return err(format!(
                    "instance var {:?} has no '=': write key=value",
                    crate::names::shorten(flag)
                ));
            };
            let value = parse_value(value)?;
            vars.set_path(key, value)?;
        }
        Ok(vars)
    }

    /// Fly's text of the vars in a pipeline reference: `key:value,...`, with
    /// nested objects flattened to dotted keys and values as JSON.
    pub fn ref_text(&self) -> String {
        let mut parts = Vec::new();
        flatten("", &self.0, &mut parts);
        parts.join(",")
    }
}

fn flatten(prefix: &str, map: &Map<String, Value>, out: &mut Vec<String>) {
    for (k, v) in map {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) if !inner.is_empty() => flatten(&path, inner, out),
            Value::String(s) if plain_ok(s) => out.push(format!("{path}:{s}")),
            _ => out.push(format!("{path}:{v}")),
        }
    }
}

/// Whether a string reads back as itself written plain in a reference.
fn plain_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.contains([',', '"', '\'', '{', '}', '[', ']', ':', '#'])
        && s.trim() == s
        && matches!(parse_value(s), Ok(Value::String(ref t)) if t == s)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_value(text: &str) -> Result<Value, InstanceVarsError> {
    if text.len() > MAX_JSON_BYTES {
        return err(format!(
            "an instance var's value takes {} bytes, more than {MAX_JSON_BYTES}",
            text.len()
        ));
    }
    if text.is_empty() {
        return Ok(Value::String(String::new()));
    }
    match crate::yaml::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => err(format!(
            "instance var value {:?} is not valid YAML: {}",
            crate::names::shorten(text),
            e.message
        )),
    }
}

/// A pipeline as fly names it: `name` or `name/key:value,key2:value2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineRef {
    pub name: String,
    pub instance_vars: InstanceVars,
}

impl fmt::Display for PipelineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.instance_vars.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.name, self.instance_vars.ref_text())
        }
    }
}

/// Splits on `,` outside quotes and brackets.
fn split_top(text: &str) -> Result<Vec<&str>, InstanceVarsError> {
    let mut parts = Vec::new();
    let mut depth: i32 = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && q == '"' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth < 0 {
                    return err("unbalanced brackets in the pipeline reference's vars");
                }
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quote.is_some() || depth != 0 {
        return err("unclosed quote or bracket in the pipeline reference's vars");
    }
    parts.push(&text[start..]);
    Ok(parts)
}

impl PipelineRef {
    pub fn plain(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            instance_vars: InstanceVars::empty(),
        }
    }

    /// Reads fly's reference: the name up to the first `/`, then `key:value`
    /// pairs split on `,` (values are YAML, keys may be dotted paths).
    pub fn parse(text: &str) -> Result<Self, InstanceVarsError> {
        if text.len() > MAX_JSON_BYTES * 2 {
            return err(format!(
                "the pipeline reference is {} bytes, more than {}",
                text.len(),
                MAX_JSON_BYTES * 2
            ));
        }
        let (name, vars_text) = match text.split_once('/') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        if name.is_empty() {
            return err("the pipeline reference has no pipeline name");
        }
        let mut vars = InstanceVars::empty();
        if let Some(vars_text) = vars_text {
            if vars_text.is_empty() {
                return err("the pipeline reference has a '/' but no instance vars after it");
            }
            for pair in split_top(vars_text)? {
                let Some((key, value)) = pair.split_once(':') else {
                    return err(format!(
                        "instance var {:?} in the pipeline reference has no ':': write key:value",
                        crate::names::shorten(pair)
                    ));
                };
                vars.set_path(key, parse_value(value)?)?;
            }
        }
        Ok(Self {
            name: name.to_string(),
            instance_vars: vars,
        })
    }
}

impl PipelineRef {
    /// Reads a reference given outside a config (a URL segment, a CLI
    /// flag): [`PipelineRef::parse`], and the name by the rule of
    /// [`crate::pipeline::check_name`].
    pub fn parse_checked(text: &str) -> Result<Self, InstanceVarsError> {
        // The name first: `../x` is a bad name before it is bad vars.
        let name = text.split_once('/').map_or(text, |(name, _)| name);
        if !name.is_empty() {
            crate::pipeline::check_name("pipeline", name).map_err(InstanceVarsError)?;
        }
        Self::parse(text)
    }

    /// The reference to the pipeline `name` with the instance vars whose
    /// canonical JSON is `vars_json` (what the store keeps; `{}` for a
    /// pipeline that is not an instance).
    pub fn from_stored(name: &str, vars_json: &str) -> Result<Self, InstanceVarsError> {
        Ok(Self {
            name: name.to_string(),
            instance_vars: InstanceVars::from_json(vars_json)?,
        })
    }
}

/// Splits fly's `-j PIPELINE/JOB` (or `-r PIPELINE/RESOURCE`) where the
/// pipeline may be an instance (`p/branch:main/job`): at the last `/`, as job
/// and resource names hold none. The pipeline part is checked as a
/// reference.
pub fn split_qualified(value: &str) -> Result<(PipelineRef, &str), InstanceVarsError> {
    let Some((pipeline, name)) = value.rsplit_once('/') else {
        return err(format!(
            "{:?} is not PIPELINE/NAME",
            crate::names::shorten(value)
        ));
    };
    if name.is_empty() {
        return err(format!(
            "{:?} has nothing after its last '/'",
            crate::names::shorten(value)
        ));
    }
    Ok((PipelineRef::parse_checked(pipeline)?, name))
}

#[cfg(test)]
mod tests;
