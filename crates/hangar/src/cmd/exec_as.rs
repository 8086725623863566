//! `hangar exec-as UID GID -- PROGRAM [ARGS]...` (hidden): becomes the user
//! and runs the program in its place. A worker running as root uses it to
//! start a process task as an unprivileged user on a host without
//! util-linux `unshare` (the image has only busybox): std's `uid`/`gid`
//! drop every supplementary group before `setuid`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    pub uid: u32,
    pub gid: u32,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.uid == 0 || args.gid == 0 {
        anyhow::bail!("exec-as runs programs as an unprivileged user, not uid or gid 0");
    }
    let (program, rest) = args.command.split_first().expect("clap requires one");
    let err = std::process::Command::new(program)
        .args(rest)
        .uid(args.uid)
        .gid(args.gid)
        .exec();
    // The shell's codes: 127 not found, 126 found but not runnable.
    eprintln!("hangar exec-as: {}: {err}", program.to_string_lossy());
    Ok(ExitCode::from(
        if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}
