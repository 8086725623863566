//! A directory of files, one per credential, for single-node installs:
//!
//! ```text
//! <dir>/<team>/<pipeline>/<name>   tried first (builds of a pipeline)
//! <dir>/<team>/<name>              then (and only this for one-off builds)
//! ```
//!
//! A file's text is the var's value (one trailing newline removed); a var
//! with fields (`((name.field))`) reads the file as a YAML or JSON mapping.
//! A directory where a file is looked for is "not here" (a team's var named
//! like one of its pipelines).
//!
//! Refused, as errors naming the var (never "not found"): a file any user
//! but its owner may read, write or run (`chmod go-rwx`), a path that
//! leaves the directory through a symlink, anything but a regular file,
//! a file over [`MAX_FILE_BYTES`], text that is not UTF-8. Names with
//! path separators or `..` are refused before any path is built.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::CredsError;

/// The largest credential file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

pub struct DirSecrets {
    /// Canonical (symlinks resolved) at start.
    root: PathBuf,
}

impl DirSecrets {
    pub fn new(root: &Path) -> Result<DirSecrets, CredsError> {
        let root = root
            .canonicalize()
            .map_err(|e| CredsError::Backend(format!("credentials dir {}: {e}", root.display())))?;
        if !root.is_dir() {
            return Err(CredsError::Backend(format!(
                "credentials dir {} is not a directory",
                root.display()
            )));
        }
        Ok(DirSecrets { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The text of `<root>/<segments…>`, or `None` when there is no file.
    pub async fn read(&self, segments: &[String], var: &str) -> Result<Option<String>, CredsError> {
        let root = self.root.clone();
        let segments = segments.to_vec();
        let var = var.to_string();
        tokio::task::spawn_blocking(move || read_blocking(&root, &segments, &var))
            .await
            .map_err(|e| CredsError::Backend(format!("reading credentials: {e}")))?
    }
}

fn read_blocking(
    root: &Path,
    segments: &[String],
    var: &str,
) -> Result<Option<String>, CredsError> {
    let mut path = root.to_path_buf();
    for s in segments {
        // Checked by the rules already; checked again where paths are made.
        hangar_core::vars::credentials::check_segment("path segment", s)
            .map_err(CredsError::Invalid)?;
        path.push(s);
    }
    let shown = segments.join("/");
    let fail =
        |why: String| CredsError::Backend(format!("var {var}: credential file {shown}: {why}"));
    let real = match path.canonicalize() {
        Ok(p) => p,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    if !real.starts_with(root) {
        return Err(fail(
            "is a symlink to a place outside the credentials dir".into(),
        ));
    }
    let mut file = match std::fs::File::open(&real) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    };
    // The checks read the opened file, so a file swapped in after the
    // path was resolved is the one checked.
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() {
        return Err(fail("is not a regular file".into()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "has mode {:o}: users other than its owner may use it (chmod go-rwx)",
            meta.mode() & 0o7777
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!("is larger than {MAX_FILE_BYTES} bytes")));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(format!("is larger than {MAX_FILE_BYTES} bytes")));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| fail("is not UTF-8 text".into()))
}
