//! `hangar chaos`: web and N real worker processes on loopback, a stream of
//! builds through the real client, and faults injected on a seeded schedule
//! ([`schedule`]). At the end the fleet is quiesced (no more faults, every
//! build finished, a few report intervals, one GC pass) and stopped, and the
//! database is compared with every worker's disk ([`check`]).
//!
//! One time decides a pass or a fail: the killed workers' median
//! kill-to-stalled ([`kill_to_stalled_bound_ms`]). Otherwise the run passes
//! when no build errored because of the infrastructure, every build ended
//! as it should (succeeded, or failed by its own doing when it was written
//! to), nothing diverges between database and disks, and no process is
//! left behind.

pub mod balancer;
pub mod check;
pub mod postgres;
pub mod schedule;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::CreateBuild;
use hangar_client::Client;
use hangar_core::rng::Rng;
use hangar_store::Store;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;

use crate::cgroup::{self, MemoryCgroup};
use crate::procfs::{self, FoundProcess};
use crate::procs::{self, now_ms, Proc, WebSpec, WorkerSpec};
use crate::stats::{fmt_opt, Summary};
use check::Divergence;
use schedule::{Fault, FaultKind};

#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `hangar` binary web and the workers run from.
    pub bin: PathBuf,
    /// How long builds are submitted and faults injected.
    pub duration: Duration,
    pub seed: u64,
    pub workers: usize,
    /// An admin URL of a PostgreSQL server: the run makes its own database
    /// there, and the database-restart fault stops and starts the server.
    /// Without it web runs on SQLite and that fault is left out.
    pub postgres_url: Option<String>,
    /// The server's data directory (found from its process when not given).
    pub postgres_data_dir: Option<PathBuf>,
    /// Start a throwaway PostgreSQL cluster for the run (instead of
    /// `postgres_url`), removed at its end.
    pub postgres_throwaway: bool,
    /// How many web nodes share the database (more than one needs
    /// PostgreSQL); workers and clients reach them through one balancer.
    pub web_nodes: usize,
    /// Where everything lives; default: a new dir under the temp dir.
    pub dir: Option<PathBuf>,
    /// Keep the dir (logs, databases, work dirs) even when the run passes.
    pub keep: bool,
    pub heartbeat_interval: Duration,
    pub heartbeat_ttl: Duration,
    pub report_interval: Duration,
    pub lifecycle_interval: Duration,
    /// A build is submitted this often while fewer than `max_in_flight` run.
    pub build_every: Duration,
    pub max_in_flight: usize,
    /// How long quiescing waits for the builds to finish.
    pub quiesce_timeout: Duration,
    /// How long, after that, it waits for the database and disks to agree.
    pub settle_timeout: Duration,
    /// Only these faults (default: every one that applies).
    pub kinds: Option<Vec<FaultKind>>,
}

impl ChaosConfig {
    pub fn new(bin: PathBuf, seed: u64) -> ChaosConfig {
        ChaosConfig {
            bin,
            duration: Duration::from_secs(240),
            seed,
            workers: 3,
            postgres_url: None,
            postgres_data_dir: None,
            postgres_throwaway: false,
            web_nodes: 1,
            dir: None,
            keep: false,
            heartbeat_interval: Duration::from_millis(300),
            heartbeat_ttl: Duration::from_secs(1),
            report_interval: Duration::from_secs(1),
            lifecycle_interval: Duration::from_millis(100),
            build_every: Duration::from_millis(700),
            max_in_flight: 8,
            quiesce_timeout: Duration::from_secs(180),
            settle_timeout: Duration::from_secs(100),
            kinds: None,
        }
    }
}

/// What a build was written to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildKind {
    /// A get and a task with an input and a cache: should succeed.
    Normal,
    /// The same, but its task exits 3: should fail, by its own fault.
    OwnFailure,
    /// The memory-hungry step of an OOM fault: should succeed (its retry
    /// finds its work done).
    Hog,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrackedBuild {
    pub id: i64,
    pub kind: BuildKind,
    pub status: String,
    pub error: Option<String>,
    pub retries: usize,
}

