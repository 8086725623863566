//! A container's directory and the files in it.
//!
//! ```text
//! <root>/<handle>/spec.json    the ContainerSpec; its presence makes a container
//! <root>/<handle>/meta.json    started_at, the cgroup, whether runc runs it
//! <root>/<handle>/pid          the wrapper's pid (also its process group)
//! <root>/<handle>/log          stdout and stderr, appended through one fd
//! <root>/<handle>/exit         written by the wrapper when the process ends
//! <root>/<handle>/result.json  the ContainerExit, written once
//! <root>/<handle>/work/        process runtime: the working dir, mounts as symlinks
//! <root>/<handle>/bundle/      runc runtime: the OCI bundle (config.json)
//! <root>/.creating-<handle>-<rand>/    a creation in progress
//! <root>/.destroying-<handle>-<rand>/  a removal in progress
//! <root>/.runc/                runc's state (--root)
//! ```

use std::fs;
use std::io;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::cgroup::CgroupRef;

pub(crate) const SPEC_FILE: &str = "spec.json";
pub(crate) const META_FILE: &str = "meta.json";
pub(crate) const PID_FILE: &str = "pid";
pub(crate) const LOG_FILE: &str = "log";
pub(crate) const EXIT_FILE: &str = "exit";
pub(crate) const RESULT_FILE: &str = "result.json";
pub(crate) const WORK_DIR: &str = "work";
pub(crate) const BUNDLE_DIR: &str = "bundle";
pub(crate) const RUNC_STATE_DIR: &str = ".runc";
pub(crate) const CREATING_PREFIX: &str = ".creating-";
pub(crate) const DESTROYING_PREFIX: &str = ".destroying-";

/// What the worker needs besides the spec to run and clean up a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub started_at: i64,
    /// The cgroup made for it, if any.
    pub cgroup: Option<CgroupRef>,
    /// runc runs it under its handle (in `<root>/.runc`).
    pub runc: bool,
    /// The uid and gid the program runs as, when the worker chose or
    /// resolved them (its mounts were given to this user). `None`: the
    /// worker's own user, or root in a runc container.
    #[serde(default)]
    pub user: Option<hangar_core::users::Ids>,
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A short random suffix for temp names and cgroups.
pub(crate) fn random_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Removes a temp file; one left behind is logged (the caller's own
/// result says how the write went).
fn remove_tmp(tmp: &Path) {
    if let Err(e) = fs::remove_file(tmp) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %tmp.display(), error = %e, "cannot remove a temporary file");
        }
    }
}

/// Writes a temp file and renames it over `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", random_suffix()));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path).inspect_err(|_| remove_tmp(&tmp))
}

/// Writes `path` only if it does not exist yet, whole or not at all (a temp
/// file hard-linked into place). False when it already existed: someone
/// else (another thread, or another worker process on the same dir) was
/// first and their content stands.
pub(crate) fn write_exclusive(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let tmp = path.with_extension(format!("tmp-{}", random_suffix()));
    fs::write(&tmp, bytes)?;
    let linked = fs::hard_link(&tmp, path);
    remove_tmp(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A JSON file, `None` when it is not there.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The whole text of a file, `None` when it is not there.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_write_keeps_the_first_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        assert!(write_exclusive(&path, b"first").unwrap());
        assert!(!write_exclusive(&path, b"second").unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), "first");
        // No temp files are left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_atomic_write_replaces_and_a_missing_json_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        assert_eq!(read_json::<Meta>(&path).unwrap(), None);
        let meta = Meta {
            started_at: 5,
            cgroup: None,
            runc: true,
            user: None,
        };
        write_atomic(&path, b"{}").unwrap();
        write_atomic(&path, &serde_json::to_vec(&meta).unwrap()).unwrap();
        assert_eq!(read_json::<Meta>(&path).unwrap(), Some(meta));
        fs::write(&path, "not json").unwrap();
        assert_eq!(
            read_json::<Meta>(&path).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
