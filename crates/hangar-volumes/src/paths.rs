//! Relative path handling shared by stream-in and stream-out.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::VolumeError;

/// A normalized path relative to a volume's data root: only normal
/// components, no `.`/`..`/root.
pub(crate) type RelPath = Vec<OsString>;

/// Split `raw` into normal components, dropping `.` and empty parts.
/// Refuses `..` anywhere and absolute paths.
pub(crate) fn normalize(raw: &Path) -> Result<RelPath, &'static str> {
    let mut out = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err("contains a '..' component"),
            Component::RootDir | Component::Prefix(_) => return Err("is absolute"),
        }
    }
    Ok(out)
}

/// Same as [`normalize`] for raw bytes (tar names), also refusing NUL.
pub(crate) fn normalize_bytes(raw: &[u8]) -> Result<RelPath, &'static str> {
    if raw.contains(&0) {
        return Err("contains a NUL byte");
    }
    normalize(Path::new(std::ffi::OsStr::from_bytes(raw)))
}

/// Validate a caller-supplied subpath ("" and "." mean the data root).
pub(crate) fn parse_subpath(subpath: &str) -> Result<RelPath, VolumeError> {
    normalize_bytes(subpath.as_bytes()).map_err(|reason| VolumeError::InvalidPath {
        path: subpath.to_string(),
        reason: format!("subpath {reason}; it must be relative to the volume"),
    })
}

pub(crate) fn join(base: &Path, rel: &[OsString]) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel {
        p.push(c);
    }
    p
}

pub(crate) fn display(rel: &[OsString]) -> String {
    if rel.is_empty() {
        return ".".into();
    }
    join(Path::new(""), rel).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_drops_dots_and_refuses_parent_and_root() {
        assert_eq!(
            normalize(Path::new("./a//b/./c/")).unwrap(),
            vec![OsString::from("a"), "b".into(), "c".into()]
        );
        assert!(normalize(Path::new("a/../b")).is_err());
        assert!(normalize(Path::new("/etc")).is_err());
        assert!(normalize(Path::new("")).unwrap().is_empty());
        assert!(normalize_bytes(b"a\0b").is_err());
    }

    #[test]
    fn subpath_errors_name_the_subpath() {
        let e = parse_subpath("../up").unwrap_err().to_string();
        assert!(e.contains("../up") && e.contains(".."), "{e}");
        assert!(parse_subpath("/abs")
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        assert_eq!(parse_subpath(".").unwrap().len(), 0);
    }
}
