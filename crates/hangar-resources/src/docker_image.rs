//! The `docker-image` type: Concourse's older image type, for the
//! pipelines that still name it as a resource or as a task's
//! `image_resource`. Its `check` and `in` fetch as `registry-image` does,
//! with hangar's own puller: no Docker daemon runs on a worker.
//!
//! source (docker-image-resource's fields that hangar supports):
//! `{"repository": "registry:port/name", "tag": "latest"?, "username"?,
//! "password"?, "insecure_registries": ["host:port" | "CIDR", …]?,
//! "ca_certs": [{"domain": "host:port", "cert": "PEM"}, …]?}`. A registry
//! named in `insecure_registries` (by host, host:port or a CIDR holding
//! its address) is reached over plain HTTP or unverified TLS, as the Docker
//! daemon does; `ca_certs` entries whose `domain` is the repository's
//! registry are trusted. Its other fields are refused by name, each saying
//! why, so none is silently ignored.
//!
//! - `check` prints `[{"digest": "sha256:…"}]`, the digest the tag points
//!   to now.
//! - `in <dest>` writes what Concourse's docker-image writes and an image
//!   needs: `rootfs/` and `metadata.json` (so a task or a resource type can
//!   run in it), `repository`, `tag`, `digest` and `image-id` (the config's
//!   digest); with `rootfs: true` also `rootfs.tar`, the root filesystem as
//!   one tar. `skip_download: true` writes only `repository`, `tag` and
//!   `digest` (hangar learns the image id only by fetching the config, so
//!   `image-id` is left out, where Concourse's writes it). `save: true`
//!   (a `docker save` archive) is refused: no Docker daemon makes one.
//! - `out` (build and push with a Docker daemon) is refused, saying to
//!   build in a task and push with an image type.

use std::io::Write;
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::registry_image::{check_digest, fetch_into};
use crate::{metadata, parse_request, shorten, Call, CheckRequest, Failure, InRequest};

