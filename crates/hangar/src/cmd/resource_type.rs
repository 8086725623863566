//! `hangar resource-type <type> <check|in|out> [dir]` (hidden): the built-in
//! resource types, run by the scripts `install_builtin_types` writes into a
//! worker's resource types directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The resource type: docker-image, git, mock, registry-image or time.
    pub type_name: String,
    /// The protocol action: check, in or out.
    pub action: String,
    /// The destination (in) or source (out) directory.
    pub dir: Option<PathBuf>,
}

/// Runs the action with this process's stdin, stdout and stderr. The exit
/// code is the protocol's: 0, or 1 with `error: …` on stderr.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut rest = Vec::new();
    if let Some(dir) = args.dir {
        let dir = dir
            .into_os_string()
            .into_string()
            .map_err(|dir| anyhow::anyhow!("the directory {dir:?} is not valid UTF-8"))?;
        rest.push(dir);
    }
    let code = hangar_resources::run(
        &args.type_name,
        &args.action,
        &rest,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        std::io::stderr().lock(),
    );
    let code = u8::try_from(code).context("exit code out of range")?;
    Ok(ExitCode::from(code))
}
