//! The `mock` type: Concourse's mock resource (`concourse/mock-resource`),
//! its source fields and params with its semantics, plus a few fields of
//! hangar's own for tests. Every field is optional; an unknown one is
//! refused, naming it (Concourse's type refuses them too).
//!
//! source, Concourse's fields:
//! - `initial_version`: the version `check` gives when it is given none
//!   (default `mock`); `no_initial_version: true`: none then;
//!   `force_version`: `check` gives that version only, always.
//! - `create_files`: `{path: content}` that `in` writes below its
//!   directory; a content that is not a string is written as its JSON;
//!   `START_VAR` and `END_VAR` in a content become `((` and `))`.
//! - `check_delay`: a Go duration `check` sleeps before answering;
//!   `check_failure`: `check` fails with that message.
//! - `metadata`: `[{name, value}]` that every `in` and `out` answers.
//! - `log`: a message every action logs first.
//! - `mirror_self`: refused by `in` (and `mirror_self_via_params`): this
//!   mock is a program of the worker, not an image, so it has no image of
//!   itself to give.
//!
//! source, hangar's own: `versions` (`check` lists them, oldest first,
//! from the given one on, or the newest when the given one is not listed;
//! not with `initial_version`, `no_initial_version` or `force_version`),
//! `files` (`{name: text}`, written by `in` as `create_files` is), `fail`
//! (`in` and `out` fail).
//!
//! version: `{"version": …, "privileged": …?}` (Concourse's type adds
//! `privileged` when it runs privileged; this one echoes it when given).
//!
//! - `check`: `force_version`; else the version given; else the initial
//!   version, unless `no_initial_version`. With `versions`, hangar's list.
//! - `in <dest>` writes `version` (the version and a newline) and the
//!   files (`files`, then `create_files`, then the params'
//!   `create_files_via_params` over them), and answers the version given.
//! - `out <src>` answers `params.version`; else the content of
//!   `params.file`, read from the put's inputs; else, with `versions`, the
//!   newest. `params.print_env: true` logs the action's environment.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{parse_request, shorten, Call, CheckRequest, InRequest, OutRequest};

/// The longest version accepted, from the source, a request or a file.
const MAX_VERSION_LEN: usize = 4096;

/// Concourse's type's initial version.
const DEFAULT_INITIAL_VERSION: &str = "mock";

/// The most files `in` writes (the request's size bounds their bytes).
const MAX_FILES: usize = 1000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    // Concourse's fields.
    #[serde(default)]
    pub mirror_self: bool,
    #[serde(default)]
    pub initial_version: String,
    #[serde(default)]
    pub no_initial_version: bool,
    #[serde(default)]
    pub force_version: String,
    #[serde(default)]
    pub create_files: BTreeMap<String, Value>,
    #[serde(default)]
    pub check_delay: String,
    #[serde(default)]
    pub check_failure: String,
    #[serde(default)]
    pub metadata: Option<Vec<MetadataField>>,
    #[serde(default)]
    pub log: String,
    // hangar's own.
    #[serde(default)]
    pub versions: Option<Vec<String>>,
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub fail: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetadataField {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Version {
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<String>,
}

impl Version {
    fn of(version: &str) -> Version {
        Version {
            version: version.to_string(),
            privileged: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetParams {
    #[serde(default)]
    pub mirror_self_via_params: bool,
    #[serde(default)]
    pub create_files_via_params: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutParams {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub print_env: bool,
}

impl Source {
    /// Checks every field before anything is done.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(versions) = &self.versions {
            if versions.is_empty() {
                return Err(
                    "source.versions: must not be empty (leave it out for Concourse's \
                     initial_version, \"mock\" by default)"
                        .into(),
                );
            }
            for (i, v) in versions.iter().enumerate() {
                check_version(v).map_err(|why| format!("source.versions[{i}]: {why}"))?;
            }
            let concourse: Vec<&str> = [
                ("initial_version", !self.initial_version.is_empty()),
                ("no_initial_version", self.no_initial_version),
                ("force_version", !self.force_version.is_empty()),
            ]
            .iter()
            .filter(|(_, set)| *set)
            .map(|(name, _)| *name)
            .collect();
            if !concourse.is_empty() {
                return Err(format!(
                    "source.versions (hangar's list of versions) cannot be given with {}: \
                     choose one way to say what check finds",
                    concourse.join(" or ")
                ));
            }
        }
        for (field, version) in [
            ("initial_version", &self.initial_version),
            ("force_version", &self.force_version),
        ] {
            if !version.is_empty() {
                check_version(version).map_err(|why| format!("source.{field}: {why}"))?;
            }
        }
        if !self.check_delay.is_empty() {
            check_delay(&self.check_delay)?;
        }
        for name in self.files.keys() {
            file_path(name).map_err(|why| format!("source.files: {why}"))?;
        }
        check_files("source.create_files", &self.create_files)?;
        if self.files.len() + self.create_files.len() > MAX_FILES {
            return Err(format!("source: more than {MAX_FILES} files"));
        }
        Ok(())
    }

    /// Logs `log`, as every action of Concourse's type does first.
    fn log(&self, log: &mut dyn std::io::Write) {
        if !self.log.is_empty() {
            let _ = writeln!(log, "mock: {}", self.log);
        }
    }

    fn refuse_if_told(&self, action: &str) -> Result<(), String> {
        if self.fail {
            Err(format!("mock: {action} fails because source.fail is true"))
        } else {
            Ok(())
        }
    }

    /// What every `in` and `out` answers as metadata.
    fn metadata(&self) -> Value {
        json!(self.metadata.as_deref().unwrap_or_default())
    }
}

/// A version: not empty, not too long, no control characters but the line
/// breaks and tabs a version read from a file may hold.
fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("a version must not be empty".into());
    }
    if version.len() > MAX_VERSION_LEN
        || version
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(format!(
            "{:?} is not a version (at most {MAX_VERSION_LEN} bytes, no control characters \
             but line breaks and tabs)",
            shorten(version)
        ));
    }
    Ok(())
}

