//! Container images from OCI registries: a tag resolved to a digest
//! ([`resolve`], the `check` of Concourse's `registry-image`), and an image
//! fetched by digest into a root filesystem ([`fetch`], its `in` with
//! `format: rootfs`).
//!
//! The distribution protocol is `oci-client`'s: anonymous pulls, basic
//! auth, bearer tokens from a `WWW-Authenticate` challenge, Docker v2 and
//! OCI manifests and indexes. This crate picks the platform of an index,
//! checks every blob's size and digest (the manifest's by `oci-client`
//! against the digest asked for, each blob's while it is downloaded),
//! applies the layers in order with their whiteouts (`layer.rs`), refuses
//! any entry that could land outside the root filesystem, and classifies
//! every failure as the registry's or network's (retry elsewhere) or the
//! configuration's and image's (no retry helps): [`ImageError::is_infrastructure`].
//!
//! [`fetch`] writes the layout of Concourse's registry-image `in`:
//!
//! ```text
//! dest/rootfs/          the layers applied in order
//! dest/metadata.json    {"cmd":…,"entrypoint":…,"env":[…],"user":"…"}
//! dest/labels.json      the config's labels ({} when none)
//! dest/digest           the digest fetched
//! dest/tag              the tag (may be empty)
//! dest/repository       the repository as configured
//! ```
//!
//! The root filesystem is built in a staging directory inside `dest` and
//! renamed into place once every layer applied; any failure removes it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    OciDescriptor, OciImageIndex, OciImageManifest, OciManifest, IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};

mod decode_ahead;
mod layer;
mod pull;

#[cfg(feature = "testing")]
pub mod testing;

/// Where an image is and how to reach it: the part of a `registry-image`
/// source that this crate needs.
#[derive(Clone, Default)]
pub struct Source {
    /// `registry[:port]/name` or a Docker Hub name (`alpine`, `org/app`).
    pub repository: String,
    /// The tag [`resolve`] reads; `latest` when empty.
    pub tag: String,
    /// Basic credentials; the registry's token service gets them too when
    /// it answers with a bearer challenge.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Plain HTTP instead of HTTPS.
    pub insecure: bool,
    /// PEM certificates trusted in addition to the system's roots.
    pub ca_certs: Vec<String>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("repository", &self.repository)
            .field("tag", &self.tag)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("insecure", &self.insecure)
            .field("ca_certs", &self.ca_certs.len())
            .finish()
    }
}

/// The platform an image index is resolved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    /// `v8` for arm64, `v7` for arm, …; `None` accepts any variant.
    pub variant: Option<String>,
}

impl Platform {
    /// Linux on the architecture this program runs on, in OCI's names.
    pub fn host() -> Self {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "x86" => ("386", None),
            "aarch64" => ("arm64", None),
            "arm" => ("arm", None),
            "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant,
        }
    }

    fn matches(&self, p: &oci_client::manifest::Platform) -> bool {
        p.os == self.os
            && p.architecture == self.architecture
            && self
                .variant
                .as_ref()
                .is_none_or(|v| p.variant.as_deref() == Some(v.as_str()))
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The parts of an image's config a container is started with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub env: Vec<String>,
    pub user: String,
    pub working_dir: String,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// The config blob's digest: the image's id, as Docker names it.
    #[serde(default)]
    pub image_id: String,
}

/// What [`fetch`] reports while it works, for a progress display or a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The manifest for the platform is read: how many layers, how large.
    Manifest {
        digest: String,
        layers: usize,
        total_bytes: u64,
    },
    /// A layer's download begins.
    LayerStart {
        index: usize,
        digest: String,
        size: u64,
    },
    /// Bytes of a layer received so far (reported every few MiB).
    LayerBytes { index: usize, received: u64 },
    /// A layer is downloaded, verified and applied.
    LayerDone {
        index: usize,
        compression: &'static str,
        entries: u64,
        whiteouts: u64,
        skipped_devices: u64,
    },
}

