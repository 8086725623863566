//! The `git` type: versions are commits of one branch of a repository
//! (or, with `tag_filter`, its tags), with the source fields and params of
//! Concourse's git-resource that hangar implements (docs/builtin-resource-types.md, "The `git`
//! resource type"); the others are refused by name.
//!
//! source: `{"uri": …, "branch": …?, "private_key": …?, "paths": […]?, …}`
//! (no branch: the remote's HEAD).
//! version: `{"ref": <commit sha or tag>}`.
//!
//! Everything goes through the `git` program with arguments, never a shell;
//! requests are checked first so that nothing from them can be read as an
//! option, and the `ext::` transport (which runs commands) is turned off.

// A resource type runs as a process of its own (`hangar resource-type git`),
// not on an async thread: it runs git and waits for it.
#![allow(clippy::disallowed_methods)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::{metadata, parse_request, shorten, Call, CheckRequest, InRequest};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    pub uri: String,
    #[serde(default)]
    pub branch: Option<String>,
    /// An ssh private key (PEM or OpenSSH), written to a 0600 file of the
    /// action's own for the one action and removed after.
    #[serde(default)]
    pub private_key: Option<String>,
    /// The user ssh logs in as when the uri names none.
    #[serde(default)]
    pub private_key_user: Option<String>,
    /// https credentials, put into the uri git is given (never logged).
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// Only commits touching these paths (git pathspecs) are versions.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Commits touching only these paths are not versions.
    #[serde(default)]
    pub ignore_paths: Vec<String>,
    /// A glob of tags: versions are the tags matching it.
    #[serde(default)]
    pub tag_filter: Option<String>,
    /// `[ci skip]` / `[skip ci]` in a message no longer skips the commit.
    #[serde(default)]
    pub disable_ci_skip: bool,
    #[serde(default)]
    pub commit_filter: Option<CommitFilter>,
    #[serde(default)]
    pub skip_ssl_verification: bool,
    #[serde(default)]
    pub git_config: Vec<GitConfig>,
    /// Fetch every tag in `in` (as the param of the same name).
    #[serde(default)]
    pub fetch_tags: bool,
    // Fields of Concourse's git-resource hangar does not implement: read
    // so that each is refused by name, saying what to do instead.
    #[serde(default)]
    pub private_key_passphrase: Option<Value>,
    #[serde(default)]
    pub tag_regex: Option<Value>,
    #[serde(default)]
    pub tag_behaviour: Option<Value>,
    #[serde(default)]
    pub submodule_credentials: Option<Value>,
    #[serde(default)]
    pub gpg_keyserver: Option<Value>,
    #[serde(default)]
    pub git_crypt_key: Option<Value>,
    #[serde(default)]
    pub https_tunnel: Option<Value>,
    #[serde(default)]
    pub commit_verification_keys: Option<Value>,
    #[serde(default)]
    pub commit_verification_key_ids: Option<Value>,
    #[serde(default)]
    pub version_depth: Option<Value>,
    #[serde(default)]
    pub search_remote_refs: Option<Value>,
    #[serde(default)]
    pub sparse_paths: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommitFilter {
    /// A version's message must hold one of these (git's `--grep`).
    #[serde(default)]
    pub include: Vec<String>,
    /// A version's message must hold none of these.
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub include_all_match: bool,
    #[serde(default)]
    pub exclude_all_match: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GitConfig {
    pub name: String,
    pub value: String,
}

/// What to say of a git-resource field hangar does not implement.
const NOT_BUILT_IN: &str = "not supported by hangar's built-in git; install Concourse's \
     git-resource through the base resource type layout (docs/resource-types.md)";

/// git config names `git_config` may set: none of them runs a program.
const SAFE_CONFIG: &[&str] = &[
    "http.",
    "user.",
    "pack.",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.longpaths",
    "core.bigfilethreshold",
    "core.compression",
    "fetch.",
    "submodule.fetchjobs",
    "transfer.",
];

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
        let helper = uri
            .find("::")
            .is_some_and(|i| !uri[..i].contains(':') && !uri[..i].contains('/'));
        if helper {
            return Err(format!(
                "source.uri: {:?}: the transport `<name>::` runs a program and is refused",
                shorten(uri)
            ));
        }
        if let Some(branch) = &self.branch {
            if let Err(why) = check_branch(branch) {
                return Err(format!(
                    "source.branch: {:?} is not a branch name ({why})",
                    shorten(branch)
                ));
            }
        }
        let unsupported = [
            (
                "private_key_passphrase",
                self.private_key_passphrase.is_some(),
            ),
            ("tag_regex", self.tag_regex.is_some()),
            ("tag_behaviour", self.tag_behaviour.is_some()),
            (
                "submodule_credentials",
                self.submodule_credentials.is_some(),
            ),
            ("gpg_keyserver", self.gpg_keyserver.is_some()),
            ("git_crypt_key", self.git_crypt_key.is_some()),
            ("https_tunnel", self.https_tunnel.is_some()),
            (
                "commit_verification_keys",
                self.commit_verification_keys.is_some(),
            ),
            (
                "commit_verification_key_ids",
                self.commit_verification_key_ids.is_some(),
            ),
            ("version_depth", self.version_depth.is_some()),
            ("search_remote_refs", self.search_remote_refs.is_some()),
            ("sparse_paths", self.sparse_paths.is_some()),
        ];
        if let Some((name, _)) = unsupported.iter().find(|(_, given)| *given) {
            return Err(format!("source.{name}: {NOT_BUILT_IN}"));
        }
        if let Some(key) = &self.private_key {
            let trimmed = key.trim();
            if !(trimmed.starts_with("-----BEGIN ") && trimmed.contains("PRIVATE KEY-----"))
                || trimmed.len() > 64 * 1024
            {
                return Err(
                    "source.private_key: not a private key (expected PEM or OpenSSH text, \
                     -----BEGIN … PRIVATE KEY-----)"
                        .into(),
                );
            }
            if !uri_is_ssh(uri) {
                return Err(format!(
                    "source.private_key: given, but {} is not an ssh uri \
                     (ssh://… or user@host:path)",
                    self.shown_uri()
                ));
            }
        }
        if let Some(user) = &self.private_key_user {
            if self.private_key.is_none() {
                return Err("source.private_key_user: needs source.private_key".into());
            }
            if user.is_empty()
                || user.starts_with('-')
                || !user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(format!(
                    "source.private_key_user: {:?} is not a user name",
                    shorten(user)
                ));
            }
        }
        match (&self.username, &self.password) {
            (None, None) => {}
            (Some(_), Some(_)) => {
                if !uri.starts_with("https://") && !uri.starts_with("http://") {
                    return Err(format!(
                        "source.username: given, but {} is not an http(s) uri",
                        self.shown_uri()
                    ));
                }
            }
            _ => return Err("source.username and source.password: give both or neither".into()),
        }
        for (field, list) in [("paths", &self.paths), ("ignore_paths", &self.ignore_paths)] {
            for path in list.iter() {
                check_pathspec(path)
                    .map_err(|why| format!("source.{field}: {:?} {why}", shorten(path)))?;
            }
        }
        if let Some(filter) = &self.tag_filter {
            if filter.is_empty() || filter.starts_with('-') || filter.chars().any(char::is_control)
            {
                return Err(format!(
                    "source.tag_filter: {:?} is not a tag glob",
                    shorten(filter)
                ));
            }
        }
        if let Some(filter) = &self.commit_filter {
            for pattern in filter.include.iter().chain(&filter.exclude) {
                if pattern.is_empty() || pattern.chars().any(char::is_control) {
                    return Err(format!(
                        "source.commit_filter: {:?} is not a message pattern",
                        shorten(pattern)
                    ));
                }
            }
        }
        for config in &self.git_config {
            let name = config.name.to_ascii_lowercase();
            let well_formed = !name.is_empty()
                && name.contains('.')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/:".contains(c));
            if !well_formed {
                return Err(format!(
                    "source.git_config: {:?} is not a config name",
                    shorten(&config.name)
                ));
            }
            let last = name.rsplit('.').next().unwrap_or("");
            if !SAFE_CONFIG
                .iter()
                .any(|safe| name.starts_with(safe) || name == *safe)
                || last.ends_with("command")
                || last.ends_with("helper")
                || last.ends_with("program")
            {
                return Err(format!(
                    "source.git_config: {:?} is refused: hangar's built-in git takes only \
                     config that cannot make git run a program (http.*, user.*, pack.*, \
                     fetch.*, transfer.*, core.autocrlf, …)",
                    shorten(&config.name)
                ));
            }
            if config.value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(format!(
                    "source.git_config: {:?}: the value holds a control character",
                    shorten(&config.name)
                ));
            }
        }
        Ok(())
    }

    /// The uri with any password or token in it hidden, for messages.
    fn shown_uri(&self) -> String {
        redact_uri(&self.uri)
    }

    fn tag_mode(&self) -> bool {
        self.tag_filter.is_some()
    }

    /// The uri git is given: with `username` and `password` in it.
    fn git_uri(&self) -> String {
        match (&self.username, &self.password) {
            (Some(user), Some(password)) => {
                let (scheme, rest) = self.uri.split_once("://").unwrap_or(("https", &self.uri));
                format!(
                    "{scheme}://{}:{}@{rest}",
                    percent_encode(user),
                    percent_encode(password)
                )
            }
            _ => self.uri.clone(),
        }
    }
}

