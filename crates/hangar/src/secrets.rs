//! Secrets that quickstart makes once and keeps in its data dir.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;

/// A new random secret: 32 bytes from the OS, as hex.
pub(crate) fn generate() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("read random bytes: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads the secret in `path`, or makes one and writes it there, readable by
/// the owner only.
pub(crate) fn load_or_create(path: &Path) -> anyhow::Result<String> {
    match fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => {
            // Made by an older version, or loosened by hand: the owner's only.
            restrict(path, 0o600)?;
            return Ok(s.trim().to_string());
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    }
    let secret = generate()?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    f.write_all(secret.as_bytes())?;
    f.sync_all()?;
    Ok(secret)
}

fn restrict(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("make {} private", path.display()))
}

/// Makes `dir` (created if missing) its owner's alone (0700): no task user
/// passes through it to the secrets and the database inside.
pub(crate) fn private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    restrict(dir, 0o700)
}

/// Makes the SQLite database at `db` and its `-wal` and `-shm` files, those
/// that exist, the owner's only. A missing database is not made here: web
/// must see it missing (its marker then refuses to start on an empty one),
/// so this runs again once the store has opened (and created) it; until
/// then the data dir's own 0700 keeps it out of reach.
pub(crate) fn private_sqlite(db: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = std::path::PathBuf::from(name);
        if path.exists() {
            restrict(&path, 0o600)?;
        }
    }
    Ok(())
}

/// Reads a secret from a file an operator made: refused when other users
/// may read or write it (a task, or any other process on the host, would
/// have the fleet's key), or when it is empty.
pub(crate) fn read_file(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    // Follows links: a Kubernetes secret volume's files are links to the
    // real file, whose mode is the volume's defaultMode.
    let meta =
        fs::metadata(path).with_context(|| format!("read secret file {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        anyhow::bail!(
            "secret file {} is open to other users (mode {mode:04o}): make it readable by its owner only (chmod 600; on Kubernetes, defaultMode: 0400)",
            path.display()
        );
    }
    let text =
        fs::read_to_string(path).with_context(|| format!("read secret file {}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        anyhow::bail!("secret file {} is empty", path.display());
    }
    Ok(secret.to_string())
}

/// A secret given by its flag (or variable) or by the `-file` flag naming a
/// file; clap makes sure exactly one is there.
pub(crate) fn flag_or_file(
    value: Option<String>,
    file: Option<&Path>,
    flag: &str,
) -> anyhow::Result<String> {
    match (value, file) {
        (Some(v), None) => Ok(v),
        (None, Some(f)) => read_file(f),
        (Some(_), Some(_)) => anyhow::bail!("give {flag} or {flag}-file, not both"),
        (None, None) => anyhow::bail!("{flag} or {flag}-file is required"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_secret_file_is_read_trimmed_unless_others_may_read_it_or_it_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-key");
        fs::write(&path, "  the-key-0123456789\n").unwrap();
        for (mode, ok) in [
            (0o600, true),
            (0o400, true),
            (0o640, true),
            (0o604, false),
            (0o644, false),
            (0o602, false),
        ] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            match read_file(&path) {
                Ok(s) => {
                    assert!(ok, "{mode:o} accepted");
                    assert_eq!(s, "the-key-0123456789");
                }
                Err(e) => {
                    assert!(!ok, "{mode:o}: {e}");
                    assert!(e.to_string().contains("open to other users"), "{e}");
                    assert!(e.to_string().contains(&format!("{mode:04o}")), "{e}");
                }
            }
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, "\n").unwrap();
        assert!(read_file(&path).unwrap_err().to_string().contains("empty"));
        let err = read_file(&dir.path().join("missing")).unwrap_err();
        assert!(format!("{err:#}").contains("missing"), "{err:#}");
    }

    #[test]
    fn a_secret_is_made_once_private_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-token");
        let first = load_or_create(&path).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(load_or_create(&path).unwrap(), first);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_ne!(generate().unwrap(), generate().unwrap());
        // One left open by hand is closed again when read.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), first);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn the_data_dir_and_the_database_files_become_the_owners_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("hangar.db");
        private_sqlite(&db).unwrap();
        assert!(!db.exists(), "a missing database is left missing");
        for name in ["hangar.db", "hangar.db-wal"] {
            fs::write(dir.join(name), "").unwrap();
            fs::set_permissions(dir.join(name), fs::Permissions::from_mode(0o644)).unwrap();
        }
        private_sqlite(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&dir.join("hangar.db-wal")), 0o600);
    }
}
