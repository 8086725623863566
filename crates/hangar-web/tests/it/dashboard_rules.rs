//! The dashboard's rules beyond single pages, on SQLite and PostgreSQL:
//! the pipelines page lists every team's pipelines and their links work,
//! an open log stream ends when web stops (it does not hold the
//! shutdown's drain), and wrong admin tokens at the login form are
//! limited per client.

use crate::common::{TestWeb, ADMIN};
use hangar_core::login_limit::{MAX_FAILURES, WINDOW_MS};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::header::{COOKIE, RETRY_AFTER, SET_COOKIE};
use reqwest::StatusCode;

const CONFIG: &str = "
resources:
- name: repo
  type: mock
  source: {}
jobs:
- name: unit
  plan:
  - get: repo
";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn login(t: &TestWeb, token: &str) -> reqwest::Response {
    http()
        .post(format!("{}/login", t.url))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// The session cookie of a logged-in browser.
async fn session(t: &TestWeb) -> String {
    let r = login(t, ADMIN).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()[SET_COOKIE].to_str().unwrap();
    set.split(';').next().unwrap().to_string()
}

async fn get(t: &TestWeb, cookie: Option<&str>, path: &str) -> (StatusCode, String) {
    let mut rb = http().get(format!("{}{path}", t.url));
    if let Some(c) = cookie {
        rb = rb.header(COOKIE, c);
    }
    let r = rb.send().await.unwrap();
    let status = r.status();
    (status, r.text().await.unwrap())
}

async fn set(t: &TestWeb, team: &str, name: &str) {
    t.admin
        .set_pipeline(team, name, CONFIG, None)
        .await
        .unwrap();
    t.admin.pause_pipeline(team, name, false).await.unwrap();
    t.admin.trigger_job(team, name, "unit").await.unwrap();
}

async fn every_teams_pipelines_are_listed_and_their_links_work(store: Store) {
    let t = TestWeb::start(store).await;
    t.web.store().create_team("ops", 1).await.unwrap();
    t.web.store().create_team("zeta", 1).await.unwrap();
    set(&t, "main", "app").await;
    set(&t, "ops", "deploy").await;
    // Another team's pipeline of the same name is its own.
    set(&t, "ops", "app").await;
    let cookie = session(&t).await;
    let (status, html) = get(&t, Some(&cookie), "/").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    for team in ["main", "ops"] {
        assert!(html.contains(&format!("team {team}")), "{html}");
    }
    // A team without pipelines has no heading.
    assert!(!html.contains("team zeta"), "{html}");
    for base in [
        "/teams/main/pipelines/app",
        "/teams/ops/pipelines/deploy",
        "/teams/ops/pipelines/app",
    ] {
        for link in [
            base.to_string(),
            format!("{base}/jobs/unit"),
            format!("{base}/jobs/unit/builds/1"),
        ] {
            assert!(html.contains(&format!("href=\"{link}\"")), "{link}: {html}");
            let (status, page) = get(&t, Some(&cookie), &link).await;
            assert_eq!(status, StatusCode::OK, "{link}: {page}");
        }
    }
    // The team's heading comes before its pipelines.
    let ops = html.find("team ops").unwrap();
    assert!(html.find("/teams/main/pipelines/app").unwrap() < ops);
    assert!(html.find("/teams/ops/pipelines/deploy").unwrap() > ops);
    // Anonymous visitors see an exposed pipeline of any team, only it.
    let csrf_at = html.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = &html[csrf_at..csrf_at + 64];
    let r = http()
        .post(format!("{}/teams/ops/pipelines/deploy/expose", t.url))
        .header(COOKIE, &cookie)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (status, html) = get(&t, None, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("/teams/ops/pipelines/deploy"), "{html}");
    assert!(!html.contains("/teams/ops/pipelines/app"), "{html}");
    assert!(!html.contains("/teams/main/pipelines/app"), "{html}");
    assert_eq!(
        get(&t, None, "/teams/ops/pipelines/deploy").await.0,
        StatusCode::OK
    );
    assert_eq!(
        get(&t, None, "/teams/ops/pipelines/app").await.0,
        StatusCode::UNAUTHORIZED
    );
    t.stop().await;
}

async fn an_open_log_stream_ends_when_web_stops(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "main", "app").await;
    // Nothing runs builds here: the build stays pending and its stream
    // would stay open for as long as web serves.
    let build = t.admin.builds(1).await.unwrap()[0].id;
    let cookie = session(&t).await;
    let r = http()
        .get(format!("{}/builds/{build}/log?after=0", t.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let reader = tokio::spawn(r.text());
    // Web ends the stream as soon as it stops, instead of being cut off
    // at the drain limit (DRAIN_WITHIN): half of it is a generous bound
    // for a stop that does not wait for the stream at all.
    let within = hangar_web::DRAIN_WITHIN / 2;
    tokio::time::timeout(within, t.stop())
        .await
        .expect("web stopped with a log stream open");
    let body = tokio::time::timeout(within, reader)
        .await
        .expect("the stream ended")
        .unwrap()
        .expect("the stream ended cleanly, not cut off");
    assert!(
        !body.contains("event: end"),
        "the build did not end: {body}"
    );
}

async fn wrong_logins_are_limited_per_client(store: Store) {
    let t = TestWeb::start(store).await;
    for i in 0..MAX_FAILURES {
        let r = login(&t, "wrong-token-0123456789").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "failure {i}");
    }
    // Limited now: a wrong token and the right one alike.
    for token in ["wrong-token-0123456789", ADMIN] {
        let r = login(&t, token).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{token}");
        assert!(r.headers().get(SET_COOKIE).is_none());
        let seconds: i64 = r.headers()[RETRY_AFTER].to_str().unwrap().parse().unwrap();
        assert_eq!(seconds, WINDOW_MS / 1000);
        let html = r.text().await.unwrap();
        assert!(html.contains("too many wrong tokens"), "{html}");
    }
    // Pages other than the login form are not limited.
    assert_eq!(get(&t, None, "/").await.0, StatusCode::OK);
    // The window ends: the right token logs in, and the count starts
    // again from nothing.
    t.advance(WINDOW_MS);
    assert_eq!(login(&t, ADMIN).await.status(), StatusCode::SEE_OTHER);
    for i in 0..MAX_FAILURES {
        let r = login(&t, "wrong-token-0123456789").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "failure {i} after");
    }
    assert_eq!(
        login(&t, ADMIN).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    t.stop().await;
}

on_both_databases!(
    every_teams_pipelines_are_listed_and_their_links_work,
    an_open_log_stream_ends_when_web_stops,
    wrong_logins_are_limited_per_client,
);
