//! Volume metadata (`volumes/<handle>/meta.json`) and handle validation.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::driver::DriverKind;
use crate::error::VolumeError;

pub(crate) const META_VERSION: u32 = 1;

/// How a volume was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    Empty,
    CopyOnWrite,
    Import,
}

/// What is stored in `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VolumeMeta {
    pub version: u32,
    pub handle: String,
    #[serde(default)]
    pub parent: Option<String>,
    pub strategy: StrategyKind,
    pub driver: DriverKind,
    #[serde(default)]
    pub privileged: bool,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

impl VolumeMeta {
    /// Whether `data/` is an overlay mount over `upper/` + ancestors.
    pub(crate) fn is_layered(&self) -> bool {
        self.driver == DriverKind::Overlay && self.parent.is_some()
    }

    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("metadata always serializes");
        v.push(b'\n');
        v
    }

    /// Read `<dir>/meta.json`; `Ok(None)` if the file does not exist.
    pub(crate) fn read(dir: &Path, handle: &str) -> Result<Option<VolumeMeta>, VolumeError> {
        let path = dir.join(crate::driver::names::META);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(VolumeError::io(format!("read {}", path.display()), e)),
        };
        let meta: VolumeMeta =
            serde_json::from_slice(&bytes).map_err(|e| VolumeError::CorruptMeta {
                handle: handle.to_string(),
                reason: e.to_string(),
            })?;
        if meta.handle != handle {
            return Err(VolumeError::CorruptMeta {
                handle: handle.to_string(),
                reason: format!("metadata names handle {:?}", meta.handle),
            });
        }
        Ok(Some(meta))
    }
}

/// Handles: `[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`, and never `..` inside.
pub fn validate_handle(handle: &str) -> Result<(), VolumeError> {
    let invalid = |reason| {
        Err(VolumeError::InvalidHandle {
            handle: handle.to_string(),
            reason,
        })
    };
    let bytes = handle.as_bytes();
    let Some(first) = bytes.first() else {
        return invalid("handle is empty");
    };
    if bytes.len() > 128 {
        return invalid("handle is longer than 128 characters");
    }
    if !first.is_ascii_alphanumeric() {
        return invalid("handle must start with a letter or digit");
    }
    if let Some(bad) = bytes
        .iter()
        .find(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')))
    {
        return if *bad == b'/' {
            invalid("handle must not contain '/'")
        } else {
            invalid("handle may only contain letters, digits, '_', '.' and '-'")
        };
    }
    if handle.contains("..") {
        return invalid("handle must not contain '..'");
    }
    Ok(())
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_handles_are_accepted() {
        for h in ["a", "0", "build-42", "a.b_c-d", &"x".repeat(128)] {
            assert!(validate_handle(h).is_ok(), "{h}");
        }
    }

    #[test]
    fn bad_handles_are_rejected_with_a_reason() {
        for (h, why) in [
            ("", "empty"),
            (".hidden", "start"),
            ("-x", "start"),
            ("a/b", "'/'"),
            ("a..b", "'..'"),
            ("a b", "only contain"),
            ("ü", "start"),
        ] {
            let err = validate_handle(h).unwrap_err().to_string();
            assert!(err.contains(why), "{h:?}: {err}");
        }
        let long = "x".repeat(129);
        assert!(validate_handle(&long)
            .unwrap_err()
            .to_string()
            .contains("longer"));
    }
}
