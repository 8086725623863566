//! Container reports and the garbage collectors, on SQLite and PostgreSQL.

use std::collections::BTreeMap;

use hangar_core::build::{BuildStatus, StepState};
use hangar_core::gc::{Collector, CollectorStats, GcConfig};
use hangar_core::volumes::{OwnerKind, VolumeState};
use hangar_store::{NewVolume, StepRecord, Store, StoreError, WorkerInfo};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;

fn info(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: name.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: Some("http://127.0.0.1:7788".into()),
        allow_privileged: false,
    }
}

async fn worker(store: &Store, name: &str) -> i64 {
    store
        .register_worker(&info(name), T0)
        .await
        .unwrap()
        .generation
}

/// Makes a created volume row.
async fn volume(
    store: &Store,
    handle: &str,
    worker: &str,
    parent: Option<&str>,
    owner: (OwnerKind, Option<&str>),
    at: i64,
) {
    store
        .create_volume_row(
            &NewVolume {
                handle: handle.into(),
                worker: worker.into(),
                parent: parent.map(str::to_string),
                owner_kind: owner.0,
                owner_id: owner.1.map(str::to_string),
                strategy: if parent.is_some() {
                    hangar_core::volumes::Strategy::Cow
                } else {
                    hangar_core::volumes::Strategy::Empty
                },
            },
            at,
        )
        .await
        .unwrap();
    store
        .finish_volume_creation(handle, Ok(Some(1)))
        .await
        .unwrap();
}

const SCRATCH: (OwnerKind, Option<&str>) = (OwnerKind::Container, None);

fn handles(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn rows(store: &Store) -> BTreeMap<String, (VolumeState, bool)> {
    store
        .list_volumes(None)
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.handle, (v.state, v.missing_since.is_some())))
        .collect()
}

async fn container_rows(store: &Store) -> BTreeMap<String, (String, bool)> {
    store
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.handle, (c.state.to_string(), c.missing_since.is_some())))
        .collect()
}

async fn collect(store: &Store, c: Collector, config: &GcConfig, now: i64) -> CollectorStats {
    store.run_collector(c, config, now).await.unwrap()
}

fn stats(found: u64, destroyed: u64, failed: u64) -> CollectorStats {
    CollectorStats {
        found,
        destroyed,
        failed,
    }
}

async fn a_container_report_is_diffed_both_ways_and_applied(store: Store) {
    let g = worker(&store, "w1").await;
    for h in ["running", "lost", "made-now"] {
        store
            .create_container_row(h, "w1", Some(1), Some("0"), T0)
            .await
            .unwrap();
    }
    store
        .set_container_state(
            "running",
            hangar_core::containers::ContainerState::Creating,
            hangar_core::containers::ContainerState::Created,
        )
        .await
        .unwrap();
    store
        .set_container_state(
            "lost",
            hangar_core::containers::ContainerState::Creating,
            hangar_core::containers::ContainerState::Created,
        )
        .await
        .unwrap();
    // The worker has `running` and a stray; not `lost`; `made-now` is still
    // being created.
    let plan = store
        .apply_container_report("w1", g, &handles(&["stray", "running"]), T0 + 5)
        .await
        .unwrap();
    assert_eq!(plan.mark_missing, ["lost"]);
    assert_eq!(plan.destroy_on_worker, ["stray"]);
    assert_eq!(
        container_rows(&store).await,
        BTreeMap::from([
            ("lost".into(), ("created".into(), true)),
            ("made-now".into(), ("creating".into(), false)),
            ("running".into(), ("created".into(), false)),
        ])
    );
    // Back again: no longer missing. A destroying row still on the worker is
    // destroyed there, then its row goes once the worker stops listing it.
    store
        .set_container_state(
            "running",
            hangar_core::containers::ContainerState::Created,
            hangar_core::containers::ContainerState::Destroying,
        )
        .await
        .unwrap();
    let plan = store
        .apply_container_report("w1", g, &handles(&["lost", "running"]), T0 + 6)
        .await
        .unwrap();
    assert_eq!(
        (plan.clear_missing, plan.destroy_on_worker),
        (handles(&["lost"]), handles(&["running"]))
    );
    let plan = store
        .apply_container_report("w1", g, &handles(&["lost"]), T0 + 7)
        .await
        .unwrap();
    assert_eq!(plan.delete_rows, ["running"]);
    assert_eq!(
        container_rows(&store).await.keys().collect::<Vec<_>>(),
        ["lost", "made-now"]
    );
    // A superseded generation changes nothing.
    store.register_worker(&info("w1"), T0 + 8).await.unwrap();
    let err = store
        .apply_container_report("w1", g, &[], T0 + 9)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err:?}");
    assert!(!container_rows(&store).await["lost"].1);
}

