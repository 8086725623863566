//! The dashboard's pages, on SQLite and PostgreSQL, at the size PRODUCT.md
//! names: 1,000 workers and 100 pipelines, seeded as `hangar bench
//! dashboard` seeds them (`hangar_bench::dashboard::seed`). Every page
//! answers whole at that size: every worker and every pipeline listed,
//! every job linked, the build's whole log rendered. How long the pages
//! take is the benchmark's to measure (`hangar bench dashboard`, figures
//! in docs/benchmarks.md), not this test's.

use crate::common::{TestWeb, ADMIN};
use hangar_bench::dashboard::{
    pages, pipeline_name, seed, worker_name, LOG_LINES, SHOWN_PIPELINE, SHOWN_WORKER,
};
use hangar_store::Store;
use hangar_testkit::on_both_databases;

const WORKERS: usize = 1000;
const PIPELINES: usize = 100;

async fn every_page_answers_whole_at_1000_workers_and_100_pipelines(store: Store) {
    let t = TestWeb::start(store).await;
    let seeded = seed(t.web.store(), WORKERS, PIPELINES).await.unwrap();
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
    let mut html = std::collections::HashMap::new();
    for page in pages(seeded.shown_build) {
        let r = http
            .get(format!("{}{page}", t.url))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{page}");
        html.insert(page, r.text().await.unwrap());
    }
    let front = &html["/"];
    for p in 0..PIPELINES {
        let base = format!("/teams/main/pipelines/{}", pipeline_name(p));
        assert!(front.contains(&format!("href=\"{base}\"")), "{base}");
        for j in 0..5 {
            assert!(
                front.contains(&format!("href=\"{base}/jobs/job-{j}\"")),
                "{base} job-{j}"
            );
        }
        assert!(front.contains(&format!("href=\"{base}/jobs/job-0/builds/1\"")));
    }
    let fleet = &html["/workers"];
    assert!(fleet.contains(&format!("workers ({WORKERS})")));
    for i in 0..WORKERS {
        assert!(
            fleet.contains(&format!("href=\"/workers/{}\"", worker_name(i))),
            "{}",
            worker_name(i)
        );
    }
    assert!(html[&format!("/workers/{SHOWN_WORKER}")].contains("registered"));
    let graph = &html[&format!("/teams/main/pipelines/{SHOWN_PIPELINE}")];
    for j in 0..5 {
        assert!(graph.contains(&format!("/jobs/job-{j}\"")), "job-{j}");
    }
    // Each job and the resource a node of the graph, each get and passed
    // an edge.
    for j in 0..5 {
        assert!(
            graph.contains(&format!("data-node=\"job:job-{j}\"")),
            "job-{j}"
        );
    }
    assert!(graph.contains("data-node=\"resource:repo\""));
    assert_eq!(graph.matches("<path class=\"edge").count(), 5);
    let resource = &html[&format!("/teams/main/pipelines/{SHOWN_PIPELINE}/resources/repo")];
    assert!(resource.contains("versions, newest first"));
    let build = &html[&format!("/builds/{}", seeded.shown_build)];
    for i in [0, LOG_LINES - 1] {
        assert!(
            build.contains(&format!("line {i} of the build")),
            "line {i}"
        );
    }
    assert!(build.contains("succeeded"));
    t.stop().await;
}

on_both_databases!(every_page_answers_whole_at_1000_workers_and_100_pipelines);
