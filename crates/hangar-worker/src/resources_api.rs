//! Runs a resource type's programs (`check`, `in`, `out`) for web's steps:
//! the request JSON on stdin, the response JSON from stdout, the log from
//! stderr, handed on as it is written when web asks for a streamed answer
//! (`action_output`). Each run has a dir, HOME, TMPDIR and environment of its own and
//! leads a process group of its own (see `action_dir`). A base type of
//! hangar's layout runs in the sandbox where process tasks do (a runc
//! container over the host's system dirs, `containers::image_action`),
//! elsewhere on the host, in a PID namespace of its own where process
//! tasks get one; a base type of Concourse's layout and a custom type's
//! image run in a runc container.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::routing::post;
use axum::Router;
use hangar_api::http::{limited, Json as JsonBody};
use hangar_api::resources::{
    ActionFailure, ResourceAction, ResourceActionResult, ACTION_EVENTS, EXIT_INFRASTRUCTURE,
};
use hangar_volumes::VolumeManager;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::action_dir::{ActionDir, ActionDirs};
use crate::action_output::Running;
use crate::error::{self, ApiError};
use crate::resource_types::{self, Layout, RootfsCache, RootfsSource};

/// The most a program may print on stdout (its JSON answer); its stderr
/// is bounded by `action_output::MAX_STDERR`.
const MAX_OUTPUT: u64 = 1024 * 1024;
/// The largest action request (a resource's source and params): axum's
/// default, written down so a 413 can name it.
pub const MAX_ACTION_BODY: usize = 2 * 1024 * 1024;

#[derive(Clone)]
pub struct ResourceRunner {
    types_dir: Option<PathBuf>,
    volumes: Arc<VolumeManager>,
    /// Where each action gets its own dir.
    actions: ActionDirs,
    key: Arc<str>,
    timeout: Duration,
    /// A root worker gives what `in` fetched to the first task user, so the
    /// tasks that mount copies of it find their own files (see
    /// `containers::isolation`) and an overlay copy need not copy every
    /// file up to change its owner.
    task_user: Option<hangar_core::users::Ids>,
    /// util-linux `unshare`, when a root worker can give each action a PID
    /// namespace of its own (as process tasks get): the action sees only
    /// its own processes (not the worker's environment in `/proc`), and
    /// everything it started, `setsid` helpers too, dies with it.
    unshare: Option<PathBuf>,
    /// runc, for custom resource types: actions in containers of their
    /// image (`ResourceAction::image_volume`).
    runtime: Option<crate::containers::ActionRuntime>,
    /// Started with `--allow-privileged`: actions of privileged resource
    /// types are taken; without it they are refused before anything runs.
    allow_privileged: bool,
    /// Where base types of Concourse's layout are unpacked; without it
    /// their actions are refused.
    base_roots: Option<RootfsCache>,
    /// The worker's executable, which the built-in types' scripts run:
    /// bound read-only into their actions' containers.
    hangar_exe: Option<PathBuf>,
    /// Host dirs an operator lets built-in types' actions read
    /// (`--allow-resource-dir`), bound read-only at their own paths.
    resource_dirs: Vec<PathBuf>,
}

impl ResourceRunner {
    pub fn new(
        types_dir: Option<PathBuf>,
        volumes: Arc<VolumeManager>,
        actions: ActionDirs,
        key: &str,
        timeout: Duration,
    ) -> ResourceRunner {
        ResourceRunner {
            types_dir,
            volumes,
            actions,
            key: key.into(),
            timeout,
            task_user: None,
            unshare: None,
            runtime: None,
            allow_privileged: false,
            base_roots: None,
            hangar_exe: None,
            resource_dirs: Vec::new(),
        }
    }

    /// The executable the built-in types' scripts run (the worker's own),
    /// which their actions in the sandbox must see.
    pub fn with_hangar_exe(mut self, exe: Option<PathBuf>) -> ResourceRunner {
        self.hangar_exe = exe;
        self
    }

    /// Host dirs the built-in types' actions in the sandbox may read.
    pub fn with_resource_dirs(mut self, dirs: &[PathBuf]) -> ResourceRunner {
        self.resource_dirs = dirs.to_vec();
        self
    }

