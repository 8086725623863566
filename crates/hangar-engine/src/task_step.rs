//! A task step: placed on a worker, its inputs, outputs and caches made
//! there as volumes, its command run in a container, watched until it ends,
//! and retried elsewhere when the infrastructure failed it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hangar_api::containers::{ContainerExit, ContainerSpec, Mount, Runtime};
use hangar_core::backoff::{Backoff, Change};
use hangar_core::build::{
    full_disk_failure, BuildEventKind, StepFailure, StepKind, StepState, WorkerSeen,
};
use hangar_core::caches::{task_cache_key, task_cache_scope};
use hangar_core::engine::{
    call_failure, import_failure, input_call_failure, read_file_failure, InputCheck, Observed,
};
use hangar_core::placement::Requirement;
use hangar_core::plan::TaskStep;
use hangar_core::task::TaskConfig;
use hangar_core::volumes::OwnerKind;
use hangar_store::StepRecord;

use crate::caches::Reuse;
use crate::context::{give_up, stored_outputs, BuildContext, Interrupted, StepEnd};
use crate::halt::{split, Attempt, Halt};
use crate::placement::{place_waiting, Wants};
use crate::step_inputs::{input_usable, op_failure};
use crate::{logs, watch, OpError, Source};

/// How often a running step looks at its worker's state.
const WATCH_EVERY: Duration = Duration::from_secs(2);
/// How long a finished container's removal may take before it is left to
/// the worker's next report.
const DESTROY_WITHIN: Duration = Duration::from_secs(10);

pub(crate) async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &TaskStep,
) -> Result<StepEnd, Interrupted> {
    let (mut record, done) = ctx.resume_step(step_id, &step.task, StepKind::Task).await;
    if let Some(end) = done {
        return Ok(end);
    }
    // A config in a file of an artifact is read now, on every run (also
    // when a resumed run re-attaches: the container's outputs need it).
    let from_file;
    let step = match &step.file {
        None => step,
        Some(file) => {
            match crate::artifact_files::task_from_file(ctx, step_id, step, file).await? {
                Ok(resolved) => {
                    from_file = resolved;
                    &from_file
                }
                Err((state, why)) => return Ok(give_up(ctx, &mut record, state, None, why).await),
            }
        }
    };
    let config = match step.parse_config() {
        Ok(c) => c,
        Err(e) => {
            return Ok(give_up(ctx, &mut record, StepState::Failed, None, e.to_string()).await)
        }
    };
    let max_attempts = step
        .infrastructure_attempts
        .unwrap_or(hangar_core::plan::DEFAULT_ATTEMPTS)
        .max(1);
    let mut avoid = BTreeSet::new();

    // A previous run of this build left the step running: re-attach to its
    // container rather than start it again.
    let mut outcome = None;
    if let (StepState::Running, Some(worker), Some(handle)) = (
        record.state,
        record.worker.clone(),
        record.container.clone(),
    ) {
        ctx.log(
            Some(step_id),
            BuildEventKind::Infra,
            &format!("re-attaching to container {handle} on worker {worker}"),
        )
        .await;
        outcome = Some(split(
            reattach(ctx, step_id, &mut record, &worker, &handle).await,
        )?);
    }
    loop {
        let result = match outcome.take() {
            Some(r) => r,
            None => {
                record.state = StepState::Running;
                record.started_at.get_or_insert(ctx.engine.now());
                ctx.save(&record).await;
                let line = if record.attempt > 1 {
                    format!(
                        "starting task {} (attempt {} of {max_attempts})",
                        step.task, record.attempt
                    )
                } else {
                    format!("starting task {}", step.task)
                };
                ctx.log(Some(step_id), BuildEventKind::Step, &line).await;
                split(attempt(ctx, step_id, step, &config, &mut record, &avoid).await)?
            }
        };
        match result {
            Ok(outputs) => {
                for (name, handle) in &outputs {
                    ctx.add_artifact(name, handle);
                }
                record.outputs = outputs_json(&outputs);
                record.state = StepState::Succeeded;
                record.exit_code = Some(0);
                record.finished_at = Some(ctx.engine.now());
                ctx.save(&record).await;
                ctx.log(
                    Some(step_id),
                    BuildEventKind::Step,
                    &format!("task {} succeeded", step.task),
                )
                .await;
                return Ok(StepEnd {
                    state: StepState::Succeeded,
                    exit_code: Some(0),
                    error: None,
                });
            }
            Err(failure) => {
                let next = ctx.after_failure(&mut record, failure, max_attempts, &mut avoid);
                if let Some(end) = next.await? {
                    return Ok(end);
                }
            }
        }
    }
}

