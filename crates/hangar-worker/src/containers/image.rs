//! Concourse's image layout in a rootfs volume: what a resource type's `in`
//! writes for an image (`registry-image` among them) is a `rootfs/`
//! directory, the root filesystem, and a `metadata.json` beside it with the
//! image's config, `{"env": ["K=V", ...], "user": "..."}`. A volume with a
//! `metadata.json` at its top is read in that layout; any other volume is
//! the root filesystem itself.
//!
//! Concourse applies the config so (`atc/worker/gardenruntime`): the
//! image's env first, the task's params over it; the task's `run.user` if
//! set, else the image's user, else root. The image's working directory is
//! not used: the task runs in its build dir.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ContainerError;

/// The metadata file of the layout, at the volume's top.
pub(crate) const METADATA_FILE: &str = "metadata.json";
/// The root filesystem of the layout, at the volume's top.
pub(crate) const ROOTFS_DIR: &str = "rootfs";
/// The largest `metadata.json` read: an image's env and user fit in far
/// less; more is a hostile or broken image.
pub(crate) const METADATA_MAX_BYTES: u64 = 1 << 20;

/// The image config a layout's `metadata.json` gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ImageConfig {
    /// `KEY=value` entries split at the first `=`, in the image's order.
    pub env: Vec<(String, String)>,
    /// The image's user; `None` when it names none.
    pub user: Option<String>,
}

/// The root filesystem a rootfs volume at `volume` gives, and its image
/// config (the default for a volume that is a root filesystem itself).
pub(crate) fn open(volume: &Path) -> Result<(PathBuf, ImageConfig), ContainerError> {
    let metadata = volume.join(METADATA_FILE);
    let meta = match fs::symlink_metadata(&metadata) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((volume.to_path_buf(), ImageConfig::default()))
        }
        Err(e) => return Err(bad(format!("cannot read {METADATA_FILE}: {e}"))),
    };
    if !meta.is_file() {
        return Err(bad(format!(
            "{METADATA_FILE} is not a regular file (a symlink or a directory)"
        )));
    }
    let rootfs = volume.join(ROOTFS_DIR);
    match fs::symlink_metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(bad(format!(
                "the volume has a {METADATA_FILE}, so its {ROOTFS_DIR}/ must be a directory, and it is not (a symlink or a file)"
            )))
        }
        Err(_) => {
            return Err(bad(format!(
                "the volume has a {METADATA_FILE} but no {ROOTFS_DIR}/ directory beside it"
            )))
        }
    }
    let mut text = Vec::new();
    fs::File::open(&metadata)
        .and_then(|f| f.take(METADATA_MAX_BYTES + 1).read_to_end(&mut text))
        .map_err(|e| bad(format!("cannot read {METADATA_FILE}: {e}")))?;
    if text.len() as u64 > METADATA_MAX_BYTES {
        return Err(bad(format!(
            "{METADATA_FILE} is larger than {METADATA_MAX_BYTES} bytes"
        )));
    }
    Ok((rootfs, parse_metadata(&text).map_err(bad)?))
}

/// Whether the volume at `volume` holds an image in Concourse's layout (a
/// regular `metadata.json` and a `rootfs/` directory at its top). Such a
/// volume keeps its files' owners: they are the image's users, which a
/// container of the image relies on.
pub(crate) fn is_layout(volume: &Path) -> bool {
    let is = |name: &str, check: fn(&fs::Metadata) -> bool| {
        fs::symlink_metadata(volume.join(name)).is_ok_and(|m| check(&m))
    };
    is(METADATA_FILE, fs::Metadata::is_file) && is(ROOTFS_DIR, fs::Metadata::is_dir)
}

fn bad(reason: String) -> ContainerError {
    ContainerError::InvalidSpec {
        field: "rootfs_volume".into(),
        reason: format!("image layout: {reason}"),
    }
}

