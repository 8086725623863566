//! The dashboard's pages, on SQLite and PostgreSQL, at the size the issue names: 1,000 workers and
//! 100 pipelines (5 jobs each, a build of each first job). Each page's
//! server-side time is measured (best of 5 requests over loopback) and
//! printed (`--nocapture`); the target, ≤ 100 ms, is read in a release
//! build (`cargo test --release -p hangar-web --test dashboard_scale --
//! --nocapture`, figures in docs/benchmarks.md). Timings are reported, not
//! asserted: a shared machine's noise would make such a test flaky. What
//! is asserted is that every page answers whole at that size.

mod common;

use std::time::{Duration, Instant};

use common::{TestWeb, ADMIN};
use hangar_store::{Store, WorkerInfo};
use hangar_testkit::on_both_databases;

const WORKERS: usize = 1000;
const PIPELINES: usize = 100;

fn config() -> String {
    let mut c = String::from("resources:\n- name: repo\n  type: mock\n  source: {}\njobs:\n");
    for j in 0..5 {
        c.push_str(&format!("- name: job-{j}\n  plan:\n  - get: repo\n"));
        if j > 0 {
            c.push_str(&format!("    passed: [job-{}]\n", j - 1));
        }
    }
    c
}

fn worker(i: usize) -> WorkerInfo {
    WorkerInfo {
        name: format!("worker-{i:04}"),
        state_identity: format!("disk-{i}"),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 12,
        volumes: 40,
        api_url: None,
    }
}

async fn every_page_answers_at_1000_workers_and_100_pipelines(store: Store) {
    let t = TestWeb::start(store).await;
    let store = t.web.store();
    for i in 0..WORKERS {
        store.register_worker(&worker(i), 1).await.unwrap();
    }
    let config = config();
    for p in 0..PIPELINES {
        let name = format!("pipeline-{p:03}");
        t.admin
            .set_pipeline("main", &name, &config, None)
            .await
            .unwrap();
        t.admin.pause_pipeline("main", &name, false).await.unwrap();
        t.admin.trigger_job("main", &name, "job-0").await.unwrap();
    }
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(format!("{}/login", t.url))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let build = t.admin.builds(1).await.unwrap()[0].id;
    let pages = [
        "/".to_string(),
        "/workers".into(),
        "/workers/worker-0500".into(),
        "/builds".into(),
        "/teams/main/pipelines/pipeline-050".into(),
        "/teams/main/pipelines/pipeline-050/jobs/job-0".into(),
        "/teams/main/pipelines/pipeline-050/jobs/job-0/builds/1".into(),
        format!("/builds/{build}"),
    ];
    for page in &pages {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let r = http
                .get(format!("{}{page}", t.url))
                .header("cookie", &cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{page}");
            r.bytes().await.unwrap();
            best = best.min(started.elapsed());
        }
        // The timings are this test's report (see them with --nocapture).
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{page}: {} ms", best.as_millis());
        }
    }
    t.stop().await;
}

on_both_databases!(every_page_answers_at_1000_workers_and_100_pipelines);