/// Volumes made for one attempt, released when it ends.
#[derive(Default)]
struct Scratch {
    release: Vec<String>,
}

/// What a task attempt that succeeded leaves: its outputs, artifact name
/// → volume handle.
type Outputs = BTreeMap<String, String>;

/// The failure making a step's copy of an input brings; when the worker
/// holding the input answers that it does not have it, its row is marked
/// missing at once, so the retry fetches it anew rather than ask for it
/// again (and fail again) until the worker's next report.
async fn input_failure(
    engine: &crate::Engine,
    vol: &hangar_store::VolumeRecord,
    step_worker: &str,
    e: OpError,
) -> StepFailure {
    let OpError::Worker { worker, error } = &e else {
        return op_failure(step_worker, e);
    };
    let (failure, mark_missing) = input_call_failure(&vol.worker, &vol.handle, worker, error);
    if mark_missing {
        if let Err(err) = engine
            .store()
            .mark_volume_missing(&vol.handle, engine.now())
            .await
        {
            tracing::warn!(handle = %vol.handle, error = %err, "cannot mark a lost input missing");
        }
    }
    failure
}

fn outputs_json(outputs: &BTreeMap<String, String>) -> String {
    serde_json::to_string(outputs).unwrap_or_else(|_| "{}".into())
}

