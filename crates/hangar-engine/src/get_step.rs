//! A get step: fetch a resource version into a resource cache volume on a
//! worker with the resource type, reusing the cache when the worker has it.

use std::collections::BTreeSet;
use std::time::Duration;

use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_client::WorkerApi;
use hangar_core::build::{decide_retry, RetryDecision, StepFailure, StepState};
use hangar_core::caches::resource_cache_key;
use hangar_core::placement::Requirement;
use hangar_core::plan::GetStep;
use hangar_core::volumes::OwnerKind;
use serde_json::{json, Value};

use super::context::{new_step_record, BuildContext, Interrupted, StepEnd};
use super::placement::{place_waiting, Wants};
use super::task_step::{already_done_end, give_up};
use crate::worker_ops::{self, Source};

pub async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
) -> Result<StepEnd, Interrupted> {
    let mut record = ctx
        .previous
        .get(step_id)
        .cloned()
        .unwrap_or_else(|| new_step_record(ctx.build_id, step_id, &step.get, "get"));
    if let Some(end) = already_done_end(&record) {
        if end.state == StepState::Succeeded {
            if let Some(handle) = serde_json::from_str::<Value>(&record.outputs)
                .ok()
                .and_then(|v| v.get(&step.get).and_then(Value::as_str).map(str::to_string))
            {
                ctx.add_artifact(&step.get, &handle);
            }
        }
        return Ok(end);
    }
    let max_attempts = step.attempts();
    let mut avoid = BTreeSet::new();
    loop {
        record.state = StepState::Running;
        record.started_at.get_or_insert(ctx.web.now());
        ctx.save(&record).await;
        ctx.log(
            Some(step_id),
            "step",
            &format!("fetching {} ({})", step.get, step.resource_type),
        )
        .await;
        match attempt(ctx, step_id, step, &avoid).await? {
            Ok((worker, handle)) => {
                ctx.add_artifact(&step.get, &handle);
                record.worker = Some(worker);
                record.outputs = json!({ step.get.clone(): handle }).to_string();
                record.state = StepState::Succeeded;
                record.exit_code = Some(0);
                record.finished_at = Some(ctx.web.now());
                ctx.save(&record).await;
                return Ok(StepEnd {
                    state: StepState::Succeeded,
                    exit_code: Some(0),
                    error: None,
                });
            }
            Err(failure) => {
                match decide_retry(&failure, record.attempt as u32, max_attempts, false) {
                    RetryDecision::Retry { next_attempt } => {
                        ctx.announce_retry(
                            step_id,
                            "get",
                            &step.get,
                            &failure,
                            next_attempt,
                            max_attempts,
                            &mut avoid,
                        )
                        .await?;
                        record.attempt = i64::from(next_attempt);
                    }
                    RetryDecision::GiveUp(state) => {
                        let code = failure.exit_code();
                        return Ok(give_up(ctx, &mut record, state, code, failure.describe()).await);
                    }
                }
            }
        }
    }
}

/// Fetches a get step's artifact again (its volume was lost with its
/// worker), on a worker other than those in `avoid`.
pub async fn refetch(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    avoid: &BTreeSet<String>,
) -> Result<Result<String, StepFailure>, Interrupted> {
    Ok(attempt(ctx, step_id, step, avoid)
        .await?
        .map(|(_, handle)| {
            ctx.add_artifact(&step.get, &handle);
            handle
        }))
}

async fn action(
    api: &WorkerApi,
    worker: &str,
    req: &ResourceAction,
) -> Result<ResourceActionResult, StepFailure> {
    api.resource_action(req).await.map_err(|e| match &e {
        hangar_client::ClientError::Api {
            status, message, ..
        } if status.as_u16() == 400 => StepFailure::Invalid {
            reason: message.clone(),
        },
        _ => StepFailure::WorkerUnreachable {
            worker: worker.to_string(),
            reason: e.to_string(),
        },
    })
}

