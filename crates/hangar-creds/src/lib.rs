//! Credential managers: where web reads the `((vars))` a build's plan still
//! holds. The rules (which paths, in which order, what a secret's value is)
//! are `hangar_core::vars::credentials`; this crate does the reading:
//!
//! - [`kube::KubeSecrets`]: Kubernetes secrets, through the API server.
//! - [`dir::DirSecrets`]: a directory of files, for single-node installs.
//! - [`vault::VaultSecrets`]: Vault's (or OpenBao's) KV v1 and v2 secrets.
//!
//! [`Credentials::resolve`] looks up every var of a value and returns what it
//! found, to interpolate with `hangar_core::vars::interpolate_with` and to
//! redact from the build's output. A var found nowhere is left out (the
//! interpolation names it); a manager that cannot answer (refused, down,
//! a malformed secret) is an error, never "not found": a build must not
//! run with a var missing because the API server was slow.

pub mod cache;
pub mod dir;
pub mod kube;
pub mod vault;

use std::collections::BTreeMap;

use hangar_core::vars::credentials::{Resolved, MAX_VARS_PER_BUILD};
use hangar_core::vars::{find_refs, VarRef};
use serde_json::Value;

use cache::Cache;

/// Why a credential manager could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredsError {
    /// The var cannot name a credential (a path separator, `..`, an
    /// invalid Kubernetes name), or a var does not parse.
    #[error("{0}")]
    Invalid(String),
    /// The manager refused or failed; the message names the var and where.
    #[error("{0}")]
    Backend(String),
}

/// What a backend found for one candidate: a Kubernetes secret's data, a
/// file's text, or a Vault secret's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Secret(BTreeMap<String, String>),
    File(String),
    Vault(serde_json::Map<String, Value>),
}

/// One credential manager of web (Concourse has one at a time too).
pub enum Manager {
    Kubernetes(kube::KubeSecrets),
    Dir(dir::DirSecrets),
    Vault(vault::VaultSecrets),
}

/// A manager and its cache.
pub struct Credentials {
    manager: Manager,
    cache: Cache,
}

/// Shows where secrets come from, never a secret.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("manager", &self.describe())
            .finish()
    }
}

impl Credentials {
    pub fn new(manager: Manager, cache: Cache) -> Credentials {
        Credentials { manager, cache }
    }

    /// A short description for logs: which manager, where.
    pub fn describe(&self) -> String {
        match &self.manager {
            Manager::Kubernetes(k) => format!(
                "Kubernetes secrets at {} in namespaces {}<team>",
                k.api_base(),
                k.namespace_prefix()
            ),
            Manager::Dir(d) => format!("files under {}", d.root().display()),
            Manager::Vault(v) => format!("Vault at {} under /{}", v.url(), v.lookup().prefix()),
        }
    }

    /// Looks up every var without a source in `value`, for team `team` and
    /// pipeline `pipeline` (none for a one-off build: team paths only).
    pub async fn resolve(
        &self,
        value: &Value,
        team: &str,
        pipeline: Option<&str>,
    ) -> Result<Resolved, CredsError> {
        let refs = find_refs(value).map_err(|e| CredsError::Invalid(e.join("; ")))?;
        // A var with a source is a pipeline var source's, not the manager's.
        let refs: Vec<VarRef> = refs.into_iter().filter(|r| r.source.is_none()).collect();
        if refs.len() > MAX_VARS_PER_BUILD {
            return Err(CredsError::Invalid(format!(
                "the plan holds {} vars; a credential manager is asked for at most \
                 {MAX_VARS_PER_BUILD}",
                refs.len()
            )));
        }
        let mut by_name: BTreeMap<String, Option<Found>> = BTreeMap::new();
        let mut out = Resolved::default();
        for r in &refs {
            if !by_name.contains_key(&r.path) {
                let found = self.find(team, pipeline, &r.path).await?;
                by_name.insert(r.path.clone(), found);
            }
            let value = match &by_name[&r.path] {
                None => continue,
                Some(Found::Secret(data)) => hangar_core::vars::credentials::kube_value(data, r),
                Some(Found::File(text)) => hangar_core::vars::credentials::file_value(text, r),
                Some(Found::Vault(data)) => {
                    hangar_core::vars::credentials::vault::secret_value(data, r)
                }
            };
            // A missing field is reported with the undefined vars, at once.
            match value {
                Ok(v) => out.insert(r, v),
                Err(why) => out.insert_invalid(r, why),
            }
        }
        Ok(out)
    }

    /// The first candidate that exists, in Concourse's order.
    async fn find(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<Option<Found>, CredsError> {
        match &self.manager {
            Manager::Kubernetes(k) => {
                let candidates = hangar_core::vars::credentials::kube_candidates(
                    k.namespace_prefix(),
                    team,
                    pipeline,
                    name,
                )
                .map_err(CredsError::Invalid)?;
                for c in candidates {
                    let key = format!("kube:{}/{}", c.namespace, c.name);
                    let found = match self.cache.get(&key) {
                        Some(hit) => hit,
                        None => {
                            let got = k.get(&c, name).await?.map(Found::Secret);
                            self.cache.put(&key, got.clone());
                            got
                        }
                    };
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Ok(None)
            }
            Manager::Dir(d) => {
                let candidates =
                    hangar_core::vars::credentials::path_candidates(team, pipeline, name)
                        .map_err(CredsError::Invalid)?;
                for segments in candidates {
                    let key = format!("dir:{}", segments.join("/"));
                    let found = match self.cache.get(&key) {
                        Some(hit) => hit,
                        None => {
                            let got = d.read(&segments, name).await?.map(Found::File);
                            self.cache.put(&key, got.clone());
                            got
                        }
                    };
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Ok(None)
            }
            Manager::Vault(v) => {
                let candidates = v
                    .lookup()
                    .candidates(team, pipeline, name)
                    .map_err(CredsError::Invalid)?;
                for path in candidates {
                    let key = format!("vault:{path}");
                    let found = match self.cache.get(&key) {
                        Some(hit) => hit,
                        None => {
                            let got = v.read(&path, name).await?.map(Found::Vault);
                            self.cache.put(&key, got.clone());
                            got
                        }
                    };
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Ok(None)
            }
        }
    }
}
