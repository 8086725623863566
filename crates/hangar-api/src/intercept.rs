//! `intercept` (fly's `hijack`): a process run in a step's container, its
//! input and output carried over one upgraded HTTP/1.1 connection.
//!
//! The CLI asks web (`GET /api/v1/teams/T/containers/H/intercept`), web asks
//! the container's worker (`GET /containers/H/exec`), each with
//! `Connection: Upgrade` and `Upgrade: hangar-exec` and the
//! [`ExecRequest`] as JSON in the `process` query parameter. After the
//! `101` web copies bytes both ways and understands none of them; the two
//! ends speak [`Frame`]s: a kind byte, a big-endian `u32` length, and at
//! most [`MAX_FRAME`] bytes of payload. The worker ends a session with an
//! [`Frame::Exit`] or an [`Frame::Error`], then closes.

use serde::{Deserialize, Serialize};

/// The `Upgrade` protocol name of a session.
pub const UPGRADE_PROTOCOL: &str = "hangar-exec";

/// The largest payload of one frame: a reader refuses a longer length
/// before reading (or allocating) it.
pub const MAX_FRAME: usize = 64 * 1024;

/// How many bytes a frame's header takes: kind and length.
pub const HEADER_LEN: usize = 5;

/// The largest number of arguments, and bytes in all of them together.
pub const MAX_ARGS: usize = 256;
pub const MAX_ARGS_BYTES: usize = 16 * 1024;

/// What to run in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The program, found on the container's `PATH` when it has no `/`.
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Run it on a pseudo-terminal of `cols` × `rows` (stdout and stderr
    /// are then one stream).
    #[serde(default)]
    pub tty: bool,
    #[serde(default)]
    pub cols: Option<u16>,
    #[serde(default)]
    pub rows: Option<u16>,
}

impl ExecRequest {
    /// The request in a session's `process` query parameter, checked: what
    /// web and the worker both take.
    pub fn from_query(process: &str) -> Result<ExecRequest, String> {
        let req: ExecRequest =
            serde_json::from_str(process).map_err(|e| format!("process: {e}"))?;
        req.check().map_err(|why| format!("process: {why}"))?;
        Ok(req)
    }

    /// Why the request cannot run, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.path.is_empty() {
            return Err("path: empty".into());
        }
        if self.args.len() > MAX_ARGS {
            return Err(format!("args: more than {MAX_ARGS}"));
        }
        let bytes: usize = self.path.len() + self.args.iter().map(String::len).sum::<usize>();
        if bytes > MAX_ARGS_BYTES {
            return Err(format!("path and args: more than {MAX_ARGS_BYTES} bytes"));
        }
        if self.path.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return Err("path and args: a NUL byte".into());
        }
        if !self.tty && (self.cols.is_some() || self.rows.is_some()) {
            return Err("cols and rows: only with tty".into());
        }
        if self.cols == Some(0) || self.rows == Some(0) {
            return Err("cols and rows: zero".into());
        }
        Ok(())
    }
}

/// A team's container as `GET /api/v1/teams/T/containers` lists it
/// (Concourse's `fly containers` columns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamContainer {
    pub handle: String,
    pub worker: String,
    /// `creating`, `created`, `failed`, `destroying`.
    pub state: String,
    pub build_id: i64,
    /// The build's name: the job build's number, or a one-off's name.
    pub build_name: String,
    #[serde(default)]
    pub pipeline: Option<String>,
    #[serde(default)]
    pub job: Option<String>,
    /// The step's name and type (`task`).
    #[serde(default)]
    pub step: Option<String>,
    #[serde(default)]
    pub step_type: Option<String>,
    #[serde(default)]
    pub attempt: Option<i64>,
    pub created_at: i64,
    /// A failed task's container, its program exited, kept for `intercept`
    /// until then (Unix ms) or until its job's next build starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_until: Option<i64>,
}

/// One message of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Client → worker: bytes for the process's stdin.
    Stdin(Vec<u8>),
    /// Client → worker: no more stdin.
    StdinEof,
    /// Client → worker: the terminal is now `cols` × `rows`.
    Resize { cols: u16, rows: u16 },
    /// Worker → client: the process's stdout (or its terminal).
    Stdout(Vec<u8>),
    /// Worker → client: the process's stderr.
    Stderr(Vec<u8>),
    /// Worker → client: the process ended with this status (128 + the
    /// signal's number when a signal ended it).
    Exit(i32),
    /// Worker → client: the process could not run, or the session broke.
    Error(String),
}

