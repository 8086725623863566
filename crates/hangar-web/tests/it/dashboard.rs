//! The dashboard's pages as HTML, on SQLite and PostgreSQL: every page
//! renders, a login is needed for anything but exposed pipelines, actions
//! need the session cookie and the page's CSRF token (and change nothing
//! without them), hostile text is shown as text, and the build log
//! streams as server-sent events to the build's end.

use crate::common::{TestWeb, ADMIN};
use hangar_core::build::{BuildEventKind, StepKind, StepState};
use hangar_store::{StepRecord, Store};
use hangar_testkit::on_both_databases;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Response, StatusCode};

const CONFIG: &str = "
resources:
- name: repo
  type: mock
  source: {}
jobs:
- name: unit
  public: true
  plan:
  - get: repo
- name: deploy
  plan:
  - get: repo
    passed: [unit]
";

const HOSTILE: &str = "<script>alert('owned')</script>";

/// A browser-like client: no redirects followed, the cookie sent by hand.
pub(crate) struct Browser {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) cookie: Option<String>,
}

impl Browser {
    pub(crate) fn new(t: &TestWeb) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            url: t.url.clone(),
            cookie: None,
        }
    }

    pub(crate) async fn logged_in(t: &TestWeb) -> Browser {
        let mut b = Browser::new(t);
        let r = b.post_form("/login", &[("token", ADMIN)]).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
        b.cookie = Some(set.split(';').next().unwrap().to_string());
        b
    }

    pub(crate) fn with_cookie(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.cookie {
            Some(c) => rb.header(COOKIE, c),
            None => rb,
        }
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, String) {
        let r = self
            .with_cookie(self.http.get(format!("{}{path}", self.url)))
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.text().await.unwrap())
    }

    pub(crate) async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.with_cookie(self.http.post(format!("{}{path}", self.url)))
            .form(form)
            .send()
            .await
            .unwrap()
    }

    /// The CSRF token a page rendered for this browser carries.
    pub(crate) async fn csrf(&self) -> String {
        let (_, html) = self.get("/").await;
        let at = html.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
        html[at..at + 64].to_string()
    }

    /// An action as the page's button sends it.
    pub(crate) async fn act(&self, path: &str) -> Response {
        let csrf = self.csrf().await;
        self.post_form(path, &[("csrf", &csrf)]).await
    }
}

async fn set(t: &TestWeb, name: &str) {
    t.admin
        .set_pipeline("main", name, CONFIG, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", name, false).await.unwrap();
}

async fn build_count(t: &TestWeb) -> usize {
    t.admin.builds(100).await.unwrap().len()
}

async fn login_sets_a_strict_http_only_cookie(store: Store) {
    let t = TestWeb::start(store).await;
    let anonymous = Browser::new(&t);
    for token in ["", "wrong-token-0123456789", &format!("{ADMIN}x")] {
        let r = anonymous.post_form("/login", &[("token", token)]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        assert!(r.headers().get(SET_COOKIE).is_none());
    }
    // A body that is not a form at all.
    let r = anonymous
        .http
        .post(format!("{}/login", t.url))
        .body("\u{0}garbage")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = anonymous.post_form("/login", &[("token", ADMIN)]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains(ADMIN),
        "the cookie holds a session's token, not the admin token"
    );
    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/workers").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    // A made-up cookie is no login.
    let forged = Browser {
        cookie: Some("hangar_session=00".into()),
        ..Browser::new(&t)
    };
    assert_eq!(forged.get("/workers").await.0, StatusCode::UNAUTHORIZED);
    t.stop().await;
}

async fn only_exposed_pipelines_are_readable_without_login(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "private").await;
    set(&t, "open").await;
    let admin = Browser::logged_in(&t).await;
    let r = admin.act("/teams/main/pipelines/open/expose").await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let anonymous = Browser::new(&t);
    let (status, html) = anonymous.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("/teams/main/pipelines/open"), "{html}");
    assert!(!html.contains("private"), "{html}");
    for path in [
        "/teams/main/pipelines/private",
        "/teams/main/pipelines/private/jobs/unit",
        "/teams/main/pipelines/private/jobs/unit/builds/1",
        // An unknown pipeline answers as a private one: names do not leak.
        "/teams/main/pipelines/nope",
        "/workers",
        "/workers/w1",
        "/builds",
    ] {
        let (status, html) = anonymous.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {html}");
    }
    assert_eq!(
        anonymous.get("/teams/main/pipelines/open").await.0,
        StatusCode::OK
    );
    assert_eq!(
        admin.get("/teams/main/pipelines/nope").await.0,
        StatusCode::NOT_FOUND
    );
    // A path that names no page is a page too (the API's 404 stays JSON).
    let (status, html) = admin.get("/no/such/page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("no such page"),
        "{html}"
    );
    let (status, body) = admin.get("/api/v1/no-such-route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("\"error\""), "{body}");
    // A job build of an exposed pipeline: readable when its job is public.
    t.admin.trigger_job("main", "open", "unit").await.unwrap();
    t.admin.trigger_job("main", "open", "deploy").await.unwrap();
    let (status, html) = anonymous
        .get("/teams/main/pipelines/open/jobs/unit/builds/1")
        .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let (status, _) = anonymous
        .get("/teams/main/pipelines/open/jobs/deploy/builds/1")
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Hidden again: gone for anonymous visitors.
    admin.act("/teams/main/pipelines/open/hide").await;
    assert_eq!(
        anonymous.get("/teams/main/pipelines/open").await.0,
        StatusCode::UNAUTHORIZED
    );
    t.stop().await;
}