/// What happened in one fault.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultRecord {
    pub kind: String,
    pub at_ms: u64,
    pub worker: Option<String>,
    pub down_ms: u64,
    /// From the death (or the pause) to web's `stalled` event.
    pub death_to_stalled_ms: Option<i64>,
    /// A process kill: from the kill to every step that ran on the worker
    /// running again on another one (its next attempt placed and started).
    pub death_to_retry_ms: Option<i64>,
    /// `restarted-state-kept`, `restarted-state-lost`, … of the next
    /// registration.
    pub registration: Option<String>,
    /// From that registration to database and disk agreeing.
    pub reregistration_to_clean_ms: Option<i64>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildCounts {
    pub total: usize,
    pub succeeded: usize,
    /// Failed, and written to fail.
    pub failed_own: usize,
    /// Failed, though not written to fail (a failure blamed on the build
    /// that was the infrastructure's).
    pub failed_unexpected: usize,
    pub errored_infrastructure: usize,
    pub aborted: usize,
    /// Still pending or started after the quiesce timeout.
    pub unfinished: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerDivergence {
    pub volumes: Divergence,
    pub containers: Divergence,
}

#[derive(Debug, Clone, Serialize)]
pub struct BuildProblem {
    pub id: i64,
    pub kind: BuildKind,
    pub status: String,
    pub error: Option<String>,
    pub log_tail: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub duration_seconds: f64,
    pub workers: usize,
    pub web_nodes: usize,
    pub database: String,
    pub builds: BuildCounts,
    pub retries: usize,
    pub faults: Vec<FaultRecord>,
    pub faults_by_kind: BTreeMap<String, usize>,
    pub death_to_stalled_ms: Summary,
    /// Over the process kills (`kill-keep`, `kill-wipe`) alone: what a
    /// worker's presence makes fast.
    pub kill_to_stalled_ms: Summary,
    pub death_to_retry_ms: Summary,
    /// Whether the kills' median kill-to-stalled is within
    /// [`kill_to_stalled_bound_ms`]: the part of the retry a worker's
    /// presence makes fast, and what the run asserts.
    pub kill_bound_met: bool,
    /// Whether the kills' median death-to-retry is within
    /// [`KILL_TO_RETRY_BOUND_MS`]: reported, not asserted (the retry
    /// includes starting the step's container on another worker, which
    /// a loaded machine can slow past any bound).
    pub retry_bound_met: bool,
    pub reregistration_to_clean_ms: Summary,
    /// Re-registrations after which database and disk did not agree within
    /// the check's time limit.
    pub never_clean: usize,
    /// How long, after the builds finished and one GC pass, the database
    /// and the disks took to agree (the settle limit if they never did).
    pub settle_seconds: f64,
    pub divergence: BTreeMap<String, WorkerDivergence>,
    pub divergence_total: usize,
    pub leaked_processes: Vec<FoundProcess>,
    pub unexpected_exits: Vec<String>,
    pub gc: Vec<String>,
    pub problems: Vec<BuildProblem>,
    pub notes: Vec<String>,
    pub dir: String,
    pub passed: bool,
}

impl ChaosReport {
    /// The one line of figures.
    pub fn line(&self) -> String {
        let b = &self.builds;
        let kinds: Vec<String> = self
            .faults_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let (vr, vd, cr, cd) = self.divergence.values().fold((0, 0, 0, 0), |acc, d| {
            (
                acc.0 + d.volumes.rows_without_dir.len(),
                acc.1 + d.volumes.dirs_without_row.len(),
                acc.2 + d.containers.rows_without_dir.len(),
                acc.3 + d.containers.dirs_without_row.len(),
            )
        });
        let secs = |v: Option<f64>| fmt_opt(v.map(|ms| ms / 1000.0), 2);
        format!(
            "chaos seed={} {:.0}s {} workers {} web node(s) {}: builds {} (succeeded {}, failed-own {}, failed-unexpected {}, \
             errored-infra {}, unfinished {}); retries {}; faults {} ({}); \
             death-to-stalled p50 {}s max {}s (n={}); kill-to-stalled p50 {}ms; kill-to-stalled bound {}; death-to-retry p50 {}ms max {}ms (n={}, {} the {}ms target); re-registration-to-clean p50 {}ms max {}ms (n={}, never {}); \
             settled in {:.0}s; divergence {} (volume rows {} / dirs {}, container rows {} / dirs {}); leaked processes {}; {}",
            self.seed,
            self.duration_seconds,
            self.workers,
            self.web_nodes,
            self.database,
            b.total,
            b.succeeded,
            b.failed_own,
            b.failed_unexpected,
            b.errored_infrastructure,
            b.unfinished,
            self.retries,
            self.faults.len(),
            kinds.join(", "),
            secs(self.death_to_stalled_ms.p50),
            secs(self.death_to_stalled_ms.max),
            self.death_to_stalled_ms.count,
            fmt_opt(self.kill_to_stalled_ms.p50, 0),
            if self.kill_bound_met { "met" } else { "MISSED" },
            fmt_opt(self.death_to_retry_ms.p50, 0),
            fmt_opt(self.death_to_retry_ms.max, 0),
            self.death_to_retry_ms.count,
            if self.retry_bound_met { "within" } else { "over" },
            KILL_TO_RETRY_BOUND_MS,
            fmt_opt(self.reregistration_to_clean_ms.p50, 0),
            fmt_opt(self.reregistration_to_clean_ms.max, 0),
            self.reregistration_to_clean_ms.count,
            self.never_clean,
            self.settle_seconds,
            self.divergence_total,
            vr,
            vd,
            cr,
            cd,
            self.leaked_processes.len(),
            if self.passed { "PASS" } else { "FAIL" },
        )
    }
}

/// One worker's place in the fleet.
struct Slot {
    spec: WorkerSpec,
    proc: Option<Proc>,
    /// A fault keeps it down: the supervisor must not restart it.
    held_down: bool,
}

/// One web node's place.
struct WebSlot {
    spec: WebSpec,
    proc: Option<Proc>,
    /// A fault keeps it down (or paused): the supervisor leaves it.
    held_down: bool,
}

struct Fleet {
    cfg: ChaosConfig,
    dir: PathBuf,
    webs: Vec<WebSlot>,
    /// What workers and clients talk to: the one web node, or the balancer
    /// in front of several.
    url: String,
    slots: Vec<Slot>,
    client: Client,
    cgroup: Option<MemoryCgroup>,
    pg: Option<postgres::Cluster>,
    notes: Vec<String>,
    unexpected_exits: Vec<String>,
    builds: Arc<Mutex<Vec<TrackedBuild>>>,
    start: Instant,
    oom_count: usize,
}

fn exit_text(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => status.to_string(),
    }
}

impl Fleet {
    fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn note(&mut self, text: String) {
        eprintln!(
            "chaos [{:>6.1}s] {text}",
            self.start.elapsed().as_secs_f64()
        );
        self.notes.push(text);
    }

    fn say(&self, text: &str) {
        eprintln!(
            "chaos [{:>6.1}s] {text}",
            self.start.elapsed().as_secs_f64()
        );
    }

    fn start_worker(&mut self, i: usize) -> anyhow::Result<()> {
        let p = self.slots[i].spec.start()?;
        self.slots[i].proc = Some(p);
        self.slots[i].held_down = false;
        Ok(())
    }

    /// Restarts what died without a fault holding it down (as a pod's
    /// restart policy would) and records it.
    async fn supervise(&mut self) -> anyhow::Result<()> {
        for j in 0..self.webs.len() {
            if self.webs[j].held_down {
                continue;
            }
            if let Some(status) = self.webs[j].proc.as_mut().and_then(|w| w.exited()) {
                let text = format!(
                    "web node {j} exited on its own ({}); starting it again",
                    exit_text(&status)
                );
                self.unexpected_exits.push(text.clone());
                self.note(text);
                self.webs[j].proc = Some(self.webs[j].spec.start().await?);
            }
        }
        for i in 0..self.slots.len() {
            if self.slots[i].held_down {
                continue;
            }
            let exited = self.slots[i].proc.as_mut().and_then(|p| p.exited());
            if let Some(status) = exited {
                let name = self.slots[i].spec.name.clone();
                let text = format!(
                    "worker {name} exited on its own ({}); starting it again",
                    exit_text(&status)
                );
                self.unexpected_exits.push(text.clone());
                self.note(text);
                self.start_worker(i)?;
            }
        }
        Ok(())
    }

