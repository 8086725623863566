//! Web keeps each worker's API token sealed with a key from the admin
//! token, bound to the worker's row: a copy of the database holds no usable
//! worker credential, and a stored value that does not open (copied from
//! another row, altered, sealed under another admin token) is never
//! presented to anyone. Tokens a web of the version before stored in
//! plaintext are sealed when web starts. On SQLite and PostgreSQL alike;
//! each test reads and writes the column behind web's back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{api_code, registration, TestWeb};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use hangar_api::CreateVolume;
use hangar_client::{Client, ClientError};
use hangar_store::Store;
use hangar_testkit::raw::RawDb;

const TOKEN_1: &str = "api-token-of-worker-one-0123456789abcdef";
const TOKEN_2: &str = "api-token-of-worker-two-0123456789abcdef";
const OTHER_ADMIN: &str = "another-admin-token-0123456789";

/// One database shared by the web nodes of a test, and a connection of
/// the test's own to it.
struct Db {
    url: String,
    raw: RawDb,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    async fn sqlite() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = hangar_testkit::sqlite_file_url(dir.path());
        Store::open(&url).await.unwrap();
        Db::connect(url, Some(dir)).await
    }

    async fn postgres() -> Db {
        let (_, url) = hangar_testkit::postgres_store_with_url().await;
        Db::connect(url, None).await
    }

    async fn connect(url: String, dir: Option<tempfile::TempDir>) -> Db {
        let raw = RawDb::connect(&url).await;
        Db {
            url,
            raw,
            _dir: dir,
        }
    }

    /// A web node on this database with the test admin token.
    async fn web(&self) -> TestWeb {
        TestWeb::start(Store::open(&self.url).await.unwrap()).await
    }

    async fn column(&self, worker: &str) -> String {
        self.raw.worker_api_token(worker).await.unwrap()
    }

    async fn set_column(&self, worker: &str, value: &str) {
        self.raw.set_worker_api_token(worker, value).await
    }
}

/// What a fake worker API was sent: each request's Authorization.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// A fake worker API that records what it is sent and answers 418.
async fn recorder() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |_: Uri, headers: HeaderMap| {
        let record = record.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            record.lock().unwrap().push(auth);
            StatusCode::IM_A_TEAPOT.into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

async fn register(t: &TestWeb, name: &str, api_url: &str, token: &str) {
    let mut reg = registration(name, &format!("{name}-identity"));
    reg.api_url = Some(api_url.into());
    reg.api_token = Some(token.into());
    t.register_with(&reg).await;
}

fn create(worker: &str) -> CreateVolume {
    CreateVolume {
        worker: worker.into(),
        strategy: hangar_api::Strategy::Empty,
        parent: None,
        import_path: None,
        owner_kind: hangar_api::OwnerKind::TaskCache,
        owner_id: None,
    }
}

/// The message of a refused volume request.
fn refused(result: Result<hangar_api::Volume, ClientError>) -> String {
    match result {
        Err(ClientError::Api { message, .. }) => message,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

async fn the_database_holds_no_token_and_web_still_presents_it(db: Db) {
    let t = db.web().await;
    let (url, seen) = recorder().await;
    register(&t, "w1", &url, TOKEN_1).await;
    let raw = db.column("w1").await;
    assert!(raw.starts_with("v1:"), "{raw}");
    assert!(!raw.contains(TOKEN_1), "{raw}");

    assert!(t.admin.create_volume(&create("w1")).await.is_err());
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "web never called the worker");
    assert!(seen.iter().all(|a| *a == bearer(TOKEN_1)), "{seen:?}");
    t.stop().await;
}

async fn a_token_copied_to_another_workers_row_is_never_presented(db: Db) {
    let t = db.web().await;
    let (url_1, seen_1) = recorder().await;
    let (url_2, seen_2) = recorder().await;
    register(&t, "w1", &url_1, TOKEN_1).await;
    register(&t, "w2", &url_2, TOKEN_2).await;
    db.set_column("w2", &db.column("w1").await).await;

    let message = refused(t.admin.create_volume(&create("w2")).await);
    assert!(
        message.contains("w2") && message.contains("does not open"),
        "{message}"
    );
    // Nor is the copied row's holder probed with anything: a registration
    // under its name while it heartbeats is refused, not let through.
    let err = t
        .worker
        .register(&registration("w2", "w2-identity"))
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::CONFLICT);
    assert!(seen_1.lock().unwrap().is_empty());
    assert!(
        seen_2.lock().unwrap().is_empty(),
        "web called w2 with a token"
    );

    // w1's own row is untouched.
    assert!(t.admin.create_volume(&create("w1")).await.is_err());
    let seen = seen_1.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|a| *a == bearer(TOKEN_1)),
        "{seen:?}"
    );
    assert!(seen_2.lock().unwrap().is_empty());
    t.stop().await;
}

