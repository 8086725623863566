//! The `git` type: versions are commits of one branch of a repository.
//!
//! source: `{"uri": …, "branch": …?}` (no branch: the remote's HEAD).
//! version: `{"ref": <commit sha>}`.
//!
//! Everything goes through the `git` program with arguments, never a shell;
//! requests are checked first so that nothing from them can be read as an
//! option, and the `ext::` transport (which runs commands) is turned off.

// A resource type runs as a process of its own (`hangar resource-type git`),
// not on an async thread: it runs git and waits for it.
#![allow(clippy::disallowed_methods)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::{metadata, parse_request, shorten, Call, CheckRequest, InRequest, NoParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    pub uri: String,
    #[serde(default)]
    pub branch: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Version {
    #[serde(rename = "ref")]
    pub reference: String,
}

impl Source {
    pub(crate) fn validate(&self) -> Result<(), String> {
        let uri = &self.uri;
        if uri.is_empty() {
            return Err("source.uri: must not be empty".into());
        }
        if uri.starts_with('-') {
            return Err(format!(
                "source.uri: {:?} must not start with '-'",
                shorten(uri)
            ));
        }
        if uri.chars().any(char::is_control) {
            return Err("source.uri: must not contain control characters".into());
        }
        if let Some(branch) = &self.branch {
            if let Err(why) = check_branch(branch) {
                return Err(format!(
                    "source.branch: {:?} is not a branch name ({why})",
                    shorten(branch)
                ));
            }
        }
        Ok(())
    }

    /// The uri with any password or token in it hidden, for messages.
    fn shown_uri(&self) -> String {
        redact_uri(&self.uri)
    }
}

impl Version {
    pub(crate) fn validate(&self) -> Result<(), String> {
        let r = &self.reference;
        if (4..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(())
        } else {
            Err(format!(
                "version.ref: {:?} is not a commit sha (4 to 64 hex digits)",
                shorten(r)
            ))
        }
    }
}

/// The rules of `git check-ref-format` that matter here, and no leading `-`.
fn check_branch(branch: &str) -> Result<(), &'static str> {
    if branch.is_empty() {
        return Err("empty");
    }
    if branch.starts_with('-') {
        return Err("starts with '-'");
    }
    if branch
        .chars()
        .any(|c| c.is_control() || c == ' ' || "~^:?*[\\".contains(c))
    {
        return Err("holds a space, a control character or one of ~^:?*[\\");
    }
    if branch.contains("..") || branch.contains("@{") || branch.contains("//") {
        return Err("holds '..', '@{' or '//'");
    }
    if branch.starts_with('/')
        || branch.ends_with('/')
        || branch.ends_with('.')
        || branch.ends_with(".lock")
        || branch.split('/').any(|part| part.starts_with('.'))
    {
        return Err(
            "a part starts with '.', or it starts or ends with '/', or ends with '.' or '.lock'",
        );
    }
    Ok(())
}

/// `scheme://user:secret@host/…` → `scheme://***@host/…`.
fn redact_uri(uri: &str) -> String {
    if let Some((scheme, rest)) = uri.split_once("://") {
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            return format!("{scheme}://***@{}", &rest[at + 1..]);
        }
    }
    shorten(uri)
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, String> {
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    request.source.validate()?;
    if let Some(version) = &request.version {
        version.validate()?;
    }
    let head = remote_head(&request.source, call.log)?;
    // Without a history to walk, the answer is the current commit: it is
    // the given version when nothing moved, and newer otherwise.
    Ok(json!([{ "ref": head }]))
}

