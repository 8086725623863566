//! Where a credential manager looks a var up, and what it makes of what it
//! finds: Concourse's rules, with no I/O (the backends are in
//! `hangar-creds`).
//!
//! - Vault: see [`vault`] (lookup templates, KV v1 and v2).
//! - Path-style managers (Concourse's Vault with its default templates,
//!   and hangar's directory of files) try `<prefix>/<team>/<pipeline>/<name>` then
//!   `<prefix>/<team>/<name>`; a build with no pipeline only the second.
//! - Kubernetes tries, in namespace `<namespace-prefix><team>` (default
//!   prefix `concourse-`), secret `<pipeline>.<name>` then `<name>`. A
//!   secret's value is its `value` key when it has one, else the map of all
//!   its keys; a field is a key (see [`kube_value`]).
//! - Only the var's name (the part before the first `.`) picks the secret;
//!   its fields are taken from what was found, and a missing field is an
//!   error naming the var, never an empty string nor a reason to try the
//!   next path (Concourse stops at the first path that exists).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{take_fields, Lookup, VarLookup, VarRef};

pub mod vault;

/// Concourse's default Kubernetes namespace prefix.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "concourse-";

/// The longest var name a manager is asked about: a longer one cannot be a
/// secret's name anywhere (Kubernetes: 253 characters).
pub const MAX_NAME_LEN: usize = 253;

/// The most vars one build may ask a credential manager for: each is up
/// to two requests.
pub const MAX_VARS_PER_BUILD: usize = 1000;

/// Whether `segment` (a team, pipeline or var name) may be one segment of a
/// path: no separators, no `.`/`..`, no control characters. Refused rather
/// than escaped, so a var can never name a file or secret outside its
/// team's.
pub fn check_segment(what: &str, segment: &str) -> Result<(), String> {
    let why = if segment.is_empty() {
        Some("is empty")
    } else if segment.len() > MAX_NAME_LEN {
        Some("is longer than 253 bytes")
    } else if segment == "." || segment == ".." {
        Some("is '.' or '..'")
    } else if segment.contains(['/', '\\']) {
        Some("holds a path separator")
    } else if segment.chars().any(char::is_control) {
        Some("holds a control character")
    } else {
        None
    };
    match why {
        Some(why) => Err(format!(
            "{what} {:?} {why}: it cannot name a credential",
            crate::names::shorten(segment)
        )),
        None => Ok(()),
    }
}

/// The paths a path-style manager tries for `name`, in order, as segments
/// under its root: `[team, pipeline, name]` then `[team, name]`.
pub fn path_candidates(
    team: &str,
    pipeline: Option<&str>,
    name: &str,
) -> Result<Vec<Vec<String>>, String> {
    check_segment("team", team)?;
    check_segment("var", name)?;
    let mut out = Vec::with_capacity(2);
    if let Some(p) = pipeline {
        check_segment("pipeline", p)?;
        out.push(vec![team.to_string(), p.to_string(), name.to_string()]);
    }
    out.push(vec![team.to_string(), name.to_string()]);
    Ok(out)
}

/// The same paths spelled as Concourse's Vault manager spells them,
/// `/<prefix>/<team>/<pipeline>/<name>`, for messages and docs.
pub fn vault_paths(
    prefix: &str,
    team: &str,
    pipeline: Option<&str>,
    name: &str,
) -> Result<Vec<String>, String> {
    let prefix = prefix.trim_end_matches('/');
    Ok(path_candidates(team, pipeline, name)?
        .into_iter()
        .map(|segments| format!("{prefix}/{}", segments.join("/")))
        .collect())
}

/// A Kubernetes secret to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSecret {
    pub namespace: String,
    pub name: String,
}

/// Whether `s` is a DNS-1123 subdomain (what Kubernetes takes as a secret
/// name): lowercase letters, digits, `-` and `.`, starting and ending with
/// a letter or digit.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// Whether `s` is a DNS-1123 label (a namespace name).
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_subdomain(s) && !s.contains('.')
}