    /// Unpacks the root filesystems of base types in Concourse's layout
    /// (`resource_metadata.json` beside `rootfs.tgz` or `rootfs/`) under
    /// `dir`, a dir of the worker's own (see `resource_types::rootfs`).
    pub fn with_base_type_roots(mut self, dir: &std::path::Path) -> ResourceRunner {
        self.base_roots = Some(RootfsCache::new(dir));
        self
    }

    /// Takes actions of privileged resource types (`--allow-privileged`).
    pub fn with_allow_privileged(mut self, allow: bool) -> ResourceRunner {
        self.allow_privileged = allow;
        self
    }

    /// Runs custom resource types' actions in runc containers of their
    /// images; without it they are refused.
    pub fn with_action_runtime(
        mut self,
        runtime: Option<crate::containers::ActionRuntime>,
    ) -> ResourceRunner {
        self.runtime = runtime;
        self
    }

    /// Runs actions of hangar's layout, where they do not run in the
    /// sandbox, in a PID namespace of their own where process tasks get
    /// one (they keep the worker's user: see `docs/security.md`).
    pub fn with_isolation(mut self, isolation: &crate::containers::Isolation) -> ResourceRunner {
        if let crate::containers::Isolation::Drop {
            unshare,
            pid_namespace: true,
        } = isolation
        {
            self.unshare = Some(unshare.clone());
        }
        self
    }

    pub fn with_task_user(mut self, ids: hangar_core::users::Ids) -> ResourceRunner {
        self.task_user = Some(ids);
        self
    }
}

pub fn router(runner: ResourceRunner) -> Router {
    Router::new()
        .route("/resource-actions", limited(post(run), MAX_ACTION_BODY))
        .with_state(runner)
}

fn authorized(headers: &HeaderMap, key: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .is_some_and(|k| hangar_api::credentials::same_secret(k.as_bytes(), key.as_bytes()))
}

/// Why a resource action did not run to its end; `error.rs` decides the
/// status of each.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("unknown action {0:?}: use check, in or out")]
    UnknownAction(String),
    #[error("this worker has no resource type {0:?}")]
    NoResourceType(String),
    #[error("in needs a volume")]
    NoVolume,
    #[error("{0}")]
    Misplaced(&'static str),
    #[error("{0}")]
    BadInput(String),
    #[error("volume {0:?} not found")]
    VolumeNotFound(String),
    #[error("{0}")]
    Volume(hangar_volumes::VolumeError),
    #[error("{0}")]
    Input(serde_json::Error),
    #[error("start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{resource_type} {action} took longer than {timeout:?}")]
    TimedOut {
        resource_type: String,
        action: String,
        timeout: Duration,
    },
    #[error("{0}")]
    Wait(std::io::Error),
    #[error("make the action's own dir: {0}")]
    PrivateDir(std::io::Error),
    #[error("give the fetched files to the task user: {0}")]
    HandOver(std::io::Error),
    #[error("{0}")]
    Panicked(tokio::task::JoinError),
    #[error("resource type {0}: this worker has no runc to run a resource type's image")]
    NoRunc(String),
    #[error("resource type {resource_type}: {source}")]
    Image {
        resource_type: String,
        source: crate::containers::ContainerError,
    },
    #[error(
        "resource type {0} is privileged: this worker was not started with --allow-privileged"
    )]
    PrivilegedRefused(String),
    /// A base type of Concourse's layout could not be made ready or run:
    /// the worker's own failure.
    #[error("resource type {resource_type}: {source}")]
    BaseType {
        resource_type: String,
        source: std::io::Error,
    },
}

async fn run(
    State(runner): State<ResourceRunner>,
    headers: HeaderMap,
    body: Result<JsonBody<ResourceAction>, ApiError>,
) -> Result<axum::response::Response, ApiError> {
    // The key is checked before a malformed body is answered.
    if !authorized(&headers, &runner.key) {
        return Err(error::unauthorized());
    }
    let JsonBody(req) = body?;
    let streamed = headers
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.contains(ACTION_EVENTS));
    // Bounded: the reader waits for web to take what it sent before it
    // reads more (the program then waits on its pipe).
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    // A task of its own, so its stderr can be answered while it runs;
    // aborted (program killed, dir removed) if web hangs up.
    let running = Running(tokio::spawn(async move { execute(&runner, req, tx).await }));
    crate::action_output::respond(running, rx, streamed).await
}

