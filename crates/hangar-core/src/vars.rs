//! `((vars))` in configs, with Concourse's syntax and rules
//! (<https://concourse-ci.org/vars.html>, and its `vars` package):
//!
//! - `((name))`, `((name.field.field))`, `((source:name.field))`; a segment
//!   may be quoted to hold dots or colons: `((name."a.b"))`,
//!   `(("with:colon"))`. A var is `((`, one or more of ASCII letters and
//!   digits, letters of any script, `_ - / . : @ "`, then `))`; anything else
//!   (`(( a ))`, `(()`, an unterminated `((x`) is not a var and stays text.
//! - A string that is exactly one var becomes the var's value with its type
//!   (a map, a list, a number, a boolean, null).
//! - A var inside a longer string is spliced in as text. Only strings and
//!   numbers can be spliced; a boolean, null, list or map there is an error
//!   (`cannot interpolate non-primitive value (bool) from var: x`), as in
//!   Concourse.
//! - Map keys are interpolated too. A key that is exactly one var takes a
//!   string, number, boolean or null as its text (what Concourse's YAML round
//!   trip makes of them); a list or map is an error. hangar refuses a key that
//!   interpolation makes equal to another key of its map (Concourse keeps one
//!   of them, whichever its map iteration reaches last).
//! - Every var that is not defined is collected, and all are reported in one
//!   error: `undefined vars: a, b.c`, with the other problems (a missing
//!   field, a var that does not parse) after it.
//! - Values are never scanned again: a var whose value holds `((x))` puts
//!   `((x))` into the result as text.
//!
//! [`Vars`] holds sources tried in order: the first source that has a var's
//! name answers, and a field missing there is an error rather than a reason
//! to look further (Concourse's `MultiVars`). Vars given by a user have no
//! source name: `((source:name))` is undefined until hangar has credential
//! managers or `var_sources`.
//!
//! Limits keep hostile input bounded: values nested deeper than
//! [`MAX_DEPTH`] levels are refused, and so is an interpolation that would
//! insert more than [`MAX_INSERTED_BYTES`] (one large value used many
//! times).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fmt;

pub mod credentials;
pub mod redact;
pub mod var_sources;

use serde_json::{Map, Value};

/// The deepest nesting of lists and maps walked (serde_json's own parser
/// stops at 128).
pub const MAX_DEPTH: usize = 128;

/// The most bytes interpolation may insert into one config, summed over
/// every use of every var.
pub const MAX_INSERTED_BYTES: usize = 8 * 1024 * 1024;

/// The source name of a build's local vars: `((.:name))`, set by a
/// `load_var` step for the steps after it (Concourse's local build vars).
pub const LOCAL_SOURCE: &str = ".";

/// A var as written between `((` and `))`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarRef {
    /// The var source (`source:` before the name), if any.
    pub source: Option<String>,
    /// The var's name.
    pub path: String,
    /// Fields to take from its value, outermost first.
    pub fields: Vec<String>,
}

impl VarRef {
    /// Parses a var's text (without the parentheses), as Concourse's
    /// `ParseReference`: an unquoted `:` ends the source, unquoted `.`s
    /// separate segments, quotes are removed, and no segment may be empty.
    pub fn parse(text: &str) -> Result<VarRef, String> {
        let mut rest = text;
        let mut source = None;
        if let Some(i) = find_unquoted(rest, ':') {
            let s = &rest[..i];
            if s.contains('"') {
                return Err(format!("invalid var '{text}': source must not be quoted"));
            }
            source = Some(s.to_string());
            rest = &rest[i + 1..];
        }
        let mut segments = Vec::new();
        loop {
            let (segment, next) = match find_unquoted(rest, '.') {
                Some(i) => (&rest[..i], Some(&rest[i + 1..])),
                None => (rest, None),
            };
            let segment = segment.trim().replace('"', "");
            if segment.is_empty() {
                return Err(format!("invalid var '{text}': empty field"));
            }
            segments.push(segment);
            match next {
                Some(n) => rest = n,
                None => break,
            }
        }
        let path = segments.remove(0);
        Ok(VarRef {
            source,
            path,
            fields: segments,
        })
    }

    /// A build's local var (`((.:name))`): it exists only once a
    /// `load_var` step of the build ran, so it is interpolated at run time.
    pub fn is_local(&self) -> bool {
        self.source.as_deref() == Some(LOCAL_SOURCE)
    }
}

/// Concourse's spelling: segments holding `, . : /` or a space are quoted.
impl fmt::Display for VarRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn segment(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
            if s.contains([',', '.', ':', '/', ' ']) {
                write!(f, "\"{s}\"")
            } else {
                f.write_str(s)
            }
        }
        if let Some(source) = &self.source {
            write!(f, "{source}:")?;
        }
        segment(f, &self.path)?;
        for field in &self.fields {
            f.write_str(".")?;
            segment(f, field)?;
        }
        Ok(())
    }
}

