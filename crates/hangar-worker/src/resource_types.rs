//! Base resource types a worker has on disk, one directory each, in either
//! of two layouts:
//!
//! * hangar's own: the resource protocol's executables (`check`, `in`,
//!   `out`) and optionally a `version` file; they run in the sandbox over
//!   the host's system dirs where process tasks do, else as host processes
//!   (`resources_api`).
//! * Concourse's: `resource_metadata.json` (`{"type": "git", "version":
//!   "1.2.3", "privileged": false}`) beside a root filesystem, `rootfs.tgz`
//!   (a gzipped tar) or `rootfs/` (unpacked). The type's actions run
//!   `/opt/resource/<action>` in a container of it (see `rootfs` and
//!   `containers::image_action`). The name is the metadata's `type`, as in
//!   Concourse, else the directory's.
//!
//! A directory that is neither, or whose metadata, name or tarball is not
//! one the worker takes, is skipped with a warning: one bad type does not
//! keep the worker from registering with the others.

pub(crate) mod rootfs;

use std::io::Read;
use std::path::{Path, PathBuf};

use hangar_api::BaseResourceType;

pub(crate) use rootfs::{RootfsCache, RootfsSource};

/// Concourse's metadata file of a base resource type.
pub(crate) const METADATA_FILE: &str = "resource_metadata.json";
/// The largest `resource_metadata.json` read: a few fields, so anything
/// near this is not one.
const MAX_METADATA_BYTES: u64 = 64 * 1024;

/// A base resource type as the worker runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalType {
    /// What registration advertises.
    pub info: BaseResourceType,
    pub layout: Layout,
}

/// How a base type's actions run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The type's directory holds the executables, programs of the host
    /// (run in the sandbox where process tasks are).
    Programs,
    /// `/opt/resource/<action>` in a container of this root filesystem.
    Rootfs(RootfsSource),
}

/// `resource_metadata.json`: Concourse's fields; others are ignored, as
/// Concourse ignores them.
#[derive(Debug, serde::Deserialize)]
struct Metadata {
    #[serde(default, rename = "type")]
    type_name: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    privileged: bool,
    // `unique_version_history`, Concourse's switch for one version history
    // across resources, is ignored: hangar keeps histories per resource.
}

/// Lists the resource types under `dir`, sorted by name. A missing dir
/// means none. A `rootfs.tgz` is read through once per file (see
/// `rootfs::tarball_verdict`), so it blocks the first time.
pub fn discover_resource_types(dir: &Path) -> Vec<BaseResourceType> {
    discover(dir).into_iter().map(|t| t.info).collect()
}

/// What a worker advertises: privileged types only where it runs
/// privileged containers (`--allow-privileged`), so web never places
/// their actions on a worker that would refuse them.
pub(crate) fn offered_resource_types(dir: &Path, allow_privileged: bool) -> Vec<BaseResourceType> {
    discover_resource_types(dir)
        .into_iter()
        .filter(|t| {
            let offered = allow_privileged || !t.privileged;
            if !offered {
                tracing::warn!(resource_type = %t.type_name, path = %t.path, "resource type is privileged and this worker was not started with --allow-privileged; not offered");
            }
            offered
        })
        .collect()
}

/// The types under `dir` and how each runs, sorted by name; of two
/// directories naming the same type, the first by directory name wins.
pub(crate) fn discover(dir: &Path) -> Vec<LocalType> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    let mut types: Vec<LocalType> = Vec::new();
    for path in paths {
        let found = match read_type(&path) {
            Ok(found) => found,
            Err(why) => {
                tracing::warn!(path = %path.display(), "{why}; skipped");
                continue;
            }
        };
        if let Some(first) = types
            .iter()
            .find(|t| t.info.type_name == found.info.type_name)
        {
            tracing::warn!(path = %path.display(), resource_type = %found.info.type_name, first = %first.info.path, "another directory has this resource type already; skipped");
            continue;
        }
        types.push(found);
    }
    types.sort_by(|a, b| a.info.type_name.cmp(&b.info.type_name));
    types
}