/// Why resolving or fetching an image failed. [`is_infrastructure`]
/// separates what another attempt (on another worker) may cure from what
/// only a change of the configuration or the image can.
///
/// [`is_infrastructure`]: ImageError::is_infrastructure
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The registry could not be reached (DNS, connection refused, TLS,
    /// timeout, connection cut).
    #[error("registry {registry} is unreachable: {message}")]
    Unreachable { registry: String, message: String },
    /// The registry answered with a server error (5xx) or asked to slow
    /// down (429).
    #[error("registry {registry} failed: HTTP {status}: {message}")]
    RegistryFailed {
        registry: String,
        status: u16,
        message: String,
    },
    /// 401: no credentials, or wrong ones.
    #[error("registry {registry} refused the credentials for {repository} (401 unauthorized{}): check source.username and source.password", detail_suffix(.message))]
    Unauthorized {
        registry: String,
        repository: String,
        message: String,
    },
    /// 403: the credentials are not allowed to pull this repository.
    #[error("registry {registry} denied pulling {repository} (403 forbidden{})", detail_suffix(.message))]
    Denied {
        registry: String,
        repository: String,
        message: String,
    },
    /// 404: no such repository, tag, manifest or blob.
    #[error("{what} not found in registry {registry}{}", detail_suffix(.message))]
    NotFound {
        registry: String,
        what: String,
        message: String,
    },
    /// The source does not name an image (bad repository, tag or digest).
    #[error("invalid image reference {reference:?}: {message}")]
    BadReference { reference: String, message: String },
    /// A setting that cannot be used (a CA certificate that does not parse).
    #[error("invalid source: {0}")]
    BadSource(String),
    /// A manifest or blob whose content is not what its digest or size
    /// says.
    #[error("{what} does not match its digest: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    /// A layer with an entry that is refused (a path out of the root
    /// filesystem, an unsupported entry type).
    #[error("layer {layer} refused: entry {entry:?}: {reason}")]
    HostileLayer {
        layer: String,
        entry: String,
        reason: String,
    },
    /// A layer that is not a readable (compressed) tar stream.
    #[error("layer {layer} is corrupt: {message}")]
    CorruptLayer { layer: String, message: String },
    /// The image is of a kind this crate does not fetch (an unknown media
    /// type, no manifest for the platform, a foreign layer).
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// The registry's answer broke the protocol, or a manifest or config
    /// does not parse.
    #[error("invalid answer from the registry: {0}")]
    Invalid(String),
    /// The destination is not empty where the image goes.
    #[error("destination {0} already holds an image")]
    DestinationInUse(PathBuf),
    /// Writing on this machine failed (disk full, permissions).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn detail_suffix(message: &str) -> String {
    if message.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", message.trim())
    }
}

impl ImageError {
    /// Whether the failure is the infrastructure's (the network, the
    /// registry's servers, this machine's disk), which another attempt
    /// elsewhere may not meet; otherwise it is the configuration's or the
    /// image's and retrying does not help.
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            ImageError::Unreachable { .. }
                | ImageError::RegistryFailed { .. }
                | ImageError::Io { .. }
        )
    }
}

/// A client for one source: the configured protocol, roots and
/// credentials. Clones share the client's connections and tokens.
#[derive(Clone)]
struct Session {
    client: Client,
    auth: RegistryAuth,
    registry: String,
    repository: String,
}

fn session(source: &Source) -> Result<Session, ImageError> {
    if source.repository.trim().is_empty() {
        return Err(ImageError::BadReference {
            reference: source.repository.clone(),
            message: "the repository is empty".into(),
        });
    }
    let auth = match (&source.username, &source.password) {
        (Some(u), Some(p)) => RegistryAuth::Basic(u.clone(), p.clone()),
        (None, None) => RegistryAuth::Anonymous,
        (Some(_), None) => {
            return Err(ImageError::BadSource(
                "username is set but password is not".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(ImageError::BadSource(
                "password is set but username is not".into(),
            ))
        }
    };
    let mut roots = Vec::new();
    for (i, pem) in source.ca_certs.iter().enumerate() {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(ImageError::BadSource(format!(
                "ca_certs[{i}] is not a PEM certificate"
            )));
        }
        roots.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: pem.as_bytes().to_vec(),
        });
    }
    let config = ClientConfig {
        protocol: if source.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: roots,
        connect_timeout: Some(std::time::Duration::from_secs(15)),
        read_timeout: Some(std::time::Duration::from_secs(120)),
        ..ClientConfig::default()
    };
    let reference = parse_reference(source, None)?;
    Ok(Session {
        client: Client::new(config),
        auth,
        registry: reference.resolve_registry().to_string(),
        repository: source.repository.clone(),
    })
}

