//! A volume's owners stamp: what the worker last made sure of about who
//! owns the entries of a volume's data, its top dir aside. It lives beside
//! the data (`volumes/<handle>/owners`), where no container sees it, and
//! spares the worker a walk of every entry when a container mounts a
//! volume whose entries are already its users' (20,000 files of an upload
//! cost a tenth of a second to walk on overlay).
//!
//! A stamp is only ever as true as the writes since it was made, so:
//!
//! - every stream-in removes the stamp before it writes, and a stream-in
//!   with an owner into an empty volume writes `One` of that owner after,
//!   unless another write began meanwhile;
//! - a copy-on-write child starts with its parent's stamp (the copy keeps
//!   the owners; an overlay child sees the parent's entries), unless the
//!   parent was written while the child was made;
//! - a caller that walks a volume and stamps it holds an [`OwnersToken`]
//!   taken before the walk: the stamp is written only if no write began
//!   since ([`VolumeManager::clear_owners`] counts as one);
//! - what writes the data otherwise (a container) is the caller's to
//!   declare: [`VolumeManager::clear_owners`] before a writer whose ids it
//!   cannot vouch for.
//!
//! The counts of writes are this process's: a stream-in cut by a crash
//! removed the stamp before its first byte.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::driver::names;
use crate::error::VolumeError;
use crate::manager::VolumeManager;
use crate::meta::validate_handle;

/// The longest stamp read: a longer file is not one of ours (its first
/// bytes then parse as nothing, having no end of line where one ends).
const MAX_LINE: u64 = 64;

/// Who owns every entry of a volume's data but its top dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// This uid and this gid.
    One { uid: u32, gid: u32 },
    /// A uid in `uid..uid + len` and a gid in `gid..gid + len`.
    Range { uid: u32, gid: u32, len: u32 },
}

impl Owners {
    /// Whether every entry this stamp allows is one `wanted` allows: the
    /// walk that would make the tree `wanted` would change nothing.
    pub fn within(&self, wanted: &Owners) -> bool {
        let (uids, gids) = (self.uids(), self.gids());
        let (want_uids, want_gids) = (wanted.uids(), wanted.gids());
        want_uids.0 <= uids.0
            && uids.1 <= want_uids.1
            && want_gids.0 <= gids.0
            && gids.1 <= want_gids.1
    }

    /// Inclusive bounds of the uids.
    fn uids(&self) -> (u64, u64) {
        match *self {
            Owners::One { uid, .. } => (uid.into(), uid.into()),
            Owners::Range { uid, len, .. } => span(uid, len),
        }
    }

    fn gids(&self) -> (u64, u64) {
        match *self {
            Owners::One { gid, .. } => (gid.into(), gid.into()),
            Owners::Range { gid, len, .. } => span(gid, len),
        }
    }

    fn to_line(self) -> String {
        match self {
            Owners::One { uid, gid } => format!("one {uid} {gid}\n"),
            Owners::Range { uid, gid, len } => format!("range {uid} {gid} {len}\n"),
        }
    }

    /// The stamp a line says; `None` for anything else (a stamp of a
    /// later version, a torn write): the caller walks.
    fn parse(line: &str) -> Option<Owners> {
        let line = line.strip_suffix('\n')?;
        let mut words = line.split(' ');
        let kind = words.next()?;
        let mut number = || words.next()?.parse::<u32>().ok();
        let owners = match kind {
            "one" => Owners::One {
                uid: number()?,
                gid: number()?,
            },
            "range" => {
                let (uid, gid, len) = (number()?, number()?, number()?);
                if len == 0 {
                    return None;
                }
                Owners::Range { uid, gid, len }
            }
            _ => return None,
        };
        words.next().is_none().then_some(owners)
    }
}

/// A range's inclusive bounds (a range past `u32::MAX` ends there).
fn span(first: u32, len: u32) -> (u64, u64) {
    let first = u64::from(first);
    (
        first,
        (first + u64::from(len.max(1)) - 1).min(u64::from(u32::MAX)),
    )
}