async fn execute(
    runner: &ResourceRunner,
    req: ResourceAction,
    stderr: Stderr,
) -> Result<ResourceActionResult, ActionError> {
    // Before anything else: a privileged action this worker does not allow
    // runs nothing and makes nothing.
    if req.privileged && !runner.allow_privileged {
        return Err(ActionError::PrivilegedRefused(req.resource_type));
    }
    if !matches!(req.action.as_str(), "check" | "in" | "out") {
        return Err(ActionError::UnknownAction(req.action));
    }
    match (req.action.as_str(), &req.volume, req.inputs.is_empty()) {
        ("out", Some(_), _) => {
            return Err(ActionError::Misplaced("out takes `inputs`, not `volume`"))
        }
        ("check" | "in", _, false) => {
            return Err(ActionError::Misplaced("only out takes `inputs`"))
        }
        _ => {}
    }
    if let Some(image) = req.image_volume.clone() {
        return execute_in_container(runner, req, ContainerRoot::Image(image), stderr).await;
    }
    // Blocking: the first discovery reads each `rootfs.tgz` through.
    let types_dir = runner.types_dir.clone();
    let types = tokio::task::spawn_blocking(move || {
        types_dir
            .as_deref()
            .map(resource_types::discover)
            .unwrap_or_default()
    })
    .await
    .map_err(ActionError::Panicked)?;
    let rt = types
        .into_iter()
        .find(|t| t.info.type_name == req.resource_type)
        .ok_or_else(|| ActionError::NoResourceType(req.resource_type.clone()))?;
    if let Layout::Rootfs(source) = rt.layout {
        // Its metadata makes it privileged, whatever web asked.
        if rt.info.privileged && !runner.allow_privileged {
            return Err(ActionError::PrivilegedRefused(req.resource_type));
        }
        let root = ContainerRoot::Base {
            source,
            privileged: rt.info.privileged,
        };
        return execute_in_container(runner, req, root, stderr).await;
    }
    // Where process tasks run in the sandbox, so do the type's programs.
    if runner
        .runtime
        .as_ref()
        .is_some_and(|r| r.sandboxes_programs())
    {
        let root = ContainerRoot::Host {
            type_dir: PathBuf::from(&rt.info.path),
        };
        return execute_in_container(runner, req, root, stderr).await;
    }
    let program = PathBuf::from(&rt.info.path).join(&req.action);
    let mut fetched_into = None;
    let mut command = match &runner.unshare {
        Some(unshare) => {
            let argv = crate::containers::pid_namespace_prefix(unshare, &[], "hangar-action-init");
            let mut c = tokio::process::Command::new(&argv[0]);
            c.args(&argv[1..]).arg(&program);
            c
        }
        None => tokio::process::Command::new(&program),
    };
    if req.action == "in" {
        let handle = req.volume.clone().ok_or(ActionError::NoVolume)?;
        let path = volume_path(runner, handle.clone()).await?;
        command.arg(&path);
        fetched_into = Some((handle, path));
    }
    let input = serde_json::to_vec(&req.request).map_err(ActionError::Input)?;
    let mut inputs = Vec::new();
    for (name, handle) in &req.inputs {
        hangar_core::names::validate_label(name)
            .map_err(|e| ActionError::BadInput(format!("inputs: {e}")))?;
        inputs.push((name.clone(), volume_path(runner, handle.clone()).await?));
    }
    let actions = runner.actions.clone();
    let mut dir = tokio::task::spawn_blocking(move || actions.make())
        .await
        .map_err(ActionError::Panicked)?
        .map_err(ActionError::PrivateDir)?;
    if req.action == "out" {
        // Concourse's layout: each input a directory of the source dir.
        // Links, so that nothing is copied; removing the action's dir
        // removes the links, never what they point at.
        let source = dir.path().join("put");
        let made = std::fs::create_dir(&source).and_then(|()| {
            inputs
                .iter()
                .try_for_each(|(name, path)| std::os::unix::fs::symlink(path, source.join(name)))
        });
        if let Err(e) = made {
            dir.finish().await;
            return Err(ActionError::PrivateDir(e));
        }
        command.arg(&source);
    }
    // Made from nothing: the worker's key, settings, HOME and TMPDIR are
    // not the resource type's business, and what one action leaves in its
    // HOME or TMPDIR no other action sees.
    command
        .env_clear()
        .envs(dir.env())
        .current_dir(dir.path())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let what = format!("{} {}", req.resource_type, req.action);
    let ran = run_program(
        runner, &req, &program, command, &mut dir, &input, &what, stderr,
    )
    .await;
    // Whatever way it ended, nothing of the action runs on (writing into
    // the fetched volume) and its dir goes, before the volume is handed on.
    dir.finish().await;
    let (status, out) = ran?;
    answer(runner, fetched_into, status, out, Trust::OwnProgram).await
}