/// Concourse 5.x: one missing parent with live children made every
/// deletion fail on the parent foreign key, and GC stopped for everyone.
async fn a_missing_base_with_live_children_is_collected_with_unrelated_ones(store: Store) {
    let g = worker(&store, "w1").await;
    let g2 = worker(&store, "w2").await;
    let rt = (OwnerKind::BaseResourceType, Some("git"));
    volume(&store, "base", "w1", None, rt, T0).await;
    volume(&store, "cow1", "w1", Some("base"), SCRATCH, T0).await;
    volume(&store, "cow2", "w1", Some("base"), SCRATCH, T0).await;
    volume(&store, "cow1-1", "w1", Some("cow1"), SCRATCH, T0).await;
    volume(&store, "alone", "w1", None, SCRATCH, T0).await;
    volume(&store, "kept", "w1", None, SCRATCH, T0).await;
    volume(&store, "other", "w2", None, SCRATCH, T0).await;
    volume(&store, "other-1", "w2", Some("other"), SCRATCH, T0).await;
    // The base vanished from w1's disk but its children are still there;
    // an unrelated volume vanished too; on w2 a whole chain went.
    let on_w1 = handles(&["cow1", "cow2", "cow1-1", "kept"]);
    store
        .apply_volume_report("w1", g, &on_w1, T0 + MIN)
        .await
        .unwrap();
    store
        .apply_volume_report("w2", g2, &[], T0 + MIN)
        .await
        .unwrap();
    let config = GcConfig::default();
    // Within the grace period nothing goes.
    let early = collect(&store, Collector::MissingVolumes, &config, T0 + 5 * MIN).await;
    assert_eq!(early, CollectorStats::default());
    let done = collect(&store, Collector::MissingVolumes, &config, T0 + 6 * MIN).await;
    assert_eq!(done, stats(7, 7, 0));
    assert_eq!(
        rows(&store).await,
        BTreeMap::from([("kept".into(), (VolumeState::Created, false))])
    );
    // The children still on w1's disk are unknown now: the worker destroys
    // them at its next report.
    let plan = store
        .apply_volume_report("w1", g, &on_w1, T0 + 7 * MIN)
        .await
        .unwrap();
    let mut destroy = plan.destroy_on_worker.clone();
    destroy.sort();
    assert_eq!(destroy, ["cow1", "cow1-1", "cow2"]);
}

async fn a_reported_again_root_is_not_collected(store: Store) {
    let g = worker(&store, "w1").await;
    volume(&store, "a", "w1", None, SCRATCH, T0).await;
    volume(&store, "a1", "w1", Some("a"), SCRATCH, T0).await;
    store.apply_volume_report("w1", g, &[], T0).await.unwrap();
    // Seen again just before the collector ran: nothing of it goes.
    store
        .apply_volume_report("w1", g, &handles(&["a", "a1"]), T0 + 10 * MIN)
        .await
        .unwrap();
    let done = collect(
        &store,
        Collector::MissingVolumes,
        &GcConfig::default(),
        T0 + 10 * MIN,
    )
    .await;
    assert_eq!(done, CollectorStats::default());
    assert_eq!(rows(&store).await.len(), 2);
}

