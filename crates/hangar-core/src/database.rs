//! Whether web may trust the database it has open.
//!
//! A SQLite file deleted under a running web keeps answering (the process
//! holds the unlinked inode) and every write goes into a file nobody will
//! ever open again; a restarted web would then silently begin an empty
//! database. These rules decide, from facts the store gathers (the file's
//! device and inode, the database's id, the marker web keeps beside the
//! file), whether the database is the one web started with, and whether web
//! may start at all.

use std::fmt;

/// A file's place on disk: two paths name the same file when both match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub device: u64,
    pub inode: u64,
}

/// What looking up the database's path found now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathNow {
    Found(FileId),
    Missing,
    /// The lookup itself failed (a permission, an I/O error): nothing is
    /// known about the file.
    Unknown(String),
}

/// Why the database web has open is no longer the one it started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The file at the path is gone: web writes into an unlinked inode.
    Deleted,
    /// Another file sits at the path (moved, restored or recreated).
    Replaced { opened: FileId, now: FileId },
    /// The database answers with another id (a restored or recreated
    /// PostgreSQL database, or a SQLite file copied over the open one).
    OtherId { expected: String, found: String },
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Deleted => write!(
                f,
                "the database file was deleted while web ran; writes since then are lost"
            ),
            Lost::Replaced { opened, now } => write!(
                f,
                "the database file was replaced while web ran (opened as device {} inode {}, \
                 the path now holds device {} inode {}); writes since then went to the old file",
                opened.device, opened.inode, now.device, now.inode
            ),
            Lost::OtherId { expected, found } => write!(
                f,
                "the database now answers as database {found}, not {expected} that web started \
                 on: it was replaced while web ran"
            ),
        }
    }
}

/// The verdict on the database file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileCheck {
    Same,
    Lost(Lost),
    /// Not known to be lost, but not known to be healthy either.
    Unknown(String),
}

pub fn check_file(opened: FileId, now: &PathNow) -> FileCheck {
    match now {
        PathNow::Found(id) if *id == opened => FileCheck::Same,
        PathNow::Found(id) => FileCheck::Lost(Lost::Replaced { opened, now: *id }),
        PathNow::Missing => FileCheck::Lost(Lost::Deleted),
        PathNow::Unknown(e) => FileCheck::Unknown(e.clone()),
    }
}

pub fn check_id(expected: &str, found: &str) -> Result<(), Lost> {
    if expected == found {
        Ok(())
    } else {
        Err(Lost::OtherId {
            expected: expected.into(),
            found: found.into(),
        })
    }
}

/// A database id: 32 lowercase hex digits (128 random bits).
pub fn is_database_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The marker web keeps beside a SQLite file: the id of the database that
/// was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    Absent,
    Holds(String),
    /// Present but not an id (truncated, edited): still a sign that a
    /// database was there.
    Invalid(String),
}

pub fn parse_marker(text: &str) -> Marker {
    let id = text.trim();
    if is_database_id(id) {
        Marker::Holds(id.to_string())
    } else {
        let shown: String = id.chars().take(40).collect();
        Marker::Invalid(format!("{shown:?} is not a database id"))
    }
}

/// Why web refuses to start on the database it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRefusal {
    /// The marker names a database but the file is gone.
    Missing {
        marker_id: String,
    },
    /// The file holds another database than the marker names.
    Different {
        marker_id: String,
        found_id: String,
    },
    InvalidMarker(String),
}

const HOW_TO_ACCEPT: &str = "to start on this database deliberately, start web once with \
    --accept-new-database (or HANGAR_ACCEPT_NEW_DATABASE=true)";

impl fmt::Display for StartRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartRefusal::Missing { marker_id } => write!(
                f,
                "the database file is missing, but the marker beside it says database {marker_id} \
                 was here: it was deleted or moved. Starting would begin an empty database that \
                 forgets every worker, volume and build. Restore the file (with its -wal file) \
                 from where it went or from a backup; or, {HOW_TO_ACCEPT}"
            ),
            StartRefusal::Different {
                marker_id,
                found_id,
            } => write!(
                f,
                "the database file holds database {found_id}, but the marker beside it says \
                 database {marker_id} was here: the file was replaced. Put the right file back; \
                 or, if this file is meant to be used, {HOW_TO_ACCEPT}"
            ),
            StartRefusal::InvalidMarker(why) => write!(
                f,
                "the marker beside the database file is unreadable ({why}), so web cannot tell \
                 whether this is the database it used before; {HOW_TO_ACCEPT}"
            ),
        }
    }
}

fn accept_or(accept_new: bool, refusal: StartRefusal) -> Result<(), StartRefusal> {
    if accept_new {
        Ok(())
    } else {
        Err(refusal)
    }
}

/// Before the database is opened (and so perhaps created): may web go on?
pub fn before_open(
    marker: &Marker,
    database_exists: bool,
    accept_new: bool,
) -> Result<(), StartRefusal> {
    match marker {
        Marker::Holds(id) if !database_exists => accept_or(
            accept_new,
            StartRefusal::Missing {
                marker_id: id.clone(),
            },
        ),
        Marker::Invalid(why) => accept_or(accept_new, StartRefusal::InvalidMarker(why.clone())),
        _ => Ok(()),
    }
}

/// What to do with the marker once the database is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerAction {
    Keep,
    Write,
}

