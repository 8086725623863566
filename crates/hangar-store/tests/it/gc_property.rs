//! A property test of reconciliation and garbage collection together, on
//! SQLite and PostgreSQL.
//!
//! A simulated worker disk and the database go through random histories:
//! volume graphs (chains, fan-out, copy-on-write children) made through the
//! store, creations that fail or hang, volumes that vanish from disk (alone,
//! leaving live children, or with their whole subtree), strays web never
//! knew, destroy requests, reports listing the disk in random orders, GC
//! runs, and time jumps. After every step: GC never errors, no row's parent
//! row is missing, no missing row is handed out as a parent or as a cache.
//! When the fleet goes quiet (creations settle, reports go on, time passes
//! the grace period, GC runs) the database equals the disk exactly.

use std::collections::{BTreeMap, BTreeSet};

use hangar_core::gc::GcConfig;
use hangar_core::volumes::{OwnerKind, VolumeState};
use hangar_store::{NewVolume, Store, StoreError, WorkerInfo};
use hangar_testkit::{on_both_databases, planned_report, sorted_plan};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;
/// Cases per database: keeps both halves of the suite to a few seconds.
const CASES: u32 = 32;

#[derive(Debug, Clone)]
enum Op {
    /// A volume made through the store: `parent` picks among created rows
    /// (or none); `kind` its owner; `outcome` 0-1 created, 2 failed with
    /// nothing on disk, 3 failed with data left on disk, 4 left creating.
    Create {
        parent: Option<usize>,
        kind: u8,
        outcome: u8,
    },
    /// A creation left hanging ends, well or not.
    Settle {
        pick: usize,
        ok: bool,
    },
    /// A volume vanishes from disk: alone (its children stay) or with its
    /// whole subtree.
    Vanish {
        pick: usize,
        subtree: bool,
    },
    /// A volume that vanished is back (a disk remounted).
    Reappear {
        pick: usize,
    },
    /// A volume web does not know appears on disk (a crash leftover),
    /// maybe as the child of one that is there.
    Stray {
        parent: Option<usize>,
    },
    /// Someone asks web to destroy a volume (it may refuse).
    Destroy {
        pick: usize,
    },
    /// The worker reports its disk in a random order and sweeps the answer.
    Report {
        order: u64,
    },
    Gc,
    Advance {
        minutes: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (proptest::option::weighted(0.8, any::<usize>()), 0u8..4, 0u8..5)
            .prop_map(|(parent, kind, outcome)| Op::Create { parent, kind, outcome }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, ok)| Op::Settle { pick, ok }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, subtree)| Op::Vanish { pick, subtree }),
        1 => any::<usize>().prop_map(|pick| Op::Reappear { pick }),
        1 => proptest::option::of(any::<usize>()).prop_map(|parent| Op::Stray { parent }),
        1 => any::<usize>().prop_map(|pick| Op::Destroy { pick }),
        3 => any::<u64>().prop_map(|order| Op::Report { order }),
        2 => Just(Op::Gc),
        2 => (0u8..12).prop_map(|minutes| Op::Advance { minutes }),
    ]
}

/// The worker: its disk (handle → parent) and what is in flight.
struct Sim {
    store: Store,
    worker: String,
    generation: i64,
    disk: BTreeMap<String, Option<String>>,
    /// What vanished from disk, and could come back.
    vanished: BTreeMap<String, Option<String>>,
    /// Rows left `creating`, with whether the volume reached the disk.
    hanging: Vec<String>,
    now: i64,
    next: usize,
    config: GcConfig,
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

impl Sim {
    fn handle(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{}-{prefix}{}", self.worker, self.next)
    }