/// The secrets Kubernetes is asked for `name`, in order. A name Kubernetes
/// could not hold is refused here, so nothing but a valid name ever
/// reaches a URL.
pub fn kube_candidates(
    namespace_prefix: &str,
    team: &str,
    pipeline: Option<&str>,
    name: &str,
) -> Result<Vec<KubeSecret>, String> {
    let namespace = format!("{namespace_prefix}{team}");
    if !is_dns_label(&namespace) {
        return Err(format!(
            "namespace {:?} (prefix {namespace_prefix:?} and team {team:?}) is not a valid \
             Kubernetes namespace name",
            crate::names::shorten(&namespace)
        ));
    }
    let mut names = Vec::with_capacity(2);
    if let Some(p) = pipeline {
        names.push(format!("{p}.{name}"));
    }
    names.push(name.to_string());
    names
        .into_iter()
        .map(|secret| {
            if is_dns_subdomain(&secret) {
                Ok(KubeSecret {
                    namespace: namespace.clone(),
                    name: secret,
                })
            } else {
                Err(format!(
                    "var {:?}: secret name {:?} is not a valid Kubernetes secret name \
                     (lowercase letters, digits, '-' and '.')",
                    crate::names::shorten(name),
                    crate::names::shorten(&secret)
                ))
            }
        })
        .collect()
}

/// What a Kubernetes secret's data (decoded) gives the var `r`: its `value`
/// key, or the map of all its keys when it has none (as Concourse); then
/// `r`'s fields. A secret with a `value` key still answers a field by its
/// key (`((creds.user))` reads key `user`), where Concourse would fail on a
/// string.
pub fn kube_value(data: &BTreeMap<String, String>, r: &VarRef) -> Result<Value, String> {
    let whole: Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if r.fields.is_empty() {
        return Ok(match data.get("value") {
            Some(v) => Value::String(v.clone()),
            None => Value::Object(whole),
        });
    }
    take_fields(&Value::Object(whole), r).cloned()
}

/// What a file of the directory manager gives the var `r`: without fields,
/// the file's text (one trailing newline removed, as editors add it); with
/// fields, the file read as a YAML or JSON mapping and the fields taken
/// from it.
pub fn file_value(text: &str, r: &VarRef) -> Result<Value, String> {
    if r.fields.is_empty() {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(Value::String(text.to_string()));
    }
    let parsed = crate::yaml::from_str(text).map_err(|e| {
        format!(
            "var {r}: its file is not a YAML or JSON mapping, so it has no fields: {}",
            e.message
        )
    })?;
    if !parsed.is_object() {
        return Err(format!(
            "var {r}: its file is not a YAML or JSON mapping, so it has no fields"
        ));
    }
    take_fields(&parsed, r).cloned()
}

/// Vars a credential manager resolved before interpolation, by their
/// spelling, with every secret value they hold for redaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    values: BTreeMap<String, Value>,
    /// Vars found whose fields are not there: reported with the undefined
    /// ones, all at once.
    invalid: BTreeMap<String, String>,
}

impl Resolved {
    pub fn insert(&mut self, r: &VarRef, value: Value) {
        self.values.insert(r.to_string(), value);
    }

    /// Records why a var that was found cannot be used (a missing field).
    pub fn insert_invalid(&mut self, r: &VarRef, why: String) {
        self.invalid.insert(r.to_string(), why);
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every string and number the resolved vars hold: what the build's
    /// output must not show.
    pub fn secret_values(&self) -> Vec<String> {
        super::redact::secret_texts(self.values.values())
    }
}

impl VarLookup for Resolved {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        let key = r.to_string();
        if let Some(why) = self.invalid.get(&key) {
            return Lookup::Invalid(why.clone());
        }
        match self.values.get(&key) {
            Some(v) => Lookup::Found(Cow::Borrowed(v)),
            None => Lookup::Undefined,
        }
    }
}

#[cfg(test)]
mod tests;