fn parse_reference(source: &Source, digest: Option<&str>) -> Result<Reference, ImageError> {
    let repo = source.repository.trim();
    let text = match digest {
        Some(d) => format!("{repo}@{d}"),
        None => format!("{repo}:{}", tag_of(source)),
    };
    let reference: Reference = text.parse().map_err(|e| ImageError::BadReference {
        reference: text.clone(),
        message: format!("{e}"),
    })?;
    // The distribution spec's names: lowercase letters, digits and
    // separators.
    if !reference
        .repository()
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
    {
        return Err(ImageError::BadReference {
            reference: text,
            message: "a repository name holds only lowercase letters, digits and . _ - /".into(),
        });
    }
    // A repository that carries its own tag or digest would be read as
    // something else than asked.
    if reference.repository().contains(':') || reference.repository().contains('@') {
        return Err(ImageError::BadReference {
            reference: text,
            message: "the repository must not hold a tag or digest; use source.tag".into(),
        });
    }
    Ok(reference)
}

fn tag_of(source: &Source) -> &str {
    if source.tag.is_empty() {
        "latest"
    } else {
        &source.tag
    }
}

fn check_digest_syntax(digest: &str) -> Result<(), ImageError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    });
    if ok {
        Ok(())
    } else {
        Err(ImageError::BadReference {
            reference: digest.to_string(),
            message: "a digest is sha256: and 64 lowercase hex digits".into(),
        })
    }
}

