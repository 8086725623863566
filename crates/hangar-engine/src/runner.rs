//! Runs one build's plan: steps in sequence or in parallel, each leaf a get
//! or a task; resumes steps a previous run left behind.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use hangar_core::build::{BuildEventKind, StepKind, StepState};
use hangar_core::engine::{build_status, deciding_step, final_status_line};
use hangar_core::leases;
use hangar_core::plan::outcome::{self, Outcome};
use hangar_core::plan::{self, parse_build_plan, Modified, Parallel, Step};
use hangar_store::BuildRecord;
use tokio_util::sync::CancellationToken;

use crate::context::{give_up, BuildContext, Interrupted, StepEnd};
use crate::{get_step, load_var_step, put_step, set_pipeline_step, task_step, Engine};

pub(crate) async fn run(engine: Engine, build: BuildRecord, stop: CancellationToken) {
    let id = build.id;
    let token = build.lease_token;
    let abort = CancellationToken::new();
    // The lease keeper, the abort watch and the plan run in this one task:
    // when the node dies (or its task is dropped) nothing of the build is
    // left behind renewing its lease.
    let (lease, (), result) = tokio::join!(
        keep_lease(&engine, id, token, &stop),
        watch_abort(engine.clone(), id, stop.clone(), abort.clone()),
        async {
            let result = run_plan(&engine, &build, stop.clone(), abort).await;
            stop.cancel();
            result
        }
    );
    let Ok(end) = result else {
        if lease == Lease::Held {
            // Stopped here (shutdown, a database that failed a read): a
            // survivor resumes the build at once rather than a lease later.
            if let Err(e) = engine.store().release_build_lease(id, token).await {
                tracing::warn!(build = id, error = %e, "cannot release the build's lease; it runs out");
            }
        }
        tracing::info!(build = id, "build interrupted; it will be resumed");
        return;
    };
    let status = build_status(end.state);
    let now = engine.now();
    let line = final_status_line(status, end.error.as_deref());
    if let Err(e) = engine
        .store()
        .append_build_event_under_lease(id, token, None, BuildEventKind::Status, &line, now)
        .await
    {
        tracing::warn!(build = id, error = %e, "cannot append the build's final status line");
    }
    match engine
        .store()
        .finish_build(id, token, status, end.exit_code, end.error.as_deref(), now)
        .await
    {
        Ok(true) => {
            tracing::info!(build = id, %status, "build finished");
            engine.build_finished().notify_one();
        }
        Ok(false) => tracing::warn!(build = id, "build was taken over before it finished here"),
        Err(e) => {
            tracing::error!(build = id, error = %e, "cannot record the build's end; it will be resumed")
        }
    }
    engine.build_events().notify_waiters();
}

/// Whether this node still held the build's lease when the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    Held,
    Lost,
}

/// Renews the lease of claim `token` until `stop`. A renewal refused
/// (another node took the build) or none for a whole lease (the database
/// is unreachable, or this process was paused) stops the run: another
/// node may be running the build by now.
async fn keep_lease(engine: &Engine, id: i64, token: i64, stop: &CancellationToken) -> Lease {
    let lease_ms = engine.config().lease_ms;
    let every = Duration::from_millis(leases::renew_every_ms(lease_ms) as u64);
    // The node's own monotonic clock, not the build clock: a pause shows.
    let started = std::time::Instant::now();
    let elapsed = || i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let mut renewed_at = elapsed();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Lease::Held,
            _ = tokio::time::sleep(every) => {}
        }
        if leases::holder_must_stop(renewed_at, elapsed(), lease_ms) {
            tracing::warn!(
                build = id,
                "no lease renewal for a whole lease; stopping here"
            );
            stop.cancel();
            return Lease::Lost;
        }
        let asked_at = elapsed();
        // A database that does not answer is not waited on past the next
        // renewal: the lapse check above must get its turn.
        let renewal = tokio::time::timeout(
            every,
            engine
                .store()
                .renew_build_lease(id, token, engine.now(), lease_ms),
        )
        .await;
        match renewal {
            Ok(Ok(true)) => renewed_at = asked_at,
            Ok(Ok(false)) => {
                tracing::warn!(build = id, "lost the build's lease; stopping here");
                stop.cancel();
                return Lease::Lost;
            }
            Ok(Err(e)) => {
                tracing::warn!(build = id, error = %e, "cannot renew the build's lease")
            }
            Err(_) => tracing::warn!(build = id, "renewing the build's lease timed out"),
        }
    }
}

