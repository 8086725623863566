//! The `registry-image` type: container images from OCI registries, as
//! Concourse's registry-image resource reads its source, for task images
//! and (later) resource types from images. The protocol and the layer
//! application are `hangar-images`'.
//!
//! source (Concourse's fields that hangar supports):
//! `{"repository": "registry:port/name", "tag": "latest"?, "username"?,
//! "password"?, "insecure": false?, "ca_certs": ["PEM", …]?}`. Concourse's
//! other source fields (ECR and ACR credentials, mirrors, content trust,
//! tag filters, `variant`, `platform`, `debug`) are refused by name, so
//! none is silently ignored.
//!
//! - `check` prints `[{"digest": "sha256:…"}]`: the digest the tag points to
//!   now (an index's digest for a multi-platform image).
//! - `in <dest>` with version `{"digest": …}` (and, as Concourse's newer
//!   versions carry it, an optional `tag`) writes `rootfs/`,
//!   `metadata.json`, `labels.json`, `digest`, `tag` and `repository` into
//!   `dest`, the image picked for this worker's platform. The only param is
//!   `format: rootfs`. Progress (layers, sizes, bytes) goes to the log.
//!
//! A failure's message ends with what kind it is (`(infrastructure
//! error)`: the registry unreachable or failing; `(configuration or image
//! error)`: the rest). An infrastructure failure is attempted again in the
//! action (three attempts, 1 s and 3 s apart), as Concourse's type retries
//! transient errors, and then exits with [`crate::EXIT_INFRASTRUCTURE`],
//! which the worker reports as the infrastructure's (the step is tried on
//! another worker); the others fail at once with exit 1.
//!
//! `in` logs the manifest (digest, layer count, compressed size), each
//! layer's start (size) and end (compression, entries), and, for layers of
//! 16 MiB or more, the bytes received at each quarter: a few lines a layer.

use std::collections::BTreeMap;
use std::io::Write;

use hangar_images::{ImageError, Platform, Progress};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{metadata, parse_request, shorten, Call, CheckRequest, Failure, InRequest};

/// Concourse's registry-image source fields hangar does not support, and
/// why each is refused rather than ignored.
const UNSUPPORTED_SOURCE_FIELDS: &[(&str, &str)] = &[
    ("aws_access_key_id", "ECR authentication is not supported"),
    (
        "aws_secret_access_key",
        "ECR authentication is not supported",
    ),
    ("aws_session_token", "ECR authentication is not supported"),
    ("aws_region", "ECR authentication is not supported"),
    ("aws_role_arn", "ECR authentication is not supported"),
    ("aws_role_arns", "ECR authentication is not supported"),
    ("aws_account_id", "ECR authentication is not supported"),
    ("azure_acr", "ACR authentication is not supported"),
    ("registry_mirror", "registry mirrors are not supported"),
    ("content_trust", "content trust (notary) is not supported"),
    ("tag_regex", "tag filters are not supported: name one tag"),
    (
        "semver_constraint",
        "tag filters are not supported: name one tag",
    ),
    (
        "created_at_sort",
        "tag filters are not supported: name one tag",
    ),
    (
        "pre_releases",
        "tag filters are not supported: name one tag",
    ),
    ("variant", "tag variants are not supported: name one tag"),
    (
        "platform",
        "the image is always fetched for the worker's platform",
    ),
    (
        "debug",
        "debug output is not supported; progress is always logged",
    ),
    ("label_regex", "label metadata is not supported"),
    ("annotation_regex", "annotation metadata is not supported"),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    repository: String,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    ca_certs: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Version {
    digest: String,
    #[serde(default)]
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InParams {
    #[serde(default)]
    format: Option<String>,
}

/// Refuses Concourse's fields this type does not support, each with why.
fn refuse_unsupported(request: &[u8]) -> Result<(), String> {
    let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(request) else {
        return Ok(()); // the typed parse names what is wrong
    };
    if let Some(Value::Object(source)) = top.get("source") {
        for (field, why) in UNSUPPORTED_SOURCE_FIELDS {
            if source.contains_key(*field) {
                return Err(format!(
                    "invalid request: source.{field}: registry-image in hangar does not support \
                     it ({why})"
                ));
            }
        }
    }
    Ok(())
}

impl Source {
    fn to_images(&self) -> Result<hangar_images::Source, String> {
        if self.repository.trim().is_empty() {
            return Err("invalid request: source.repository: must not be empty".into());
        }
        if self.tag.as_deref() == Some("") {
            return Err(
                "invalid request: source.tag: must not be empty (leave it out for latest)".into(),
            );
        }
        Ok(hangar_images::Source {
            repository: self.repository.clone(),
            tag: self.tag.clone().unwrap_or_else(|| "latest".into()),
            username: self.username.clone(),
            password: self.password.clone(),
            insecure: self.insecure,
            ca_certs: self.ca_certs.clone(),
        })
    }
}

/// Attempts at an action whose failure is the infrastructure's (the
/// registry unreachable or failing), as Concourse's registry-image retries
/// transient errors; the delays between them.
const ATTEMPTS: u32 = 3;
const RETRY_DELAYS_MS: [u64; 2] = [1000, 3000];

pub(crate) fn with_retries<T, F: std::future::Future<Output = Result<T, ImageError>>>(
    rt: &tokio::runtime::Runtime,
    log: &mut dyn Write,
    mut action: impl FnMut() -> F,
) -> Result<T, Failure> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match rt.block_on(action()) {
            Ok(v) => return Ok(v),
            Err(e) => retry_or_fail(rt, log, attempt, e)?,
        }
    }
}