/// `check_delay`, as Go's `time.ParseDuration` reads it; a negative one is
/// no delay, as Go's `time.Sleep` takes it.
fn check_delay(text: &str) -> Result<std::time::Duration, String> {
    hangar_core::task::parse_go_duration(text).map_err(|why| format!("source.check_delay: {why}"))
}

/// Where a file `in` writes goes, below the destination: Concourse's type
/// joins the name to it, so a leading `/`, `.` and empty parts stay inside;
/// `..` is refused, since it could leave the destination.
fn file_path(name: &str) -> Result<PathBuf, String> {
    let shown = shorten(name);
    if name.chars().any(char::is_control) {
        return Err(format!("{shown:?} holds control characters"));
    }
    let mut path = PathBuf::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(format!(
                    "{shown:?} must not have '..' parts: a file is written below in's \
                     directory, never outside it"
                ))
            }
            part => path.push(part),
        }
    }
    if path.as_os_str().is_empty() {
        return Err(format!("{shown:?} names no file"));
    }
    Ok(path)
}

fn check_files(field: &str, files: &BTreeMap<String, Value>) -> Result<(), String> {
    if files.len() > MAX_FILES {
        return Err(format!("{field}: more than {MAX_FILES} files"));
    }
    for name in files.keys() {
        file_path(name).map_err(|why| format!("{field}: {why}"))?;
    }
    Ok(())
}

/// A `create_files` content as Concourse's type writes it: a string as it
/// is, anything else as Go's JSON of it; then `START_VAR` and `END_VAR`
/// become `((` and `))`, so a file can hold vars a pipeline would fill.
fn file_content(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => hangar_core::yaml::go_json(other),
    };
    text.replace("START_VAR", "((").replace("END_VAR", "))")
}

