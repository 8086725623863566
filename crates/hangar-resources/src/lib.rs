//! The base resource types hangar ships as programs of its own: `git`,
//! `docker-image`, `mock`, `registry-image` and `time`.
//!
//! A resource type, in Concourse's protocol, is a directory with three
//! executables. `check` reads `{"source":…,"version":…|null}` on stdin and
//! prints the versions it finds (a JSON array, oldest first). `in <dest>`
//! reads `{"source":…,"version":…,"params":…}`, fetches that version into
//! `dest`, and prints `{"version":…,"metadata":[{"name":…,"value":…}]}`.
//! `out <src>` reads `{"source":…,"params":…}` and prints the same shape.
//! Logs go to stderr; stdout holds only the answer.
//!
//! [`run`] is that protocol for every type here, as a function of its
//! streams. The `hangar` binary exposes it as the hidden subcommand
//! `hangar resource-type <type> <action> [dir]`, and
//! [`install_builtin_types`] writes the small scripts that call it, so a
//! worker's resource type directory holds nothing but this binary's entries.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

mod docker_image;
mod git;
mod install;
mod mock;
mod registry_image;
mod time;

pub use install::install_builtin_types;

/// The types [`run`] implements, in the order they are installed.
pub const BUILTIN_TYPES: &[&str] = &["docker-image", "git", "mock", "registry-image", "time"];

/// The protocol's three actions.
pub const ACTIONS: &[&str] = &["check", "in", "out"];

/// The largest request read from stdin.
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;

/// The exit code of an action that failed for the infrastructure's sake:
/// the worker reports such a failure of its own base types as the
/// infrastructure's, and the step is tried on another worker.
pub use hangar_api::resources::EXIT_INFRASTRUCTURE;

/// The version the installed types report (the `version` file).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs `action` (`check`, `in` or `out`) of the resource type `type_name`:
/// reads the request from `stdin`, writes the answer as one line of JSON to
/// `stdout` and logs to `stderr`. Returns the exit code: 0, or 1 after
/// writing `error: …` to `stderr` ([`EXIT_INFRASTRUCTURE`] when the
/// failure was the infrastructure's).
///
/// Synchronous: `registry-image` starts a current-thread tokio runtime of
/// its own, so this must not be called on a thread that drives one.
pub fn run(
    type_name: &str,
    action: &str,
    args: &[String],
    stdin: impl Read,
    mut stdout: impl Write,
    mut stderr: impl Write,
) -> i32 {
    let result = run_action(type_name, action, args, stdin, &mut stderr).and_then(|answer| {
        let mut line = serde_json::to_vec(&answer)
            .map_err(|e| Failure::from(format!("encode the answer: {e}")))?;
        line.push(b'\n');
        stdout
            .write_all(&line)
            .and_then(|()| stdout.flush())
            .map_err(|e| Failure::from(format!("write the answer: {e}")))
    });
    match result {
        Ok(()) => 0,
        Err(failure) => {
            let _ = writeln!(stderr, "error: {}", failure.message);
            let _ = stderr.flush();
            if failure.infrastructure {
                EXIT_INFRASTRUCTURE
            } else {
                1
            }
        }
    }
}

/// Why an action failed, and whether the infrastructure is to blame.
#[derive(Debug)]
pub(crate) struct Failure {
    pub message: String,
    pub infrastructure: bool,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            infrastructure: false,
        }
    }
}

/// One action, as the types implement it: a directory (for `in` and `out`),
/// the raw request, and a log.
pub(crate) struct Call<'a> {
    pub dir: Option<&'a std::path::Path>,
    pub request: &'a [u8],
    pub log: &'a mut dyn Write,
}

/// Checks the type, action and arguments and reads the request.
fn read_call<'a>(
    type_name: &str,
    action: &str,
    args: &'a [String],
    mut stdin: impl Read,
) -> Result<(Option<&'a String>, Vec<u8>), String> {
    if !BUILTIN_TYPES.contains(&type_name) {
        return Err(format!(
            "unknown resource type {type_name:?} (known: {})",
            BUILTIN_TYPES.join(", ")
        ));
    }
    let dir = match (action, args) {
        ("check", []) => None,
        ("check", _) => return Err("usage: check takes no arguments".into()),
        ("in", [dir]) => Some(dir),
        ("in", _) => return Err("usage: in <dest-dir>".into()),
        ("out", [dir]) => Some(dir),
        ("out", _) => return Err("usage: out <src-dir>".into()),
        _ => {
            return Err(format!(
                "unknown action {action:?} (one of {})",
                ACTIONS.join(", ")
            ))
        }
    };
    if dir.is_some_and(|d| d.is_empty()) {
        return Err(format!("usage: {action} needs a directory, not \"\""));
    }

    let mut request = Vec::new();
    (&mut stdin)
        .take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut request)
        .map_err(|e| format!("read the request from stdin: {e}"))?;
    if request.len() as u64 > MAX_REQUEST_BYTES {
        return Err(format!(
            "the request is larger than {MAX_REQUEST_BYTES} bytes"
        ));
    }
    if request.iter().all(u8::is_ascii_whitespace) {
        return Err("no request on stdin (expected a JSON object)".into());
    }

    Ok((dir, request))
}