/// Where an action's stderr goes as it is read.
type Stderr = tokio::sync::mpsc::Sender<String>;

/// Whether an action's exit code may say its failure was the
/// infrastructure's: only the worker's own base types are believed; a
/// custom type's image is anybody's program, and exiting so must not make
/// web try it on every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    OwnProgram,
    Image,
}

/// Whose fault a non-zero exit is.
fn classify(status: std::process::ExitStatus, trust: Trust) -> Option<ActionFailure> {
    match (status.code(), trust) {
        (Some(0), _) => None,
        (Some(EXIT_INFRASTRUCTURE), Trust::OwnProgram) => Some(ActionFailure::Infrastructure),
        _ => Some(ActionFailure::Own),
    }
}

/// The answer to web once the action ended: what `in` fetched (if it
/// succeeded) is handed to the first task user, so the tasks that mount
/// copies of it find their own files. An image keeps its owners, moved
/// into the sandbox's range (root's /etc is root's inside the container,
/// its users' homes theirs), so the containers of it, whose copies inherit
/// the owners, need not copy every file up to change them.
async fn answer(
    runner: &ResourceRunner,
    fetched_into: Option<(String, PathBuf)>,
    status: std::process::ExitStatus,
    out: Vec<u8>,
    trust: Trust,
) -> Result<ResourceActionResult, ActionError> {
    if let (Some((handle, path)), Some(ids), true) =
        (fetched_into, runner.task_user, status.success())
    {
        let volumes = runner.volumes.clone();
        tokio::task::spawn_blocking(move || {
            if crate::containers::is_image_layout(&path) {
                return crate::containers::hand_image_to_sandbox(&path, ids);
            }
            // The action is over: what the walk makes holds until the
            // next write, and the tasks of copies of it skip theirs.
            let token = volumes.owners_token(&handle);
            crate::containers::hand_to_task_user(&path, ids)?;
            if crate::containers::is_root() {
                let one = hangar_volumes::Owners::One {
                    uid: ids.uid,
                    gid: ids.gid,
                };
                if let Err(e) = volumes.set_owners(&token, one) {
                    tracing::debug!(%handle, error = %e, "cannot stamp a fetched volume's owners; its first container walks it");
                }
            }
            Ok(())
        })
        .await
        .map_err(ActionError::Panicked)?
        .map_err(ActionError::HandOver)?;
    }
    Ok(ResourceActionResult {
        exit_code: status.code().unwrap_or(128 + 9),
        response: serde_json::from_slice(&out).ok(),
        // Handed on as it was written (`action_output`).
        stderr: String::new(),
        failure: classify(status, trust),
    })
}

/// Volume `handle`'s data directory, for an action that may write it as
/// any user its resource type runs as: its owners stamp goes.
async fn volume_path(runner: &ResourceRunner, handle: String) -> Result<PathBuf, ActionError> {
    let volumes = runner.volumes.clone();
    let h = handle.clone();
    let info = tokio::task::spawn_blocking(move || {
        let info = volumes.get(&h)?;
        if info.is_some() {
            volumes.clear_owners(&h)?;
        }
        Ok(info)
    })
    .await
    .map_err(ActionError::Panicked)?
    .map_err(ActionError::Volume)?
    .ok_or(ActionError::VolumeNotFound(handle))?;
    Ok(info.path)
}

