//! Teams, users and roles over the API: every user route against every
//! role (Concourse's table), logging in and out, sessions ending, wrong
//! passwords and tokens throttled, and hostile team configs; each refusal
//! changing nothing. On SQLite and PostgreSQL alike.

use std::time::Duration;

use crate::common::{TestWeb, ADMIN};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_web::{AuthConfig, LocalUser};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const PASSWORD: &str = "correct-horse-battery";

const CONFIG: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
jobs:
- name: build
  plan:
  - get: repo
";

/// Local users, with cheap bcrypt hashes (cost 4) so the suite stays fast.
fn auth_config() -> AuthConfig {
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let users = ["root", "alice", "mia", "olga", "vic", "bob", "stranger"];
    AuthConfig {
        local_users: users
            .iter()
            .map(|u| LocalUser::parse(&format!("{u}:{hash}")).unwrap())
            .collect(),
        main_team: Some(
            hangar_core::tenancy::TeamAuth::owners(&["root".into()], &[], &[]).unwrap(),
        ),
        ..AuthConfig::default()
    }
}

async fn start(store: Store) -> TestWeb {
    TestWeb::start_with(store, |c| c.auth = auth_config()).await
}

async fn call(
    t: &TestWeb,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = t.raw.request(method, format!("{}/api/v1{path}", t.url));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn login(t: &TestWeb, user: &str) -> String {
    let (status, body) = call(
        t,
        None,
        Method::POST,
        "/login",
        Some(json!({"username": user, "password": PASSWORD})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{user}: {body}");
    body["token"].as_str().unwrap().to_string()
}

/// Team `a` with one user in each role, team `b` owned by bob, a pipeline
/// `a/p` and a one-off build of team `a`; answers that build's id.
async fn two_teams(t: &TestWeb) -> i64 {
    let admin = Some(ADMIN);
    let auth = json!({
        "owner": {"users": ["local:alice"]},
        "member": {"users": ["local:mia"]},
        "pipeline-operator": {"users": ["local:olga"]},
        "viewer": {"users": ["local:vic"]},
    });
    let (s, b) = call(
        t,
        admin,
        Method::PUT,
        "/teams/a",
        Some(json!({"auth": auth})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let owner_b = json!({"owner": {"users": ["local:bob"]}});
    let (s, _) = call(
        t,
        admin,
        Method::PUT,
        "/teams/b",
        Some(json!({"auth": owner_b})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let res = t
        .raw
        .put(format!("{}/api/v1/teams/a/pipelines/p/config", t.url))
        .bearer_auth(ADMIN)
        .body(CONFIG)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    let (s, build) = call(
        t,
        admin,
        Method::POST,
        "/builds",
        Some(json!({"team": "a", "plan": [{"task": "t", "config": {"platform": "linux", "run": {"path": "true"}}}]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{build}");
    build["id"].as_i64().unwrap()
}

/// Who may call a route: the lowest role on team `a` (or wider access).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    Public,
    /// Anyone logged in (a stranger too).
    LoggedIn,
    /// A role on any team.
    AnyRole,
    /// A viewer; to anyone else the thing reads as missing (a pipeline or
    /// a build that is not exposed).
    Reader,
    Viewer,
    Operator,
    Member,
    Owner,
    Admin,
}

/// The users, with what they hold on team `a`.
const USERS: [(&str, u8); 6] = [
    // (user, rank on team a: 0 none … 4 owner; 5 admin)
    ("root", 5),
    ("alice", 4),
    ("mia", 3),
    ("olga", 2),
    ("vic", 1),
    ("bob", 0),
];

fn may(needs: Needs, rank: u8, has_any_role: bool) -> bool {
    match needs {
        Needs::Public | Needs::LoggedIn => true,
        Needs::AnyRole => has_any_role,
        Needs::Reader | Needs::Viewer => rank >= 1,
        Needs::Operator => rank >= 2,
        Needs::Member => rank >= 3,
        Needs::Owner => rank >= 4,
        Needs::Admin => rank >= 5,
    }
}

async fn every_route_answers_each_role_as_concourse_s_table_says(store: Store) {
    let t = start(store).await;
    let build = two_teams(&t).await;
    let mut tokens = Vec::new();
    for (user, rank) in USERS {
        tokens.push((user, rank, login(&t, user).await));
    }
    let stranger = login(&t, "stranger").await;
    let pl = "/teams/a/pipelines/p";
    let task = json!([{"task": "t", "config": {"platform": "linux", "run": {"path": "true"}}}]);
    // (method, path, body, who may, a refusal reads as missing)
    let routes: Vec<(Method, String, Option<Value>, Needs)> = vec![
        (Method::GET, "/info".into(), None, Needs::Public),
        (Method::GET, "/user".into(), None, Needs::LoggedIn),
        (Method::GET, "/teams".into(), None, Needs::LoggedIn),
        (Method::GET, "/builds".into(), None, Needs::LoggedIn),
        (Method::GET, "/workers".into(), None, Needs::AnyRole),
        (Method::GET, "/teams/a".into(), None, Needs::Viewer),
        (Method::GET, pl.to_string(), None, Needs::Reader),
        (Method::GET, format!("{pl}/config"), None, Needs::Viewer),
        (Method::GET, format!("{pl}/jobs"), None, Needs::Reader),
        (Method::GET, format!("{pl}/jobs/build"), None, Needs::Reader),
        (
            Method::GET,
            format!("{pl}/jobs/build/builds"),
            None,
            Needs::Reader,
        ),
        (
            Method::GET,
            format!("{pl}/jobs/build/inputs"),
            None,
            Needs::Viewer,
        ),
        (Method::GET, format!("{pl}/resources"), None, Needs::Reader),
        (
            Method::GET,
            format!("{pl}/resources/repo/versions"),
            None,
            Needs::Reader,
        ),
        (
            Method::GET,
            format!("{pl}/resources/repo/check"),
            None,
            Needs::Reader,
        ),
        (
            Method::GET,
            format!("{pl}/resources/repo/pin"),
            None,
            Needs::Reader,
        ),
        (Method::GET, format!("/builds/{build}"), None, Needs::Reader),
        (
            Method::GET,
            format!("/builds/{build}/events?follow=false"),
            None,
            Needs::Reader,
        ),
        (Method::PUT, format!("{pl}/pause"), None, Needs::Operator),
        (Method::PUT, format!("{pl}/unpause"), None, Needs::Operator),
        (
            Method::PUT,
            format!("{pl}/jobs/build/pause"),
            None,
            Needs::Operator,
        ),
        (
            Method::PUT,
            format!("{pl}/jobs/build/unpause"),
            None,
            Needs::Operator,
        ),
        (
            Method::POST,
            format!("{pl}/jobs/nope/builds"),
            None,
            Needs::Operator,
        ),
        (
            Method::POST,
            format!("{pl}/jobs/nope/builds/1"),
            None,
            Needs::Operator,
        ),
        (
            Method::POST,
            format!("{pl}/resources/nope/check"),
            Some(json!({})),
            Needs::Operator,
        ),
        (
            Method::PUT,
            format!("{pl}/resources/nope/unpin"),
            None,
            Needs::Operator,
        ),
        (
            Method::PUT,
            format!("/builds/{build}/abort"),
            None,
            Needs::Operator,
        ),
        (
            Method::PUT,
            "/teams/a/pipelines/nope/config".into(),
            None,
            Needs::Member,
        ),
        (
            Method::DELETE,
            "/teams/a/pipelines/nope".into(),
            None,
            Needs::Member,
        ),
        (
            Method::PUT,
            "/teams/a/pipelines/nope/archive".into(),
            None,
            Needs::Member,
        ),
        (
            Method::PUT,
            "/teams/a/pipelines/ordering".into(),
            Some(json!(["p"])),
            Needs::Member,
        ),
        (
            Method::DELETE,
            format!("{pl}/jobs/nope/tasks/t/cache"),
            None,
            Needs::Member,
        ),
        (
            Method::DELETE,
            format!("{pl}/resources/nope/cache"),
            None,
            Needs::Member,
        ),
        (
            Method::GET,
            "/teams/a/containers".into(),
            None,
            Needs::Member,
        ),
        (
            Method::GET,
            "/teams/a/containers/nope/intercept?process=%7B%22path%22%3A%22sh%22%7D".into(),
            None,
            Needs::Member,
        ),
        (
            Method::PUT,
            "/teams/a/pipelines/nope/rename".into(),
            Some(json!({"name": "q"})),
            Needs::Member,
        ),
        (
            Method::POST,
            "/builds".into(),
            Some(json!({"team": "a", "plan": task})),
            Needs::Member,
        ),
        (
            Method::POST,
            "/artifacts?team=a&worker=nowhere".into(),
            None,
            Needs::Member,
        ),
        (
            Method::PUT,
            "/teams/a".into(),
            Some(
                json!({"auth": {"owner": {"users": ["local:alice"]}, "member": {"users": ["local:mia"]}, "pipeline-operator": {"users": ["local:olga"]}, "viewer": {"users": ["local:vic"]}}}),
            ),
            Needs::Owner,
        ),
        (
            Method::PUT,
            "/teams/a/rename".into(),
            Some(json!({"name": "b"})),
            Needs::Owner,
        ),
        (
            Method::PUT,
            "/teams/new".into(),
            Some(json!({"auth": {"owner": {"users": ["local:nobody"]}}})),
            Needs::Admin,
        ),
        (Method::DELETE, "/teams/nope".into(), None, Needs::Admin),
        (Method::GET, "/events".into(), None, Needs::Admin),
        (Method::GET, "/volumes".into(), None, Needs::Admin),
        (
            Method::POST,
            "/stalled-workers/prune".into(),
            None,
            Needs::Admin,
        ),
        (Method::DELETE, "/workers/nope".into(), None, Needs::Admin),
        (Method::PUT, "/workers/nope/land".into(), None, Needs::Admin),
    ];
    for (method, path, body, needs) in &routes {
        let reads = *needs == Needs::Reader;
        let refused = |s: StatusCode| {
            s == StatusCode::UNAUTHORIZED
                || s == StatusCode::FORBIDDEN
                || (reads && s == StatusCode::NOT_FOUND)
        };
        for (user, rank, token) in &tokens {
            let (status, answer) = call(&t, Some(token), method.clone(), path, body.clone()).await;
            // Each of them has a role somewhere (bob on team b).
            let expected = may(*needs, *rank, true);
            assert_eq!(
                !refused(status),
                expected,
                "{user} (rank {rank}) {method} {path}: {status} {answer}"
            );
            if !expected && !reads {
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{user} {method} {path}: {answer}"
                );
            }
        }
        // A stranger logged in, with no role anywhere.
        let (status, answer) = call(&t, Some(&stranger), method.clone(), path, body.clone()).await;
        assert_eq!(
            !refused(status),
            may(*needs, 0, false),
            "stranger {method} {path}: {status} {answer}"
        );
        // Nobody logged in: told to log in, or shown nothing.
        let (status, answer) = call(&t, None, method.clone(), path, body.clone()).await;
        let expected = match needs {
            Needs::Public => status.is_success(),
            _ if reads => status == StatusCode::NOT_FOUND,
            _ => status == StatusCode::UNAUTHORIZED,
        };
        assert!(expected, "anonymous {method} {path}: {status} {answer}");
    }
    // Nothing the refused calls asked for happened.
    let (_, teams) = call(&t, Some(ADMIN), Method::GET, "/teams", None).await;
    let names: Vec<&str> = teams
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "main", "new"]);
    let (_, team_a) = call(&t, Some(ADMIN), Method::GET, "/teams/a", None).await;
    assert_eq!(team_a["auth"]["owner"]["users"], json!(["local:alice"]));
    let (s, _) = call(&t, Some(ADMIN), Method::GET, pl, None).await;
    assert_eq!(s, StatusCode::OK);
    t.stop().await;
}

async fn a_user_sees_only_their_teams_and_an_exposed_pipeline_reads_as_public(store: Store) {
    let t = start(store).await;
    let build = two_teams(&t).await;
    let bob = login(&t, "bob").await;
    let (_, teams) = call(&t, Some(&bob), Method::GET, "/teams", None).await;
    assert_eq!(
        teams,
        json!([{"name": "b", "auth": {"owner": {"users": ["local:bob"]}}}])
    );
    let vic = login(&t, "vic").await;
    let (_, teams) = call(&t, Some(&vic), Method::GET, "/teams", None).await;
    assert_eq!(
        teams,
        json!([{"name": "a"}]),
        "a viewer sees no auth config"
    );
    let (_, user) = call(&t, Some(&vic), Method::GET, "/user", None).await;
    assert_eq!(user["user_name"], "vic");
    assert_eq!(user["is_admin"], false);
    assert_eq!(user["teams"], json!({"a": ["viewer"]}));
    let (_, builds) = call(&t, Some(&bob), Method::GET, "/builds", None).await;
    assert_eq!(builds, json!([]), "bob sees no build of team a");
    let (_, builds) = call(&t, Some(&vic), Method::GET, "/builds", None).await;
    assert_eq!(builds[0]["id"], build);
    // A missing pipeline and a private one read alike to a stranger.
    let (missing, m) = call(&t, None, Method::GET, "/teams/a/pipelines/zz", None).await;
    let (private, p) = call(&t, None, Method::GET, "/teams/a/pipelines/p", None).await;
    assert_eq!(
        (missing, private),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    assert_eq!(
        m["error"]["message"].as_str().unwrap().replace("zz", "p"),
        p["error"]["message"].as_str().unwrap()
    );
    let (s, listed) = call(&t, None, Method::GET, "/teams/a/pipelines", None).await;
    assert_eq!((s, listed), (StatusCode::OK, json!([])));
    let (s, listed) = call(&t, None, Method::GET, "/teams/zz/pipelines", None).await;
    assert_eq!(
        (s, listed),
        (StatusCode::OK, json!([])),
        "a missing team lists alike"
    );
    let p = t.web.store().pipeline("a", "p").await.unwrap();
    t.web
        .store()
        .set_pipeline_exposed(p.id, true)
        .await
        .unwrap();
    let (s, _) = call(&t, None, Method::GET, "/teams/a/pipelines/p", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        &t,
        Some(&bob),
        Method::GET,
        "/teams/a/pipelines/p/jobs",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(&t, None, Method::GET, "/teams/a/pipelines/p/config", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "the config is never public");
    let (s, listed) = call(&t, None, Method::GET, "/teams/a/pipelines", None).await;
    assert_eq!((s, listed.as_array().unwrap().len()), (StatusCode::OK, 1));
    t.stop().await;
}

async fn sessions_end_at_logout_at_expiry_and_when_idle(store: Store) {
    let t = TestWeb::start_with(store, |c| {
        c.auth = AuthConfig {
            session_ttl: Duration::from_secs(3600),
            session_idle: Duration::from_secs(600),
            ..auth_config()
        }
    })
    .await;
    let alice = login(&t, "alice").await;
    assert!(alice.len() >= 64, "a session token is 256 random bits");
    let (s, _) = call(&t, Some(&alice), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(&t, Some(&alice), Method::POST, "/logout", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = call(&t, Some(&alice), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "a logged-out token is refused");
    // Idle: unused for longer than the idle timeout.
    let idle = login(&t, "alice").await;
    t.advance(601_000);
    let (s, _) = call(&t, Some(&idle), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "an idle session ends");
    // Absolute: used every few minutes, it still ends after the TTL.
    let busy = login(&t, "alice").await;
    for _ in 0..7 {
        t.advance(500_000);
        let (s, _) = call(&t, Some(&busy), Method::GET, "/user", None).await;
        assert_eq!(s, StatusCode::OK);
    }
    t.advance(500_000);
    let (s, _) = call(&t, Some(&busy), Method::GET, "/user", None).await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "past its expiry a session ends"
    );
    // The admin token is no session to log out of.
    let (s, _) = call(&t, Some(ADMIN), Method::POST, "/logout", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    t.stop().await;
}

async fn wrong_passwords_and_tokens_are_throttled_without_locking_the_user_out(store: Store) {
    let t = start(store).await;
    // The admin logs in once from here: this address is known for root.
    login(&t, "root").await;
    for _ in 0..5 {
        let (s, _) = call(
            &t,
            None,
            Method::POST,
            "/login",
            Some(json!({"username": "alice", "password": "wrong-password"})),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    let (s, body) = call(
        &t,
        None,
        Method::POST,
        "/login",
        Some(json!({"username": "alice", "password": PASSWORD})),
    )
    .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{body}");
    // Another account from the same address is not held.
    login(&t, "mia").await;
    // Unknown users cost and answer what wrong passwords do.
    let (s, body) = call(
        &t,
        None,
        Method::POST,
        "/login",
        Some(json!({"username": "nobody", "password": PASSWORD})),
    )
    .await;
    assert_eq!(
        (s, body["error"]["message"].as_str()),
        (
            StatusCode::UNAUTHORIZED,
            Some("wrong user name or password")
        )
    );
    // Wrong bearer tokens: 20 a minute, then 429 before any lookup; the
    // admin token and live sessions still work.
    for i in 0..20 {
        let (s, _) = call(&t, Some(&format!("hs.{i:064}")), Method::GET, "/user", None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    let (s, _) = call(&t, Some("hs.nope"), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, _) = call(&t, Some(ADMIN), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::OK);
    t.advance(60_001);
    let (s, _) = call(&t, Some("hs.nope"), Method::GET, "/user", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Hostile login bodies change nothing and log nobody in.
    let long = "x".repeat(100_000);
    for body in [
        json!({"username": "alice"}),
        json!({"username": "alice", "password": PASSWORD, "admin": true}),
        json!({"username": long, "password": PASSWORD}),
        json!({"username": "alice", "password": long}),
    ] {
        let (s, _) = call(&t, None, Method::POST, "/login", Some(body.clone())).await;
        assert!(s.is_client_error(), "{body}: {s}");
    }
    t.stop().await;
}

async fn hostile_team_configs_and_names_are_refused_and_change_nothing(store: Store) {
    let t = start(store).await;
    two_teams(&t).await;
    let before = t.web.store().team_auths().await.unwrap();
    let cases = [
        ("/teams/a", json!({"auth": {}})),
        ("/teams/a", json!({"auth": {"owner": {}}})),
        ("/teams/a", json!({"auth": {"owner": {"users": ["alice"]}}})),
        (
            "/teams/a",
            json!({"auth": {"owner": {"users": ["github:alice"]}}}),
        ),
        (
            "/teams/a",
            json!({"auth": {"root": {"users": ["local:alice"]}}}),
        ),
        (
            "/teams/a",
            json!({"auth": {"owner": {"users": ["local:al\u{202e}ice"]}}}),
        ),
        (
            "/teams/a",
            json!({"auth": {"owner": {"users": ["local:alice"]}}, "extra": 1}),
        ),
        ("/teams/a", json!({"auth": "owner"})),
        (
            "/teams/a%E2%80%AEb",
            json!({"auth": {"owner": {"users": ["local:alice"]}}}),
        ),
        (
            "/teams/..",
            json!({"auth": {"owner": {"users": ["local:alice"]}}}),
        ),
    ];
    for (path, body) in cases {
        let (s, answer) = call(&t, Some(ADMIN), Method::PUT, path, Some(body.clone())).await;
        assert!(s.is_client_error(), "{path} {body}: {s} {answer}");
    }
    let (s, _) = call(
        &t,
        Some(ADMIN),
        Method::PUT,
        "/teams/main/rename",
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = call(
        &t,
        Some(ADMIN),
        Method::PUT,
        "/teams/a/rename",
        Some(json!({"name": "main"})),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = call(&t, Some(ADMIN), Method::DELETE, "/teams/main", None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let huge: Vec<String> = (0..1001).map(|i| format!("local:u{i}")).collect();
    let (s, _) = call(
        &t,
        Some(ADMIN),
        Method::PUT,
        "/teams/a",
        Some(json!({"auth": {"owner": {"users": huge}}})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(t.web.store().team_auths().await.unwrap(), before);
    t.stop().await;
}

async fn an_owner_renames_their_team_and_an_admin_destroys_it(store: Store) {
    let t = start(store).await;
    let build = two_teams(&t).await;
    let alice = login(&t, "alice").await;
    let (s, _) = call(
        &t,
        Some(&alice),
        Method::PUT,
        "/teams/a/rename",
        Some(json!({"name": "a2"})),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    // Roles follow the team: alice owns a2 at once, the build went along.
    let (_, user) = call(&t, Some(&alice), Method::GET, "/user", None).await;
    assert_eq!(user["teams"], json!({"a2": ["owner"]}));
    let (s, b) = call(
        &t,
        Some(&alice),
        Method::GET,
        &format!("/builds/{build}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, _) = call(&t, Some(&alice), Method::DELETE, "/teams/a2", None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "an owner does not destroy a team");
    let root = login(&t, "root").await;
    let (s, _) = call(&t, Some(&root), Method::DELETE, "/teams/a2", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, user) = call(&t, Some(&alice), Method::GET, "/user", None).await;
    assert_eq!(user["teams"], json!({}));
    let (s, b) = call(
        &t,
        Some(ADMIN),
        Method::GET,
        &format!("/builds/{build}"),
        None,
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("aborted")));
    assert!(t.web.store().pipelines("a2").await.is_err());
    t.stop().await;
}

/// Asserts that `key` may not register worker `name` of `team`: 403,
/// saying `why`.
async fn refused_registration(
    key: &hangar_client::Client,
    name: &str,
    team: Option<&str>,
    why: &str,
) {
    let mut reg = crate::common::registration(name, "disk-x");
    reg.team = team.map(String::from);
    match key.register(&reg).await {
        Err(hangar_client::ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
            assert!(message.contains(why), "{message}");
        }
        other => panic!("{name}: {other:?}"),
    }
}

/// A team's worker key registers that team's workers only, and never
/// under a name another team's (or a shared) worker holds; a worker's own
/// key registers that name only, as a shared worker; each refusal
/// leaves the workers as they were. The workers' listing shows a user the
/// shared workers and their own teams'.
async fn team_and_worker_keys_register_only_what_they_are_for(store: Store) {
    const KEY_B: &str = "team-b-worker-key-0123456789";
    const KEY_W9: &str = "worker-w9-own-key-0123456789";
    let t = TestWeb::start_with(store, |c| {
        c.auth = auth_config();
        c.team_worker_keys.insert("b".into(), KEY_B.into());
        c.named_worker_keys.insert("w9".into(), KEY_W9.into());
    })
    .await;
    two_teams(&t).await;
    t.register("shared", "disk-s").await;
    let team_b = hangar_client::Client::new(&t.url, KEY_B, Duration::from_secs(10)).unwrap();
    let mut reg = crate::common::registration("wb", "disk-b");
    reg.team = Some("b".into());
    team_b.register(&reg).await.unwrap();
    let before = t.web.store().list_workers().await.unwrap();
    let refusals = [
        ("wc", None, "registers workers of team b only"),
        ("wc", Some("a"), "registers workers of team b only"),
        (
            "shared",
            Some("b"),
            "cannot take a name a worker outside team b holds",
        ),
    ];
    for (name, team, why) in refusals {
        refused_registration(&team_b, name, team, why).await;
    }
    assert_eq!(t.web.store().list_workers().await.unwrap(), before);
    // A worker's own key: its name only, as a shared worker.
    let w9 = hangar_client::Client::new(&t.url, KEY_W9, Duration::from_secs(10)).unwrap();
    for (name, team, why) in [
        ("w8", None, "registers worker w9 only"),
        ("w9", Some("b"), "registers it as a shared worker"),
    ] {
        refused_registration(&w9, name, team, why).await;
    }
    assert_eq!(t.web.store().list_workers().await.unwrap(), before);
    w9.register(&crate::common::registration("w9", "disk-9"))
        .await
        .unwrap();
    // The team key opens nothing else.
    let (s, _) = call(&t, Some(KEY_B), Method::GET, "/workers", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect()
    };
    let bob = login(&t, "bob").await;
    let (_, seen) = call(&t, Some(&bob), Method::GET, "/workers", None).await;
    assert_eq!(names(&seen), ["shared", "w9", "wb"]);
    let vic = login(&t, "vic").await;
    let (_, seen) = call(&t, Some(&vic), Method::GET, "/workers", None).await;
    assert_eq!(
        names(&seen),
        ["shared", "w9"],
        "team b's worker is not team a's to see"
    );
    t.stop().await;
}

on_both_databases!(
    team_and_worker_keys_register_only_what_they_are_for,
    every_route_answers_each_role_as_concourse_s_table_says,
    a_user_sees_only_their_teams_and_an_exposed_pipeline_reads_as_public,
    sessions_end_at_logout_at_expiry_and_when_idle,
    wrong_passwords_and_tokens_are_throttled_without_locking_the_user_out,
    hostile_team_configs_and_names_are_refused_and_change_nothing,
    an_owner_renames_their_team_and_an_admin_destroys_it,
);
