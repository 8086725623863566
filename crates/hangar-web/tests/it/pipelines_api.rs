//! Pipelines over the API: set, read back, pause, rename, destroy, jobs,
//! resources and versions; and hostile input, each refusal changing
//! nothing. On SQLite and PostgreSQL alike.

use std::time::{Duration, Instant};

use crate::common::{TestWeb, ADMIN};
use hangar_api::pipelines::{VersionsQuery, CONFIG_VERSION_HEADER};
use hangar_client::ClientError;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::json;

const CONFIG: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
  version: {ref: abc}
jobs:
- name: build
  plan:
  - get: repo
- name: Test
  plan:
  - get: repo
    passed: [build]
";

const SMALLER: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
jobs:
- name: build
  plan:
  - get: repo
";

fn api_error(result: Result<impl std::fmt::Debug, ClientError>) -> (StatusCode, String) {
    match result {
        Err(ClientError::Api {
            status, message, ..
        }) => (status, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn pipeline_url(t: &TestWeb, team: &str, rest: &str) -> String {
    format!("{}/api/v1/teams/{team}/pipelines{rest}", t.url)
}

/// Sends a raw config body to `name` and returns the status and the body.
async fn put_raw(t: &TestWeb, name: &str, body: Vec<u8>) -> (StatusCode, String) {
    let resp = t
        .raw
        .put(pipeline_url(t, "main", &format!("/{name}/config")))
        .bearer_auth(ADMIN)
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

async fn nothing_stored(t: &TestWeb) {
    assert_eq!(t.admin.pipelines("main").await.unwrap(), vec![]);
}

async fn a_pipeline_is_set_read_back_paused_renamed_and_destroyed(store: Store) {
    let t = TestWeb::start(store).await;
    let saved = t
        .admin
        .set_pipeline("main", "p", CONFIG, None)
        .await
        .unwrap();
    assert!(saved.created);
    assert!(saved.pipeline.paused, "a new pipeline starts paused");
    assert_eq!(saved.pipeline.config_version, 1);
    // `Test` is no identifier Concourse likes; no worker is registered,
    // so none has `git` yet.
    let kinds: Vec<(&str, &str)> = saved
        .warnings
        .iter()
        .map(|w| (w.kind.as_str(), w.message.as_str()))
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(kinds[0].0, "invalid_identifier");
    assert_eq!(kinds[1].0, "pipeline");
    assert!(
        kinds[1]
            .1
            .starts_with("no worker has resource type git (needed by resource repo)"),
        "{kinds:?}"
    );

    let config = t.admin.pipeline_config("main", "p").await.unwrap().unwrap();
    assert_eq!(config.version, 1);
    let expected = hangar_core::pipeline::parse_pipeline(CONFIG)
        .unwrap()
        .config;
    assert_eq!(config.config, serde_json::to_value(&expected).unwrap());
    assert_eq!(t.admin.pipeline_config("main", "nope").await.unwrap(), None);

    let jobs = t.admin.jobs("main", "p").await.unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["build", "Test"]);
    assert_eq!(jobs[0].next_build_number, 1);
    let resources = t.admin.resources("main", "p").await.unwrap();
    assert_eq!(resources.len(), 1);
    assert_eq!(
        (
            resources[0].resource_type.as_str(),
            resources[0].pinned_version.clone()
        ),
        ("git", Some(json!({"ref": "abc"})))
    );

    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    assert!(!t.admin.pipeline("main", "p").await.unwrap().paused);
    t.admin.pause_job("main", "p", "build", true).await.unwrap();
    assert!(t.admin.job("main", "p", "build").await.unwrap().paused);
    t.admin
        .pause_job("main", "p", "build", false)
        .await
        .unwrap();
    assert!(!t.admin.job("main", "p", "build").await.unwrap().paused);

    // A second set from version 1 goes; another from version 1 is refused.
    let second = t
        .admin
        .set_pipeline("main", "p", SMALLER, Some(1))
        .await
        .unwrap();
    assert_eq!((second.created, second.pipeline.config_version), (false, 2));
    let (status, message) = api_error(t.admin.set_pipeline("main", "p", CONFIG, Some(1)).await);
    assert_eq!(status, StatusCode::CONFLICT, "{message}");
    assert!(message.contains("is at version 2"), "{message}");
    assert_eq!(
        t.admin.pipeline("main", "p").await.unwrap().config_version,
        2
    );
    assert_eq!(t.admin.jobs("main", "p").await.unwrap().len(), 1);

    let id = t.admin.pipeline("main", "p").await.unwrap().id;
    t.admin.rename_pipeline("main", "p", "q").await.unwrap();
    assert_eq!(t.admin.pipeline("main", "q").await.unwrap().id, id);
    let (status, _) = api_error(t.admin.pipeline("main", "p").await);
    assert_eq!(status, StatusCode::NOT_FOUND);

    t.admin.destroy_pipeline("main", "q").await.unwrap();
    nothing_stored(&t).await;
    let (status, _) = api_error(t.admin.destroy_pipeline("main", "q").await);
    assert_eq!(status, StatusCode::NOT_FOUND);
    t.stop().await;
}

async fn resource_versions_are_paged_and_the_limit_is_checked(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    t.admin
        .set_pipeline("main", "p", SMALLER, None)
        .await
        .unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let mut ids = vec![];
    for i in 0..3 {
        let v = store
            .save_resource_version(repo.id, &json!({"ref": i.to_string()}), &json!([]), i)
            .await
            .unwrap();
        ids.push(v.id);
    }
    let page = |limit, before, after| VersionsQuery {
        limit,
        before,
        after,
    };
    let all = t
        .admin
        .resource_versions("main", "p", "repo", page(None, None, None))
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|v| v.id).collect::<Vec<_>>(),
        [ids[2], ids[1], ids[0]]
    );
    assert_eq!(all[0].version, json!({"ref": "2"}));
    let older = t
        .admin
        .resource_versions("main", "p", "repo", page(Some(1), Some(ids[2]), None))
        .await
        .unwrap();
    assert_eq!(older.iter().map(|v| v.id).collect::<Vec<_>>(), [ids[1]]);
    for limit in [0, 501, -1] {
        let (status, message) = api_error(
            t.admin
                .resource_versions("main", "p", "repo", page(Some(limit), None, None))
                .await,
        );
        assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
    }
    let (status, _) = api_error(
        t.admin
            .resource_versions("main", "p", "nope", page(None, None, None))
            .await,
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    for query in ["limit=1&bogus=2", "before=abc", "after=1.5"] {
        let resp = t
            .raw
            .get(pipeline_url(
                &t,
                "main",
                &format!("/p/resources/repo/versions?{query}"),
            ))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
    }
    t.stop().await;
}

async fn an_invalid_config_is_refused_with_every_error_and_changes_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    let bad = "
jobs:
- name: a
  plan:
  - get: missing
- name: a
  plan: []
";
    let (status, message) = api_error(t.admin.set_pipeline("main", "p", bad, None).await);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let errors = hangar_core::pipeline::parse_pipeline(bad)
        .unwrap_err()
        .errors;
    assert!(errors.len() >= 2, "{errors:?}");
    for e in &errors {
        assert!(message.contains(&e.to_string()), "{message} lacks {e}");
    }
    assert!(
        message.starts_with("invalid pipeline config:\n"),
        "{message}"
    );
    nothing_stored(&t).await;

    // A refused update leaves the stored version as it was.
    t.admin
        .set_pipeline("main", "p", SMALLER, None)
        .await
        .unwrap();
    api_error(t.admin.set_pipeline("main", "p", bad, None).await);
    let config = t.admin.pipeline_config("main", "p").await.unwrap().unwrap();
    assert_eq!(config.version, 1);
    t.stop().await;
}

async fn hostile_bodies_are_refused_quickly_and_change_nothing(store: Store) {
    let t = TestWeb::start(store).await;

    // A billion laughs: aliases of aliases.
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 0..9u8 {
        let (prev, next) = ((b'a' + i) as char, (b'a' + i + 1) as char);
        bomb.push_str(&format!("{next}: &{next} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
    }
    let started = Instant::now();
    let core = hangar_core::pipeline::parse_pipeline(&bomb)
        .unwrap_err()
        .errors;
    let (status, body) = put_raw(&t, "p", bomb.into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains(&core[0].message),
        "{body} lacks {}",
        core[0].message
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // 10,000 jobs: the core's bound, named.
    let mut many = String::from("jobs:\n");
    for i in 0..10_000 {
        many.push_str(&format!("- name: j{i}\n  plan: []\n"));
    }
    let core = hangar_core::pipeline::parse_pipeline(&many)
        .unwrap_err()
        .errors;
    assert_eq!(core.len(), 1, "{core:?}");
    let started = Instant::now();
    let (status, body) = put_raw(&t, "p", many.into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        message["error"]["message"],
        format!("invalid pipeline config:\n  {}", core[0])
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // 5 MB: over the config's limit, refused by size.
    let (status, body) = put_raw(&t, "p", vec![b'#'; 5 * 1024 * 1024]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body.contains(&hangar_core::pipeline::MAX_CONFIG_BYTES.to_string()),
        "{body}"
    );

    // Not UTF-8.
    let (status, body) = put_raw(&t, "p", b"jobs: []\n\xff\xfe".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("not UTF-8"), "{body}");

    // A bad expected-version header.
    let resp = t
        .raw
        .put(pipeline_url(&t, "main", "/p/config"))
        .bearer_auth(ADMIN)
        .header(CONFIG_VERSION_HEADER, "soon")
        .body(SMALLER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    nothing_stored(&t).await;
    t.stop().await;
}

async fn bad_names_unknown_teams_and_wrong_tokens_are_refused(store: Store) {
    let t = TestWeb::start(store).await;
    // Names are checked before any query: 400, not 404. (A literal `..`
    // segment never arrives: URLs resolve it on the client's side; the
    // rename body below carries one.)
    // U+202E (right-to-left override), U+200B (zero width space): a name
    // that reads on screen as another.
    for name in [
        "a%2Fb",
        "a%5Cb",
        "a%00b",
        "a%0Ab",
        "deploy%E2%80%AEgnp",
        "a%E2%80%8Bb",
        &"a".repeat(129),
    ] {
        let (status, body) = put_raw(&t, name, SMALLER.as_bytes().to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let resp = t
            .raw
            .get(pipeline_url(&t, "main", &format!("/{name}")))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{name}");
    }
    let (status, _) = api_error(t.admin.job("main", "p", "a/b").await);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = api_error(t.admin.rename_pipeline("main", "p", "..").await);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing of the refused names was stored.
    assert!(t.admin.pipelines("main").await.unwrap().is_empty());
    let (status, _) = api_error(t.admin.set_pipeline("bad/team", "p", SMALLER, None).await);
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, message) = api_error(t.admin.set_pipeline("other", "p", SMALLER, None).await);
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(message.contains("team other not found"), "{message}");
    let (status, _) = api_error(t.admin.pipelines("other").await);
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Wrong token, and the worker key: refused before the body is read.
    let wrong = t.admin.with_token("not-the-admin-token");
    let (status, _) = api_error(wrong.set_pipeline("main", "p", SMALLER, None).await);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = api_error(wrong.pipelines("main").await);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = api_error(t.worker.set_pipeline("main", "p", SMALLER, None).await);
    assert_eq!(status, StatusCode::FORBIDDEN);
    let resp = t
        .raw
        .put(pipeline_url(&t, "main", "/p/config"))
        .body(SMALLER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // A rename body with an unknown field.
    t.admin
        .set_pipeline("main", "p", SMALLER, None)
        .await
        .unwrap();
    let resp = t
        .raw
        .put(pipeline_url(&t, "main", "/p/rename"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "q", "team": "other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(t.admin.pipeline("main", "p").await.is_ok());
    let names: Vec<String> = t
        .admin
        .pipelines("main")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["p"]);
    t.stop().await;
}

on_both_databases!(
    a_pipeline_is_set_read_back_paused_renamed_and_destroyed,
    resource_versions_are_paged_and_the_limit_is_checked,
    an_invalid_config_is_refused_with_every_error_and_changes_nothing,
    hostile_bodies_are_refused_quickly_and_change_nothing,
    bad_names_unknown_teams_and_wrong_tokens_are_refused,
);
