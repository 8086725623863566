//! A recording fake of the workers, for in-process tests of the engine: it
//! keeps volumes and containers in memory, records every call in a plain
//! form (`create_container w1 sh`) for whole-run snapshots, and fails or
//! holds calls where a test says so.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use hangar_api::containers::{Container, ContainerExit, ContainerSpec, RunState, Runtime};
use hangar_api::resources::{ActionFailure, ResourceAction, ResourceActionResult};
use hangar_api::worker_api::{CreateVolume, Volume};
use tokio::sync::Notify;

use crate::workers::{ActionStderr, CallError, CopyError, LogStream, Workers};

/// Which call a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    CreateVolume,
    CopyVolume,
    ResourceAction,
    /// A resource action in a container of a custom type's image (also
    /// held and failed by its own kind, so a test can reach it past the
    /// image's fetch).
    ResourceActionInImage,
    ReadFile,
    CreateContainer,
    WaitContainer,
    ContainerLogs,
    DestroyContainer,
}

/// How a fake container ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exit(i32),
    OutOfMemory,
    /// The worker lost track of the process.
    Lost,
    /// Exited non-zero with the worker's disk full.
    DiskFull,
}

#[derive(Default)]
struct State {
    calls: Vec<String>,
    /// Volumes each worker has.
    volumes: BTreeMap<String, BTreeSet<String>>,
    /// Containers by (worker, handle), with their ending once ended.
    containers: BTreeMap<(String, String), Option<Ending>>,
    /// The spec of every container created, by worker, in order.
    specs: Vec<(String, ContainerSpec)>,
    /// One-shot failures, taken in order per (worker, call).
    faults: BTreeMap<(String, CallKind), VecDeque<CallError>>,
    /// Workers that answer nothing.
    down: BTreeSet<String>,
    /// Calls that never answer (until released).
    held: BTreeSet<(String, CallKind)>,
    /// How the next containers end (default: exit 0), by program path.
    endings: BTreeMap<String, Ending>,
    /// How the next containers on a worker end, one each, before `endings`.
    next_endings: BTreeMap<String, VecDeque<Ending>>,
    /// Containers stay running until [`FakeWorkers::end_containers`].
    hold_containers: bool,
    /// Containers of these programs keep running until ended.
    held_programs: BTreeSet<String>,
    /// The version `check` finds.
    version: Option<serde_json::Value>,
    /// The version every `in` answers, whatever it was asked for.
    in_answer: Option<serde_json::Value>,
    in_metadata: Option<serde_json::Value>,
    /// How the next resource actions of an action (`check`, `in`) on a
    /// worker exit, one each (default: 0), and whose fault the worker says
    /// a failure is.
    action_exits: BTreeMap<(String, String), VecDeque<(i32, ActionFailure)>>,
    /// What the next resource actions of an action on a worker write on
    /// stderr, one list of pieces each.
    action_stderr: BTreeMap<(String, String), VecDeque<Vec<String>>>,
    /// Actions (`check`, `in`) on workers that, once they wrote their
    /// stderr, wait (until released) before they end.
    pause_after_output: BTreeSet<(String, String)>,
    /// Resource actions of these names (`in`, `out`) wait until released.
    held_actions: BTreeSet<String>,
    /// The next actions of a name on a worker fail as calls, one each.
    action_failures: BTreeMap<(String, String), VecDeque<CallError>>,
    /// Every resource action requested, by worker, in order.
    actions: Vec<(String, ResourceAction)>,
    /// Files every volume holds, by path inside it (what tasks wrote).
    files: BTreeMap<String, Vec<u8>>,
}

/// The fake. Cheap to clone; clones share their state.
#[derive(Clone, Default)]
pub struct FakeWorkers {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl FakeWorkers {
    pub fn new() -> FakeWorkers {
        FakeWorkers::default()
    }

    /// Changes the state and wakes whoever waits on a change.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.notify_waiters();
        out
    }

    /// Reads the state (no wake-up: waiters read in loops).
    fn peek<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Every resource action requested so far, by worker, in order.
    pub fn action_requests(&self) -> Vec<(String, ResourceAction)> {
        self.peek(|s| s.actions.clone())
    }

    /// Every call so far, in order, in the plain form.
    pub fn calls(&self) -> Vec<String> {
        self.peek(|s| s.calls.clone())
    }

