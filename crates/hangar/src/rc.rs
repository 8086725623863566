//! The user's saved targets, as fly keeps them in `~/.flyrc`: each a web
//! URL, a team and a session token, in `~/.hangarrc` (or `$HANGAR_RC`),
//! readable by its owner only. The file is JSON, which YAML readers read
//! too; a target is picked with `hangar -t NAME`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The largest rc file read (a few hundred targets).
const MAX_RC_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Token {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedTarget {
    pub api: String,
    pub team: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Token>,
    /// When the token's session ends at the latest (Unix millis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rc {
    #[serde(default)]
    pub targets: BTreeMap<String, SavedTarget>,
}

pub(crate) fn path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("HANGAR_RC") {
        return Ok(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").context("HOME is not set: set HANGAR_RC")?;
    Ok(PathBuf::from(home).join(".hangarrc"))
}

/// A target name: what `-t` takes.
pub(crate) fn check_name(name: &str) -> anyhow::Result<()> {
    hangar_core::names::validate_label(name).map_err(|e| anyhow::anyhow!("target: {e}"))
}

impl Rc {
    /// The saved targets; none when the file does not exist.
    pub(crate) fn load() -> anyhow::Result<Rc> {
        let path = path()?;
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Rc::default()),
            Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
        };
        let meta = file.metadata()?;
        if meta.len() > MAX_RC_BYTES {
            anyhow::bail!(
                "{} is {} bytes, more than any targets file ({MAX_RC_BYTES})",
                path.display(),
                meta.len()
            );
        }
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let value = hangar_core::yaml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        serde_json::from_value(value).with_context(|| format!("{}", path.display()))
    }

    /// Writes the file whole (a temp file renamed over it), mode 0600.
    pub(crate) fn save(&self) -> anyhow::Result<()> {
        let path = path()?;
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let text = serde_json::to_string_pretty(self)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("write {}", tmp.display()))?;
        file.write_all(text.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        // A umask cannot widen it, but an existing file's mode stays: set it.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
        Ok(())
    }

    pub(crate) fn target(&self, name: &str) -> anyhow::Result<&SavedTarget> {
        self.targets.get(name).ok_or_else(|| {
            anyhow::anyhow!(
                "no target {name:?} in {}: log in first (hangar -t {name} login -c URL)",
                path().map(|p| p.display().to_string()).unwrap_or_default()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_reads_back_and_holds_flyrc_s_shape() {
        let rc = Rc {
            targets: BTreeMap::from([(
                "ci".to_string(),
                SavedTarget {
                    api: "http://127.0.0.1:8080".into(),
                    team: "a".into(),
                    token: Some(Token {
                        kind: "Bearer".into(),
                        value: "hs.x".into(),
                    }),
                    expires_at: Some(5),
                },
            )]),
        };
        let text = serde_json::to_string(&rc).unwrap();
        let back: Rc = serde_json::from_value(hangar_core::yaml::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, rc);
        // fly's YAML reads as well.
        let yaml = "targets:\n  ci:\n    api: http://h\n    team: main\n    token:\n      type: Bearer\n      value: t\n";
        let from_yaml: Rc =
            serde_json::from_value(hangar_core::yaml::from_str(yaml).unwrap()).unwrap();
        assert_eq!(from_yaml.targets["ci"].token.as_ref().unwrap().value, "t");
    }
}