/// The type in directory `path`, or why it is not one.
fn read_type(path: &Path) -> Result<LocalType, String> {
    let dir_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the directory's name is not UTF-8")?;
    if std::fs::symlink_metadata(path.join(METADATA_FILE)).is_ok() {
        return read_concourse_type(path, dir_name);
    }
    if !path.join("check").is_file() || !path.join("in").is_file() {
        return Err(format!(
            "not a resource type (needs check and in, or {METADATA_FILE})"
        ));
    }
    valid_name(dir_name)?;
    let version = std::fs::read_to_string(path.join("version"))
        .ok()
        .and_then(|v| valid_version(&v));
    Ok(LocalType {
        info: BaseResourceType {
            type_name: dir_name.to_string(),
            path: path.display().to_string(),
            version,
            privileged: false,
        },
        layout: Layout::Programs,
    })
}

/// Concourse's layout: the metadata, and a root filesystem beside it.
fn read_concourse_type(path: &Path, dir_name: &str) -> Result<LocalType, String> {
    let metadata = read_metadata(&path.join(METADATA_FILE))?;
    let name = metadata.type_name.as_deref().unwrap_or(dir_name);
    valid_name(name)?;
    let tarball = path.join(rootfs::TARBALL);
    let unpacked = path.join(rootfs::DIR);
    let source = if tarball.is_file() {
        rootfs::tarball_verdict(&tarball).map_err(|why| format!("{}: {why}", rootfs::TARBALL))?;
        RootfsSource::Tarball(tarball)
    } else if unpacked.is_dir() {
        RootfsSource::Dir(unpacked)
    } else {
        return Err(format!(
            "{METADATA_FILE} without {} or {}/ beside it",
            rootfs::TARBALL,
            rootfs::DIR
        ));
    };
    Ok(LocalType {
        info: BaseResourceType {
            type_name: name.to_string(),
            path: path.display().to_string(),
            version: metadata.version.as_deref().and_then(valid_version),
            privileged: metadata.privileged,
        },
        layout: Layout::Rootfs(source),
    })
}

fn read_metadata(path: &Path) -> Result<Metadata, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{METADATA_FILE}: {e}"))?;
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    if !is_file {
        return Err(format!("{METADATA_FILE} is not a file"));
    }
    let mut text = Vec::new();
    file.take(MAX_METADATA_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("{METADATA_FILE}: {e}"))?;
    if text.len() as u64 > MAX_METADATA_BYTES {
        return Err(format!(
            "{METADATA_FILE} is larger than {MAX_METADATA_BYTES} bytes"
        ));
    }
    serde_json::from_slice(&text).map_err(|e| format!("{METADATA_FILE}: {e}"))
}

fn valid_name(name: &str) -> Result<(), String> {
    hangar_core::names::validate_label(name)
        .map_err(|e| format!("resource type name is not valid: {e}"))
}

