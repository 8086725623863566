//! A seeded, deterministic simulation of web's core logic with N workers and
//! faults, in virtual time.
//!
//! The decisions are hangar-core's own, the very functions web and the build
//! engine call, never copies of them: registration classification
//! ([`classify_registration`]), generation fencing ([`check_generation`]),
//! the lifecycle planner ([`plan_lifecycle`]), the volume report planner
//! ([`plan_report`]), placement ([`place`]), a step's worker watch
//! ([`worker_change`]), retries ([`decide_retry`]), and the engine's rules
//! in `hangar_core::engine`: which volume may be handed out
//! ([`volume_usable`]), whether an input is still there ([`input_check`]),
//! what a failed call to a worker is ([`call_failure`],
//! [`input_call_failure`]), what a failure changes for the next attempt
//! ([`after_failure`]), waiting for web to judge an unreachable worker
//! ([`Settle`]), and how a build ends ([`deciding_step`], [`build_status`]).
//! Around them the simulation plays what the store, the engine and the
//! worker processes do with those decisions, in 100 ms ticks, while a seeded
//! schedule kills workers (with and without their disk), pauses them,
//! replaces them while the old process is partitioned (a zombie), takes
//! volumes from a live worker's disk, and takes web (or its database) down.
//!
//! Invariants checked as it runs, and at the end:
//! - no step is placed on a worker that is not running, or under a
//!   generation that is not the newest issued for its name;
//! - no volume is handed out (copy-on-write parent, copy source) while its
//!   row is missing or not created;
//! - no heartbeat or report is accepted from a fenced generation;
//! - every build terminates once the faults stop;
//! - no infrastructure failure ends a step while attempts remain (and no
//!   step gives up for want of a worker: it waits for one), and no single
//!   fault uses up a step's attempts: a step that errors blamed at least two
//!   worker incarnations;
//! - nothing is blamed on a build that the infrastructure did;
//! - after quiet time, every present `created` row is on its worker's disk
//!   and every directory on a disk has a row.
//!
//! [`run`] returns the first violation with the seed and a trace of what led
//! to it; pin a failing seed as a test with [`run`] and `assert!(…is_ok())`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use hangar_core::build::{
    decide_retry, worker_change, BuildStatus, FailureClass, RetryDecision, StepFailure, StepState,
    WorkerSeen,
};
use hangar_core::engine::{
    after_failure, build_status, call_failure, deciding_step, input_call_failure, input_check,
    volume_usable, CallError, InputCheck, Observed, Settle, VolumeSeen, WorkerBeat,
};
use hangar_core::fencing::{check_generation, Refusal};
use hangar_core::lifecycle::{plan_lifecycle, LifecycleConfig, LifecycleStep};
use hangar_core::placement::{place, Candidate, Load, Requirement};
use hangar_core::registration::{classify_registration, KnownWorker, RegistrationKind};
use hangar_core::volumes::{plan_report, VolumeRow, VolumeState};
use hangar_core::WorkerState;

use hangar_core::rng::Rng;

const TICK: i64 = 100;
const HEARTBEAT: i64 = 300;
const TTL: i64 = 1_000;
const REPORT: i64 = 1_000;
const MAX_ATTEMPTS: u32 = 3;
/// Faults happen before this; builds are submitted before it too.
const FAULTS_UNTIL: i64 = 40_000;
/// Every build must have ended by this.
const END: i64 = 160_000;
/// How long quiet time lasts after the last build ends, before the final
/// comparison of rows and disks.
const SETTLE: i64 = 4 * REPORT;
const TRACE_LEN: usize = 40;

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub seed: u64,
    pub at_ms: i64,
    pub what: String,
    /// The last notable events before it, oldest first.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} violated an invariant at t={}ms: {}",
            self.seed, self.at_ms, self.what
        )?;
        writeln!(f, "last events:")?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        write!(
            f,
            "replay it with hangar_sim::run({}); pin it as a test in crates/hangar-sim/tests/simulation.rs",
            self.seed
        )
    }
}

/// What one run did, to show the simulation is not vacuous.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub workers: usize,
    pub builds: usize,
    pub succeeded: usize,
    /// Builds that errored after every attempt of a step failed on the
    /// infrastructure (allowed: the attempts ran out).
    pub errored: usize,
    pub retries: usize,
    pub refetches: usize,
    pub placements: usize,
    pub stalls: usize,
    pub superseded: usize,
    pub registrations: BTreeMap<&'static str, usize>,
    pub faults: BTreeMap<&'static str, usize>,
    pub ended_at_ms: i64,
}

impl SimStats {
    pub fn add(&mut self, o: &SimStats) {
        self.builds += o.builds;
        self.succeeded += o.succeeded;
        self.errored += o.errored;
        self.retries += o.retries;
        self.refetches += o.refetches;
        self.placements += o.placements;
        self.stalls += o.stalls;
        self.superseded += o.superseded;
        for (k, v) in &o.registrations {
            *self.registrations.entry(k).or_insert(0) += v;
        }
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_insert(0) += v;
        }
    }
}

/// A worker process.
#[derive(Debug, Clone)]
struct Process {
    name: usize,
    disk: usize,
    /// The generation it registered as; `None` until it does.
    generation: Option<i64>,
    alive: bool,
    paused_until: Option<i64>,
    next_heartbeat: i64,
    next_report: i64,
}

impl Process {
    fn reachable(&self, now: i64) -> bool {
        self.alive && self.paused_until.is_none_or(|t| t <= now)
    }
}

