//! The identity of a worker's state: a random id kept in its work dir. It
//! survives a process restart when the dir survives, and is new when the dir
//! was wiped (a recreated pod, a new disk) — which is exactly when web must
//! forget what it knew of the worker's volumes.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};

pub const STATE_IDENTITY_FILE: &str = "state-identity";

/// Reads the work dir's identity, creating the dir and a new identity if there
/// is none. The file is written under a temporary name, synced and renamed,
/// so a crash leaves either no identity or a whole one.
pub fn load_or_create_state_identity(work_dir: &Path) -> anyhow::Result<String> {
    fs::create_dir_all(work_dir)
        .with_context(|| format!("create work dir {}", work_dir.display()))?;
    let path = work_dir.join(STATE_IDENTITY_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if id.is_empty()
                || id.len() > 128
                || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                bail!(
                    "the state identity in {} is corrupt; remove the work dir's contents to start afresh",
                    path.display()
                );
            }
            Ok(id.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            let tmp = work_dir.join(format!(".{STATE_IDENTITY_FILE}.tmp"));
            let mut f =
                fs::File::create(&tmp).with_context(|| format!("write {}", tmp.display()))?;
            f.write_all(id.as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
            fs::File::open(work_dir)?.sync_all()?;
            Ok(id)
        }
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

pub(crate) const LAST_GENERATION_FILE: &str = "last-generation";

/// The highest generation web gave this work dir, if it remembers one. A
/// file that cannot be read as a number counts as none: it only ever raises
/// web's counter, so losing it costs nothing but that check.
pub(crate) fn load_last_generation(work_dir: &Path) -> Option<i64> {
    fs::read_to_string(work_dir.join(LAST_GENERATION_FILE))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .filter(|g: &i64| *g > 0)
}

/// Remembers `generation` as the highest this work dir was given (written
/// whole or not at all).
pub(crate) fn store_last_generation(work_dir: &Path, generation: i64) -> anyhow::Result<()> {
    if load_last_generation(work_dir).is_some_and(|known| known >= generation) {
        return Ok(());
    }
    let tmp = work_dir.join(format!(".{LAST_GENERATION_FILE}.tmp"));
    let path = work_dir.join(LAST_GENERATION_FILE);
    let mut f = fs::File::create(&tmp).with_context(|| format!("write {}", tmp.display()))?;
    f.write_all(generation.to_string().as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_generation_only_rises_and_a_bad_file_counts_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_last_generation(dir.path()), None);
        store_last_generation(dir.path(), 7).unwrap();
        store_last_generation(dir.path(), 5).unwrap();
        assert_eq!(load_last_generation(dir.path()), Some(7));
        fs::write(dir.path().join(LAST_GENERATION_FILE), "garbage").unwrap();
        assert_eq!(load_last_generation(dir.path()), None);
    }

    use super::*;

    #[test]
    fn the_identity_survives_a_restart_and_changes_when_the_dir_is_wiped() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let first = load_or_create_state_identity(&work).unwrap();
        assert_eq!(load_or_create_state_identity(&work).unwrap(), first);
        fs::remove_dir_all(&work).unwrap();
        let second = load_or_create_state_identity(&work).unwrap();
        assert_ne!(first, second);
    }

    #[test]
    fn a_corrupt_identity_is_an_error_not_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(STATE_IDENTITY_FILE), "../../etc\n").unwrap();
        let err = load_or_create_state_identity(dir.path()).unwrap_err();
        assert!(err.to_string().contains("is corrupt"), "{err}");
    }
}