/// The writes each volume had from this process: how many began, how many
/// are under way.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    by_handle: Mutex<HashMap<String, Count>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Count {
    begun: u64,
    open: u32,
}

impl Writes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Count>> {
        self.by_handle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether no write of the token's volume began since it was taken and
/// none is under way (with the writes' lock held).
fn untouched_since(writes: &HashMap<String, Count>, token: &OwnersToken) -> bool {
    let now = writes.get(&token.handle).copied().unwrap_or_default();
    now.begun == token.begun && now.open == 0
}

/// What a walk of a volume vouches for only if nothing wrote the volume
/// since the token was taken (see [`VolumeManager::owners_token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnersToken {
    handle: String,
    begun: u64,
}

/// A write under way, from [`VolumeManager::begin_write`].
pub(crate) struct Write {
    token: OwnersToken,
}

impl VolumeManager {
    /// The volume's owners stamp; `None` when it has none (or a line this
    /// build does not read): the caller walks the tree.
    pub fn owners(&self, handle: &str) -> Result<Option<Owners>, VolumeError> {
        validate_handle(handle)?;
        let mut line = String::new();
        let read = fs::File::open(self.owners_path(handle))
            .and_then(|f| io::Read::read_to_string(&mut io::Read::take(f, MAX_LINE), &mut line));
        match read {
            Ok(_) => Ok(Owners::parse(&line)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            // Not a line of ours (not UTF-8): walked.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
            Err(e) => Err(VolumeError::io(
                format!("read the owners of volume {handle:?}"),
                e,
            )),
        }
    }

    /// Taken before a walk that will end in [`Self::set_owners`].
    pub fn owners_token(&self, handle: &str) -> OwnersToken {
        let begun = self.writes.lock().get(handle).map_or(0, |c| c.begun);
        OwnersToken {
            handle: handle.to_string(),
            begun,
        }
    }

    /// Stamps the volume `owners` if nothing wrote it since `token` was
    /// taken and nothing is writing it; says whether it did. A volume that
    /// is gone is not stamped.
    pub fn set_owners(&self, token: &OwnersToken, owners: Owners) -> Result<bool, VolumeError> {
        validate_handle(&token.handle)?;
        let writes = self.writes.lock();
        if !untouched_since(&writes, token) {
            return Ok(false);
        }
        self.write_owners(&token.handle, owners)
    }

    /// Removes the volume's stamp before a writer whose ids the caller
    /// cannot vouch for (a privileged container, a resource's action), and
    /// voids every token taken before.
    pub fn clear_owners(&self, handle: &str) -> Result<(), VolumeError> {
        validate_handle(handle)?;
        let mut writes = self.writes.lock();
        writes.entry(handle.to_string()).or_default().begun += 1;
        self.remove_owners(handle)
    }

    /// A stream-in begins: the stamp goes first.
    pub(crate) fn begin_write(&self, handle: &str) -> Result<Write, VolumeError> {
        let mut writes = self.writes.lock();
        let count = writes.entry(handle.to_string()).or_default();
        count.begun += 1;
        count.open += 1;
        let token = OwnersToken {
            handle: handle.to_string(),
            begun: count.begun,
        };
        if let Err(e) = self.remove_owners(handle) {
            let count = writes.entry(handle.to_string()).or_default();
            count.open = count.open.saturating_sub(1);
            return Err(e);
        }
        Ok(Write { token })
    }

    /// A stream-in ended; `owners` is what it vouches for (every entry it
    /// made, in a volume that was empty), stamped if it was the only write
    /// since it began.
    pub(crate) fn end_write(&self, write: Write, owners: Option<Owners>) {
        let mut writes = self.writes.lock();
        let count = writes.entry(write.token.handle.clone()).or_default();
        count.open = count.open.saturating_sub(1);
        let alone = count.begun == write.token.begun && count.open == 0;
        if let (Some(owners), true) = (owners, alone) {
            if let Err(e) = self.write_owners(&write.token.handle, owners) {
                tracing::debug!(handle = %write.token.handle, error = %e, "cannot stamp a streamed-in volume's owners; its first container walks it");
            }
        }
    }

    /// A volume is gone: its count goes with it (a token of it stamps
    /// nothing, its metadata being gone).
    pub(crate) fn forget_writes(&self, handle: &str) {
        self.writes.lock().remove(handle);
    }

    /// The parent's stamp for a child being made, if the parent was not
    /// written since `token` (taken before the copy).
    pub(crate) fn inherited_owners(&self, token: &OwnersToken) -> Option<Owners> {
        let writes = self.writes.lock();
        if !untouched_since(&writes, token) {
            return None;
        }
        self.owners(&token.handle).ok().flatten()
    }

    /// Writes a stamp into a volume dir (a staging one too).
    pub(crate) fn write_owners_into(dir: &Path, owners: Owners) -> io::Result<()> {
        let tmp = dir.join(names::OWNERS_TMP);
        fs::write(&tmp, owners.to_line())?;
        fs::rename(&tmp, dir.join(names::OWNERS))
    }

    fn write_owners(&self, handle: &str, owners: Owners) -> Result<bool, VolumeError> {
        let dir = self.dir(handle);
        if !dir.join(names::META).exists() {
            return Ok(false);
        }
        Self::write_owners_into(&dir, owners)
            .map_err(|e| VolumeError::io(format!("stamp the owners of volume {handle:?}"), e))?;
        Ok(true)
    }

    fn remove_owners(&self, handle: &str) -> Result<(), VolumeError> {
        match fs::remove_file(self.owners_path(handle)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(VolumeError::io(
                format!("remove the owners stamp of volume {handle:?}"),
                e,
            )),
        }
    }

    fn owners_path(&self, handle: &str) -> std::path::PathBuf {
        self.dir(handle).join(names::OWNERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_within_another_when_every_owner_it_allows_is_allowed() {
        let one = |uid, gid| Owners::One { uid, gid };
        let range = |uid, gid, len| Owners::Range { uid, gid, len };
        let base = range(100_000, 100_000, 65_536);
        for (stamp, wanted, within) in [
            (one(100_000, 100_000), base, true),
            (one(165_535, 100_000), base, true),
            (one(165_536, 100_000), base, false),
            (one(100_000, 99_999), base, false),
            (one(0, 0), base, false),
            (base, base, true),
            (range(100_000, 100_000, 10), base, true),
            (range(100_000, 100_000, 65_537), base, false),
            (range(200_000, 200_000, 65_536), base, false),
            (base, one(100_000, 100_000), false),
            (one(1000, 1000), one(1000, 1000), true),
            (one(1000, 1000), one(1000, 1001), false),
            (range(7, 7, 1), one(7, 7), true),
            (
                range(u32::MAX, 0, 65_536),
                range(u32::MAX - 1, 0, 65_536),
                true,
            ),
        ] {
            assert_eq!(stamp.within(&wanted), within, "{stamp:?} within {wanted:?}");
        }
    }

    #[test]
    fn a_stamp_reads_back_and_anything_else_reads_as_none() {
        for owners in [
            Owners::One { uid: 0, gid: 0 },
            Owners::One {
                uid: u32::MAX,
                gid: 5,
            },
            Owners::Range {
                uid: 100_000,
                gid: 100_000,
                len: 65_536,
            },
        ] {
            assert_eq!(Owners::parse(&owners.to_line()), Some(owners));
        }
        for line in [
            "",
            "one 1 2",
            "one 1\n",
            "one 1 2 3\n",
            "one -1 2\n",
            "one 1 99999999999\n",
            "range 1 2 0\n",
            "range 1 2\n",
            "all\n",
            "one  1 2\n",
            "ONE 1 2\n",
            "one 1 2\nextra\n",
        ] {
            assert_eq!(Owners::parse(line), None, "{line:?}");
        }
    }
}
