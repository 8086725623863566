//! Builds created with a credential manager (Kubernetes secrets served by a
//! fake API server in the test): a plan's remaining `((vars))` are resolved
//! at creation for team `main`, an unresolved one refuses the build naming
//! it, a manager that refuses fails the creation with why, and the stored
//! plan keeps the references: no value in the database nor in any answer.
//! On SQLite and PostgreSQL alike.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::common::TestWeb;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use hangar_api::builds::CreateBuild;
use hangar_client::ClientError;
use hangar_creds::cache::Cache;
use hangar_creds::kube::KubeSecrets;
use hangar_creds::{Credentials, Manager};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use serde_json::{json, Value};

const SECRET: &str = "kube-s3cret-7781";

type Answers = Arc<Mutex<BTreeMap<String, (StatusCode, String)>>>;

/// A fake API server: `namespace/name` → answer; records what is asked.
async fn fake_api(answers: Answers, seen: Arc<Mutex<Vec<String>>>) -> String {
    let app = Router::new()
        .route(
            "/api/v1/namespaces/{ns}/secrets/{name}",
            get(
                |State((answers, seen)): State<(Answers, Arc<Mutex<Vec<String>>>)>,
                 Path((ns, name)): Path<(String, String)>| async move {
                    let key = format!("{ns}/{name}");
                    seen.lock().unwrap().push(key.clone());
                    answers
                        .lock()
                        .unwrap()
                        .get(&key)
                        .cloned()
                        .unwrap_or((StatusCode::NOT_FOUND, "{}".into()))
                },
            ),
        )
        .with_state((answers, seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A Kubernetes credential manager on a fake API server answering
/// `answers`, noting each path asked in `seen`; the second value holds the
/// service account's token file.
async fn kube_credentials(
    answers: Answers,
    seen: Arc<Mutex<Vec<String>>>,
) -> (Arc<Credentials>, tempfile::TempDir) {
    let api = fake_api(answers, seen).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "sa-token").unwrap();
    let kube = KubeSecrets::new(&api, &token, None, "concourse-").unwrap();
    let credentials = Arc::new(Credentials::new(Manager::Kubernetes(kube), Cache::off()));
    (credentials, dir)
}

fn data(value: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    json!({"kind": "Secret", "data": {"value": encoded}}).to_string()
}

fn create(params: Value) -> CreateBuild {
    CreateBuild {
        resource_types: Value::Null,
        name: None,
        plan: json!([{"task": "t", "config": {
            "platform": "linux", "run": {"path": "true"}, "params": params}}]),
        artifacts: Default::default(),
        team: None,
    }
}

async fn vars_are_resolved_at_creation_and_never_stored(store: Store) {
    let answers: Answers = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    answers.lock().unwrap().extend([
        (
            "concourse-main/token".to_string(),
            (StatusCode::OK, data(SECRET)),
        ),
        (
            "concourse-main/locked".to_string(),
            (
                StatusCode::FORBIDDEN,
                r#"{"message":"forbidden"}"#.to_string(),
            ),
        ),
    ]);
    let (credentials, _dir) = kube_credentials(answers, seen.clone()).await;
    let t = TestWeb::start_with(store.clone(), |c| c.credentials = Some(credentials)).await;

    let refusals = [
        (
            json!({"A": "((token))", "B": "((missing))"}),
            reqwest::StatusCode::BAD_REQUEST,
            "plan: cannot resolve its vars: undefined vars: missing",
        ),
        (
            json!({"A": "((locked))"}),
            reqwest::StatusCode::BAD_GATEWAY,
            "plan: cannot resolve its vars: credentials: var locked: secret concourse-main/locked: the API server refused (HTTP 403): forbidden; web's service account needs `get` on secrets in namespace concourse-main",
        ),
        (
            json!({"A": "((Not_A_Secret_Name))"}),
            reqwest::StatusCode::BAD_REQUEST,
            "plan: cannot resolve its vars: credentials: var \"Not_A_Secret_Name\": secret name \"Not_A_Secret_Name\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')",
        ),
        (
            json!({"A": "((vault:token))"}),
            reqwest::StatusCode::BAD_REQUEST,
            "plan: cannot resolve its vars: undefined vars: vault:token",
        ),
    ];
    for (params, want_status, want) in refusals {
        match t.admin.create_build(&create(params.clone())).await {
            Err(ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status, want_status, "{params}");
                assert_eq!(message, want, "{params}");
            }
            other => panic!("{params}: expected a refusal, got {other:?}"),
        }
    }
    // Refusals created nothing.
    assert!(t.admin.builds(10).await.unwrap().is_empty());

    seen.lock().unwrap().clear();
    let build = t
        .admin
        .create_build(&create(
            json!({"TOKEN": "((token))", "URL": "https://x/((token))"}),
        ))
        .await
        .unwrap();
    // A one-off build reads the team's secret only: no pipeline name.
    assert_eq!(*seen.lock().unwrap(), ["concourse-main/token"]);
    let stored = store.get_build(build.id).await.unwrap().unwrap();
    assert!(stored.plan.contains("((token))"), "{}", stored.plan);
    assert!(!stored.plan.contains(SECRET), "{}", stored.plan);
    let shown = t
        .raw
        .get(format!("{}/api/v1/builds/{}", t.url, build.id))
        .bearer_auth(crate::common::ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!shown.contains(SECRET), "{shown}");
    let listed = format!("{:?}", t.admin.builds(10).await.unwrap());
    assert!(!listed.contains(SECRET), "{listed}");
    t.stop().await;
}

/// A job's trigger checks its vars as the build will read them: the
/// pipeline's secret `<pipeline>.<var>` first, then the team's `<var>`.
async fn a_job_trigger_looks_up_the_pipeline_s_secret_then_the_team_s(store: Store) {
    let answers: Answers = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    answers.lock().unwrap().extend([
        (
            "concourse-main/p.only-pipeline".to_string(),
            (StatusCode::OK, data(SECRET)),
        ),
        (
            "concourse-main/token".to_string(),
            (StatusCode::OK, data(SECRET)),
        ),
    ]);
    let (credentials, _dir) = kube_credentials(answers, seen.clone()).await;
    let t = TestWeb::start_with(store.clone(), |c| c.credentials = Some(credentials)).await;
    let config =
        "jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n      \
                  params: {A: ((only-pipeline)), B: ((token))}\n      run: {path: x}\n\
                  - name: other\n  plan:\n  - task: t\n    config:\n      platform: linux\n      \
                  params: {A: ((only-pipeline))}\n      run: {path: x}\n";
    for pipeline in ["p", "q"] {
        t.admin
            .set_pipeline("main", pipeline, config, None)
            .await
            .unwrap();
        t.admin
            .pause_pipeline("main", pipeline, false)
            .await
            .unwrap();
    }
    seen.lock().unwrap().clear();
    let build = t.admin.trigger_job("main", "p", "j").await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "concourse-main/p.only-pipeline",
            "concourse-main/p.token",
            "concourse-main/token"
        ]
    );
    let stored = store.get_build(build.id).await.unwrap().unwrap();
    assert!(!stored.plan.contains(SECRET), "{}", stored.plan);
    // Pipeline q has no such secret, and p's is not q's.
    match t.admin.trigger_job("main", "q", "other").await {
        Err(ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
            assert!(
                message.contains("undefined vars: only-pipeline"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A one-off build never reads a pipeline's secret.
    let refused = t
        .admin
        .create_build(&create(json!({"A": "((only-pipeline))"})))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    t.stop().await;
}

/// A one-off build reads its own team's secrets: team `a`'s build finds
/// `concourse-a/token`, the same plan in team `main` finds nothing.
async fn a_one_off_build_reads_its_own_team_s_secrets_and_no_other_s(store: Store) {
    let answers: Answers = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    answers.lock().unwrap().extend([(
        "concourse-a/token".to_string(),
        (StatusCode::OK, data(SECRET)),
    )]);
    let (credentials, _dir) = kube_credentials(answers, seen.clone()).await;
    let t = TestWeb::start_with(store, |c| c.credentials = Some(credentials)).await;
    let set = t
        .raw
        .put(format!("{}/api/v1/teams/a", t.url))
        .bearer_auth(crate::common::ADMIN)
        .json(&json!({"auth": {"owner": {"users": ["local:alice"]}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), reqwest::StatusCode::CREATED);
    let mut in_a = create(json!({"A": "((token))"}));
    in_a.team = Some("a".into());
    let build = t.admin.create_build(&in_a).await.unwrap();
    assert_eq!(build.status.to_string(), "pending");
    match t
        .admin
        .create_build(&create(json!({"A": "((token))"})))
        .await
    {
        Err(ClientError::Api { message, .. }) => {
            assert_eq!(
                message,
                "plan: cannot resolve its vars: undefined vars: token"
            )
        }
        other => panic!("team main read team a's secret: {other:?}"),
    }
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|p| p.contains("concourse-main")),
        "{seen:?}"
    );
    t.stop().await;
}

on_both_databases!(
    a_one_off_build_reads_its_own_team_s_secrets_and_no_other_s,
    vars_are_resolved_at_creation_and_never_stored,
    a_job_trigger_looks_up_the_pipeline_s_secret_then_the_team_s,
);