async fn actions_need_the_cookie_and_the_csrf_token(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let trigger = "/teams/main/pipelines/p/jobs/unit/trigger";
    let anonymous = Browser::new(&t);
    let r = anonymous.post_form(trigger, &[("csrf", "x")]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let admin = Browser::logged_in(&t).await;
    let csrf = admin.csrf().await;
    for form in [
        vec![],
        vec![("csrf", "")],
        vec![("csrf", "0".repeat(64).as_str())],
    ] {
        let r = admin.post_form(trigger, &form).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{form:?}");
        let text = r.text().await.unwrap();
        assert!(text.contains("CSRF"), "{text}");
    }
    // The right token from another browser without the cookie.
    let r = anonymous.post_form(trigger, &[("csrf", &csrf)]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(build_count(&t).await, 0, "refused actions changed nothing");
    let r = admin.post_form(trigger, &[("csrf", &csrf)]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/teams/main/pipelines/p/jobs/unit");
    assert_eq!(build_count(&t).await, 1);
    // Pause the job: the API's own rule then refuses a trigger, shown as a page.
    let r = admin.act("/teams/main/pipelines/p/jobs/unit/pause").await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(t.admin.job("main", "p", "unit").await.unwrap().paused);
    let r = admin.act(trigger).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let page = r.text().await.unwrap();
    // The API's message alone, not its JSON (escaped or not) in the page.
    assert!(page.contains("is paused"), "{page}");
    assert!(
        !page.contains("&quot;error&quot;") && !page.contains("{\"error\""),
        "{page}"
    );
    assert_eq!(build_count(&t).await, 1);
    let r = admin
        .act("/teams/main/pipelines/p/jobs/unit/frobnicate")
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Abort the pending build.
    let id = t.admin.builds(1).await.unwrap()[0].id;
    let r = admin.act(&format!("/builds/{id}/abort")).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, html) = admin.get(&format!("/builds/{id}")).await;
    assert!(html.contains("aborted"), "{html}");
    // Pausing the pipeline.
    let r = admin.act("/teams/main/pipelines/p/pause").await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, html) = admin.get("/").await;
    assert!(html.contains("paused"), "{html}");
    t.stop().await;
}

async fn every_page_renders_and_hostile_text_stays_text(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let generation = t.register("w1", "disk-1").await;
    // Its condition, as a person reads it on the fleet page.
    t.as_worker("w1")
        .heartbeat(
            "w1",
            &hangar_api::Heartbeat {
                generation,
                containers: 0,
                volumes: 0,
                condition: Some(hangar_api::WorkerCondition {
                    pressure: hangar_api::Pressure::Soft,
                    pressure_reason: Some("disk 91% used".into()),
                    healthy: true,
                    unhealthy_reason: None,
                    memory_used: 1 << 30,
                    memory_limit: 4 << 30,
                    memory_reserved: 512 << 20,
                    disk_used: 91,
                    disk_total: 100,
                }),
            },
        )
        .await
        .unwrap();
    let build = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    let store = t.web.store();
    store
        .append_build_event(
            build.id,
            Some("0"),
            BuildEventKind::Log,
            &format!("{HOSTILE}\n"),
            1,
        )
        .await
        .unwrap();
    store
        .append_build_event(
            build.id,
            Some("0"),
            BuildEventKind::Infra,
            "worker w9 was lost (stalled); retrying get repo (attempt 2 of 3)",
            2,
        )
        .await
        .unwrap();
    // The step went on to another worker after the loss.
    store
        .save_step(&StepRecord {
            build_id: build.id,
            step_id: "0".into(),
            name: "repo".into(),
            kind: StepKind::Get,
            state: StepState::Running,
            attempt: 2,
            worker: Some("w1".into()),
            container: None,
            log_offset: 0,
            exit_code: None,
            outputs: "{}".into(),
            error: None,
            started_at: Some(3),
            finished_at: None,
            version: None,
        })
        .await
        .unwrap();
    let b = Browser::logged_in(&t).await;
    let pages = [
        ("/", vec!["unit", "deploy", "pending"]),
        (
            "/workers",
            vec![
                "w1",
                "running",
                "pressure soft (disk 91% used) mem 1 GiB/4 GiB (512 MiB promised) disk 91%",
            ],
        ),
        ("/builds", vec!["p/unit #1", "pending"]),
        (
            "/workers/w1",
            vec!["lifecycle events", "registered", "generation"],
        ),
        (
            "/teams/main/pipelines/p",
            vec![
                "data-node=\"job:unit\"",
                "data-from=\"job:unit\" data-to=\"job:deploy\"",
                "mock",
            ],
        ),
        (
            "/teams/main/pipelines/p/jobs/unit",
            vec!["#1", "trigger build"],
        ),
        (
            "/teams/main/pipelines/p/jobs/unit/builds/1",
            vec![
                "p/unit #1",
                "infrastructure",
                "worker w9 was lost",
                "now attempt 2 on <a href=\"/workers/w1\">w1</a> (running)",
            ],
        ),
        (
            &format!("/builds/{}", build.id),
            vec!["p/unit #1", "EventSource"],
        ),
    ];
    for (path, wants) in &pages {
        let (status, html) = b.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}");
        for want in wants {
            assert!(html.contains(want), "{path} lacks {want:?}: {html}");
        }
        assert!(!html.contains("<script>alert"), "{path}: {html}");
    }
    let (_, html) = b.get("/teams/main/pipelines/p/jobs/unit/builds/1").await;
    assert!(
        html.contains("&lt;script&gt;alert('owned')&lt;/script&gt;"),
        "{html}"
    );
    // The graph puts deploy (passed unit) in the column after unit.
    let (_, html) = b.get("/teams/main/pipelines/p").await;
    assert!(html.find("jobs/unit").unwrap() < html.find("jobs/deploy").unwrap());
    assert!(html.contains("not checked yet"), "{html}");
    // A failing check shows on its resource, its output as text.
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let scope = repo.scope_id.unwrap();
    store.request_check(scope, None, 10).await.unwrap();
    let claimed = store.claim_due_checks("test", 11, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    store
        .finish_check(scope, "test", &[], Some(&format!("exit 1: {HOSTILE}")), 12)
        .await
        .unwrap();
    let (_, html) = b.get("/teams/main/pipelines/p").await;
    assert!(
        html.contains("check failed: exit 1: &lt;script&gt;"),
        "{html}"
    );
    assert!(!html.contains(HOSTILE), "{html}");
    // A hostile name in the path comes back escaped in the error page.
    let (status, html) = b
        .get("/teams/main/pipelines/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!html.contains("<script>alert"), "{html}");
    for (path, want) in [
        ("/builds/999999", StatusCode::NOT_FOUND),
        ("/builds/not-a-number", StatusCode::BAD_REQUEST),
        ("/workers/nobody", StatusCode::NOT_FOUND),
        ("/teams/main/pipelines/p/jobs/nope", StatusCode::NOT_FOUND),
        (
            "/teams/main/pipelines/p/jobs/unit/builds/7",
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(b.get(path).await.0, want, "{path}");
    }
    t.stop().await;
}

/// Names a config accepts (with a warning) that are markup, or that would
/// break a link's path: shown as text, linked percent-encoded.
async fn hostile_names_are_text_and_their_links_work(store: Store) {
    let t = TestWeb::start(store).await;
    let job = "<img src=x onerror=alert(1)>#?x";
    let config = format!(
        "resources:\n- name: repo\n  type: mock\n  source: {{}}\njobs:\n- name: '{job}'\n  plan:\n  - get: repo\n"
    );
    t.admin
        .set_pipeline("main", "p", &config, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    t.admin.trigger_job("main", "p", job).await.unwrap();
    let b = Browser::logged_in(&t).await;
    let encoded = "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%23%3Fx";
    let job_path = format!("/teams/main/pipelines/p/jobs/{encoded}");
    for path in [
        "/".to_string(),
        "/teams/main/pipelines/p".into(),
        job_path.clone(),
        format!("{job_path}/builds/1"),
    ] {
        let (status, html) = b.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        assert!(!html.contains("<img"), "{path}: {html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;#?x"),
            "{path}: {html}"
        );
    }
    let (_, html) = b.get("/teams/main/pipelines/p").await;
    assert!(html.contains(&format!("href=\"{job_path}\"")), "{html}");
    // Its actions go through: the job pauses.
    let r = b.act(&format!("{job_path}/pause")).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(t.admin.job("main", "p", job).await.unwrap().paused);
    t.stop().await;
}

async fn instances_show_their_vars_and_their_pages_work(store: Store) {
    let t = TestWeb::start(store).await;
    for reference in ["p/branch:main", "p/branch:dev"] {
        set(&t, reference).await;
    }
    t.admin
        .pause_pipeline("main", "p/branch:main", true)
        .await
        .unwrap();
    let b = Browser::logged_in(&t).await;
    let (status, home) = b.get("/").await;
    assert_eq!(status, StatusCode::OK, "{home}");
    // Two cards of the one name, each with its vars, each linking to its
    // own instance's page.
    for (vars, encoded) in [
        ("branch:main", "p%2Fbranch%3Amain"),
        ("branch:dev", "p%2Fbranch%3Adev"),
    ] {
        assert!(
            home.contains(&format!("title=\"instance vars\">{vars}</span>")),
            "{vars}: {home}"
        );
        let page = format!("/teams/main/pipelines/{encoded}");
        assert!(home.contains(&format!("href=\"{page}\"")), "{page}: {home}");
        let (status, html) = b.get(&page).await;
        assert_eq!(status, StatusCode::OK, "{page}: {html}");
        assert!(html.contains("unit") && html.contains("deploy"), "{html}");
    }
    let (_, dev) = b.get("/teams/main/pipelines/p%2Fbranch%3Adev").await;
    let (_, main) = b.get("/teams/main/pipelines/p%2Fbranch%3Amain").await;
    assert!(
        main.contains("paused") && !dev.contains(">paused<"),
        "{main}\n{dev}"
    );
    // An action on one instance's page changes that instance only.
    let r = b
        .act("/teams/main/pipelines/p%2Fbranch%3Adev/jobs/unit/pause")
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        t.admin
            .job("main", "p/branch:dev", "unit")
            .await
            .unwrap()
            .paused
    );
    assert!(
        !t.admin
            .job("main", "p/branch:main", "unit")
            .await
            .unwrap()
            .paused
    );
    let (status, _) = b.get("/teams/main/pipelines/p%2Fbranch%3Anope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    t.stop().await;
}

async fn the_log_streams_as_server_sent_events_to_the_end(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let build = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    let store = t.web.store().clone();
    for i in 0..2500 {
        store
            .append_build_event(
                build.id,
                Some("0"),
                BuildEventKind::Log,
                &format!("line {i}\n"),
                1,
            )
            .await
            .unwrap();
    }
    let b = Browser::logged_in(&t).await;
    let r = b
        .with_cookie(
            b.http
                .get(format!("{}/builds/{}/log?after=0", t.url, build.id)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    // The build ends while the stream is open: the stream says so and stops.
    let id = build.id;
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        store.request_build_abort(id, 2).await.unwrap();
    });
    let body = tokio::time::timeout(std::time::Duration::from_secs(20), r.text())
        .await
        .expect("the stream ends with the build")
        .unwrap();
    for i in [0, 999, 1000, 2499] {
        assert!(body.contains(&format!("line {i}\\n")), "line {i} missing");
    }
    assert!(
        body.contains("event: end\ndata: aborted"),
        "{}",
        &body[body.len() - 200..]
    );
    // Resuming after the last event sends only the end.
    let (status, rest) = b
        .get(&format!("/builds/{}/log?after=999999", build.id))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!rest.contains("line "), "{rest}");
    assert!(rest.contains("event: end"));
    let anonymous = Browser::new(&t);
    assert_eq!(
        anonymous.get(&format!("/builds/{}/log", build.id)).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        b.get(&format!("/builds/{}/log?after=x", build.id)).await.0,
        StatusCode::BAD_REQUEST
    );
    t.stop().await;
}

/// Local users log in with a password; each sees and does what their
/// role in each team allows; logging out ends the session at web, so a
/// copy of the cookie stops working too.
async fn users_see_their_teams_only_and_logging_out_ends_the_session(store: Store) {
    const PASSWORD: &str = "a-password-of-vic";
    let t = TestWeb::start_with(store, |c| {
        c.auth.local_users = vec![crate::common::local_user("vic", PASSWORD)];
    })
    .await;
    set(&t, "secret-of-main").await;
    t.raw
        .put(format!("{}/api/v1/teams/a", t.url))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"auth": {"viewer": {"users": ["local:vic"]}}}))
        .send()
        .await
        .unwrap();
    t.admin
        .set_pipeline("a", "p-of-a", CONFIG, None)
        .await
        .unwrap();
    let anonymous = Browser::new(&t);
    let wrong = anonymous
        .post_form("/login", &[("username", "vic"), ("password", "not-it")])
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong
        .text()
        .await
        .unwrap()
        .contains("wrong user name or password"));
    let r = anonymous
        .post_form("/login", &[("username", "vic"), ("password", PASSWORD)])
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
    assert!(!cookie.contains(PASSWORD));
    let vic = Browser {
        cookie: Some(cookie.split(';').next().unwrap().to_string()),
        ..Browser::new(&t)
    };
    let (status, home) = vic.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        home.contains("p-of-a") && home.contains("user local:vic"),
        "{home}"
    );
    assert!(
        !home.contains("secret-of-main"),
        "team main's pipeline shows: {home}"
    );
    let (status, page) = vic.get("/teams/main/pipelines/secret-of-main").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
    assert!(
        page.contains("<html"),
        "an error is a page for a person: {page}"
    );
    // A viewer's pause is refused by the API, and the pipeline stays as it was.
    let r = vic.act("/teams/a/pipelines/p-of-a/unpause").await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(t.admin.pipeline("a", "p-of-a").await.unwrap().paused);
    // Logging out ends the session: the same cookie is no login any more.
    let copy = Browser {
        cookie: vic.cookie.clone(),
        ..Browser::new(&t)
    };
    let r = vic.act("/logout").await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, home) = copy.get("/").await;
    assert!(
        !home.contains("p-of-a") && home.contains("log in"),
        "{home}"
    );
    t.stop().await;
}