/// Cancels `abort` once a user asked for the build to be aborted.
async fn watch_abort(engine: Engine, id: i64, stop: CancellationToken, abort: CancellationToken) {
    loop {
        match engine.store().build_abort_requested(id).await {
            Ok(true) => {
                tracing::info!(build = id, "aborting the build as asked");
                abort.cancel();
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(build = id, error = %e, "cannot read whether the build is aborted")
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(engine.config().poll) => {}
        }
    }
}

async fn run_plan(
    engine: &Engine,
    build: &BuildRecord,
    stop: CancellationToken,
    abort: CancellationToken,
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
    // Where a set_pipeline step's `self` and team come from: the database,
    // never the plan.
    let pipeline = match engine.store().build_pipeline(build.id).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(build = build.id, error = %e, "cannot read the build's pipeline; leaving it to be resumed");
            return Err(Interrupted);
        }
    };
    // The stored plan keeps its `((vars))`: they are read again here, on
    // the node that runs the build, and kept in memory only. A job build's
    // are looked up under its pipeline first.
    // A one-off build's are its own team's.
    let team = pipeline
        .as_ref()
        .map(|(t, _)| t.clone())
        .or_else(|| build.team.clone())
        .unwrap_or_else(|| crate::secrets::BUILD_TEAM.to_string());
    let (stored, secrets) = match engine.credentials() {
        Some(credentials) => {
            let scope = pipeline.as_ref().map(|(_, p)| p.as_str());
            match crate::secrets::resolve_plan(credentials, &stored, &team, scope).await {
                Ok(resolved) => resolved,
                Err(e) => return Ok(invalid(format!("cannot resolve the plan's vars: {e}"))),
            }
        }
        None => {
            // Another node with a credential manager accepted this plan:
            // never run its tasks with the literal `((var))` text.
            let left = hangar_core::vars::find_unresolved_except_local(&stored);
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
    let job_build = match engine.store().build_job(build.id).await {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(build = build.id, error = %e, "cannot read the build's job; leaving it to be resumed");
            return Err(Interrupted);
        }
    };
    let ctx = BuildContext {
        engine: engine.clone(),
        build_id: build.id,
        job: hangar_core::caches::cache_job(job_build.as_ref().map(|j| j.job_id), &build.name),
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
        secrets: Mutex::new(secrets),
        local_vars: Mutex::new(Default::default()),
        pipeline,
        team,
        job_build,
        lease_token: build.lease_token,
        stop,
        action_output: Mutex::new(BTreeMap::new()),
        log_sink: None,
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
    let root = Cut {
        aborted: abort,
        timed_out: CancellationToken::new(),
    };
    let mut end = run_sequence(&ctx, &plan, "", &root).await?;
    if end.state == StepState::Aborted {
        end.error = Some("the build was aborted".into());
    }
    if end.state == StepState::Succeeded {
        crate::build_versions::on_success(&ctx).await?;
    }
    // The build's error is stored and shown: no secret in it.
    end.error = end.error.map(|e| ctx.redact(&e));
    Ok(end)
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Result<StepEnd, Interrupted>> + Send + 'a>>;

fn child_id(prefix: &str, i: usize) -> String {
    if prefix.is_empty() {
        i.to_string()
    } else {
        format!("{prefix}.{i}")
    }
}

fn succeeded() -> StepEnd {
    StepEnd {
        state: StepState::Succeeded,
        exit_code: Some(0),
        error: None,
    }
}

/// Runs steps in order, stopping at the first that does not succeed.
fn run_sequence<'a>(
    ctx: &'a BuildContext,
    steps: &'a [Step],
    prefix: &'a str,
    cut: &'a Cut,
) -> Boxed<'a> {
    Box::pin(async move {
        for (i, step) in steps.iter().enumerate() {
            let end = run_step(ctx, step, &child_id(prefix, i), cut).await?;
            if deciding_step(&[end.state]).is_some() {
                return Ok(end);
            }
        }
        Ok(succeeded())
    })
}