/// After the database is open and answers with `id`: may web go on, and
/// must the marker be (re)written?
pub fn after_open(
    marker: &Marker,
    id: &str,
    accept_new: bool,
) -> Result<MarkerAction, StartRefusal> {
    match marker {
        Marker::Holds(m) if m == id => Ok(MarkerAction::Keep),
        Marker::Holds(m) => accept_or(
            accept_new,
            StartRefusal::Different {
                marker_id: m.clone(),
                found_id: id.into(),
            },
        )
        .map(|()| MarkerAction::Write),
        Marker::Invalid(why) => accept_or(accept_new, StartRefusal::InvalidMarker(why.clone()))
            .map(|()| MarkerAction::Write),
        // First start, or a database from before markers existed.
        Marker::Absent => Ok(MarkerAction::Write),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";
    const F1: FileId = FileId {
        device: 8,
        inode: 100,
    };
    const F2: FileId = FileId {
        device: 8,
        inode: 101,
    };

    #[test]
    fn file_checks() {
        let cases = [
            (PathNow::Found(F1), FileCheck::Same),
            (
                PathNow::Found(F2),
                FileCheck::Lost(Lost::Replaced {
                    opened: F1,
                    now: F2,
                }),
            ),
            (
                PathNow::Found(FileId {
                    device: 9,
                    inode: 100,
                }),
                FileCheck::Lost(Lost::Replaced {
                    opened: F1,
                    now: FileId {
                        device: 9,
                        inode: 100,
                    },
                }),
            ),
            (PathNow::Missing, FileCheck::Lost(Lost::Deleted)),
            (
                PathNow::Unknown("permission denied".into()),
                FileCheck::Unknown("permission denied".into()),
            ),
        ];
        for (now, want) in cases {
            assert_eq!(check_file(F1, &now), want, "{now:?}");
        }
    }

    #[test]
    fn id_checks() {
        assert_eq!(check_id(A, A), Ok(()));
        assert_eq!(
            check_id(A, B),
            Err(Lost::OtherId {
                expected: A.into(),
                found: B.into()
            })
        );
    }

    #[test]
    fn marker_parsing() {
        let cases = [
            (A, Marker::Holds(A.into())),
            (
                " 0123456789abcdef0123456789abcdef\n",
                Marker::Holds(A.into()),
            ),
            ("", Marker::Invalid("\"\" is not a database id".into())),
            (
                "0123456789ABCDEF0123456789ABCDEF",
                Marker::Invalid(String::new()),
            ),
            ("0123456789abcdef", Marker::Invalid(String::new())),
            (
                "0123456789abcdef0123456789abcdeg",
                Marker::Invalid(String::new()),
            ),
            (
                "0123456789abcdef0123456789abcdef0",
                Marker::Invalid(String::new()),
            ),
        ];
        for (text, want) in cases {
            match (parse_marker(text), want) {
                (Marker::Invalid(_), Marker::Invalid(w)) if w.is_empty() => {}
                (got, want) => assert_eq!(got, want, "{text:?}"),
            }
        }
    }

    #[test]
    fn start_before_open() {
        let holds = Marker::Holds(A.into());
        let invalid = Marker::Invalid("x".into());
        let missing = Err(StartRefusal::Missing {
            marker_id: A.into(),
        });
        let unreadable = Err(StartRefusal::InvalidMarker("x".into()));
        // (marker, database exists, accept, verdict)
        let cases = [
            (&Marker::Absent, false, false, Ok(())),
            (&Marker::Absent, true, false, Ok(())),
            (&holds, true, false, Ok(())),
            (&holds, false, false, missing),
            (&holds, false, true, Ok(())),
            (&invalid, true, false, unreadable.clone()),
            (&invalid, false, false, unreadable),
            (&invalid, false, true, Ok(())),
        ];
        for (marker, exists, accept, want) in cases {
            assert_eq!(
                before_open(marker, exists, accept),
                want,
                "{marker:?} exists={exists} accept={accept}"
            );
        }
    }

    #[test]
    fn start_after_open() {
        let holds = Marker::Holds(A.into());
        let invalid = Marker::Invalid("x".into());
        let different = Err(StartRefusal::Different {
            marker_id: A.into(),
            found_id: B.into(),
        });
        // (marker, id found, accept, verdict)
        let cases = [
            (&Marker::Absent, A, false, Ok(MarkerAction::Write)),
            (&Marker::Absent, A, true, Ok(MarkerAction::Write)),
            (&holds, A, false, Ok(MarkerAction::Keep)),
            (&holds, A, true, Ok(MarkerAction::Keep)),
            (&holds, B, false, different),
            (&holds, B, true, Ok(MarkerAction::Write)),
            (
                &invalid,
                A,
                false,
                Err(StartRefusal::InvalidMarker("x".into())),
            ),
            (&invalid, A, true, Ok(MarkerAction::Write)),
        ];
        for (marker, id, accept, want) in cases {
            assert_eq!(
                after_open(marker, id, accept),
                want,
                "{marker:?} id={id} accept={accept}"
            );
        }
    }

    #[test]
    fn refusals_say_how_to_proceed() {
        for r in [
            StartRefusal::Missing {
                marker_id: A.into(),
            },
            StartRefusal::Different {
                marker_id: A.into(),
                found_id: B.into(),
            },
            StartRefusal::InvalidMarker("x".into()),
        ] {
            let text = r.to_string();
            assert!(text.contains("--accept-new-database"), "{text}");
            assert!(text.contains("HANGAR_ACCEPT_NEW_DATABASE"), "{text}");
        }
    }
}
