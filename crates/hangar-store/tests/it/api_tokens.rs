//! Each worker's API token is kept sealed at rest, bound to its row: the
//! raw column never holds the token, a value copied onto another row, one
//! altered, or one read with another key opens to nothing (an error, never
//! another token), and tokens stored in plaintext before are sealed in
//! place. On SQLite and PostgreSQL alike; each test reads and writes the
//! column behind the store's back through a connection of its own.

use hangar_store::{Credentials, Expect, Registration, Store, StoreError, WorkerTokenKey};
use hangar_testkit::raw::RawDb;
use hangar_testkit::worker_info;

const T0: i64 = 1_700_000_000_000;
const ADMIN: &str = "admin-token-0123456789";
const TOKEN_1: &str = "api-token-of-worker-one-0123456789abcdef";
const TOKEN_2: &str = "api-token-of-worker-two-0123456789abcdef";

fn key(secret: &str) -> WorkerTokenKey {
    WorkerTokenKey::derive(secret.as_bytes(), "the admin token")
}

/// One database, its URL, and what keeps a SQLite file alive.
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

    /// A store on this database, keyed with `secret` (none: no key).
    async fn store(&self, secret: Option<&str>) -> Store {
        let store = Store::open(&self.url).await.unwrap();
        match secret {
            Some(s) => store.with_worker_token_key(key(s)),
            None => store,
        }
    }

    async fn column(&self, worker: &str) -> Option<String> {
        self.raw.worker_api_token(worker).await
    }

    async fn set_column(&self, worker: &str, value: &str) {
        self.raw.set_worker_api_token(worker, value).await
    }

    async fn rows(&self) -> i64 {
        self.raw.worker_rows().await
    }
}

async fn register(store: &Store, name: &str, token: &str) -> Result<i64, StoreError> {
    let mut info = worker_info(name);
    info.api_url = Some(format!("http://{name}.invalid:7788"));
    store
        .register_incarnation(
            &Registration {
                info: &info,
                previous_exit: None,
                credentials: Some(Credentials {
                    token_hash: "digest",
                    api_token: Some(token),
                }),
                expect: Expect::Anything,
                generation_floor: 0,
                accept_unissued_generation: false,
            },
            T0,
        )
        .await
        .map(|o| o.generation)
}

async fn token_of(store: &Store, worker: &str) -> Result<Option<String>, StoreError> {
    store
        .worker_api_endpoint(worker)
        .await
        .map(|e| e.and_then(|(_, token)| token))
}

fn sealed_message<T: std::fmt::Debug>(read: Result<T, StoreError>) -> String {
    match read {
        Err(StoreError::Sealed(message)) => message,
        other => panic!("expected Sealed, got {other:?}"),
    }
}

