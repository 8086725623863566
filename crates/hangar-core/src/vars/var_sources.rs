//! A pipeline's `var_sources`, resolved for `((source:name.field))`.
//!
//! hangar has one var source type, Concourse's `dummy` (its vars are given
//! in its config: `config: {vars: {name: value}}`). Concourse's other
//! types (`vault`, `ssm`, `secretsmanager`, `idtoken`) are not resolved per
//! pipeline (Vault is read only as web's credential manager, `hangar web
//! --vault-url`); a pipeline naming one is refused when it is set, never
//! accepted and then left unresolved.
//!
//! A var source's config may use another's vars (`((other:name))`); sources
//! are resolved in dependency order, as Concourse orders them. Sources that
//! read each other in a loop never resolve and are refused, and so is a
//! chain of sources longer than [`MAX_CHAIN`], which no real config needs.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{interpolate_with, take_fields, Lookup, VarLookup, VarRef};
use crate::pipeline::VarSource;

/// The var source types hangar resolves.
pub const SUPPORTED_TYPES: &[&str] = &["dummy"];

/// The longest chain of var sources reading each other's vars.
pub const MAX_CHAIN: usize = 8;

/// Why a `dummy` source's config is refused, if it is.
pub fn check_dummy_config(config: &Value) -> Result<(), String> {
    let Some(m) = config.as_object() else {
        return Err("expected a mapping with `vars`".into());
    };
    for key in m.keys() {
        if key != "vars" {
            return Err(format!(
                "unknown field {:?} of a dummy var source (it takes only `vars`)",
                crate::names::shorten(key)
            ));
        }
    }
    match m.get("vars") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err("`vars` of a dummy var source must be a mapping".into()),
    }
}

/// Why a var source of type `source_type` cannot be used, if it cannot.
pub fn check_type(source_type: &str) -> Result<(), String> {
    if SUPPORTED_TYPES.contains(&source_type) {
        Ok(())
    } else {
        Err(format!(
            "var source type {:?} is not supported by hangar: only dummy var sources are \
             resolved (hangar has no ssm, secretsmanager or idtoken backend, and reads Vault \
             only as web's credential manager, not per pipeline); `hangar web --vault-url`, \
             `--credentials-kubernetes` or `--credentials-dir` serve ((vars)) without a \
             source",
            crate::names::shorten(source_type)
        ))
    }
}

/// Refuses a chain of sources reading each other's vars longer than
/// [`MAX_CHAIN`] (sources that never resolve, a loop, are the pipeline
/// validation's own error).
pub fn check_chain(sources: &[VarSource]) -> Result<(), String> {
    let deps: Vec<Vec<String>> = sources
        .iter()
        .map(|v| {
            super::find_refs(&v.config)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| r.source)
                .collect()
        })
        .collect();
    let mut depth: Vec<Option<usize>> = vec![None; sources.len()];
    // Round n resolves the sources whose dependencies all resolved before:
    // their chain is n long.
    for round in 1..=sources.len() {
        let known: Vec<(String, usize)> = sources
            .iter()
            .zip(&depth)
            .filter_map(|(v, d)| d.map(|d| (v.name.clone(), d)))
            .collect();
        let mut progress = false;
        for (i, d) in deps.iter().enumerate() {
            if depth[i].is_none() && d.iter().all(|s| known.iter().any(|(n, _)| n == s)) {
                depth[i] = Some(round);
                progress = true;
                if round > MAX_CHAIN {
                    return Err(format!(
                        "a chain of var sources reading each other's vars is longer than \
                         {MAX_CHAIN}: {}",
                        sources[i].name
                    ));
                }
            }
        }
        if !progress {
            break;
        }
    }
    Ok(())
}

/// The vars of a pipeline's var sources, by source name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceVars {
    sources: BTreeMap<String, Map<String, Value>>,
}

impl SourceVars {
    /// Resolves every source, in dependency order. Errors name the source.
    pub fn resolve(sources: &[VarSource]) -> Result<SourceVars, String> {
        let mut done = SourceVars::default();
        let mut pending: Vec<&VarSource> = sources.iter().collect();
        for v in sources {
            check_type(&v.source_type).map_err(|e| format!("var_sources.{}: {e}", v.name))?;
            check_dummy_config(&v.config).map_err(|e| format!("var_sources.{}: {e}", v.name))?;
        }
        // Each round resolves every source whose vars are all available; a
        // chain of n sources takes n rounds.
        let mut rounds = 0;
        while !pending.is_empty() {
            if rounds == MAX_CHAIN {
                return Err(format!(
                    "var_sources: a chain of var sources reading each other's vars is longer \
                     than {MAX_CHAIN}: {}",
                    names(&pending)
                ));
            }
            rounds += 1;
            let mut next = Vec::new();
            let mut resolved_now = Vec::new();
            for v in pending {
                let deps = super::find_refs(&v.config)
                    .map_err(|e| format!("var_sources.{}: {}", v.name, e.join("; ")))?;
                // A var without a source is the credential manager's, not
                // another source's: interpolation below names it undefined.
                let ready = deps
                    .iter()
                    .filter_map(|r| r.source.as_ref())
                    .all(|s| done.sources.contains_key(s));
                if !ready {
                    next.push(v);
                    continue;
                }
                let config = interpolate_with(&v.config, &done)
                    .map_err(|e| format!("var_sources.{}: {e}", v.name))?;
                let vars = match config.get("vars") {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                resolved_now.push((v.name.clone(), vars));
            }
            if resolved_now.is_empty() {
                return Err(format!(
                    "var_sources: could not resolve inter-dependent var sources: {}",
                    names(&next)
                ));
            }
            done.sources.extend(resolved_now);
            pending = next;
        }
        Ok(done)
    }
}

fn names(sources: &[&VarSource]) -> String {
    sources
        .iter()
        .map(|v| v.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl VarLookup for SourceVars {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        let Some(source) = &r.source else {
            return Lookup::Undefined;
        };
        let Some(vars) = self.sources.get(source) else {
            return Lookup::Invalid(format!("missing source '{source}' in var: {r}"));
        };
        match vars.get(&r.path).map(|v| take_fields(v, r)) {
            None => Lookup::Undefined,
            Some(Ok(v)) => Lookup::Found(Cow::Borrowed(v)),
            Some(Err(e)) => Lookup::Invalid(e),
        }
    }
}

#[cfg(test)]
mod tests;