/// Kills and forgets an action's container however the action ends: on
/// the normal path awaited, when the request is dropped (web hung up) from
/// a thread of its own.
struct ContainerGuard {
    runtime: Option<crate::containers::ActionRuntime>,
    id: String,
}

impl ContainerGuard {
    async fn remove(mut self) {
        if let Some(rt) = self.runtime.take() {
            let id = self.id.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || rt.remove(&id)).await {
                tracing::warn!(error = %e, "removing a resource action's container panicked");
            }
        }
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            let id = std::mem::take(&mut self.id);
            std::thread::spawn(move || rt.remove(&id));
        }
    }
}

/// Where an action in a container gets its root filesystem.
enum ContainerRoot {
    /// A custom type's image: a volume, the action's own copy of it.
    Image(String),
    /// A base type of Concourse's layout, privileged if its metadata says.
    Base {
        source: RootfsSource,
        privileged: bool,
    },
    /// A base type of hangar's layout: its dir's programs over the host's
    /// system dirs, as a process task's root.
    Host { type_dir: PathBuf },
}

/// What an action's container is made of, once found on disk.
enum Prepared {
    Image,
    Base,
    /// The type's dir and the worker's executable, resolved.
    Host(PathBuf, Vec<PathBuf>),
}

/// `/opt/resource/<action>` in a runc container of a custom type's image
/// or of a base type's root filesystem, run in the foreground with the
/// request on stdin, under the same timeout, process group and cleanup as
/// a base type's program.
async fn execute_in_container(
    runner: &ResourceRunner,
    req: ResourceAction,
    root: ContainerRoot,
    stderr: Stderr,
) -> Result<ResourceActionResult, ActionError> {
    let runtime = runner
        .runtime
        .clone()
        .ok_or_else(|| ActionError::NoRunc(req.resource_type.clone()))?;
    let base_failed = |source: std::io::Error| ActionError::BaseType {
        resource_type: req.resource_type.clone(),
        source,
    };
    let (root_path, privileged, trust, kind) = match root {
        ContainerRoot::Image(image) => (
            volume_path(runner, image).await?,
            req.privileged,
            Trust::Image,
            Prepared::Image,
        ),
        ContainerRoot::Host { type_dir } => {
            // Bound at their own paths, so resolved: a link on the way
            // would not be one inside.
            let exe = runner.hangar_exe.clone();
            let allowed = runner.resource_dirs.clone();
            let (dir, visible) = tokio::task::spawn_blocking(move || {
                let dir = std::fs::canonicalize(&type_dir)?;
                let mut visible: Vec<PathBuf> = exe
                    .and_then(|e| std::fs::canonicalize(e).ok())
                    .into_iter()
                    .collect();
                // A dir that is gone is left out rather than failing
                // every action.
                visible.extend(allowed.iter().filter_map(|d| std::fs::canonicalize(d).ok()));
                Ok::<_, std::io::Error>((dir, visible))
            })
            .await
            .map_err(ActionError::Panicked)?
            .map_err(base_failed)?;
            (
                dir.clone(),
                req.privileged,
                Trust::OwnProgram,
                Prepared::Host(dir, visible),
            )
        }
        ContainerRoot::Base { source, privileged } => {
            let cache = runner.base_roots.clone().ok_or_else(|| {
                base_failed(std::io::Error::other(
                    "this worker has no dir to unpack resource types' root filesystems in",
                ))
            })?;
            // Moved into the sandbox's range, unless it runs privileged.
            let owners = runtime.sandbox_ids().filter(|_| !privileged);
            let name = req.resource_type.clone();
            let path = tokio::task::spawn_blocking(move || cache.rootfs(&name, &source, owners))
                .await
                .map_err(ActionError::Panicked)?
                .map_err(base_failed)?;
            (path, privileged, Trust::OwnProgram, Prepared::Base)
        }
    };
    let dest = match (&req.action[..], req.volume.clone()) {
        ("in", None) => return Err(ActionError::NoVolume),
        ("in", Some(handle)) => Some((handle.clone(), volume_path(runner, handle).await?)),
        _ => None,
    };
    let mut inputs = Vec::new();
    for (name, handle) in &req.inputs {
        hangar_core::names::validate_label(name)
            .map_err(|e| ActionError::BadInput(format!("inputs: {e}")))?;
        inputs.push((name.clone(), volume_path(runner, handle.clone()).await?));
    }
    let input = serde_json::to_vec(&req.request).map_err(ActionError::Input)?;
    let actions = runner.actions.clone();
    let mut dir = tokio::task::spawn_blocking(move || actions.make())
        .await
        .map_err(ActionError::Panicked)?
        .map_err(ActionError::PrivateDir)?;
    let id = format!(
        "{}{}",
        crate::containers::ACTION_ID_PREFIX,
        uuid::Uuid::new_v4().simple()
    );
    let proxies: Vec<(String, String)> = dir
        .env()
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.to_str(),
                Some("PATH" | "HOME" | "TMPDIR" | "TMP" | "TEMP")
            )
        })
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let prepared = {
        let (action_dir, root_path, dest, action, id, runtime) = (
            dir.path().to_path_buf(),
            root_path.clone(),
            dest.as_ref().map(|(_, path)| path.clone()),
            req.action.clone(),
            id.clone(),
            runtime.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let cgroups_path = runtime.limit_memory(&id);
            let root = match &kind {
                Prepared::Image => crate::containers::ActionRoot::Image(&root_path),
                Prepared::Base => crate::containers::ActionRoot::Base(&root_path),
                Prepared::Host(type_dir, visible) => {
                    crate::containers::ActionRoot::Host { type_dir, visible }
                }
            };
            let spec = crate::containers::ActionSpec {
                root,
                action: &action,
                dest: dest.as_deref(),
                inputs: &inputs,
                extra_env: &proxies,
                privileged,
            };
            crate::containers::prepare_image_action(
                &runtime,
                &action_dir,
                &spec,
                &id,
                cgroups_path.as_deref(),
            )
        })
        .await
        .map_err(ActionError::Panicked)?
    };
    let bundle = match prepared {
        Ok(bundle) => bundle,
        Err(source) => {
            // The root may be mounted already.
            let (runtime, id) = (runtime.clone(), id.clone());
            let _ = tokio::task::spawn_blocking(move || runtime.remove_cgroup(&id)).await;
            dir.finish().await;
            return Err(match trust {
                Trust::Image => ActionError::Image {
                    resource_type: req.resource_type.clone(),
                    source,
                },
                Trust::OwnProgram => base_failed(std::io::Error::other(source.to_string())),
            });
        }
    };
    let argv = runtime.run_argv(&bundle, &id);
    let mut command = tokio::process::Command::new(&argv[0]);
    command.args(&argv[1..]);
    for key in crate::containers::private_env_keys() {
        command.env_remove(key);
    }
    command
        .current_dir(dir.path())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // From here the guard removes the container and its cgroup, however
    // the action ends.
    let guard = ContainerGuard {
        runtime: Some(runtime.clone()),
        id: id.clone(),
    };
    let what = match trust {
        Trust::Image => format!("{} {} (image)", req.resource_type, req.action),
        Trust::OwnProgram => format!("{} {}", req.resource_type, req.action),
    };
    let runc = PathBuf::from(&argv[0]);
    let oom_note = stderr.clone();
    let ran = run_program(
        runner, &req, &runc, command, &mut dir, &input, &what, stderr,
    )
    .await;
    // runc answers 128 + 9 for a process SIGKILLed in the container.
    let killed = matches!(&ran, Ok((status, _)) if status.code() == Some(137));
    let oom = {
        let (runtime, id) = (runtime.clone(), id.clone());
        tokio::task::spawn_blocking(move || runtime.oom_killed(&id, killed))
            .await
            .unwrap_or(false)
    };
    if oom {
        let limit = hangar_core::build::human_bytes(runtime.memory_limit_bytes());
        let _ = oom_note
            .send(format!(
                "{what}: out of memory: the kernel killed a process of the action at its {limit} limit (the worker's --default-container-memory)\n"
            ))
            .await;
    }
    // Whatever way it ended, the container is gone before the fetched
    // volume is handed on.
    guard.remove().await;
    dir.finish().await;
    let (status, out) = ran?;
    answer(runner, dest, status, out, trust).await
}