fn uri_is_ssh(uri: &str) -> bool {
    if let Some((scheme, _)) = uri.split_once("://") {
        return scheme == "ssh" || scheme == "git+ssh" || scheme == "ssh+git";
    }
    // scp-like: host:path, where no '/' comes before the ':'.
    match uri.find(':') {
        Some(colon) => !uri[..colon].contains('/'),
        None => false,
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A path of `paths` or `ignore_paths`: relative, below the repository,
/// a plain pathspec (git's magic `:(…)` is refused).
fn check_pathspec(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.starts_with('-') || path.starts_with(':') {
        return Err("must not start with '-' or ':'");
    }
    if path.starts_with('/') {
        return Err("must be relative to the repository");
    }
    if path.split('/').any(|part| part == "..") {
        return Err("must not hold '..'");
    }
    if path.chars().any(char::is_control) {
        return Err("must not hold control characters");
    }
    Ok(())
}

impl Version {
    /// A commit sha, or in tag mode a tag name.
    pub(crate) fn validate(&self, tag_mode: bool) -> Result<(), String> {
        let r = &self.reference;
        if (4..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(());
        }
        if tag_mode && check_branch(r).is_ok() {
            return Ok(());
        }
        Err(if tag_mode {
            format!(
                "version.ref: {:?} is neither a commit sha nor a tag name",
                shorten(r)
            )
        } else {
            format!(
                "version.ref: {:?} is not a commit sha (4 to 64 hex digits)",
                shorten(r)
            )
        })
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

/// What every git run for one action shares: a scratch directory of the
/// action's own (0700, in its TMPDIR, never a place a task sees) holding
/// the private key, and the environment and config that follow from the
/// source. The directory is removed when this is dropped.
struct Session {
    scratch: PathBuf,
    env: Vec<(String, String)>,
    config: Vec<String>,
    /// The source repository when `uri` is a local path: trusted for git's
    /// ownership check (in the sandbox it is owned by a user the action's
    /// namespace does not map), as itself and as its `.git`.
    trusted: Vec<PathBuf>,
}

/// The directory of a local-path `uri` (`/srv/repo`, `file:///srv/repo`).
fn local_repository(uri: &str) -> Option<PathBuf> {
    let path = uri.strip_prefix("file://").unwrap_or(uri);
    path.starts_with('/').then(|| PathBuf::from(path))
}

/// A git config file's `[safe]` section trusting `dirs`.
fn safe_directories(dirs: &[PathBuf]) -> String {
    let mut text = String::from("[safe]\n");
    for d in dirs {
        let shown = d
            .display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        text.push_str(&format!("\tdirectory = \"{shown}\"\n"));
    }
    text
}

impl Session {
    fn new(source: &Source) -> Result<Session, String> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        static SCRATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = std::env::temp_dir().join(format!("hangar-git-{}-{n}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| format!("git: make a scratch dir: {e}"))?;
        let mut session = Session {
            scratch,
            env: Vec::new(),
            config: vec!["protocol.ext.allow=never".into()],
            trusted: Vec::new(),
        };
        // Through a global config file of the action's own: git passes no
        // `-c` on to the upload-pack it runs in a local repository.
        if let Some(repo) = local_repository(&source.uri) {
            session.trusted = vec![repo.join(".git"), repo];
            let config = session.scratch.join("source-gitconfig");
            std::fs::write(&config, safe_directories(&session.trusted))
                .map_err(|e| format!("git: write a config: {e}"))?;
            session
                .env
                .push(("GIT_CONFIG_GLOBAL".into(), config.display().to_string()));
        }
        if let Some(key) = &source.private_key {
            let path = session.scratch.join("private_key");
            let mut text = key.trim().to_string();
            text.push('\n');
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("git: write the private key: {e}"))?;
            std::io::Write::write_all(&mut file, text.as_bytes())
                .map_err(|e| format!("git: write the private key: {e}"))?;
            let quoted = format!("'{}'", path.display().to_string().replace('\'', "'\\''"));
            let mut command = format!(
                "ssh -o IdentitiesOnly=yes -o StrictHostKeyChecking=no \
                 -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -i {quoted}"
            );
            if let Some(user) = &source.private_key_user {
                command.push_str(&format!(" -l {user}"));
            }
            session.env.push(("GIT_SSH_COMMAND".into(), command));
        }
        if source.skip_ssl_verification {
            session.config.push("http.sslVerify=false".into());
        }
        for config in &source.git_config {
            session
                .config
                .push(format!("{}={}", config.name, config.value));
        }
        Ok(session)
    }

    /// Runs git with `args` and returns its stdout. Its stderr is passed
    /// on to the log as it is (it is the resource's log); a failure names
    /// the git subcommand and repeats git's last line.
    fn git(&self, args: &[&OsStr], log: &mut dyn std::io::Write) -> Result<Vec<u8>, String> {
        self.git_with(args, None, log)
    }

    /// Runs `git -C <repo> <args>`.
    fn in_repo(
        &self,
        repo: &Path,
        args: &[&str],
        log: &mut dyn std::io::Write,
    ) -> Result<Vec<u8>, String> {
        let mut all: Vec<&OsStr> = vec![OsStr::new("-C"), repo.as_os_str()];
        all.extend(args.iter().map(OsStr::new));
        self.git(&all, log)
    }

    fn git_with(
        &self,
        args: &[&OsStr],
        global_config: Option<&Path>,
        log: &mut dyn std::io::Write,
    ) -> Result<Vec<u8>, String> {
        let mut command = Command::new("git");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        // After the session's: a call's own config file (which trusts the
        // session's repository too) wins.
        if let Some(config) = global_config {
            command.env("GIT_CONFIG_GLOBAL", config);
        }
        for config in &self.config {
            command.args(["-c", config]);
        }
        let output = command
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "true")
            .env("SSH_ASKPASS", "true")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("git: cannot run git: {e}"))?;
        // git hides a uri's password in its messages itself; hidden here
        // again, whatever the git version.
        let shown: Vec<String> = String::from_utf8_lossy(&output.stderr)
            .split_inclusive('\n')
            .map(redact_secrets)
            .collect();
        let _ = log.write_all(shown.concat().as_bytes());
        if output.status.success() {
            return Ok(output.stdout);
        }
        let subcommand = subcommand(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        // git's own verdict is its first `fatal:` or `error:` line; hints
        // and advice follow it.
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
            redact_secrets(&shorten(verdict))
        ))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A `user:secret@` in any url of a message hidden.
fn redact_secrets(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let redacted = redact_uri(word);
            if word.contains("://") && redacted.contains("://***@") {
                redacted
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The ref the branch (or the remote's HEAD) is fetched into.
const HEAD_REF: &str = "refs/hangar/head";

/// Fetches the branch (or HEAD) of the source into a bare repository in
/// the session's scratch dir, and its tags when `tags`.
fn fetch_bare(
    session: &Session,
    source: &Source,
    tags: bool,
    log: &mut dyn std::io::Write,
) -> Result<PathBuf, String> {
    let bare = session.scratch.join("check.git");
    session.git(
        &[
            OsStr::new("init"),
            OsStr::new("--quiet"),
            OsStr::new("--bare"),
            bare.as_os_str(),
        ],
        log,
    )?;
    let wanted = match &source.branch {
        Some(branch) => format!("+refs/heads/{branch}:{HEAD_REF}"),
        None => format!("+HEAD:{HEAD_REF}"),
    };
    let uri = source.git_uri();
    let mut args = vec!["fetch", "--quiet", "--no-tags", "--", &uri, &wanted];
    if tags {
        args.push("+refs/tags/*:refs/tags/*");
    }
    session.in_repo(&bare, &args, log).map_err(|e| {
        if e.contains("couldn't find remote ref") {
            match &source.branch {
                Some(branch) => {
                    format!("git: branch {branch:?} not found at {}", source.shown_uri())
                }
                None => format!("git: {} has no HEAD", source.shown_uri()),
            }
        } else {
            e
        }
    })?;
    Ok(bare)
}

/// Whether a commit's message makes it a version under the source's
/// `[ci skip]` and `commit_filter` rules.
fn message_passes(source: &Source, message: &str) -> bool {
    if !source.disable_ci_skip && (message.contains("[ci skip]") || message.contains("[skip ci]")) {
        return false;
    }
    if let Some(filter) = &source.commit_filter {
        if !filter.include.is_empty() {
            let mut hits = filter.include.iter().map(|p| message.contains(p.as_str()));
            let ok = if filter.include_all_match {
                hits.all(|h| h)
            } else {
                hits.any(|h| h)
            };
            if !ok {
                return false;
            }
        }
        if !filter.exclude.is_empty() {
            let mut hits = filter.exclude.iter().map(|p| message.contains(p.as_str()));
            let excluded = if filter.exclude_all_match {
                hits.all(|h| h)
            } else {
                hits.any(|h| h)
            };
            if excluded {
                return false;
            }
        }
    }
    true
}

/// The most commits `check` walks in one answer.
const MAX_WALK: usize = 10_000;

pub(crate) fn check(call: Call<'_>) -> Result<Value, String> {
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    if let Some(version) = &request.version {
        version.validate(source.tag_mode())?;
    }
    let log = call.log;
    let session = Session::new(source)?;
    if source.tag_mode() {
        return check_tags(&session, source, request.version.as_ref(), log);
    }
    let bare = fetch_bare(&session, source, false, log)?;

    // The commits of the branch, first parents only, newest first, with
    // their messages; those touching `paths` (less `ignore_paths`).
    let walk =
        |range: &str, log: &mut dyn std::io::Write| -> Result<Vec<(String, String)>, String> {
            let max = format!("--max-count={MAX_WALK}");
            let mut args: Vec<String> = vec![
                "log".into(),
                "--first-parent".into(),
                "--format=%H%x00%B%x1e".into(),
                max,
                range.into(),
                "--".into(),
            ];
            if !source.paths.is_empty() || !source.ignore_paths.is_empty() {
                if source.paths.is_empty() {
                    args.push(".".into());
                }
                args.extend(source.paths.iter().cloned());
                args.extend(source.ignore_paths.iter().map(|p| format!(":(exclude){p}")));
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = session.in_repo(&bare, &refs, log)?;
            let text = String::from_utf8_lossy(&out);
            Ok(text
                .split('\u{1e}')
                .filter_map(|record| {
                    let (sha, message) = record.trim_start_matches('\n').split_once('\0')?;
                    Some((sha.to_string(), message.to_string()))
                })
                .filter(|(_, message)| message_passes(source, message))
                .collect())
        };

    let given = request.version.as_ref().and_then(|v| {
        session
            .in_repo(
                &bare,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &format!("{}^{{commit}}", v.reference),
                ],
                log,
            )
            .ok()
            .map(|out| String::from_utf8_lossy(&out).trim().to_string())
    });
    let on_branch = given.as_ref().is_some_and(|sha| {
        session
            .in_repo(
                &bare,
                &["merge-base", "--is-ancestor", sha, HEAD_REF],
                &mut std::io::sink(),
            )
            .is_ok()
    });
    let versions: Vec<String> = match given {
        Some(sha) if on_branch => {
            let mut newer: Vec<String> = walk(&format!("{sha}..{HEAD_REF}"), log)?
                .into_iter()
                .map(|(sha, _)| sha)
                .collect();
            newer.reverse();
            let mut all = vec![sha];
            all.extend(newer);
            all
        }
        // No version, or one the branch no longer holds (a force push):
        // the newest commit that is a version.
        _ => walk(HEAD_REF, log)?
            .into_iter()
            .take(1)
            .map(|(sha, _)| sha)
            .collect(),
    };
    Ok(Value::Array(
        versions
            .into_iter()
            .map(|sha| json!({ "ref": sha }))
            .collect(),
    ))
}

/// `check` with `tag_filter`: the tags matching it (on the branch when one
/// is given), oldest first by their commit's date, from the given one on.
fn check_tags(
    session: &Session,
    source: &Source,
    version: Option<&Version>,
    log: &mut dyn std::io::Write,
) -> Result<Value, String> {
    let bare = fetch_bare(session, source, true, log)?;
    let filter = source.tag_filter.as_deref().unwrap_or("*");
    let mut args = vec![
        "tag",
        "--list",
        "--sort=creatordate",
        "--format=%(refname:strip=2)",
    ];
    if source.branch.is_some() {
        args.extend(["--merged", HEAD_REF]);
    }
    args.extend(["--", filter]);
    let out = session.in_repo(&bare, &args, log)?;
    let tags: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let from = version
        .and_then(|v| tags.iter().position(|t| *t == v.reference))
        .unwrap_or(tags.len().saturating_sub(1));
    Ok(Value::Array(
        tags.into_iter()
            .skip(from)
            .map(|tag| json!({ "ref": tag }))
            .collect(),
    ))
}

/// `in`'s params, git-resource's names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InParams {
    /// A shallow clone of this many commits (0: all).
    #[serde(default)]
    pub depth: u32,
    #[serde(default)]
    pub fetch_tags: Option<bool>,
    /// `all` (the default), `none`, or a list of submodule paths.
    #[serde(default)]
    pub submodules: Option<Value>,
    #[serde(default)]
    pub submodule_recursive: Option<bool>,
    #[serde(default)]
    pub submodule_remote: Option<Value>,
    #[serde(default)]
    pub disable_git_lfs: Option<bool>,
    #[serde(default)]
    pub clean_tags: bool,
    #[serde(default)]
    pub short_ref_format: Option<String>,
    #[serde(default)]
    pub timestamp_format: Option<String>,
    #[serde(default)]
    pub describe_ref_options: Option<String>,
    #[serde(default)]
    pub gpg_keyserver: Option<Value>,
    #[serde(default)]
    pub git_crypt_key: Option<Value>,
}

/// The options `describe_ref_options` may give `git describe`.
const DESCRIBE_OPTIONS: &[&str] = &[
    "--always",
    "--dirty",
    "--broken",
    "--tags",
    "--all",
    "--long",
    "--first-parent",
    "--exact-match",
    "--abbrev=",
    "--match=",
    "--exclude=",
    "--candidates=",
];

/// The submodules `in` checks out.
enum Submodules {
    None,
    All,
    Paths(Vec<String>),
}

impl InParams {
    fn validate(&self) -> Result<Submodules, String> {
        if self.gpg_keyserver.is_some() {
            return Err(format!("params.gpg_keyserver: {NOT_BUILT_IN}"));
        }
        if self.git_crypt_key.is_some() {
            return Err(format!("params.git_crypt_key: {NOT_BUILT_IN}"));
        }
        if self.submodule_remote.is_some() {
            return Err(format!("params.submodule_remote: {NOT_BUILT_IN}"));
        }
        if self.disable_git_lfs == Some(false) {
            return Err(format!(
                "params.disable_git_lfs: false asks for Git LFS files, which hangar's built-in \
                 git never fetches (leave it out or give true); {NOT_BUILT_IN}"
            ));
        }
        if let Some(format) = &self.short_ref_format {
            if format.chars().any(char::is_control) || format.len() > 256 {
                return Err(
                    "params.short_ref_format: holds a control character or is too long".into(),
                );
            }
        }
        if let Some(format) = &self.timestamp_format {
            let ok = !format.is_empty()
                && !format.starts_with('-')
                && !format.chars().any(char::is_control)
                && format.len() <= 256;
            if !ok {
                return Err(format!(
                    "params.timestamp_format: {:?} is not a git date format",
                    shorten(format)
                ));
            }
        }
        if let Some(options) = &self.describe_ref_options {
            for option in options.split_whitespace() {
                let known = DESCRIBE_OPTIONS.iter().any(|known| {
                    option == *known || known.ends_with('=') && option.starts_with(known)
                });
                if !known {
                    return Err(format!(
                        "params.describe_ref_options: {:?} is not an option hangar passes to \
                         git describe (one of {})",
                        shorten(option),
                        DESCRIBE_OPTIONS.join(", ")
                    ));
                }
            }
        }
        match &self.submodules {
            None => Ok(Submodules::All),
            Some(Value::String(s)) if s == "all" => Ok(Submodules::All),
            Some(Value::String(s)) if s == "none" => Ok(Submodules::None),
            Some(Value::Array(items)) => {
                let mut paths = Vec::new();
                for item in items {
                    let Some(path) = item.as_str() else {
                        return Err("params.submodules: a list of paths (strings)".into());
                    };
                    check_pathspec(path)
                        .map_err(|why| format!("params.submodules: {:?} {why}", shorten(path)))?;
                    paths.push(path.to_string());
                }
                Ok(Submodules::Paths(paths))
            }
            Some(_) => Err("params.submodules: `all`, `none` or a list of paths".into()),
        }
    }
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, String> {
    let request: InRequest<Source, Version, InParams> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    request.version.validate(source.tag_mode())?;
    let params = request.params.unwrap_or_default();
    let submodules = params.validate()?;
    let dest = call.dir.expect("in has a directory");
    let log = call.log;
    let session = Session::new(source)?;
    let uri = source.git_uri();

    let depth = params.depth.to_string();
    let mut clone: Vec<&OsStr> = vec![OsStr::new("clone"), OsStr::new("--quiet")];
    if local_repository(&source.uri).is_some() {
        // Git's own transport, never hard links into or a copy of another
        // user's object store.
        clone.push(OsStr::new("--no-local"));
    }
    if params.depth > 0 {
        clone.extend([OsStr::new("--depth"), OsStr::new(&depth)]);
    }
    if let Some(branch) = &source.branch {
        clone.extend([OsStr::new("--branch"), OsStr::new(branch)]);
    }
    let fetch_tags = params.fetch_tags.unwrap_or(source.fetch_tags);
    if !fetch_tags {
        clone.push(OsStr::new("--no-tags"));
    }
    clone.extend([OsStr::new("--"), OsStr::new(&uri), dest.as_os_str()]);
    session.git(&clone, log)?;
    if source.tag_mode() {
        let tag = format!("+refs/tags/{0}:refs/tags/{0}", request.version.reference);
        let mut args = vec!["fetch", "--quiet", "--no-tags"];
        if params.depth > 0 {
            args.extend(["--depth", &depth]);
        }
        args.extend(["--", &uri, &tag]);
        let _ = session.in_repo(dest, &args, log);
    }
    if fetch_tags {
        session.in_repo(dest, &["fetch", "--quiet", "--tags", "--", &uri], log)?;
    }
    let wanted = &request.version.reference;
    let resolve = |log: &mut dyn std::io::Write| {
        session.in_repo(
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
    };
    let sha = match resolve(log) {
        Ok(sha) => sha,
        // Older than the shallow clone reaches: deepen it all.
        Err(_) if params.depth > 0 => {
            session.in_repo(dest, &["fetch", "--quiet", "--unshallow"], log)?;
            resolve(log).map_err(|_| not_found(wanted, source))?
        }
        Err(_) => return Err(not_found(wanted, source)),
    };
    let sha = String::from_utf8_lossy(&sha).trim().to_string();
    session.in_repo(
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
    if !matches!(submodules, Submodules::None) {
        // A submodule's url comes from the repository: the file transport
        // is allowed for it only when the repository itself is local.
        let local = !source.uri.contains("://") && !uri_is_ssh(&source.uri);
        let mut args: Vec<&str> = Vec::new();
        if local {
            args.extend(["-c", "protocol.file.allow=always"]);
        }
        args.extend(["submodule", "--quiet", "update", "--init"]);
        if params.submodule_recursive.unwrap_or(true) {
            args.push("--recursive");
        }
        if params.depth > 0 {
            args.extend(["--depth", &depth]);
        }
        args.push("--");
        if let Submodules::Paths(paths) = &submodules {
            args.extend(paths.iter().map(String::as_str));
        }
        session.in_repo(dest, &args, log)?;
    }
    if params.clean_tags {
        let tags = session.in_repo(dest, &["tag", "--list"], log)?;
        let tags = String::from_utf8_lossy(&tags).to_string();
        let names: Vec<&str> = tags.lines().filter(|l| !l.is_empty()).collect();
        if !names.is_empty() {
            let mut args = vec!["tag", "--delete"];
            args.extend(names);
            session.in_repo(dest, &args, &mut std::io::sink())?;
        }
    }

    let date_format = format!(
        "--date={}",
        params.timestamp_format.as_deref().unwrap_or("iso8601")
    );
    let info = session.in_repo(
        dest,
        &[
            "log",
            "-1",
            &date_format,
            "--format=%H%x00%an <%ae>%x00%aI%x00%ce%x00%cn%x00%cI%x00%cd%x00%B",
            &sha,
            "--",
        ],
        log,
    )?;
    let info = String::from_utf8_lossy(&info);
    let mut fields = info.splitn(8, '\0');
    let mut next = || fields.next().unwrap_or_default().trim_end().to_string();
    let (commit, author, author_date) = (next(), next(), next());
    let (committer, committer_name, committer_date, timestamp, message) =
        (next(), next(), next(), next(), next());
    let tags = session.in_repo(dest, &["tag", "--points-at", &sha], log)?;
    let tags: Vec<String> = String::from_utf8_lossy(&tags)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let describe_options = params
        .describe_ref_options
        .as_deref()
        .unwrap_or("--always --dirty --broken");
    let mut describe = vec!["describe"];
    describe.extend(describe_options.split_whitespace());
    let describe_ref = session
        .in_repo(dest, &describe, &mut std::io::sink())
        .map(|out| String::from_utf8_lossy(&out).trim().to_string())
        .unwrap_or_else(|_| sha[..7.min(sha.len())].to_string());
    let short = sha[..7.min(sha.len())].to_string();
    let short_ref = params
        .short_ref_format
        .as_deref()
        .unwrap_or("%s")
        .replace("%s", &short);
    let branch = source.branch.clone().unwrap_or_default();
    let reference = if source.tag_mode() {
        request.version.reference.clone()
    } else {
        sha.clone()
    };
    let files: [(&str, &str); 9] = [
        ("ref", &reference),
        ("short_ref", &short_ref),
        ("commit_message", &message),
        ("committer", &committer),
        ("committer_name", &committer_name),
        ("commit_timestamp", &timestamp),
        ("describe_ref", &describe_ref),
        ("branch", &branch),
        ("tags", &tags.join(",")),
    ];
    let git_dir = dest.join(".git");
    for (name, content) in files {
        std::fs::write(git_dir.join(name), content)
            .map_err(|e| format!("git: write .git/{name}: {e}"))?;
    }
    let mut metadata_list = vec![
        metadata("commit", &commit),
        metadata("author", &author),
        metadata("author_date", &author_date),
        metadata("committer", &committer),
        metadata("committer_date", &committer_date),
    ];
    if !branch.is_empty() {
        metadata_list.push(metadata("branch", &branch));
    }
    if !tags.is_empty() {
        metadata_list.push(metadata("tags", &tags.join(",")));
    }
    metadata_list.push(metadata("message", &message));
    if !source.uri.contains('@') {
        metadata_list.push(metadata("url", &source.uri));
    }
    Ok(json!({
        "version": { "ref": reference },
        "metadata": metadata_list,
    }))
}

fn not_found(wanted: &str, source: &Source) -> String {
    format!("git: commit {wanted} not found in {}", source.shown_uri())
}

/// `out`'s params, git-resource's names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutParams {
    /// The repository to push, a directory of the put's inputs.
    pub repository: String,
    /// The branch pushed to, instead of `source.branch`.
    #[serde(default)]
    pub branch: Option<String>,
    /// A file of the put's inputs whose content names a tag for the commit.
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub tag_prefix: Option<String>,
    /// Push the tag only, not the branch.
    #[serde(default)]
    pub only_tag: bool,
    /// A file of the put's inputs whose content is the tag's message
    /// (an annotated tag).
    #[serde(default)]
    pub annotate: Option<String>,
    /// Push even when it is not a fast-forward (and replace the tag).
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub rebase: Option<Value>,
    #[serde(default)]
    pub merge: Option<Value>,
    #[serde(default)]
    pub rebase_strategy: Option<Value>,
    #[serde(default)]
    pub returning: Option<Value>,
    #[serde(default)]
    pub notes: Option<Value>,
    #[serde(default)]
    pub override_branch: Option<Value>,
}

/// A relative path below the put's inputs, or why not.
fn input_path(field: &str, value: &str) -> Result<PathBuf, String> {
    let relative = Path::new(value);
    let safe = !value.is_empty()
        && !value.starts_with('-')
        && relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if safe {
        Ok(relative.to_path_buf())
    } else {
        Err(format!(
            "params.{field}: {:?} must be a relative path below the put's inputs",
            shorten(value)
        ))
    }
}

/// Reads a small file of the put's inputs, never through a link.
fn read_input_file(src: &Path, field: &str, value: &str) -> Result<String, String> {
    let relative = input_path(field, value)?;
    let mut at = src.to_path_buf();
    for part in relative.components() {
        at.push(part);
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("params.{field}: {:?}: {e}", shorten(value)))?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "params.{field}: {:?} goes through a symbolic link",
                shorten(value)
            ));
        }
    }
    let text =
        std::fs::read(&at).map_err(|e| format!("params.{field}: {:?}: {e}", shorten(value)))?;
    if text.len() > 64 * 1024 {
        return Err(format!(
            "params.{field}: {:?} is over 64 KiB",
            shorten(value)
        ));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// `out <src>`: pushes the HEAD of `src/<params.repository>` to the branch
/// of `source.uri` (a fast-forward unless `force`), tags it when asked, and
/// answers its commit as the new version.
pub(crate) fn put(call: Call<'_>) -> Result<Value, String> {
    let request: crate::OutRequest<Source, OutParams> = parse_request(call.request)?;
    let source = &request.source;
    source.validate()?;
    let params = request
        .params
        .ok_or("params.repository: required (the input directory to push)")?;
    for (name, given) in [
        ("rebase", params.rebase.is_some()),
        ("merge", params.merge.is_some()),
        ("rebase_strategy", params.rebase_strategy.is_some()),
        ("returning", params.returning.is_some()),
        ("notes", params.notes.is_some()),
        ("override_branch", params.override_branch.is_some()),
    ] {
        if given {
            return Err(format!("params.{name}: {NOT_BUILT_IN}"));
        }
    }
    let branch = match (&params.branch, &source.branch) {
        (Some(branch), _) => {
            check_branch(branch).map_err(|why| {
                format!(
                    "params.branch: {:?} is not a branch name ({why})",
                    shorten(branch)
                )
            })?;
            branch.clone()
        }
        (None, Some(branch)) => branch.clone(),
        (None, None) if params.only_tag => String::new(),
        (None, None) => return Err("source.branch: required to push".into()),
    };
    if params.only_tag && params.tag.is_none() {
        return Err("params.only_tag: needs params.tag".into());
    }
    if params.annotate.is_some() && params.tag.is_none() {
        return Err("params.annotate: needs params.tag".into());
    }
    let relative = input_path("repository", &params.repository)?;
    let src = call.dir.expect("out has a directory");
    let repo = src.join(relative);
    if !repo.is_dir() {
        return Err(format!(
            "params.repository: {:?} is not a directory of the put's inputs",
            shorten(&params.repository)
        ));
    }
    let tag = match &params.tag {
        Some(file) => {
            let name = format!(
                "{}{}",
                params.tag_prefix.as_deref().unwrap_or(""),
                read_input_file(src, "tag", file)?.trim()
            );
            check_branch(&name).map_err(|why| {
                format!("params.tag: {:?} is not a tag name ({why})", shorten(&name))
            })?;
            Some(name)
        }
        None => None,
    };
    let annotation = match &params.annotate {
        Some(file) => Some(read_input_file(src, "annotate", file)?),
        None => None,
    };
    let log = call.log;
    let session = Session::new(source)?;
    // The repository was written by the build (a task, as its user): git
    // is never run inside it, where its config and hooks could make this
    // program run commands. Its objects are cloned over git's transport
    // (which reads only protected config) into a repository of our own, in
    // the session's scratch dir, and that one is pushed.
    let sha = push_from_copy(
        &session,
        &repo,
        &params.repository,
        &Push {
            branch: &branch,
            tag: tag.as_deref(),
            annotation: annotation.as_deref(),
            only_tag: params.only_tag,
            force: params.force,
        },
        source,
        log,
    )?;
    let mut answer_metadata = vec![metadata("commit", &sha)];
    if let Some(tag) = &tag {
        answer_metadata.push(metadata("tag", tag));
    }
    Ok(json!({
        "version": { "ref": sha },
        "metadata": answer_metadata,
    }))
}

struct Push<'a> {
    branch: &'a str,
    tag: Option<&'a str>,
    annotation: Option<&'a str>,
    only_tag: bool,
    force: bool,
}

/// Clones `repo`'s objects into the session's scratch dir and pushes its
/// HEAD to the branch (and the tag); answers the commit pushed.
fn push_from_copy(
    session: &Session,
    repo: &Path,
    name: &str,
    push: &Push<'_>,
    source: &Source,
    log: &mut dyn std::io::Write,
) -> Result<String, String> {
    let scratch = &session.scratch;
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
            "[safe]\n\tdirectory = \"{}\"\n\tdirectory = \"{}\"\n{}[init]\n\tdefaultBranch = main\n\
             [user]\n\tname = hangar\n\temail = hangar@localhost\n",
            escape(repo),
            escape(&repo.join(".git")),
            safe_directories(&session.trusted).trim_start_matches("[safe]\n"),
        ),
    )
    .map_err(|e| format!("git: write a config: {e}"))?;
    session
        .git_with(
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
    let head = session
        .in_repo(
            &ours,
            &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            log,
        )
        .map_err(|_| format!("git: {} has no commit to push", shorten(name)))?;
    let sha = String::from_utf8_lossy(&head).trim().to_string();
    let mut refspecs = Vec::new();
    let plus = if push.force { "+" } else { "" };
    if !push.only_tag {
        refspecs.push(format!("{plus}{sha}:refs/heads/{}", push.branch));
    }
    if let Some(tag) = push.tag {
        let mut args = vec!["tag"];
        if push.force {
            args.push("--force");
        }
        let message = scratch.join("tag-message");
        let message_path = message.display().to_string();
        if let Some(annotation) = push.annotation {
            std::fs::write(&message, annotation)
                .map_err(|e| format!("git: write the tag's message: {e}"))?;
            args.extend(["--annotate", "--file", &message_path]);
        }
        args.extend(["--", tag, &sha]);
        session
            .git_with(
                &[
                    &[OsStr::new("-C"), ours.as_os_str()][..],
                    &args.iter().map(OsStr::new).collect::<Vec<_>>(),
                ]
                .concat(),
                Some(&config),
                log,
            )
            .map_err(|e| format!("{e} (tagging {tag:?})"))?;
        refspecs.push(format!("{plus}refs/tags/{tag}:refs/tags/{tag}"));
    }
    let uri = source.git_uri();
    let mut args = vec!["push", "--quiet", "--no-verify", "--", &uri];
    args.extend(refspecs.iter().map(String::as_str));
    session.in_repo(&ours, &args, log).map_err(|e| {
        format!(
            "{e} (pushing to branch {:?} of {}: without force, hangar pushes fast-forwards only)",
            push.branch,
            source.shown_uri()
        )
    })?;
    Ok(sha)
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
    fn username_and_password_go_into_the_uri_encoded() {
        let source: Source = serde_json::from_value(serde_json::json!({
            "uri": "https://example.com/r.git",
            "username": "me@corp",
            "password": "p:a/s s@",
        }))
        .unwrap();
        source.validate().unwrap();
        assert_eq!(
            source.git_uri(),
            "https://me%40corp:p%3Aa%2Fs%20s%40@example.com/r.git"
        );
        assert_eq!(source.shown_uri(), "https://example.com/r.git");
        let ssh: Source = serde_json::from_value(serde_json::json!({
            "uri": "git@example.com:r.git", "username": "u", "password": "p",
        }))
        .unwrap();
        assert!(ssh
            .validate()
            .unwrap_err()
            .contains("is not an http(s) uri"));
    }

    #[test]
    fn log_lines_lose_uri_secrets() {
        assert_eq!(
            redact_secrets("fatal: unable to access 'https://u:s3cret@h/r.git/': no\n"),
            "fatal: unable to access 'https://***@h/r.git/': no\n"
        );
        let long = format!("see https://example.com/{}\n", "a".repeat(200));
        assert_eq!(redact_secrets(&long), long);
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