    /// The calls so far that start with `prefix`.
    pub fn calls_of(&self, prefix: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    /// The next call of `kind` on `worker` fails with `error` (faults of
    /// one call queue up).
    pub fn fail_next(&self, worker: &str, kind: CallKind, error: CallError) {
        self.with(|s| {
            s.faults
                .entry((worker.to_string(), kind))
                .or_default()
                .push_back(error)
        });
    }

    /// `worker` stops answering (every call fails as unreachable), or
    /// answers again.
    pub fn set_down(&self, worker: &str, down: bool) {
        self.with(|s| {
            if down {
                s.down.insert(worker.to_string());
            } else {
                s.down.remove(worker);
            }
        });
    }

    /// Calls of `kind` on `worker` never answer while held.
    pub fn hold(&self, worker: &str, kind: CallKind, held: bool) {
        self.with(|s| {
            if held {
                s.held.insert((worker.to_string(), kind));
            } else {
                s.held.remove(&(worker.to_string(), kind));
            }
        });
    }

    /// Containers of program `path` end this way.
    pub fn end_with(&self, path: &str, ending: Ending) {
        self.with(|s| s.endings.insert(path.to_string(), ending));
    }

    /// The next container started on `worker` ends this way (queued).
    pub fn end_next_on(&self, worker: &str, ending: Ending) {
        self.with(|s| {
            s.next_endings
                .entry(worker.to_string())
                .or_default()
                .push_back(ending)
        });
    }

    /// New containers keep running until [`FakeWorkers::end_containers`].
    pub fn hold_containers(&self, hold: bool) {
        self.with(|s| s.hold_containers = hold);
    }

    /// New containers of program `path` keep running until
    /// [`FakeWorkers::end_containers`] (or until destroyed).
    pub fn hold_program(&self, path: &str) {
        self.with(|s| s.held_programs.insert(path.to_string()));
    }

    /// Ends every running container with exit 0.
    pub fn end_containers(&self) {
        self.with(|s| {
            for ending in s.containers.values_mut() {
                ending.get_or_insert(Ending::Exit(0));
            }
        });
    }

    /// The next `action` (`check`, `in`, `out`) on `worker` fails as a
    /// call (the worker's failure, not the resource type's).
    pub fn fail_next_action(&self, worker: &str, action: &str, error: CallError) {
        self.with(|s| {
            s.action_failures
                .entry((worker.to_string(), action.to_string()))
                .or_default()
                .push_back(error)
        });
    }

    /// Resource actions named `action` wait (`true`) until released.
    pub fn hold_action(&self, action: &str, held: bool) {
        self.with(|s| {
            if held {
                s.held_actions.insert(action.to_string());
            } else {
                s.held_actions.remove(action);
            }
        });
    }

    /// The version a `check` finds.
    pub fn set_version(&self, version: serde_json::Value) {
        self.with(|s| s.version = Some(version));
    }

    /// The version every `in` answers from now on (as a type whose `in`
    /// answers a version in another shape than its `check`'s).
    pub fn answer_in_with(&self, version: serde_json::Value) {
        self.with(|s| s.in_answer = Some(version));
    }

    /// The metadata every `in` answers from now on (`[{name, value}]`);
    /// none until then.
    pub fn answer_in_metadata(&self, metadata: serde_json::Value) {
        self.with(|s| s.in_metadata = Some(metadata));
    }

    /// The next `action` (`check`, `in`) on `worker` runs and exits with
    /// `code`: the resource type's own failure, not the worker's.
    pub fn exit_next_action(&self, worker: &str, action: &str, code: i32) {
        self.exit_next_action_as(worker, action, code, ActionFailure::Own);
    }

    /// The next `action` on `worker` exits with `code`, the worker saying
    /// whose fault that is.
    pub fn exit_next_action_as(
        &self,
        worker: &str,
        action: &str,
        code: i32,
        failure: ActionFailure,
    ) {
        self.with(|s| {
            s.action_exits
                .entry((worker.to_string(), action.to_string()))
                .or_default()
                .push_back((code, failure))
        });
    }

    /// The next `action` on `worker` writes these pieces on stderr, each
    /// handed on as the worker would as it comes.
    pub fn write_next_action(&self, worker: &str, action: &str, pieces: Vec<String>) {
        self.with(|s| {
            s.action_stderr
                .entry((worker.to_string(), action.to_string()))
                .or_default()
                .push_back(pieces)
        });
    }

    /// Resource actions `action` on `worker` wait after writing their
    /// stderr until released; a worker set down meanwhile fails them as
    /// unreachable.
    pub fn pause_after_output(&self, worker: &str, action: &str, paused: bool) {
        let key = (worker.to_string(), action.to_string());
        self.with(|s| {
            if paused {
                s.pause_after_output.insert(key);
            } else {
                s.pause_after_output.remove(&key);
            }
        });
    }

    /// Volumes `worker` has now.
    pub fn volumes_on(&self, worker: &str) -> BTreeSet<String> {
        self.peek(|s| s.volumes.get(worker).cloned().unwrap_or_default())
    }

    /// Every volume holds a file at `path` with `content` from now on (a
    /// test's stand-in for what a task wrote into its outputs).
    pub fn put_file(&self, path: &str, content: &[u8]) {
        self.with(|s| s.files.insert(path.to_string(), content.to_vec()));
    }

    /// Forgets everything `worker` had (its disk was wiped).
    pub fn wipe(&self, worker: &str) {
        self.with(|s| {
            s.volumes.remove(worker);
            s.containers.retain(|(w, _), _| w != worker);
        });
    }

    /// Containers running now, as `worker handle`.
    pub fn running_containers(&self) -> Vec<(String, String)> {
        self.peek(|s| {
            s.containers
                .iter()
                .filter(|(_, e)| e.is_none())
                .map(|(k, _)| k.clone())
                .collect()
        })
    }

    /// The spec of every container created so far, with its worker, in
    /// order: what the engine asked the worker to run.
    pub fn container_specs(&self) -> Vec<(String, ContainerSpec)> {
        self.peek(|s| s.specs.clone())
    }

    /// Waits until a call starting with `prefix` was made.
    pub async fn called(&self, prefix: &str) {
        loop {
            let changed = self.changed.notified();
            if !self.calls_of(prefix).is_empty() {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    /// Records the call, then answers: down, a queued fault, held, or go.
    async fn enter(&self, worker: &str, kind: CallKind, line: String) -> Result<(), CallError> {
        let key = (worker.to_string(), kind);
        let fault = self.with(|s| {
            s.calls.push(line);
            if s.down.contains(worker) {
                return Some(CallError::unreachable(format!(
                    "cannot reach worker {worker}: connection refused"
                )));
            }
            s.faults.get_mut(&key).and_then(VecDeque::pop_front)
        });
        if let Some(e) = fault {
            return Err(e);
        }
        loop {
            let changed = self.changed.notified();
            if !self.peek(|s| s.held.contains(&key)) {
                return Ok(());
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    /// Waits while `worker`'s actions are paused after their output; a
    /// worker set down meanwhile answers nothing more.
    async fn after_output(&self, key: &(String, String)) -> Result<(), CallError> {
        let worker = &key.0;
        loop {
            let changed = self.changed.notified();
            let (paused, down) =
                self.peek(|s| (s.pause_after_output.contains(key), s.down.contains(worker)));
            if down {
                return Err(CallError::unreachable(format!(
                    "worker {worker}'s answer broke off"
                )));
            }
            if !paused {
                return Ok(());
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    fn container(&self, worker: &str, handle: &str) -> Result<Option<Ending>, CallError> {
        self.peek(|s| {
            s.containers
                .get(&(worker.to_string(), handle.to_string()))
                .cloned()
                .ok_or_else(|| {
                    CallError::refused(404, "not_found", format!("no container {handle}"))
                })
        })
    }
}

fn exit_of(ending: &Ending) -> ContainerExit {
    let mut exit = ContainerExit {
        code: None,
        signal: None,
        oom_killed: false,
        memory_limit_bytes: Some(64 << 20),
        finished_at: 0,
        lost: false,
        disk_full: false,
    };
    match ending {
        Ending::Exit(code) => exit.code = Some(*code),
        Ending::OutOfMemory => {
            exit.signal = Some(9);
            exit.oom_killed = true;
        }
        Ending::Lost => exit.lost = true,
        Ending::DiskFull => {
            exit.code = Some(1);
            exit.disk_full = true;
        }
    }
    exit
}

fn container_view(handle: &str, ending: &Option<Ending>) -> Container {
    Container {
        handle: handle.to_string(),
        runtime: Runtime::Process,
        state: if ending.is_some() {
            RunState::Exited
        } else {
            RunState::Running
        },
        started_at: 0,
        exit: ending.as_ref().map(exit_of),
        log_bytes: 0,
    }
}

impl Workers for FakeWorkers {
    fn create_volume<'a>(
        &'a self,
        worker: &'a str,
        req: &'a CreateVolume,
    ) -> BoxFuture<'a, Result<Volume, CallError>> {
        async move {
            let line = format!("create_volume {worker} {}", req.strategy);
            self.enter(worker, CallKind::CreateVolume, line).await?;
            self.with(|s| {
                let held = s.volumes.entry(worker.to_string()).or_default();
                if let Some(parent) = &req.parent {
                    if !held.contains(parent) {
                        return Err(CallError::refused(
                            404,
                            "not_found",
                            format!("no parent volume {parent}"),
                        ));
                    }
                }
                held.insert(req.handle.clone());
                Ok(Volume {
                    handle: req.handle.clone(),
                    parent: req.parent.clone(),
                    path: format!("/fake/{worker}/{}", req.handle),
                    properties: Default::default(),
                    size_bytes: Some(0),
                    created_at: 0,
                })
            })
        }
        .boxed()
    }

    fn copy_volume<'a>(
        &'a self,
        from_worker: &'a str,
        from_handle: &'a str,
        to_worker: &'a str,
        to_handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CopyError>> {
        async move {
            let line = format!("copy_volume {from_worker} -> {to_worker}");
            let side = |worker: &str| {
                let worker = worker.to_string();
                move |error| CopyError { worker, error }
            };
            self.enter(from_worker, CallKind::CopyVolume, line)
                .await
                .map_err(side(from_worker))?;
            self.with(|s| {
                if !s
                    .volumes
                    .get(from_worker)
                    .is_some_and(|v| v.contains(from_handle))
                {
                    return Err(side(from_worker)(CallError::refused(
                        404,
                        "not_found",
                        format!("no volume {from_handle}"),
                    )));
                }
                if s.down.contains(to_worker) {
                    return Err(side(to_worker)(CallError::unreachable(
                        "connection refused",
                    )));
                }
                s.volumes
                    .entry(to_worker.to_string())
                    .or_default()
                    .insert(to_handle.to_string());
                Ok(())
            })
        }
        .boxed()
    }

    fn resource_action<'a>(
        &'a self,
        worker: &'a str,
        req: &'a ResourceAction,
        stderr: ActionStderr,
    ) -> BoxFuture<'a, Result<ResourceActionResult, CallError>> {
        async move {
            let mut line = format!(
                "resource_action {worker} {} {}",
                req.resource_type, req.action
            );
            if req.image_volume.is_some() {
                line.push_str(" in-image");
            }
            let kind = if req.image_volume.is_some() {
                CallKind::ResourceActionInImage
            } else {
                CallKind::ResourceAction
            };
            self.enter(worker, kind, line).await?;
            let failure = self.with(|s| {
                s.action_failures
                    .get_mut(&(worker.to_string(), req.action.clone()))
                    .and_then(VecDeque::pop_front)
            });
            if let Some(e) = failure {
                return Err(e);
            }
            while self.peek(|s| s.held_actions.contains(&req.action)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.with(|s| s.actions.push((worker.to_string(), req.clone())));
            let version = self.peek(|s| s.version.clone());
            let version = version.unwrap_or_else(|| serde_json::json!({"ref": "v1"}));
            let key = (worker.to_string(), req.action.clone());
            let (exit, pieces) = self.with(|s| {
                (
                    s.action_exits.get_mut(&key).and_then(VecDeque::pop_front),
                    s.action_stderr.get_mut(&key).and_then(VecDeque::pop_front),
                )
            });
            for piece in pieces.unwrap_or_default() {
                // The step gone: the rest is dropped, as the real one does.
                let _ = stderr.send(piece).await;
            }
            drop(stderr);
            self.after_output(&key).await?;
            if let Some((code, failure)) = exit.filter(|(c, _)| *c != 0) {
                return Ok(ResourceActionResult {
                    exit_code: code,
                    response: None,
                    // As an older worker answers: stderr in the result.
                    stderr: format!("{} failed\n", req.action),
                    failure: Some(failure),
                });
            }
            Ok(match req.action.as_str() {
                "check" => ResourceActionResult {
                    exit_code: 0,
                    response: Some(serde_json::json!([version])),
                    stderr: String::new(),
                    failure: None,
                },
                // out: a new version each time, numbered across the fleet.
                "out" => {
                    let n =
                        self.peek(|s| s.actions.iter().filter(|(_, a)| a.action == "out").count());
                    ResourceActionResult {
                        exit_code: 0,
                        response: Some(
                            serde_json::json!({ "version": {"ref": format!("out-{n}")} }),
                        ),
                        stderr: String::new(),
                        failure: None,
                    }
                }
                _ => ResourceActionResult {
                    exit_code: 0,
                    response: Some({
                        let mut answer = serde_json::json!({
                            "version": self
                                .peek(|s| s.in_answer.clone())
                                .unwrap_or_else(|| req.request["version"].clone())
                        });
                        if let Some(metadata) = self.peek(|s| s.in_metadata.clone()) {
                            answer["metadata"] = metadata;
                        }
                        answer
                    }),
                    stderr: String::new(),
                    failure: None,
                },
            })
        }
        .boxed()
    }

    fn read_file<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, CallError>> {
        async move {
            let line = format!("read_file {worker} {path}");
            self.enter(worker, CallKind::ReadFile, line).await?;
            self.peek(|s| {
                if !s.volumes.get(worker).is_some_and(|v| v.contains(handle)) {
                    return Err(CallError::refused(
                        404,
                        "not_found",
                        format!("volume {handle:?} not found"),
                    ));
                }
                s.files.get(path).cloned().ok_or_else(|| {
                    CallError::refused(
                        422,
                        hangar_core::engine::FILE_UNREADABLE,
                        format!("path {path:?} not found in the volume"),
                    )
                })
            })
        }
        .boxed()
    }

    fn create_container<'a>(
        &'a self,
        worker: &'a str,
        spec: &'a ContainerSpec,
    ) -> BoxFuture<'a, Result<Container, CallError>> {
        async move {
            let line = format!("create_container {worker} {}", spec.path);
            self.enter(worker, CallKind::CreateContainer, line).await?;
            let ending = self.with(|s| {
                let held = s.volumes.get(worker).cloned().unwrap_or_default();
                if let Some(m) = spec.mounts.iter().find(|m| !held.contains(&m.volume)) {
                    return Err(CallError::refused(
                        404,
                        "not_found",
                        format!("no volume {}", m.volume),
                    ));
                }
                let queued = s.next_endings.get_mut(worker).and_then(VecDeque::pop_front);
                let ending = if s.hold_containers || s.held_programs.contains(&spec.path) {
                    None
                } else {
                    Some(queued.unwrap_or_else(|| {
                        s.endings
                            .get(&spec.path)
                            .cloned()
                            .unwrap_or(Ending::Exit(0))
                    }))
                };
                s.containers
                    .insert((worker.to_string(), spec.handle.clone()), ending.clone());
                s.specs.push((worker.to_string(), spec.clone()));
                Ok(ending)
            })?;
            Ok(container_view(&spec.handle, &ending))
        }
        .boxed()
    }

    fn wait_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Container, CallError>> {
        async move {
            let line = format!("wait_container {worker}");
            self.enter(worker, CallKind::WaitContainer, line).await?;
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let changed = self.changed.notified();
                let ending = self.container(worker, handle)?;
                if ending.is_some() || tokio::time::Instant::now() >= deadline {
                    return Ok(container_view(handle, &ending));
                }
                tokio::select! {
                    _ = changed => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
        }
        .boxed()
    }

    fn container_logs<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        offset: u64,
    ) -> BoxFuture<'a, Result<LogStream, CallError>> {
        async move {
            let line = format!("container_logs {worker}");
            self.enter(worker, CallKind::ContainerLogs, line).await?;
            self.container(worker, handle)?;
            // The log is one line; the stream ends once the container has.
            let text = format!("output of {handle}\n").into_bytes();
            let rest = text
                .get(usize::try_from(offset).unwrap_or(usize::MAX)..)
                .unwrap_or_default()
                .to_vec();
            let fake = self.clone();
            let (worker, handle) = (worker.to_string(), handle.to_string());
            let stream =
                futures_util::stream::once(
                    async move { Ok::<Bytes, CallError>(Bytes::from(rest)) },
                )
                .chain(futures_util::stream::once(async move {
                    loop {
                        let changed = fake.changed.notified();
                        match fake.container(&worker, &handle) {
                            Ok(Some(_)) | Err(_) => return Ok(Bytes::new()),
                            Ok(None) => {}
                        }
                        tokio::select! {
                            _ = changed => {}
                            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                        }
                    }
                }));
            Ok(stream.boxed())
        }
        .boxed()
    }

    fn destroy_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        async move {
            let line = format!("destroy_container {worker}");
            self.enter(worker, CallKind::DestroyContainer, line).await?;
            self.with(|s| {
                s.containers
                    .remove(&(worker.to_string(), handle.to_string()))
            });
            Ok(())
        }
        .boxed()
    }
}
