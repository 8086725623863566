//! Base resource types a worker has on disk: each is a directory holding the
//! resource protocol's executables (`check`, `in`, `out`) and optionally a
//! `version` file.

use std::path::Path;

use hangar_api::BaseResourceType;

/// Lists the resource types under `dir`, sorted by name. A missing dir means
/// none; entries that are not valid types are skipped with a warning, so one
/// bad directory does not keep the worker from registering.
pub fn discover_resource_types(dir: &Path) -> Vec<BaseResourceType> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut types: Vec<BaseResourceType> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let name = entry.file_name().to_str()?.to_string();
            if !path.join("check").is_file() || !path.join("in").is_file() {
                tracing::warn!(path = %path.display(), "not a resource type (needs check and in); skipped");
                return None;
            }
            if hangar_core::names::validate_label(&name).is_err() {
                tracing::warn!(path = %path.display(), "resource type name is not valid; skipped");
                return None;
            }
            let version = std::fs::read_to_string(path.join("version"))
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty() && v.len() <= 128 && !v.chars().any(char::is_control));
            Some(BaseResourceType {
                type_name: name,
                path: path.display().to_string(),
                version,
            })
        })
        .collect();
    types.sort_by(|a, b| a.type_name.cmp(&b.type_name));
    types
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_types_are_directories_with_check_and_in() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |name: &str, files: &[&str]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            for f in files {
                std::fs::write(d.join(f), "#!/bin/sh\n").unwrap();
            }
        };
        mk("git", &["check", "in", "out"]);
        mk("mock", &["check", "in"]);
        mk("half", &["check"]);
        mk("bad name", &["check", "in"]);
        std::fs::write(dir.path().join("git/version"), "2.1\n").unwrap();
        let found = discover_resource_types(dir.path());
        let names: Vec<_> = found
            .iter()
            .map(|t| (t.type_name.as_str(), t.version.as_deref()))
            .collect();
        assert_eq!(names, [("git", Some("2.1")), ("mock", None)]);
        assert!(discover_resource_types(&dir.path().join("missing")).is_empty());
    }
}