fn find_unquoted(s: &str, wanted: char) -> Option<usize> {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == wanted && !quoted {
            return Some(i);
        }
    }
    None
}

/// Whether `c` may appear between `((` and `))` (Concourse's
/// `[-/\.:@"\w\pL]`; `\w` is ASCII there).
fn is_var_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '_' | '-' | '/' | '.' | ':' | '@' | '"')
        || c.is_alphabetic()
}

/// One `((…))` found in a string: its byte range and its inner text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found<'a> {
    start: usize,
    end: usize,
    inner: &'a str,
}

/// Every var in `s`, left to right, not overlapping: what Concourse's
/// regular expression finds.
fn scan(s: &str) -> Vec<Found<'_>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'(' && bytes[i + 1] == b'(' {
            let inner_start = i + 2;
            let inner_len: usize = s[inner_start..]
                .chars()
                .take_while(|&c| is_var_char(c))
                .map(char::len_utf8)
                .sum();
            let inner_end = inner_start + inner_len;
            if inner_len > 0 && s[inner_end..].starts_with("))") {
                out.push(Found {
                    start: i,
                    end: inner_end + 2,
                    inner: &s[inner_start..inner_end],
                });
                i = inner_end + 2;
                continue;
            }
        }
        // `(` is ASCII, so the next byte is a char boundary or inside a
        // multi-byte char that cannot start with `(`.
        i += 1;
    }
    out
}

/// The vars a build was given: sources tried in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vars {
    sources: Vec<Map<String, Value>>,
}

/// What looking a var up finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<'a> {
    /// The var's value, its fields already taken.
    Found(Cow<'a, Value>),
    /// No source has the var: collected with the others into one error.
    Undefined,
    /// The var exists but cannot be used (a missing field): the message.
    Invalid(String),
}

/// Where interpolation reads vars from: the user's [`Vars`], or values a
/// credential manager resolved beforehand ([`credentials::Resolved`]).
/// Synchronous on purpose: backends do their I/O first, at the edge.
pub trait VarLookup {
    fn lookup(&self, r: &VarRef) -> Lookup<'_>;
}

impl Vars {
    /// Sources in order of precedence: the first that has a var's name
    /// answers.
    pub fn new(sources: Vec<Map<String, Value>>) -> Vars {
        Vars { sources }
    }

    /// These vars with `source` tried before all the others (a pipeline's
    /// instance vars over its `-v` and `-l` vars).
    pub fn with_first(mut self, source: Map<String, Value>) -> Vars {
        self.sources.insert(0, source);
        self
    }

    /// Pairs given one by one (`-v a.b=x`) as one source, as Concourse's
    /// `KVPairs.Expand`: a pair with fields makes nested maps, and a later
    /// pair on the same name replaces what an earlier one set there (a map
    /// is merged into field by field).
    pub fn expand(pairs: &[(VarRef, Value)]) -> Map<String, Value> {
        fn upsert(out: &mut Map<String, Value>, path: &str, fields: &[String], value: &Value) {
            match out.get_mut(path) {
                Some(Value::Object(node)) if !fields.is_empty() => {
                    upsert(node, &fields[0], &fields[1..], value)
                }
                _ => {
                    let mut built = value.clone();
                    for field in fields.iter().rev() {
                        let mut m = Map::new();
                        m.insert(field.clone(), built);
                        built = Value::Object(m);
                    }
                    out.insert(path.to_string(), built);
                }
            }
        }
        let mut out = Map::new();
        for (r, value) in pairs {
            upsert(&mut out, &r.path, &r.fields, value);
        }
        out
    }
}

impl VarLookup for Vars {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        // User-given vars have no source; a named source is a credential
        // manager or var_source hangar does not have.
        if r.source.is_some() {
            return Lookup::Undefined;
        }
        let Some(value) = self.sources.iter().find_map(|s| s.get(&r.path)) else {
            return Lookup::Undefined;
        };
        match take_fields(value, r) {
            Ok(v) => Lookup::Found(Cow::Borrowed(v)),
            Err(e) => Lookup::Invalid(e),
        }
    }
}

/// The var's fields taken from its value, as Concourse does: a missing
/// field is an error naming the var, never an empty value.
pub fn take_fields<'v>(mut value: &'v Value, r: &VarRef) -> Result<&'v Value, String> {
    for field in &r.fields {
        value = match value {
            Value::Object(m) => match m.get(field) {
                Some(v) => v,
                None => return Err(format!("missing field '{field}' in var: {r}")),
            },
            other => {
                return Err(format!(
                    "cannot access field '{field}' of non-map value ({}) from var: {r}",
                    kind(other)
                ))
            }
        };
    }
    Ok(value)
}

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// Why interpolation failed: every undefined var and every other problem,
/// all at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VarsError {
    /// Vars no source defines, spelled as Concourse does, sorted.
    pub undefined: Vec<String>,
    /// Other problems (a missing field, a var that does not parse, a value
    /// that cannot be spliced into text), sorted.
    pub problems: Vec<String>,
}

