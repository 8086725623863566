//! A get step: fetch a resource version into a resource cache volume on a
//! worker with the resource type, reusing the cache when the worker has it.
//!
//! As in Concourse (since v8.1), a get that succeeds sets the local var
//! `((.:NAME))`, NAME the step's name, to the metadata of the version it
//! fetched: a mapping of each metadata field's name to its value, not
//! redacted. A get from a resource cache sets it from the metadata the
//! cache's `in` answered, kept with the cache.

use std::collections::BTreeSet;

use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_core::build::{BuildEventKind, StepFailure, StepKind, StepState, WorkerSeen};
use hangar_core::caches::resource_cache_key;
use hangar_core::engine::{call_failure, Observed};
use hangar_core::plan::GetStep;
use hangar_core::resource_types::{self, ResourceType};
use hangar_core::volumes::OwnerKind;
use serde_json::{json, Value};

use crate::context::{BuildContext, Interrupted, StepEnd};
use crate::halt::{split, Attempt};
use crate::placement::{place_waiting, Wants};
use crate::step_inputs::op_failure;
use crate::Source;

pub(crate) async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
) -> Result<StepEnd, Interrupted> {
    let (mut record, done) = ctx.resume_step(step_id, &step.get, StepKind::Get).await;
    if let Some(end) = done {
        // A run that stopped between saving the step and recording its
        // version records it now (recording is idempotent).
        if end.state == StepState::Succeeded {
            let version = recorded_version(&record);
            if let Some(version) = &version {
                // The metadata was saved with it when the step ran.
                record_input(ctx, step_id, step, version, &json!([])).await?;
            }
            let restored = restore_local_var(ctx, step_id, step, &record, version).await;
            if let Err(failure) = split(restored)? {
                // The step stays as it ended; a later step that uses the
                // var fails naming it as undefined.
                let line = format!(
                    "cannot fetch {} again for its local var ((.:{})): {}",
                    step.get,
                    step.get,
                    failure.describe()
                );
                ctx.log(Some(step_id), BuildEventKind::Infra, &line).await;
            }
        }
        return Ok(end);
    }
    let max_attempts = step.infrastructure_attempts();
    let mut avoid = BTreeSet::new();
    loop {
        record.state = StepState::Running;
        record.started_at.get_or_insert(ctx.engine.now());
        ctx.save(&record).await;
        ctx.log(
            Some(step_id),
            BuildEventKind::Step,
            &format!("fetching {} ({})", step.get, step.resource_type),
        )
        .await;
        match split(attempt(ctx, step_id, step, &avoid).await)? {
            Ok(Got {
                worker,
                handle,
                version,
                metadata,
                key,
            }) => {
                ctx.add_artifact(&step.get, &handle);
                ctx.set_local_var(&step.get, metadata_var(&metadata), true);
                record.worker = Some(worker);
                record.outputs = json!({ step.get.clone(): handle }).to_string();
                record.version = Some(version.to_string());
                record.state = StepState::Succeeded;
                record.exit_code = Some(0);
                record.finished_at = Some(ctx.engine.now());
                ctx.save(&record).await;
                if let Value::Object(version) = &version {
                    record_input(ctx, step_id, step, version, &metadata).await?;
                }
                note_cache(ctx, step, &key, &version).await;
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

/// Fetches a get step's artifact again (its volume was lost with its
/// worker), on a worker other than those in `avoid`.
pub(crate) async fn refetch(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    avoid: &BTreeSet<String>,
) -> Attempt<String> {
    let got = attempt(ctx, step_id, step, avoid).await?;
    ctx.add_artifact(&step.get, &got.handle);
    Ok(got.handle)
}

/// A get that a previous run of the build finished sets its local var
/// again (local vars live in the running node's memory): from the
/// metadata kept with its cache, else by fetching the version it got
/// again (the cache is gone, or the step ran before metadata was kept).
async fn restore_local_var(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    record: &hangar_store::StepRecord,
    version: Option<serde_json::Map<String, Value>>,
) -> Attempt<()> {
    let handle = crate::context::stored_outputs(record)
        .ok()
        .and_then(|mut o| o.remove(&step.get));
    if let Some(handle) = handle {
        match ctx.engine.store().resource_cache_metadata(&handle).await {
            Ok(Some(metadata)) => {
                ctx.set_local_var(&step.get, metadata_var(&metadata), true);
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%handle, error = %e, "cannot read a resource cache's metadata; fetching again")
            }
        }
    }
    let mut pinned = step.clone();
    if version.is_some() {
        pinned.version = version;
    }
    let got = attempt(ctx, step_id, &pinned, &BTreeSet::new()).await?;
    ctx.add_artifact(&step.get, &got.handle);
    ctx.set_local_var(&step.get, metadata_var(&got.metadata), true);
    Ok(())
}

/// The local var a get sets from its version's metadata (`[{name,
/// value}]`, as a resource type's `in` answers it): each field's name to
/// its value, a later field of the same name winning, as Concourse's
/// `Metadata.AsMap`. Anything else a type answered sets an empty mapping.
pub(crate) fn metadata_var(metadata: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for field in metadata.as_array().into_iter().flatten() {
        if let (Some(name), Some(value)) = (
            field.get("name").and_then(Value::as_str),
            field.get("value"),
        ) {
            out.insert(name.to_string(), value.clone());
        }
    }
    Value::Object(out)
}

/// The metadata of an `in` answer as it is kept: its `[{name, value}]`
/// list, with a value that is not text written as its JSON (a type that
/// answers none, or no list, has none).
fn answered_metadata(response: Option<&Value>) -> Value {
    let fields = response
        .and_then(|r| r.get("metadata"))
        .and_then(Value::as_array)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| {
                    let name = f.get("name")?.as_str()?;
                    let value = match f.get("value") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => String::new(),
                        Some(other) => other.to_string(),
                    };
                    Some(json!({ "name": name, "value": value }))
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(fields)
}

/// What one attempt of a get step got.
struct Got {
    worker: String,
    handle: String,
    version: Value,
    /// The version's metadata, `[{name, value}]`.
    metadata: Value,
    /// The resource cache's key.
    key: String,
}

/// Runs a resource action on the step's worker, watched and cancellable,
/// its stderr written into the step's log as it comes. With a custom
/// type's image, the action runs in a copy-on-write child
/// of it made for this action alone (the image cache stays as fetched)
/// and released however the action ends.
pub(crate) async fn action(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    seen: &WorkerSeen,
    image: Option<&TypeImage>,
    req: &ResourceAction,
) -> Attempt<ResourceActionResult> {
    let Some(image) = image else {
        return plain_action(ctx, step_id, worker, seen, req).await;
    };
    let engine = &ctx.engine;
    let made = ctx
        .call(
            &[(worker, seen)],
            engine.make_volume(
                worker,
                Source::CopyOnWrite {
                    parent: image.handle.clone(),
                },
                OwnerKind::Container,
                None,
            ),
        )
        .await?
        .map_err(|e| op_failure(worker, e))?;
    let mut req = req.clone();
    req.resource_type = image.type_name.clone();
    req.image_volume = Some(made.handle.clone());
    req.privileged = image.privileged;
    let out = plain_action(ctx, step_id, worker, seen, &req).await;
    engine.release_volume(&made.handle).await;
    out
}

pub(crate) async fn plain_action(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    seen: &WorkerSeen,
    req: &ResourceAction,
) -> Attempt<ResourceActionResult> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let work = async {
        let call = ctx.engine.workers().resource_action(worker, req, tx);
        // The call drops its sender when it ends, which ends the copy.
        let (out, ()) = tokio::join!(call, crate::action_log::copy(ctx, step_id, rx));
        out
    };
    let out = ctx
        .call(&[(worker, seen)], work)
        .await?
        .map_err(|e| call_failure(worker, &e))?;
    // An older worker's answer carries its stderr whole.
    crate::action_log::write(ctx, step_id, &out.stderr).await;
    Ok(out)
}

/// The failure of an action that exited non-zero: the infrastructure's
/// when the worker says so (its own type could not reach what it fetches
/// from), tried on another worker; else the resource's own.
pub(crate) fn exit_failure(worker: &str, out: &ResourceActionResult) -> StepFailure {
    if out.infrastructure_failure() {
        StepFailure::SourceUnavailable {
            worker: worker.to_string(),
            code: out.exit_code,
        }
    } else {
        StepFailure::Exited {
            code: out.exit_code,
        }
    }
}

/// What to fetch: a resource of a type, at a version or at the newest one
/// its `check` finds. A get step's resource, or a task's `image_resource`.
pub(crate) struct Fetch {
    pub resource_type: String,
    pub source: Value,
    /// What `in` is given (`Null` for none): part of the cache's key, since
    /// other params fetch other bytes.
    pub params: Value,
    /// Pinned: `check` is skipped.
    pub version: Option<Value>,
    /// What messages call it (the get step's artifact, the image's name).
    pub label: String,
    /// A custom type's image on the worker whose `/opt/resource` programs
    /// run the actions; `None` for a base type.
    pub image: Option<TypeImage>,
    /// An image (a task's `image_resource`, a custom type's image): a
    /// check of the same type and source within the check interval is
    /// reused instead of run again, as Concourse does
    /// (`crate::recent_checks`). A get step's resource is checked each time.
    pub reuse_recent_check: bool,
    /// The version's metadata is wanted (a get step's local var): a cache
    /// kept without it (made before metadata was kept) is not reused.
    pub needs_metadata: bool,
}

/// A custom resource type's image, fetched on the step's worker.
#[derive(Debug, Clone)]
pub(crate) struct TypeImage {
    /// The custom type's name.
    pub type_name: String,
    /// Its image's resource cache.
    pub handle: String,
    /// That cache's key: a resource fetched with this image is keyed by
    /// it as well, so a new image version fetches anew.
    pub key: String,
    /// The custom type is privileged: its actions run in privileged
    /// containers of the image.
    pub privileged: bool,
}

impl Fetch {
    /// The resource cache's key, when the version is known before `check`
    /// (pinned): placement then prefers a worker that has it.
    pub(crate) fn known_key(&self) -> Option<String> {
        if self.image.is_some() {
            // Keyed by the image's version, known only once it is fetched.
            return None;
        }
        self.version.as_ref().map(|v| self.key(v))
    }

    fn key(&self, version: &Value) -> String {
        match &self.image {
            None => resource_cache_key(&self.resource_type, &self.source, &self.params, version),
            // The image's key goes into the digest, so the key keeps its
            // `<type>@<digest>` shape however deep the chain.
            Some(image) => resource_cache_key(
                &self.resource_type,
                &json!({ "image": image.key, "source": self.source }),
                &self.params,
                version,
            ),
        }
    }
}

/// A fetched resource: its cache volume on the worker and its version.
pub(crate) struct Fetched {
    pub handle: String,
    pub version: Value,
    /// Reused from the worker's resource caches (no `in` ran).
    pub cached: bool,
    /// The cache's key.
    pub key: String,
    /// The metadata `in` answered, `[{name, value}]` (kept with the cache).
    pub metadata: Value,
}

/// A get of a pipeline resource in a job build: its version is the build's
/// input, under the step's name, and the version's metadata is what `in`
/// answered, as Concourse's get updates it.
async fn record_input(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    version: &serde_json::Map<String, Value>,
    metadata: &Value,
) -> Result<(), Interrupted> {
    let Some(resource) = &step.resource else {
        return Ok(());
    };
    let role = crate::build_versions::Role::Input(&step.get);
    crate::build_versions::record(ctx, step_id, resource, version, metadata, role).await
}

/// Notes which resource cache a pipeline resource's get used, so
/// `clear-resource-cache` finds it; a note that cannot be written leaves
/// that cache to its retention.
async fn note_cache(ctx: &BuildContext, step: &GetStep, key: &str, version: &Value) {
    let (Some(resource), Some(job)) = (&step.resource, &ctx.job_build) else {
        return;
    };
    let store = ctx.engine.store();
    let noted = match store.pipeline_resource_id(job.pipeline_id, resource).await {
        Ok(Some(id)) => {
            store
                .note_resource_cache(id, key, &version.to_string())
                .await
        }
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = noted {
        tracing::warn!(build = ctx.build_id, %resource, error = %e, "cannot note the resource's cache");
    }
}

/// The version a finished get step saved (none from a run before
/// versions were saved with get steps).
fn recorded_version(record: &hangar_store::StepRecord) -> Option<serde_json::Map<String, Value>> {
    serde_json::from_str(record.version.as_deref()?).ok()
}

async fn attempt(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    avoid: &BTreeSet<String>,
) -> Attempt<Got> {
    // Checked by web; a stored plan that no longer resolves is the
    // build's own error.
    let chain = match resource_types::chain(&ctx.resource_types, &step.resource_type) {
        Ok(c) => c,
        Err(e) => Err(StepFailure::Invalid { reason: e.0 })?,
    };
    let source = match chain.first() {
        Some(t) => t.apply_defaults(&step.source),
        None => step.source.clone(),
    };
    let mut fetch = Fetch {
        resource_type: step.resource_type.clone(),
        source: Value::Object(source),
        params: step.params.clone().map_or(Value::Null, Value::Object),
        version: step.version.clone().map(Value::Object),
        label: step.get.clone(),
        image: None,
        reuse_recent_check: false,
        needs_metadata: true,
    };
    let wants = Wants {
        caches: fetch
            .known_key()
            .into_iter()
            .map(|k| ("resource-cache", k))
            .collect(),
        ..Wants::for_resource(&chain, &step.resource_type, &step.tags, avoid)
    };
    let worker = place_waiting(ctx, step_id, wants).await??;
    let Observed::Present(seen) = crate::watch::seen(&ctx.engine, &worker).await else {
        Err(StepFailure::WorkerGone { worker })?
    };
    if !chain.is_empty() {
        fetch.image = Some(fetch_type_images(ctx, step_id, &worker, &seen, &chain).await?);
    }
    let fetched = fetch_on(ctx, step_id, &worker, &seen, &fetch).await?;
    let line = if fetched.cached {
        format!(
            "version {} found in the cache on worker {worker}",
            fetched.version
        )
    } else {
        format!("fetched version {} on worker {worker}", fetched.version)
    };
    ctx.log(Some(step_id), BuildEventKind::Step, &line).await;
    Ok(Got {
        worker,
        handle: fetched.handle,
        version: fetched.version,
        metadata: fetched.metadata,
        key: fetched.key,
    })
}

/// Fetches the images of a custom type's chain (outermost first) on
/// `worker`, innermost first: the innermost with its base type, each next
/// one in a container of the image before it, with that type's `defaults`
/// under its source. Answers the outermost type's image.
pub(crate) async fn fetch_type_images(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    seen: &WorkerSeen,
    chain: &[&ResourceType],
) -> Attempt<TypeImage> {
    let mut image: Option<TypeImage> = None;
    for (i, t) in chain.iter().enumerate().rev() {
        let source = match chain.get(i + 1) {
            Some(inner) => inner.apply_defaults(&t.source),
            None => t.source.clone(),
        };
        let fetch = Fetch {
            resource_type: t.resource_type.clone(),
            source: Value::Object(source),
            params: t.params.clone().map_or(Value::Null, Value::Object),
            version: None,
            label: format!("resource type {}", t.name),
            image: image.take(),
            reuse_recent_check: true,
            needs_metadata: false,
        };
        let fetched = fetch_on(ctx, step_id, worker, seen, &fetch).await?;
        let how = if fetched.cached {
            "found in the cache"
        } else {
            "fetched"
        };
        ctx.log(
            Some(step_id),
            BuildEventKind::Step,
            &format!(
                "image of resource type {} ({}) {how} on worker {worker}, version {}",
                t.name, t.resource_type, fetched.version
            ),
        )
        .await;
        image = Some(TypeImage {
            type_name: t.name.clone(),
            handle: fetched.handle,
            key: fetched.key,
            privileged: t.privileged,
        });
    }
    Ok(image.ok_or_else(|| StepFailure::Invalid {
        reason: "a custom resource type without a chain".into(),
    })?)
}

/// Fetches `fetch` on `worker` (placed by the caller, as web saw it in
/// `seen`): `check` unless the version is pinned, then the worker's
/// resource cache of that key if it has one, else `in` into a new one. A
/// cache whose `in` failed or was interrupted is released, never reused.
pub(crate) async fn fetch_on(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    seen: &WorkerSeen,
    fetch: &Fetch,
) -> Attempt<Fetched> {
    let engine = &ctx.engine;
    let watched = [(worker, seen)];
    let (source, params) = (&fetch.source, &fetch.params);
    let interval = engine.config().image_check_interval_ms;
    // What was checked: the key of the fetch at no version (type, source,
    // params and the type's image).
    let scope = fetch.reuse_recent_check.then(|| fetch.key(&Value::Null));
    let recent = scope
        .as_deref()
        .and_then(|s| engine.recent_checks().fresh(s, engine.now(), interval));
    let version = match (&fetch.version, recent) {
        (Some(v), _) => v.clone(),
        (None, Some((version, age_ms))) => {
            ctx.log(
                Some(step_id),
                BuildEventKind::Step,
                &format!(
                    "{}: version {version} from a check {:.1} s ago (checked again after {} s, as Concourse's check interval)",
                    fetch.label,
                    age_ms as f64 / 1000.0,
                    interval / 1000
                ),
            )
            .await;
            version
        }
        (None, None) => {
            let req = ResourceAction {
                inputs: Default::default(),
                image_volume: None,
                resource_type: fetch.resource_type.clone(),
                action: "check".into(),
                volume: None,
                request: json!({ "source": source, "version": null }),
                privileged: false,
            };
            let out = action(ctx, step_id, worker, seen, fetch.image.as_ref(), &req).await?;
            if out.exit_code != 0 {
                Err(exit_failure(worker, &out))?
            }
            match out
                .response
                .as_ref()
                .and_then(Value::as_array)
                .and_then(|v| v.last())
            {
                Some(v) if v.is_object() => {
                    if let Some(scope) = scope {
                        engine
                            .recent_checks()
                            .record(scope, v.clone(), engine.now(), interval);
                    }
                    v.clone()
                }
                _ => Err(StepFailure::Invalid {
                    reason: format!("check of {} found no version", fetch.label),
                })?,
            }
        }
    };
    let key = fetch.key(&version);
    let cached = crate::caches::reuse_cache(engine, OwnerKind::ResourceCache, &key, worker).await;
    if let Some(handle) = cached {
        let metadata = match engine.store().resource_cache_metadata(&handle).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%handle, error = %e, "cannot read a resource cache's metadata");
                None
            }
        };
        match (metadata, fetch.needs_metadata) {
            (Some(metadata), _) => {
                return Ok(Fetched {
                    handle,
                    version,
                    cached: true,
                    key,
                    metadata,
                })
            }
            (None, false) => {
                return Ok(Fetched {
                    handle,
                    version,
                    cached: true,
                    key,
                    metadata: json!([]),
                })
            }
            // Its metadata is unknown: `in` runs again into a new cache,
            // which keeps it; this one goes when its retention passes.
            (None, true) => {}
        }
    }
    // The cache gets its key only once `in` succeeded: until then it is
    // owned by an id no lookup asks for, so a fetch cut short where no
    // release follows (the web node killed mid-`in`) is never reused; the
    // caches collector removes it once its retention passes.
    let fetching = format!("{key}/fetching/{}", uuid::Uuid::new_v4());
    let made = ctx
        .call(
            &watched,
            engine.make_volume(
                worker,
                Source::Empty,
                OwnerKind::ResourceCache,
                Some(fetching),
            ),
        )
        .await?;
    let volume = made.map_err(|e| op_failure(worker, e))?;
    let mut request = json!({ "source": source, "version": version });
    if !params.is_null() {
        request["params"] = params.clone();
    }
    let req = ResourceAction {
        inputs: Default::default(),
        image_volume: None,
        resource_type: fetch.resource_type.clone(),
        action: "in".into(),
        volume: Some(volume.handle.clone()),
        request,
        privileged: false,
    };
    // A cache whose `in` failed is released; a half-fetched one too (the
    // build interrupted): it must not be reused, and the resumed build
    // fetches again.
    let out = match action(ctx, step_id, worker, seen, fetch.image.as_ref(), &req).await {
        Ok(o) if o.exit_code == 0 => o,
        Ok(o) => {
            engine.release_volume(&volume.handle).await;
            Err(exit_failure(worker, &o))?
        }
        Err(halt) => {
            engine.release_volume(&volume.handle).await;
            return Err(halt);
        }
    };
    let metadata = answered_metadata(out.response.as_ref());
    if let Err(e) = engine
        .store()
        .key_resource_cache(&volume.handle, &key, &metadata)
        .await
    {
        // This step still uses what it fetched; later ones fetch again.
        tracing::warn!(handle = %volume.handle, error = %e, "cannot key a fetched resource cache; it will not be reused");
    }
    // The step keeps the version it fetched, as Concourse's: a type's `in`
    // may answer it in another shape (git-resource answers a tag's version
    // without its commit), and that answer is not a new version.
    if let Some(answered) = out.response.as_ref().and_then(|r| r.get("version")) {
        if *answered != version {
            tracing::debug!(%answered, asked = %version, label = %fetch.label, "in answered another version than it was given; the given one is kept");
        }
    }
    Ok(Fetched {
        handle: volume.handle,
        version,
        cached: false,
        key,
        metadata,
    })
}