fn run_action(
    type_name: &str,
    action: &str,
    args: &[String],
    stdin: impl Read,
    log: &mut dyn Write,
) -> Result<Value, Failure> {
    let (dir, request) = read_call(type_name, action, args, stdin)?;
    let call = Call {
        dir: dir.map(std::path::Path::new),
        request: &request,
        log,
    };
    match (type_name, action) {
        ("docker-image", "check") => docker_image::check(call),
        ("docker-image", "in") => docker_image::get(call),
        ("docker-image", "out") => docker_image::put(call).map_err(Failure::from),
        ("git", "check") => git::check(call).map_err(Failure::from),
        ("git", "in") => git::get(call).map_err(Failure::from),
        ("git", "out") => git::put(call).map_err(Failure::from),
        ("mock", "check") => mock::check(call).map_err(Failure::from),
        ("mock", "in") => mock::get(call).map_err(Failure::from),
        ("mock", "out") => mock::put(call).map_err(Failure::from),
        ("registry-image", "check") => registry_image::check(call),
        ("registry-image", "in") => registry_image::get(call),
        ("registry-image", "out") => registry_image::put(call).map_err(Failure::from),
        ("time", "check") => time::check(call).map_err(Failure::from),
        ("time", "in") => time::get(call).map_err(Failure::from),
        ("time", "out") => time::put(call).map_err(Failure::from),
        _ => unreachable!("type and action were checked above"),
    }
}

/// `check`'s request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckRequest<S, V> {
    pub source: S,
    #[serde(default = "none")]
    pub version: Option<V>,
}

/// `in`'s request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InRequest<S, V, P> {
    pub source: S,
    pub version: V,
    /// Parsed so that params a type does not know are refused; no type
    /// here takes any for `in` yet.
    #[serde(default = "none")]
    #[allow(dead_code)]
    pub params: Option<P>,
}

/// `out`'s request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutRequest<S, P> {
    pub source: S,
    #[serde(default = "none")]
    pub params: Option<P>,
}

// `#[serde(default)]` on a generic `Option<T>` would ask for `T: Default`.
fn none<T>() -> Option<T> {
    None
}

/// No params accepted: any field is refused by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}

/// Parses a request, naming the field that is wrong: `source.uri: invalid
/// type: …`, `source: unknown field `branchh`, expected …`.
pub(crate) fn parse_request<T: DeserializeOwned>(request: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(request);
    let parsed: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let message = e.inner().to_string();
        let segments: Vec<_> = e.path().iter().collect();
        // For an unknown field the path ends with the unknown key: name the
        // object holding it instead.
        let segments = match segments.split_last() {
            Some((serde_path_to_error::Segment::Map { .. }, parent))
                if message.starts_with("unknown field") =>
            {
                parent
            }
            _ => &segments[..],
        };
        let path = render_path(segments);
        if path.is_empty() {
            format!("invalid request: {message}")
        } else {
            format!("invalid request: {path}: {message}")
        }
    })?;
    deserializer
        .end()
        .map_err(|e| format!("invalid request: {e}"))?;
    Ok(parsed)
}

fn render_path(segments: &[&serde_path_to_error::Segment]) -> String {
    let mut path = String::new();
    for segment in segments {
        if !path.is_empty() && !matches!(segment, serde_path_to_error::Segment::Seq { .. }) {
            path.push('.');
        }
        path.push_str(&segment.to_string());
    }
    path
}

/// One `{"name":…,"value":…}` entry of an answer's metadata.
pub(crate) fn metadata(name: &str, value: &str) -> Value {
    serde_json::json!({ "name": name, "value": value })
}

/// At most 100 characters of a string from a request, for messages.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 100;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut short: String = s.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod tests;
