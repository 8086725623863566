//! Container reports through web's report route, and the GC loop's pass
//! with its metrics. On SQLite and PostgreSQL alike.

use crate::common::{api_code, TestWeb};
use hangar_api::VolumeReport;
use hangar_core::gc::Collector;
use hangar_core::volumes::OwnerKind;
use hangar_store::{NewVolume, Store};
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

fn report(generation: i64, volumes: &[&str], containers: Option<&[&str]>) -> VolumeReport {
    VolumeReport {
        generation,
        handles: volumes.iter().map(|s| s.to_string()).collect(),
        containers: containers.map(|c| c.iter().map(|s| s.to_string()).collect()),
    }
}

async fn missing_containers(t: &TestWeb) -> Vec<String> {
    t.web
        .store()
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.missing_since.is_some())
        .map(|c| c.handle)
        .collect()
}

async fn a_worker_reports_its_containers_and_destroys_what_web_does_not_know(store: Store) {
    let t = TestWeb::start(store).await;
    let g = t.register("w1", "w1").await;
    let s = t.web.store();
    for h in ["running", "lost"] {
        s.create_container_row(h, "w1", Some(1), Some("0"), 0)
            .await
            .unwrap();
        s.set_container_state(
            h,
            hangar_core::containers::ContainerState::Creating,
            hangar_core::containers::ContainerState::Created,
        )
        .await
        .unwrap();
    }
    let answer = t
        .as_worker("w1")
        .report_volumes("w1", &report(g, &[], Some(&["running", "stray"])))
        .await
        .unwrap();
    assert_eq!(answer.destroy_containers, ["stray"]);
    assert!(answer.destroy.is_empty());
    assert_eq!(missing_containers(&t).await, ["lost"]);
    // A worker that does not report containers leaves their rows alone.
    let answer = t
        .as_worker("w1")
        .report_volumes("w1", &report(g, &[], None))
        .await
        .unwrap();
    assert!(answer.destroy_containers.is_empty());
    assert_eq!(missing_containers(&t).await, ["lost"]);
    // Reported again: back.
    t.as_worker("w1")
        .report_volumes("w1", &report(g, &[], Some(&["running", "lost"])))
        .await
        .unwrap();
    assert!(missing_containers(&t).await.is_empty());
    // Container handles are checked like volume handles.
    let err = t
        .as_worker("w1")
        .report_volumes("w1", &report(g, &[], Some(&["../etc"])))
        .await
        .unwrap_err();
    assert_eq!(
        api_code(err),
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    t.stop().await;
}

async fn a_gc_pass_collects_missing_volumes_and_shows_in_the_metrics(store: Store) {
    let t = TestWeb::start(store).await;
    let g = t.register("w1", "w1").await;
    let s = t.web.store();
    let mut parent: Option<String> = None;
    for h in ["base", "child", "grandchild"] {
        s.create_volume_row(
            &NewVolume {
                handle: h.into(),
                worker: "w1".into(),
                parent: parent.clone(),
                owner_kind: OwnerKind::Container,
                owner_id: None,
                strategy: hangar_api::Strategy::Empty,
            },
            t.web.config().clock.now(),
        )
        .await
        .unwrap();
        s.finish_volume_creation(h, Ok(None)).await.unwrap();
        parent = Some(h.to_string());
    }
    // The base vanished; its children are still on disk. (Past the grace
    // in which a report does not judge a volume that young.)
    t.advance(hangar_core::volumes::YOUNG_VOLUME_MS + 1);
    t.as_worker("w1")
        .report_volumes("w1", &report(g, &["child", "grandchild"], Some(&[])))
        .await
        .unwrap();
    let runs = t.web.control().run_gc_once().await;
    assert_eq!(runs.len(), Collector::ALL.len());
    assert!(runs
        .iter()
        .all(|r| r.error.is_none() && r.stats.destroyed == 0));
    t.advance(t.web.config().gc.missing_grace_ms);
    let runs = t.web.control().run_gc_once().await;
    let missing = runs
        .iter()
        .find(|r| r.collector == Collector::MissingVolumes)
        .unwrap();
    assert_eq!(
        (
            missing.stats.found,
            missing.stats.destroyed,
            missing.stats.failed
        ),
        (3, 3, 0)
    );
    assert!(s.list_volumes(None).await.unwrap().is_empty());
    // The children on disk are unknown now: the worker is told to destroy
    // them.
    let answer = t
        .as_worker("w1")
        .report_volumes("w1", &report(g, &["child", "grandchild"], Some(&[])))
        .await
        .unwrap();
    let mut destroy = answer.destroy;
    destroy.sort();
    assert_eq!(destroy, ["child", "grandchild"]);

    let metrics = t.metrics().await;
    for line in [
        "hangar_gc_found_total{collector=\"missing-volumes\"} 3",
        "hangar_gc_destroyed_total{collector=\"missing-volumes\"} 3",
        "hangar_gc_failed_total{collector=\"missing-volumes\"} 0",
        "hangar_gc_errors_total{collector=\"caches\"} 0",
        "hangar_gc_duration_seconds_count{collector=\"orphan-volumes\"} 2",
        "hangar_gc_passes_total{outcome=\"collected\"} 2",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }
    t.stop().await;
}

on_both_databases!(
    a_worker_reports_its_containers_and_destroys_what_web_does_not_know,
    a_gc_pass_collects_missing_volumes_and_shows_in_the_metrics,
);