/// A work dir.
#[derive(Debug, Clone)]
struct Disk {
    identity: String,
    volumes: BTreeSet<String>,
    /// Volumes the disk lost on its own (not destroyed as web asked), and
    /// when.
    lost: BTreeMap<String, i64>,
    /// When web last accepted a report of this disk.
    last_report: Option<i64>,
}

/// Web's row of a worker.
#[derive(Debug, Clone)]
struct Row {
    state: WorkerState,
    generation: i64,
    identity: String,
    last_heartbeat: i64,
    state_changed: i64,
}

/// Web's row of a volume.
#[derive(Debug, Clone)]
struct Vol {
    worker: usize,
    state: VolumeState,
    parent: Option<String>,
    missing_since: Option<i64>,
    /// The cache key placement matches on, if it is a cache.
    key: Option<String>,
}

#[derive(Debug, Clone)]
enum Phase {
    Waiting,
    /// After a worker could not be reached: waits for web to decide about
    /// it (the engine's own rule, [`Settle`]) before the next attempt.
    Settling {
        worker: usize,
        settle: Settle,
    },
    /// Placed; its volumes are handed out at `ready_at`.
    Preparing {
        worker: usize,
        seen: WorkerSeen,
        ready_at: i64,
    },
    Running {
        worker: usize,
        seen: WorkerSeen,
        ends_at: i64,
        scratch: Vec<String>,
        made: Option<String>,
    },
    Done,
}

#[derive(Debug, Clone)]
struct Step {
    attempt: u32,
    avoid: BTreeSet<String>,
    phase: Phase,
    /// The worker incarnations (name, generation) its failed attempts
    /// blamed.
    blamed: BTreeSet<(usize, i64)>,
    /// How it ended, once it has.
    end: Option<StepState>,
}

impl Step {
    fn new() -> Step {
        Step {
            attempt: 1,
            avoid: BTreeSet::new(),
            phase: Phase::Waiting,
            blamed: BTreeSet::new(),
            end: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Build {
    id: usize,
    version: u64,
    get: Step,
    task: Step,
    artifact: Option<String>,
    status: Option<BuildStatus>,
}

struct Sim {
    seed: u64,
    rng: Rng,
    now: i64,
    names: Vec<String>,
    cache_keys: Vec<String>,
    procs: Vec<Process>,
    /// Each name's current process, and a restart due for it.
    current: Vec<Option<usize>>,
    restart_at: Vec<Option<(i64, bool)>>,
    disks: Vec<Disk>,
    rows: Vec<Option<Row>>,
    vols: BTreeMap<String, Vol>,
    /// The newest generation issued for each name.
    issued: Vec<i64>,
    counter: i64,
    web_down_until: i64,
    builds: Vec<Build>,
    submit_at: Vec<i64>,
    next_handle: u64,
    next_identity: u64,
    trace: VecDeque<String>,
    stats: SimStats,
    lifecycle: LifecycleConfig,
    fault_every: u64,
}

type Check = Result<(), String>;

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let workers = 2 + rng.index(3);
        let builds = 10 + rng.index(10);
        // One fault every 2.5 to 6 seconds on average.
        let fault_every = 25 + rng.range(0, 35);
        let mut submit_at: Vec<i64> = (0..builds)
            .map(|_| rng.range(0, (FAULTS_UNTIL - 5_000) as u64) as i64)
            .collect();
        submit_at.sort();
        let names: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
        let mut sim = Sim {
            seed,
            rng,
            now: 0,
            cache_keys: names.iter().map(|_| "task-cache".to_string()).collect(),
            names,
            procs: Vec::new(),
            current: vec![None; workers],
            restart_at: vec![None; workers],
            disks: Vec::new(),
            rows: vec![None; workers],
            vols: BTreeMap::new(),
            issued: vec![0; workers],
            counter: 0,
            web_down_until: 0,
            builds: Vec::new(),
            submit_at,
            next_handle: 0,
            next_identity: 0,
            trace: VecDeque::new(),
            stats: SimStats {
                workers,
                builds,
                ..Default::default()
            },
            lifecycle: LifecycleConfig {
                heartbeat_ttl_ms: TTL,
                stalled_worker_timeout_ms: None,
            },
            fault_every,
        };
        for i in 0..workers {
            let disk = sim.new_disk();
            sim.spawn(i, disk);
        }
        sim
    }

    fn log(&mut self, text: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("t={} {text}", self.now));
    }

    fn new_disk(&mut self) -> usize {
        self.next_identity += 1;
        self.disks.push(Disk {
            identity: format!("identity-{}", self.next_identity),
            volumes: BTreeSet::new(),
            lost: BTreeMap::new(),
            last_report: None,
        });
        self.disks.len() - 1
    }

    fn spawn(&mut self, name: usize, disk: usize) -> usize {
        let jitter = self.rng.range(0, HEARTBEAT as u64) as i64;
        self.procs.push(Process {
            name,
            disk,
            generation: None,
            alive: true,
            paused_until: None,
            next_heartbeat: self.now + jitter,
            next_report: self.now + jitter,
        });
        let p = self.procs.len() - 1;
        self.current[name] = Some(p);
        p
    }

    fn web_up(&self) -> bool {
        self.now >= self.web_down_until
    }

    fn handle(&mut self) -> String {
        self.next_handle += 1;
        format!("vol-{}", self.next_handle)
    }