/// Reads a `metadata.json`: an object whose `env` (a list of `KEY=value`
/// texts) and `user` (a text) are optional; other fields are ignored, as
/// Concourse ignores them.
pub(crate) fn parse_metadata(text: &[u8]) -> Result<ImageConfig, String> {
    let value: Value =
        serde_json::from_slice(text).map_err(|e| format!("{METADATA_FILE} is not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err(format!("{METADATA_FILE} is not a JSON object"));
    };
    let mut config = ImageConfig::default();
    match map.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                let Value::String(entry) = entry else {
                    return Err(format!("{METADATA_FILE}: env[{i}] is not a text"));
                };
                if entry.contains('\0') {
                    return Err(format!("{METADATA_FILE}: env[{i}] contains a NUL byte"));
                }
                let Some((key, value)) = entry.split_once('=') else {
                    return Err(format!(
                        "{METADATA_FILE}: env[{i}] {:?} has no `=` (KEY=value)",
                        shorten(entry)
                    ));
                };
                if key.is_empty() {
                    return Err(format!(
                        "{METADATA_FILE}: env[{i}] {:?} has an empty name",
                        shorten(entry)
                    ));
                }
                config.env.push((key.to_string(), value.to_string()));
            }
        }
        Some(_) => return Err(format!("{METADATA_FILE}: env is not a list")),
    }
    match map.get("user") {
        None | Some(Value::Null) => {}
        Some(Value::String(user)) if user.contains('\0') => {
            return Err(format!("{METADATA_FILE}: user contains a NUL byte"))
        }
        Some(Value::String(user)) => {
            config.user = Some(user.clone()).filter(|u| !u.is_empty());
        }
        Some(_) => return Err(format!("{METADATA_FILE}: user is not a text")),
    }
    Ok(config)
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The container's environment: the image's entries whose names the
/// task's params do not set, then the params (params win).
pub(crate) fn merge_env(
    image: &[(String, String)],
    params: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in image {
        if params.contains_key(k) {
            continue;
        }
        // A name the image sets twice: its last value, in its first place.
        match out.iter_mut().find(|(name, _)| name == k) {
            Some(entry) => entry.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn metadata_gives_env_and_user_and_ignores_other_fields() {
        let c = parse_metadata(
            br#"{"env": ["PATH=/bin:/usr/bin", "A=b=c", "EMPTY="], "user": "nobody", "workdir": "/src"}"#,
        )
        .unwrap();
        assert_eq!(
            c.env,
            [
                ("PATH".to_string(), "/bin:/usr/bin".to_string()),
                ("A".to_string(), "b=c".to_string()),
                ("EMPTY".to_string(), String::new()),
            ]
        );
        assert_eq!(c.user.as_deref(), Some("nobody"));
        assert_eq!(parse_metadata(b"{}").unwrap(), ImageConfig::default());
        assert_eq!(
            parse_metadata(br#"{"env": null, "user": ""}"#).unwrap(),
            ImageConfig::default()
        );
    }

    #[test]
    fn malformed_metadata_is_refused_with_the_reason() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "is not JSON"),
            (b"[]", "not a JSON object"),
            (br#"{"env": "A=b"}"#, "env is not a list"),
            (br#"{"env": [1]}"#, "env[0] is not a text"),
            (
                br#"{"env": ["A=b", "NOEQUALS"]}"#,
                "env[1] \"NOEQUALS\" has no `=`",
            ),
            (br#"{"env": ["=x"]}"#, "empty name"),
            (br#"{"env": ["A=\u0000"]}"#, "env[0] contains a NUL byte"),
            (br#"{"user": "r\u0000oot"}"#, "user contains a NUL byte"),
            (br#"{"user": 0}"#, "user is not a text"),
            (b"\xff\xfe{}", "is not JSON"),
        ];
        for (text, says) in cases {
            let e = parse_metadata(text).unwrap_err();
            assert!(e.contains(says), "{:?}: {e}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn params_win_over_the_image_env() {
        let image = vec![
            ("PATH".to_string(), "/image/bin".to_string()),
            ("LANG".to_string(), "C".to_string()),
            ("PATH".to_string(), "/image/bin2".to_string()),
        ];
        let params = BTreeMap::from([("LANG".to_string(), "en_US".to_string())]);
        assert_eq!(
            merge_env(&image, &params),
            [
                ("PATH".to_string(), "/image/bin2".to_string()),
                ("LANG".to_string(), "en_US".to_string()),
            ]
        );
    }

    #[test]
    fn a_volume_without_metadata_is_the_root_and_one_with_it_gives_its_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let (root, config) = open(dir.path()).unwrap();
        assert_eq!(root, dir.path());
        assert_eq!(config, ImageConfig::default());

        fs::write(dir.path().join(METADATA_FILE), br#"{"user": "1000"}"#).unwrap();
        let e = open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no rootfs/ directory"), "{e}");
        fs::create_dir(dir.path().join(ROOTFS_DIR)).unwrap();
        let (root, config) = open(dir.path()).unwrap();
        assert_eq!(root, dir.path().join(ROOTFS_DIR));
        assert_eq!(config.user.as_deref(), Some("1000"));

        let huge = vec![b' '; METADATA_MAX_BYTES as usize + 10];
        fs::write(dir.path().join(METADATA_FILE), huge).unwrap();
        let e = open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn only_a_metadata_file_beside_a_rootfs_dir_is_the_layout() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path();
        assert!(!is_layout(v));
        fs::write(v.join(METADATA_FILE), "{}").unwrap();
        assert!(!is_layout(v), "no rootfs/");
        fs::write(v.join(ROOTFS_DIR), "").unwrap();
        assert!(!is_layout(v), "rootfs is a file");
        fs::remove_file(v.join(ROOTFS_DIR)).unwrap();
        std::os::unix::fs::symlink("/", v.join(ROOTFS_DIR)).unwrap();
        assert!(!is_layout(v), "rootfs is a symlink");
        fs::remove_file(v.join(ROOTFS_DIR)).unwrap();
        fs::create_dir(v.join(ROOTFS_DIR)).unwrap();
        assert!(is_layout(v));
    }

    #[test]
    fn symlinks_in_the_layout_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join(METADATA_FILE)).unwrap();
        let e = open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        fs::remove_file(dir.path().join(METADATA_FILE)).unwrap();
        fs::write(dir.path().join(METADATA_FILE), b"{}").unwrap();
        std::os::unix::fs::symlink("/", dir.path().join(ROOTFS_DIR)).unwrap();
        let e = open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("must be a directory"), "{e}");
    }
}