    async fn sleep(&mut self, d: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.supervise().await?;
            let left = until.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(100))).await;
        }
        Ok(())
    }

    async fn worker_row(&self, name: &str) -> Option<hangar_api::Worker> {
        self.client
            .workers()
            .await
            .ok()?
            .into_iter()
            .find(|w| w.name == name)
    }

    /// Waits until `name` runs as a generation newer than `after`.
    async fn wait_reregistered(
        &mut self,
        name: &str,
        after: i64,
        within: Duration,
    ) -> anyhow::Result<Option<hangar_api::Worker>> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(w) = self.worker_row(name).await {
                if w.generation > after && w.state == hangar_api::WorkerState::Running {
                    return Ok(Some(w));
                }
            }
            self.sleep(Duration::from_millis(50)).await?;
        }
        Ok(None)
    }

    /// Web's `stalled` event for `name` between two times, if any.
    async fn stalled_between(&self, name: &str, from_ms: i64, to_ms: i64) -> Option<i64> {
        let events = self.client.events(Some(name), 100).await.ok()?;
        events
            .iter()
            .filter(|e| {
                e.kind == hangar_api::EventKind::Stalled && e.at >= from_ms && e.at <= to_ms
            })
            .map(|e| e.at)
            .min()
    }

    fn volumes_dir(&self, i: usize) -> PathBuf {
        self.slots[i].spec.work_dir.join("volumes")
    }

    async fn volume_rows(&self, name: &str) -> Option<Vec<(String, String, bool)>> {
        Some(
            self.client
                .volumes(Some(name))
                .await
                .ok()?
                .into_iter()
                .map(|v| (v.handle, v.state.to_string(), v.missing_since.is_some()))
                .collect(),
        )
    }

    /// Polls until web's rows and the worker's disk agree; returns when.
    async fn wait_clean(&mut self, i: usize, within: Duration) -> anyhow::Result<Option<i64>> {
        let name = self.slots[i].spec.name.clone();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(before) = self.volume_rows(&name).await {
                let dirs = check::handles_on_disk(&self.volumes_dir(i));
                if let Some(after) = self.volume_rows(&name).await {
                    if check::clean_now(&before, &dirs, &after) {
                        return Ok(Some(now_ms()));
                    }
                }
            }
            self.sleep(Duration::from_millis(50)).await?;
        }
        Ok(None)
    }

    /// SIGKILLs worker `i`; with `tree`, also everything running under its
    /// work dir (its containers, its resource scripts), as a deleted pod.
    async fn kill_worker(&mut self, i: usize, tree: bool) {
        if let Some(p) = self.slots[i].proc.as_mut() {
            p.signal(Signal::SIGKILL);
        }
        if tree {
            let dir = self.slots[i].spec.work_dir.clone();
            for p in procfs::processes_under(&[dir]) {
                let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
            }
        }
        if let Some(mut p) = self.slots[i].proc.take() {
            p.kill().await;
        }
    }

    /// After worker `i` was brought back: waits for its new registration,
    /// then for its rows and disk to agree, and fills the record.
    async fn measure_return(
        &mut self,
        i: usize,
        generation_before: i64,
        death_ms: i64,
        rec: &mut FaultRecord,
    ) -> anyhow::Result<()> {
        let name = self.slots[i].spec.name.clone();
        let Some(w) = self
            .wait_reregistered(&name, generation_before, Duration::from_secs(60))
            .await?
        else {
            rec.notes.push("did not register again within 60s".into());
            return Ok(());
        };
        rec.registration = w
            .last_restart
            .as_ref()
            .filter(|e| e.generation == w.generation)
            .or(w.last_event.as_ref())
            .map(|e| e.kind.to_string());
        rec.death_to_stalled_ms = self
            .stalled_between(&name, death_ms, w.registered_at)
            .await
            .map(|at| at - death_ms);
        match self.wait_clean(i, Duration::from_secs(30)).await? {
            Some(at) => rec.reregistration_to_clean_ms = Some((at - w.registered_at).max(0)),
            None => rec
                .notes
                .push("rows and disk did not agree within 30s of the registration".into()),
        }
        Ok(())
    }

    async fn generation_of(&self, i: usize) -> i64 {
        self.worker_row(&self.slots[i].spec.name)
            .await
            .map(|w| w.generation)
            .unwrap_or(0)
    }

    async fn inject(&mut self, fault: &Fault) -> anyhow::Result<FaultRecord> {
        let mut rec = FaultRecord {
            kind: fault.kind.as_str().into(),
            at_ms: self.elapsed_ms(),
            down_ms: fault.down_for.as_millis() as u64,
            ..Default::default()
        };
        let i = fault.worker;
        if fault.kind.hits_a_worker() {
            rec.worker = Some(self.slots[i].spec.name.clone());
        }
        self.say(&format!(
            "fault {} on {} for {:?}",
            fault.kind.as_str(),
            rec.worker.as_deref().unwrap_or("the fleet"),
            fault.down_for
        ));
        match fault.kind {
            FaultKind::KillWipe | FaultKind::KillKeep => {
                let wipe = fault.kind == FaultKind::KillWipe;
                let before = self.generation_of(i).await;
                self.slots[i].held_down = true;
                let name = self.slots[i].spec.name.clone();
                let on_worker = steps_running_on(&self.webs[0].spec.database(), &name).await;
                let killed = Instant::now();
                let death = now_ms();
                self.kill_worker(i, wipe).await;
                let retries = tokio::spawn(retried_elsewhere(on_worker, name, killed));
                if wipe {
                    let dir = self.slots[i].spec.work_dir.clone();
                    let wiped = tokio::task::spawn_blocking({
                        let dir = dir.clone();
                        move || remove_dir_all_retrying(&dir)
                    })
                    .await
                    .map_err(std::io::Error::other)
                    .and_then(|r| r);
                    if let Err(e) = wiped {
                        rec.notes.push(format!("wipe {}: {e}", dir.display()));
                    }
                }
                self.sleep(fault.down_for).await?;
                self.start_worker(i)?;
                self.measure_return(i, before, death, &mut rec).await?;
                match retries.await {
                    Ok(Ok(ms)) => rec.death_to_retry_ms = Some(ms),
                    Ok(Err(why)) => rec.notes.push(format!("death-to-retry: {why}")),
                    Err(e) => rec.notes.push(format!("death-to-retry: {e}")),
                }
            }
            FaultKind::Pause => {
                let before = self.generation_of(i).await;
                self.slots[i].held_down = true;
                let paused = now_ms();
                if let Some(p) = &self.slots[i].proc {
                    p.signal(Signal::SIGSTOP);
                }
                self.sleep(fault.down_for).await?;
                if let Some(p) = &self.slots[i].proc {
                    p.signal(Signal::SIGCONT);
                }
                self.slots[i].held_down = false;
                self.measure_return(i, before, paused, &mut rec).await?;
            }
            FaultKind::Oom => self.inject_oom(i, fault, &mut rec).await?,
            FaultKind::WebRestart => {
                let j = fault.worker % self.webs.len();
                self.webs[j].held_down = true;
                if let Some(mut w) = self.webs[j].proc.take() {
                    w.kill().await;
                }
                self.sleep(fault.down_for).await?;
                let t = Instant::now();
                self.webs[j].proc = Some(self.webs[j].spec.start().await?);
                self.webs[j].held_down = false;
                rec.notes.push(format!(
                    "web node {j} answered {} ms after its start",
                    t.elapsed().as_millis()
                ));
            }
            FaultKind::WebPause => {
                let j = fault.worker % self.webs.len();
                self.webs[j].held_down = true;
                if let Some(w) = &self.webs[j].proc {
                    w.signal(Signal::SIGSTOP);
                }
                self.sleep(fault.down_for).await?;
                if let Some(w) = &self.webs[j].proc {
                    w.signal(Signal::SIGCONT);
                }
                self.webs[j].held_down = false;
                rec.notes.push(format!("web node {j} paused"));
            }
            FaultKind::DbRestart => {
                let Some(pg) = self.pg.clone() else {
                    rec.notes.push("no PostgreSQL cluster to restart".into());
                    return Ok(rec);
                };
                if let Err(e) = tokio::task::spawn_blocking({
                    let pg = pg.clone();
                    move || pg.stop()
                })
                .await?
                {
                    rec.notes.push(format!("stop: {e:#}"));
                }
                self.sleep(fault.down_for).await?;
                tokio::task::spawn_blocking(move || pg.start())
                    .await?
                    .context("start PostgreSQL again")?;
            }
        }
        for n in &rec.notes {
            self.say(&format!("  {n}"));
        }
        Ok(rec)
    }

    /// The OOM fault: worker `i` goes into the chaos memory cgroup, a hog
    /// step on it joins the cgroup and allocates past the limit, the kernel
    /// kills the worker; it is started again (outside the cgroup) on the
    /// same dir.
    async fn inject_oom(
        &mut self,
        i: usize,
        fault: &Fault,
        rec: &mut FaultRecord,
    ) -> anyhow::Result<()> {
        let Some(cg) = self.cgroup.as_ref() else {
            rec.notes.push("no memory cgroup; OOM fault skipped".into());
            return Ok(());
        };
        let Some(pid) = self.slots[i].proc.as_ref().and_then(|p| p.pid()) else {
            rec.notes
                .push("worker not running; OOM fault skipped".into());
            return Ok(());
        };
        let kills_before = cg.oom_kills().unwrap_or(0);
        let setup = cg
            .set_limit(OOM_LIMIT)
            .and_then(|()| cg.add(pid))
            .and_then(|()| cgroup::set_oom_score_adj(pid, 1000));
        if let Err(e) = setup {
            rec.notes.push(format!("OOM fault skipped: {e}"));
            return Ok(());
        }
        let before = self.generation_of(i).await;
        self.slots[i].held_down = true;
        self.oom_count += 1;
        // The hog holds its first attempt until this moment; an attempt
        // that starts later (the retry on a worker back from the dead) ends
        // at once. A task is sandboxed (its own /tmp, no way to the host),
        // so the harness learns that it runs from its log, not a file.
        let hold_until = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            + HOG_HOLD.as_secs();
        let name = self.slots[i].spec.name.clone();
        let script = hog_script(hold_until);
        let plan = serde_json::json!([{"task": "hog", "tags": [name], "config": {
            "platform": "linux",
            "run": {"path": "sh", "args": ["-c", script]},
        }}]);
        match self
            .client
            .create_build(&CreateBuild {
                resource_types: serde_json::Value::Null,
                name: Some("chaos-hog".into()),
                plan,
                artifacts: BTreeMap::new(),
                team: None,
            })
            .await
        {
            Ok(b) => self.builds.lock().expect("builds lock").push(TrackedBuild {
                id: b.id,
                kind: BuildKind::Hog,
                status: b.status.to_string(),
                error: None,
                retries: 0,
            }),
            Err(e) => {
                rec.notes
                    .push(format!("could not submit the hog build: {e}"));
                self.slots[i].held_down = false;
                return Ok(());
            }
        }
        // Once the hog's first attempt runs on the worker, the harness fills
        // the worker's memory cgroup: a task cannot join another cgroup or
        // spare itself from the OOM killer, and need not. The kernel then
        // kills the worker (oom_score_adj 1000), not the allocator.
        let hog = self
            .builds
            .lock()
            .expect("builds lock")
            .last()
            .map(|b| b.id);
        let started = Instant::now() + Duration::from_secs(30);
        while Instant::now() < started {
            let running = match hog {
                Some(id) => all_events(&self.client, id)
                    .await
                    .is_ok_and(|events| events.iter().any(|e| e.payload.contains(HOG_RUNNING))),
                None => true,
            };
            if running {
                break;
            }
            self.sleep(Duration::from_millis(50)).await?;
        }
        let spawned = match self.cgroup.as_ref() {
            Some(cg) => spawn_allocator(cg),
            None => Err("no memory cgroup".into()),
        };
        let mut allocator = match spawned {
            Ok(child) => Some(child),
            Err(e) => {
                rec.notes
                    .push(format!("could not start the allocator: {e}"));
                None
            }
        };
        // Wait for the kernel to kill the worker.
        let deadline = Instant::now() + Duration::from_secs(90);
        let death = loop {
            let exited = self.slots[i].proc.as_mut().and_then(|p| p.exited());
            if let Some(status) = exited {
                rec.notes
                    .push(format!("worker ended: {}", exit_text(&status)));
                break now_ms();
            }
            if Instant::now() > deadline {
                rec.notes
                    .push("worker was not OOM-killed within 90s; killing it".into());
                let death = now_ms();
                self.kill_worker(i, false).await;
                break death;
            }
            self.sleep(Duration::from_millis(20)).await?;
        };
        self.slots[i].proc = None;
        if let Some(mut child) = allocator.take() {
            let _ = child.kill();
            // Reaps a child just killed with SIGKILL: returns at once.
            #[allow(clippy::disallowed_methods)]
            let _ = child.wait();
        }
        let kills = self
            .cgroup
            .as_ref()
            .and_then(|c| c.oom_kills())
            .unwrap_or(0);
        rec.notes.push(format!(
            "kernel OOM kills in the cgroup: {}",
            kills.saturating_sub(kills_before)
        ));
        self.sleep(fault.down_for).await?;
        self.start_worker(i)?;
        self.measure_return(i, before, death, rec).await
    }
}