    fn seen(&self, w: usize) -> Option<WorkerSeen> {
        self.rows[w].as_ref().map(|r| WorkerSeen {
            state: r.state,
            generation: r.generation,
            state_identity: r.identity.clone(),
        })
    }

    /// The process serving name `w`'s newest registration, if reachable.
    fn serving(&self, w: usize) -> Option<usize> {
        let row = self.rows[w].as_ref()?;
        self.procs.iter().position(|p| {
            p.name == w && p.generation == Some(row.generation) && p.reachable(self.now)
        })
    }

    // ----- faults -----

    fn faults(&mut self) {
        if self.now >= FAULTS_UNTIL || !self.rng.chance(1, self.fault_every) {
            return;
        }
        let w = self.rng.index(self.names.len());
        let kind = self.rng.index(6);
        let Some(p) = self.current[w] else { return };
        if !self.procs[p].reachable(self.now) && kind != 5 {
            return;
        }
        let name = self.names[w].clone();
        match kind {
            0 | 1 => {
                let wipe = kind == 0;
                let down = self.rng.range(100, 4_000) as i64;
                self.procs[p].alive = false;
                self.current[w] = None;
                self.restart_at[w] = Some((self.now + down, wipe));
                let label = if wipe { "kill-wipe" } else { "kill-keep" };
                *self.stats.faults.entry(label).or_insert(0) += 1;
                self.log(format!("fault {label} {name} for {down}ms"));
            }
            2 => {
                let d = self.rng.range(500, 4_000) as i64;
                self.procs[p].paused_until = Some(self.now + d);
                *self.stats.faults.entry("pause").or_insert(0) += 1;
                self.log(format!("fault pause {name} for {d}ms"));
            }
            3 => {
                // The old process is cut off (a zombie) while a new one,
                // on a new disk, takes the name.
                let d = self.rng.range(1_500, 5_000) as i64;
                self.procs[p].paused_until = Some(self.now + d);
                let disk = self.new_disk();
                self.spawn(w, disk);
                *self.stats.faults.entry("replace").or_insert(0) += 1;
                self.log(format!(
                    "fault replace {name}; the old process is a zombie for {d}ms"
                ));
            }
            4 => {
                // A volume vanishes from a live worker's disk (an operator,
                // a failed remount): only the next report can tell web.
                let disk = self.procs[p].disk;
                let n = self.disks[disk].volumes.len();
                if n == 0 {
                    return;
                }
                let i = self.rng.index(n);
                let Some(h) = self.disks[disk].volumes.iter().nth(i).cloned() else {
                    return;
                };
                self.disks[disk].volumes.remove(&h);
                self.disks[disk].lost.insert(h.clone(), self.now);
                *self.stats.faults.entry("lose-volume").or_insert(0) += 1;
                self.log(format!("fault: {name} lost volume {h}"));
            }
            _ => {
                let d = self.rng.range(300, 3_000) as i64;
                self.web_down_until = self.web_down_until.max(self.now + d);
                *self.stats.faults.entry("web-down").or_insert(0) += 1;
                self.log(format!("fault web down for {d}ms"));
            }
        }
    }

    fn restarts(&mut self) {
        for w in 0..self.names.len() {
            if let Some((at, wipe)) = self.restart_at[w] {
                if at <= self.now {
                    self.restart_at[w] = None;
                    let disk = match (wipe, self.procs.iter().rposition(|p| p.name == w)) {
                        (false, Some(old)) => self.procs[old].disk,
                        _ => self.new_disk(),
                    };
                    self.spawn(w, disk);
                    let name = self.names[w].clone();
                    self.log(format!(
                        "{name} restarted ({})",
                        if wipe { "new disk" } else { "same disk" }
                    ));
                }
            }
        }
    }

    // ----- worker processes talking to web -----

    fn register(&mut self, p: usize) {
        let w = self.procs[p].name;
        let identity = self.disks[self.procs[p].disk].identity.clone();
        let known = self.rows[w].as_ref().map(|r| KnownWorker {
            state: r.state,
            state_identity: r.identity.clone(),
            generation: r.generation,
        });
        let kind = classify_registration(known.as_ref(), &identity);
        self.counter += 1;
        let generation = self.counter;
        self.issued[w] = generation;
        self.rows[w] = Some(Row {
            state: WorkerState::Running,
            generation,
            identity,
            last_heartbeat: self.now,
            state_changed: self.now,
        });
        if kind == RegistrationKind::StateLost {
            self.vols.retain(|_, v| v.worker != w);
        }
        self.procs[p].generation = Some(generation);
        *self.stats.registrations.entry(kind.as_str()).or_insert(0) += 1;
        let name = self.names[w].clone();
        self.log(format!(
            "{name} registered as generation {generation} ({})",
            kind.as_str()
        ));
    }

    /// Web's fencing of one message; `Ok` means accepted.
    fn fence(&mut self, p: usize) -> Result<(), Refusal> {
        let w = self.procs[p].name;
        let generation = self.procs[p].generation.unwrap_or(-1);
        let row = self.rows[w].as_ref().map(|r| (r.state, r.generation));
        check_generation(row, generation)
    }

    fn on_refusal(&mut self, p: usize, refusal: Refusal) {
        match refusal {
            Refusal::Superseded { .. } => {
                self.procs[p].alive = false;
                self.stats.superseded += 1;
                let name = self.names[self.procs[p].name].clone();
                self.log(format!("a zombie of {name} was told superseded and exits"));
            }
            Refusal::Stalled | Refusal::Unknown => self.register(p),
        }
    }