async fn attempt(
    ctx: &BuildContext,
    step_id: &str,
    step: &TaskStep,
    config: &TaskConfig,
    record: &mut StepRecord,
    avoid: &BTreeSet<String>,
) -> Attempt<Outputs> {
    let engine = &ctx.engine;
    // What the step reads: artifacts by name, then caches and image.
    let mut inputs = Vec::new();
    for input in &config.inputs {
        let artifact = step.input_artifact(&input.name);
        match ctx.artifact(artifact) {
            Some(handle) => match input_usable(ctx, &handle).await {
                InputCheck::Usable => inputs.push((input, handle)),
                InputCheck::Lost { worker } => {
                    let lost_on = worker.unwrap_or_else(|| "an unknown worker".into());
                    // The artifact went with its worker. One a get step of
                    // this build made is fetched again elsewhere.
                    let Some(get) = ctx.producers.get(artifact) else {
                        Err(StepFailure::VolumeLost { worker: lost_on, handle })?
                    };
                    ctx.log(
                        Some(step_id),
                        BuildEventKind::Infra,
                        &format!("input {} was on worker {lost_on}, which is gone or stalled; fetching {artifact} again", input.name),
                    )
                    .await;
                    let mut skip = avoid.clone();
                    skip.insert(lost_on);
                    let fresh = crate::get_step::refetch(ctx, step_id, get, &skip).await?;
                    inputs.push((input, fresh));
                }
            },
            None if input.optional => {}
            None => Err(StepFailure::Invalid {
                reason: format!(
                    "input {}: no artifact named {artifact} (no earlier step produced it and none was uploaded)",
                    input.name
                ),
            })?,
        }
    }
    let image = match &step.image {
        Some(name) => match ctx.artifact(name) {
            Some(h) => Some(h),
            None => Err(StepFailure::Invalid {
                reason: format!("image: no artifact named {name}"),
            })?,
        },
        None => None,
    };
    // The task's `image_resource` (or the image a `docker://` rootfs_uri
    // names), fetched on the task's worker when the step gives no image of
    // its own (a step's `image` wins, as in Concourse).
    let rootfs_image = config.rootfs_image();
    let mut image_fetch = match (
        &step.image,
        config.image_resource.as_ref().or(rootfs_image.as_ref()),
    ) {
        (None, Some(resource)) => Some(image_fetch(resource)),
        _ => None,
    };
    // An image of a custom type: its type's images are fetched on the
    // task's worker first, and the image's `in` runs in the outermost, as
    // a get of that type does. Checked by web; a stored plan whose type no
    // longer resolves is the build's own error.
    let image_chain = match &image_fetch {
        Some((fetch, _)) => {
            match hangar_core::resource_types::chain(&ctx.resource_types, &fetch.resource_type) {
                Ok(chain) => chain,
                Err(e) => Err(StepFailure::Invalid { reason: e.0 })?,
            }
        }
        None => vec![],
    };
    if let (Some((fetch, tags)), Some(outer)) = (image_fetch.as_mut(), image_chain.first()) {
        if let serde_json::Value::Object(source) = &fetch.source {
            fetch.source = serde_json::Value::Object(outer.apply_defaults(source));
        }
        tags.extend(image_chain.iter().flat_map(|t| t.tags.iter().cloned()));
    }
    let scope = task_cache_scope(&ctx.team, &ctx.job, &step.task);
    let cache_keys: Vec<(String, String)> = config
        .caches
        .iter()
        .map(|c| (c.path.clone(), task_cache_key(&scope, &c.path)))
        .collect();
    let wants = Wants {
        requirement: Requirement {
            platform: config.platform.clone(),
            // The image is fetched on the task's worker, so that worker
            // must carry the image's tags as well as the step's.
            tags: step
                .tags
                .iter()
                .chain(image_fetch.iter().flat_map(|(_, tags)| tags))
                .cloned()
                .collect(),
            team: None,
            wants: vec![],
            avoid: avoid.clone(),
            memory: config.memory_limit_bytes(),
            // A privileged task runs only where the worker allows it, as
            // does a privileged custom type fetching its image.
            privileged: step.privileged || image_chain.iter().any(|t| t.privileged),
        },
        // The base type at the root of the image's type.
        resource_type: image_fetch.as_ref().map(|(f, _)| {
            image_chain
                .last()
                .map_or(f.resource_type.clone(), |t| t.resource_type.clone())
        }),
        volumes: inputs
            .iter()
            .map(|(_, h)| h.clone())
            .chain(image.clone())
            .collect(),
        caches: cache_keys
            .iter()
            .map(|(_, k)| ("task-cache", k.clone()))
            .chain(
                image_fetch
                    .as_ref()
                    .and_then(|(f, _)| f.known_key())
                    .map(|k| ("resource-cache", k)),
            )
            .collect(),
    };
    let worker = place_waiting(ctx, step_id, wants).await??;
    let Observed::Present(at_start) = watch::seen(engine, &worker).await else {
        Err(StepFailure::WorkerGone { worker })?
    };
    if let Some((fetch, _)) = image_fetch.as_mut().filter(|_| !image_chain.is_empty()) {
        let images =
            crate::get_step::fetch_type_images(ctx, step_id, &worker, &at_start, &image_chain);
        fetch.image = Some(images.await?);
    }
    let image = match &image_fetch {
        Some((fetch, _)) => {
            ctx.log(
                Some(step_id),
                BuildEventKind::Step,
                &format!("fetching {} on worker {worker}", fetch.label),
            )
            .await;
            match split(crate::get_step::fetch_on(ctx, step_id, &worker, &at_start, fetch).await)? {
                Ok(fetched) => {
                    let line = if fetched.cached {
                        format!(
                            "{}: version {} found in the cache on worker {worker}",
                            fetch.label, fetched.version
                        )
                    } else {
                        format!(
                            "{}: fetched version {} on worker {worker}",
                            fetch.label, fetched.version
                        )
                    };
                    ctx.log(Some(step_id), BuildEventKind::Step, &line).await;
                    Some(fetched.handle)
                }
                Err(f) => {
                    // Said here: the step's end names the failure, not that
                    // it was the image's fetch and not the task.
                    ctx.log(
                        Some(step_id),
                        BuildEventKind::Step,
                        &format!(
                            "{}: cannot fetch it on worker {worker}: {}",
                            fetch.label,
                            f.describe()
                        ),
                    )
                    .await;
                    Err(f)?
                }
            }
        }
        None => image,
    };

    let placed = Placed {
        step_id,
        step,
        config,
        worker: &worker,
        at_start: &at_start,
        inputs,
        image,
        cache_keys,
    };
    let mut scratch = Scratch::default();
    let result = prepare_and_run(ctx, &placed, record, &mut scratch).await;
    for handle in scratch.release {
        engine.release_volume(&handle).await;
    }
    result
}