/// `mirror_self`, refused: hangar's mock has no image of its own.
fn refuse_mirror_self(field: &str) -> Result<(), String> {
    Err(format!(
        "{field}: hangar's built-in mock runs as a program of the worker, not in an image, so \
         it has no image of itself to give; for a task's image, use a registry-image \
         image_resource"
    ))
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, String> {
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    if let Some(given) = &request.version {
        check_version(&given.version).map_err(|why| format!("version.version: {why}"))?;
    }
    source.log(call.log);
    if !source.check_delay.is_empty() {
        let delay = check_delay(&source.check_delay)?;
        // An action is a process of its own, run synchronously ([`crate::run`]
        // is never called on a runtime's thread): the delay is the action's.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(delay);
    }
    if !source.check_failure.is_empty() {
        return Err(format!(
            "intentionally failing to check: {}",
            source.check_failure
        ));
    }
    let versions: Vec<Version> = match &source.versions {
        // hangar's list, from the given version on.
        Some(versions) => {
            let from = match &request.version {
                None => 0,
                Some(given) => versions
                    .iter()
                    .position(|v| *v == given.version)
                    .unwrap_or(versions.len() - 1),
            };
            versions[from..].iter().map(|v| Version::of(v)).collect()
        }
        // Concourse's: forced, else the one given, else the initial one.
        None if !source.force_version.is_empty() => vec![Version::of(&source.force_version)],
        None => match request.version {
            Some(given) => vec![given],
            None if source.no_initial_version => vec![],
            None if source.initial_version.is_empty() => {
                vec![Version::of(DEFAULT_INITIAL_VERSION)]
            }
            None => vec![Version::of(&source.initial_version)],
        },
    };
    Ok(json!(versions))
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, String> {
    let request: InRequest<Source, Version, GetParams> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    let params = request.params.unwrap_or_default();
    check_files(
        "params.create_files_via_params",
        &params.create_files_via_params,
    )?;
    let version = &request.version;
    check_version(&version.version).map_err(|why| format!("version.version: {why}"))?;
    source.log(call.log);
    source.refuse_if_told("in")?;
    if source.mirror_self {
        refuse_mirror_self("source.mirror_self")?;
    }
    if params.mirror_self_via_params {
        refuse_mirror_self("params.mirror_self_via_params")?;
    }
    let dest = call.dir.expect("in has a directory");

    // Later ones win: hangar's files, the source's, then the params'.
    let mut files: BTreeMap<PathBuf, String> = BTreeMap::new();
    for (name, text) in &source.files {
        files.insert(file_path(name)?, text.clone());
    }
    for (name, value) in source
        .create_files
        .iter()
        .chain(&params.create_files_via_params)
    {
        files.insert(file_path(name)?, file_content(value));
    }

    let write = |relative: &Path, content: &str| -> Result<(), String> {
        let path = dest.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, content).map_err(|e| format!("write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    write(Path::new("version"), &format!("{}\n", version.version))?;
    for (path, content) in &files {
        write(path, content)?;
    }
    let _ = writeln!(
        call.log,
        "mock: fetched version {:?} with {} file(s) into {}",
        version.version,
        files.len(),
        dest.display()
    );
    Ok(json!({
        "version": version,
        "metadata": source.metadata(),
    }))
}

pub(crate) fn put(call: Call<'_>) -> Result<Value, String> {
    let request: OutRequest<Source, OutParams> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    let params = request.params.unwrap_or_default();
    let src = call.dir.expect("out has a directory");
    if !src.is_dir() {
        return Err(format!("out: {} is not a directory", src.display()));
    }
    source.log(call.log);
    source.refuse_if_told("out")?;
    let version = if !params.version.is_empty() {
        check_version(&params.version).map_err(|why| format!("params.version: {why}"))?;
        params.version.clone()
    } else if !params.file.is_empty() {
        let version =
            read_version_file(src, &params.file).map_err(|why| format!("params.file: {why}"))?;
        check_version(&version).map_err(|why| format!("params.file: {why}"))?;
        version
    } else if let Some(newest) = source.versions.as_ref().and_then(|v| v.last()) {
        newest.clone()
    } else {
        return Err("no version specified: give params.version or params.file".into());
    };
    let _ = writeln!(call.log, "mock: pushing version {version:?}");
    if params.print_env {
        for (key, value) in std::env::vars_os() {
            let _ = writeln!(
                call.log,
                "env: {}={}",
                key.to_string_lossy(),
                value.to_string_lossy()
            );
        }
    }
    Ok(json!({
        "version": Version::of(&version),
        "metadata": source.metadata(),
    }))
}

/// The content of `file`, a path below the put's source directory whose
/// first part is one of its inputs: read whole, as Concourse's type reads
/// it, but never from outside that input (no `..`, and no link inside it
/// that leads out: a task wrote what is there).
fn read_version_file(src: &Path, file: &str) -> Result<String, String> {
    let shown = shorten(file);
    let relative = file_path(file)?;
    let input = match relative.components().next() {
        Some(first) => src.join(first),
        None => return Err(format!("{shown:?} names no file")),
    };
    let root = input
        .canonicalize()
        .map_err(|e| format!("{shown:?}: no input {}: {e}", input.display()))?;
    let path = src
        .join(&relative)
        .canonicalize()
        .map_err(|e| format!("{shown:?}: {e}"))?;
    if !path.starts_with(&root) {
        return Err(format!(
            "{shown:?} leads out of its input through a link; the version is read only from \
             inside the input"
        ));
    }
    if !path.is_file() {
        return Err(format!("{shown:?} is not a regular file"));
    }
    let mut content = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_VERSION_LEN as u64 + 1).read_to_end(&mut content))
        .map_err(|e| format!("{shown:?}: {e}"))?;
    if content.len() > MAX_VERSION_LEN {
        return Err(format!(
            "{shown:?} is larger than {MAX_VERSION_LEN} bytes, too long for a version"
        ));
    }
    String::from_utf8(content).map_err(|_| format!("{shown:?} is not UTF-8 text"))
}
