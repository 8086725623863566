//! The single error type of this crate.

use std::fmt;
use std::io;
use std::path::Path;

/// Which limit of [`crate::Limits`] an archive ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// `max_bytes`: decompressed archive bytes actually read.
    Bytes,
    /// `max_entries`: number of archive entries.
    Entries,
    /// The per-entry cap on header/extension bytes (pax, GNU long names).
    HeaderBytes,
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::Bytes => "bytes",
            LimitKind::Entries => "entries",
            LimitKind::HeaderBytes => "header bytes",
        })
    }
}

/// Everything that can go wrong in the volume manager.
///
/// Callers branch on the variant (e.g. map `NotFound` to HTTP 404,
/// `AlreadyExists` to 409, `PathNotFound` to 404, `Refused`/`TooLarge` to 400/413).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("invalid volume handle {handle:?}: {reason}")]
    InvalidHandle {
        handle: String,
        reason: &'static str,
    },

    #[error("volume {handle:?} not found")]
    NotFound { handle: String },

    #[error("volume {handle:?} already exists")]
    AlreadyExists { handle: String },

    #[error("parent volume {parent:?} of new volume {handle:?} not found")]
    ParentNotFound { handle: String, parent: String },

    #[error("volume {handle:?} has live children: {}", children.join(", "))]
    HasChildren {
        handle: String,
        children: Vec<String>,
    },

    #[error("path {path:?} not found in the volume: {missing} does not exist")]
    PathNotFound { path: String, missing: String },

    #[error("file {path:?} is larger than the {limit} bytes a file read whole may have")]
    FileTooLarge { path: String, limit: u64 },

    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },

    #[error("refused archive entry {entry:?}: {reason}")]
    Refused { entry: String, reason: String },

    #[error("archive too large at entry {entry:?}: more than {limit} {kind}")]
    TooLarge {
        entry: String,
        kind: LimitKind,
        limit: u64,
    },

    #[error("malformed archive near entry {entry:?}: {source}")]
    BadArchive {
        entry: String,
        #[source]
        source: io::Error,
    },

    #[error("corrupt metadata for volume {handle:?}: {reason}")]
    CorruptMeta { handle: String, reason: String },

    #[error("unsupported: {reason}")]
    Unsupported { reason: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl VolumeError {
    /// Wrap an I/O error with a lower-case context naming what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        VolumeError::Io {
            context: context.into(),
            source,
        }
    }
}

/// `result.ctx(|| format!("..."))` sugar for I/O results.
pub(crate) trait IoContext<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T, VolumeError>;
    fn ctx_path(self, what: &str, path: &Path) -> Result<T, VolumeError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T, VolumeError> {
        self.map_err(|e| VolumeError::io(f(), e))
    }
    fn ctx_path(self, what: &str, path: &Path) -> Result<T, VolumeError> {
        self.map_err(|e| VolumeError::io(format!("{what} {}", path.display()), e))
    }
}