impl fmt::Display for VarsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.undefined.is_empty() {
            parts.push(format!("undefined vars: {}", self.undefined.join(", ")));
        }
        parts.extend(self.problems.iter().cloned());
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for VarsError {}

struct Interpolator<'a> {
    vars: &'a dyn VarLookup,
    /// Local vars (`((.:x))`) are not looked up and stay as written, for
    /// the engine to fill in when the step runs.
    keep_local: bool,
    undefined: BTreeSet<String>,
    problems: BTreeSet<String>,
    inserted: usize,
    /// Sizes of whole values already measured, by var text.
    sizes: HashMap<String, usize>,
}

/// What a string becomes.
enum Outcome {
    /// A string that was exactly one var: the var's value.
    Whole(Value),
    Text(String),
}

impl<'a> Interpolator<'a> {
    fn budget(&mut self, n: usize) -> bool {
        self.inserted = self.inserted.saturating_add(n);
        if self.inserted > MAX_INSERTED_BYTES {
            self.problems.insert(format!(
                "interpolation would insert more than {MAX_INSERTED_BYTES} bytes"
            ));
            return false;
        }
        true
    }

    fn value(&mut self, v: &Value, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            self.problems
                .insert(format!("nested deeper than {MAX_DEPTH} levels"));
            return Value::Null;
        }
        match v {
            Value::String(s) => match self.string(s) {
                Outcome::Whole(v) => v,
                Outcome::Text(t) => Value::String(t),
            },
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.value(i, depth + 1)).collect())
            }
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, item) in m {
                    let key = self.key(k);
                    let item = self.value(item, depth + 1);
                    if out.contains_key(&key) {
                        self.problems.insert(format!(
                            "two keys of one map become {key:?} once vars are interpolated"
                        ));
                    }
                    out.insert(key, item);
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    fn key(&mut self, k: &str) -> String {
        match self.string(k) {
            Outcome::Text(t) => t,
            Outcome::Whole(Value::String(s)) => s,
            Outcome::Whole(v @ (Value::Number(_) | Value::Bool(_) | Value::Null)) => v.to_string(),
            Outcome::Whole(v) => {
                self.problems.insert(format!(
                    "cannot use a {} as a map key, from var: {}",
                    kind(&v),
                    &k[2..k.len() - 2]
                ));
                k.to_string()
            }
        }
    }

    fn string(&mut self, s: &str) -> Outcome {
        let found = scan(s);
        if found.is_empty() {
            return Outcome::Text(s.to_string());
        }
        if let [one] = found.as_slice() {
            if one.start == 0 && one.end == s.len() {
                return match self.resolve(one.inner) {
                    Some(v) => {
                        let size = match self.sizes.get(one.inner) {
                            Some(&n) => n,
                            None => {
                                let n = approximate_size(&v);
                                self.sizes.insert(one.inner.to_string(), n);
                                n
                            }
                        };
                        if self.budget(size) {
                            Outcome::Whole(v.into_owned())
                        } else {
                            Outcome::Text(s.to_string())
                        }
                    }
                    None => Outcome::Text(s.to_string()),
                };
            }
        }
        let mut out = String::with_capacity(s.len());
        let mut last = 0;
        for f in found {
            out.push_str(&s[last..f.start]);
            last = f.end;
            let literal = &s[f.start..f.end];
            let resolved = self.resolve(f.inner);
            let text = match resolved.as_deref() {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(other) => {
                    self.problems.insert(format!(
                        "cannot interpolate non-primitive value ({}) from var: {} (only strings and numbers can be part of a longer string)",
                        kind(other),
                        f.inner
                    ));
                    literal.to_string()
                }
                None => literal.to_string(),
            };
            if !self.budget(text.len()) {
                return Outcome::Text(s.to_string());
            }
            out.push_str(&text);
        }
        out.push_str(&s[last..]);
        Outcome::Text(out)
    }

    /// The var's value, or None with the reason recorded.
    fn resolve(&mut self, inner: &str) -> Option<Cow<'a, Value>> {
        let vars: &'a dyn VarLookup = self.vars;
        let r = match VarRef::parse(inner) {
            Ok(r) => r,
            Err(e) => {
                self.problems.insert(e);
                return None;
            }
        };
        if self.keep_local && r.is_local() {
            return None;
        }
        match vars.lookup(&r) {
            Lookup::Found(v) => Some(v),
            Lookup::Undefined => {
                self.undefined.insert(r.to_string());
                None
            }
            Lookup::Invalid(e) => {
                self.problems.insert(e);
                None
            }
        }
    }
}