impl Session {
    fn classify(&self, what: &str, e: OciDistributionError) -> ImageError {
        let registry = self.registry.clone();
        let repository = self.repository.clone();
        let by_status = |status: u16, message: String| match status {
            401 => ImageError::Unauthorized {
                registry: registry.clone(),
                repository: repository.clone(),
                message,
            },
            403 => ImageError::Denied {
                registry: registry.clone(),
                repository: repository.clone(),
                message,
            },
            404 => ImageError::NotFound {
                registry: registry.clone(),
                what: what.to_string(),
                message,
            },
            429 | 500..=599 => ImageError::RegistryFailed {
                registry: registry.clone(),
                status,
                message,
            },
            _ => ImageError::Invalid(format!("HTTP {status} for {what}: {message}")),
        };
        match e {
            OciDistributionError::RequestError(e) => match e.status() {
                Some(s) => by_status(s.as_u16(), String::new()),
                None if e.is_decode() || e.is_body() => ImageError::Unreachable {
                    registry,
                    message: format!("reading {what}: {}", error_chain(&e)),
                },
                None => ImageError::Unreachable {
                    registry,
                    message: error_chain(&e),
                },
            },
            OciDistributionError::UnauthorizedError { .. } => by_status(401, String::new()),
            OciDistributionError::AuthenticationFailure(m) => by_status(401, shorten(&m)),
            OciDistributionError::RegistryError { envelope, .. } => {
                let message = envelope
                    .errors
                    .iter()
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                let code = envelope.errors.first().map(|e| &e.code);
                match code {
                    Some(OciErrorCode::Unauthorized) => by_status(401, message),
                    Some(OciErrorCode::Denied) => by_status(403, message),
                    Some(
                        OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound,
                    ) => by_status(404, message),
                    Some(OciErrorCode::Toomanyrequests) => by_status(429, message),
                    _ => ImageError::Invalid(format!("{what}: {message}")),
                }
            }
            OciDistributionError::ServerError { code, message, .. } => {
                by_status(code, shorten(&message))
            }
            OciDistributionError::DigestError(d) => match d {
                oci_client::errors::DigestError::VerificationError { expected, actual } => {
                    ImageError::DigestMismatch {
                        what: what.to_string(),
                        expected,
                        actual,
                    }
                }
                other => ImageError::Invalid(format!("{what}: {other}")),
            },
            OciDistributionError::ImageManifestNotFoundError(m) => by_status(404, m),
            OciDistributionError::UnsupportedMediaTypeError(m) => {
                ImageError::Unsupported(format!("{what}: media type {m}"))
            }
            OciDistributionError::UnsupportedSchemaVersionError(v) => {
                ImageError::Unsupported(format!("{what}: schema version {v}"))
            }
            OciDistributionError::IoError(e) => ImageError::Io {
                context: format!("write {what}"),
                source: e,
            },
            other => ImageError::Invalid(format!("{what}: {other}")),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn shorten(s: &str) -> String {
    const MAX: usize = 300;
    let s = s.trim();
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

/// The digest the source's tag points to now (`check`): the digest of the
/// manifest or index the registry holds for it, as Concourse's
/// registry-image reports it. Platform selection happens in [`fetch`].
pub async fn resolve(source: &Source) -> Result<String, ImageError> {
    let s = session(source)?;
    let reference = parse_reference(source, None)?;
    let what = format!("{}:{}", source.repository, tag_of(source));
    let digest = s
        .client
        .fetch_manifest_digest(&reference, &s.auth)
        .await
        .map_err(|e| s.classify(&what, e))?;
    check_digest_syntax(&digest).map_err(|_| {
        ImageError::Unsupported(format!(
            "{what} has the digest {digest}; only sha256 is fetched"
        ))
    })?;
    Ok(digest)
}

/// Fetches the image `digest` of the source's repository for `platform`
/// into `dest` (which must exist and hold no `rootfs`), in the layout this
/// crate's docs show. `tag` is written as given to `dest/tag`.
pub async fn fetch<P: FnMut(Progress)>(
    source: &Source,
    digest: &str,
    platform: &Platform,
    dest: &Path,
    progress: P,
) -> Result<ImageConfig, ImageError> {
    fetch_with_limits(source, digest, platform, dest, &Limits::default(), progress).await
}

/// What the layers of one image may unpack to, counted on what is read
/// (a small compressed layer can expand to fill a disk). Past a limit the
/// image is refused as a hostile layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Decompressed tar bytes of all layers, headers included.
    pub max_bytes: u64,
    /// Entries of all layers, whiteouts included.
    pub max_entries: u64,
}

impl Default for Limits {
    /// 16 GiB and one million entries, the volume store's bounds of a
    /// stream-in.
    fn default() -> Self {
        Limits {
            max_bytes: 16 << 30,
            max_entries: 1_000_000,
        }
    }
}

/// [`fetch`] with other [`Limits`] than the default ones.
pub async fn fetch_with_limits<P: FnMut(Progress)>(
    source: &Source,
    digest: &str,
    platform: &Platform,
    dest: &Path,
    limits: &Limits,
    mut progress: P,
) -> Result<ImageConfig, ImageError> {
    check_digest_syntax(digest)?;
    let rootfs = dest.join("rootfs");
    if fs_exists(&rootfs)? {
        return Err(ImageError::DestinationInUse(dest.to_path_buf()));
    }
    // A fetch killed before it finished (its worker died) left its staging
    // dir: it is never used, only removed.
    if let Ok(listing) = std::fs::read_dir(dest) {
        for entry in listing.flatten() {
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(STAGING_PREFIX.as_bytes())
            {
                remove_staging(&entry.path())?;
            }
        }
    }
    let staging = dest.join(format!("{STAGING_PREFIX}{}", std::process::id()));
    std::fs::create_dir_all(staging.join("rootfs"))
        .map_err(io_ctx("create the staging directory"))?;
    let result = fetch_into(source, digest, platform, &staging, limits, &mut progress).await;
    let config = match result {
        Ok(config) => config,
        Err(e) => {
            let _ = remove_staging(&staging);
            return Err(e);
        }
    };
    let finish = (|| -> Result<(), ImageError> {
        write_metadata(&staging, &config)?;
        for name in ["metadata.json", "labels.json"] {
            std::fs::rename(staging.join(name), dest.join(name))
                .map_err(io_ctx(format!("move {name} into place")))?;
        }
        std::fs::write(dest.join("digest"), digest).map_err(io_ctx("write digest"))?;
        std::fs::write(dest.join("tag"), &source.tag).map_err(io_ctx("write tag"))?;
        std::fs::write(dest.join("repository"), &source.repository)
            .map_err(io_ctx("write repository"))?;
        // Last: the root filesystem appears whole or not at all.
        std::fs::rename(staging.join("rootfs"), &rootfs).map_err(io_ctx("move rootfs into place"))
    })();
    let cleanup = remove_staging(&staging);
    if let Err(e) = finish {
        for name in [
            "metadata.json",
            "labels.json",
            "digest",
            "tag",
            "repository",
        ] {
            let _ = std::fs::remove_file(dest.join(name));
        }
        return Err(e);
    }
    cleanup?;
    Ok(config)
}

/// The staging dirs of [`fetch`], inside the destination.
const STAGING_PREFIX: &str = ".rootfs-staging-";

fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
    let context = context.into();
    move |source| ImageError::Io { context, source }
}

fn fs_exists(p: &Path) -> Result<bool, ImageError> {
    match std::fs::symlink_metadata(p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ImageError::Io {
            context: format!("inspect {}", p.display()),
            source: e,
        }),
    }
}

fn remove_staging(staging: &Path) -> Result<(), ImageError> {
    if !fs_exists(staging)? {
        return Ok(());
    }
    // Layers may hold read-only directories.
    make_writable(staging);
    std::fs::remove_dir_all(staging).map_err(io_ctx(format!("remove {}", staging.display())))
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::symlink_metadata(dir) {
        if m.is_dir() {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            if let Ok(listing) = std::fs::read_dir(dir) {
                for child in listing.flatten() {
                    if child.file_type().is_ok_and(|t| t.is_dir()) {
                        make_writable(&child.path());
                    }
                }
            }
        }
    }
}

/// `metadata.json` as Concourse's registry-image writes it (Go's encoding
/// of its `ImageMetadata`: `null` for a list the config does not have) and
/// `labels.json`.
fn write_metadata(dir: &Path, config: &ImageConfig) -> Result<(), ImageError> {
    #[derive(Serialize)]
    struct Metadata<'a> {
        cmd: &'a Option<Vec<String>>,
        entrypoint: &'a Option<Vec<String>>,
        env: Option<&'a Vec<String>>,
        user: &'a str,
    }
    let meta = Metadata {
        cmd: &config.cmd,
        entrypoint: &config.entrypoint,
        env: (!config.env.is_empty()).then_some(&config.env),
        user: &config.user,
    };
    let mut text = serde_json::to_vec(&meta).expect("plain data encodes");
    text.push(b'\n');
    std::fs::write(dir.join("metadata.json"), text).map_err(io_ctx("write metadata.json"))?;
    let mut labels = serde_json::to_vec(&config.labels).expect("plain data encodes");
    labels.push(b'\n');
    std::fs::write(dir.join("labels.json"), labels).map_err(io_ctx("write labels.json"))
}