/// A dashboard session opened with the admin token ends when the token
/// is rotated: web restarted with another token no longer takes it.
async fn an_admin_token_session_ends_when_the_token_is_rotated(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let b = Browser::logged_in(&t).await;
    assert_eq!(b.get("/workers").await.0, StatusCode::OK);
    t.stop().await;
    let rotated = TestWeb::start_with(store, |c| {
        c.admin_token = "a-rotated-admin-token-0123456789".into()
    })
    .await;
    let old = Browser {
        cookie: b.cookie.clone(),
        ..Browser::new(&rotated)
    };
    assert_eq!(old.get("/workers").await.0, StatusCode::UNAUTHORIZED);
    rotated.stop().await;
}

fn step(build_id: i64, id: &str, name: &str, kind: StepKind, state: StepState) -> StepRecord {
    StepRecord {
        build_id,
        step_id: id.into(),
        name: name.into(),
        kind,
        state,
        attempt: 1,
        worker: Some("w1".into()),
        container: None,
        log_offset: 0,
        exit_code: None,
        outputs: "{}".into(),
        error: None,
        started_at: Some(1_000),
        finished_at: None,
        version: None,
    }
}

/// The part of `html` from the first `from` on.
fn from<'a>(html: &'a str, from: &str) -> &'a str {
    &html[html
        .find(from)
        .unwrap_or_else(|| panic!("{from} in {html}"))..]
}

