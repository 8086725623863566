//! OIDC login end to end: OpenBao's identity OIDC provider (`bao server
//! -dev`), a real web started with Concourse's `--oidc-*` flags, and
//! headless Chromium through the provider's own login page (OpenBao's UI,
//! its userpass form). Alice, of the provider's group that owns team
//! `devs`, logs in to the dashboard; Vic, a viewer of `devs` by name, logs
//! the CLI in through the browser (`hangar login` without a password),
//! reads the team's pipeline, is refused what a viewer may not do, and
//! logs out. On failure a screenshot is saved under `target/`.

// The cluster helpers block; the test runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{hangar, text, user_cli as user, Cluster};
use fantoccini::{Client, Locator};
use hangar_testkit::browser::{self, artifact_dir, click, fail, start_driver, Step};
use hangar_testkit::openbao::{Bao, OidcProvider, User};

const ALICE_PW: &str = "alice-oidc-pass-1";
const VIC_PW: &str = "vic-oidc-pass-22";

const CONFIG: &str = "
jobs:
- name: unit
  plan:
  - task: t
    config: {platform: linux, run: {path: \"true\"}}
";

async fn wait_for(c: &Client, css: &str, want: &[&str]) -> Result<String, String> {
    browser::wait_for(c, Locator::Css(css), want, Duration::from_secs(30)).await
}

/// Logs `name` in on OpenBao's own login page, which the browser is on or
/// is being sent to: its userpass form.
async fn provider_login(c: &Client, name: &str, password: &str) -> Step {
    wait_for(c, "form#auth-form", &[]).await?;
    click(
        c,
        "select[data-test-select=auth-method] option[value=userpass]",
    )
    .await?;
    for (field, value) in [("username", name), ("password", password)] {
        let at = format!("input[name={field}]");
        wait_for(c, &at, &[]).await?;
        c.find(Locator::Css(&at))
            .await
            .map_err(fail("a login field"))?
            .send_keys(value)
            .await
            .map_err(fail("type into the provider's form"))?;
    }
    click(c, "#auth-submit").await
}

/// Alice logs in to the dashboard through the provider.
async fn browser_journey(cluster: &Cluster, c: &Client) -> Step {
    c.goto(&format!("{}/login", cluster.url))
        .await
        .map_err(fail("goto"))?;
    wait_for(c, "#oidc", &["log in with OpenBao"]).await?;
    click(c, "#oidc").await?;
    provider_login(c, "alice", ALICE_PW).await?;
    // Back on the dashboard: who she is, and her team's pipeline.
    wait_for(c, "#user", &["user oidc:alice"]).await?;
    wait_for(c, "main", &["devs", "p"]).await?;
    let url = c.current_url().await.map_err(fail("url"))?;
    if !url.as_str().starts_with(&cluster.url) {
        return Err(format!("the browser ended at {url}, not the dashboard"));
    }
    Ok(())
}

/// Vic logs the CLI in: `hangar login` prints the page to open; the
/// browser logs in there through the provider and the CLI carries on.
async fn cli_journey(cluster: &Cluster, rc: &Path, c: &Client) -> Step {
    let mut login = hangar()
        .args(["-t", "vic", "login", "-c", &cluster.url, "-n", "devs"])
        .current_dir(cluster.dir.path())
        .env_remove("HANGAR_TOKEN")
        .env_remove("HANGAR_URL")
        .env("HANGAR_RC", rc)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(fail("spawn hangar login"))?;
    let stderr = login.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let page = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("hangar login printed no URL: {said:?}"))?;
        if let Some(url) = line.trim().strip_prefix(&format!("{}/login?", cluster.url)) {
            break format!("{}/login?{url}", cluster.url);
        }
        said.push(line);
    };
    c.goto(&page).await.map_err(fail("goto the CLI's page"))?;
    wait_for(c, "#cli", &["hangar CLI"]).await?;
    click(c, "#oidc").await?;
    provider_login(c, "vic", VIC_PW).await?;
    // The browser lands on the CLI's listener.
    wait_for(c, "body", &["logged in: the hangar CLI carries on"]).await?;
    let status = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = login.try_wait().ok().flatten() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = login.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .map_err(fail("wait"))?;
    let rest: Vec<String> = rx.try_iter().collect();
    match status {
        Some(s) if s.success() => {}
        other => return Err(format!("hangar login ended {other:?}: {rest:?}")),
    }
    if !rest.iter().any(|l| l.contains("as vic (team devs)")) {
        return Err(format!("hangar login said {rest:?}"));
    }
    Ok(())
}