/// The sha the branch (or HEAD) points at on the remote.
fn remote_head(source: &Source, log: &mut dyn std::io::Write) -> Result<String, String> {
    let wanted = match &source.branch {
        Some(branch) => format!("refs/heads/{branch}"),
        None => "HEAD".to_string(),
    };
    let out = git(
        &[
            OsStr::new("ls-remote"),
            OsStr::new("--"),
            OsStr::new(&source.uri),
            OsStr::new(&wanted),
        ],
        log,
    )?;
    let text = String::from_utf8_lossy(&out);
    // ls-remote matches patterns by their tail: keep the exact ref only.
    let sha = text.lines().find_map(|line| {
        let (sha, name) = line.split_once('\t')?;
        (name == wanted && sha.len() >= 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| sha.to_string())
    });
    sha.ok_or_else(|| match &source.branch {
        Some(branch) => format!("git: branch {branch:?} not found at {}", source.shown_uri()),
        None => format!("git: {} has no HEAD", source.shown_uri()),
    })
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, String> {
    let request: InRequest<Source, Version, NoParams> = parse_request(call.request)?;
    request.source.validate()?;
    request.version.validate()?;
    let dest = call.dir.expect("in has a directory");
    let log = call.log;

    git(
        &[
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--"),
            OsStr::new(&request.source.uri),
            dest.as_os_str(),
        ],
        log,
    )?;
    let wanted = &request.version.reference;
    let sha = in_repo(
        dest,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{wanted}^{{commit}}"),
        ],
        log,
    )
    .map_err(|_| {
        format!(
            "git: commit {wanted} not found in {}",
            request.source.shown_uri()
        )
    })?;
    let sha = String::from_utf8_lossy(&sha).trim().to_string();
    in_repo(
        dest,
        &[
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            &sha,
        ],
        log,
    )?;
    let info = in_repo(
        dest,
        &[
            "log",
            "-1",
            "--format=%H%x00%an <%ae>%x00%aI%x00%B",
            &sha,
            "--",
        ],
        log,
    )?;
    let info = String::from_utf8_lossy(&info);
    let mut fields = info.splitn(4, '\0');
    let mut next = || fields.next().unwrap_or_default().trim_end().to_string();
    let (commit, author, date, message) = (next(), next(), next(), next());
    Ok(json!({
        "version": { "ref": sha },
        "metadata": [
            metadata("commit", &commit),
            metadata("author", &author),
            metadata("author_date", &date),
            metadata("message", &message),
        ],
    }))
}

/// `out`'s params. Concourse's git resource takes more (`tag`, `force`,
/// `merge`, `notes`, …): each is refused by name as an unknown field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutParams {
    /// The repository to push, a directory of the put's inputs.
    pub repository: String,
    /// Refused when true: hangar does not rebase on a moved branch yet.
    #[serde(default)]
    pub rebase: bool,
}

/// `out <src>`: pushes the HEAD of `src/<params.repository>` to
/// `source.branch` of `source.uri`, a fast-forward only, and answers its
/// commit as the new version.
pub(crate) fn put(call: Call<'_>) -> Result<Value, String> {
    let request: crate::OutRequest<Source, OutParams> = parse_request(call.request)?;
    request.source.validate()?;
    let params = request
        .params
        .ok_or("params.repository: required (the input directory to push)")?;
    let Some(branch) = &request.source.branch else {
        return Err("source.branch: required to push".into());
    };
    if params.rebase {
        return Err(
            "params.rebase: not supported by hangar yet; push from a repository that is \
             up to date with the branch"
                .into(),
        );
    }
    let relative = Path::new(&params.repository);
    let safe = !params.repository.is_empty()
        && !params.repository.starts_with('-')
        && relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !safe {
        return Err(format!(
            "params.repository: {:?} must be a relative path below the put's inputs",
            shorten(&params.repository)
        ));
    }
    let src = call.dir.expect("out has a directory");
    let repo = src.join(relative);
    if !repo.is_dir() {
        return Err(format!(
            "params.repository: {:?} is not a directory of the put's inputs",
            shorten(&params.repository)
        ));
    }
    let log = call.log;
    // The repository was written by the build (a task, as its user): git
    // is never run inside it, where its config and hooks could make this
    // program run commands. Its objects are cloned over git's transport
    // (which reads only protected config) into a repository of our own, in
    // the action's own TMPDIR, and that one is pushed.
    static SCRATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch = std::env::temp_dir().join(format!("hangar-git-out-{}-{n}", std::process::id()));
    std::fs::create_dir(&scratch).map_err(|e| format!("git: make a scratch dir: {e}"))?;
    let pushed = push_from_copy(
        &repo,
        &scratch,
        &params.repository,
        branch,
        &request.source,
        log,
    );
    let _ = std::fs::remove_dir_all(&scratch);
    let sha = pushed?;
    Ok(json!({
        "version": { "ref": sha },
        "metadata": [metadata("commit", &sha)],
    }))
}

