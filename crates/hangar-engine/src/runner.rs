//! Runs one build's plan: steps in sequence or in parallel, each leaf a get
//! or a task; resumes steps a previous run left behind.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use hangar_core::build::{BuildEventKind, StepState};
use hangar_core::engine::{build_status, deciding_step, final_status_line};
use hangar_core::plan::{parse_build_plan, Step};
use hangar_store::BuildRecord;
use tokio_util::sync::CancellationToken;

use crate::context::{BuildContext, Interrupted, StepEnd};
use crate::{get_step, task_step, Engine};

pub(crate) async fn run(engine: Engine, build: BuildRecord, stop: CancellationToken) {
    let lease_ms = engine.config().lease_ms;
    let node = engine.config().node_id.clone();
    let id = build.id;
    // Keep the lease while the build runs; losing it (another node took the
    // build after a long pause) stops this run.
    let lease = tokio::spawn({
        let (engine, stop, node) = (engine.clone(), stop.clone(), node.clone());
        async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(lease_ms.max(3) as u64 / 3)) => {}
                }
                match engine
                    .store()
                    .renew_build_lease(id, &node, engine.now(), lease_ms)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(build = id, "lost the build's lease; stopping here");
                        stop.cancel();
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(build = id, error = %e, "cannot renew the build's lease")
                    }
                }
            }
        }
    });
    let result = run_plan(&engine, &build, stop.clone()).await;
    stop.cancel();
    if let Err(e) = lease.await {
        tracing::warn!(build = id, error = %e, "the lease keeper of the build ended badly");
    }
    let Ok(end) = result else {
        tracing::info!(build = id, "build interrupted; it will be resumed");
        return;
    };
    let status = build_status(end.state);
    let now = engine.now();
    let line = final_status_line(status, end.error.as_deref());
    if let Err(e) = engine
        .store()
        .append_build_event(id, None, BuildEventKind::Status, &line, now)
        .await
    {
        tracing::warn!(build = id, error = %e, "cannot append the build's final status line");
    }
    match engine
        .store()
        .finish_build(id, &node, status, end.exit_code, end.error.as_deref(), now)
        .await
    {
        Ok(true) => tracing::info!(build = id, %status, "build finished"),
        Ok(false) => tracing::warn!(build = id, "build was taken over before it finished here"),
        Err(e) => {
            tracing::error!(build = id, error = %e, "cannot record the build's end; it will be resumed")
        }
    }
    engine.build_events().notify_waiters();
}

async fn run_plan(
    engine: &Engine,
    build: &BuildRecord,
    stop: CancellationToken,
) -> Result<StepEnd, Interrupted> {
    let invalid = |why: String| StepEnd {
        state: StepState::Errored,
        exit_code: None,
        error: Some(why),
    };
    let stored: serde_json::Value = match serde_json::from_str(&build.plan) {
        Ok(v) => v,
        Err(e) => return Ok(invalid(format!("stored plan is unreadable: {e}"))),
    };
    // The stored plan keeps its `((vars))`: they are read again here, on
    // the node that runs the build, and kept in memory only.
    let (stored, secrets) = match engine.credentials() {
        Some(credentials) => match crate::secrets::resolve_plan(credentials, &stored).await {
            Ok(resolved) => resolved,
            Err(e) => return Ok(invalid(format!("cannot resolve the plan's vars: {e}"))),
        },
        None => {
            // Another node with a credential manager accepted this plan:
            // never run its tasks with the literal `((var))` text.
            let left = hangar_core::vars::find_unresolved(&stored);
            if !left.is_empty() {
                return Ok(invalid(format!(
                    "the plan holds vars ({}) and this web node has no credential manager: \
                     every web node needs the same --credentials-* flags",
                    left.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                )));
            }
            (stored, Default::default())
        }
    };
    let (plan, resource_types) = match parse_build_plan(&stored) {
        Ok(p) => (p.steps, p.resource_types),
        Err(e) => return Ok(invalid(format!("stored plan is unreadable: {e}"))),
    };
    // Unreadable stored artifacts are an error, never an empty map: the
    // build's uploads would silently vanish.
    let artifacts: BTreeMap<String, String> = match serde_json::from_str(&build.artifacts) {
        Ok(a) => a,
        Err(e) => return Ok(invalid(format!("stored artifacts are unreadable: {e}"))),
    };
    let previous = match engine.store().build_steps(build.id).await {
        Ok(steps) => steps.into_iter().map(|s| (s.step_id.clone(), s)).collect(),
        Err(e) => {
            tracing::warn!(build = build.id, error = %e, "cannot read the build's steps; leaving it to be resumed");
            return Err(Interrupted);
        }
    };
    let ctx = BuildContext {
        engine: engine.clone(),
        build_id: build.id,
        job: build.name.clone(),
        artifacts: Mutex::new(artifacts),
        producers: hangar_core::plan::leaf_steps(&plan)
            .into_iter()
            .filter_map(|(_, s)| match s {
                Step::Get(g) => Some((g.get.clone(), g.clone())),
                _ => None,
            })
            .collect(),
        previous,
        resource_types,
        secrets,
        stop,
        action_output: Mutex::new(BTreeMap::new()),
    };
    if ctx.previous.is_empty() {
        ctx.log(None, BuildEventKind::Status, "started").await;
    } else {
        ctx.log(
            None,
            BuildEventKind::Infra,
            "resuming the build where it was left",
        )
        .await;
    }
    let mut end = run_list(&ctx, &plan, "", false).await?;
    // The build's error is stored and shown: no secret in it.
    end.error = end.error.map(|e| ctx.secrets.redact(&e));
    Ok(end)
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Result<StepEnd, Interrupted>> + Send + 'a>>;

/// Runs steps in order (stopping at the first that does not succeed) or all
/// at once (the first unsuccessful one, in plan order, decides).
fn run_list<'a>(
    ctx: &'a BuildContext,
    steps: &'a [Step],
    prefix: &'a str,
    parallel: bool,
) -> Boxed<'a> {
    Box::pin(async move {
        let id = |i: usize| {
            if prefix.is_empty() {
                i.to_string()
            } else {
                format!("{prefix}.{i}")
            }
        };
        let ok = StepEnd {
            state: StepState::Succeeded,
            exit_code: Some(0),
            error: None,
        };
        if parallel {
            let ids: Vec<String> = (0..steps.len()).map(id).collect();
            let runs = steps
                .iter()
                .zip(ids.iter())
                .map(|(s, i)| run_step(ctx, s, i));
            let ends = futures_util::future::join_all(runs)
                .await
                .into_iter()
                .collect::<Result<Vec<StepEnd>, Interrupted>>()?;
            let states: Vec<StepState> = ends.iter().map(|e| e.state).collect();
            return Ok(match deciding_step(&states) {
                Some(i) => ends[i].clone(),
                None => ok,
            });
        }
        for (i, step) in steps.iter().enumerate() {
            let end = run_step(ctx, step, &id(i)).await?;
            if deciding_step(&[end.state]).is_some() {
                return Ok(end);
            }
        }
        Ok(ok)
    })
}

fn run_step<'a>(ctx: &'a BuildContext, step: &'a Step, id: &'a str) -> Boxed<'a> {
    Box::pin(async move {
        match step {
            Step::Do(inner) => run_list(ctx, inner, id, false).await,
            Step::InParallel(inner) => run_list(ctx, inner, id, true).await,
            Step::Get(get) => get_step::run(ctx, id, get).await,
            Step::Task(task) => task_step::run(ctx, id, task).await,
        }
    })
}