/// Runs `in_parallel`'s children, at most `limit` at once; with
/// `fail_fast` the first that does not succeed aborts the others (and
/// those not started never start).
fn run_parallel<'a>(
    ctx: &'a BuildContext,
    parallel: &'a Parallel,
    prefix: &'a str,
    cut: &'a Cut,
) -> Boxed<'a> {
    Box::pin(async move {
        let limit = outcome::parallel_limit(parallel.limit, parallel.steps.len());
        let siblings = cut.child();
        let mut ends: Vec<Option<StepEnd>> = vec![None; parallel.steps.len()];
        let mut running = FuturesUnordered::new();
        let mut next = 0;
        loop {
            while running.len() < limit
                && next < parallel.steps.len()
                && !siblings.aborted.is_cancelled()
            {
                let (i, step, siblings) = (next, &parallel.steps[next], &siblings);
                running.push(async move {
                    let id = child_id(prefix, i);
                    (i, run_step(ctx, step, &id, siblings).await)
                });
                next += 1;
            }
            let Some((i, end)) = running.next().await else {
                break;
            };
            let end = end?;
            if outcome::stops_siblings(Outcome::from_state(end.state), parallel.fail_fast) {
                siblings.aborted.cancel();
            }
            ends[i] = Some(end);
        }
        if cut.aborted.is_cancelled() {
            return Ok(aborted_end());
        }
        let outcomes: Vec<Outcome> = ends
            .iter()
            .flatten()
            .map(|e| Outcome::from_state(e.state))
            .collect();
        let result = outcome::parallel_outcome(&outcomes);
        if result == Outcome::Succeeded {
            return Ok(succeeded());
        }
        // The first child in plan order that ended so speaks for it.
        let deciding = ends
            .iter()
            .flatten()
            .find(|e| Outcome::from_state(e.state) == result)
            .or_else(|| {
                ends.iter()
                    .flatten()
                    .find(|e| e.state != StepState::Succeeded)
            })
            .cloned();
        Ok(match deciding {
            Some(mut end) => {
                end.state = result.state();
                end
            }
            None => StepEnd {
                state: result.state(),
                exit_code: None,
                error: Some("in_parallel stopped by fail_fast".into()),
            },
        })
    })
}

fn aborted_end() -> StepEnd {
    StepEnd {
        state: StepState::Aborted,
        exit_code: None,
        error: Some("aborted".into()),
    }
}

fn run_step<'a>(ctx: &'a BuildContext, step: &'a Step, id: &'a str, cut: &'a Cut) -> Boxed<'a> {
    Box::pin(async move {
        match step {
            Step::Do(inner) => run_sequence(ctx, inner, id, cut).await,
            Step::InParallel(parallel) => run_parallel(ctx, parallel, id, cut).await,
            Step::Get(_)
            | Step::Task(_)
            | Step::Put(_)
            | Step::LoadVar(_)
            | Step::SetPipeline(_) => run_leaf(ctx, step, id, cut).await,
            Step::Try(inner) => {
                let end = run_step(ctx, inner, id, cut).await?;
                Ok(match outcome::try_outcome(Outcome::from_state(end.state)) {
                    Outcome::Succeeded => succeeded(),
                    _ => end,
                })
            }
            Step::Modified(modified) => run_modified(ctx, modified, id, cut).await,
            Step::Across(_) => run_across(ctx, step, id, cut).await,
        }
    })
}

/// An across whose values come with the build (`values: ((.:var))`):
/// its values filled in, written out as the planner writes any other
/// across, and run in its place, so each combination's steps have ids
/// under this one. Values that are no list fail the step, as vars that
/// cannot be filled into a leaf do.
fn run_across<'a>(ctx: &'a BuildContext, step: &'a Step, id: &'a str, cut: &'a Cut) -> Boxed<'a> {
    Box::pin(async move {
        let Step::Across(a) = step else {
            unreachable!("run_across runs acrosses")
        };
        let expanded = ctx
            .fill_local_vars_in(&a.values())
            .and_then(|filled| a.expand(&filled, &format!("plan step {id}")));
        match expanded {
            Ok(combinations) => run_step(ctx, &combinations, id, cut).await,
            Err(why) => {
                let template = hangar_core::plan::leaf_steps(std::slice::from_ref(&*a.template));
                match template.iter().find(|(_, s)| !matches!(s, Step::Across(_))) {
                    Some((_, leaf)) => Ok(unfillable(ctx, id, leaf, why).await),
                    None => Ok(StepEnd {
                        state: StepState::Failed,
                        exit_code: None,
                        error: Some(why),
                    }),
                }
            }
        }
    })
}

