//! Where Concourse's Vault manager looks a var up, and what a Vault secret
//! gives it; no I/O (the client is `hangar_creds::vault`).
//!
//! - Lookup templates (default `/{{.Team}}/{{.Pipeline}}/{{.Secret}}` then
//!   `/{{.Team}}/{{.Secret}}`) are joined to the path prefix (default
//!   `/concourse`) and tried in order; a template naming the pipeline is
//!   skipped for a build without one. Then `<prefix>/<shared-path>/<name>`
//!   when a shared path is set.
//! - A secret's value is its `value` key when it has one, else the map of
//!   all its keys; a var's fields are taken from that value (Concourse's
//!   rule, so `((creds.user))` of a secret with a `value` key reads
//!   `value.user`).
//! - A KV v2 mount keeps secrets under `<mount>/data/`; which version a
//!   mount is comes from Vault (`sys/internal/ui/mounts/<path>`).

use serde_json::{Map, Value};

use super::check_segment;
use crate::vars::{take_fields, VarRef};

/// Concourse's default `--vault-path-prefix`.
pub const DEFAULT_PATH_PREFIX: &str = "/concourse";

/// Concourse's default `--vault-lookup-templates`, in order.
pub const DEFAULT_LOOKUP_TEMPLATES: [&str; 2] = [
    "/{{.Team}}/{{.Pipeline}}/{{.Secret}}",
    "/{{.Team}}/{{.Secret}}",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Team,
    Pipeline,
    Secret,
}

/// One lookup template, joined to the path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupTemplate {
    parts: Vec<Part>,
}

impl LookupTemplate {
    /// `prefix` and `template` joined; the only actions are `{{.Team}}`,
    /// `{{.Pipeline}}` and `{{.Secret}}` (spaces inside the braces
    /// allowed), as Concourse's templates take no others.
    pub fn parse(prefix: &str, template: &str) -> Result<LookupTemplate, String> {
        let fail = |why: &str| format!("lookup template {template:?}: {why}");
        if template.trim().is_empty() {
            return Err(fail("is empty"));
        }
        let mut parts = vec![Part::Text(format!("{prefix}/"))];
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            parts.push(Part::Text(rest[..start].to_string()));
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| fail("has an unclosed {{"))?;
            parts.push(match after[..end].trim() {
                ".Team" => Part::Team,
                ".Pipeline" => Part::Pipeline,
                ".Secret" => Part::Secret,
                other => {
                    return Err(fail(&format!(
                        "{{{{{other}}}}} is not one of {{{{.Team}}}}, {{{{.Pipeline}}}}, \
                         {{{{.Secret}}}}"
                    )))
                }
            });
            rest = &after[end + 2..];
        }
        if rest.contains("}}") {
            return Err(fail("has a }} without {{"));
        }
        parts.push(Part::Text(rest.to_string()));
        let t = LookupTemplate { parts };
        // Whatever a valid team, pipeline and var fill in, the text around
        // them must make a path: no `..`, not empty.
        clean_path(&t.render("team", Some("pipeline"), "secret")).map_err(|e| fail(&e))?;
        Ok(t)
    }

    /// Whether the template names the pipeline (so a build without one
    /// skips it).
    pub fn needs_pipeline(&self) -> bool {
        self.parts.contains(&Part::Pipeline)
    }

    fn render(&self, team: &str, pipeline: Option<&str>, secret: &str) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Team => team,
                Part::Pipeline => pipeline.unwrap_or(""),
                Part::Secret => secret,
            })
            .collect()
    }
}

/// `path` as Vault's API takes it: no empty or `.` segments, no leading or
/// trailing `/`. A `..` is refused rather than resolved.
pub fn clean_path(path: &str) -> Result<String, String> {
    let mut out = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(format!("path {path:?} holds '..'")),
            s => out.push(s),
        }
    }
    if out.is_empty() {
        return Err(format!("path {path:?} is empty"));
    }
    Ok(out.join("/"))
}

/// Where the Vault manager looks vars up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultLookup {
    prefix: String,
    templates: Vec<LookupTemplate>,
    shared: Option<String>,
}

impl VaultLookup {
    /// `templates` empty means Concourse's defaults.
    pub fn new(
        prefix: &str,
        templates: &[String],
        shared_path: Option<&str>,
    ) -> Result<VaultLookup, String> {
        let prefix = clean_path(prefix).map_err(|e| format!("the Vault path prefix: {e}"))?;
        let defaults: Vec<String>;
        let templates = if templates.is_empty() {
            defaults = DEFAULT_LOOKUP_TEMPLATES.map(String::from).to_vec();
            &defaults
        } else {
            templates
        };
        let templates = templates
            .iter()
            .map(|t| LookupTemplate::parse(&prefix, t))
            .collect::<Result<Vec<_>, _>>()?;
        let shared = match shared_path.filter(|s| !s.trim().is_empty()) {
            Some(s) => Some(
                clean_path(&format!("{prefix}/{s}"))
                    .map_err(|e| format!("the Vault shared path: {e}"))?,
            ),
            None => None,
        };
        Ok(VaultLookup {
            prefix,
            templates,
            shared,
        })
    }

    /// The prefix, cleaned (`concourse`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The paths read for var `name`, in order. Team, pipeline and name
    /// must each be one path segment, so none can reach another team's
    /// secrets.
    pub fn candidates(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<Vec<String>, String> {
        check_segment("team", team)?;
        check_segment("var", name)?;
        if let Some(p) = pipeline {
            check_segment("pipeline", p)?;
        }
        let mut out = Vec::new();
        for t in &self.templates {
            if t.needs_pipeline() && pipeline.is_none() {
                continue;
            }
            let path = clean_path(&t.render(team, pipeline, name))?;
            if !out.contains(&path) {
                out.push(path);
            }
        }
        if let Some(shared) = &self.shared {
            let path = format!("{shared}/{name}");
            if !out.contains(&path) {
                out.push(path);
            }
        }
        Ok(out)
    }
}

/// The path of `path` in KV v2 mount `mount` (as Vault names it, `secret/`):
/// `<mount>data/<rest>`. `None` when `path` is not under `mount` (a server
/// answering about another mount).
pub fn kv2_data_path(path: &str, mount: &str) -> Option<String> {
    let mount = mount.trim_matches('/');
    if mount.is_empty() {
        return None;
    }
    let rest = path.strip_prefix(mount)?.strip_prefix('/')?;
    if rest.is_empty() {
        return None;
    }
    Some(format!("{mount}/data/{rest}"))
}

/// What a Vault secret's data gives the var `r`: its `value` key, or the
/// map of all its keys when it has none; then `r`'s fields.
pub fn secret_value(data: &Map<String, Value>, r: &VarRef) -> Result<Value, String> {
    match data.get("value") {
        Some(v) => take_fields(v, r).cloned(),
        None => take_fields(&Value::Object(data.clone()), r).cloned(),
    }
}

#[cfg(test)]
mod tests;