    async fn rows(&self) -> Result<BTreeMap<String, hangar_store::VolumeRecord>, TestCaseError> {
        Ok(self
            .store
            .list_volumes(Some(&self.worker))
            .await
            .map_err(|e| fail(format!("list: {e}")))?
            .into_iter()
            .map(|v| (v.handle.clone(), v))
            .collect())
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Create {
                parent,
                kind,
                outcome,
            } => {
                let rows = self.rows().await?;
                let candidates: Vec<&hangar_store::VolumeRecord> = rows
                    .values()
                    .filter(|v| v.state == VolumeState::Created)
                    .collect();
                let parent = parent
                    .filter(|_| !candidates.is_empty())
                    .map(|p| candidates[p % candidates.len()]);
                let kind = [
                    OwnerKind::Container,
                    OwnerKind::TaskCache,
                    OwnerKind::Artifact,
                    OwnerKind::BaseResourceType,
                ][*kind as usize % 4];
                let owner_id = match kind {
                    OwnerKind::TaskCache => Some(format!("key{}", self.next % 3)),
                    OwnerKind::Artifact => Some("upload".to_string()),
                    OwnerKind::BaseResourceType => Some("git".to_string()),
                    _ => None,
                };
                let handle = self.handle("v");
                let made = self
                    .store
                    .create_volume_row(
                        &NewVolume {
                            handle: handle.clone(),
                            worker: self.worker.clone(),
                            parent: parent.map(|p| p.handle.clone()),
                            owner_kind: kind,
                            owner_id,
                            strategy: if parent.is_some() {
                                hangar_core::volumes::Strategy::Cow
                            } else {
                                hangar_core::volumes::Strategy::Empty
                            },
                        },
                        self.now,
                    )
                    .await;
                match (made, parent) {
                    (Ok(_), Some(p)) if p.missing_since.is_some() => {
                        return Err(fail(format!(
                            "a missing volume {} was handed out as a parent",
                            p.handle
                        )))
                    }
                    (Ok(_), _) => {}
                    (Err(StoreError::Conflict(m)), Some(p)) if p.missing_since.is_some() => {
                        prop_assert_eq!(m, format!("parent volume {} is missing", p.handle));
                        return Ok(());
                    }
                    (Err(e), _) => return Err(fail(format!("create {handle}: {e}"))),
                }
                let parent = parent.map(|p| p.handle.clone());
                match outcome {
                    0 | 1 => {
                        self.disk.insert(handle.clone(), parent);
                        self.finish(&handle, true).await?;
                    }
                    2 => self.finish(&handle, false).await?,
                    3 => {
                        self.disk.insert(handle.clone(), parent);
                        self.finish(&handle, false).await?;
                    }
                    _ => {
                        // The worker may have made it already, or not yet.
                        if self.next & 1 == 0 {
                            self.disk.insert(handle.clone(), parent);
                        }
                        self.hanging.push(handle);
                    }
                }
            }
            Op::Settle { pick, ok } => {
                if !self.hanging.is_empty() {
                    let handle = self.hanging.remove(pick % self.hanging.len());
                    self.settle(&handle, *ok).await?;
                }
            }
            Op::Vanish { pick, subtree } => {
                if !self.disk.is_empty() {
                    let handle = self
                        .disk
                        .keys()
                        .nth(pick % self.disk.len())
                        .unwrap()
                        .clone();
                    let mut gone = BTreeSet::from([handle]);
                    if *subtree {
                        loop {
                            let more: Vec<String> = self
                                .disk
                                .iter()
                                .filter(|(h, p)| {
                                    !gone.contains(*h)
                                        && p.as_ref().is_some_and(|p| gone.contains(p))
                                })
                                .map(|(h, _)| h.clone())
                                .collect();
                            if more.is_empty() {
                                break;
                            }
                            gone.extend(more);
                        }
                    }
                    for h in gone {
                        if let Some(p) = self.disk.remove(&h) {
                            self.vanished.insert(h, p);
                        }
                    }
                }
            }
            Op::Reappear { pick } => {
                if !self.vanished.is_empty() {
                    let h = self
                        .vanished
                        .keys()
                        .nth(pick % self.vanished.len())
                        .unwrap()
                        .clone();
                    let p = self.vanished.remove(&h).unwrap();
                    self.disk.insert(h, p);
                }
            }
            Op::Stray { parent } => {
                let parent = parent
                    .filter(|_| !self.disk.is_empty())
                    .map(|p| self.disk.keys().nth(p % self.disk.len()).unwrap().clone());
                let handle = self.handle("stray");
                self.disk.insert(handle, parent);
            }
            Op::Destroy { pick } => {
                let rows = self.rows().await?;
                if !rows.is_empty() {
                    let handle = rows.keys().nth(pick % rows.len()).unwrap();
                    match self.store.destroy_volume(handle).await {
                        Ok(_) | Err(StoreError::Conflict(_)) => {}
                        Err(e) => return Err(fail(format!("destroy {handle}: {e}"))),
                    }
                }
            }
            Op::Report { order } => self.report(*order).await?,
            Op::Gc => self.gc().await?,
            Op::Advance { minutes } => self.now += i64::from(*minutes) * MIN,
        }
        self.check().await
    }