/// The chaos cgroup's memory limit during an OOM fault.
const OOM_LIMIT: u64 = 96 << 20;

/// How long the hog's first attempt holds its worker: time enough for
/// the harness to fill the worker's memory and the kernel to kill it.
const HOG_HOLD: Duration = Duration::from_secs(40);
/// What the hog prints when it runs.
const HOG_RUNNING: &str = "hog: running while the worker runs out of memory";

/// The hog step: an attempt says that it runs, then waits until
/// `hold_until` (seconds since the epoch) while the harness fills the
/// worker's memory; the retry, started after that, ends at once.
fn hog_script(hold_until: u64) -> String {
    format!(
        "echo '{HOG_RUNNING}'; \
         now=$(date +%s); \
         if [ \"$now\" -lt {hold_until} ]; then sleep $(({hold_until} - now)); fi; \
         echo 'hog: done'"
    )
}

/// A process in the chaos cgroup that allocates well past its limit. It
/// waits a moment before allocating, so it is in the cgroup before it asks.
fn spawn_allocator(cg: &MemoryCgroup) -> Result<std::process::Child, String> {
    let child = std::process::Command::new("python3")
        .args([
            "-c",
            "import time\ntime.sleep(0.3)\nb = []\nfor i in range(48):\n    b.append(b'x' * (8 << 20))\n    time.sleep(0.02)\ntime.sleep(30)",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("start python3: {e}"))?;
    cg.add(child.id())?;
    Ok(child)
}

// Blocks: run under spawn_blocking.
#[allow(clippy::disallowed_methods)]
fn remove_dir_all_retrying(dir: &Path) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..20 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    last
}

/// The tag every chaos worker carries, and every step of a normal build.
const FLEET_TAG: &str = "chaos";

/// The build plan of a normal (or own-failure) build `n`.
fn build_plan(n: u64, fail: bool) -> serde_json::Value {
    let end = if fail { "exit 3" } else { "true" };
    serde_json::json!([
        {"get": "thing", "type": "mock", "tags": [FLEET_TAG], "source": {"versions": [format!("v{}", n % 4)]}},
        {"task": "work", "tags": [FLEET_TAG], "config": {
            "platform": "linux",
            "inputs": [{"name": "thing"}],
            "caches": [{"path": "cache"}],
            "run": {"path": "sh", "args": ["-c",
                format!("cat thing/version; sleep 2; echo build-{n} >> cache/runs; {end}")]},
        }},
    ])
}

