//! The dashboard in a real browser over a real fleet: a web process and
//! two worker processes (process runtime), headless Chromium driven
//! through chromedriver. The browser logs in and watches a one-off
//! build's page while the worker running its task is SIGKILLed: the page
//! shows the step retried with the lost worker's name and why, the log
//! streams to its end, the build succeeds, and the workers page follows
//! the killed worker's state (stalled, then running again once it is
//! restarted). On failure a screenshot is saved under `target/`.
//!
//! chromedriver and chromium are required: a machine without them fails
//! this test, saying what to install, rather than skipping it.

// The cluster helpers block; each test runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, Cluster, Proc, ADMIN};
use fantoccini::{Client, Locator};
use hangar_api::builds::CreateBuild;
use hangar_testkit::browser::{self, artifact_dir, click, fail, start_driver, Step};
use nix::sys::signal::Signal;
use serde_json::json;

const WORKERS: [&str; 2] = ["dock-a", "dock-b"];

/// The task: a line at once, long enough asleep for the test to kill its
/// worker, then 2,000 lines and a last one.
const SCRIPT: &str = "echo task-started; sleep 5; i=0; \
    while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; echo task-finished";

/// Waits for the element's text to hold every one of `want`. Generous:
/// the retry waits for the heartbeat TTL, and the second attempt sleeps
/// again before its lines.
async fn wait_for(c: &Client, at: Locator<'_>, want: &[&str]) -> Result<String, String> {
    browser::wait_for(c, at, want, Duration::from_secs(60)).await
}

/// The worker's row of the workers page (its second cell is the state).
fn row_xpath(worker: &str) -> String {
    format!("//div[@id='fleet']//tr[td/a[@href='/workers/{worker}']]")
}

/// Saves what the browser shows now as `e2e-dashboard-<name>.png` under
/// the artifact dir: every page the journey visits leaves its picture.
async fn shot(c: &Client, name: &str) -> Step {
    browser::screenshot(c, &format!("e2e-dashboard-{name}"))
        .await
        .map(|_| ())
}