async fn a_tampered_token_is_never_presented(db: Db) {
    let t = db.web().await;
    let (url, seen) = recorder().await;
    register(&t, "w1", &url, TOKEN_1).await;
    let mut raw = db.column("w1").await.into_bytes();
    let i = raw.len() / 2;
    raw[i] = if raw[i] == b'A' { b'B' } else { b'A' };
    db.set_column("w1", &String::from_utf8(raw).unwrap()).await;

    let message = refused(t.admin.create_volume(&create("w1")).await);
    assert!(
        message.contains("w1") && message.contains("does not open"),
        "{message}"
    );
    assert!(seen.lock().unwrap().is_empty(), "web called the worker");
    t.stop().await;
}

async fn another_admin_token_opens_nothing_and_says_why(db: Db) {
    let t = db.web().await;
    let (url, seen) = recorder().await;
    register(&t, "w1", &url, TOKEN_1).await;
    t.stop().await;

    let store = Store::open(&db.url).await.unwrap();
    let rotated = TestWeb::start_with(store, |c| c.admin_token = OTHER_ADMIN.into()).await;
    let admin = Client::new(&rotated.url, OTHER_ADMIN, Duration::from_secs(10)).unwrap();
    let err = admin.create_volume(&create("w1")).await;
    let message = refused(err);
    for part in ["w1", "does not open", "the admin token", "registers again"] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(seen.lock().unwrap().is_empty(), "web called the worker");
    // The start pass left the value alone.
    assert!(db.column("w1").await.starts_with("v1:"));
    // The worker registering again (after its TTL: web cannot ask the
    // holder) is sealed under the new key, and called with its token.
    rotated.advance(crate::common::TTL);
    register(&rotated, "w1", &url, TOKEN_1).await;
    assert!(admin.create_volume(&create("w1")).await.is_err());
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|a| *a == bearer(TOKEN_1)),
        "{seen:?}"
    );
    rotated.stop().await;
}

async fn a_token_stored_in_plaintext_is_sealed_when_web_starts(db: Db) {
    let t = db.web().await;
    let (url, seen) = recorder().await;
    register(&t, "w1", &url, TOKEN_1).await;
    t.stop().await;
    // As web stored it before tokens were sealed.
    db.set_column("w1", TOKEN_1).await;

    let t = db.web().await;
    // Any answer comes after the start pass.
    t.admin.workers().await.unwrap();
    let raw = db.column("w1").await;
    assert!(raw.starts_with("v1:") && !raw.contains(TOKEN_1), "{raw}");
    assert!(t.admin.create_volume(&create("w1")).await.is_err());
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|a| *a == bearer(TOKEN_1)),
        "{seen:?}"
    );
    t.stop().await;
}

macro_rules! on_both {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::Db::sqlite().await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::Db::postgres().await).await
                }
            )*
        }
    };
}

on_both!(
    the_database_holds_no_token_and_web_still_presents_it,
    a_token_copied_to_another_workers_row_is_never_presented,
    a_tampered_token_is_never_presented,
    another_admin_token_opens_nothing_and_says_why,
    a_token_stored_in_plaintext_is_sealed_when_web_starts,
);