async fn the_column_holds_the_token_only_sealed(db: Db) {
    let store = db.store(Some(ADMIN)).await;
    register(&store, "w1", TOKEN_1).await.unwrap();
    let raw = db.column("w1").await.unwrap();
    assert!(raw.starts_with("v1:"), "{raw}");
    assert!(!raw.contains(TOKEN_1), "{raw}");
    assert_eq!(
        token_of(&store, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );
    let holder = store.worker_incumbent("w1").await.unwrap().unwrap();
    assert_eq!(holder.api_token.as_deref(), Some(TOKEN_1));
    // Another node of the installation (same secret) reads it too.
    let other_node = db.store(Some(ADMIN)).await;
    assert_eq!(
        token_of(&other_node, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );
    // Registering again seals anew (another nonce), never in the clear.
    register(&store, "w1", TOKEN_2).await.unwrap();
    let again = db.column("w1").await.unwrap();
    assert!(again.starts_with("v1:") && again != raw && !again.contains(TOKEN_2));
    assert_eq!(
        token_of(&store, "w1").await.unwrap().as_deref(),
        Some(TOKEN_2)
    );
}

async fn without_a_key_no_token_is_written_or_read(db: Db) {
    let keyless = db.store(None).await;
    let message = sealed_message(register(&keyless, "w1", TOKEN_1).await);
    assert!(message.contains("no key"), "{message}");
    assert_eq!(db.rows().await, 0, "a refused registration wrote a row");
    sealed_message(keyless.seal_plaintext_api_tokens().await);

    let store = db.store(Some(ADMIN)).await;
    register(&store, "w1", TOKEN_1).await.unwrap();
    let message = sealed_message(token_of(&keyless, "w1").await);
    assert!(
        message.contains("w1") && message.contains("no key"),
        "{message}"
    );
}

async fn another_key_opens_nothing_and_says_why(db: Db) {
    let store = db.store(Some(ADMIN)).await;
    register(&store, "w1", TOKEN_1).await.unwrap();
    let rotated = db.store(Some("another-admin-token-0123")).await;
    let message = sealed_message(token_of(&rotated, "w1").await);
    for part in ["w1", "does not open", "the admin token", "registers again"] {
        assert!(message.contains(part), "{part}: {message}");
    }
    // A holder whose token does not open cannot be probed with it.
    let holder = rotated.worker_incumbent("w1").await.unwrap().unwrap();
    assert_eq!(holder.api_token, None);
    assert!(holder.api_url.is_some());
    // The start pass lists it and leaves it as it was.
    let before = db.column("w1").await;
    let found = rotated.seal_plaintext_api_tokens().await.unwrap();
    assert!(found.sealed.is_empty());
    assert_eq!(found.unreadable.len(), 1);
    assert_eq!(found.unreadable[0].0, "w1");
    assert!(found.unreadable[0].1.contains("does not open"));
    assert_eq!(db.column("w1").await, before);
    // Once the worker registers again at this node, it is sealed anew.
    register(&rotated, "w1", TOKEN_1).await.unwrap();
    assert_eq!(
        token_of(&rotated, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );
}

async fn a_value_copied_to_another_row_or_altered_opens_nothing(db: Db) {
    let store = db.store(Some(ADMIN)).await;
    register(&store, "w1", TOKEN_1).await.unwrap();
    register(&store, "w2", TOKEN_2).await.unwrap();
    let w1 = db.column("w1").await.unwrap();

    db.set_column("w2", &w1).await;
    let message = sealed_message(token_of(&store, "w2").await);
    assert!(
        message.contains("w2") && message.contains("another worker"),
        "{message}"
    );
    assert_eq!(
        store
            .worker_incumbent("w2")
            .await
            .unwrap()
            .unwrap()
            .api_token,
        None
    );
    assert_eq!(
        token_of(&store, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );

    // One character of the sealed value changed, the value cut short, or
    // garbage under the prefix.
    let mut flipped = w1.clone().into_bytes();
    let last = flipped.len() - 2;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    for altered in [
        flipped.as_str(),
        &w1[..w1.len() - 4],
        "v1:AAAA",
        "v1:not base64!",
        "v9:AAAA",
        "plaintext with spaces",
    ] {
        db.set_column("w1", altered).await;
        let message = sealed_message(token_of(&store, "w1").await);
        assert!(message.contains("w1"), "{altered}: {message}");
    }
    let oversized = format!("v1:{}", "A".repeat(hangar_store::MAX_STORED_LEN));
    db.set_column("w1", &oversized).await;
    let message = sealed_message(token_of(&store, "w1").await);
    assert!(message.contains("not written by web"), "{message}");
}

async fn tokens_stored_in_plaintext_are_sealed_in_place(db: Db) {
    let store = db.store(Some(ADMIN)).await;
    for (name, token) in [("w1", TOKEN_1), ("w2", TOKEN_2), ("w3", TOKEN_1)] {
        register(&store, name, token).await.unwrap();
    }
    let w2_before = db.column("w2").await;
    // w1 as a web node of the version before wrote it; w3 sealed by a node
    // with another key.
    db.set_column("w1", TOKEN_1).await;
    let foreign = db.store(Some("another-admin-token-0123")).await;
    register(&foreign, "w3", TOKEN_1).await.unwrap();

    // Read as it is until then (older nodes may still write such rows).
    assert_eq!(
        token_of(&store, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );

    let found = store.seal_plaintext_api_tokens().await.unwrap();
    assert_eq!(found.sealed, vec!["w1".to_string()]);
    assert_eq!(
        found
            .unreadable
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        vec!["w3"]
    );
    let w1 = db.column("w1").await.unwrap();
    assert!(w1.starts_with("v1:") && !w1.contains(TOKEN_1), "{w1}");
    assert_eq!(
        token_of(&store, "w1").await.unwrap().as_deref(),
        Some(TOKEN_1)
    );
    assert_eq!(
        db.column("w2").await,
        w2_before,
        "a sealed value was rewritten"
    );

    // Again: nothing left to seal.
    let again = store.seal_plaintext_api_tokens().await.unwrap();
    assert!(again.sealed.is_empty());
    assert_eq!(db.column("w1").await.unwrap(), w1);
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
    the_column_holds_the_token_only_sealed,
    without_a_key_no_token_is_written_or_read,
    another_key_opens_nothing_and_says_why,
    a_value_copied_to_another_row_or_altered_opens_nothing,
    tokens_stored_in_plaintext_are_sealed_in_place,
);