/// Roughly how many bytes `v` takes as JSON, without allocating it.
fn approximate_size(v: &Value) -> usize {
    let mut total = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 20,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items);
                2 + items.len()
            }
            Value::Object(m) => {
                stack.extend(m.values());
                2 + m.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        });
    }
    total
}

/// `template` with every var replaced by its value from `vars`; an error
/// naming every var that could not be resolved.
pub fn interpolate(template: &Value, vars: &Vars) -> Result<Value, VarsError> {
    interpolate_with(template, vars)
}

/// [`interpolate`] with vars from any [`VarLookup`].
pub fn interpolate_with(template: &Value, vars: &dyn VarLookup) -> Result<Value, VarsError> {
    interpolate_as(template, vars, false)
}

/// As [`interpolate_with`], but local vars (`((.:x))`) stay in place as
/// written: what a build's plan becomes before it runs, its local vars
/// filled in step by step as `load_var` steps define them.
pub fn interpolate_keeping_local(
    template: &Value,
    vars: &dyn VarLookup,
) -> Result<Value, VarsError> {
    interpolate_as(template, vars, true)
}

fn interpolate_as(
    template: &Value,
    vars: &dyn VarLookup,
    keep_local: bool,
) -> Result<Value, VarsError> {
    let mut i = Interpolator {
        vars,
        keep_local,
        undefined: BTreeSet::new(),
        problems: BTreeSet::new(),
        inserted: 0,
        sizes: HashMap::new(),
    };
    let out = i.value(template, 0);
    if i.undefined.is_empty() && i.problems.is_empty() {
        Ok(out)
    } else {
        Err(VarsError {
            undefined: i.undefined.into_iter().collect(),
            problems: i.problems.into_iter().collect(),
        })
    }
}

/// As [`interpolate`], but a var no source defines stays in place as
/// written, as `fly set-pipeline` leaves it for a credential manager to
/// resolve when a build runs. Other problems are still errors.
pub fn interpolate_leaving_undefined(
    template: &Value,
    vars: &dyn VarLookup,
) -> Result<Value, VarsError> {
    let mut i = Interpolator {
        vars,
        keep_local: false,
        undefined: BTreeSet::new(),
        problems: BTreeSet::new(),
        inserted: 0,
        sizes: HashMap::new(),
    };
    let out = i.value(template, 0);
    if i.problems.is_empty() {
        Ok(out)
    } else {
        Err(VarsError {
            undefined: Vec::new(),
            problems: i.problems.into_iter().collect(),
        })
    }
}

/// Every var left in `value` (in strings and in map keys), sorted, each once,
/// spelled as Concourse does (or as written, when it does not parse).
/// Walks without recursion, so any depth is safe.
pub fn find_unresolved(value: &Value) -> Vec<String> {
    let mut names = BTreeSet::new();
    for_each_var(value, |inner| {
        names.insert(match VarRef::parse(inner) {
            Ok(r) => r.to_string(),
            Err(_) => inner.to_string(),
        });
    });
    names.into_iter().collect()
}

/// As [`find_unresolved`], without the build's local vars (`((.:x))`),
/// which only exist once the build runs.
pub fn find_unresolved_except_local(value: &Value) -> Vec<String> {
    let mut names = BTreeSet::new();
    for_each_var(value, |inner| match VarRef::parse(inner) {
        Ok(r) if r.is_local() => {}
        Ok(r) => {
            names.insert(r.to_string());
        }
        Err(_) => {
            names.insert(inner.to_string());
        }
    });
    names.into_iter().collect()
}

/// Every var in `value` parsed, each once, in Concourse's spelling order;
/// the texts that do not parse are the error.
pub fn find_refs(value: &Value) -> Result<Vec<VarRef>, Vec<String>> {
    let mut refs = std::collections::BTreeMap::new();
    let mut bad = BTreeSet::new();
    for_each_var(value, |inner| match VarRef::parse(inner) {
        Ok(r) => {
            refs.insert(r.to_string(), r);
        }
        Err(e) => {
            bad.insert(e);
        }
    });
    if bad.is_empty() {
        Ok(refs.into_values().collect())
    } else {
        Err(bad.into_iter().collect())
    }
}

/// Calls `f` with the inner text of every var in `value`'s strings and map
/// keys. Walks without recursion, so any depth is safe.
fn for_each_var(value: &Value, mut f: impl FnMut(&str)) {
    let mut add = |s: &str| {
        for found in scan(s) {
            f(found.inner);
        }
    };
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => add(s),
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => {
                for (k, item) in m {
                    add(k);
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