/// A step with Concourse's modifiers: its attempts (each bounded by the
/// timeout), then its hooks, innermost first.
fn run_modified<'a>(
    ctx: &'a BuildContext,
    modified: &'a Modified,
    id: &'a str,
    cut: &'a Cut,
) -> Boxed<'a> {
    Box::pin(async move {
        let mut attempt = 1;
        let mut end = loop {
            let attempt_id = plan::attempt_id(id, attempt);
            let end = run_attempt(ctx, modified, &attempt_id, cut).await?;
            let ended = Outcome::from_state(end.state);
            if !outcome::attempt_again(ended, attempt, modified.attempts) || cut.is_cut() {
                break end;
            }
            attempt += 1;
            ctx.log(
                Some(id),
                BuildEventKind::Step,
                &format!(
                    "{}; attempt {attempt} of {}",
                    end.error.as_deref().unwrap_or(end.state.as_str()),
                    modified.attempts
                ),
            )
            .await;
        };
        for (hook, hook_step) in &modified.hooks {
            let before = Outcome::from_state(end.state);
            if !hook.runs_after(before) {
                continue;
            }
            // Hooks run to their end whatever stopped the step (Concourse
            // runs them on a fresh context): only the node stopping
            // interrupts them.
            let hook_end =
                run_step(ctx, hook_step, &plan::hook_id(id, *hook), &Cut::none()).await?;
            let after = hook.combine(before, Some(Outcome::from_state(hook_end.state)));
            if after != before {
                end = StepEnd {
                    state: after.state(),
                    exit_code: hook_end.exit_code,
                    error: Some(format!(
                        "{} hook: {}",
                        hook.key(),
                        hook_end.error.as_deref().unwrap_or(hook_end.state.as_str())
                    )),
                };
            }
        }
        Ok(end)
    })
}

/// One attempt of a modified step, cut short by its timeout.
async fn run_attempt(
    ctx: &BuildContext,
    modified: &Modified,
    id: &str,
    cut: &Cut,
) -> Result<StepEnd, Interrupted> {
    let Some(timeout) = modified.timeout else {
        return run_step(ctx, &modified.step, id, cut).await;
    };
    let timed = cut.child();
    // The timer is polled with the step, not spawned: whenever the step
    // ends or is dropped (its node killed, its build stopped), the timer
    // goes with it instead of sleeping on to the timeout.
    let timer = async {
        tokio::time::sleep(timeout).await;
        timed.timed_out.cancel();
        std::future::pending::<std::convert::Infallible>().await
    };
    let end = tokio::select! {
        end = run_step(ctx, &modified.step, id, &timed) => end,
        never = timer => match never {},
    };
    let end = end?;
    if timed.timed_out.is_cancelled() && !cut.is_cut() && end.state != StepState::Succeeded {
        ctx.log(
            Some(id),
            BuildEventKind::Step,
            &format!("timed out after {}", humantime(timeout)),
        )
        .await;
        return Ok(StepEnd {
            state: outcome::TIMED_OUT.state(),
            exit_code: None,
            error: Some(format!("timed out after {}", humantime(timeout))),
        });
    }
    Ok(end)
}