/// Submits builds until `stop`.
async fn submit_builds(
    client: Client,
    builds: Arc<Mutex<Vec<TrackedBuild>>>,
    seed: u64,
    every: Duration,
    max_in_flight: usize,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed ^ 0xb0b);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let in_flight = builds
            .lock()
            .expect("builds lock")
            .iter()
            .filter(|b| matches!(b.status.as_str(), "pending" | "started"))
            .count();
        if in_flight < max_in_flight {
            let fail = rng.chance(1, 8);
            let plan = build_plan(n, fail);
            // Web or its database may be down: then this one is skipped.
            if let Ok(b) = client
                .create_build(&CreateBuild {
                    resource_types: serde_json::Value::Null,
                    name: Some("chaos".into()),
                    plan,
                    artifacts: BTreeMap::new(),
                    team: None,
                })
                .await
            {
                n += 1;
                builds.lock().expect("builds lock").push(TrackedBuild {
                    id: b.id,
                    kind: if fail {
                        BuildKind::OwnFailure
                    } else {
                        BuildKind::Normal
                    },
                    status: b.status.to_string(),
                    error: None,
                    retries: 0,
                })
            }
        }
        let jitter = rng.range(0, every.as_millis() as u64 / 2);
        tokio::time::sleep(every + Duration::from_millis(jitter)).await;
    }
}

/// Refreshes the status of unfinished builds until `stop`.
async fn track_builds(
    client: Client,
    builds: Arc<Mutex<Vec<TrackedBuild>>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        refresh(&client, &builds).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn refresh(client: &Client, builds: &Arc<Mutex<Vec<TrackedBuild>>>) -> usize {
    let open: Vec<i64> = builds
        .lock()
        .expect("builds lock")
        .iter()
        .filter(|b| matches!(b.status.as_str(), "pending" | "started"))
        .map(|b| b.id)
        .collect();
    let mut still_open = 0;
    for id in open {
        match client.build(id).await {
            Ok(now) => {
                if matches!(now.status.as_str(), "pending" | "started") {
                    still_open += 1;
                }
                let mut all = builds.lock().expect("builds lock");
                if let Some(b) = all.iter_mut().find(|b| b.id == id) {
                    b.status = now.status.to_string();
                    b.error = now.error;
                }
            }
            Err(_) => still_open += 1,
        }
    }
    still_open
}

/// Every event of a build's log.
async fn all_events(
    client: &Client,
    id: i64,
) -> anyhow::Result<Vec<hangar_api::builds::BuildEvent>> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = client.build_events(id, after, 0).await?;
        if page.events.is_empty() {
            return Ok(out);
        }
        after = page.events.iter().map(|e| e.id).max().unwrap_or(after);
        out.extend(page.events);
    }
}

/// Refuses a configuration the run cannot honour.
fn check_config(cfg: &ChaosConfig) -> anyhow::Result<()> {
    if cfg.web_nodes == 0 {
        bail!("a run needs at least one web node");
    }
    if cfg.web_nodes > 1 && cfg.postgres_url.is_none() && !cfg.postgres_throwaway {
        bail!(
            "{} web nodes share one PostgreSQL database: pass --postgres-url or --postgres-throwaway",
            cfg.web_nodes
        );
    }
    if cfg.postgres_url.is_some() && cfg.postgres_throwaway {
        bail!("--postgres-url and --postgres-throwaway are two databases: pass one");
    }
    Ok(())
}

/// The fault kinds a run can inject.
fn available_kinds(cfg: &ChaosConfig, pg: bool, cgroup: bool) -> Vec<FaultKind> {
    let mut kinds = vec![
        FaultKind::KillWipe,
        FaultKind::KillKeep,
        FaultKind::Pause,
        FaultKind::WebRestart,
    ];
    // Pausing the only web node pauses everything; with several, the
    // others take its builds over.
    if cfg.web_nodes > 1 {
        kinds.push(FaultKind::WebPause);
    }
    if cgroup {
        kinds.push(FaultKind::Oom);
    }
    if pg {
        kinds.push(FaultKind::DbRestart);
    }
    match &cfg.kinds {
        Some(only) => kinds.into_iter().filter(|k| only.contains(k)).collect(),
        None => kinds,
    }
}

/// Runs one chaos run and returns its report (`passed` says whether it
/// passed). Errors are failures of the harness itself.
pub async fn run(cfg: ChaosConfig) -> anyhow::Result<ChaosReport> {
    // Refused before anything is made.
    check_config(&cfg)?;
    let dir = match &cfg.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.canonicalize()?
        }
        None => tempfile::Builder::new()
            .prefix(&format!("hangar-chaos-{}-", cfg.seed))
            .tempdir()?
            .keep()
            .canonicalize()?,
    };
    eprintln!("chaos: seed {} in {}", cfg.seed, dir.display());
    // A cluster of the run's own, outside the run's dir (which only we may
    // enter; the server runs as `postgres` when we are root).
    let throwaway = if cfg.postgres_throwaway {
        let pg_dir = tempfile::Builder::new()
            .prefix(&format!("hangar-chaos-pg-{}-", cfg.seed))
            .tempdir()?
            .keep();
        let (cluster, url) = tokio::task::spawn_blocking({
            let pg_dir = pg_dir.clone();
            move || postgres::start_throwaway(&pg_dir)
        })
        .await??;
        eprintln!(
            "chaos: throwaway PostgreSQL at {url} in {}",
            pg_dir.display()
        );
        Some((cluster, url, pg_dir))
    } else {
        None
    };
    let result = run_in(
        &cfg,
        &dir,
        throwaway.as_ref().map(|(c, u, _)| (c.clone(), u.clone())),
    )
    .await;
    if let Some((cluster, _, pg_dir)) = throwaway {
        let _ = tokio::task::spawn_blocking(move || cluster.discard(&pg_dir)).await;
    }
    let report = result?;
    if report.passed && !cfg.keep && cfg.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(report)
}