/// A build's page: a section per step in the plan's order (the ones that
/// went well closed, the failed one open, each with its own lines), a
/// stamp where each line begins, the versions it used, and a rerun button
/// that reruns it with them; the log stream sends the steps as they change.
async fn a_build_page_has_a_section_per_step_its_versions_and_a_rerun(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let build = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    let store = t.web.store().clone();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let job = store.job("main", "p", "unit").await.unwrap();
    let v = store
        .save_resource_version(
            repo.id,
            &serde_json::json!({"ref": "abc123"}),
            &serde_json::json!([]),
            1,
        )
        .await
        .unwrap();
    store
        .record_build_input(build.id, job.id, "repo", repo.id, v.id)
        .await
        .unwrap();
    let mut get = step(build.id, "0", "repo", StepKind::Get, StepState::Succeeded);
    get.finished_at = Some(2_000);
    store.save_step(&get).await.unwrap();
    let mut task = step(build.id, "1", "test", StepKind::Task, StepState::Failed);
    task.exit_code = Some(2);
    task.attempt = 2;
    store.save_step(&task).await.unwrap();
    // (step, kind, text, at): the task's output comes in chunks that end
    // mid-line.
    let lines: [(Option<&str>, BuildEventKind, &str, i64); 6] = [
        (Some("0"), BuildEventKind::Log, "fetched abc123\n", 1_500),
        (Some("1"), BuildEventKind::Log, "compi", 61_000),
        (Some("1"), BuildEventKind::Log, "ling\n", 62_000),
        (
            Some("1"),
            BuildEventKind::Infra,
            "worker w9 was lost (stalled); retrying task test (attempt 2 of 3)",
            3_723_000,
        ),
        (Some("1"), BuildEventKind::Log, "FAIL: a test\n", 3_724_000),
        (None, BuildEventKind::Status, "failed", 3_725_000),
    ];
    for (step, kind, text, at) in lines {
        store
            .append_build_event(build.id, step, kind, text, at)
            .await
            .unwrap();
    }
    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/teams/main/pipelines/p/jobs/unit/builds/1").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    // The build's own lines, then the steps in the plan's order.
    let build_at = html
        .find("<details class=\"step\" data-step=\"\" open>")
        .expect("the build's section");
    let get_at = html
        .find("<details class=\"step\" data-step=\"0\">")
        .expect("the get's section, closed");
    let task_at = html
        .find("<details class=\"step\" data-step=\"1\" open>")
        .expect("the task's section, open");
    assert!(build_at < get_at && get_at < task_at, "{html}");
    let task_section = &from(&html, "data-step=\"1\"")
        [..from(&html, "data-step=\"1\"").find("</details>").unwrap()];
    for want in [
        "failed",
        "task",
        "<strong>test</strong>",
        "attempt 2",
        "on <a href=\"/workers/w1\">w1</a>",
        "exit 2",
        "FAIL: a test",
        "worker w9 was lost",
    ] {
        assert!(task_section.contains(want), "{want} in {task_section}");
    }
    assert!(!task_section.contains("fetched abc123"), "{task_section}");
    // A stamp where each line begins, none inside the split line.
    assert_eq!(
        task_section.matches("<span class=\"t\">").count(),
        3,
        "{task_section}"
    );
    for stamp in ["00:01:01 ", "01:02:03 ", "01:02:04 "] {
        assert!(task_section.contains(stamp), "{stamp} in {task_section}");
    }
    assert!(!task_section.contains("00:01:02 "), "{task_section}");
    assert!(
        html.contains("id=\"timestamps\" type=\"checkbox\""),
        "{html}"
    );
    // The versions it used.
    let versions = from(&html, "id=\"versions\"");
    assert!(
        versions.contains("input repo")
            && versions.contains("{&quot;ref&quot;:&quot;abc123&quot;}"),
        "{versions}"
    );
    // Rerun: a new build of the job with the same input.
    let rerun = "/teams/main/pipelines/p/jobs/unit/builds/1/rerun";
    assert!(html.contains(&format!("action=\"{rerun}\"")), "{html}");
    let r = b.act(rerun).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/teams/main/pipelines/p/jobs/unit");
    let builds = store.job_builds(job.id, 10).await.unwrap();
    assert_eq!(builds.len(), 2);
    let (inputs, _) = store.build_versions(builds[0].build.id).await.unwrap();
    assert_eq!(
        inputs.iter().map(|i| i.version_id).collect::<Vec<_>>(),
        [v.id]
    );
    // Without the CSRF token nothing is rerun.
    let r = b.post_form(rerun, &[]).await;
    assert_ne!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(store.job_builds(job.id, 10).await.unwrap().len(), 2);
    // The stream sends the steps as they are, then again as they change.
    let r = b
        .with_cookie(
            b.http
                .get(format!("{}/builds/{}/log?after=999999", t.url, build.id)),
        )
        .send()
        .await
        .unwrap();
    let id = build.id;
    let writer = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let mut task = step(id, "1", "test", StepKind::Task, StepState::Running);
        task.attempt = 3;
        writer.save_step(&task).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        writer.request_build_abort(id, 2).await.unwrap();
    });
    let body = tokio::time::timeout(std::time::Duration::from_secs(20), r.text())
        .await
        .expect("the stream ends with the build")
        .unwrap();
    let steps: Vec<serde_json::Value> = body
        .split("event: steps\ndata: ")
        .skip(1)
        .map(|rest| serde_json::from_str(rest.lines().next().unwrap()).unwrap())
        .collect();
    assert!(steps.len() >= 2, "{body}");
    assert_eq!(steps[0][1]["attempt"], 2);
    assert_eq!(steps[0][1]["exit_code"], 2);
    assert!(
        steps
            .iter()
            .any(|s| s[1]["attempt"] == 3 && s[1]["state"] == "running"),
        "{body}"
    );
    t.stop().await;
}