/// An image's config blob, the fields read.
#[derive(Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: Option<ContainerConfig>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ContainerConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

const LAYER_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
];

async fn fetch_into<P: FnMut(Progress)>(
    source: &Source,
    digest: &str,
    platform: &Platform,
    staging: &Path,
    limits: &Limits,
    progress: &mut P,
) -> Result<ImageConfig, ImageError> {
    let s = session(source)?;
    let reference = parse_reference(source, Some(digest))?;
    let what = format!("{}@{digest}", source.repository);
    // `oci-client` checks the manifest against the digest it was asked by.
    let (manifest, _) = s
        .client
        .pull_manifest(&reference, &s.auth)
        .await
        .map_err(|e| s.classify(&what, e))?;
    let (manifest, manifest_digest, reference) = match manifest {
        OciManifest::Image(m) => (m, digest.to_string(), reference),
        OciManifest::ImageIndex(index) => {
            let chosen = choose_platform(&index, platform, &what)?;
            let reference = parse_reference(source, Some(&chosen))?;
            let what = format!("{}@{chosen} ({platform})", source.repository);
            let (m, _) = s
                .client
                .pull_manifest(&reference, &s.auth)
                .await
                .map_err(|e| s.classify(&what, e))?;
            match m {
                OciManifest::Image(m) => (m, chosen, reference),
                OciManifest::ImageIndex(_) => {
                    return Err(ImageError::Unsupported(format!(
                        "{what} is an index inside an index"
                    )))
                }
            }
        }
    };
    check_manifest(&manifest, &manifest_digest)?;
    let total_bytes = manifest
        .layers
        .iter()
        .map(|l| u64::try_from(l.size).unwrap_or(0))
        .sum();
    progress(Progress::Manifest {
        digest: manifest_digest.clone(),
        layers: manifest.layers.len(),
        total_bytes,
    });

    let blobs = staging.join("blobs");
    std::fs::create_dir(&blobs).map_err(io_ctx("create the blob directory"))?;
    // Every layer starts downloading now; the config comes meanwhile.
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel();
    let incoming = pull::start_downloads(&s, &reference, &manifest.layers, &blobs, events);
    let _abort = AbortOnDrop(incoming.iter().map(pull::Incoming::abort_handle).collect());
    let config_path = blobs.join("config");
    download_config(&s, &reference, &manifest.config, &config_path).await?;
    let config_bytes = std::fs::read(&config_path).map_err(io_ctx("read the image config"))?;
    let blob: ConfigBlob = serde_json::from_slice(&config_bytes).map_err(|e| {
        ImageError::Invalid(format!(
            "the image config {} does not parse: {e}",
            manifest.config.digest
        ))
    })?;
    let c = blob.config.unwrap_or_default();
    let config = ImageConfig {
        env: c.env.unwrap_or_default(),
        user: c.user.unwrap_or_default(),
        working_dir: c.working_dir.unwrap_or_default(),
        entrypoint: c.entrypoint,
        cmd: c.cmd,
        labels: c.labels.unwrap_or_default(),
        image_id: manifest.config.digest.clone(),
    };

    let chown = nix_is_root();
    let rootfs = staging.join("rootfs");
    let mut budget = layer::Budget {
        bytes_left: limits.max_bytes,
        entries_left: limits.max_entries,
    };
    // Layers are decompressed ahead, in parallel with the applying below,
    // which takes them strictly in order.
    let sources = incoming
        .iter()
        .map(|incoming| {
            let opener = incoming.opener();
            let source: decode_ahead::Source = Box::new(move || match opener.open() {
                Ok(reader) => layer::decoder(reader),
                Err(e) => Err(layer::ApplyError::Io {
                    context: "open a downloaded layer".into(),
                    source: e,
                }),
            });
            source
        })
        .collect();
    let (streams, _decoding) =
        decode_ahead::start(sources).map_err(io_ctx("start the layer decoders"))?;
    for (((index, layer), incoming), stream) in manifest
        .layers
        .iter()
        .enumerate()
        .zip(incoming)
        .zip(streams)
    {
        let root = rootfs.clone();
        let mut layer_budget = budget;
        let limit_pair = (limits.max_bytes, limits.max_entries);
        let apply = tokio::task::spawn_blocking(move || {
            // The stream is dropped here, once applied: the next layer's
            // decoder gets the reserve.
            let mut stream = stream;
            let applied = stream.ready().and_then(|compression| {
                layer::apply_layer(&mut stream, &root, chown, &mut layer_budget, limit_pair)
                    .map(|applied| (compression, applied))
            });
            (applied, layer_budget)
        });
        tokio::pin!(apply);
        // Progress of the downloads is passed on while this layer applies.
        let joined = loop {
            tokio::select! {
                joined = &mut apply => break joined,
                Some(event) = received.recv() => progress(event),
            }
        };
        let (applied, left) = joined.map_err(|e| ImageError::Io {
            context: "apply a layer".into(),
            source: io::Error::other(e.to_string()),
        })?;
        budget = left;
        let applied = match applied {
            Ok(applied) => applied,
            // The applier saw the download fail: the download says why.
            Err(_) if incoming.failed() => {
                incoming.finish().await?;
                return Err(ImageError::Io {
                    context: format!("download layer {}", index + 1),
                    source: io::Error::other("the download ended without its bytes"),
                });
            }
            Err(e) => return Err(layer_error(layer, e)),
        };
        let path = incoming.path.clone();
        incoming.finish().await?;
        let _ = std::fs::remove_file(&path);
        while let Ok(event) = received.try_recv() {
            progress(event);
        }
        let (compression, applied) = applied;
        progress(Progress::LayerDone {
            index,
            compression: match compression {
                layer::Compression::Gzip => "gzip",
                layer::Compression::Zstd => "zstd",
                layer::Compression::None => "uncompressed",
            },
            entries: applied.entries,
            whiteouts: applied.whiteouts,
            skipped_devices: applied.skipped_devices,
        });
    }
    Ok(config)
}