fn humantime(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A get or a task, cut short (its container destroyed, its record ended)
/// when the step is aborted or times out.
async fn run_leaf(
    ctx: &BuildContext,
    step: &Step,
    id: &str,
    cut: &Cut,
) -> Result<StepEnd, Interrupted> {
    if let Some(end) = cut.end_now() {
        return Ok(end);
    }
    // The local vars the build's load_var steps loaded so far, filled in
    // just before the step runs.
    let step = match ctx.fill_local_vars(step) {
        Ok(filled) => filled,
        Err(why) => return Ok(unfillable(ctx, id, step, why).await),
    };
    let leaf = async {
        match &step {
            Step::Get(get) => get_step::run(ctx, id, get).await,
            Step::Task(task) => task_step::run(ctx, id, task).await,
            Step::Put(put) => put_step::run(ctx, id, put).await,
            Step::LoadVar(load) => load_var_step::run(ctx, id, load).await,
            Step::SetPipeline(set) => set_pipeline_step::run(ctx, id, set).await,
            _ => unreachable!("run_leaf runs leaf steps"),
        }
    };
    let end = tokio::select! {
        end = leaf => return end,
        _ = cut.aborted.cancelled() => aborted_end(),
        _ = cut.timed_out.cancelled() => StepEnd {
            state: outcome::TIMED_OUT.state(),
            exit_code: None,
            error: Some("timed out".into()),
        },
    };
    cut_short(ctx, id, &end).await;
    Ok(end)
}

/// The end of a leaf whose vars cannot be filled in: its own failure, as a
/// task config that does not parse.
async fn unfillable(ctx: &BuildContext, id: &str, step: &Step, why: String) -> StepEnd {
    let (name, kind) = match step {
        Step::Get(g) => (g.get.as_str(), StepKind::Get),
        Step::Task(t) => (t.task.as_str(), StepKind::Task),
        Step::Put(p) => (p.put.as_str(), StepKind::Put),
        Step::LoadVar(l) => (l.load_var.as_str(), StepKind::LoadVar),
        Step::SetPipeline(s) => (s.set_pipeline.as_str(), StepKind::SetPipeline),
        _ => unreachable!("only leaf steps have vars"),
    };
    let (mut record, done) = ctx.resume_step(id, name, kind).await;
    if let Some(end) = done {
        return end;
    }
    let why = format!("cannot fill in its vars: {why}");
    give_up(ctx, &mut record, StepState::Failed, None, why).await
}

/// Ends the record of a step cut short and destroys its container, so
/// that nothing of it keeps running.
async fn cut_short(ctx: &BuildContext, id: &str, end: &StepEnd) {
    let records = match ctx.engine.store().build_steps(ctx.build_id).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(build = ctx.build_id, step = id, error = %e, "cannot read the step cut short");
            return;
        }
    };
    // The leaf's own record, and a put's implicit get; only what had not
    // ended (a step that ended as the cut came keeps its end).
    let implicit_get = format!("{id}.get");
    let unfinished = records.into_iter().filter(|r| {
        (r.step_id == id || r.step_id == implicit_get)
            && matches!(r.state, StepState::Pending | StepState::Running)
    });
    for mut record in unfinished {
        if let (Some(worker), Some(container)) = (record.worker.clone(), record.container.clone()) {
            if let Err(e) = ctx
                .engine
                .workers()
                .destroy_container(&worker, &container)
                .await
            {
                tracing::warn!(build = ctx.build_id, step = %record.step_id, error = ?e, "cannot destroy the container of a step cut short");
            }
        }
        give_up(
            ctx,
            &mut record,
            end.state,
            None,
            end.error.clone().unwrap_or_default(),
        )
        .await;
    }
}

/// What cuts a sub-plan short: an abort (the build's, or a `fail_fast`
/// sibling's) or a timeout. Each is a token a child scope inherits.
struct Cut {
    aborted: CancellationToken,
    timed_out: CancellationToken,
}

impl Cut {
    fn none() -> Cut {
        Cut {
            aborted: CancellationToken::new(),
            timed_out: CancellationToken::new(),
        }
    }

    fn child(&self) -> Cut {
        Cut {
            aborted: self.aborted.child_token(),
            timed_out: self.timed_out.child_token(),
        }
    }

    fn is_cut(&self) -> bool {
        self.aborted.is_cancelled() || self.timed_out.is_cancelled()
    }

    /// The end of a step that must not start: already aborted or timed out.
    fn end_now(&self) -> Option<StepEnd> {
        if self.aborted.is_cancelled() {
            Some(aborted_end())
        } else if self.timed_out.is_cancelled() {
            Some(StepEnd {
                state: outcome::TIMED_OUT.state(),
                exit_code: None,
                error: Some("timed out".into()),
            })
        } else {
            None
        }
    }
}