async fn attempt(
    ctx: &BuildContext,
    step_id: &str,
    step: &GetStep,
    avoid: &BTreeSet<String>,
) -> Result<Result<(String, String), StepFailure>, Interrupted> {
    let web = &ctx.web;
    let source = Value::Object(step.source.clone());
    let known_key = step
        .version
        .as_ref()
        .map(|v| resource_cache_key(&step.resource_type, &source, &Value::Object(v.clone())));
    let wants = Wants {
        requirement: Requirement {
            // Base resource types run on their worker's own platform.
            platform: String::new(),
            tags: step.tags.iter().cloned().collect(),
            team: None,
            wants: vec![],
            avoid: avoid.clone(),
            memory: None,
        },
        resource_type: Some(step.resource_type.clone()),
        volumes: vec![],
        caches: known_key
            .iter()
            .map(|k| ("resource-cache", k.clone()))
            .collect(),
    };
    let worker = place_waiting(ctx, step_id, wants).await?;
    let Ok(Some(seen)) = super::watch::seen(web, &worker).await else {
        return Ok(Err(StepFailure::WorkerGone { worker }));
    };
    let api = match worker_ops::worker_api(web, &worker, Duration::from_secs(3600)).await {
        Ok(a) => a,
        Err(e) => {
            return Ok(Err(StepFailure::WorkerUnreachable {
                worker: worker.clone(),
                reason: e.to_string(),
            }))
        }
    };
    let version = match &step.version {
        Some(v) => Value::Object(v.clone()),
        None => {
            let req = ResourceAction {
                resource_type: step.resource_type.clone(),
                action: "check".into(),
                volume: None,
                request: json!({ "source": source, "version": null }),
            };
            let out =
                match super::watch::guarded(web, &[(&worker, &seen)], action(&api, &worker, &req))
                    .await
                {
                    Ok(Ok(o)) => o,
                    Ok(Err(f)) | Err(f) => return Ok(Err(f)),
                };
            if !out.stderr.is_empty() {
                ctx.log(Some(step_id), "log", &out.stderr).await;
            }
            if out.exit_code != 0 {
                return Ok(Err(StepFailure::Exited {
                    code: out.exit_code,
                }));
            }
            match out
                .response
                .as_ref()
                .and_then(Value::as_array)
                .and_then(|v| v.last())
            {
                Some(v) if v.is_object() => v.clone(),
                _ => {
                    return Ok(Err(StepFailure::Invalid {
                        reason: format!("check of {} found no version", step.get),
                    }))
                }
            }
        }
    };
    let key = resource_cache_key(&step.resource_type, &source, &version);
    let cached = super::caches::reuse_cache(web, OwnerKind::ResourceCache, &key, &worker).await;
    if let Some(handle) = cached {
        ctx.log(
            Some(step_id),
            "step",
            &format!("version {version} found in the cache on worker {worker}"),
        )
        .await;
        return Ok(Ok((worker, handle)));
    }
    let volume = match worker_ops::make_volume(
        web,
        &worker,
        Source::Empty,
        OwnerKind::ResourceCache,
        Some(key),
    )
    .await
    {
        Ok(v) => v,
        Err(e) => {
            return Ok(Err(StepFailure::WorkerUnreachable {
                worker: worker.clone(),
                reason: e.to_string(),
            }))
        }
    };
    let mut request = json!({ "source": source, "version": version });
    if let Some(p) = &step.params {
        request["params"] = Value::Object(p.clone());
    }
    let req = ResourceAction {
        resource_type: step.resource_type.clone(),
        action: "in".into(),
        volume: Some(volume.handle.clone()),
        request,
    };
    let out =
        match super::watch::guarded(web, &[(&worker, &seen)], action(&api, &worker, &req)).await {
            Ok(Ok(o)) => o,
            Ok(Err(f)) | Err(f) => {
                worker_ops::release_volume(web, &volume.handle).await;
                return Ok(Err(f));
            }
        };
    if !out.stderr.is_empty() {
        ctx.log(Some(step_id), "log", &out.stderr).await;
    }
    if out.exit_code != 0 {
        worker_ops::release_volume(web, &volume.handle).await;
        return Ok(Err(StepFailure::Exited {
            code: out.exit_code,
        }));
    }
    let fetched = out
        .response
        .as_ref()
        .and_then(|r| r.get("version"))
        .cloned()
        .unwrap_or(version);
    ctx.log(
        Some(step_id),
        "step",
        &format!("fetched version {fetched} on worker {worker}"),
    )
    .await;
    Ok(Ok((worker, volume.handle)))
}