/// How a task's `image_resource` is fetched, and the worker tags it asks
/// for. Its log label names the image: its `name` if given, its type, and
/// the `repository` and `tag` of its source when it has them (as
/// `registry-image` sources do).
fn image_fetch(
    resource: &hangar_core::task::ImageResource,
) -> (crate::get_step::Fetch, Vec<String>) {
    let text = |key: &str| {
        resource
            .source
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let mut what = resource.type_name.clone();
    match (text("repository"), text("tag")) {
        (Some(repo), Some(tag)) => what.push_str(&format!(" {repo}:{tag}")),
        (Some(repo), None) => what.push_str(&format!(" {repo}")),
        _ => {}
    }
    let label = match &resource.name {
        Some(name) => format!("image {name} ({what})"),
        None => format!("image ({what})"),
    };
    let source = serde_json::Value::Object(
        resource
            .source
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    let fetch = crate::get_step::Fetch {
        resource_type: resource.type_name.clone(),
        source,
        // Empty params are no params, as for a get step's cache key.
        params: resource
            .params
            .as_ref()
            .filter(|p| !p.is_empty())
            .map_or(serde_json::Value::Null, |p| {
                serde_json::Value::Object(p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            }),
        version: resource.version.as_ref().map(|v| {
            serde_json::Value::Object(
                v.iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            )
        }),
        label,
        image: None,
        reuse_recent_check: true,
        needs_metadata: false,
    };
    (fetch, resource.tags.clone())
}

/// One attempt of a task step once placed: what it runs, on which worker
/// (as web saw it then), and what it reads there.
struct Placed<'a> {
    step_id: &'a str,
    step: &'a TaskStep,
    config: &'a TaskConfig,
    worker: &'a str,
    at_start: &'a WorkerSeen,
    inputs: Vec<(&'a hangar_core::task::TaskInput, String)>,
    image: Option<String>,
    /// (path, task-cache key) of each cache.
    cache_keys: Vec<(String, String)>,
}

async fn prepare_and_run(
    ctx: &BuildContext,
    placed: &Placed<'_>,
    record: &mut StepRecord,
    scratch: &mut Scratch,
) -> Attempt<Outputs> {
    let (step_id, config, worker, at_start) = (
        placed.step_id,
        placed.config,
        placed.worker,
        placed.at_start,
    );
    let engine = &ctx.engine;
    let watched = [(worker, at_start)];
    let (mounts, outputs, runtime, rootfs) = ctx
        .call(&watched, prepare_volumes(ctx, placed, scratch))
        .await??;
    let (path, args) = match task_command(ctx, placed, rootfs.as_deref()).await {
        Ok(command) => command,
        Err(halt) => {
            scratch.release.extend(outputs.values().cloned());
            return Err(halt);
        }
    };
    let handle = uuid::Uuid::new_v4().to_string();
    if let Err(e) = engine
        .store()
        .create_container_row(
            &handle,
            worker,
            Some(ctx.build_id),
            Some(step_id),
            engine.now(),
        )
        .await
    {
        Err(StepFailure::WorkerGone {
            worker: format!("{worker} ({e})"),
        })?
    }
    record.worker = Some(worker.to_string());
    record.container = Some(handle.clone());
    record.log_offset = 0;
    // Saved before the container starts, so a resumed build knows which
    // volumes the container writes its outputs to.
    record.outputs = outputs_json(&outputs);
    ctx.save(record).await;
    let spec = ContainerSpec {
        handle: handle.clone(),
        runtime,
        rootfs_volume: rootfs,
        path,
        args,
        env: config.params.clone(),
        dir: config.run.dir.clone(),
        mounts,
        memory_limit_bytes: config.memory_limit_bytes(),
        cpu_shares: config.cpu_shares(),
        user: config.run_user().map(str::to_string),
        privileged: placed.step.privileged,
    };
    // Stopped while the worker starts it (`?`): the row and the step record
    // name the container, so the resumed build re-attaches to it (or finds
    // it lost and retries).
    let created = ctx
        .call(&watched, engine.workers().create_container(worker, &spec))
        .await;
    let failure = match created {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(call_failure(worker, &e)),
        Err(Halt::Failed(f)) => Some(f),
        Err(Halt::Interrupted) => return Err(Halt::Interrupted),
    };
    if let Some(failure) = failure {
        // A row left behind is collected as an abandoned creation.
        if let Err(e) = engine.store().delete_container_row(&handle).await {
            tracing::warn!(%handle, error = %e, "cannot delete the row of a container never created");
        }
        for h in outputs.values() {
            scratch.release.push(h.clone());
        }
        Err(failure)?
    }
    if let Err(e) = engine
        .store()
        .set_container_state(
            &handle,
            hangar_core::containers::ContainerState::Creating,
            hangar_core::containers::ContainerState::Created,
        )
        .await
    {
        tracing::warn!(%handle, error = %e, "cannot record the container as created");
    }
    ctx.log(
        Some(step_id),
        BuildEventKind::Step,
        &format!("running on worker {worker} ({runtime})"),
    )
    .await;
    // Interrupted (`?`), the container runs on; the next run of this build
    // re-attaches.
    let exit = split(follow(ctx, step_id, worker, &handle, at_start, 0).await)?;
    finish_attempt(ctx, worker, &handle, exit, outputs, scratch).await
}

type Prepared = (
    Vec<Mount>,
    BTreeMap<String, String>,
    Runtime,
    Option<String>,
);

/// An empty task cache volume on `worker`.
async fn make_cache(
    engine: &crate::Engine,
    worker: &str,
    key: &str,
) -> Result<String, StepFailure> {
    engine
        .make_volume(
            worker,
            Source::Empty,
            OwnerKind::TaskCache,
            Some(key.to_string()),
        )
        .await
        .map(|v| v.handle)
        .map_err(|e| op_failure(worker, e))
}

/// An artifact as a volume of a step on `worker` (seen as `at_start`): a
/// copy-on-write child where the artifact lives, else a copy streamed from
/// the worker that has it, watched on both ends. Its handle; the caller
/// releases it. An input its worker says it lacks is marked missing, so
/// the retry fetches it anew. Task inputs and a put's inputs both come
/// this way.
pub(crate) async fn input_volume(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    at_start: &WorkerSeen,
    name: &str,
    handle: &str,
) -> Result<String, StepFailure> {
    let engine = &ctx.engine;
    let Ok(Some(vol)) = engine.store().get_volume(handle).await else {
        return Err(StepFailure::VolumeLost {
            worker: worker.to_string(),
            handle: handle.to_string(),
        });
    };
    let child = if vol.worker == worker {
        engine
            .make_volume(
                worker,
                Source::CopyOnWrite {
                    parent: vol.handle.clone(),
                },
                OwnerKind::Container,
                None,
            )
            .await
    } else {
        ctx.log(
            Some(step_id),
            BuildEventKind::Infra,
            &format!(
                "copying input {name} from worker {} to {worker}",
                vol.worker
            ),
        )
        .await;
        let Observed::Present(source_seen) = watch::seen(engine, &vol.worker).await else {
            return Err(StepFailure::VolumeLost {
                worker: vol.worker.clone(),
                handle: vol.handle.clone(),
            });
        };
        // Watched on both ends; the caller's call() around the step's
        // preparation observes the build's cancellation.
        let copy = engine.copy_volume_between_workers(&vol, worker, OwnerKind::Container, None);
        watch::guarded(
            engine,
            &[(vol.worker.as_str(), &source_seen), (worker, at_start)],
            copy,
        )
        .await?
    };
    match child {
        Ok(c) => Ok(c.handle),
        Err(e) => Err(input_failure(engine, &vol, worker, e).await),
    }
}

/// Makes the step's volumes on its worker: inputs, outputs, caches, image.
async fn prepare_volumes(
    ctx: &BuildContext,
    placed: &Placed<'_>,
    scratch: &mut Scratch,
) -> Result<Prepared, StepFailure> {
    let Placed {
        step_id,
        step,
        config,
        worker,
        at_start,
        ..
    } = *placed;
    let engine = &ctx.engine;
    let mut mounts = Vec::new();
    // By mount path: an input named twice is mounted at each of its paths.
    let mut input_volumes: BTreeMap<&str, String> = BTreeMap::new();
    // Inputs: a copy-on-write child of the artifact where it lives, else a
    // copy streamed from the worker that has it.
    for (input, handle) in &placed.inputs {
        let child = input_volume(ctx, step_id, worker, at_start, &input.name, handle).await?;
        scratch.release.push(child.clone());
        input_volumes.insert(input.mount_path(), child.clone());
        mounts.push(Mount {
            volume: child,
            path: input.mount_path().to_string(),
            read_only: false,
        });
    }
    let mut outputs = BTreeMap::new();
    for output in &config.outputs {
        // An output at an input's path is that input, changed in place: its
        // copy becomes the output instead of being released.
        let shared = config
            .input_at_output_path(output)
            .and_then(|input| input_volumes.get(input.mount_path()));
        if let Some(handle) = shared {
            scratch.release.retain(|h| h != handle);
            outputs.insert(
                step.output_artifact(&output.name).to_string(),
                handle.clone(),
            );
            continue;
        }
        match engine
            .make_volume(worker, Source::Empty, OwnerKind::Container, None)
            .await
        {
            Ok(v) => {
                outputs.insert(
                    step.output_artifact(&output.name).to_string(),
                    v.handle.clone(),
                );
                mounts.push(Mount {
                    volume: v.handle,
                    path: output.mount_path().to_string(),
                    read_only: false,
                });
            }
            Err(e) => return Err(op_failure(worker, e)),
        }
    }
    for (path, key) in &placed.cache_keys {
        let ttl = config
            .caches
            .iter()
            .find(|c| &c.path == path)
            .and_then(|c| c.ttl());
        let present = crate::caches::reuse_task_cache(engine, key, worker, ttl).await;
        let handle = match present {
            Reuse::Present(h) => {
                ctx.log(
                    Some(step_id),
                    BuildEventKind::Infra,
                    &format!("reusing cache {path} on worker {worker}"),
                )
                .await;
                h
            }
            Reuse::Expired { idle } => {
                ctx.log(
                    Some(step_id),
                    BuildEventKind::Infra,
                    &format!(
                        "cache {path} on worker {worker} was unused for {}, longer than its ttl: starting it empty",
                        hangar_core::lifecycle::human_ms(idle.as_millis() as i64)
                    ),
                )
                .await;
                make_cache(engine, worker, key).await?
            }
            Reuse::Missing => make_cache(engine, worker, key).await?,
        };
        mounts.push(Mount {
            volume: handle,
            path: path.clone(),
            read_only: false,
        });
    }
    let (runtime, rootfs) = match (placed.image.clone(), &config.rootfs_uri) {
        (Some(image), _) => {
            match engine
                .make_volume(
                    worker,
                    Source::CopyOnWrite { parent: image },
                    OwnerKind::Container,
                    None,
                )
                .await
            {
                Ok(v) => {
                    scratch.release.push(v.handle.clone());
                    (Runtime::Runc, Some(v.handle))
                }
                Err(e) => return Err(op_failure(worker, e)),
            }
        }
        (None, Some(uri)) => {
            let path = uri.strip_prefix("raw://").unwrap_or(uri).to_string();
            match engine
                .make_volume(
                    worker,
                    Source::Import { path: path.clone() },
                    OwnerKind::Container,
                    None,
                )
                .await
            {
                Ok(v) => {
                    scratch.release.push(v.handle.clone());
                    (Runtime::Runc, Some(v.handle))
                }
                Err(OpError::Worker { error, .. }) => {
                    return Err(import_failure(uri, worker, &error))
                }
                Err(e) => return Err(op_failure(worker, e)),
            }
        }
        (None, None) => (Runtime::Process, None),
    };

    Ok((mounts, outputs, runtime, rootfs))
}

/// The program and arguments the task runs: its `run.path` and `args`, or
/// without a `run.path` its image's `ENTRYPOINT`/`CMD` (then `args`), read
/// from the image's `metadata.json` on the task's worker, as Concourse
/// reads them.
async fn task_command(
    ctx: &BuildContext,
    placed: &Placed<'_>,
    rootfs: Option<&str>,
) -> Attempt<(String, Vec<String>)> {
    let config = placed.config;
    if !config.runs_image_entrypoint() {
        return Ok((config.run.path.clone(), config.run.args.clone()));
    }
    // Only an image (the step's, or one fetched) has a config; a raw root
    // filesystem has none.
    let Some(volume) = rootfs.filter(|_| placed.image.is_some()) else {
        Err(StepFailure::Invalid {
            reason: format!("run.path: {}", hangar_core::task::NO_EXECUTABLE),
        })?
    };
    let worker = placed.worker;
    let read = ctx
        .call(
            &[(worker, placed.at_start)],
            ctx.engine
                .workers()
                .read_file(worker, volume, IMAGE_METADATA),
        )
        .await?
        .map_err(|e| read_file_failure(worker, volume, NO_RUN_PATH, &e).0)?;
    let command = hangar_core::task::image_command(&read, &config.run.args).map_err(|why| {
        StepFailure::Invalid {
            reason: format!("run.path: {why}"),
        }
    })?;
    Ok(command)
}

/// The image config in Concourse's image layout, at the top of the image.
const IMAGE_METADATA: &str = "metadata.json";

/// What a failed read of [`IMAGE_METADATA`] is about.
const NO_RUN_PATH: &str =
    "run.path: not given, and the image's metadata.json (its ENTRYPOINT/CMD) cannot be read";

/// Ends an attempt: the container goes (or, when the task's own program
/// failed, is kept a while for `intercept`), and its outputs become
/// artifacts or are released.
async fn finish_attempt(
    ctx: &BuildContext,
    worker: &str,
    handle: &str,
    exit: Result<ContainerExit, StepFailure>,
    outputs: BTreeMap<String, String>,
    scratch: &mut Scratch,
) -> Attempt<Outputs> {
    let failure = match exit {
        Ok(exit) => exit_failure(&exit),
        Err(f) => Some(f),
    };
    // A worker that failed the step will not answer; its next report (or
    // its state-lost registration) settles the container instead.
    let worker_failed = failure.as_ref().is_some_and(|f| f.worker_may_not_answer());
    let kept = match &failure {
        Some(f) if f.is_the_programs_own() => keep_container(ctx, handle).await,
        _ => false,
    };
    if !worker_failed && !kept {
        let destroy = ctx.engine.workers().destroy_container(worker, handle);
        // Stopped here, the resumed build re-attaches, finds the container
        // exited and finishes the attempt again.
        tokio::select! {
            _ = ctx.stop.cancelled() => return Err(Halt::Interrupted),
            destroyed = tokio::time::timeout(DESTROY_WITHIN, destroy) => match destroyed {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(%handle, error = %e, "could not destroy the container now")
                }
                Err(_) => tracing::debug!(%handle, "destroying the container timed out"),
            }
        }
    }
    if !kept {
        if let Err(e) = ctx.engine.store().delete_container_row(handle).await {
            // The garbage collector finds the row and destroys it later.
            tracing::warn!(%handle, error = %e, "cannot delete the finished container's row");
        }
    }
    match failure {
        None => {
            for h in outputs.values() {
                let owner = format!("build/{}", ctx.build_id);
                if let Err(e) = ctx
                    .engine
                    .store()
                    .set_volume_owner(h, OwnerKind::Artifact, Some(&owner))
                    .await
                {
                    tracing::warn!(handle = %h, error = %e, "cannot mark an output as an artifact");
                }
            }
            Ok(outputs)
        }
        Some(f) => {
            // A kept container's volumes are released too: its worker keeps
            // on disk every volume a container it has mounts, and destroys
            // them once the container is collected.
            scratch.release.extend(outputs.into_values());
            Err(f)?
        }
    }
}

/// Keeps a failed task's container for `intercept`: a job build's until
/// its job's next build starts or the configured while has passed, a
/// one-off build's for its grace period. False when not kept (keeping is
/// off, or the row cannot be marked): then it goes now.
async fn keep_container(ctx: &BuildContext, handle: &str) -> bool {
    let config = ctx.engine.config();
    let keep_for = if ctx.job_build.is_some() {
        config.keep_failed_containers_for
    } else {
        config.keep_failed_one_off_containers_for
    };
    if keep_for.is_zero() {
        return false;
    }
    let until = ctx.engine.now() + keep_for.as_millis() as i64;
    match ctx.engine.store().keep_container(handle, until).await {
        Ok(()) => {
            tracing::info!(%handle, build = ctx.build_id, until, "the failed task's container is kept for intercept");
            true
        }
        Err(e) => {
            tracing::warn!(%handle, error = %e, "cannot keep the failed task's container; destroying it");
            false
        }
    }
}

/// The failure an exit means, if any.
pub(crate) fn exit_failure(exit: &ContainerExit) -> Option<StepFailure> {
    if exit.oom_killed {
        return Some(StepFailure::OutOfMemory {
            limit_bytes: exit.memory_limit_bytes,
        });
    }
    match (exit.code, exit.signal) {
        (Some(0), _) => None,
        (Some(code), _) => Some(StepFailure::Exited { code }),
        (None, Some(signal)) => Some(StepFailure::Signaled { signal }),
        (None, None) => Some(StepFailure::ContainerLost {
            worker: "its worker".into(),
            handle: "the step's container".into(),
        }),
    }
}

/// Follows a running container: its log into the build log, its worker's
/// state, until it exits or its worker fails it.
pub(crate) async fn follow(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    handle: &str,
    at_start: &WorkerSeen,
    offset: i64,
) -> Attempt<ContainerExit> {
    let pump = logs::pump(ctx, step_id, worker, handle, offset);
    tokio::pin!(pump);
    let mut pumped = false;
    // A worker that answers wait with an error at once (its disk full, its
    // state unreadable) must not be asked again at once: the loop would
    // spin, on web and on the worker, for as long as the error lasts.
    let mut errors = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let workers = ctx.engine.workers();
    // Since when the worker has left every wait unanswered (while its
    // heartbeats say it is alive).
    let mut unanswered_since: Option<tokio::time::Instant> = None;
    let unanswered_for = ctx.engine.config().unanswered_for;
    loop {
        let wait = tokio::time::timeout(
            WATCH_EVERY + Duration::from_secs(3),
            workers.wait_container(worker, handle, WATCH_EVERY),
        );
        let waited = alongside(ctx, &mut pump, &mut pumped, wait).await?;
        if waited.is_ok() {
            unanswered_since = None;
        } else {
            let since = *unanswered_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= unanswered_for {
                tracing::warn!(%worker, %handle, "the worker heartbeats but leaves the step's container unanswered; retrying elsewhere");
                Err(StepFailure::WorkerUnreachable {
                    worker: worker.to_string(),
                    reason: format!(
                        "it heartbeats but answered nothing about the step's container for {}",
                        hangar_core::lifecycle::human_ms(unanswered_for.as_millis() as i64)
                    ),
                })?
            }
        }
        if !matches!(waited, Ok(Err(_))) {
            if let Change::Recovered { failures } = errors.succeeded() {
                tracing::info!(%worker, %handle, failures, "the worker answers for the container again");
            }
        }
        let mut pause = None;
        match waited {
            Ok(Ok(c)) => {
                if let Some(mut exit) = c.exit {
                    // The worker ends the log stream once the container
                    // exited and its log is drained.
                    if !pumped
                        && tokio::time::timeout(Duration::from_secs(10), &mut pump)
                            .await
                            .is_err()
                    {
                        tracing::debug!(%handle, "the container's log was not drained within 10s");
                    }
                    if let Some(f) = full_disk_failure(worker, exit.code, exit.disk_full) {
                        Err(f)?
                    }
                    if exit.lost {
                        Err(StepFailure::ContainerLost {
                            worker: worker.to_string(),
                            handle: handle.to_string(),
                        })?
                    }
                    exit.lost = false;
                    return Ok(exit);
                }
            }
            Ok(Err(e)) if e.is_not_found() => {
                let changed = alongside(
                    ctx,
                    &mut pump,
                    &mut pumped,
                    watch::check(&ctx.engine, worker, at_start),
                )
                .await?;
                Err(changed.unwrap_or_else(|| StepFailure::ContainerLost {
                    worker: worker.to_string(),
                    handle: handle.to_string(),
                }))?
            }
            Ok(Err(e)) => {
                let (delay, change) = errors.failed();
                if change == Change::StartedFailing {
                    tracing::warn!(%worker, %handle, error = %e, "cannot wait for the container; retrying with backoff");
                }
                pause = Some(delay);
            }
            // Slow: the worker's state decides.
            Err(_) => {}
        }
        let changed = alongside(
            ctx,
            &mut pump,
            &mut pumped,
            watch::check(&ctx.engine, worker, at_start),
        )
        .await?;
        if let Some(f) = changed {
            Err(f)?
        }
        if let Some(delay) = pause {
            alongside(ctx, &mut pump, &mut pumped, tokio::time::sleep(delay)).await?;
        }
    }
}

/// Awaits `work` while the log pump goes on and the build's cancellation
/// is watched. The pump must be polled meanwhile: suspended in the middle
/// of a log write, it can hold the database's only connection (SQLite), and
/// `work` reading the database would then wait on it for ever.
async fn alongside<T>(
    ctx: &BuildContext,
    pump: &mut std::pin::Pin<&mut impl std::future::Future<Output = i64>>,
    pumped: &mut bool,
    work: impl std::future::Future<Output = T>,
) -> Result<T, Interrupted> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            _ = ctx.stop.cancelled() => return Err(Interrupted),
            out = &mut work => return Ok(out),
            _ = pump.as_mut(), if !*pumped => *pumped = true,
        }
    }
}

async fn reattach(
    ctx: &BuildContext,
    step_id: &str,
    record: &mut StepRecord,
    worker: &str,
    handle: &str,
) -> Attempt<Outputs> {
    let Observed::Present(at_start) = watch::seen(&ctx.engine, worker).await else {
        Err(StepFailure::WorkerGone {
            worker: worker.to_string(),
        })?
    };
    // The volumes the container writes its outputs to; unreadable, the
    // attempt cannot be finished and is retried (an infrastructure loss).
    let outputs = match stored_outputs(record) {
        Ok(o) => o,
        Err(why) => {
            tracing::warn!(build = ctx.build_id, step = %step_id, "{why}");
            Err(StepFailure::ContainerLost {
                worker: worker.to_string(),
                handle: handle.to_string(),
            })?
        }
    };
    let exit = split(follow(ctx, step_id, worker, handle, &at_start, record.log_offset).await)?;
    let mut scratch = Scratch::default();
    let result = finish_attempt(ctx, worker, handle, exit, outputs, &mut scratch).await;
    for h in scratch.release {
        ctx.engine.release_volume(&h).await;
    }
    result
}