/// docker-image-resource's source fields hangar does not support, with why.
const UNSUPPORTED_SOURCE_FIELDS: &[(&str, &str)] = &[
    ("aws_access_key_id", "ECR authentication is not supported"),
    (
        "aws_secret_access_key",
        "ECR authentication is not supported",
    ),
    ("aws_session_token", "ECR authentication is not supported"),
    ("aws_role_arn", "ECR authentication is not supported"),
    ("registry_mirror", "registry mirrors are not supported"),
    ("client_certs", "client certificates are not supported"),
    (
        "login",
        "extra registry logins are not supported: one username and password, for the repository's registry",
    ),
    (
        "email",
        "registries' token authentication takes no email: leave it out",
    ),
    (
        "max_concurrent_downloads",
        "it tunes a Docker daemon, which hangar does not run: every layer is fetched at once",
    ),
    (
        "max_concurrent_uploads",
        "it tunes a Docker daemon, which hangar does not run, and out is not supported",
    ),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    repository: String,
    #[serde(default)]
    tag: Option<Value>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    insecure_registries: Vec<String>,
    #[serde(default)]
    ca_certs: Vec<CaCert>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaCert {
    domain: String,
    cert: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Version {
    digest: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct InParams {
    #[serde(default)]
    rootfs: bool,
    #[serde(default)]
    save: bool,
    #[serde(default)]
    skip_download: bool,
}

/// Refuses the fields this type does not support, each with why.
fn refuse_unsupported(request: &[u8]) -> Result<(), String> {
    let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(request) else {
        return Ok(()); // the typed parse names what is wrong
    };
    if let Some(Value::Object(source)) = top.get("source") {
        for (field, why) in UNSUPPORTED_SOURCE_FIELDS {
            if source.contains_key(*field) {
                return Err(format!(
                    "invalid request: source.{field}: docker-image in hangar does not support \
                     it ({why})"
                ));
            }
        }
    }
    Ok(())
}

/// The registry a repository names, as Docker reads it: the first part
/// when it has a dot or a port or is `localhost`, Docker Hub otherwise.
fn registry_of(repository: &str) -> &str {
    match repository.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Whether `insecure_registries` names `registry` (`host:port`): by
/// `host:port`, by host alone, or by a CIDR holding the host's address.
fn is_insecure(registry: &str, entries: &[String]) -> Result<bool, String> {
    let host = match registry.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let address: Option<IpAddr> = host.parse().ok();
    for entry in entries {
        if let Some((net, bits)) = entry.split_once('/') {
            let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u8>()) else {
                return Err(format!(
                    "invalid request: source.insecure_registries: {:?} is neither host[:port] \
                     nor a CIDR",
                    shorten(entry)
                ));
            };
            if address.is_some_and(|a| in_cidr(a, net, bits)) {
                return Ok(true);
            }
        } else if entry == registry || entry == host {
            return Ok(true);
        }
    }
    Ok(false)
}

fn in_cidr(address: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (address, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl Source {
    fn to_images(&self) -> Result<hangar_images::Source, String> {
        if self.repository.trim().is_empty() {
            return Err("invalid request: source.repository: must not be empty".into());
        }
        // YAML reads `tag: 1.0` as a number; docker-image takes it as text.
        let tag = match &self.tag {
            None | Some(Value::Null) => "latest".to_string(),
            Some(Value::String(t)) if t.is_empty() => {
                return Err(
                    "invalid request: source.tag: must not be empty (leave it out for latest)"
                        .into(),
                )
            }
            Some(Value::String(t)) => t.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err("invalid request: source.tag: must be a string".into()),
        };
        let registry = registry_of(&self.repository);
        let ca_certs = self
            .ca_certs
            .iter()
            .filter(|c| c.domain == registry)
            .map(|c| c.cert.clone())
            .collect();
        Ok(hangar_images::Source {
            repository: self.repository.clone(),
            tag,
            username: self.username.clone(),
            password: self.password.clone(),
            insecure: is_insecure(registry, &self.insecure_registries)?,
            ca_certs,
        })
    }
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, Failure> {
    refuse_unsupported(call.request)?;
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    check_digest(&request.source.to_images()?, call.log, "docker-image")
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, Failure> {
    refuse_unsupported(call.request)?;
    let request: InRequest<Source, Version, InParams> = parse_request(call.request)?;
    let source = request.source.to_images()?;
    let params = request.params.unwrap_or_default();
    if params.save {
        return Err(Failure::from(
            "invalid request: params.save: docker-image in hangar does not support it (a \
             `docker save` archive needs a Docker daemon; use rootfs/ or rootfs: true)"
                .to_string(),
        ));
    }
    let digest = &request.version.digest;
    let dest = call.dir.expect("in has a directory");
    std::fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    let answer = json!({
        "version": { "digest": digest },
        "metadata": [
            metadata("image", &format!("{}:{}", source.repository, source.tag)),
        ],
    });
    if params.skip_download {
        for (name, text) in [
            ("repository", &source.repository),
            ("tag", &source.tag),
            ("digest", digest),
        ] {
            std::fs::write(dest.join(name), text).map_err(|e| format!("write {name}: {e}"))?;
        }
        return Ok(answer);
    }
    let log = call.log;
    let (config, layers) = fetch_into(&source, digest, dest, log, "docker-image")?;
    std::fs::write(dest.join("image-id"), &config.image_id)
        .map_err(|e| format!("write image-id: {e}"))?;
    if params.rootfs {
        write_rootfs_tar(dest).map_err(|e| format!("write rootfs.tar: {e}"))?;
    }
    let _ = writeln!(
        log,
        "docker-image: fetched {layers} layer(s), image id {}",
        config.image_id
    );
    Ok(answer)
}

/// `rootfs.tar`: the root filesystem as one archive, symlinks kept as
/// links (never followed out of the root).
fn write_rootfs_tar(dest: &Path) -> std::io::Result<()> {
    let file = std::fs::File::create(dest.join("rootfs.tar"))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
    tar.follow_symlinks(false);
    tar.append_dir_all(".", dest.join("rootfs"))?;
    tar.into_inner()?.flush()
}

pub(crate) fn put(_call: Call<'_>) -> Result<Value, String> {
    Err(
        "docker-image: out (building and pushing with a Docker daemon) is not supported by \
         hangar: build the image in a task (for example with concourse/oci-build-task) and \
         push it with an image type installed through the base resource type layout \
         (docs/resource-types.md)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_the_first_part_only_when_it_looks_like_a_host() {
        for (repository, registry) in [
            ("busybox", "docker.io"),
            ("library/busybox", "docker.io"),
            ("concourse/git-resource", "docker.io"),
            ("localhost/x", "localhost"),
            ("127.0.0.1:5000/x", "127.0.0.1:5000"),
            ("registry.example.com/team/x", "registry.example.com"),
        ] {
            assert_eq!(registry_of(repository), registry, "{repository}");
        }
    }

    #[test]
    fn insecure_registries_match_by_host_port_host_or_cidr() {
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (registry, entries, insecure) in [
            ("127.0.0.1:5000", e(&["127.0.0.1:5000"]), true),
            ("127.0.0.1:5000", e(&["127.0.0.1"]), true),
            ("127.0.0.1:5000", e(&["127.0.0.0/8"]), true),
            ("127.0.0.1:5000", e(&["10.0.0.0/8"]), false),
            ("127.0.0.1:5000", e(&["127.0.0.1:5001"]), false),
            ("127.0.0.1:5000", e(&[]), false),
            ("reg.local:443", e(&["reg.local"]), true),
            ("reg.local:443", e(&["10.0.0.0/0"]), false),
            ("[::1]:5000", e(&["::1/128"]), true),
            ("10.1.2.3:5000", e(&["10.1.0.0/16"]), true),
            ("10.2.2.3:5000", e(&["10.1.0.0/16"]), false),
            ("10.2.2.3:5000", e(&["0.0.0.0/0"]), true),
        ] {
            assert_eq!(
                is_insecure(registry, &entries).unwrap(),
                insecure,
                "{registry} {entries:?}"
            );
        }
        assert!(is_insecure("a:1", &e(&["10.0.0.0/x"]))
            .unwrap_err()
            .contains("neither host[:port] nor a CIDR"));
        assert!(is_insecure("a:1", &e(&["x/8"])).is_err());
    }
}