fn valid_version(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty() && v.len() <= 128 && !v.chars().any(char::is_control)).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn program_type(dir: &Path, name: &str, files: &[&str]) {
        let d = dir.join(name);
        fs::create_dir_all(&d).unwrap();
        for f in files {
            fs::write(d.join(f), "#!/bin/sh\n").unwrap();
        }
    }

    /// A Concourse-layout type in `dir/name` with `metadata` and an
    /// unpacked `rootfs/`.
    fn concourse_type(dir: &Path, name: &str, metadata: &str) -> PathBuf {
        let d = dir.join(name);
        fs::create_dir_all(d.join("rootfs/opt/resource")).unwrap();
        fs::write(d.join(METADATA_FILE), metadata).unwrap();
        d
    }

    fn names(found: &[BaseResourceType]) -> Vec<(&str, Option<&str>, bool)> {
        found
            .iter()
            .map(|t| (t.type_name.as_str(), t.version.as_deref(), t.privileged))
            .collect()
    }

    #[test]
    fn resource_types_are_directories_with_check_and_in() {
        let dir = tempfile::tempdir().unwrap();
        program_type(dir.path(), "git", &["check", "in", "out"]);
        program_type(dir.path(), "mock", &["check", "in"]);
        program_type(dir.path(), "half", &["check"]);
        program_type(dir.path(), "bad name", &["check", "in"]);
        fs::write(dir.path().join("git/version"), "2.1\n").unwrap();
        let found = discover_resource_types(dir.path());
        assert_eq!(
            names(&found),
            [("git", Some("2.1"), false), ("mock", None, false)]
        );
        assert!(discover_resource_types(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn concourse_s_layout_is_named_by_its_metadata() {
        let dir = tempfile::tempdir().unwrap();
        // Named by its metadata, as Concourse names it, not by its dir.
        concourse_type(
            dir.path(),
            "git-resource",
            r#"{"type":"git","version":"1.17.0","privileged":false,"unique_version_history":false}"#,
        );
        // Without a type: the directory's name. Unknown fields are fine.
        concourse_type(
            dir.path(),
            "docker-image",
            r#"{"version":"1.8.0","privileged":true,"extra":[1]}"#,
        );
        // A tarball instead of a directory.
        let d = dir.path().join("time");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(METADATA_FILE), r#"{"type":"time"}"#).unwrap();
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        tar.append_data(&mut header, "opt/", std::io::empty())
            .unwrap();
        fs::write(
            d.join("rootfs.tgz"),
            tar.into_inner().unwrap().finish().unwrap(),
        )
        .unwrap();

        let found = discover(dir.path());
        let got: Vec<_> = found
            .iter()
            .map(|t| {
                (
                    t.info.type_name.as_str(),
                    t.info.version.as_deref(),
                    t.info.privileged,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("docker-image", Some("1.8.0"), true),
                ("git", Some("1.17.0"), false),
                ("time", None, false),
            ]
        );
        assert_eq!(
            found[1].layout,
            Layout::Rootfs(RootfsSource::Dir(dir.path().join("git-resource/rootfs")))
        );
        assert_eq!(
            found[1].info.path,
            dir.path().join("git-resource").display().to_string()
        );
        assert_eq!(
            found[2].layout,
            Layout::Rootfs(RootfsSource::Tarball(dir.path().join("time/rootfs.tgz")))
        );
        // A worker without --allow-privileged does not offer the
        // privileged one.
        let offered = offered_resource_types(dir.path(), false);
        assert_eq!(
            names(&offered),
            [("git", Some("1.17.0"), false), ("time", None, false)]
        );
        assert_eq!(offered_resource_types(dir.path(), true).len(), 3);
    }

    #[test]
    fn bad_metadata_and_names_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        concourse_type(dir.path(), "ok", r#"{"type":"ok"}"#);
        concourse_type(dir.path(), "malformed", r#"{"type":"#);
        concourse_type(dir.path(), "wrong-field-type", r#"{"type":["git"]}"#);
        concourse_type(dir.path(), "not-an-object", r#""git""#);
        concourse_type(dir.path(), "bad-label", r#"{"type":"../../etc"}"#);
        concourse_type(dir.path(), "empty-type", r#"{"type":""}"#);
        let big = format!(
            r#"{{"type":"big","version":"{}"}}"#,
            "1".repeat(MAX_METADATA_BYTES as usize)
        );
        concourse_type(dir.path(), "oversized", &big);
        // Metadata but no root filesystem beside it.
        let bare = dir.path().join("bare");
        fs::create_dir(&bare).unwrap();
        fs::write(bare.join(METADATA_FILE), r#"{"type":"bare"}"#).unwrap();
        // Metadata that is a directory.
        let odd = dir.path().join("odd");
        fs::create_dir_all(odd.join(METADATA_FILE)).unwrap();
        fs::create_dir_all(odd.join("rootfs")).unwrap();
        // A version that is not one is dropped, the type kept.
        concourse_type(
            dir.path(),
            "bad-version",
            r#"{"type":"bad-version","version":"1\n2"}"#,
        );
        // Two directories naming one type: the first by name wins.
        concourse_type(dir.path(), "a-dup", r#"{"type":"dup","version":"a"}"#);
        concourse_type(dir.path(), "b-dup", r#"{"type":"dup","version":"b"}"#);
        let found = discover_resource_types(dir.path());
        assert_eq!(
            names(&found),
            [
                ("bad-version", None, false),
                ("dup", Some("a"), false),
                ("ok", None, false)
            ]
        );
    }
}