const STDIN: u8 = 0;
const STDIN_EOF: u8 = 1;
const RESIZE: u8 = 2;
const STDOUT: u8 = 3;
const STDERR: u8 = 4;
const EXIT: u8 = 5;
const ERROR: u8 = 6;

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    UnknownKind(u8),
    TooLong(usize),
    /// A fixed-size frame whose length is not its size.
    BadLength {
        kind: u8,
        len: usize,
    },
    NotUtf8,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::TooLong(n) => write!(f, "a frame of {n} bytes (at most {MAX_FRAME})"),
            FrameError::BadLength { kind, len } => {
                write!(f, "a frame of kind {kind} with {len} bytes")
            }
            FrameError::NotUtf8 => f.write_str("an error frame that is not UTF-8"),
        }
    }
}

impl std::error::Error for FrameError {}

impl Frame {
    /// The frame's bytes, header first. A payload over [`MAX_FRAME`] is the
    /// caller's bug: split data with [`Frame::chunks`].
    pub fn encode(&self) -> Vec<u8> {
        let (kind, payload): (u8, std::borrow::Cow<'_, [u8]>) = match self {
            Frame::Stdin(b) => (STDIN, b.into()),
            Frame::StdinEof => (STDIN_EOF, (&[][..]).into()),
            Frame::Resize { cols, rows } => {
                let mut p = cols.to_be_bytes().to_vec();
                p.extend(rows.to_be_bytes());
                (RESIZE, p.into())
            }
            Frame::Stdout(b) => (STDOUT, b.into()),
            Frame::Stderr(b) => (STDERR, b.into()),
            Frame::Exit(code) => (EXIT, code.to_be_bytes().to_vec().into()),
            Frame::Error(m) => {
                let mut m = m.as_bytes();
                if m.len() > MAX_FRAME {
                    m = &m[..MAX_FRAME];
                    // Not inside a character.
                    while std::str::from_utf8(m).is_err() {
                        m = &m[..m.len() - 1];
                    }
                }
                (ERROR, m.into())
            }
        };
        debug_assert!(payload.len() <= MAX_FRAME);
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.push(kind);
        out.extend((payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Reads a header: the kind and the payload's length, refused when the
    /// length is over [`MAX_FRAME`].
    pub fn header(bytes: [u8; HEADER_LEN]) -> Result<(u8, usize), FrameError> {
        let kind = bytes[0];
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLong(len));
        }
        if kind > ERROR {
            return Err(FrameError::UnknownKind(kind));
        }
        Ok((kind, len))
    }

    /// The frame of a kind and its payload.
    pub fn decode(kind: u8, payload: Vec<u8>) -> Result<Frame, FrameError> {
        let fixed = |n: usize| {
            if payload.len() == n {
                Ok(())
            } else {
                Err(FrameError::BadLength {
                    kind,
                    len: payload.len(),
                })
            }
        };
        Ok(match kind {
            STDIN => Frame::Stdin(payload),
            STDIN_EOF => {
                fixed(0)?;
                Frame::StdinEof
            }
            RESIZE => {
                fixed(4)?;
                Frame::Resize {
                    cols: u16::from_be_bytes([payload[0], payload[1]]),
                    rows: u16::from_be_bytes([payload[2], payload[3]]),
                }
            }
            STDOUT => Frame::Stdout(payload),
            STDERR => Frame::Stderr(payload),
            EXIT => {
                fixed(4)?;
                Frame::Exit(i32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]))
            }
            ERROR => Frame::Error(String::from_utf8(payload).map_err(|_| FrameError::NotUtf8)?),
            other => return Err(FrameError::UnknownKind(other)),
        })
    }

    /// Decodes one whole frame from the start of `bytes`: the frame and how
    /// many bytes it took, or `None` when `bytes` holds only part of it.
    pub fn parse(bytes: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
        let Some(head) = bytes.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let (kind, len) = Frame::header(head.try_into().expect("five bytes"))?;
        let Some(payload) = bytes.get(HEADER_LEN..HEADER_LEN + len) else {
            return Ok(None);
        };
        Ok(Some((
            Frame::decode(kind, payload.to_vec())?,
            HEADER_LEN + len,
        )))
    }

    /// `data` as frames of at most [`MAX_FRAME`] bytes each, made by `make`.
    pub fn chunks(data: &[u8], make: fn(Vec<u8>) -> Frame) -> impl Iterator<Item = Frame> + '_ {
        data.chunks(MAX_FRAME).map(move |c| make(c.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_comes_back_as_it_went() {
        for frame in [
            Frame::Stdin(b"ls\n".to_vec()),
            Frame::Stdin(vec![]),
            Frame::StdinEof,
            Frame::Resize {
                cols: 132,
                rows: 43,
            },
            Frame::Stdout(vec![0, 255, 10]),
            Frame::Stderr(b"oops".to_vec()),
            Frame::Exit(0),
            Frame::Exit(137),
            Frame::Exit(-1),
            Frame::Error("container \"x\" not found".into()),
            Frame::Stdout(vec![7; MAX_FRAME]),
        ] {
            let bytes = frame.encode();
            assert_eq!(
                Frame::parse(&bytes),
                Ok(Some((frame.clone(), bytes.len()))),
                "{frame:?}"
            );
            // Any prefix is "not yet".
            for cut in [0, 1, HEADER_LEN - 1, bytes.len() - 1] {
                if cut < bytes.len() {
                    assert_eq!(
                        Frame::parse(&bytes[..cut]),
                        Ok(None),
                        "{frame:?} cut at {cut}"
                    );
                }
            }
        }
    }

    #[test]
    fn hostile_frames_are_refused_before_their_payload_is_read() {
        let head = |kind: u8, len: u32| {
            let mut h = vec![kind];
            h.extend(len.to_be_bytes());
            h
        };
        for (bytes, want) in [
            (head(9, 0), FrameError::UnknownKind(9)),
            (head(255, 3), FrameError::UnknownKind(255)),
            (
                head(STDOUT, u32::MAX),
                FrameError::TooLong(u32::MAX as usize),
            ),
            (
                head(STDIN, MAX_FRAME as u32 + 1),
                FrameError::TooLong(MAX_FRAME + 1),
            ),
            (
                [head(EXIT, 3), vec![0, 0, 1]].concat(),
                FrameError::BadLength { kind: EXIT, len: 3 },
            ),
            (
                [head(RESIZE, 5), vec![0; 5]].concat(),
                FrameError::BadLength {
                    kind: RESIZE,
                    len: 5,
                },
            ),
            (
                [head(STDIN_EOF, 1), vec![0]].concat(),
                FrameError::BadLength {
                    kind: STDIN_EOF,
                    len: 1,
                },
            ),
            (
                [head(ERROR, 2), vec![0xff, 0xfe]].concat(),
                FrameError::NotUtf8,
            ),
        ] {
            assert_eq!(Frame::parse(&bytes), Err(want.clone()), "{bytes:?}");
        }
    }

    #[test]
    fn a_long_error_is_cut_on_a_character_boundary() {
        let message = "é".repeat(MAX_FRAME);
        let bytes = Frame::Error(message).encode();
        let (frame, _) = Frame::parse(&bytes).unwrap().unwrap();
        let Frame::Error(m) = frame else { panic!() };
        assert!(m.len() <= MAX_FRAME && m.chars().all(|c| c == 'é'));
    }

    #[test]
    fn data_is_split_into_frames_that_fit() {
        let data = vec![1u8; MAX_FRAME * 2 + 3];
        let frames: Vec<Frame> = Frame::chunks(&data, Frame::Stdin).collect();
        assert_eq!(frames.len(), 3);
        assert!(frames
            .iter()
            .all(|f| f.encode().len() <= HEADER_LEN + MAX_FRAME));
    }

    #[test]
    fn a_request_is_checked() {
        let ok = ExecRequest {
            path: "sh".into(),
            args: vec![],
            tty: true,
            cols: Some(80),
            rows: Some(24),
        };
        assert_eq!(ok.check(), Ok(()));
        let bad = |f: fn(&mut ExecRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            r.check().unwrap_err()
        };
        assert!(bad(|r| r.path.clear()).contains("path"));
        assert!(bad(|r| r.args = vec!["x".into(); MAX_ARGS + 1]).contains("args"));
        assert!(bad(|r| r.args = vec!["x".repeat(MAX_ARGS_BYTES)]).contains("bytes"));
        assert!(bad(|r| r.args = vec!["a\0b".into()]).contains("NUL"));
        assert!(bad(|r| r.cols = Some(0)).contains("zero"));
        assert!(bad(|r| r.tty = false).contains("only with tty"));
        let unknown = ExecRequest::from_query(r#"{"path":"sh","privileged":true}"#);
        assert!(
            unknown.unwrap_err().contains("privileged"),
            "an unknown field is refused"
        );
        assert!(ExecRequest::from_query(r#"{"path":""}"#)
            .unwrap_err()
            .contains("path: empty"));
        assert_eq!(
            ExecRequest::from_query(r#"{"path":"ls","args":["-l"]}"#)
                .unwrap()
                .args,
            ["-l"]
        );
    }
}
