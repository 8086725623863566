//! Writing the built-in types into a worker's resource types directory.

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{ACTIONS, BUILTIN_TYPES, VERSION};

/// Writes every built-in type into `dir`: `<dir>/<type>/{check,in,out}`,
/// each a two-line `sh` script that runs
/// `<hangar_exe> resource-type <type> <action> "$@"`, and
/// `<dir>/<type>/version`. Returns the type directories, in
/// [`BUILTIN_TYPES`] order.
///
/// `hangar_exe` must be absolute (a script runs from any directory). Files
/// are replaced by rename, so a script is never seen half-written; files that
/// already hold the right bytes and mode are left alone, so installing again
/// changes nothing.
pub fn install_builtin_types(dir: &Path, hangar_exe: &Path) -> io::Result<Vec<PathBuf>> {
    if !hangar_exe.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the hangar executable's path must be absolute, not {}",
                hangar_exe.display()
            ),
        ));
    }
    let exe = shell_quote(hangar_exe.as_os_str().as_bytes());
    let mut installed = Vec::new();
    for type_name in BUILTIN_TYPES {
        let type_dir = dir.join(type_name);
        fs::create_dir_all(&type_dir)?;
        for action in ACTIONS {
            let mut script = b"#!/bin/sh\nexec ".to_vec();
            script.extend_from_slice(&exe);
            script.extend_from_slice(
                format!(" resource-type {type_name} {action} \"$@\"\n").as_bytes(),
            );
            write_atomically(&type_dir.join(action), &script, 0o755)?;
        }
        write_atomically(
            &type_dir.join("version"),
            format!("{VERSION}\n").as_bytes(),
            0o644,
        )?;
        installed.push(type_dir);
    }
    Ok(installed)
}

/// `bytes` in single quotes for `sh`, each `'` written as `'\''`.
fn shell_quote(bytes: &[u8]) -> Vec<u8> {
    let mut quoted = vec![b'\''];
    for &b in bytes {
        if b == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(b);
        }
    }
    quoted.push(b'\'');
    quoted
}

/// Makes `path` hold `bytes` with permissions `mode`, through a temporary
/// file in the same directory and a rename. Does nothing when it already
/// does.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if let (Ok(existing), Ok(meta)) = (fs::read(path), fs::symlink_metadata(path)) {
        if meta.is_file() && existing == bytes && meta.permissions().mode() & 0o7777 == mode {
            return Ok(());
        }
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        // The umask may have taken bits away at creation.
        file.set_permissions(Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(shell_quote(b"/usr/bin/hangar"), b"'/usr/bin/hangar'");
        assert_eq!(
            shell_quote(b"/opt/it's here/hangar"),
            b"'/opt/it'\\''s here/hangar'"
        );
    }

    #[test]
    fn installing_writes_scripts_and_versions_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let exe = Path::new("/opt/a b/it's/hangar");
        let types = install_builtin_types(dir.path(), exe).unwrap();
        assert_eq!(
            types,
            [
                dir.path().join("docker-image"),
                dir.path().join("git"),
                dir.path().join("mock"),
                dir.path().join("registry-image"),
                dir.path().join("time")
            ]
        );
        let check = dir.path().join("mock/check");
        assert_eq!(
            fs::read_to_string(&check).unwrap(),
            "#!/bin/sh\nexec '/opt/a b/it'\\''s/hangar' resource-type mock check \"$@\"\n"
        );
        assert_eq!(
            fs::metadata(&check).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("git/version")).unwrap(),
            format!("{VERSION}\n")
        );
        let before = fs::metadata(&check).unwrap().modified().unwrap();
        // A changed mode is put back; unchanged files are not rewritten.
        fs::set_permissions(dir.path().join("git/in"), Permissions::from_mode(0o600)).unwrap();
        install_builtin_types(dir.path(), exe).unwrap();
        assert_eq!(fs::metadata(&check).unwrap().modified().unwrap(), before);
        assert_eq!(
            fs::metadata(dir.path().join("git/in"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755
        );
        let mut names: Vec<_> = fs::read_dir(dir.path().join("git"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["check", "in", "out", "version"]);
    }

    #[test]
    fn a_relative_executable_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = install_builtin_types(dir.path(), Path::new("hangar")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
