//! A real browser for the dashboard's tests: chromedriver on a free port
//! and headless Chromium through WebDriver, with the few waits the tests
//! share. A machine without chromedriver or chromium fails, saying what
//! to install; nothing is skipped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio::process::{Child, Command};

/// One step of a browser journey: `Err` says what did not happen.
pub type Step = Result<(), String>;

/// chromedriver on a free port, killed when dropped.
pub struct Driver {
    _child: Child,
    url: String,
}

pub async fn start_driver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver is not installed: run scripts/install-deps (Debian's chromium and chromium-driver)");
    let url = format!("http://127.0.0.1:{port}");
    let status = format!("{url}/status");
    for _ in 0..100 {
        if reqwest::get(&status).await.is_ok() {
            return Driver { _child: child, url };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer on {status}");
}

/// A headless Chromium session of `driver`.
pub async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900"],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromium session")
}

/// Where a failed journey's screenshot goes: the workspace's target dir.
pub fn artifact_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Saves what the browser shows as `<artifact_dir>/<name>.png`; answers
/// the file's path.
pub async fn screenshot(c: &Client, name: &str) -> Result<PathBuf, String> {
    let dir = artifact_dir();
    std::fs::create_dir_all(&dir).map_err(fail("create the artifact dir"))?;
    let path = dir.join(format!("{name}.png"));
    let png = c.screenshot().await.map_err(fail("screenshot"))?;
    std::fs::write(&path, png).map_err(fail("write the screenshot"))?;
    Ok(path)
}

/// Turns an error into a step's failure, saying what was being done.
pub fn fail<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e:?}")
}

pub async fn text_at(c: &Client, at: Locator<'_>) -> Result<String, String> {
    c.find(at)
        .await
        .map_err(fail("find"))?
        .text()
        .await
        .map_err(fail("text"))
}

/// Waits up to `within` until the element's text contains every one of
/// `want`; answers the text, or says how the element ended.
pub async fn wait_for(
    c: &Client,
    at: Locator<'_>,
    want: &[&str],
    within: Duration,
) -> Result<String, String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(text) = text_at(c, at).await {
            if want.iter().all(|w| text.contains(w)) {
                return Ok(text);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The end of what it shows is enough to see where it stopped.
    let shown = text_at(c, at).await.unwrap_or_default();
    let tail: String = shown
        .chars()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Err(format!(
        "{at:?} never showed {want:?} within {within:?}; it ends with {tail:?}"
    ))
}

pub async fn click(c: &Client, css: &str) -> Step {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .map_err(fail("wait for element"))?
        .click()
        .await
        .map_err(fail("click"))
}