    async fn finish(&self, handle: &str, ok: bool) -> Result<(), TestCaseError> {
        self.store
            .finish_volume_creation(handle, if ok { Ok(Some(1)) } else { Err(()) })
            .await
            .map_err(|e| fail(format!("finish {handle}: {e}")))
    }

    /// A hanging creation ends: created only if the volume is on disk. If
    /// GC gave the creation up meanwhile (it outlived the abandon age), the
    /// store must refuse to finish it.
    async fn settle(&mut self, handle: &str, ok: bool) -> Result<(), TestCaseError> {
        let ok = ok && self.disk.contains_key(handle);
        let still_creating = self
            .rows()
            .await?
            .get(handle)
            .is_some_and(|v| v.state == VolumeState::Creating);
        if still_creating {
            return self.finish(handle, ok).await;
        }
        let outcome = if ok { Ok(Some(1)) } else { Err(()) };
        match self.store.finish_volume_creation(handle, outcome).await {
            Err(StoreError::Conflict(_)) => Ok(()),
            other => Err(fail(format!(
                "finishing {handle}, no longer creating, gave {other:?}"
            ))),
        }
    }

    async fn report(&mut self, order: u64) -> Result<(), TestCaseError> {
        let mut listed: Vec<String> = self.disk.keys().cloned().collect();
        // A random order, from the op's seed.
        let mut state = order | 1;
        for i in (1..listed.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            listed.swap(i, (state % (i as u64 + 1)) as usize);
        }
        // What the planner makes of the rows as they are: a report
        // answered from its stamp (quiet) must give the same answer.
        let expected = planned_report(&self.store, &self.worker, &listed).await;
        let plan = self
            .store
            .apply_volume_report(&self.worker, self.generation, &listed, self.now)
            .await
            .map_err(|e| fail(format!("report: {e}")))?;
        prop_assert_eq!(
            sorted_plan(plan.clone()),
            expected,
            "report of {:?}",
            listed
        );
        // The sweeper: destroy what is listed, a volume only once no
        // volume on disk is its child (like the volume store refuses).
        let mut todo: Vec<String> = plan.destroy_on_worker;
        loop {
            let before = todo.len();
            todo.retain(|h| {
                let has_children = self.disk.values().any(|p| p.as_deref() == Some(h.as_str()));
                if has_children {
                    true
                } else {
                    self.disk.remove(h);
                    false
                }
            });
            if todo.len() == before {
                break;
            }
        }
        Ok(())
    }

    async fn gc(&self) -> Result<(), TestCaseError> {
        for (collector, result) in self.store.run_gc(&self.config, self.now).await {
            match result {
                Ok(stats) if stats.failed == 0 => {}
                Ok(stats) => return Err(fail(format!("{collector} failed on rows: {stats:?}"))),
                Err(e) => return Err(fail(format!("{collector} errored: {e}"))),
            }
        }
        Ok(())
    }

