//! The pipeline graph and the resource page as a person sees them, on
//! SQLite and PostgreSQL: a node per job and resource with its state and
//! link, an edge per get, passed and put, the group tabs; a resource's
//! versions and its buttons, which act through the API (pin, unpin,
//! enable, disable, check) and need the CSRF token; and the HTML 404 or
//! login page for a resource nobody may see here.

use crate::common::TestWeb;
use crate::dashboard::Browser;
use hangar_core::build::BuildStatus;
use hangar_store::{Store, VersionPage};
use hangar_testkit::on_both_databases;
use reqwest::header::LOCATION;
use reqwest::StatusCode;
use serde_json::json;

/// `repo` → `unit` → `integration` → `ship`, which puts `release`.
pub(crate) const THREE_JOBS: &str = "
resources:
- name: repo
  type: mock
  source: {}
- name: release
  type: mock
  source: {bucket: releases}
  check_every: never
jobs:
- name: unit
  plan:
  - get: repo
    trigger: true
- name: integration
  plan:
  - get: repo
    trigger: true
    passed: [unit]
- name: ship
  plan:
  - get: repo
    passed: [integration]
  - put: release
";

const GROUPS: &str = "
groups:
- name: build
  jobs: [unit, integration]
- name: '<b>ship & co'
  jobs: [ship]
resources:
- {name: repo, type: mock, source: {}}
- {name: release, type: mock, source: {}}
jobs:
- name: unit
  plan: [{get: repo}]
- name: integration
  plan: [{get: repo, passed: [unit]}]
- name: ship
  plan: [{get: repo, passed: [integration]}, {put: release}]
";

/// The element of `html` (`<a …>…</a>` or `<path …>…</path>`) whose
/// opening tag holds `marker`; fails the test if there is not exactly one.
fn element<'a>(html: &'a str, tag: &str, marker: &str) -> &'a str {
    let found: Vec<usize> = html.match_indices(marker).map(|(i, _)| i).collect();
    assert_eq!(
        found.len(),
        1,
        "{marker} found {} times: {html}",
        found.len()
    );
    let open = html[..found[0]]
        .rfind(&format!("<{tag} "))
        .expect("its tag");
    let close = html[open..].find(&format!("</{tag}>")).expect("its end") + open;
    &html[open..close]
}