/// Starts the program, feeds it the request, hands its stderr on as it
/// comes and collects its answer and status within the runner's timeout.
#[allow(clippy::too_many_arguments)]
async fn run_program(
    runner: &ResourceRunner,
    req: &ResourceAction,
    program: &std::path::Path,
    mut command: tokio::process::Command,
    dir: &mut ActionDir,
    input: &[u8],
    what: &str,
    stderr_to: Stderr,
) -> Result<(std::process::ExitStatus, Vec<u8>), ActionError> {
    let start_error = |source| ActionError::Start {
        program: program.display().to_string(),
        source,
    };
    // Under `unshare` a program that cannot be run would be the shell's
    // exit 126 or 127, a failure of the step's own; it is the worker's
    // (retried elsewhere), as when the program is spawned directly.
    let executable = tokio::fs::metadata(program)
        .await
        .map_err(start_error)?
        .permissions()
        .mode()
        & 0o111
        != 0;
    if !executable {
        return Err(start_error(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        )));
    }
    let mut child = command.spawn().map_err(start_error)?;
    if let Some(pid) = child.id() {
        dir.watch_group(pid);
    }
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().map(|s| s.take(MAX_OUTPUT));
    let stderr = child.stderr.take();
    let work = async {
        let feed = async {
            if let Some(mut s) = stdin.take() {
                // A program that does not read its input is its own
                // business: its answer (or exit code) says what went wrong.
                if let Err(e) = s.write_all(input).await {
                    tracing::debug!(action = %what, error = %e, "the program did not take its whole input");
                }
            }
        };
        let read_out = async {
            let mut buf = Vec::new();
            if let Some(s) = stdout.as_mut() {
                read_noted(what, "stdout", s.read_to_end(&mut buf).await);
            }
            buf
        };
        let read_err = async {
            if let Some(s) = stderr {
                crate::action_output::forward(s, stderr_to, what).await;
            }
        };
        let (_, out, ()) = tokio::join!(feed, read_out, read_err);
        let status = child.wait().await;
        (status, out)
    };
    let (status, out) = tokio::time::timeout(runner.timeout, work)
        .await
        .map_err(|_| ActionError::TimedOut {
            resource_type: req.resource_type.clone(),
            action: req.action.clone(),
            timeout: runner.timeout,
        })?;
    Ok((status.map_err(ActionError::Wait)?, out))
}

/// A pipe that broke is logged; the answer carries what was read of it.
fn read_noted(action: &str, pipe: &str, read: std::io::Result<usize>) {
    if let Err(e) = read {
        tracing::warn!(%action, pipe, error = %e, "cannot read the program's output; answering with what was read");
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn only_the_worker_s_own_types_may_call_a_failure_the_infrastructure_s() {
        let exit = |code: i32| std::process::ExitStatus::from_raw(code << 8);
        assert_eq!(classify(exit(0), Trust::OwnProgram), None);
        assert_eq!(
            classify(exit(EXIT_INFRASTRUCTURE), Trust::OwnProgram),
            Some(ActionFailure::Infrastructure)
        );
        assert_eq!(
            classify(exit(1), Trust::OwnProgram),
            Some(ActionFailure::Own)
        );
        // A custom type's image is anybody's program.
        assert_eq!(
            classify(exit(EXIT_INFRASTRUCTURE), Trust::Image),
            Some(ActionFailure::Own)
        );
        // Killed by a signal: no code, its own.
        let killed = std::process::ExitStatus::from_raw(9);
        assert_eq!(
            classify(killed, Trust::OwnProgram),
            Some(ActionFailure::Own)
        );
    }
}