/// The run in `dir`, on a throwaway cluster (and its admin URL) if given.
async fn run_in(
    cfg: &ChaosConfig,
    dir: &Path,
    throwaway: Option<(postgres::Cluster, String)>,
) -> anyhow::Result<ChaosReport> {
    let dir = dir.to_path_buf();
    let mut notes = Vec::new();

    // The database: SQLite in the dir, or a fresh PostgreSQL database.
    let mut web_spec = WebSpec::new(&cfg.bin, &dir)?;
    web_spec.heartbeat_ttl = cfg.heartbeat_ttl;
    web_spec.lifecycle_interval = cfg.lifecycle_interval;
    // Garbage collection runs through the faults too, often and with a
    // short grace for missing rows.
    web_spec.extra_args = vec![
        "--gc-interval".into(),
        "2s".into(),
        "--gc-missing-grace-period".into(),
        "5s".into(),
        // A web restart mid-creation leaves `creating` rows; collect them
        // within the quiet period.
        "--gc-abandoned-creation-timeout".into(),
        "30s".into(),
        // The run's own-failure builds are one-off builds: their failed
        // task containers would be kept for intercept, holding their
        // volumes' dirs past their rows, and the settle check compares
        // rows with dirs. Keeping is tested on its own (e2e_intercept).
        "--gc-one-off-grace-period".into(),
        "0s".into(),
    ];
    let mut pg = None;
    let mut postgres_url = cfg.postgres_url.clone();
    if let Some((cluster, url)) = throwaway {
        pg = Some(cluster);
        postgres_url = Some(url);
    }
    if let Some(url) = &postgres_url {
        let db = format!(
            "hangar_chaos_{}_{}",
            cfg.seed,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let run_url = postgres::create_database(url, &db)?;
        web_spec.database_url = Some(run_url);
        let port = postgres::PgUrl::parse(url)?.port;
        let data_dir = if pg.is_some() {
            None
        } else {
            cfg.postgres_data_dir
                .clone()
                .or_else(|| postgres::find_data_dir(port))
        };
        match (data_dir, postgres::find_bin_dir()) {
            _ if pg.is_some() => {}
            (Some(data_dir), Some(bin)) => {
                // Refuse a wrong dir now, not at the first database restart
                // with the server already stopped.
                if !data_dir.join("postmaster.opts").is_file() {
                    anyhow::bail!(
                        "{} is not the data directory of a running PostgreSQL server (no postmaster.opts)",
                        data_dir.display()
                    );
                }
                pg = Some(postgres::Cluster {
                    bin,
                    data_dir,
                    log: dir.join("logs").join("postgres.log"),
                })
            }
            _ => notes.push(
                "PostgreSQL data dir or pg_ctl not found: no database restarts (pass --postgres-data-dir)"
                    .to_string(),
            ),
        }
    }
    // Each web node its own port, dir and log; one database.
    let specs: Vec<WebSpec> = if cfg.web_nodes == 1 {
        vec![web_spec]
    } else {
        (0..cfg.web_nodes)
            .map(|j| -> anyhow::Result<WebSpec> {
                let mut spec = web_spec.clone();
                spec.addr = std::net::SocketAddr::from(([127, 0, 0, 1], procs::free_port()?));
                spec.data_dir = dir.join(format!("web-{j}"));
                spec.log = dir.join("logs").join(format!("web-{j}.log"));
                Ok(spec)
            })
            .collect::<anyhow::Result<_>>()?
    };
    for spec in &specs {
        std::fs::create_dir_all(&spec.data_dir)?;
    }

    let cgroup = match MemoryCgroup::create(&format!("hangar-chaos-{}", cfg.seed)) {
        Ok(cg) => Some(cg),
        Err(e) => {
            notes.push(format!("no memory cgroup ({e}): no OOM faults"));
            None
        }
    };
    let kinds = available_kinds(cfg, pg.is_some(), cgroup.is_some());
    let faults = schedule::plan(
        cfg.seed,
        cfg.duration,
        cfg.workers,
        &kinds,
        cfg.heartbeat_ttl,
    );

    let mut webs = Vec::new();
    for spec in specs {
        let proc = Some(spec.start().await?);
        webs.push(WebSlot {
            spec,
            proc,
            held_down: false,
        });
    }
    // Several nodes: workers and clients reach whichever is up through a
    // balancer, as they would through a Service.
    let url = if webs.len() == 1 {
        webs[0].spec.url()
    } else {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let nodes: Vec<_> = webs.iter().map(|w| w.spec.addr).collect();
        balancer::Balancer::start(listener, &nodes)?.url()
    };
    let client = procs::admin_client(&url, Duration::from_secs(10))?;
    let builds = Arc::new(Mutex::new(Vec::new()));
    let mut fleet = Fleet {
        slots: (0..cfg.workers)
            .map(|i| {
                let name = format!("w{i}");
                let mut spec = WorkerSpec::new(&cfg.bin, &dir, &name, &url);
                spec.heartbeat_interval = cfg.heartbeat_interval;
                spec.report_interval = cfg.report_interval;
                // Its own name, for a fault aimed at it (the hog), and
                // the fleet's tag the normal builds carry: a tagged worker
                // takes only tagged steps.
                spec.tags = vec![name, FLEET_TAG.to_string()];
                Slot {
                    spec,
                    proc: None,
                    held_down: false,
                }
            })
            .collect(),
        cfg: cfg.clone(),
        dir: dir.clone(),
        webs,
        url,
        client,
        cgroup,
        pg,
        notes,
        unexpected_exits: Vec::new(),
        builds: builds.clone(),
        start: Instant::now(),
        oom_count: 0,
    };
    let result = drive(&mut fleet, &faults).await;
    // Whatever happened, nothing of the run keeps running.
    for s in &mut fleet.slots {
        if let Some(mut p) = s.proc.take() {
            p.kill().await;
        }
    }
    for w in &mut fleet.webs {
        if let Some(mut p) = w.proc.take() {
            // A paused node is killed as well; it only needs to be reaped.
            p.signal(Signal::SIGCONT);
            p.kill().await;
        }
    }
    if let Some(cg) = &fleet.cgroup {
        if let Err(e) = cg.remove() {
            eprintln!("chaos: {e}");
        }
    }
    result
}

async fn drive(fleet: &mut Fleet, faults: &[Fault]) -> anyhow::Result<ChaosReport> {
    let cfg = fleet.cfg.clone();
    for i in 0..fleet.slots.len() {
        fleet.start_worker(i)?;
    }
    for i in 0..fleet.slots.len() {
        let name = fleet.slots[i].spec.name.clone();
        procs::wait_for_state(&fleet.client, &name, "running", Duration::from_secs(60)).await?;
    }
    fleet.say(&format!(
        "{} workers running; {} faults planned over {:?}",
        fleet.slots.len(),
        faults.len(),
        cfg.duration
    ));
    fleet.start = Instant::now();
    let stop_submitting = Arc::new(AtomicBool::new(false));
    let stop_tracking = Arc::new(AtomicBool::new(false));
    let submitter = tokio::spawn(submit_builds(
        procs::admin_client(&fleet.url, Duration::from_secs(10))?,
        fleet.builds.clone(),
        cfg.seed,
        cfg.build_every,
        cfg.max_in_flight,
        stop_submitting.clone(),
    ));
    let tracker = tokio::spawn(track_builds(
        procs::admin_client(&fleet.url, Duration::from_secs(10))?,
        fleet.builds.clone(),
        stop_tracking.clone(),
    ));

    let mut records = Vec::new();
    for fault in faults {
        let wait = fault.at.saturating_sub(fleet.start.elapsed());
        fleet.sleep(wait).await?;
        records.push(fleet.inject(fault).await?);
    }
    let rest = cfg.duration.saturating_sub(fleet.start.elapsed());
    fleet.sleep(rest).await?;
    stop_submitting.store(true, Ordering::Relaxed);
    let _ = submitter.await;

    // Quiesce: every worker up, every build finished.
    fleet.say("quiescing: no more faults or builds; waiting for the builds to finish");
    for i in 0..fleet.slots.len() {
        if fleet.slots[i].proc.is_none() {
            fleet.start_worker(i)?;
        }
        fleet.slots[i].held_down = false;
    }
    let deadline = Instant::now() + cfg.quiesce_timeout;
    loop {
        let open = refresh(&fleet.client, &fleet.builds).await;
        if open == 0 || Instant::now() > deadline {
            break;
        }
        fleet.sleep(Duration::from_millis(500)).await?;
    }
    stop_tracking.store(true, Ordering::Relaxed);
    let _ = tracker.await;
    refresh(&fleet.client, &fleet.builds).await;
    fleet.sleep(cfg.report_interval * 3).await?;

    // One GC pass, with no grace for missing rows, then time for the
    // workers to act on it.
    let gc = run_gc(&fleet.webs[0].spec.database()).await;
    for line in &gc {
        fleet.say(&format!("gc: {line}"));
    }
    fleet
        .sleep(cfg.report_interval * 3 + Duration::from_secs(1))
        .await?;

    // Settle: the fleet is quiet; wait until the database and the disks
    // agree (a worker destroys a container it finds but web does not know
    // only once it is a minute old), up to a limit.
    let settling = Instant::now();
    let settled = match Store::open(&fleet.webs[0].spec.database()).await {
        Ok(store) => {
            let deadline = settling + cfg.settle_timeout;
            let agreed = loop {
                let (d, _) = compare_store_with_disks(fleet, &store).await;
                let left = divergence_total(&d);
                if left == 0 {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                fleet.sleep(Duration::from_secs(1)).await?;
            };
            store.close().await;
            agreed
        }
        Err(e) => {
            fleet.note(format!("cannot open the database to settle: {e}"));
            false
        }
    };
    let settle_seconds = settling.elapsed().as_secs_f64();
    fleet.say(&format!(
        "database and disks {} after {settle_seconds:.1}s of quiet",
        if settled { "agree" } else { "still disagree" }
    ));

    // Build outcomes and their logs, while web still runs.
    let mut tracked = fleet.builds.lock().expect("builds lock").clone();
    let mut problems = Vec::new();
    for b in &mut tracked {
        let events = all_events(&fleet.client, b.id).await.unwrap_or_default();
        b.retries = events
            .iter()
            .filter(|e| {
                e.kind == hangar_api::builds::BuildEventKind::Infra
                    && e.payload.contains("retrying")
            })
            .count();
        let expected = match b.kind {
            BuildKind::OwnFailure => "failed",
            _ => "succeeded",
        };
        if b.status != expected {
            problems.push(BuildProblem {
                id: b.id,
                kind: b.kind,
                status: b.status.clone(),
                error: b.error.clone(),
                log_tail: events
                    .iter()
                    .rev()
                    .take(25)
                    .rev()
                    .map(|e| {
                        format!(
                            "[{}] {}: {}",
                            e.step.as_deref().unwrap_or("-"),
                            e.kind,
                            e.payload.trim_end()
                        )
                    })
                    .collect(),
            });
        }
    }

    // Stop everything, then compare the database with the disks.
    fleet.say("stopping the fleet and comparing the database with the disks");
    for s in &mut fleet.slots {
        s.held_down = true;
        if let Some(mut p) = s.proc.take() {
            p.stop(Duration::from_secs(10)).await;
        }
    }
    for w in &mut fleet.webs {
        w.held_down = true;
        if let Some(mut p) = w.proc.take() {
            p.stop(Duration::from_secs(10)).await;
        }
    }
    let (divergence, snapshot_note) = compare_with_disks(fleet).await;
    if let Some(n) = snapshot_note {
        fleet.note(n);
    }
    let divergence_total = divergence_total(&divergence);
    // Give processes that were killed a moment to go, then count the rest.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leaked = procfs::processes_under(std::slice::from_ref(&fleet.dir));
    for p in &leaked {
        let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
    }

    let mut counts = BuildCounts {
        total: tracked.len(),
        ..Default::default()
    };
    for b in &tracked {
        match (b.status.as_str(), b.kind) {
            ("succeeded", _) => counts.succeeded += 1,
            ("failed", BuildKind::OwnFailure) => counts.failed_own += 1,
            ("failed", _) => counts.failed_unexpected += 1,
            ("errored", _) => counts.errored_infrastructure += 1,
            ("aborted", _) => counts.aborted += 1,
            _ => counts.unfinished += 1,
        }
    }
    let stalls: Vec<f64> = records
        .iter()
        .filter_map(|r| r.death_to_stalled_ms.map(|v| v as f64))
        .collect();
    let is_kill = |r: &&FaultRecord| matches!(r.kind.as_str(), "kill-keep" | "kill-wipe");
    let kill_stalls: Vec<f64> = records
        .iter()
        .filter(is_kill)
        .filter_map(|r| r.death_to_stalled_ms.map(|v| v as f64))
        .collect();
    let retries: Vec<f64> = records
        .iter()
        .filter(is_kill)
        .filter_map(|r| r.death_to_retry_ms.map(|v| v as f64))
        .collect();
    let kill_to_stalled_ms = Summary::of(&kill_stalls);
    let death_to_retry_ms = Summary::of(&retries);
    let stall_bound = kill_to_stalled_bound_ms(cfg.heartbeat_ttl) as f64;
    let kill_bound_met = kill_to_stalled_ms.p50.is_none_or(|ms| ms <= stall_bound);
    let retry_bound_met = death_to_retry_ms
        .p50
        .is_none_or(|ms| ms <= KILL_TO_RETRY_BOUND_MS as f64);
    let cleans: Vec<f64> = records
        .iter()
        .filter_map(|r| r.reregistration_to_clean_ms.map(|v| v as f64))
        .collect();
    let never_clean = records
        .iter()
        .filter(|r| r.registration.is_some() && r.reregistration_to_clean_ms.is_none())
        .count();
    let mut by_kind = BTreeMap::new();
    for r in &records {
        *by_kind.entry(r.kind.clone()).or_insert(0) += 1;
    }
    let passed = counts.errored_infrastructure == 0
        && counts.failed_unexpected == 0
        && counts.unfinished == 0
        && counts.aborted == 0
        && divergence_total == 0
        && leaked.is_empty()
        && kill_bound_met;
    let database = fleet.webs[0].spec.database();
    Ok(ChaosReport {
        seed: cfg.seed,
        duration_seconds: cfg.duration.as_secs_f64(),
        workers: cfg.workers,
        web_nodes: cfg.web_nodes,
        database: database.split(':').next().unwrap_or("").to_string(),
        retries: tracked.iter().map(|b| b.retries).sum(),
        builds: counts,
        faults: records,
        faults_by_kind: by_kind,
        death_to_stalled_ms: Summary::of(&stalls),
        kill_to_stalled_ms,
        death_to_retry_ms,
        kill_bound_met,
        retry_bound_met,
        reregistration_to_clean_ms: Summary::of(&cleans),
        never_clean,
        settle_seconds,
        divergence,
        divergence_total,
        leaked_processes: leaked,
        unexpected_exits: fleet.unexpected_exits.clone(),
        gc,
        problems,
        notes: fleet.notes.clone(),
        dir: fleet.dir.display().to_string(),
        passed,
    })
}

/// The target of a process kill: the median kill, to the worker's running
/// steps running again on other workers, within a second (its presence
/// closes with the process and web stalls it at once).
pub const KILL_TO_RETRY_BOUND_MS: i64 = 1000;

/// What the run asserts of process kills: their median kill-to-stalled
/// within a second and within half the TTL, so a stall that came from the
/// TTL (a presence path that no longer works) cannot pass for one that
/// came from the presence, however short the run's TTL.
pub fn kill_to_stalled_bound_ms(heartbeat_ttl: Duration) -> i64 {
    (heartbeat_ttl.as_millis() as i64 / 2).min(KILL_TO_RETRY_BOUND_MS)
}

/// A step's attempt: its build, its place in the plan, its attempt.
type Attempt = (i64, String, i64);

/// Steps running on `worker` now, read from the database at `url` (kept
/// open to watch them); an error is said as the reason there are none.
async fn steps_running_on(url: &str, worker: &str) -> Result<(Store, Vec<Attempt>), String> {
    let store = Store::open(url).await.map_err(|e| e.to_string())?;
    let builds = store.list_builds(200).await.map_err(|e| e.to_string())?;
    let mut running = Vec::new();
    for b in builds.iter().filter(|b| !b.status.is_final()) {
        let steps = store.build_steps(b.id).await.map_err(|e| e.to_string())?;
        running.extend(
            steps
                .into_iter()
                .filter(|s| {
                    s.state == hangar_core::build::StepState::Running
                        && s.worker.as_deref() == Some(worker)
                })
                .map(|s| (b.id, s.step_id, s.attempt)),
        );
    }
    Ok((store, running))
}

/// From `killed`, the time until every step that ran on `worker` runs on
/// another worker (a later attempt there, not pending) or its build ended.
async fn retried_elsewhere(
    on_worker: Result<(Store, Vec<Attempt>), String>,
    worker: String,
    killed: Instant,
) -> Result<i64, String> {
    let (store, mut waiting) = on_worker?;
    if waiting.is_empty() {
        store.close().await;
        return Err("no step ran on the worker".into());
    }
    let deadline = killed + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut still = Vec::new();
        for (build, step, attempt) in waiting {
            let ended = match store.get_build(build).await {
                Ok(Some(b)) => b.status.is_final(),
                _ => false,
            };
            let moved = store.build_steps(build).await.is_ok_and(|steps| {
                steps.iter().any(|s| {
                    s.step_id == step
                        && s.attempt > attempt
                        && s.state != hangar_core::build::StepState::Pending
                        && s.worker.as_deref().is_some_and(|w| w != worker)
                })
            });
            if !ended && !moved {
                still.push((build, step, attempt));
            }
        }
        waiting = still;
        if waiting.is_empty() {
            store.close().await;
            return Ok(killed.elapsed().as_millis() as i64);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close().await;
    Err(format!("{} step(s) not retried within 60s", waiting.len()))
}

/// One pass of every collector, straight on the database, with no grace
/// for missing rows.
async fn run_gc(url: &str) -> Vec<String> {
    let store = match Store::open(url).await {
        Ok(s) => s,
        Err(e) => return vec![format!("cannot open the database for GC: {e}")],
    };
    let config = hangar_core::gc::GcConfig {
        missing_grace_ms: 0,
        ..Default::default()
    };
    let out = store
        .run_gc(&config, now_ms())
        .await
        .into_iter()
        .filter_map(|(collector, result)| match result {
            Ok(s) if s.found == 0 && s.destroyed == 0 && s.failed == 0 => None,
            Ok(s) => Some(format!(
                "{collector}: found {}, destroyed {}, failed {}",
                s.found, s.destroyed, s.failed
            )),
            Err(e) => Some(format!("{collector}: {e}")),
        })
        .collect();
    store.close().await;
    out
}

/// Every worker's rows against its disk, with web and workers stopped.
async fn compare_with_disks(fleet: &Fleet) -> (BTreeMap<String, WorkerDivergence>, Option<String>) {
    let url = fleet.webs[0].spec.database();
    let store = match Store::open(&url).await {
        Ok(s) => s,
        Err(e) => {
            return (
                BTreeMap::new(),
                Some(format!("cannot open the database to compare: {e}")),
            )
        }
    };
    let out = compare_store_with_disks(fleet, &store).await;
    store.close().await;
    out
}

fn divergence_total(d: &BTreeMap<String, WorkerDivergence>) -> usize {
    d.values()
        .map(|d| d.volumes.total() + d.containers.total())
        .sum()
}

/// Every worker's rows (read from `store`) against its disk.
async fn compare_store_with_disks(
    fleet: &Fleet,
    store: &Store,
) -> (BTreeMap<String, WorkerDivergence>, Option<String>) {
    let mut out = BTreeMap::new();
    let (volumes, containers) = match (
        store.list_volumes(None).await,
        store.list_containers(None).await,
    ) {
        (Ok(v), Ok(c)) => (v, c),
        (Err(e), _) | (_, Err(e)) => {
            return (out, Some(format!("cannot read rows to compare: {e}")));
        }
    };
    for s in &fleet.slots {
        let name = &s.spec.name;
        let vrows: Vec<(String, String)> = volumes
            .iter()
            .filter(|v| &v.worker == name)
            .map(|v| {
                let state = if v.missing_since.is_some() {
                    format!("{} missing", v.state)
                } else {
                    v.state.to_string()
                };
                (v.handle.clone(), state)
            })
            .collect();
        let crows: Vec<(String, String)> = containers
            .iter()
            .filter(|c| &c.worker == name)
            .map(|c| (c.handle.clone(), c.state.to_string()))
            .collect();
        let vdirs = check::handles_on_disk(&s.spec.work_dir.join("volumes"));
        let cdirs = check::handles_on_disk(&s.spec.work_dir.join("containers"));
        out.insert(
            name.clone(),
            WorkerDivergence {
                volumes: check::compare(&vrows, &["created"], &vdirs),
                containers: check::compare(&crows, &["creating", "created"], &cdirs),
            },
        );
    }
    let known: Vec<&str> = fleet.slots.iter().map(|s| s.spec.name.as_str()).collect();
    let strays = volumes
        .iter()
        .filter(|v| !known.contains(&v.worker.as_str()))
        .count();
    let note =
        (strays > 0).then(|| format!("{strays} volume rows on workers the run does not know"));
    (out, note)
}

/// Fails with the report's line when the run did not pass (for callers that
/// want an error).
pub fn ensure_passed(report: &ChaosReport) -> anyhow::Result<()> {
    if !report.passed {
        bail!("{}", report.line());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(web_nodes: usize, url: bool, throwaway: bool) -> ChaosConfig {
        let mut cfg = ChaosConfig::new(PathBuf::from("/bin/hangar"), 1);
        cfg.web_nodes = web_nodes;
        cfg.postgres_url = url.then(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
        cfg.postgres_throwaway = throwaway;
        cfg
    }

    #[test]
    fn several_web_nodes_need_postgres_and_one_database() {
        // (web nodes, --postgres-url, --postgres-throwaway, accepted)
        let cases = [
            (1, false, false, true),
            (1, true, false, true),
            (1, false, true, true),
            (2, false, false, false),
            (2, true, false, true),
            (3, false, true, true),
            (0, false, true, false),
            (2, true, true, false),
        ];
        for (nodes, url, throwaway, ok) in cases {
            let result = check_config(&config(nodes, url, throwaway));
            assert_eq!(result.is_ok(), ok, "{nodes} {url} {throwaway}: {result:?}");
        }
    }

    #[test]
    fn web_nodes_are_paused_only_when_there_are_several() {
        let one = available_kinds(&config(1, false, false), false, false);
        let two = available_kinds(&config(2, false, true), true, false);
        assert!(!one.contains(&FaultKind::WebPause));
        assert!(!one.contains(&FaultKind::DbRestart));
        assert!(two.contains(&FaultKind::WebPause));
        assert!(two.contains(&FaultKind::DbRestart));
        assert!(two.contains(&FaultKind::WebRestart));
    }
}