async fn set(t: &TestWeb, name: &str, config: &str) {
    t.admin
        .set_pipeline("main", name, config, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", name, false).await.unwrap();
}

/// A check of `resource` that finds `versions`, or fails with `error`.
pub(crate) async fn check(
    store: &Store,
    resource: &str,
    versions: &[serde_json::Value],
    error: Option<&str>,
) {
    let scope = store
        .resource("main", "p", resource)
        .await
        .unwrap()
        .scope_id
        .unwrap();
    store.request_check(scope, None, 10).await.unwrap();
    assert_eq!(
        store.claim_due_checks("test", 11, 10).await.unwrap().len(),
        1
    );
    store
        .finish_check(scope, "test", versions, error, 12)
        .await
        .unwrap();
}

/// Integration's build #1 failed and unit's #1 runs, as the scheduler and
/// the engine leave them.
pub(crate) async fn integration_failed_unit_running(t: &TestWeb) {
    let store = t.web.store();
    let integration = t
        .admin
        .trigger_job("main", "p", "integration")
        .await
        .unwrap();
    let unit = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    // As the scheduler would once their inputs are fixed.
    store
        .release_held_builds(&[integration.id, unit.id])
        .await
        .unwrap();
    let claimed = store.claim_build("test", 1, 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, integration.id);
    store
        .finish_build(
            claimed.id,
            claimed.lease_token,
            BuildStatus::Failed,
            Some(1),
            None,
            2,
        )
        .await
        .unwrap();
    let claimed = store.claim_build("test", 3, 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, unit.id);
}

async fn the_graph_shows_each_job_resource_and_edge_with_its_state(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p", THREE_JOBS).await;
    let store = t.web.store().clone();
    check(
        &store,
        "repo",
        &[json!({"ref": "a"}), json!({"ref": "b"})],
        None,
    )
    .await;
    check(
        &store,
        "release",
        &[],
        Some("exit 1: <script>boom</script>"),
    )
    .await;
    t.admin
        .pin_resource(
            "main",
            "p",
            "repo",
            json!({"ref": "a"}).as_object().unwrap().clone(),
            None,
        )
        .await
        .unwrap();
    // integration failed (#1); unit is running (#1); ship is paused.
    integration_failed_unit_running(&t).await;
    t.admin.pause_job("main", "p", "ship", true).await.unwrap();

    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/teams/main/pipelines/p").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    assert_eq!(svg.matches("data-node=\"job:").count(), 3, "{svg}");
    assert_eq!(svg.matches("data-node=\"resource:").count(), 2, "{svg}");
    assert_eq!(svg.matches("<path class=\"edge").count(), 4, "{svg}");
    for (job, class, words) in [
        ("unit", "node job started running", "running #1"),
        ("integration", "node job failed", "failed #1"),
        ("ship", "node job none paused", "paused · no builds"),
    ] {
        let node = element(svg, "a", &format!("data-node=\"job:{job}\""));
        assert!(node.contains(&format!("class=\"{class}\"")), "{node}");
        assert!(
            node.contains(&format!("href=\"/teams/main/pipelines/p/jobs/{job}\"")),
            "{node}"
        );
        assert!(node.contains(&format!(">{job}</text>")), "{node}");
        assert!(node.contains(words), "{node}");
    }
    let repo = element(svg, "a", "data-node=\"resource:repo\"");
    assert!(repo.contains("class=\"node resource pinned\""), "{repo}");
    assert!(repo.contains("href=\"/teams/main/pipelines/p/resources/repo\""));
    assert!(
        repo.contains("pinned to {\"ref\":\"a\"}")
            || repo.contains("pinned to {&quot;ref&quot;:&quot;a&quot;}"),
        "{repo}"
    );
    let release = element(svg, "a", "data-node=\"resource:release\"");
    assert!(
        release.contains("class=\"node resource check-failed checks-off\""),
        "{release}"
    );
    assert!(
        release.contains("check failed: exit 1: &lt;script&gt;boom&lt;/script&gt;"),
        "the error in the node's title, as text: {release}"
    );
    for (from, to, class) in [
        ("resource:repo", "job:unit", "edge get"),
        ("job:unit", "job:integration", "edge passed"),
        ("job:integration", "job:ship", "edge passed untriggered"),
        ("job:ship", "resource:release", "edge put"),
    ] {
        let edge = element(
            svg,
            "path",
            &format!("data-from=\"{from}\" data-to=\"{to}\""),
        );
        assert!(edge.contains(&format!("class=\"{class}\"")), "{edge}");
        assert!(edge.contains("data-resources=\""), "{edge}");
        assert!(edge.contains("marker-end=\"url(#arrow)\""), "{edge}");
    }
    assert!(!html.contains("<script>boom"), "{html}");
    // The resources below the graph link to their pages.
    assert!(html.contains("<a href=\"/teams/main/pipelines/p/resources/release\">release</a>"));
    // No groups, no tabs.
    assert!(!html.contains("nav class=\"tabs\""), "{html}");
    t.stop().await;
}