    fn accepted(&self, p: usize, what: &str) -> Check {
        let w = self.procs[p].name;
        let g = self.procs[p].generation;
        let row = self.rows[w].as_ref();
        if g != Some(self.issued[w]) || row.is_none_or(|r| r.state == WorkerState::Stalled) {
            return Err(format!(
                "web accepted a {what} from {} generation {g:?}; the newest issued is {} and the row is {:?}",
                self.names[w],
                self.issued[w],
                row.map(|r| r.state)
            ));
        }
        Ok(())
    }

    fn processes(&mut self) -> Check {
        if !self.web_up() {
            // Calls fail while web is down; each process tries again on its
            // next interval.
            for p in &mut self.procs {
                if p.reachable(self.now) && p.generation.is_some() {
                    if p.next_heartbeat <= self.now {
                        p.next_heartbeat = self.now + HEARTBEAT;
                    }
                    if p.next_report <= self.now {
                        p.next_report = self.now + REPORT;
                    }
                }
            }
            return Ok(());
        }
        for p in 0..self.procs.len() {
            if !self.procs[p].reachable(self.now) {
                continue;
            }
            if self.procs[p].paused_until.is_some() {
                self.procs[p].paused_until = None;
                // A paused process has missed its timers: both fire now.
                self.procs[p].next_heartbeat = self.now;
                self.procs[p].next_report = self.now;
            }
            if self.procs[p].generation.is_none() {
                self.register(p);
                continue;
            }
            if self.procs[p].next_heartbeat <= self.now {
                self.procs[p].next_heartbeat = self.now + HEARTBEAT;
                match self.fence(p) {
                    Ok(()) => {
                        self.accepted(p, "heartbeat")?;
                        let w = self.procs[p].name;
                        if let Some(r) = self.rows[w].as_mut() {
                            r.last_heartbeat = self.now;
                        }
                    }
                    Err(refusal) => self.on_refusal(p, refusal),
                }
            }
            if self.procs[p].alive && self.procs[p].next_report <= self.now {
                self.procs[p].next_report = self.now + REPORT;
                match self.fence(p) {
                    Ok(()) => {
                        self.accepted(p, "volume report")?;
                        self.report(p);
                    }
                    Err(refusal) => self.on_refusal(p, refusal),
                }
            }
        }
        Ok(())
    }

    fn report(&mut self, p: usize) {
        let w = self.procs[p].name;
        let disk = self.procs[p].disk;
        let reported: Vec<String> = self.disks[disk].volumes.iter().cloned().collect();
        let rows: Vec<VolumeRow> = self
            .vols
            .iter()
            .filter(|(_, v)| v.worker == w)
            .map(|(h, v)| VolumeRow {
                handle: h.clone(),
                state: v.state,
                parent: v.parent.clone(),
                missing_since: v.missing_since,
                // The simulation's reports are taken and applied at once.
                young: false,
            })
            .collect();
        let plan = plan_report(&rows, &reported);
        self.disks[disk].last_report = Some(self.now);
        for h in &plan.mark_missing {
            if let Some(v) = self.vols.get_mut(h) {
                v.missing_since = Some(self.now);
            }
        }
        for h in &plan.clear_missing {
            if let Some(v) = self.vols.get_mut(h) {
                v.missing_since = None;
            }
        }
        for h in &plan.delete_rows {
            self.vols.remove(h);
        }
        for h in &plan.destroy_on_worker {
            self.disks[disk].volumes.remove(h);
        }
    }

    // ----- web's lifecycle loop -----

