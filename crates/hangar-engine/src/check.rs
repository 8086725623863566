//! A resource check outside any build (the check loop's): `check` of a
//! base resource type with `{source, version}` on a worker that has the
//! type, placed as a get step is, watched as a get step's worker is.
//!
//! A worker lost or unreachable mid-check, or a type saying what it
//! checks could not be reached (the worker's infrastructure), is retried
//! on another worker; when none is left the check is deferred, not
//! recorded as the resource's error. A non-zero exit or output that is
//! not a list of versions is the resource's own error, with its stderr.

use std::collections::BTreeSet;
use std::time::Duration;

use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_core::build::StepFailure;
use hangar_core::build::{decide_retry, RetryDecision};
use hangar_core::engine::{call_failure, Observed};
use hangar_core::resource_types::{self, ResourceType};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::halt::split;
use crate::placement::{place_for, Unplaced, Wants};
use crate::Engine;

/// Workers tried for one check before it is deferred.
const MAX_ATTEMPTS: usize = 3;
/// The most of a failed check's stderr kept as its error (its end).
const MAX_ERROR_BYTES: usize = crate::context::MAX_KEPT_LOG_BYTES;

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckJob {
    /// A base resource type of the workers.
    pub resource_type: String,
    pub source: Value,
    /// The version to check from (`null`: from the start).
    pub from: Option<Value>,
    pub tags: BTreeSet<String>,
    pub timeout: Duration,
    /// The pipeline's custom resource types: a resource of one is checked
    /// with its type's image, fetched on the worker first, as a get step
    /// of a custom type is.
    pub resource_types: Vec<ResourceType>,
    /// The team of the pipeline wanting the check: its workers or shared
    /// ones run it, never another team's.
    pub team: Option<String>,
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckEnd {
    /// The versions it printed, oldest first, and what it said on stderr
    /// (the end of it, when long).
    Found {
        versions: Vec<Value>,
        output: String,
    },
    /// The resource's own failure, shown on it.
    Failed(String),
    /// Not run to an end for the infrastructure's sake (no worker fits,
    /// workers lost, the node stopping): to be tried again later.
    Deferred(String),
    /// Not run because no worker, whatever its state, is of the kind it
    /// needs (its resource type, tags): to be tried again later, within
    /// web's bound on such a wait (`--no-worker-timeout`).
    NoWorker(String),
}

/// Runs `job` within its timeout. The timeout cuts the call to the
/// worker only, never a database read under way (an SQLite connection
/// dropped mid-query is closed). `placed` is told when a worker was
/// found for it, before the check starts there.
pub async fn run_check(
    engine: &Engine,
    job: &CheckJob,
    stop: &CancellationToken,
    placed: Option<tokio::sync::oneshot::Sender<()>>,
) -> CheckEnd {
    let deadline = tokio::time::Instant::now() + job.timeout;
    tokio::select! {
        _ = stop.cancelled() => CheckEnd::Deferred("web is stopping".into()),
        end = attempts(engine, job, deadline, placed) => end,
    }
}

fn timed_out(job: &CheckJob) -> CheckEnd {
    CheckEnd::Failed(format!(
        "check timed out after {:?} (check_timeout)",
        job.timeout
    ))
}

async fn attempts(
    engine: &Engine,
    job: &CheckJob,
    deadline: tokio::time::Instant,
    mut placed: Option<tokio::sync::oneshot::Sender<()>>,
) -> CheckEnd {
    let chain = match resource_types::chain(&job.resource_types, &job.resource_type) {
        Ok(c) => c,
        Err(e) => return CheckEnd::Failed(e.0),
    };
    let mut avoid = BTreeSet::new();
    let mut last = String::new();
    for _ in 0..MAX_ATTEMPTS {
        // The same rule as a get step's.
        let mut wants = Wants::for_resource(&chain, &job.resource_type, &job.tags, &avoid);
        wants.requirement.team = job.team.clone();
        let worker = match place_for(engine, wants).await {
            Ok(Ok(w)) => w,
            Ok(Err(Unplaced { why, lacking: true })) => return CheckEnd::NoWorker(why),
            Ok(Err(Unplaced { why, .. })) => return CheckEnd::Deferred(why),
            Err(e) => return CheckEnd::Deferred(format!("cannot read workers: {e}")),
        };
        if let Some(placed) = placed.take() {
            let _ = placed.send(());
        }
        if tokio::time::Instant::now() >= deadline {
            return timed_out(job);
        }
        let tried = if chain.is_empty() {
            on_worker(engine, &worker, job, deadline).await
        } else {
            with_type_image(engine, &worker, job, &chain, deadline).await
        };
        match tried {
            Ok(end) => return end,
            Err(failure) => {
                last = failure.describe();
                tracing::info!(%worker, error = %last, "check failed on the worker's side; trying another");
                avoid.insert(worker);
            }
        }
    }
    CheckEnd::Deferred(last)
}

/// One try on `worker`: an end, or the infrastructure's failure.
async fn on_worker(
    engine: &Engine,
    worker: &str,
    job: &CheckJob,
    deadline: tokio::time::Instant,
) -> Result<CheckEnd, StepFailure> {
    let Observed::Present(seen) = crate::watch::seen(engine, worker).await else {
        return Err(StepFailure::WorkerGone {
            worker: worker.to_string(),
        });
    };
    let req = ResourceAction {
        resource_type: job.resource_type.clone(),
        action: "check".into(),
        volume: None,
        image_volume: None,
        inputs: Default::default(),
        request: json!({ "source": job.source, "version": job.from.clone().unwrap_or(Value::Null) }),
        privileged: false,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let work = async {
        let call = engine.workers().resource_action(worker, &req, tx);
        let collect = async {
            let mut stderr = String::new();
            while let Some(piece) = rx.recv().await {
                stderr.push_str(&piece);
                keep_end(&mut stderr);
            }
            stderr
        };
        tokio::join!(call, collect)
    };
    tokio::pin!(work);
    // The worker is watched between waits, not inside them: the deadline
    // never cuts a read of its row.
    let (out, streamed) = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tokio::time::sleep_until(deadline) => return Ok(timed_out(job)),
            _ = tokio::time::sleep(crate::watch::WATCH_EVERY) => {}
        }
        if let Some(failure) = crate::watch::check(engine, worker, &seen).await {
            return Err(failure);
        }
    };
    match out {
        Err(e) => match call_failure(worker, &e) {
            StepFailure::Invalid { reason } => Ok(CheckEnd::Failed(reason)),
            other => Err(other),
        },
        Ok(out) => ended(worker, out, streamed),
    }
}

