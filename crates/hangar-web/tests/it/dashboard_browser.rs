//! The dashboard in a real browser: headless Chromium driven through
//! chromedriver (WebDriver) against web served in-process on a real
//! store. Logs in, opens the pipelines page, triggers a job from its
//! page, watches the build's log stream in (with a lost worker's retry
//! and its cause) to its end, and sees the workers page update. A second
//! journey follows the pipeline graph: its nodes and edges, a job node to
//! the job's page, a resource node to the resource's page, pins a version
//! there, and reads a long check error that must not widen the page; it
//! saves a screenshot of every page it visits (`target/graph-*.png`). On
//! failure a screenshot is saved under `target/`.
//!
//! Builds are not run here (no worker runs steps in this test): the test
//! writes the build's log through the store as the engine does, then
//! aborts the build, so what is tested is the page, the stream and the
//! script, not the engine.

use std::time::Duration;

use crate::common::TestWeb;
use crate::dashboard_graph::{check, integration_failed_unit_running, THREE_JOBS};
use fantoccini::{Client, Locator};
use hangar_core::build::BuildEventKind;
use hangar_testkit::browser::{self, click, fail, screenshot, start_driver, Step};
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
    // Olga, a pipeline operator of team main, logs in with her password:
    // the pipelines page, with the workers link only a login shows, and
    // who is logged in.
    log_in(t, c).await?;
    wait_for_text(c, "main", "pipelines").await?;
    wait_for_text(c, "header", "workers").await?;
    screenshot(c, "journey-2-pipelines").await?;
    click(c, "a[href='/teams/main/pipelines/p/jobs/unit']").await?;
    wait_for_text(c, "h1", "unit").await?;
    screenshot(c, "journey-3-job").await?;
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
    screenshot(c, "journey-4-build").await?;
    // A build of 100,000 lines: the page holds them all, and its sections
    // still close and open at a click.
    let long = t
        .admin
        .trigger_job("main", "p", "unit")
        .await
        .map_err(fail("trigger"))?;
    let chunk =
        |from: usize| -> String { (from..from + 100).map(|i| format!("line {i}\n")).collect() };
    for event in 0..1000 {
        t.web
            .store()
            .append_build_event(
                long.id,
                Some("0"),
                BuildEventKind::Log,
                &chunk(event * 100),
                4,
            )
            .await
            .map_err(fail("long log"))?;
    }
    t.web
        .store()
        .request_build_abort(long.id, 5)
        .await
        .map_err(fail("abort the long build"))?;
    c.goto(&format!("{base}/builds/{}", long.id))
        .await
        .map_err(fail("goto the long build"))?;
    wait_for_text(c, "#build-status", "aborted").await?;
    let lines = c
        .execute(
            "return document.querySelector(\"details.step[data-step='0'] pre\").textContent.split('\\n').length - 1",
            vec![],
        )
        .await
        .map_err(fail("count the lines"))?;
    if lines != json!(100_000) {
        return Err(format!(
            "the long build's page holds {lines} lines, not 100000"
        ));
    }
    click(c, "details.step[data-step='0'] summary").await?;
    let open = c
        .execute(
            "return document.querySelector(\"details.step[data-step='0']\").open",
            vec![],
        )
        .await
        .map_err(fail("read open"))?;
    if open != json!(false) {
        return Err("the long step's section did not close".into());
    }
    screenshot(c, "journey-5-long-build").await?;
    // The workers page, which updates itself as the fleet changes.
    click(c, "a[href='/workers']").await?;
    wait_for_text(c, "main", "w1").await?;
    t.register("w2", "disk-2").await;
    wait_for_text(c, "#fleet", "w2").await?;
    screenshot(c, "journey-6-workers").await?;
    Ok(())
}