/// Stops every download still running when a fetch ends early, whichever
/// way it ends (an error, or the fetch itself dropped).
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

fn layer_error(layer: &OciDescriptor, e: layer::ApplyError) -> ImageError {
    match e {
        layer::ApplyError::Refused { entry, reason } => ImageError::HostileLayer {
            layer: layer.digest.clone(),
            entry,
            reason,
        },
        layer::ApplyError::Corrupt(message) => ImageError::CorruptLayer {
            layer: layer.digest.clone(),
            message,
        },
        layer::ApplyError::Io { context, source } => ImageError::Io { context, source },
    }
}

/// Owners are applied only as root: anyone else cannot give files away.
fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// An error in the middle of a blob's body: `oci-client`'s digest check
/// (the image's fault), or the connection (the network's).
fn stream_error(s: &Session, what: &str, e: io::Error) -> ImageError {
    let digest = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<oci_client::errors::DigestError>());
    match digest {
        Some(oci_client::errors::DigestError::VerificationError { expected, actual }) => {
            ImageError::DigestMismatch {
                what: what.to_string(),
                expected: expected.clone(),
                actual: actual.clone(),
            }
        }
        _ => ImageError::Unreachable {
            registry: s.registry.clone(),
            message: format!("reading {what}: {}", error_chain(&e)),
        },
    }
}