async fn groups_are_tabs_each_showing_its_jobs(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p", GROUPS).await;
    let b = Browser::logged_in(&t).await;
    let (status, first) = b.get("/teams/main/pipelines/p").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let tabs = element(&first, "nav", "aria-label=\"groups\"");
    assert!(
        tabs.contains(
            "<a href=\"/teams/main/pipelines/p?group=build\" aria-current=\"page\">build</a>"
        ),
        "the first group is shown: {tabs}"
    );
    // A hostile group name: escaped as text, encoded in its link.
    assert!(
        tabs.contains(
            "<a href=\"/teams/main/pipelines/p?group=%3Cb%3Eship%20%26%20co\">&lt;b&gt;ship &amp; co</a>"
        ),
        "{tabs}"
    );
    for (path, shown, hidden) in [
        (
            "",
            vec!["job:unit", "job:integration", "resource:repo"],
            vec!["job:ship", "resource:release"],
        ),
        (
            "?group=build",
            vec!["job:unit", "job:integration"],
            vec!["job:ship"],
        ),
        (
            "?group=%3Cb%3Eship%20%26%20co",
            vec!["job:ship", "resource:repo", "resource:release"],
            vec!["job:unit", "job:integration"],
        ),
    ] {
        let (status, html) = b.get(&format!("/teams/main/pipelines/p{path}")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        for node in shown {
            assert!(
                html.contains(&format!("data-node=\"{node}\"")),
                "{path} lacks {node}"
            );
        }
        for node in hidden {
            assert!(
                !html.contains(&format!("data-node=\"{node}\"")),
                "{path} shows {node}"
            );
        }
    }
    // Its upstream job in another group, ship's get is drawn from repo.
    let (_, ship) = b
        .get("/teams/main/pipelines/p?group=%3Cb%3Eship%20%26%20co")
        .await;
    assert!(ship.contains("data-from=\"resource:repo\" data-to=\"job:ship\""));
    let (status, html) = b.get("/teams/main/pipelines/p?group=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("has no group"),
        "{html}"
    );
    t.stop().await;
}

async fn the_resource_page_lists_versions_and_its_buttons_act(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p", THREE_JOBS).await;
    let store = t.web.store().clone();
    check(
        &store,
        "repo",
        &[json!({"ref": "a"}), json!({"ref": "b"})],
        None,
    )
    .await;
    // What the check printed, as text.
    let scope = store
        .resource("main", "p", "repo")
        .await
        .unwrap()
        .scope_id
        .unwrap();
    store
        .set_check_output(scope, "fetched 2 refs <b>from</b> origin")
        .await
        .unwrap();
    let b = Browser::logged_in(&t).await;
    let page = "/teams/main/pipelines/p/resources/repo";
    let (status, html) = b.get(page).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains(
            "<pre class=\"check-output\">fetched 2 refs &lt;b&gt;from&lt;/b&gt; origin</pre>"
        ),
        "{html}"
    );
    // Newest first, each with its buttons.
    let newest = html
        .find("<code>{&quot;ref&quot;:&quot;b&quot;}</code>")
        .expect("version b");
    let oldest = html
        .find("<code>{&quot;ref&quot;:&quot;a&quot;}</code>")
        .expect("version a");
    assert!(newest < oldest, "{html}");
    for want in [
        "not pinned",
        "action=\"/teams/main/pipelines/p/resources/repo/check\"",
        "action=\"/teams/main/pipelines/p/resources/repo/pin\"",
        "action=\"/teams/main/pipelines/p/resources/repo/disable\"",
        ">check now</button>",
        "last check finished",
    ] {
        assert!(html.contains(want), "lacks {want}: {html}");
    }
    assert!(!html.contains("/unpin\""), "nothing to unpin yet: {html}");

    // Pin b with a comment, as the page's form sends it.
    let pin = format!("{page}/pin");
    let r = b
        .post_form(&pin, &[("csrf", "wrong"), ("version", "{\"ref\":\"b\"}")])
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        t.admin.resource_pin("main", "p", "repo").await.unwrap(),
        None
    );
    let csrf = b.csrf().await;
    let r = b
        .post_form(
            &pin,
            &[
                ("csrf", &csrf),
                ("version", "{\"ref\":\"b\"}"),
                ("comment", "hotfix <b>now</b>"),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], page);
    let pinned = t
        .admin
        .resource_pin("main", "p", "repo")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pinned.version, json!({"ref": "b"}));
    assert_eq!(pinned.comment.as_deref(), Some("hotfix <b>now</b>"));
    let (_, html) = b.get(page).await;
    assert!(
        html.contains("pinned to <code>{&quot;ref&quot;:&quot;b&quot;}</code>"),
        "{html}"
    );
    assert!(html.contains("“hotfix &lt;b&gt;now&lt;/b&gt;”"), "{html}");
    assert!(
        html.contains("class=\"pinned\" data-version=\"{&quot;ref&quot;:&quot;b&quot;}\""),
        "{html}"
    );
    assert!(html.contains("/unpin\""), "{html}");
    // The pipeline page shows the pin on the node.
    let (_, graph) = b.get("/teams/main/pipelines/p").await;
    assert!(graph.contains("class=\"node resource pinned\""), "{graph}");

    // Disable a, then enable it again.
    let versions = |store: Store| async move {
        store
            .resource_versions(
                "main",
                "p",
                "repo",
                VersionPage {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .into_iter()
            .map(|v| (v.version, v.enabled))
            .collect::<Vec<_>>()
    };
    let r = b
        .post_form(
            &format!("{page}/disable"),
            &[("csrf", &csrf), ("version", "{\"ref\":\"a\"}")],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        versions(store.clone()).await,
        [
            ("{\"ref\":\"b\"}".to_string(), true),
            ("{\"ref\":\"a\"}".to_string(), false)
        ]
    );
    let (_, html) = b.get(page).await;
    assert!(html.contains("<strong>disabled</strong>"), "{html}");
    assert!(
        html.contains(&format!("action=\"{page}/enable\"")),
        "{html}"
    );
    let r = b
        .post_form(
            &format!("{page}/enable"),
            &[("csrf", &csrf), ("version", "{\"ref\":\"a\"}")],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(versions(store.clone())
        .await
        .iter()
        .all(|(_, enabled)| *enabled));

    // Unpin; check now.
    let r = b
        .post_form(&format!("{page}/unpin"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        t.admin.resource_pin("main", "p", "repo").await.unwrap(),
        None
    );
    let scope = store
        .resource("main", "p", "repo")
        .await
        .unwrap()
        .scope_id
        .unwrap();
    assert_eq!(store.check_status(scope).await.unwrap().requested_at, None);
    let r = b
        .post_form(&format!("{page}/check"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(store
        .check_status(scope)
        .await
        .unwrap()
        .requested_at
        .is_some());
    let (_, html) = b.get(page).await;
    assert!(html.contains("a check is asked for"), "{html}");

    // A version the resource does not have: the API's refusal, as a page.
    let r = b
        .post_form(&pin, &[("csrf", &csrf), ("version", "{\"ref\":\"zzz\"}")])
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let text = r.text().await.unwrap();
    assert!(
        text.starts_with("<!DOCTYPE html>") && text.contains("no version matching"),
        "{text}"
    );
    let r = b
        .post_form(&pin, &[("csrf", &csrf), ("version", "not json")])
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = b
        .post_form(&format!("{page}/frobnicate"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    t.stop().await;
}

/// A long check error wraps inside the page; the page says it failed.
async fn a_failing_check_shows_its_whole_error_on_the_resource_page(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p", THREE_JOBS).await;
    let long = format!("exit 1: {}<script>alert(1)</script>", "x".repeat(3000));
    check(t.web.store(), "release", &[], Some(&long)).await;
    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/teams/main/pipelines/p/resources/release").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains(&format!(
            "<pre class=\"check-error\">check failed: exit 1: {}&lt;script&gt;",
            "x".repeat(3000)
        )),
        "{html}"
    );
    assert!(
        html.contains("pre.check-error{white-space:pre-wrap;overflow-wrap:anywhere"),
        "{html}"
    );
    assert!(
        html.contains("periodic checks off (check_every: never)"),
        "{html}"
    );
    assert!(html.contains("no versions yet"), "{html}");
    // The pipeline page shows its start, and the way to the whole.
    let (_, html) = b.get("/teams/main/pipelines/p").await;
    assert!(html.contains("check failed: exit 1: xxx"), "{html}");
    assert!(!html.contains(&"x".repeat(1000)), "{html}");
    assert!(
        html.contains("<a href=\"/teams/main/pipelines/p/resources/release\">the whole error</a>"),
        "{html}"
    );
    t.stop().await;
}

/// What may not be seen here answers as a page: 404 for a resource or
/// pipeline the viewer cannot see, the login page for a stranger.
async fn a_resource_nobody_may_see_is_a_page_not_json(store: Store) {
    const PASSWORD: &str = "a-password-of-vic";
    let t = TestWeb::start_with(store, |c| {
        c.auth.local_users = vec![crate::common::local_user("vic", PASSWORD)];
    })
    .await;
    set(&t, "p", THREE_JOBS).await;
    let admin = Browser::logged_in(&t).await;
    for (path, want) in [
        (
            "/teams/main/pipelines/p/resources/nope",
            StatusCode::NOT_FOUND,
        ),
        (
            "/teams/main/pipelines/p/resources/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            StatusCode::NOT_FOUND,
        ),
        (
            "/teams/main/pipelines/nope/resources/repo",
            StatusCode::NOT_FOUND,
        ),
        (
            "/teams/main/pipelines/p/resources/repo?before=x",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, html) = admin.get(path).await;
        assert_eq!(status, want, "{path}: {html}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}: {html}");
        assert!(!html.contains("<script>alert"), "{path}: {html}");
    }
    // A stranger: the login page, for a resource that exists or not.
    let anonymous = Browser::new(&t);
    for path in [
        "/teams/main/pipelines/p/resources/repo",
        "/teams/main/pipelines/p/resources/nope",
    ] {
        let (status, html) = anonymous.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(
            html.starts_with("<!DOCTYPE html>") && html.contains("href=\"/login\""),
            "{html}"
        );
    }
    // Vic, a viewer of team a only: main's resource is not found.
    t.raw
        .put(format!("{}/api/v1/teams/a", t.url))
        .bearer_auth(crate::common::ADMIN)
        .json(&json!({"auth": {"viewer": {"users": ["local:vic"]}}}))
        .send()
        .await
        .unwrap();
    let r = anonymous
        .post_form("/login", &[("username", "vic"), ("password", PASSWORD)])
        .await;
    let cookie = r.headers()[reqwest::header::SET_COOKIE].to_str().unwrap();
    let vic = Browser {
        cookie: Some(cookie.split(';').next().unwrap().to_string()),
        ..Browser::new(&t)
    };
    let (status, html) = vic.get("/teams/main/pipelines/p/resources/repo").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{html}");
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    // A viewer of team a sees a's resource, without buttons, and the
    // API refuses a viewer's pin.
    t.admin
        .set_pipeline("a", "q", THREE_JOBS, None)
        .await
        .unwrap();
    let (status, html) = vic.get("/teams/a/pipelines/q/resources/repo").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let r = vic.act("/teams/a/pipelines/q/resources/repo/unpin").await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    t.stop().await;
}

/// Names a config accepts that are markup, or too long for a node: text
/// everywhere, cut with an ellipsis in the node, whole in its title.
async fn hostile_and_long_names_render_as_text(store: Store) {
    let t = TestWeb::start(store).await;
    let resource = "<img src=x onerror=alert(1)>#?r";
    let job = format!("j{}", "o".repeat(120));
    let config = format!(
        "resources:\n- name: '{resource}'\n  type: mock\n  source: {{}}\njobs:\n- name: {job}\n  plan:\n  - get: '{resource}'\n"
    );
    set(&t, "p", &config).await;
    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/teams/main/pipelines/p").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(!html.contains("<img"), "{html}");
    let encoded = "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%23%3Fr";
    let node = element(
        &html,
        "a",
        "data-node=\"resource:&lt;img src=x onerror=alert(1)&gt;#?r\"",
    );
    assert!(
        node.contains(&format!(
            "href=\"/teams/main/pipelines/p/resources/{encoded}\""
        )),
        "{node}"
    );
    let node = element(&html, "a", &format!("data-node=\"job:{job}\""));
    let shown = format!(">j{}…</text>", "o".repeat(20));
    assert!(node.contains(&shown), "cut to fit: {node}");
    assert!(
        node.contains(&format!("<title>job {job}: no builds</title>")),
        "whole in the title: {node}"
    );
    let (status, html) = b
        .get(&format!("/teams/main/pipelines/p/resources/{encoded}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;#?r"),
        "{html}"
    );
    t.stop().await;
}

/// As Concourse draws a job: filled by the build that last ended, marked
/// running while any of its builds runs, a newer one pending or not; the
/// pipelines page says the same.
async fn a_job_is_drawn_by_its_last_ended_build_and_marked_while_any_runs(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p", THREE_JOBS).await;
    // integration #1 failed, unit #1 running.
    integration_failed_unit_running(&t).await;
    let store = t.web.store().clone();
    // integration #2 runs; unit #2 waits behind unit #1.
    let second = t
        .admin
        .trigger_job("main", "p", "integration")
        .await
        .unwrap();
    let unit_second = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    store.release_held_builds(&[second.id]).await.unwrap();
    let claimed = store.claim_build("test", 4, 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, second.id);
    let pending = t.admin.build(unit_second.id).await.unwrap();
    assert_eq!(pending.status, BuildStatus::Pending);

    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/teams/main/pipelines/p").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    for (job, class, words) in [
        (
            "integration",
            "node job failed running",
            "failed #1 · running #2",
        ),
        ("unit", "node job started running", "running #1"),
    ] {
        let node = element(svg, "a", &format!("data-node=\"job:{job}\""));
        assert!(node.contains(&format!("class=\"{class}\"")), "{node}");
        assert!(node.contains(words), "{node}");
    }
    let (status, html) = b.get("/").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let integration = &html[html.find(">integration</a>").unwrap()..];
    let row = &integration[..integration.find("</tr>").unwrap()];
    assert!(
        row.contains("/jobs/integration/builds/1") && row.contains("/jobs/integration/builds/2"),
        "the failed build and the running one: {row}"
    );
    assert!(
        row.find("failed").unwrap() < row.find("started").unwrap(),
        "{row}"
    );
    t.stop().await;
}

on_both_databases!(
    a_job_is_drawn_by_its_last_ended_build_and_marked_while_any_runs,
    the_graph_shows_each_job_resource_and_edge_with_its_state,
    groups_are_tabs_each_showing_its_jobs,
    the_resource_page_lists_versions_and_its_buttons_act,
    a_failing_check_shows_its_whole_error_on_the_resource_page,
    a_resource_nobody_may_see_is_a_page_not_json,
    hostile_and_long_names_render_as_text,
);
