//! What every web test shares: a web node served in-process on port 0 with a
//! manual clock, and clients holding each credential.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hangar_api::RegisterWorker;
use hangar_client::{Client, ClientError};
use hangar_core::LifecycleConfig;
use hangar_store::Store;
use hangar_web::{Clock, Web, WebConfig};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

pub(crate) const ADMIN: &str = "admin-token-0123456789";
pub(crate) const WORKER_KEY: &str = "worker-key-0123456789";
pub(crate) const TTL: i64 = 15_000;
/// What web presents to a test worker's API.
pub(crate) const API_TOKEN: &str = "api-token-of-a-test-worker-0123456789";

pub(crate) struct TestWeb {
    pub url: String,
    pub web: Web,
    pub admin: Client,
    pub worker: Client,
    pub raw: reqwest::Client,
    /// Each registered worker's client, presenting its incarnation token.
    incarnations: Mutex<HashMap<String, Client>>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestWeb {
    /// The text `/metrics` serves now.
    pub(crate) async fn metrics(&self) -> String {
        self.raw
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) async fn start(store: Store) -> TestWeb {
        TestWeb::start_with(store, |_| {}).await
    }

    /// A web node whose configuration `adjust` changes first.
    pub(crate) async fn start_with(store: Store, adjust: impl FnOnce(&mut WebConfig)) -> TestWeb {
        TestWeb::start_at(store, |config, _| adjust(config)).await
    }

    /// A web node whose configuration `adjust` changes first, knowing the
    /// URL web will be served at.
    pub(crate) async fn start_at(
        store: Store,
        adjust: impl FnOnce(&mut WebConfig, &str),
    ) -> TestWeb {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut config = WebConfig {
            admin_token: ADMIN.into(),
            worker_key: WORKER_KEY.into(),
            lifecycle: LifecycleConfig {
                heartbeat_ttl_ms: TTL,
                stalled_worker_timeout_ms: Some(600_000),
            },
            heartbeat_interval_ms: Some(5_000),
            lifecycle_interval: None,
            clock: Clock::manual(1_700_000_000_000),
            run_builds: false,
            gc: Default::default(),
            gc_interval: None,
            check_interval: None,
            scheduler_interval: None,
            no_worker_timeout: hangar_web::DEFAULT_NO_WORKER_TIMEOUT,
            keep_failed_containers: Default::default(),
            placement: Default::default(),
            accept_new_database: false,
            metrics_require_token: false,
            credentials: None,
            auth: Default::default(),
            team_worker_keys: Default::default(),
            named_worker_keys: Default::default(),
            token_review: None,
            http_limits: hangar_http::Limits::web(),
        };
        adjust(&mut config, &url);
        let web = Web::new(store, config).unwrap();
        let shutdown = CancellationToken::new();
        web.seal_stored_api_tokens().await.unwrap();
        web.write_main_team_auth().await.unwrap();
        // The node as the `web` command runs it: its loops beside the
        // server, both stopped by one token.
        let node = web.clone();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let loops = hangar_web::Supervisor::start(node.control(), stop.clone());
            let served = hangar_web::serve(listener, node, stop).await;
            loops.stop().await;
            served
        });
        let timeout = Duration::from_secs(10);
        TestWeb {
            admin: Client::new(&url, ADMIN, timeout).unwrap(),
            worker: Client::new(&url, WORKER_KEY, timeout).unwrap(),
            raw: reqwest::Client::new(),
            incarnations: Mutex::default(),
            url,
            web,
            shutdown,
            task,
        }
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }

    pub(crate) fn advance(&self, ms: i64) {
        self.web.config().clock.advance(ms);
    }

    pub(crate) async fn lifecycle(&self) {
        self.web.control().run_lifecycle_once().await.unwrap();
    }

    pub(crate) async fn register(&self, name: &str, identity: &str) -> i64 {
        self.register_with(&registration(name, identity)).await.0
    }

    /// Registers with the fleet key and keeps the worker's own client (its
    /// incarnation token) for [`TestWeb::as_worker`].
    pub(crate) async fn register_with(&self, reg: &RegisterWorker) -> (i64, Client) {
        let registered = self.worker.register(reg).await.unwrap();
        let client = self.worker.with_token(&registered.token);
        self.incarnations
            .lock()
            .unwrap()
            .insert(reg.name.clone(), client.clone());
        (registered.generation, client)
    }

    /// The client of the latest registration of `name`.
    pub(crate) fn as_worker(&self, name: &str) -> Client {
        self.incarnations.lock().unwrap()[name].clone()
    }

    /// The whole visible state, to check that a refused request changed nothing.
    pub(crate) async fn snapshot(&self) -> String {
        let workers = self.admin.workers().await.unwrap();
        let events = self.admin.events(None, 1000).await.unwrap();
        format!("{workers:?}{events:?}")
    }
}

pub(crate) fn registration(name: &str, identity: &str) -> RegisterWorker {
    RegisterWorker {
        name: name.into(),
        state_identity: identity.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types: vec![],
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        previous_exit: None,
        api_token: None,
        last_generation: None,
        allow_privileged: false,
    }
}

pub(crate) fn api_code(err: ClientError) -> (StatusCode, String) {
    match err {
        ClientError::Api { status, code, .. } => (status, code),
        other => panic!("expected an API error, got {other}"),
    }
}

/// A dashboard page as a logged-in person sees it (`path` from the root,
/// e.g. `/teams/main/pipelines/p`), failing the test unless it is 200.
pub(crate) async fn dashboard_page(t: &TestWeb, path: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(format!("{}/login", t.url))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()[reqwest::header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = http
        .get(format!("{}{path}", t.url))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    page.text().await.unwrap()
}

/// A local user `name` with `password` (bcrypt at its cheapest cost: the
/// tests log in often).
pub(crate) fn local_user(name: &str, password: &str) -> hangar_web::LocalUser {
    let hash = bcrypt::hash(password, 4).unwrap();
    hangar_web::LocalUser::parse(&format!("{name}:{hash}")).unwrap()
}
