//! Whether a worker may import a host path into a volume: only from
//! directories an operator named (`--allow-import-dir`), never by default.
//!
//! The decision is made on the path as given (absolute, no `..`), and again
//! by the caller on the path it really leads to, links resolved.

use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportDecision {
    /// No directory is allowed: imports are turned off.
    Disabled,
    /// The path is relative, climbs with `..`, or is not under an allowed dir.
    Outside,
    Inside,
}

/// `path` checked against the allowed (canonical) directories.
pub fn import_decision(allowed: &[PathBuf], path: &Path) -> ImportDecision {
    if allowed.is_empty() {
        return ImportDecision::Disabled;
    }
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return ImportDecision::Outside;
    }
    // `Path::starts_with` compares whole components: /srv/images2 is not
    // under /srv/images.
    if allowed.iter().any(|dir| path.starts_with(dir)) {
        ImportDecision::Inside
    } else {
        ImportDecision::Outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_under_an_allowed_dir_are_inside() {
        let allowed = vec![PathBuf::from("/srv/images"), PathBuf::from("/opt/rootfs")];
        let cases = [
            ("/srv/images", ImportDecision::Inside),
            ("/srv/images/busybox", ImportDecision::Inside),
            ("/srv/images/./busybox/", ImportDecision::Inside),
            ("/opt/rootfs/a/b", ImportDecision::Inside),
            ("/srv/images2", ImportDecision::Outside),
            ("/srv", ImportDecision::Outside),
            ("/etc", ImportDecision::Outside),
            ("/srv/images/../../etc", ImportDecision::Outside),
            ("srv/images/x", ImportDecision::Outside),
            ("", ImportDecision::Outside),
        ];
        for (path, want) in cases {
            assert_eq!(import_decision(&allowed, Path::new(path)), want, "{path:?}");
        }
    }

    #[test]
    fn nothing_is_importable_when_no_dir_is_allowed() {
        for path in ["/", "/etc", "/srv/images/x", "relative"] {
            assert_eq!(
                import_decision(&[], Path::new(path)),
                ImportDecision::Disabled,
                "{path}"
            );
        }
    }
}