async fn failed_rows_are_marked_destroying_and_finished_builds_lose_their_containers(store: Store) {
    let g = worker(&store, "w1").await;
    store
        .create_volume_row(
            &NewVolume {
                handle: "half".into(),
                worker: "w1".into(),
                parent: None,
                owner_kind: OwnerKind::Container,
                owner_id: None,
                strategy: hangar_core::volumes::Strategy::Empty,
            },
            T0,
        )
        .await
        .unwrap();
    store.finish_volume_creation("half", Err(())).await.unwrap();
    let config = GcConfig::default();
    assert_eq!(
        collect(&store, Collector::FailedVolumes, &config, T0).await,
        stats(1, 1, 0)
    );
    assert_eq!(rows(&store).await["half"], (VolumeState::Destroying, false));

    let running = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    let done = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    for (handle, build) in [("c-run", running.id), ("c-done", done.id), ("c-gone", 999)] {
        store
            .create_container_row(handle, "w1", Some(build), Some("0"), T0)
            .await
            .unwrap();
        store
            .set_container_state(
                handle,
                hangar_core::containers::ContainerState::Creating,
                hangar_core::containers::ContainerState::Created,
            )
            .await
            .unwrap();
    }
    store
        .create_container_row("c-failed", "w1", Some(running.id), Some("0"), T0)
        .await
        .unwrap();
    store
        .set_container_state(
            "c-failed",
            hangar_core::containers::ContainerState::Creating,
            hangar_core::containers::ContainerState::Failed,
        )
        .await
        .unwrap();
    store
        .claim_build("node", T0, 60_000)
        .await
        .unwrap()
        .unwrap();
    store
        .claim_build("node", T0, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .finish_build(done.id, 1, BuildStatus::Succeeded, Some(0), None, T0)
        .await
        .unwrap());
    assert_eq!(
        collect(&store, Collector::BuildContainers, &config, T0).await,
        stats(2, 2, 0)
    );
    assert_eq!(
        collect(&store, Collector::FailedContainers, &config, T0).await,
        stats(1, 1, 0)
    );
    let states: Vec<(String, String)> = container_rows(&store)
        .await
        .into_iter()
        .map(|(h, (s, _))| (h, s))
        .collect();
    assert_eq!(
        states,
        [
            ("c-done".into(), "destroying".into()),
            ("c-failed".into(), "destroying".into()),
            ("c-gone".into(), "destroying".into()),
            ("c-run".into(), "created".into()),
        ]
    );
    // The worker reports none of them: their rows go; the running one's
    // goes missing, and after the grace period its row goes too.
    store
        .apply_container_report("w1", g, &[], T0)
        .await
        .unwrap();
    assert_eq!(
        container_rows(&store).await,
        BTreeMap::from([("c-run".into(), ("created".into(), true))])
    );
    assert_eq!(
        collect(&store, Collector::MissingContainers, &config, T0 + 5 * MIN).await,
        stats(1, 1, 0)
    );
    assert!(container_rows(&store).await.is_empty());
}

