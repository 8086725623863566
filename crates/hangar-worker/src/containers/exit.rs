//! The exit file the wrapper leaves and how it reads.
//!
//! The wrapper is a POSIX shell: it learns its child's end as one number,
//! `$?`, which is the exit code, or 128 + the signal number when a signal
//! killed the child. runc reports its container the same way. So a status
//! above 128 that maps to a signal (129..=192) is read as that signal; a
//! program that itself calls `exit 137` is indistinguishable from one killed
//! by SIGKILL, as in every shell.

/// How the container's process ended, as the wrapper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawExit {
    Code(i32),
    Signal(i32),
}

/// The highest signal number Linux has (SIGRTMAX).
const MAX_SIGNAL: i32 = 64;

impl RawExit {
    pub(super) fn from_status(status: i32) -> RawExit {
        if status > 128 && status - 128 <= MAX_SIGNAL {
            RawExit::Signal(status - 128)
        } else {
            RawExit::Code(status)
        }
    }

    pub(super) fn code(self) -> Option<i32> {
        match self {
            RawExit::Code(c) => Some(c),
            RawExit::Signal(_) => None,
        }
    }

    pub(super) fn signal(self) -> Option<i32> {
        match self {
            RawExit::Code(_) => None,
            RawExit::Signal(s) => Some(s),
        }
    }
}

/// Reads the exit file's text: one decimal status and a newline.
///
/// `Ok(None)` when the text is not complete yet (no trailing newline: the
/// file is only ever moved into place whole, but a reader must not trust a
/// half-written one either way); `Err` when it is complete but not a status.
pub(crate) fn parse_exit_file(text: &str) -> Result<Option<RawExit>, String> {
    let Some(line) = text.strip_suffix('\n') else {
        return Ok(None);
    };
    let status: i32 = line
        .trim()
        .parse()
        .map_err(|_| format!("exit file holds {line:?}, not a status"))?;
    if !(0..=255).contains(&status) {
        return Err(format!("exit status {status} is out of range"));
    }
    Ok(Some(RawExit::from_status(status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_status_is_a_clean_exit_code() {
        assert_eq!(parse_exit_file("0\n"), Ok(Some(RawExit::Code(0))));
    }

    #[test]
    fn statuses_up_to_128_are_exit_codes() {
        assert_eq!(parse_exit_file("3\n"), Ok(Some(RawExit::Code(3))));
        assert_eq!(parse_exit_file("127\n"), Ok(Some(RawExit::Code(127))));
        assert_eq!(parse_exit_file("128\n"), Ok(Some(RawExit::Code(128))));
    }

    #[test]
    fn statuses_above_128_are_the_signal_that_killed_the_process() {
        let killed = parse_exit_file("137\n").unwrap().unwrap();
        assert_eq!((killed.code(), killed.signal()), (None, Some(9)));
        assert_eq!(parse_exit_file("143\n"), Ok(Some(RawExit::Signal(15))));
        assert_eq!(parse_exit_file("192\n"), Ok(Some(RawExit::Signal(64))));
        // Past the last signal it can only be a code.
        assert_eq!(parse_exit_file("200\n"), Ok(Some(RawExit::Code(200))));
    }

    #[test]
    fn a_file_without_its_newline_is_not_complete_yet() {
        assert_eq!(parse_exit_file(""), Ok(None));
        assert_eq!(parse_exit_file("13"), Ok(None));
    }

    #[test]
    fn garbage_and_out_of_range_statuses_are_errors() {
        assert!(parse_exit_file("done\n").is_err());
        assert!(parse_exit_file("-1\n").is_err());
        assert!(parse_exit_file("256\n").is_err());
    }
}
