//! The dashboard in a real browser: headless Chromium driven through
//! chromedriver (WebDriver) against web served in-process on a real
//! store. Logs in, opens the pipelines page, triggers a job from its
//! page, watches the build's log stream in (with a lost worker's retry
//! and its cause) to its end, and sees the workers page update. On
//! failure a screenshot is saved under `target/`.
//!
//! Builds are not run here (no worker runs steps in this test): the test
//! writes the build's log through the store as the engine does, then
//! aborts the build, so what is tested is the page, the stream and the
//! script, not the engine.

use std::time::Duration;

use crate::common::TestWeb;
use fantoccini::{Client, Locator};
use hangar_core::build::BuildEventKind;
use hangar_testkit::browser::{self, artifact_dir, click, fail, start_driver, Step};
use serde_json::json;

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

/// Waits for the element's text to contain `want`.
const PASSWORD: &str = "olga-s-password";

async fn wait_for_text(c: &Client, css: &str, want: &str) -> Step {
    browser::wait_for(c, Locator::Css(css), &[want], Duration::from_secs(20))
        .await
        .map(|_| ())
}

async fn journey(t: &TestWeb, c: &Client) -> Step {
    let base = &t.url;
    // Logging in.
    c.goto(&format!("{base}/login"))
        .await
        .map_err(fail("goto"))?;
    // Olga, a pipeline operator of team main, logs in with her password.
    for (field, text) in [("username", "olga"), ("password", PASSWORD)] {
        c.find(Locator::Css(&format!("input[name={field}]")))
            .await
            .map_err(fail("login field"))?
            .send_keys(text)
            .await
            .map_err(fail("type into the login form"))?;
    }
    click(c, "main form[action='/login'] button[type=submit]").await?;
    // The pipelines page, with the workers link only a login shows, and
    // who is logged in.
    wait_for_text(c, "main", "pipelines").await?;
    wait_for_text(c, "header", "workers").await?;
    wait_for_text(c, "#user", "user local:olga").await?;
    click(c, "a[href='/teams/main/pipelines/p/jobs/unit']").await?;
    wait_for_text(c, "h1", "unit").await?;
    // Trigger from the job's page; the build appears in its list.
    click(c, "form[action$='/jobs/unit/trigger'] button").await?;
    click(c, "a[href='/teams/main/pipelines/p/jobs/unit/builds/1']").await?;
    wait_for_text(c, "h1", "p/unit #1").await?;
    // The build's log, written as the engine writes it, streams in live.
    let build = t.admin.builds(1).await.map_err(fail("builds"))?[0].id;
    let store = t.web.store().clone();
    let writer = tokio::spawn(async move {
        store
            .append_build_event(
                build,
                Some("0"),
                BuildEventKind::Log,
                "<script>window.owned=1</script>\n",
                1,
            )
            .await
            .unwrap();
        for i in 0..2000 {
            store
                .append_build_event(
                    build,
                    Some("0"),
                    BuildEventKind::Log,
                    &format!("line {i}\n"),
                    1,
                )
                .await
                .unwrap();
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    wait_for_text(c, "#log", "line 1999").await?;
    writer.await.map_err(fail("log writer"))?;
    // A worker lost mid-step: the engine's infrastructure entry streams in.
    let lost =
        "worker w1 restarted with its state lost (OOMKilled); retrying get repo (attempt 2 of 3)";
    t.web
        .store()
        .append_build_event(build, Some("0"), BuildEventKind::Infra, lost, 3)
        .await
        .map_err(fail("infra event"))?;
    wait_for_text(c, "#log .infra", "OOMKilled").await?;
    let owned = c
        .execute("return typeof window.owned", vec![])
        .await
        .map_err(fail("execute"))?;
    if owned != json!("undefined") {
        return Err("a script in the log ran".into());
    }
    // The build ends: the stream says so and the page shows the end.
    t.web
        .store()
        .request_build_abort(build, 2)
        .await
        .map_err(fail("abort"))?;
    wait_for_text(c, "#build-status", "aborted").await?;
    // After the end the page reloads: the retry is listed with its cause.
    wait_for_text(c, "#infra", "OOMKilled").await?;
    // The workers page, which updates itself as the fleet changes.
    click(c, "a[href='/workers']").await?;
    wait_for_text(c, "main", "w1").await?;
    t.register("w2", "disk-2").await;
    wait_for_text(c, "#fleet", "w2").await?;
    Ok(())
}

#[tokio::test]
async fn a_browser_logs_in_triggers_a_job_and_watches_its_log() {
    let t = TestWeb::start_with(hangar_testkit::sqlite_store().await, |c| {
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        c.auth = hangar_web::AuthConfig {
            local_users: vec![hangar_web::LocalUser::parse(&format!("olga:{hash}")).unwrap()],
            main_team: Some(
                hangar_core::tenancy::TeamAuth::from_config(&json!({"roles": [
                    {"name": "pipeline-operator", "local": {"users": ["olga"]}},
                ]}))
                .unwrap(),
            ),
            ..Default::default()
        };
    })
    .await;
    t.admin
        .set_pipeline("main", "p", CONFIG, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    t.register("w1", "disk-1").await;
    let driver = start_driver().await;
    let c = browser::browser(&driver).await;
    let outcome = journey(&t, &c).await;
    if let Err(e) = &outcome {
        let dir = artifact_dir();
        let _ = std::fs::create_dir_all(&dir);
        let shot = dir.join("dashboard-browser-failure.png");
        if let Ok(png) = c.screenshot().await {
            let _ = std::fs::write(&shot, png);
        }
        let _ = c.clone().close().await;
        panic!("{e} (screenshot: {})", shot.display());
    }
    c.close().await.unwrap();
    t.stop().await;
}