/// A web node died between making a row and recording the worker's answer:
/// the row stays `creating` until it is old enough to count as abandoned,
/// then it fails, is marked destroying, the worker that has the volume is
/// told to destroy it, and the row goes once the worker no longer has it.
async fn an_abandoned_creation_is_failed_destroyed_and_forgotten(store: Store) {
    let g = worker(&store, "w1").await;
    for (handle, at) in [("abandoned", T0), ("in-flight", T0 + 19 * MIN)] {
        store
            .create_volume_row(
                &NewVolume {
                    handle: handle.into(),
                    worker: "w1".into(),
                    parent: None,
                    owner_kind: OwnerKind::Container,
                    owner_id: None,
                    strategy: hangar_core::volumes::Strategy::Empty,
                },
                at,
            )
            .await
            .unwrap();
    }
    let config = GcConfig::default();
    let both = handles(&["abandoned", "in-flight"]);
    // The worker has both; neither is missing nor destroyed while creating.
    let plan = store.apply_volume_report("w1", g, &both, T0).await.unwrap();
    assert!(plan.destroy_on_worker.is_empty(), "{plan:?}");
    assert_eq!(
        collect(&store, Collector::AbandonedVolumes, &config, T0 + 19 * MIN).await,
        stats(0, 0, 0),
        "younger than the abandon age"
    );
    let now = T0 + 20 * MIN;
    let run: BTreeMap<&str, CollectorStats> = store
        .run_gc(&config, now)
        .await
        .into_iter()
        .map(|(c, r)| (c.as_str(), r.unwrap()))
        .collect();
    assert_eq!(run["abandoned-volumes"], stats(1, 1, 0));
    assert_eq!(run["failed-volumes"], stats(1, 1, 0));
    assert_eq!(
        rows(&store).await,
        BTreeMap::from([
            ("abandoned".into(), (VolumeState::Destroying, false)),
            ("in-flight".into(), (VolumeState::Creating, false)),
        ])
    );
    // Its creator can no longer finish it: that is an error, not a silent
    // success with a volume that is about to go.
    assert!(store
        .finish_volume_creation("abandoned", Ok(Some(1)))
        .await
        .is_err());
    let plan = store
        .apply_volume_report("w1", g, &both, now)
        .await
        .unwrap();
    assert_eq!(plan.destroy_on_worker, handles(&["abandoned"]));
    let plan = store
        .apply_volume_report("w1", g, &handles(&["in-flight"]), now)
        .await
        .unwrap();
    assert_eq!(plan.delete_rows, handles(&["abandoned"]));
    store
        .finish_volume_creation("in-flight", Ok(Some(1)))
        .await
        .unwrap();
    assert_eq!(
        rows(&store).await,
        BTreeMap::from([("in-flight".into(), (VolumeState::Created, false))])
    );
}