/// `/live` says `change` once something a page shows changes (here a
/// build is made, then a job paused), and every page carries the script
/// that listens to it (but the build page, which has its own stream).
async fn open_pages_hear_of_changes(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let b = Browser::logged_in(&t).await;
    for page in [
        "/",
        "/teams/main/pipelines/p",
        "/teams/main/pipelines/p/jobs/unit",
        "/workers",
        "/builds",
    ] {
        let (_, html) = b.get(page).await;
        assert!(
            html.contains("new EventSource(\"/live\")"),
            "{page}: {html}"
        );
    }
    let mut r = b
        .with_cookie(b.http.get(format!("{}/live", t.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    async fn next_change(r: &mut Response, seen: &mut String) -> u64 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(at) = seen.find("event: change\ndata: ") {
                let rest = &seen[at + "event: change\ndata: ".len()..];
                if let Some(end) = rest.find('\n') {
                    let generation = rest[..end].parse().unwrap();
                    *seen = rest[end..].to_string();
                    return generation;
                }
            }
            let chunk = tokio::time::timeout_at(deadline, r.chunk())
                .await
                .expect("a change within 20s")
                .unwrap()
                .expect("the stream goes on");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    // The watcher reads its first fingerprint a second after the stream
    // opened; a change before that would go unseen.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    t.admin.trigger_job("main", "p", "unit").await.unwrap();
    let first = next_change(&mut r, &mut seen).await;
    t.admin
        .pause_job("main", "p", "deploy", true)
        .await
        .unwrap();
    let second = next_change(&mut r, &mut seen).await;
    assert!(second > first, "{first} then {second}");
    t.stop().await;
}

/// A worker's page draws its life: its registrations (the state lost in
/// the second), and the steps retried elsewhere because of it (only its
/// own, though `_` in its name is a LIKE wildcard and another worker's
/// name begins with its); the fleet page shows memory, disk and
/// containers as bars.
async fn a_workers_page_draws_its_timeline_and_the_fleet_its_bars(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, "p").await;
    let store = t.web.store().clone();
    let info = |identity: &str| hangar_store::WorkerInfo {
        name: "w_1".into(),
        state_identity: identity.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 3,
        volumes: 4,
        api_url: None,
        allow_privileged: false,
    };
    let now = hangar_engine::system_now_ms();
    store
        .register_worker(&info("disk-a"), now - 600_000)
        .await
        .unwrap();
    store
        .register_worker(&info("disk-b"), now - 60_000)
        .await
        .unwrap();
    let build = t.admin.trigger_job("main", "p", "unit").await.unwrap();
    for (who, at) in [
        ("w_1", now - 120_000),
        ("wx1", now - 110_000),
        ("w_10", now - 100_000),
    ] {
        store
            .append_build_event(
                build.id,
                Some("0"),
                BuildEventKind::Infra,
                &format!("worker {who} stalled (stopped heartbeating) while the step ran; retrying get repo (attempt 2 of 3)"),
                at,
            )
            .await
            .unwrap();
    }
    let b = Browser::logged_in(&t).await;
    let (status, html) = b.get("/workers/w_1").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let svg = from(&html, "<svg id=\"timeline\"");
    let svg = &svg[..svg.find("</svg>").unwrap()];
    for kind in ["registered", "restarted-state-lost"] {
        assert!(
            svg.contains(&format!("data-kind=\"{kind}\"")),
            "{kind}: {svg}"
        );
    }
    assert!(svg.contains("mark tone-bad"), "{svg}");
    assert_eq!(svg.matches("data-build=").count(), 1, "{svg}");
    assert!(
        svg.contains(&format!("href=\"/builds/{}\"", build.id)),
        "{svg}"
    );
    let history = from(&html, "id=\"history\"");
    assert!(history.contains("step retried: "), "{history}");
    assert!(history.contains("restarted-state-lost"), "{history}");
    assert!(
        !history.contains("worker wx1") && !history.contains("worker w_10"),
        "{history}"
    );
    // Newest first: the restart, then the retry, then the first registration.
    let (restart, retry, first) = (
        history.find("restarted-state-lost").unwrap(),
        history.find("step retried").unwrap(),
        history.find(">registered<").unwrap(),
    );
    assert!(restart < retry && retry < first, "{history}");
    let (_, fleet) = b.get("/workers").await;
    assert!(
        fleet.contains("<meter min=\"0\" max=\"3\" value=\"3\""),
        "{fleet}"
    );
    t.stop().await;
}

on_both_databases!(
    a_workers_page_draws_its_timeline_and_the_fleet_its_bars,
    open_pages_hear_of_changes,
    a_build_page_has_a_section_per_step_its_versions_and_a_rerun,
    an_admin_token_session_ends_when_the_token_is_rotated,
    users_see_their_teams_only_and_logging_out_ends_the_session,
    login_sets_a_strict_http_only_cookie,
    only_exposed_pipelines_are_readable_without_login,
    actions_need_the_cookie_and_the_csrf_token,
    every_page_renders_and_hostile_text_stays_text,
    hostile_names_are_text_and_their_links_work,
    instances_show_their_vars_and_their_pages_work,
    the_log_streams_as_server_sent_events_to_the_end,
);