fn web_flags(provider: &OidcProvider, url: &str) -> Vec<String> {
    [
        "--external-url",
        url,
        "--oidc-display-name",
        "OpenBao",
        "--oidc-issuer",
        &provider.issuer,
        "--oidc-client-id",
        &provider.client_id,
        "--oidc-client-secret",
        &provider.client_secret,
        "--oidc-scope",
        "user,groups",
        "--main-team-oidc-group",
        "ci-admins",
    ]
    .map(str::to_string)
    .to_vec()
}

#[test]
fn e2e_oidc_an_owner_logs_in_in_the_browser_and_a_viewer_through_the_cli() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (bao, provider) = rt.block_on(async {
        let bao = Bao::start().await;
        let users = [
            User {
                name: "alice",
                password: ALICE_PW,
                groups: &["devs-owners"],
            },
            User {
                name: "vic",
                password: VIC_PW,
                groups: &[],
            },
        ];
        // The redirect URI is set once web's address is known.
        let provider = bao.oidc_provider("http://127.0.0.1:1/cb", &users).await;
        (bao, provider)
    });
    let cluster = Cluster::start_at(|url| web_flags(&provider, url));
    rt.block_on(bao.post(
        "identity/oidc/client/hangar",
        serde_json::json!({"redirect_uris": [format!("{}/auth/oidc/callback", cluster.url)]}),
    ));
    // The admin makes team devs from a Concourse roles file and sets its
    // pipeline.
    let roles = cluster.dir.path().join("roles.yml");
    std::fs::write(
        &roles,
        "roles:\n- name: owner\n  oidc: {groups: [devs-owners]}\n- name: viewer\n  oidc: {users: [vic]}\n",
    )
    .unwrap();
    let admin_ok = |args: &[&str]| {
        let o = cluster.cli(args);
        assert!(o.status.success(), "{args:?}: {:?}", text(&o));
    };
    admin_ok(&[
        "set-team",
        "-n",
        "devs",
        "-c",
        roles.to_str().unwrap(),
        "--non-interactive",
    ]);
    let config = cluster.dir.path().join("p.yml");
    std::fs::write(&config, CONFIG).unwrap();
    admin_ok(&[
        "set-pipeline",
        "-p",
        "p",
        "-c",
        config.to_str().unwrap(),
        "--team",
        "devs",
        "--non-interactive",
    ]);
    let rc = cluster.dir.path().join("hangarrc");
    let outcome: Step = rt.block_on(async {
        let driver = start_driver().await;
        // A browser each: Vic's knows nothing of Alice's provider login.
        let alice = browser::browser(&driver).await;
        let vic = browser::browser(&driver).await;
        let mut outcome = browser_journey(&cluster, &alice).await;
        let mut failed = &alice;
        if outcome.is_ok() {
            outcome = cli_journey(&cluster, &rc, &vic).await;
            failed = &vic;
        }
        if outcome.is_err() {
            let shot = artifact_dir().join("e2e-oidc-failure.png");
            let _ = std::fs::create_dir_all(artifact_dir());
            if let Ok(png) = failed.screenshot().await {
                let _ = std::fs::write(&shot, png);
            }
            outcome = outcome.map_err(|e| format!("{e} (screenshot: {})", shot.display()));
        }
        let _ = alice.close().await;
        let _ = vic.close().await;
        outcome
    });
    if let Err(e) = outcome {
        let log = std::fs::read_to_string(cluster.dir.path().join("web.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        panic!(
            "{e}\nweb log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    // The CLI's session: Vic of OIDC, a viewer of devs; reads, may not
    // pause; his logout ends the session at web.
    let ok = |args: &[&str]| {
        let o = user(&cluster, &rc, args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {out}\n{err}");
        out
    };
    let info: serde_json::Value =
        serde_json::from_str(&ok(&["-t", "vic", "userinfo", "--json"])).unwrap();
    assert_eq!(info["connector"], "oidc", "{info}");
    assert_eq!(info["user_name"], "vic", "{info}");
    assert_eq!(info["teams"], serde_json::json!({"devs": ["viewer"]}));
    ok(&["-t", "vic", "jobs", "-p", "p"]);
    let o = user(&cluster, &rc, &["-t", "vic", "pause-pipeline", "-p", "p"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("pipeline-operator role on team devs"), "{err}");
    ok(&["-t", "vic", "logout"]);
    let o = user(&cluster, &rc, &["-t", "vic", "userinfo"]);
    assert!(!o.status.success(), "logged out: {:?}", text(&o));
    drop(bao);
}
