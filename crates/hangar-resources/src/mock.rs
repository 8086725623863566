//! The `mock` type, for tests: its versions and files are whatever its
//! source says.
//!
//! source: `{"versions": ["v1", "v2"]?, "files": {"name": "content"}?,
//! "fail": bool?}`; version: `{"version": "v2"}`.
//!
//! - `check` returns the versions, oldest first (default `["v1"]`): all of
//!   them when no version is given, those from the given one on when it is
//!   listed, and the newest when it is not.
//! - `in` writes a `version` file holding the version, and the source's
//!   files, into the destination.
//! - `out` answers `params.version` (default: the newest version).
//! - With `fail: true`, `in` and `out` fail with exit code 1.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::{
    metadata, parse_request, shorten, Call, CheckRequest, InRequest, NoParams, OutRequest,
};

/// The longest version string accepted.
const MAX_VERSION_LEN: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    #[serde(default)]
    pub versions: Option<Vec<String>>,
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub fail: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Version {
    pub version: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutParams {
    #[serde(default)]
    pub version: Option<String>,
}

impl Source {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(versions) = &self.versions {
            if versions.is_empty() {
                return Err(
                    "source.versions: must not be empty (leave it out for [\"v1\"])".into(),
                );
            }
            for (i, v) in versions.iter().enumerate() {
                check_version(v).map_err(|why| format!("source.versions[{i}]: {why}"))?;
            }
        }
        for name in self.files.keys() {
            check_file_name(name).map_err(|why| format!("source.files: {why}"))?;
        }
        Ok(())
    }

    fn versions(&self) -> Vec<&str> {
        match &self.versions {
            Some(versions) => versions.iter().map(String::as_str).collect(),
            None => vec!["v1"],
        }
    }

    fn refuse_if_told(&self, action: &str) -> Result<(), String> {
        if self.fail {
            Err(format!("mock: {action} fails because source.fail is true"))
        } else {
            Ok(())
        }
    }
}

fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("a version must not be empty".into());
    }
    if version.len() > MAX_VERSION_LEN || version.chars().any(char::is_control) {
        return Err(format!(
            "{:?} is not a version (at most {MAX_VERSION_LEN} bytes, no control characters)",
            shorten(version)
        ));
    }
    Ok(())
}

/// A file name in `source.files`: a relative path without `..`, `.` or empty
/// parts, and not the `version` file `in` writes itself.
fn check_file_name(name: &str) -> Result<(), String> {
    let shown = shorten(name);
    if name.is_empty() || name.contains('\0') || name.chars().any(char::is_control) {
        return Err(format!(
            "{shown:?} is not a file name (empty or holds control characters)"
        ));
    }
    if name.starts_with('/') {
        return Err(format!("{shown:?} must be a relative path"));
    }
    if name
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!("{shown:?} must not have '..', '.' or empty parts"));
    }
    if name == "version" {
        return Err("\"version\" is the file in writes the version to; choose another name".into());
    }
    Ok(())
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, String> {
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    request.source.validate()?;
    let versions = request.source.versions();
    let from = match &request.version {
        None => 0,
        Some(given) => versions
            .iter()
            .position(|v| *v == given.version)
            .unwrap_or(versions.len() - 1),
    };
    let answer: Vec<Value> = versions[from..]
        .iter()
        .map(|v| json!({ "version": v }))
        .collect();
    Ok(Value::Array(answer))
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, String> {
    let request: InRequest<Source, Version, NoParams> = parse_request(call.request)?;
    request.source.validate()?;
    check_version(&request.version.version).map_err(|why| format!("version.version: {why}"))?;
    request.source.refuse_if_told("in")?;
    let dest = call.dir.expect("in has a directory");
    let version = &request.version.version;

    let write = |relative: &str, content: &str| -> Result<(), String> {
        let path = dest.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, content).map_err(|e| format!("write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    write("version", version)?;
    for (name, content) in &request.source.files {
        write(name, content)?;
    }
    let _ = writeln!(
        call.log,
        "mock: fetched version {version:?} with {} file(s) into {}",
        request.source.files.len(),
        dest.display()
    );
    Ok(json!({
        "version": { "version": version },
        "metadata": [metadata("version", version)],
    }))
}

pub(crate) fn put(call: Call<'_>) -> Result<Value, String> {
    let request: OutRequest<Source, OutParams> = parse_request(call.request)?;
    request.source.validate()?;
    let src = call.dir.expect("out has a directory");
    if !Path::new(src).is_dir() {
        return Err(format!("out: {} is not a directory", src.display()));
    }
    request.source.refuse_if_told("out")?;
    let versions = request.source.versions();
    let version = match request.params.and_then(|p| p.version) {
        Some(version) => {
            check_version(&version).map_err(|why| format!("params.version: {why}"))?;
            version
        }
        None => versions[versions.len() - 1].to_string(),
    };
    Ok(json!({
        "version": { "version": version },
        "metadata": [],
    }))
}