/// After a failed attempt: waits and returns to retry an infrastructure
/// failure while attempts remain; otherwise the failure, explained.
fn retry_or_fail(
    rt: &tokio::runtime::Runtime,
    log: &mut dyn Write,
    attempt: u32,
    e: ImageError,
) -> Result<(), Failure> {
    if !e.is_infrastructure() || attempt >= ATTEMPTS {
        // Classified for the worker: an infrastructure failure left after
        // the attempts here is tried again on another worker.
        return Err(Failure {
            message: explain(&e),
            infrastructure: e.is_infrastructure(),
        });
    }
    let delay = RETRY_DELAYS_MS[(attempt as usize - 1).min(RETRY_DELAYS_MS.len() - 1)];
    let _ = writeln!(
        log,
        "registry-image: attempt {attempt} of {ATTEMPTS} failed: {e}; retrying in {} s",
        delay / 1000
    );
    let _ = log.flush();
    rt.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(delay)).await });
    Ok(())
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("start the async runtime: {e}"))
}

/// A failure as the log shows it: its kind first.
fn explain(e: &ImageError) -> String {
    let kind = if e.is_infrastructure() {
        "infrastructure"
    } else {
        "configuration or image"
    };
    format!("registry-image: {e} ({kind} error)")
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, Failure> {
    refuse_unsupported(call.request)?;
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    check_digest(&request.source.to_images()?, call.log, "registry-image")
}

/// `check` of an image type: the digest the tag points to now, as the one
/// version, infrastructure failures attempted again.
pub(crate) fn check_digest(
    source: &hangar_images::Source,
    log: &mut dyn Write,
    type_name: &str,
) -> Result<Value, Failure> {
    let rt = runtime()?;
    let digest = with_retries(&rt, log, || hangar_images::resolve(source))?;
    let _ = writeln!(
        log,
        "{type_name}: {}:{} is {digest}",
        source.repository, source.tag
    );
    Ok(json!([{ "digest": digest }]))
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, Failure> {
    refuse_unsupported(call.request)?;
    let request: InRequest<Source, Version, InParams> = parse_request(call.request)?;
    let mut source = request.source.to_images()?;
    match request.params.as_ref().and_then(|p| p.format.as_deref()) {
        None | Some("rootfs") => {}
        Some(other) => {
            return Err(format!(
                "invalid request: params.format: {:?} is not supported (only \"rootfs\")",
                shorten(other)
            )
            .into())
        }
    }
    if let Some(tag) = &request.version.tag {
        source.tag = tag.clone();
    }
    let digest = &request.version.digest;
    let dest = call.dir.expect("in has a directory");
    std::fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    let log = call.log;
    let (config, layers) = fetch_into(&source, digest, dest, log, "registry-image")?;
    let _ = writeln!(
        log,
        "registry-image: fetched {} layer(s); user {:?}, {} env var(s)",
        layers,
        config.user,
        config.env.len()
    );
    Ok(json!({
        "version": request_version_json(&request.version),
        "metadata": [
            metadata("repository", &source.repository),
            metadata("tag", &source.tag),
        ],
    }))
}

/// Fetches the image at `digest` for this worker's platform into `dest`
/// (Concourse's image layout), its progress in the log and infrastructure
/// failures attempted again: the image and how many layers it has.
pub(crate) fn fetch_into(
    source: &hangar_images::Source,
    digest: &str,
    dest: &std::path::Path,
    log: &mut dyn Write,
    type_name: &str,
) -> Result<(hangar_images::ImageConfig, usize), Failure> {
    let platform = Platform::host();
    let _ = writeln!(
        log,
        "{type_name}: fetching {}@{digest} for {platform}",
        source.repository
    );
    let mut progress = ProgressLog::default();
    let rt = runtime()?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let fetched = rt.block_on(hangar_images::fetch(source, digest, &platform, dest, |p| {
            progress.report(log, &p)
        }));
        match fetched {
            Ok(config) => return Ok((config, progress.layers)),
            Err(e) => retry_or_fail(&rt, log, attempt, e)?,
        }
    }
}

fn request_version_json(v: &Version) -> Value {
    match &v.tag {
        Some(tag) => json!({ "digest": v.digest, "tag": tag }),
        None => json!({ "digest": v.digest }),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Layers at least this large get lines of received bytes; smaller ones
/// arrive too fast for them to say anything.
const LARGE_LAYER: u64 = 16 * 1024 * 1024;
/// A large layer's received bytes are said at each of these parts of it
/// (25 %, 50 %, 75 %): at most three lines a layer, whatever its size.
const PARTS: u64 = 4;

/// Turns `fetch`'s progress into a few lines of log: the manifest, each
/// layer's start and end, and for a large layer its received bytes at
/// each quarter.
#[derive(Default)]
struct ProgressLog {
    layers: usize,
    sizes: BTreeMap<usize, u64>,
    /// The last part of each large layer said.
    said: BTreeMap<usize, u64>,
}

impl ProgressLog {
    fn report(&mut self, log: &mut dyn Write, p: &Progress) {
        if let Some(line) = self.line(p) {
            let _ = writeln!(log, "registry-image: {line}");
            let _ = log.flush();
        }
    }

    fn line(&mut self, p: &Progress) -> Option<String> {
        let count = self.layers;
        match p {
            Progress::Manifest {
                digest,
                layers,
                total_bytes,
            } => {
                self.layers = *layers;
                Some(format!(
                    "manifest {digest}: {layers} layer(s), {} compressed",
                    mib(*total_bytes)
                ))
            }
            Progress::LayerStart {
                index,
                digest,
                size,
            } => {
                self.sizes.insert(*index, *size);
                self.said.remove(index);
                let short = digest.strip_prefix("sha256:").unwrap_or(digest);
                Some(format!(
                    "layer {}/{count} {} ({})",
                    index + 1,
                    &short[..short.len().min(12)],
                    mib(*size)
                ))
            }
            Progress::LayerBytes { index, received } => {
                let size = self.sizes.get(index).copied().unwrap_or(0);
                if size < LARGE_LAYER || *received >= size {
                    return None;
                }
                let part = received.saturating_mul(PARTS) / size;
                let said = self.said.entry(*index).or_default();
                if part == 0 || part <= *said {
                    return None;
                }
                *said = part;
                Some(format!(
                    "layer {}/{count}: {} of {} ({}%)",
                    index + 1,
                    mib(*received),
                    mib(size),
                    received.saturating_mul(100) / size
                ))
            }
            Progress::LayerDone {
                index,
                compression,
                entries,
                whiteouts,
                skipped_devices,
            } => Some(format!(
                "layer {}/{count} applied ({compression}, {entries} entries, \
                 {whiteouts} whiteout(s){})",
                index + 1,
                if *skipped_devices > 0 {
                    format!(", {skipped_devices} device(s) skipped")
                } else {
                    String::new()
                }
            )),
        }
    }
}

pub(crate) fn put(_call: Call<'_>) -> Result<Value, String> {
    Err("registry-image: out (pushing an image) is not supported".into())
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    fn lines(events: &[Progress]) -> Vec<String> {
        let mut log = ProgressLog::default();
        events.iter().filter_map(|p| log.line(p)).collect()
    }

    #[test]
    fn a_large_layer_says_its_bytes_at_each_quarter_and_a_small_one_never() {
        const MIB: u64 = 1024 * 1024;
        let mut events = vec![
            Progress::Manifest {
                digest: "sha256:m".into(),
                layers: 2,
                total_bytes: 1025 * MIB,
            },
            Progress::LayerStart {
                index: 0,
                digest: format!("sha256:{}", "a".repeat(64)),
                size: MIB,
            },
            Progress::LayerBytes {
                index: 0,
                received: MIB,
            },
            Progress::LayerStart {
                index: 1,
                digest: format!("sha256:{}", "b".repeat(64)),
                size: 1024 * MIB,
            },
        ];
        // Every 8 MiB, as `fetch` reports them: 128 reports.
        events.extend((1..=128).map(|i| Progress::LayerBytes {
            index: 1,
            received: i * 8 * MIB,
        }));
        events.push(Progress::LayerDone {
            index: 1,
            compression: "gzip",
            entries: 3,
            whiteouts: 0,
            skipped_devices: 0,
        });
        assert_eq!(
            lines(&events),
            [
                "manifest sha256:m: 2 layer(s), 1025.0 MiB compressed",
                "layer 1/2 aaaaaaaaaaaa (1.0 MiB)",
                "layer 2/2 bbbbbbbbbbbb (1024.0 MiB)",
                "layer 2/2: 256.0 MiB of 1024.0 MiB (25%)",
                "layer 2/2: 512.0 MiB of 1024.0 MiB (50%)",
                "layer 2/2: 768.0 MiB of 1024.0 MiB (75%)",
                "layer 2/2 applied (gzip, 3 entries, 0 whiteout(s))",
            ]
        );
    }
}