/// Web with Olga, a pipeline operator of team main, and pipeline `p`.
async fn web_with_olga(config: &str) -> TestWeb {
    let t = TestWeb::start_with(hangar_testkit::sqlite_store().await, |c| {
        c.auth = hangar_web::AuthConfig {
            local_users: vec![crate::common::local_user("olga", PASSWORD)],
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
        .set_pipeline("main", "p", config, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    t
}

/// Runs `journey` in a fresh browser; on failure saves what it showed as
/// `<failure>.png` and fails the test.
async fn in_browser<'a, F, Fut>(t: &'a TestWeb, failure: &str, journey: F)
where
    F: FnOnce(&'a TestWeb, Client) -> Fut,
    Fut: std::future::Future<Output = Step> + 'a,
{
    let driver = start_driver().await;
    let c = browser::browser(&driver).await;
    let outcome = journey(t, c.clone()).await;
    if let Err(e) = &outcome {
        let shot = screenshot(&c, failure)
            .await
            .map_or_else(|why| why, |path| path.display().to_string());
        let _ = c.clone().close().await;
        panic!("{e} (screenshot: {shot})");
    }
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_browser_logs_in_triggers_a_job_and_watches_its_log() {
    let t = web_with_olga(CONFIG).await;
    t.register("w1", "disk-1").await;
    in_browser(&t, "dashboard-browser-failure", |t, c| async move {
        journey(t, &c).await
    })
    .await;
    t.stop().await;
}

async fn log_in(t: &TestWeb, c: &Client) -> Step {
    c.goto(&format!("{}/login", t.url))
        .await
        .map_err(fail("goto"))?;
    screenshot(c, "login").await?;
    for (field, text) in [("username", "olga"), ("password", PASSWORD)] {
        c.find(Locator::Css(&format!("input[name={field}]")))
            .await
            .map_err(fail("login field"))?
            .send_keys(text)
            .await
            .map_err(fail("type into the login form"))?;
    }
    click(c, "main form[action='/login'] button[type=submit]").await?;
    wait_for_text(c, "#user", "user local:olga").await
}

async fn count(c: &Client, css: &str) -> Result<usize, String> {
    Ok(c.find_all(Locator::Css(css))
        .await
        .map_err(fail("find all"))?
        .len())
}

/// Answers the script's result, which must be `true`, or says `what`.
async fn holds(c: &Client, what: &str, script: &str) -> Step {
    let answer = c.execute(script, vec![]).await.map_err(fail("execute"))?;
    if answer == json!(true) {
        Ok(())
    } else {
        Err(format!("{what}: the page answered {answer}"))
    }
}

/// Nodes drawn apart, and nothing wider than the window.
const NODES_APART: &str = "
    const boxes = [...document.querySelectorAll('svg.pipeline-graph a[data-node] rect')]
        .map(r => r.getBoundingClientRect());
    for (let i = 0; i < boxes.length; i++)
        for (let j = i + 1; j < boxes.length; j++) {
            const a = boxes[i], b = boxes[j];
            if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
                return false;
        }
    return boxes.length > 0;";
const FITS_THE_WINDOW: &str = "return document.documentElement.scrollWidth <= window.innerWidth;";

async fn graph_journey(t: &TestWeb, c: &Client) -> Step {
    log_in(t, c).await?;
    let base = format!("{}/teams/main/pipelines/p", t.url);
    c.goto(&base).await.map_err(fail("goto the pipeline"))?;
    wait_for_text(c, "h1", "pipeline p").await?;
    screenshot(c, "graph-1-pipeline").await?;
    for (css, want) in [
        ("svg.pipeline-graph a[data-node^='job:']", 3),
        ("svg.pipeline-graph a[data-node^='resource:']", 2),
        ("svg.pipeline-graph path.edge", 4),
        (
            "path.edge.get[data-from='resource:repo'][data-to='job:unit']",
            1,
        ),
        (
            "path.edge.passed[data-from='job:unit'][data-to='job:integration']",
            1,
        ),
        (
            "path.edge.passed[data-from='job:integration'][data-to='job:ship']",
            1,
        ),
        (
            "path.edge.put[data-from='job:ship'][data-to='resource:release']",
            1,
        ),
        ("a.node.job.running[data-node='job:unit']", 1),
        ("a.node.job.failed[data-node='job:integration']", 1),
        (
            "a.node.resource.check-failed[data-node='resource:release']",
            1,
        ),
    ] {
        let n = count(c, css).await?;
        if n != want {
            return Err(format!("{css}: {n} found, {want} wanted"));
        }
    }
    holds(c, "nodes overlap", NODES_APART).await?;
    holds(
        c,
        "the pipeline page is wider than the window",
        FITS_THE_WINDOW,
    )
    .await?;
    // What the palette says is what the browser draws: black text on the
    // failed job's red, the running job's border pulsing.
    holds(
        c,
        "the failed job's text is not black",
        "return getComputedStyle(document.querySelector(\"a[data-node='job:integration'] text\")).fill === 'rgb(0, 0, 0)';",
    )
    .await?;
    holds(
        c,
        "the running job does not pulse",
        "return getComputedStyle(document.querySelector(\"a[data-node='job:unit'] rect\")).animationName === 'pulse';",
    )
    .await?;
    // A job's node leads to its page.
    click(c, "svg.pipeline-graph a[data-node='job:unit']").await?;
    wait_for_text(c, "h1", "p / unit").await?;
    screenshot(c, "graph-2-job").await?;
    // A resource's node leads to its page, its versions newest first.
    c.goto(&base).await.map_err(fail("back to the pipeline"))?;
    click(c, "svg.pipeline-graph a[data-node='resource:repo']").await?;
    wait_for_text(c, "h1", "p / repo").await?;
    wait_for_text(c, "table.versions", "{\"ref\":\"b\"}").await?;
    screenshot(c, "graph-3-resource").await?;
    // Pin the newest version with a comment.
    c.find(Locator::Css("table.versions input[name=comment]"))
        .await
        .map_err(fail("the comment box"))?
        .send_keys("holding for the release")
        .await
        .map_err(fail("type a comment"))?;
    click(
        c,
        "table.versions form[action$='/resources/repo/pin'] button",
    )
    .await?;
    wait_for_text(c, "main", "holding for the release").await?;
    screenshot(c, "graph-4-pinned").await?;
    let pin = t
        .admin
        .resource_pin("main", "p", "repo")
        .await
        .map_err(fail("read the pin"))?;
    if pin.as_ref().map(|p| &p.version) != Some(&json!({"ref": "b"})) {
        return Err(format!("the pin is {pin:?}"));
    }
    // A long check error wraps inside the window.
    c.goto(&format!("{base}/resources/release"))
        .await
        .map_err(fail("goto the failing resource"))?;
    wait_for_text(c, "pre.check-error", "check failed").await?;
    holds(c, "the check error widens the page", FITS_THE_WINDOW).await?;
    screenshot(c, "graph-5-failing-check").await?;
    Ok(())
}

#[tokio::test]
async fn a_browser_follows_the_pipeline_graph_to_jobs_and_resources() {
    let t = web_with_olga(THREE_JOBS).await;
    let store = t.web.store().clone();
    // Versions for repo; release's check fails with a long error.
    let error = format!("exit 1: {}", "0123456789".repeat(400));
    check(
        &store,
        "repo",
        &[json!({"ref": "a"}), json!({"ref": "b"})],
        None,
    )
    .await;
    check(&store, "release", &[], Some(&error)).await;
    // integration failed; unit runs.
    integration_failed_unit_running(&t).await;
    in_browser(&t, "dashboard-graph-browser-failure", |t, c| async move {
        graph_journey(t, &c).await
    })
    .await;
    t.stop().await;
}