    /// The invariants that hold after every step.
    async fn check(&self) -> Result<(), TestCaseError> {
        let rows = self.rows().await?;
        for v in rows.values() {
            if let Some(p) = &v.parent {
                prop_assert!(
                    rows.contains_key(p),
                    "{} outlived its parent {}",
                    v.handle,
                    p
                );
            }
            if v.missing_since.is_some() {
                prop_assert!(
                    v.state != VolumeState::Creating,
                    "a creating row {} was marked missing",
                    v.handle
                );
            }
        }
        // No missing row is handed to a step, as a parent or as a cache.
        if let Some(missing) = rows.values().find(|v| v.missing_since.is_some()) {
            let probe = NewVolume {
                handle: format!("{}-probe", self.worker),
                worker: self.worker.clone(),
                parent: Some(missing.handle.clone()),
                owner_kind: OwnerKind::Container,
                owner_id: None,
                strategy: hangar_core::volumes::Strategy::Cow,
            };
            prop_assert!(
                self.store
                    .create_volume_row(&probe, self.now)
                    .await
                    .is_err(),
                "missing {} was handed out as a parent",
                missing.handle
            );
        }
        let keys: Vec<String> = (0..3).map(|k| format!("key{k}")).collect();
        let caches = self
            .store
            .present_volumes_by_owner(OwnerKind::TaskCache.as_str(), &keys)
            .await
            .map_err(|e| fail(format!("caches: {e}")))?;
        for (_, _, handle) in caches {
            if let Some(v) = rows.get(&handle) {
                prop_assert!(
                    v.missing_since.is_none(),
                    "missing cache {} handed out",
                    handle
                );
            }
        }
        Ok(())
    }

    /// The fleet goes quiet: creations settle or are abandoned, then
    /// reports and GC runs go on, time passing the grace period, until
    /// nothing changes.
    async fn quiesce(&mut self) -> Result<(), TestCaseError> {
        // Half the hanging creations end; the others' web node died, and
        // only GC giving them up can settle their rows.
        for (i, handle) in std::mem::take(&mut self.hanging).into_iter().enumerate() {
            if i % 2 == 0 {
                self.settle(&handle, true).await?;
            }
        }
        let mut last = None;
        for round in 0..12 {
            self.report(round).await?;
            // Past every grace: missing rows and abandoned creations go.
            self.now += self
                .config
                .missing_grace_ms
                .max(self.config.abandoned_creation_ms)
                + MIN;
            self.gc().await?;
            self.report(round + 100).await?;
            self.check().await?;
            let rows: Vec<(String, VolumeState, bool)> = self
                .rows()
                .await?
                .into_values()
                .map(|v| (v.handle, v.state, v.missing_since.is_some()))
                .collect();
            let seen = (rows, self.disk.clone());
            if last.as_ref() == Some(&seen) {
                break;
            }
            last = Some(seen);
        }
        let rows = self.rows().await?;
        let in_db: BTreeMap<String, Option<String>> = rows
            .values()
            .map(|v| (v.handle.clone(), v.parent.clone()))
            .collect();
        prop_assert_eq!(
            &in_db,
            &self.disk,
            "the database and the disk differ once quiet"
        );
        for v in rows.values() {
            prop_assert!(
                v.state == VolumeState::Created && v.missing_since.is_none(),
                "{} is {} (missing: {:?}) once quiet",
                v.handle,
                v.state,
                v.missing_since
            );
        }
        Ok(())
    }
}

async fn run_case(store: Store, case: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let worker = format!("w{case}");
    let info = |identity: &str| WorkerInfo {
        name: worker.clone(),
        state_identity: identity.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    };
    let generation = store
        .register_worker(&info("disk"), T0)
        .await
        .map_err(|e| fail(format!("register: {e}")))?
        .generation;
    let mut sim = Sim {
        store: store.clone(),
        worker: worker.clone(),
        generation,
        disk: BTreeMap::new(),
        vanished: BTreeMap::new(),
        hanging: Vec::new(),
        now: T0,
        next: 0,
        config: GcConfig {
            batch_size: 3,
            page_size: 3,
            ..GcConfig::default()
        },
    };
    let result = async {
        for op in &ops {
            sim.step(op).await?;
        }
        sim.quiesce().await
    }
    .await;
    // Leave nothing for the next case's GC runs: a new disk drops the rows.
    store
        .register_worker(&info("wiped"), sim.now)
        .await
        .map_err(|e| fail(format!("re-register: {e}")))?;
    result
}

async fn reconciliation_and_gc_converge_whatever_happens(store: Store) {
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: CASES,
                failure_persistence: None,
                max_shrink_iters: 200,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let case = std::sync::atomic::AtomicUsize::new(0);
        runner.run(&proptest::collection::vec(op(), 1..90), |ops| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            handle.block_on(run_case(store.clone(), n, ops))
        })
    })
    .await
    .unwrap();
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

on_both_databases!(reconciliation_and_gc_converge_whatever_happens);