fn choose_platform(
    index: &OciImageIndex,
    platform: &Platform,
    what: &str,
) -> Result<String, ImageError> {
    let found = index
        .manifests
        .iter()
        .filter(|m| {
            m.media_type == OCI_IMAGE_MEDIA_TYPE || m.media_type == IMAGE_MANIFEST_MEDIA_TYPE
        })
        .find(|m| m.platform.as_ref().is_some_and(|p| platform.matches(p)));
    match found {
        Some(m) => {
            check_digest_syntax(&m.digest).map_err(|_| {
                ImageError::Invalid(format!("{what}: index entry digest {:?}", m.digest))
            })?;
            Ok(m.digest.clone())
        }
        None => {
            let offered: Vec<String> = index
                .manifests
                .iter()
                .filter_map(|m| m.platform.as_ref())
                .map(|p| match &p.variant {
                    Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
                    None => format!("{}/{}", p.os, p.architecture),
                })
                .collect();
            Err(ImageError::Unsupported(format!(
                "{what} has no image for {platform} (it has: {})",
                if offered.is_empty() {
                    "no platforms".to_string()
                } else {
                    offered.join(", ")
                }
            )))
        }
    }
}

fn check_manifest(m: &OciImageManifest, digest: &str) -> Result<(), ImageError> {
    if let Some(t) = &m.media_type {
        if t != OCI_IMAGE_MEDIA_TYPE && t != IMAGE_MANIFEST_MEDIA_TYPE {
            return Err(ImageError::Unsupported(format!(
                "manifest {digest} has the media type {t}"
            )));
        }
    }
    for d in std::iter::once(&m.config).chain(&m.layers) {
        check_digest_syntax(&d.digest).map_err(|_| {
            ImageError::Unsupported(format!(
                "manifest {digest} names the blob {:?}; only sha256 is fetched",
                d.digest
            ))
        })?;
        if d.size < 0 {
            return Err(ImageError::Invalid(format!(
                "manifest {digest}: blob {} has a negative size",
                d.digest
            )));
        }
    }
    for l in &m.layers {
        if !LAYER_MEDIA_TYPES.contains(&l.media_type.as_str()) {
            return Err(ImageError::Unsupported(format!(
                "layer {} has the media type {} (foreign and non-distributable layers are not fetched)",
                l.digest, l.media_type
            )));
        }
    }
    Ok(())
}

/// Downloads the image config into `path`, checking its size as it
/// arrives (a blob larger than its descriptor says is cut off) and its
/// digest (`oci-client` checks it as the stream ends).
async fn download_config(
    s: &Session,
    reference: &Reference,
    desc: &OciDescriptor,
    path: &Path,
) -> Result<(), ImageError> {
    let what = format!("image config {}", desc.digest);
    let expected_size = u64::try_from(desc.size).unwrap_or(0);
    if expected_size > MAX_CONFIG_BYTES {
        return Err(ImageError::Invalid(format!(
            "{what} is {expected_size} bytes, more than the {MAX_CONFIG_BYTES} an image config may have"
        )));
    }
    let mut stream = s
        .client
        .pull_blob_stream(reference, desc)
        .await
        .map_err(|e| s.classify(&what, e))?;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| stream_error(s, &what, e))?;
        if (body.len() + chunk.len()) as u64 > expected_size {
            return Err(ImageError::DigestMismatch {
                what,
                expected: format!("{} ({expected_size} bytes)", desc.digest),
                actual: format!("more than {expected_size} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    if body.len() as u64 != expected_size {
        return Err(ImageError::DigestMismatch {
            what,
            expected: format!("{} ({expected_size} bytes)", desc.digest),
            actual: format!("{} bytes", body.len()),
        });
    }
    std::fs::write(path, &body).map_err(io_ctx(format!("write {}", path.display())))
}

/// An image config is a few KiB of JSON; a registry that announces more
/// than this is not sending one.
const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;