async fn orphans_caches_and_artifacts_are_marked_destroying_by_their_rules(store: Store) {
    worker(&store, "w1").await;
    let config = GcConfig::default();
    let now = T0 + 30 * HOUR;
    // Orphans: old scratch with no container row, unless a running build's
    // step lists it as an output, or it has live children.
    volume(&store, "scratch-old", "w1", None, SCRATCH, T0).await;
    volume(&store, "scratch-new", "w1", None, SCRATCH, now - MIN).await;
    volume(&store, "scratch-out", "w1", None, SCRATCH, T0).await;
    volume(&store, "scratch-parent", "w1", None, SCRATCH, T0).await;
    volume(
        &store,
        "scratch-child",
        "w1",
        Some("scratch-parent"),
        SCRATCH,
        now - MIN,
    )
    .await;
    let running = store
        .create_build("b", None, "[]", r#"{"up":"upload-named"}"#, T0)
        .await
        .unwrap();
    store
        .save_step(&StepRecord {
            build_id: running.id,
            step_id: "0".into(),
            name: "t".into(),
            kind: hangar_core::build::StepKind::Task,
            state: StepState::Running,
            attempt: 1,
            worker: Some("w1".into()),
            container: None,
            log_offset: 0,
            exit_code: None,
            outputs: r#"{"out":"scratch-out"}"#.into(),
            error: None,
            started_at: Some(T0),
            finished_at: None,
            version: None,
        })
        .await
        .unwrap();
    assert_eq!(
        collect(&store, Collector::OrphanVolumes, &config, now).await,
        stats(1, 1, 0)
    );
    // Caches: unused for a day goes; recently used stays; a stale duplicate goes.
    let cache = |id| (OwnerKind::TaskCache, Some(id));
    volume(&store, "cache-stale", "w1", None, cache("k1"), T0).await;
    volume(&store, "cache-used", "w1", None, cache("k2"), T0).await;
    volume(&store, "cache-dup", "w1", None, cache("k2"), now - 2 * HOUR).await;
    store
        .mark_volumes_used(&handles(&["cache-used"]), now - MIN)
        .await
        .unwrap();
    assert_eq!(
        collect(&store, Collector::Caches, &config, now).await,
        stats(2, 2, 0)
    );
    // Artifacts: a finished build's outputs after the retention, old
    // uploads unless a running build names them.
    let finished = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    let owner = format!("build/{}", finished.id);
    volume(
        &store,
        "art-done",
        "w1",
        None,
        (OwnerKind::Artifact, Some(&owner)),
        T0,
    )
    .await;
    volume(
        &store,
        "upload-old",
        "w1",
        None,
        (OwnerKind::Artifact, Some("upload")),
        T0,
    )
    .await;
    volume(
        &store,
        "upload-named",
        "w1",
        None,
        (OwnerKind::Artifact, Some("upload")),
        T0,
    )
    .await;
    volume(
        &store,
        "upload-new",
        "w1",
        None,
        (OwnerKind::Artifact, Some("upload")),
        now - MIN,
    )
    .await;
    store.claim_build("node", T0, HOUR).await.unwrap().unwrap();
    store.claim_build("node", T0, HOUR).await.unwrap().unwrap();
    store
        .finish_build(
            finished.id,
            1,
            BuildStatus::Failed,
            Some(1),
            None,
            now - 2 * HOUR,
        )
        .await
        .unwrap();
    assert_eq!(
        collect(&store, Collector::Artifacts, &config, now).await,
        stats(2, 2, 0)
    );
    let destroying: Vec<String> = rows(&store)
        .await
        .into_iter()
        .filter(|(_, (s, _))| *s == VolumeState::Destroying)
        .map(|(h, _)| h)
        .collect();
    assert_eq!(
        destroying,
        [
            "art-done",
            "cache-dup",
            "cache-stale",
            "scratch-old",
            "upload-old"
        ]
    );
    // A second run finds nothing more.
    for c in Collector::ALL {
        assert_eq!(collect(&store, c, &config, now).await.destroyed, 0, "{c}");
    }
}

async fn a_big_forest_of_missing_volumes_goes_in_batches(store: Store) {
    let g = worker(&store, "w1").await;
    // 30 chains of 4 and a fan-out of 40 under one base, all missing.
    let mut all = Vec::new();
    for c in 0..30 {
        let mut parent: Option<String> = None;
        for d in 0..4 {
            let h = format!("c{c}-{d}");
            volume(&store, &h, "w1", parent.as_deref(), SCRATCH, T0).await;
            all.push(h.clone());
            parent = Some(h);
        }
    }
    volume(&store, "fan", "w1", None, SCRATCH, T0).await;
    for i in 0..40 {
        volume(&store, &format!("fan-{i}"), "w1", Some("fan"), SCRATCH, T0).await;
    }
    store.apply_volume_report("w1", g, &[], T0).await.unwrap();
    let config = GcConfig {
        batch_size: 7,
        ..GcConfig::default()
    };
    let done = collect(&store, Collector::MissingVolumes, &config, T0 + 5 * MIN).await;
    assert_eq!(done, stats(161, 161, 0));
    assert!(rows(&store).await.is_empty());
}

fn destroying(rows: BTreeMap<String, (VolumeState, bool)>) -> Vec<String> {
    rows.into_iter()
        .filter(|(_, (s, _))| *s == VolumeState::Destroying)
        .map(|(h, _)| h)
        .collect()
}

async fn collectors_read_their_candidates_a_page_at_a_time(store: Store) {
    worker(&store, "w1").await;
    let config = GcConfig {
        page_size: 2,
        ..GcConfig::default()
    };
    let now = T0 + 30 * HOUR;
    // Eleven old scratch volumes, made at two moments (ties are settled by
    // the handle); every third has its container's row and stays.
    for i in 0..11 {
        let container = format!("c{i:02}");
        volume(
            &store,
            &format!("s{i:02}"),
            "w1",
            None,
            (OwnerKind::Container, Some(&container)),
            T0 + i % 2,
        )
        .await;
        if i % 3 == 0 {
            store
                .create_container_row(&container, "w1", None, None, T0 - MIN)
                .await
                .unwrap();
        }
    }
    assert_eq!(
        collect(&store, Collector::OrphanVolumes, &config, now).await,
        stats(7, 7, 0)
    );
    assert_eq!(
        destroying(rows(&store).await),
        ["s01", "s02", "s04", "s05", "s07", "s08", "s10"]
    );
    // Old uploads: the ones a running build names are read and kept, and
    // the pages after them are read all the same.
    store
        .create_build("b", None, "[]", r#"{"a":"u1","b":"u3"}"#, T0)
        .await
        .unwrap();
    for i in 0..6 {
        volume(
            &store,
            &format!("u{i}"),
            "w1",
            None,
            (OwnerKind::Artifact, Some("upload")),
            T0,
        )
        .await;
    }
    assert_eq!(
        collect(&store, Collector::Artifacts, &config, now).await,
        stats(4, 4, 0)
    );
    let gone = destroying(rows(&store).await);
    assert_eq!(
        gone.iter()
            .filter(|h| h.starts_with('u'))
            .collect::<Vec<_>>(),
        ["u0", "u2", "u4", "u5"]
    );
    for c in Collector::ALL {
        assert_eq!(collect(&store, c, &config, now).await.destroyed, 0, "{c}");
    }
}

async fn the_caches_collector_sweeps_a_few_workers_per_pass(store: Store) {
    let config = GcConfig {
        cache_sweep_workers: 2,
        ..GcConfig::default()
    };
    let now = T0 + 2 * HOUR;
    let key = (OwnerKind::TaskCache, Some("k"));
    // Each worker has a duplicate past the grace, and its newest cache.
    for w in ["w1", "w2", "w3", "w4", "w5"] {
        worker(&store, w).await;
        volume(&store, &format!("{w}-dup"), w, None, key, T0).await;
        volume(&store, &format!("{w}-new"), w, None, key, T0 + HOUR).await;
    }
    let pass = || collect(&store, Collector::Caches, &config, now);
    assert_eq!(pass().await, stats(2, 2, 0));
    assert_eq!(destroying(rows(&store).await), ["w1-dup", "w2-dup"]);
    assert_eq!(pass().await, stats(2, 2, 0));
    assert_eq!(
        pass().await,
        stats(1, 1, 0),
        "the last worker; then it starts over"
    );
    assert_eq!(pass().await, stats(0, 0, 0), "w1 and w2 have nothing left");
    // A newer cache on w1 makes w1-new a duplicate: the sweep reaches it
    // again after w3, w4 and w5.
    volume(&store, "w1-newer", "w1", None, key, now).await;
    assert_eq!(pass().await, stats(0, 0, 0));
    assert_eq!(pass().await, stats(0, 0, 0));
    assert_eq!(pass().await, stats(1, 1, 0));
    let gone = destroying(rows(&store).await);
    assert!(gone.contains(&"w1-new".to_string()), "{gone:?}");
    assert_eq!(gone.len(), 6, "{gone:?}");
    // A pass that ends on the last worker leaves the next one nothing
    // after it: that pass starts over at once instead of sweeping nothing.
    let whole = GcConfig {
        cache_sweep_workers: 5,
        ..config
    };
    let pass = || collect(&store, Collector::Caches, &whole, now);
    assert_eq!(pass().await, stats(0, 0, 0), "w3 to w5, then the end");
    assert_eq!(pass().await, stats(0, 0, 0), "all five, ending on w5");
    volume(&store, "w5-newer", "w5", None, key, now).await;
    assert_eq!(pass().await, stats(1, 1, 0));
}

async fn one_node_at_a_time_collects_garbage(store: Store) {
    let first = store.try_gc_turn().await.unwrap();
    assert!(first.is_some());
    let second = store.try_gc_turn().await.unwrap();
    match store.backend() {
        // A web node on SQLite is alone: its turn is always its own.
        hangar_store::Backend::Sqlite => assert!(second.is_some()),
        hangar_store::Backend::Postgres => {
            assert!(second.is_none(), "another connection took a held turn");
            let other = store.clone();
            let waiting = tokio::spawn(async move { other.gc_turn().await.map(drop) });
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert!(
                !waiting.is_finished(),
                "gc_turn did not wait for the holder"
            );
            drop(first);
            waiting.await.unwrap().unwrap();
            let again = store.try_gc_turn().await.unwrap();
            assert!(again.is_some(), "the turn was not given back");
        }
    }
}

/// A failed task's kept container stays past its build's end until its
/// keep-until passes or its job's next build starts; a one-off build's
/// until its keep-until.
async fn a_kept_container_goes_at_its_time_or_at_its_jobs_next_build(store: Store) {
    use hangar_core::containers::ContainerState::{Created, Creating};
    worker(&store, "w1").await;
    let config = hangar_core::pipeline::parse_pipeline(
        "jobs:\n- {name: j, plan: [{task: t, config: {platform: linux, run: {path: x}}}]}\n",
    )
    .unwrap()
    .config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    let job = store.job("main", "p", "j").await.unwrap();
    let first = store
        .create_job_build(job.id, "p/j", "[]", T0)
        .await
        .unwrap()
        .build;
    let one_off = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    for (handle, build) in [("c-job", first.id), ("c-one-off", one_off.id)] {
        store
            .create_container_row(handle, "w1", Some(build), Some("0"), T0)
            .await
            .unwrap();
        store
            .set_container_state(handle, Creating, Created)
            .await
            .unwrap();
    }
    store.keep_container("c-job", T0 + HOUR).await.unwrap();
    store.keep_container("c-one-off", T0 + MIN).await.unwrap();
    // Only a created row is kept; a missing one is said so.
    store
        .create_container_row("c-new", "w1", Some(first.id), Some("1"), T0)
        .await
        .unwrap();
    assert!(matches!(
        store.keep_container("c-new", T0 + HOUR).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.keep_container("nope", T0 + HOUR).await,
        Err(StoreError::NotFound(_))
    ));
    store.delete_container_row("c-new").await.unwrap();
    let listed = store.list_containers(Some("w1")).await.unwrap();
    assert_eq!(
        listed.iter().map(|c| c.kept_until).collect::<Vec<_>>(),
        [Some(T0 + HOUR), Some(T0 + MIN)]
    );
    for _ in 0..2 {
        store
            .claim_build("node", T0, 60_000)
            .await
            .unwrap()
            .unwrap();
    }
    for b in [first.id, one_off.id] {
        assert!(store
            .finish_build(b, 1, BuildStatus::Failed, Some(1), None, T0)
            .await
            .unwrap());
    }
    let config = GcConfig::default();
    let states = |store: Store| async move {
        container_rows(&store)
            .await
            .into_iter()
            .map(|(h, (s, _))| (h, s))
            .collect::<Vec<(String, String)>>()
    };
    // Both builds are over; both containers are kept.
    assert_eq!(
        collect(&store, Collector::BuildContainers, &config, T0 + 1).await,
        stats(0, 0, 0)
    );
    // The one-off's time passes.
    assert_eq!(
        collect(&store, Collector::BuildContainers, &config, T0 + MIN).await,
        stats(1, 1, 0)
    );
    assert_eq!(
        states(store.clone()).await,
        [
            ("c-job".to_string(), "created".to_string()),
            ("c-one-off".to_string(), "destroying".to_string()),
        ]
    );
    // The job's next build, still pending, changes nothing; started, it
    // ends the keep.
    let next = store
        .create_job_build(job.id, "p/j", "[]", T0 + 2 * MIN)
        .await
        .unwrap()
        .build;
    assert_eq!(
        collect(&store, Collector::BuildContainers, &config, T0 + 2 * MIN).await,
        stats(0, 0, 0)
    );
    let claimed = store
        .claim_build("node", T0 + 2 * MIN, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, next.id);
    assert_eq!(
        collect(&store, Collector::BuildContainers, &config, T0 + 2 * MIN).await,
        stats(1, 1, 0)
    );
    assert_eq!(states(store.clone()).await[0].1, "destroying");
}

on_both_databases!(
    a_kept_container_goes_at_its_time_or_at_its_jobs_next_build,
    a_container_report_is_diffed_both_ways_and_applied,
    a_missing_base_with_live_children_is_collected_with_unrelated_ones,
    a_reported_again_root_is_not_collected,
    failed_rows_are_marked_destroying_and_finished_builds_lose_their_containers,
    an_abandoned_creation_is_failed_destroyed_and_forgotten,
    orphans_caches_and_artifacts_are_marked_destroying_by_their_rules,
    a_big_forest_of_missing_volumes_goes_in_batches,
    collectors_read_their_candidates_a_page_at_a_time,
    the_caches_collector_sweeps_a_few_workers_per_pass,
    one_node_at_a_time_collects_garbage,
);