    fn lifecycle(&mut self) {
        if !self.web_up() {
            return;
        }
        // Web judges silence only from when it could hear again (its
        // lifecycle loop's grace after a restart or a database outage).
        let mut config = self.lifecycle;
        if self.now < self.web_down_until + config.heartbeat_ttl_ms {
            config.heartbeat_ttl_ms = i64::MAX / 2;
        }
        let snapshots: Vec<hangar_core::WorkerSnapshot> = self
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref().map(|r| hangar_core::WorkerSnapshot {
                    name: self.names[i].clone(),
                    state: r.state,
                    generation: r.generation,
                    ephemeral: false,
                    last_heartbeat_at: r.last_heartbeat,
                    state_changed_at: r.state_changed,
                    unfinished_work: 0,
                })
            })
            .collect();
        for action in plan_lifecycle(&snapshots, self.now, &config) {
            let Some(w) = self.names.iter().position(|n| *n == action.name) else {
                continue;
            };
            let Some(row) = self.rows[w].as_mut() else {
                continue;
            };
            // Applied only if the row is still as the plan saw it.
            if row.state != action.from
                || row.generation != action.generation
                || row.last_heartbeat != action.seen_heartbeat_at
            {
                continue;
            }
            match action.step {
                LifecycleStep::Become(s) => {
                    row.state = s;
                    row.state_changed = self.now;
                }
                LifecycleStep::Remove => self.rows[w] = None,
            }
            if action.step == LifecycleStep::Become(WorkerState::Stalled) {
                self.stats.stalls += 1;
            }
            self.log(format!(
                "lifecycle: {} {} ({})",
                action.name, action.event, action.cause
            ));
        }
    }

    // ----- the build engine -----

    fn candidates(&self) -> Vec<Candidate> {
        let mut busy = vec![0i64; self.names.len()];
        for b in &self.builds {
            for s in [&b.get, &b.task] {
                if let Phase::Running { worker, .. } | Phase::Preparing { worker, .. } = s.phase {
                    busy[worker] += 1;
                }
            }
        }
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref().map(|r| Candidate {
                    name: self.names[i].clone(),
                    state: r.state,
                    platform: "linux".into(),
                    tags: BTreeSet::new(),
                    team: None,
                    active_containers: busy[i],
                    load: Load {
                        build_steps: busy[i],
                        tasks: 0,
                        volumes: 0,
                    },
                    has: self
                        .vols
                        .values()
                        .filter(|v| v.worker == i && volume_usable(v.state, v.missing_since))
                        .filter_map(|v| v.key.clone())
                        .collect(),
                    accepting_work: true,
                    memory_free: None,
                    allow_privileged: false,
                    distrusted: false,
                })
            })
            .collect()
    }

    /// Places a step; checks the placement invariant.
    fn place_step(
        &mut self,
        wants: Vec<String>,
        avoid: &BTreeSet<String>,
    ) -> Result<Option<usize>, String> {
        let req = Requirement {
            platform: "linux".into(),
            wants,
            avoid: avoid.clone(),
            ..Default::default()
        };
        let Ok(name) = place(&self.candidates(), &req) else {
            return Ok(None);
        };
        let w = self
            .names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("placement chose {name}, which is no worker"))?;
        let row = self.rows[w]
            .as_ref()
            .ok_or_else(|| format!("placement chose {name}, which has no row"))?;
        if row.state != WorkerState::Running {
            return Err(format!("placement chose {name}, which is {}", row.state));
        }
        if row.generation != self.issued[w] {
            return Err(format!(
                "placement chose {name} at generation {}, superseded by {}",
                row.generation, self.issued[w]
            ));
        }
        self.stats.placements += 1;
        Ok(Some(w))
    }

    /// Whether an input artifact can be used now: the engine's own rule
    /// ([`input_check`]) on the rows web reads, read as the engine reads
    /// them (the worker's row only when the volume's is there).
    fn available(&self, handle: &str) -> InputCheck {
        let Some(v) = self.vols.get(handle) else {
            return input_check(Observed::Absent, Observed::Unknown);
        };
        let volume = Observed::Present(VolumeSeen {
            state: v.state,
            missing_since: v.missing_since,
            worker: &self.names[v.worker],
        });
        let worker = match &self.rows[v.worker] {
            Some(r) => Observed::Present(r.state),
            None => Observed::Absent,
        };
        input_check(volume, worker)
    }

    /// A call to worker `called`, made to use input `handle`, failed with
    /// `e`: the engine's own rule ([`input_call_failure`]) names the
    /// failure and says whether the input's row is marked missing at once.
    fn input_failed(&mut self, handle: &str, called: usize, e: &CallError) -> StepFailure {
        let holder = self
            .vols
            .get(handle)
            .map(|v| self.names[v.worker].clone())
            .unwrap_or_default();
        let (failure, mark_missing) = input_call_failure(&holder, handle, &self.names[called], e);
        if mark_missing {
            self.mark_missing(handle);
        }
        failure
    }

    /// The ground truth behind "no volume handed out while missing": once
    /// web has accepted a report of a disk that lost `handle`, it must not
    /// hand `handle` out (as a parent or a copy source).
    fn check_hand_out(&self, disk: usize, handle: &str) -> Check {
        let d = &self.disks[disk];
        if let (Some(lost), Some(reported)) = (d.lost.get(handle), d.last_report) {
            if *lost < reported && !d.volumes.contains(handle) {
                return Err(format!(
                    "volume {handle} was handed out at t={} though its disk lost it at t={lost} and web had a report without it at t={reported}",
                    self.now
                ));
            }
        }
        Ok(())
    }

    /// Makes a volume on worker `w` (through its API, so the process must
    /// answer); a child needs a parent that is created and present, as the
    /// store demands. Checks the hand-out invariant.
    fn make_volume(
        &mut self,
        w: usize,
        parent: Option<&str>,
        key: Option<String>,
    ) -> Result<Result<String, StepFailure>, String> {
        let worker = self.names[w].clone();
        if let Some(parent) = parent {
            // The store refuses a parent that is not usable.
            if !self
                .vols
                .get(parent)
                .is_some_and(|pv| volume_usable(pv.state, pv.missing_since))
            {
                return Ok(Err(StepFailure::VolumeLost {
                    worker,
                    handle: parent.to_string(),
                }));
            }
        }
        let Some(p) = self.serving(w) else {
            let e = CallError::unreachable("no answer");
            return Ok(Err(match parent {
                Some(parent) => self.input_failed(parent, w, &e),
                None => call_failure(&worker, &e),
            }));
        };
        let disk = self.procs[p].disk;
        if let Some(parent) = parent {
            self.check_hand_out(disk, parent)?;
            // The worker itself refuses a parent it does not have.
            if !self.disks[disk].volumes.contains(parent) {
                return Ok(Err(self.input_failed(parent, w, &not_found(parent))));
            }
            let pv = &self.vols[parent];
            if !volume_usable(pv.state, pv.missing_since) {
                return Err(format!(
                    "volume {parent} was handed out while {:?} / missing {:?}",
                    pv.state, pv.missing_since
                ));
            }
        }
        let h = self.handle();
        self.disks[disk].volumes.insert(h.clone());
        self.vols.insert(
            h.clone(),
            Vol {
                worker: w,
                state: VolumeState::Created,
                parent: parent.map(str::to_string),
                missing_since: None,
                key,
            },
        );
        Ok(Ok(h))
    }

    /// Copies an artifact from its worker to `w`: the source must be
    /// created, present and served.
    fn copy_volume(&mut self, src: &str, w: usize) -> Result<Result<String, StepFailure>, String> {
        let Some(v) = self.vols.get(src).cloned() else {
            return Ok(Err(StepFailure::VolumeLost {
                worker: self.names[w].clone(),
                handle: src.to_string(),
            }));
        };
        // The store refuses a source that is not usable.
        if !volume_usable(v.state, v.missing_since) {
            return Ok(Err(StepFailure::VolumeLost {
                worker: self.names[v.worker].clone(),
                handle: src.to_string(),
            }));
        }
        let Some(sp) = self.serving(v.worker) else {
            let e = CallError::unreachable("no answer");
            return Ok(Err(self.input_failed(src, v.worker, &e)));
        };
        self.check_hand_out(self.procs[sp].disk, src)?;
        // The source's worker refuses to stream out what it does not have.
        if !self.disks[self.procs[sp].disk].volumes.contains(src) {
            return Ok(Err(self.input_failed(src, v.worker, &not_found(src))));
        }
        self.make_volume(w, None, None)
    }

    fn mark_missing(&mut self, handle: &str) {
        let now = self.now;
        if let Some(v) = self.vols.get_mut(handle) {
            if volume_usable(v.state, v.missing_since) {
                v.missing_since = Some(now);
            }
        }
    }

    fn release(&mut self, handles: &[String]) {
        for h in handles {
            if let Some(v) = self.vols.get_mut(h) {
                if v.state == VolumeState::Created {
                    v.state = VolumeState::Destroying;
                }
            }
        }
    }

    fn engine(&mut self) -> Check {
        if !self.web_up() {
            // A step waiting about a worker still reads its row, and the
            // database does not answer: nothing is known, and the time to
            // judge the worker starts again (heartbeats cannot land).
            let now = self.now;
            for build in self.builds.iter_mut().filter(|b| b.status.is_none()) {
                for step in [&mut build.get, &mut build.task] {
                    if let Phase::Settling { settle, .. } = &mut step.phase {
                        settle.observe(Observed::Unknown, now);
                    }
                }
            }
            return Ok(());
        }
        while self.submit_at.first().is_some_and(|t| *t <= self.now) {
            self.submit_at.remove(0);
            let id = self.builds.len();
            let version = self.rng.range(0, 3);
            self.builds.push(Build {
                id,
                version,
                get: Step::new(),
                task: Step::new(),
                artifact: None,
                status: None,
            });
        }
        for b in 0..self.builds.len() {
            if self.builds[b].status.is_none() {
                self.advance(b)?;
            }
        }
        Ok(())
    }

    /// Worker `w`'s row as the settle rule reads it.
    fn beat(&self, w: usize) -> Observed<WorkerBeat> {
        match &self.rows[w] {
            Some(r) => Observed::Present(WorkerBeat {
                state: r.state,
                generation: r.generation,
                last_heartbeat_at: r.last_heartbeat,
            }),
            None => Observed::Absent,
        }
    }

    /// Starts waiting for web to decide about worker `w`, which could not
    /// be reached now, as the engine's `watch::settle` does: from its row's
    /// generation, with the time web takes to judge a worker (the
    /// lifecycle loop runs every tick). `None` when it has no row.
    fn settling(&self, w: usize) -> Option<Phase> {
        let row = self.rows[w].as_ref()?;
        let judge_ms = Settle::judge_ms(self.lifecycle.heartbeat_ttl_ms, TICK);
        Some(Phase::Settling {
            worker: w,
            settle: Settle::new(row.generation, self.now, judge_ms),
        })
    }

    fn advance(&mut self, b: usize) -> Check {
        for is_get in [true, false] {
            let Phase::Settling { worker, .. } = self.step_mut(b, is_get).phase else {
                continue;
            };
            let row = self.beat(worker);
            let now = self.now;
            let step = self.step_mut(b, is_get);
            if let Phase::Settling { settle, .. } = &mut step.phase {
                if !settle.observe(row, now) {
                    return Ok(());
                }
            }
            step.phase = Phase::Waiting;
        }
        if self.builds[b].artifact.is_none() {
            return self.advance_get(b);
        }
        self.advance_task(b)
    }

    fn step_mut(&mut self, b: usize, is_get: bool) -> &mut Step {
        if is_get {
            &mut self.builds[b].get
        } else {
            &mut self.builds[b].task
        }
    }

    /// A step of build `b` ended. The build ends as the engine's runner
    /// ends a list of steps: at the first, in plan order (the get, then the
    /// task), that did not succeed ([`deciding_step`]), or when all did,
    /// with the status [`build_status`] gives.
    fn end_step(&mut self, b: usize, is_get: bool, state: StepState) {
        let step = self.step_mut(b, is_get);
        step.phase = Phase::Done;
        step.end = Some(state);
        let build = &self.builds[b];
        let ends: Vec<StepState> = [build.get.end, build.task.end]
            .into_iter()
            .map_while(|e| e)
            .collect();
        let deciding = match deciding_step(&ends) {
            Some(i) => ends[i],
            None if ends.len() == 2 => StepState::Succeeded,
            None => return,
        };
        let status = build_status(deciding);
        self.builds[b].status = Some(status);
        match status {
            BuildStatus::Succeeded => self.stats.succeeded += 1,
            BuildStatus::Errored => self.stats.errored += 1,
            _ => {}
        }
    }

    fn fail_step(&mut self, b: usize, is_get: bool, failure: StepFailure) -> Check {
        if let Phase::Running { scratch, .. } = &self.step_mut(b, is_get).phase {
            let scratch = scratch.clone();
            self.release(&scratch);
        }
        if let Some(w) = failure
            .worker()
            .and_then(|n| self.names.iter().position(|x| x == n))
        {
            // The incarnation the step was on when the failure is its own
            // worker's (a restart is blamed on the old one), else the
            // worker's current one.
            let generation = match &self.step_mut(b, is_get).phase {
                Phase::Running { worker, seen, .. } | Phase::Preparing { worker, seen, .. }
                    if *worker == w =>
                {
                    Some(seen.generation)
                }
                _ => None,
            };
            let generation = generation
                .or(self.rows[w].as_ref().map(|r| r.generation))
                .unwrap_or(self.issued[w]);
            self.step_mut(b, is_get).blamed.insert((w, generation));
        }
        let attempt = self.step_mut(b, is_get).attempt;
        let id = self.builds[b].id;
        let what = if is_get { "get" } else { "task" };
        match decide_retry(&failure, attempt, MAX_ATTEMPTS, false) {
            RetryDecision::Retry { next_attempt } => {
                // What the failure changes for the next attempt is the
                // engine's own rule.
                let next = after_failure(&failure);
                let settle = next
                    .settle
                    .and_then(|n| self.names.iter().position(|x| *x == n))
                    .and_then(|w| self.settling(w));
                let step = self.step_mut(b, is_get);
                step.attempt = next_attempt;
                step.avoid.extend(next.avoid);
                step.phase = settle.unwrap_or(Phase::Waiting);
                self.stats.retries += 1;
                self.log(format!(
                    "build {id} {what}: {}; retrying (attempt {next_attempt})",
                    failure.describe()
                ));
            }
            RetryDecision::GiveUp(state) => {
                self.step_mut(b, is_get).phase = Phase::Done;
                if failure.class() == FailureClass::Infrastructure && attempt < MAX_ATTEMPTS {
                    return Err(format!(
                        "build {id} {what} gave up on an infrastructure failure at attempt {attempt} of {MAX_ATTEMPTS}: {}",
                        failure.describe()
                    ));
                }
                let blamed = self.step_mut(b, is_get).blamed.clone();
                if failure.class() == FailureClass::Infrastructure && blamed.len() < 2 {
                    let who: Vec<String> = blamed
                        .iter()
                        .map(|(w, g)| format!("{} generation {g}", self.names[*w]))
                        .collect();
                    return Err(format!(
                        "build {id} {what} errored after {attempt} attempts that all blamed {}: one fault used up every attempt",
                        who.join(", ")
                    ));
                }
                if failure.class() == FailureClass::Own {
                    return Err(format!(
                        "build {id} {what} failed by its own fault, which no simulated step has: {}",
                        failure.describe()
                    ));
                }
                self.end_step(b, is_get, state);
                self.log(format!(
                    "build {id} {what} errored after {attempt} attempts: {}",
                    failure.describe()
                ));
            }
        }
        Ok(())
    }

    fn advance_get(&mut self, b: usize) -> Check {
        let key = format!("resource-v{}", self.builds[b].version);
        match self.builds[b].get.phase.clone() {
            Phase::Waiting => {
                let avoid = self.builds[b].get.avoid.clone();
                let Some(w) = self.place_step(vec![key.clone()], &avoid)? else {
                    return Ok(());
                };
                // A cache the worker already has is used as it is.
                let cached = self
                    .vols
                    .iter()
                    .find(|(_, v)| {
                        v.worker == w
                            && v.key.as_deref() == Some(key.as_str())
                            && volume_usable(v.state, v.missing_since)
                    })
                    .map(|(h, _)| h.clone());
                if let Some(h) = cached {
                    self.builds[b].artifact = Some(h);
                    self.end_step(b, true, StepState::Succeeded);
                    return Ok(());
                }
                let Some(seen) = self.seen(w) else {
                    return Ok(());
                };
                match self.make_volume(w, None, Some(key))? {
                    Ok(h) => {
                        self.builds[b].get.phase = Phase::Running {
                            worker: w,
                            seen,
                            ends_at: self.now + 300,
                            scratch: Vec::new(),
                            made: Some(h),
                        }
                    }
                    Err(f) => self.fail_step(b, true, f)?,
                }
            }
            Phase::Running {
                worker,
                seen,
                ends_at,
                made,
                ..
            } => {
                let now_seen = self.seen(worker);
                if let Some(f) = worker_change(&self.names[worker], &seen, now_seen.as_ref()) {
                    return self.fail_step(b, true, f);
                }
                if ends_at <= self.now && self.serving(worker).is_some() {
                    self.builds[b].artifact = made;
                    self.end_step(b, true, StepState::Succeeded);
                }
            }
            Phase::Preparing { .. } | Phase::Settling { .. } | Phase::Done => {}
        }
        Ok(())
    }

    fn advance_task(&mut self, b: usize) -> Check {
        let artifact = self.builds[b].artifact.clone().unwrap_or_default();
        match self.builds[b].task.phase.clone() {
            Phase::Waiting => {
                if let InputCheck::Lost { worker } = self.available(&artifact) {
                    // The input went with its worker: fetch it again elsewhere.
                    self.builds[b].artifact = None;
                    self.builds[b].get = Step::new();
                    self.builds[b].get.avoid.extend(worker);
                    self.stats.refetches += 1;
                    let id = self.builds[b].id;
                    self.log(format!(
                        "build {id}: input {artifact} lost; fetching it again"
                    ));
                    return Ok(());
                }
                let input_key = self.vols[&artifact].key.clone().unwrap_or_default();
                let avoid = self.builds[b].task.avoid.clone();
                let Some(w) =
                    self.place_step(vec![input_key, self.cache_keys[0].clone()], &avoid)?
                else {
                    return Ok(());
                };
                let Some(seen) = self.seen(w) else {
                    return Ok(());
                };
                self.builds[b].task.phase = Phase::Preparing {
                    worker: w,
                    seen,
                    ready_at: self.now + 2 * TICK,
                };
            }
            Phase::Preparing {
                worker,
                seen,
                ready_at,
            } => {
                let now_seen = self.seen(worker);
                if let Some(f) = worker_change(&self.names[worker], &seen, now_seen.as_ref()) {
                    return self.fail_step(b, false, f);
                }
                if ready_at > self.now {
                    return Ok(());
                }
                let on_same = self.vols.get(&artifact).is_some_and(|v| v.worker == worker);
                let input = if on_same {
                    self.make_volume(worker, Some(&artifact), None)?
                } else {
                    self.copy_volume(&artifact, worker)?
                };
                let input = match input {
                    Ok(h) => h,
                    Err(f) => return self.fail_step(b, false, f),
                };
                let cache_key = self.cache_keys[0].clone();
                let has_cache = self.vols.values().any(|v| {
                    v.worker == worker
                        && v.key.as_deref() == Some(cache_key.as_str())
                        && volume_usable(v.state, v.missing_since)
                });
                if !has_cache {
                    if let Err(f) = self.make_volume(worker, None, Some(cache_key))? {
                        self.release(std::slice::from_ref(&input));
                        return self.fail_step(b, false, f);
                    }
                }
                let run_for = self.rng.range(1_000, 3_000) as i64;
                self.builds[b].task.phase = Phase::Running {
                    worker,
                    seen,
                    ends_at: self.now + run_for,
                    scratch: vec![input],
                    made: None,
                };
            }
            Phase::Running {
                worker,
                seen,
                ends_at,
                scratch,
                ..
            } => {
                let now_seen = self.seen(worker);
                if let Some(f) = worker_change(&self.names[worker], &seen, now_seen.as_ref()) {
                    return self.fail_step(b, false, f);
                }
                if ends_at <= self.now && self.serving(worker).is_some() {
                    self.release(&scratch);
                    self.end_step(b, false, StepState::Succeeded);
                }
            }
            Phase::Settling { .. } | Phase::Done => {}
        }
        Ok(())
    }

    // ----- the run -----

    fn violation(&self, what: String) -> Violation {
        Violation {
            seed: self.seed,
            at_ms: self.now,
            what,
            trace: self.trace.iter().cloned().collect(),
        }
    }

    /// After quiet time: every present, created row is on its worker's
    /// disk, and every directory on a disk has a row.
    fn settled(&self) -> Check {
        for w in 0..self.names.len() {
            let Some(p) = self.serving(w) else {
                return Err(format!(
                    "{} is not serving after the quiet time",
                    self.names[w]
                ));
            };
            let disk = &self.disks[self.procs[p].disk].volumes;
            for (h, v) in self.vols.iter().filter(|(_, v)| v.worker == w) {
                if volume_usable(v.state, v.missing_since) && !disk.contains(h) {
                    return Err(format!(
                        "row {h} on {} is created and present but not on its disk",
                        self.names[w]
                    ));
                }
            }
            for h in disk {
                if self.vols.get(h).is_none_or(|v| v.worker != w) {
                    return Err(format!("{h} is on {}'s disk with no row", self.names[w]));
                }
            }
        }
        Ok(())
    }

    fn run(mut self) -> Result<SimStats, Violation> {
        let mut all_done_at: Option<i64> = None;
        while self.now <= END {
            self.faults();
            self.restarts();
            if let Err(e) = self.processes() {
                return Err(self.violation(e));
            }
            self.lifecycle();
            if let Err(e) = self.engine() {
                return Err(self.violation(e));
            }
            let all_done = self.submit_at.is_empty()
                && self.now >= FAULTS_UNTIL
                && self.builds.iter().all(|b| b.status.is_some());
            match (all_done, all_done_at) {
                (true, None) => all_done_at = Some(self.now),
                (true, Some(at)) if self.now - at >= SETTLE => {
                    if let Err(e) = self.settled() {
                        return Err(self.violation(e));
                    }
                    self.stats.ended_at_ms = self.now;
                    return Ok(self.stats);
                }
                _ => {}
            }
            self.now += TICK;
        }
        let open: Vec<usize> = self
            .builds
            .iter()
            .filter(|b| b.status.is_none())
            .map(|b| b.id)
            .collect();
        Err(self.violation(format!(
            "builds {open:?} had not ended {}s after the faults stopped",
            (END - FAULTS_UNTIL) / 1000
        )))
    }
}

/// A worker's answer that it does not have volume `handle`.
fn not_found(handle: &str) -> CallError {
    CallError::refused(404, "not_found", format!("volume {handle} not found"))
}

/// Runs the simulation for `seed`.
pub fn run(seed: u64) -> Result<SimStats, Violation> {
    Sim::new(seed).run()
}