/// One try of a custom type's check on `worker`: the chain's images
/// fetched there, then `check` in a container of the outermost, through
/// the get step's own code, with the type's `defaults` under the source.
async fn with_type_image(
    engine: &Engine,
    worker: &str,
    job: &CheckJob,
    chain: &[&ResourceType],
    deadline: tokio::time::Instant,
) -> Result<CheckEnd, StepFailure> {
    let Observed::Present(seen) = crate::watch::seen(engine, worker).await else {
        return Err(StepFailure::WorkerGone {
            worker: worker.to_string(),
        });
    };
    let stop = CancellationToken::new();
    let ctx =
        crate::context::BuildContext::for_check(engine, job.resource_types.clone(), stop.clone());
    // The deadline stops the context, as a build's abort stops its steps.
    // The timer is polled with the check, not spawned: it ends with it
    // rather than sleeping on to the deadline (an hour by default).
    let timer = async {
        tokio::time::sleep_until(deadline).await;
        stop.cancel();
        std::future::pending::<std::convert::Infallible>().await
    };
    let run = async {
        let image = crate::get_step::fetch_type_images(&ctx, "check", worker, &seen, chain).await;
        let image = match split(image)? {
            Ok(image) => image,
            Err(f) => return Ok(Err((true, f))),
        };
        let source = match (chain.first(), job.source.as_object()) {
            (Some(t), Some(source)) => Value::Object(t.apply_defaults(source)),
            _ => job.source.clone(),
        };
        let req = ResourceAction {
            resource_type: job.resource_type.clone(),
            action: "check".into(),
            volume: None,
            image_volume: None,
            inputs: Default::default(),
            request: json!({ "source": source, "version": job.from.clone().unwrap_or(Value::Null) }),
            // The image's own type's privilege (`action` sets it).
            privileged: false,
        };
        let out = crate::get_step::action(&ctx, "check", worker, &seen, Some(&image), &req);
        Ok(split(out.await)?.map_err(|f| (false, f)))
    };
    let out = tokio::select! {
        out = run => out,
        never = timer => match never {},
    };
    let log = std::mem::take(
        &mut *ctx
            .log_sink
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()))
            .expect("a check's context keeps its log"),
    );
    match out {
        Err(crate::context::Interrupted) => Ok(timed_out(job)),
        Ok(Ok(result)) => ended(worker, result, log),
        Ok(Err((fetching_image, failure))) => {
            if matches!(
                decide_retry(&failure, 1, 2, false),
                RetryDecision::Retry { .. }
            ) {
                return Err(failure);
            }
            let what = match chain.first() {
                Some(t) if fetching_image => {
                    format!("fetching the image of resource type {}", t.name)
                }
                _ => "check".to_string(),
            };
            let log = log.trim_end();
            Ok(CheckEnd::Failed(if log.is_empty() {
                format!("{what}: {}", failure.describe())
            } else {
                format!("{what}: {}: {log}", failure.describe())
            }))
        }
    }
}