async fn journey(cluster: &Cluster, workers: &mut Vec<Proc>, c: &Client) -> Step {
    let base = &cluster.url;
    c.goto(&format!("{base}/login"))
        .await
        .map_err(fail("goto"))?;
    // The operator logs in with the admin token, behind its disclosure.
    click(c, "details summary").await?;
    c.find(Locator::Css("details input[name=token]"))
        .await
        .map_err(fail("token field"))?
        .send_keys(ADMIN)
        .await
        .map_err(fail("type token"))?;
    click(c, "details button[type=submit]").await?;
    wait_for(c, Locator::Css("header"), &["workers"]).await?;
    wait_for(c, Locator::Css("#user"), &["admin token"]).await?;

    let api =
        hangar_client::Client::new(base, ADMIN, Duration::from_secs(30)).map_err(fail("client"))?;
    let build = api
        .create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some("dashboard-e2e".into()),
            plan: json!([{"task": "work", "config": {"platform": "linux",
                "run": {"path": "sh", "args": ["-c", SCRIPT]}}}]),
            artifacts: Default::default(),
            team: None,
        })
        .await
        .map_err(fail("create build"))?;
    c.goto(&format!("{base}/builds/{}", build.id))
        .await
        .map_err(fail("goto build"))?;
    // The first attempt's output streams in; its worker is then killed.
    wait_for(c, Locator::Css("#log"), &["task-started"]).await?;
    let running = api.build(build.id).await.map_err(fail("build"))?;
    let victim = running
        .steps
        .iter()
        .find_map(|s| s.worker.clone())
        .ok_or_else(|| format!("no step has a worker: {running:?}"))?;
    let survivor = WORKERS
        .into_iter()
        .find(|w| *w != victim)
        .ok_or("the victim is not one of the workers")?;
    let at = workers
        .iter()
        .position(|p| p.name == victim)
        .ok_or("no process for the victim")?;
    let killed = workers.remove(at);
    killed.signal(Signal::SIGKILL);
    drop(killed);

    shot(c, "build-running").await?;
    // The retry, with the lost worker's name and why, streams in live.
    let log = wait_for(
        c,
        Locator::Css("#log"),
        &[&format!("worker {victim}"), "retrying task work (attempt 2"],
    )
    .await?;
    let retry = log
        .lines()
        .find(|l| l.contains("retrying task work"))
        .unwrap_or_default()
        .to_string();
    if !(retry.contains("stalled") || retry.contains("could not be reached")) {
        return Err(format!("the retry line gives no cause: {retry:?}"));
    }
    // The step's summary follows without a reload: its second attempt,
    // on the other worker.
    wait_for(
        c,
        Locator::Css("details.step[data-step='0'] summary"),
        &["attempt 2", &format!("on {survivor}")],
    )
    .await?;
    shot(c, "build-retried").await?;
    // The second attempt's log streams to its end and the build succeeds.
    wait_for(c, Locator::Css("#log"), &["line-1999", "task-finished"]).await?;
    wait_for(c, Locator::Css("#build-status"), &["succeeded"]).await?;
    // The page reloads at the end: the infrastructure list says where the
    // step went after the lost worker.
    wait_for(
        c,
        Locator::Css("#infra"),
        &[
            &format!("worker {victim}"),
            &format!("attempt 2 on {survivor}"),
        ],
    )
    .await?;

    // After the reload the step that went well is closed: its lines are
    // not shown until its summary is opened (a click, or the keyboard).
    let section = "details.step[data-step='0']";
    let closed = c
        .find(Locator::Css(section))
        .await
        .map_err(fail("the step's section"))?
        .attr("open")
        .await
        .map_err(fail("open attribute"))?;
    if closed.is_some() {
        return Err("a succeeded step's section starts open".into());
    }
    let hidden = c
        .find(Locator::Css(&format!("{section} pre")))
        .await
        .map_err(fail("the step's log"))?;
    if hidden.is_displayed().await.map_err(fail("displayed"))? {
        return Err("a closed section shows its log".into());
    }
    click(c, &format!("{section} summary")).await?;
    wait_for(
        c,
        Locator::Css(&format!("{section} pre")),
        &["line-1999", "task-finished"],
    )
    .await?;
    // Timestamps: hidden until the box is ticked, then one per line.
    let stamp = format!("{section} span.t");
    let first = c
        .find(Locator::Css(&stamp))
        .await
        .map_err(fail("a stamp"))?;
    if first.is_displayed().await.map_err(fail("displayed"))? {
        return Err("stamps show before the box is ticked".into());
    }
    click(c, "label[for=timestamps]").await?;
    if !first.is_displayed().await.map_err(fail("displayed"))? {
        return Err("ticking the box shows no stamps".into());
    }
    let text = first.text().await.map_err(fail("stamp text"))?;
    let clock = text.trim();
    if !(clock.len() == 8 && clock.as_bytes()[2] == b':' && clock.as_bytes()[5] == b':') {
        return Err(format!("a stamp reads {text:?}, not HH:MM:SS"));
    }
    shot(c, "build-finished").await?;
    click(c, &format!("{section} summary")).await?;
    if hidden.is_displayed().await.map_err(fail("displayed"))? {
        return Err("a section closed again still shows its log".into());
    }

    // The workers page: the killed worker stalled, then, restarted on its
    // work dir, running again, without reloading the page.
    click(c, "a[href='/workers']").await?;
    let row = row_xpath(&victim);
    let state = format!("{row}/td[2]");
    wait_for(c, Locator::XPath(&state), &["stalled"]).await?;
    // Recreated under its name with its work dir wiped, as a pod whose
    // emptyDir went with it.
    let dir = cluster.work_dir(&victim);
    std::fs::remove_dir_all(&dir).map_err(|e| format!("wipe {}: {e}", dir.display()))?;
    workers.push(cluster.worker(&victim));
    wait_for(c, Locator::XPath(&state), &["running"]).await?;
    wait_for(c, Locator::XPath(&row), &["restarted-state-lost"]).await?;
    shot(c, "workers").await?;

    // Its page tells the incident on one line: stalled, the step retried
    // elsewhere (a link to the build), back with its state lost.
    click(c, &format!("a[href='/workers/{victim}']")).await?;
    let retried = format!("#timeline a[href='/builds/{}'] .retry", build.id);
    for mark in [
        "#timeline [data-kind=registered]",
        "#timeline [data-kind=stalled]",
        "#timeline [data-kind=restarted-state-lost]",
        &retried,
    ] {
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(mark))
            .await
            .map_err(|e| format!("the timeline's {mark}: {e}"))?;
    }
    wait_for(
        c,
        Locator::Css("#history"),
        &[
            "restarted-state-lost",
            "stalled",
            "step retried: dashboard-e2e",
        ],
    )
    .await?;
    shot(c, "worker-timeline").await?;

    // A page left open follows a build from its start to its end without
    // a reload (a reload would drop the mark set here).
    c.goto(&format!("{base}/builds"))
        .await
        .map_err(fail("goto builds"))?;
    wait_for(c, Locator::Css("main"), &["dashboard-e2e"]).await?;
    c.execute("window.leftOpen = 1", vec![])
        .await
        .map_err(fail("mark the page"))?;
    let quick = api
        .create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some("left-open".into()),
            plan: json!([{"task": "quick", "config": {"platform": "linux",
                "run": {"path": "sh", "args": ["-c", "sleep 3"]}}}]),
            artifacts: Default::default(),
            team: None,
        })
        .await
        .map_err(fail("create the second build"))?;
    let row = format!("//main//tr[td/a[@href='/builds/{}']]", quick.id);
    wait_for(c, Locator::XPath(&row), &["left-open", "started"]).await?;
    shot(c, "builds-started").await?;
    wait_for(c, Locator::XPath(&row), &["succeeded"]).await?;
    shot(c, "builds-finished").await?;
    let mark = c
        .execute("return window.leftOpen", vec![])
        .await
        .map_err(fail("read the mark"))?;
    if mark != json!(1) {
        return Err("the builds page was reloaded rather than updated".into());
    }
    Ok(())
}

#[test]
fn a_browser_watches_a_step_retried_after_its_worker_is_killed() {
    let cluster = Cluster::start();
    let mut workers: Vec<Proc> = WORKERS.iter().map(|w| cluster.worker(w)).collect();
    cluster.wait_until("both workers run", |ws| {
        WORKERS.iter().all(|w| has(ws, w, "running"))
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let driver = start_driver().await;
        let c = browser::browser(&driver).await;
        let outcome = journey(&cluster, &mut workers, &c).await;
        if let Err(e) = &outcome {
            let dir = artifact_dir();
            let _ = std::fs::create_dir_all(&dir);
            let shot = dir.join("e2e-dashboard-browser-failure.png");
            if let Ok(png) = c.screenshot().await {
                let _ = std::fs::write(&shot, png);
            }
            let _ = c.clone().close().await;
            let web_log =
                std::fs::read_to_string(cluster.dir.path().join("web.log")).unwrap_or_default();
            let tail: String = web_log
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "{e} (screenshot: {})\nweb log ends:\n{tail}",
                shot.display()
            );
        }
        c.close().await.unwrap();
    });
}