/// Clones `repo`'s objects into `scratch` and pushes its HEAD to the
/// branch; answers the commit pushed.
fn push_from_copy(
    repo: &Path,
    scratch: &Path,
    name: &str,
    branch: &str,
    source: &Source,
    log: &mut dyn std::io::Write,
) -> Result<String, String> {
    let ours = scratch.join("push.git");
    // Owned by the task user, not by us: trusted for this one read, as a
    // worktree and as its `.git`. Through a global config file of this
    // action's own: git does not pass `-c` on to the upload-pack it runs
    // in a local repository.
    let config = scratch.join("gitconfig");
    let escape = |p: &Path| {
        p.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
    };
    std::fs::write(
        &config,
        format!(
            "[safe]\n\tdirectory = \"{}\"\n\tdirectory = \"{}\"\n[init]\n\tdefaultBranch = main\n",
            escape(repo),
            escape(&repo.join(".git"))
        ),
    )
    .map_err(|e| format!("git: write a config: {e}"))?;
    git_with(
        &[
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--bare"),
            OsStr::new("--no-local"),
            OsStr::new("--"),
            repo.as_os_str(),
            ours.as_os_str(),
        ],
        Some(&config),
        log,
    )
    .map_err(|e| format!("{e} (reading the repository {})", shorten(name)))?;
    let head = in_repo(
        &ours,
        &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        log,
    )
    .map_err(|_| format!("git: {} has no commit to push", shorten(name)))?;
    let sha = String::from_utf8_lossy(&head).trim().to_string();
    let refspec = format!("{sha}:refs/heads/{branch}");
    in_repo(
        &ours,
        &[
            "push",
            "--quiet",
            "--no-verify",
            "--",
            &source.uri,
            &refspec,
        ],
        log,
    )
    .map_err(|e| {
        format!(
            "{e} (pushing to branch {branch:?} of {}: hangar pushes fast-forwards only)",
            source.shown_uri()
        )
    })?;
    Ok(sha)
}

/// Runs `git -C <repo> <args>`.
fn in_repo(repo: &Path, args: &[&str], log: &mut dyn std::io::Write) -> Result<Vec<u8>, String> {
    let mut all: Vec<&OsStr> = vec![OsStr::new("-C"), repo.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    git(&all, log)
}

/// Runs git with `args` and returns its stdout. Its stderr is passed on to
/// the log as it is (it is the resource's log); a failure names the git
/// subcommand and repeats git's last line.
fn git(args: &[&OsStr], log: &mut dyn std::io::Write) -> Result<Vec<u8>, String> {
    git_with(args, None, log)
}

/// [`git`], with `global_config` as git's global config file when given.
fn git_with(
    args: &[&OsStr],
    global_config: Option<&Path>,
    log: &mut dyn std::io::Write,
) -> Result<Vec<u8>, String> {
    let mut command = Command::new("git");
    if let Some(config) = global_config {
        command.env("GIT_CONFIG_GLOBAL", config);
    }
    let output = command
        .args(["-c", "protocol.ext.allow=never"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("git: cannot run git: {e}"))?;
    let _ = log.write_all(&output.stderr);
    if output.status.success() {
        return Ok(output.stdout);
    }
    let subcommand = subcommand(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // git's own verdict is its first `fatal:` or `error:` line; hints and
    // advice follow it.
    let verdict = stderr
        .lines()
        .find(|l| l.starts_with("fatal: ") || l.starts_with("error: "))
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
        .trim();
    Err(format!(
        "git {subcommand} failed ({}){}{}",
        output.status,
        if verdict.is_empty() { "" } else { ": " },
        shorten(verdict)
    ))
}

/// The git subcommand in `args`: the first word that is neither an option
/// nor the value of `-C` or `-c`.
fn subcommand(args: &[&OsStr]) -> String {
    let mut words = args.iter().map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        if word == "-C" || word == "-c" {
            words.next();
        } else if !word.starts_with('-') {
            return word.into_owned();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_subcommand() {
        fn os<'a>(words: &[&'a str]) -> Vec<&'a OsStr> {
            words.iter().map(|w| OsStr::new(*w)).collect()
        }
        let cases: &[(&[&str], &str)] = &[
            (&["ls-remote", "--", "/r", "HEAD"], "ls-remote"),
            (&["-C", "dest", "rev-parse", "x"], "rev-parse"),
            (
                &["-C", "d", "-c", "a=b", "checkout", "--detach"],
                "checkout",
            ),
            (&["--version"], ""),
        ];
        for (args, expected) in cases {
            assert_eq!(subcommand(&os(args)), *expected, "{args:?}");
        }
    }

    #[test]
    fn branch_names_follow_git_rules() {
        for ok in ["main", "release/1.2", "feature-x", "v1.0"] {
            assert!(check_branch(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "-x", "a b", "a..b", "a@{1}", "a//b", "/a", "a/", "a.", "a.lock", ".hidden",
            "a/.b", "a:b", "a\nb", "a~1", "a^", "a*",
        ] {
            assert!(check_branch(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uris_lose_their_secrets_in_messages() {
        let cases = [
            (
                "https://user:token@example.com/r.git",
                "https://***@example.com/r.git",
            ),
            ("https://example.com/a@b.git", "https://example.com/a@b.git"),
            ("ssh://git@example.com/r", "ssh://***@example.com/r"),
            ("/srv/repo", "/srv/repo"),
            ("git@example.com:r.git", "git@example.com:r.git"),
        ];
        for (uri, shown) in cases {
            assert_eq!(redact_uri(uri), shown);
        }
    }
}