fn ended(
    worker: &str,
    out: ResourceActionResult,
    streamed: String,
) -> Result<CheckEnd, StepFailure> {
    if out.exit_code != 0 {
        if out.infrastructure_failure() {
            return Err(StepFailure::SourceUnavailable {
                worker: worker.to_string(),
                code: out.exit_code,
            });
        }
        let mut stderr = streamed + &out.stderr;
        keep_end(&mut stderr);
        let stderr = stderr.trim_end();
        return Ok(CheckEnd::Failed(if stderr.is_empty() {
            format!("check exited with code {}", out.exit_code)
        } else {
            format!("check exited with code {}: {stderr}", out.exit_code)
        }));
    }
    let mut output = streamed + &out.stderr;
    keep_end(&mut output);
    Ok(
        match hangar_core::checks::versions_from_check(out.response.as_ref()) {
            Ok(versions) => CheckEnd::Found { versions, output },
            Err(e) => CheckEnd::Failed(e),
        },
    )
}

/// Keeps the last [`MAX_ERROR_BYTES`] of `text` (at a char boundary).
fn keep_end(text: &mut String) {
    crate::context::keep_end(text, MAX_ERROR_BYTES);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(code: i32, response: Option<Value>, stderr: &str) -> ResourceActionResult {
        ResourceActionResult {
            exit_code: code,
            response,
            stderr: stderr.into(),
            failure: None,
        }
    }

    #[test]
    fn a_check_ends_as_its_exit_and_output_say() {
        let found = ended("w", result(0, Some(json!([{"r": "1"}])), ""), String::new());
        assert_eq!(
            found,
            Ok(CheckEnd::Found {
                versions: vec![json!({"r": "1"})],
                output: String::new()
            })
        );
        // What it said on the way, streamed then on stderr, is kept.
        let said = ended(
            "w",
            result(0, Some(json!([])), "fetched 3 refs\n"),
            "cloning\n".into(),
        );
        assert_eq!(
            said,
            Ok(CheckEnd::Found {
                versions: vec![],
                output: "cloning\nfetched 3 refs\n".into()
            })
        );
        let failed = ended("w", result(1, None, "no such repo\n"), "cloning\n".into());
        assert_eq!(
            failed,
            Ok(CheckEnd::Failed(
                "check exited with code 1: cloning\nno such repo".into()
            ))
        );
        let bad = ended("w", result(0, Some(json!({"r": "1"})), ""), String::new());
        assert!(matches!(bad, Ok(CheckEnd::Failed(e)) if e.contains("not a list")));
        let mut infra = result(75, None, "");
        infra.failure = Some(hangar_api::resources::ActionFailure::Infrastructure);
        assert!(ended("w", infra, String::new()).is_err());
    }

    #[test]
    fn long_errors_keep_their_end() {
        let mut text = "é".repeat(MAX_ERROR_BYTES);
        text.push_str("the end");
        keep_end(&mut text);
        assert!(text.len() <= MAX_ERROR_BYTES);
        assert!(text.ends_with("the end"));
    }
}
