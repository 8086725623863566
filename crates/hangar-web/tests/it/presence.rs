//! A worker's presence (`POST /workers/{name}/presence`): its connection
//! closing without a goodbye stalls the worker at once only when its API
//! refuses connections (the process is gone); a worker that answers, a
//! host that does not answer, a goodbye and a web node that stops stall
//! nobody; only the current registration's own token holds a presence.
//!
//! The presence is spoken over a raw TCP stream, as a worker process's
//! kernel would leave it: dropping the stream closes the connection
//! mid-body, exactly what a SIGKILL does. The worker's API is a fake at the
//! test seam: a port that refuses, a listener that never accepts (a
//! stopped process or a host that does not answer), or a server that
//! answers `/incarnation`.

use hangar_core::WorkerState;
use hangar_store::Store;
use hangar_web::{PresenceEnd, PresenceOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast;

use crate::common::{registration, TestWeb, API_TOKEN, TTL};

/// A worker API address that refuses connections: a port bound, then let go.
async fn refusing_api() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// A worker API that answers its incarnation, as a live process does.
async fn answering_api() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/incarnation",
        axum::routing::get(|| async { axum::Json(serde_json::json!({})) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Registers `name` with its API at `api_url`; returns its token.
async fn register(t: &TestWeb, name: &str, api_url: &str) -> (i64, String) {
    let mut reg = registration(name, &format!("identity-{name}"));
    reg.api_url = Some(api_url.to_string());
    reg.api_token = Some(API_TOKEN.to_string());
    let registered = t.worker.register(&reg).await.unwrap();
    (registered.generation, registered.token)
}

/// Opens `name`'s presence with `token` and reads until web answers:
/// the stream and what web said first (the status line and, when held,
/// `held`).
async fn open(t: &TestWeb, name: &str, token: &str) -> (TcpStream, String) {
    let addr = t.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/workers/{name}/presence HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let said = read_until(&mut stream, |s| s.contains("held\n") || s.ends_with("}")).await;
    (stream, said)
}

/// Reads from `stream` until what it said satisfies `done` or it ends.
async fn read_until(stream: &mut TcpStream, done: impl Fn(&str) -> bool) -> String {
    let mut said = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        said.extend_from_slice(&buf[..n]);
        if done(&String::from_utf8_lossy(&said)) {
            break;
        }
    }
    String::from_utf8_lossy(&said).into_owned()
}

async fn held(t: &TestWeb, name: &str, token: &str) -> TcpStream {
    let (stream, said) = open(t, name, token).await;
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    assert!(said.contains("held\n"), "{said}");
    stream
}

/// The next end of `name`'s presence.
async fn end_of(ends: &mut broadcast::Receiver<PresenceEnd>, name: &str) -> PresenceEnd {
    loop {
        let end = ends.recv().await.unwrap();
        if end.worker == name {
            return end;
        }
    }
}

async fn state(t: &TestWeb, name: &str) -> WorkerState {
    t.web.store().get_worker(name).await.unwrap().unwrap().state
}

async fn a_worker_whose_process_is_gone_is_stalled_at_once(store: Store) {
    let t = TestWeb::start(store).await;
    let (generation, token) = register(&t, "w", &refusing_api().await).await;
    let mut ends = t.web.presence_ends();
    let stream = held(&t, "w", &token).await;
    assert_eq!(t.web.presences_held(), 1);
    // The process dies: its kernel closes the connection mid-body.
    drop(stream);
    let end = end_of(&mut ends, "w").await;
    assert_eq!(
        end,
        PresenceEnd {
            worker: "w".into(),
            generation,
            outcome: PresenceOutcome::Gone { settled: true }
        }
    );
    // No time passed on web's clock: the TTL had nothing to do with it.
    assert_eq!(state(&t, "w").await, WorkerState::Stalled);
    let stalled = &t.admin.events(Some("w"), 10).await.unwrap()[0];
    assert_eq!(stalled.kind.to_string(), "stalled");
    assert!(
        stalled
            .cause
            .starts_with("process gone: its connection to web closed")
            && stalled.cause.contains("refuses connections"),
        "{}",
        stalled.cause
    );
    assert_eq!(t.web.presences_held(), 0);
    t.stop().await;
}

async fn a_worker_that_still_answers_is_left_alone(store: Store) {
    let t = TestWeb::start(store).await;
    let (_, token) = register(&t, "w", &answering_api().await).await;
    let mut ends = t.web.presence_ends();
    drop(held(&t, "w", &token).await);
    assert_eq!(
        end_of(&mut ends, "w").await.outcome,
        PresenceOutcome::Answers
    );
    assert_eq!(state(&t, "w").await, WorkerState::Running);
    t.stop().await;
}

async fn a_host_that_stops_answering_is_left_to_the_ttl(store: Store) {
    let t = TestWeb::start(store).await;
    // A listener nobody accepts on: the kernel completes the handshake and
    // nothing ever answers, as with a stopped process or a host that hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = format!("http://{}", silent.local_addr().unwrap());
    let (_, token) = register(&t, "w", &api).await;
    let mut ends = t.web.presence_ends();
    drop(held(&t, "w", &token).await);
    let end = end_of(&mut ends, "w").await;
    assert!(
        matches!(&end.outcome, PresenceOutcome::NoAnswer(why) if why.contains("did not answer")),
        "{end:?}"
    );
    assert_eq!(state(&t, "w").await, WorkerState::Running);
    // The TTL judges it, as before.
    t.advance(TTL + 1);
    t.lifecycle().await;
    assert_eq!(state(&t, "w").await, WorkerState::Stalled);
    let stalled = &t.admin.events(Some("w"), 10).await.unwrap()[0];
    assert!(
        stalled.cause.starts_with("no heartbeat for"),
        "{}",
        stalled.cause
    );
    drop(silent);
    t.stop().await;
}

async fn a_goodbye_stalls_nobody(store: Store) {
    let t = TestWeb::start(store).await;
    let (_, token) = register(&t, "w", &refusing_api().await).await;
    let mut ends = t.web.presence_ends();
    let mut stream = held(&t, "w", &token).await;
    stream
        .write_all(b"7\r\ngoodbye\r\n0\r\n\r\n")
        .await
        .unwrap();
    let said = read_until(&mut stream, |s| s.contains("goodbye\n")).await;
    assert!(said.contains("goodbye\n"), "{said}");
    drop(stream);
    assert_eq!(
        end_of(&mut ends, "w").await.outcome,
        PresenceOutcome::Goodbye
    );
    assert_eq!(state(&t, "w").await, WorkerState::Running);
    t.stop().await;
}

async fn a_worker_cannot_hold_or_close_another_workers_presence(store: Store) {
    let t = TestWeb::start(store).await;
    let (_, a_token) = register(&t, "a", &refusing_api().await).await;
    let (_, b_token) = register(&t, "b", &answering_api().await).await;
    let mut ends = t.web.presence_ends();
    let a = held(&t, "a", &a_token).await;
    // b's own token does not open a's presence, and does not replace it.
    let (refused, said) = open(&t, "a", &b_token).await;
    assert!(
        said.starts_with("HTTP/1.1 401") || said.starts_with("HTTP/1.1 403"),
        "{said}"
    );
    drop(refused);
    // Nor does the fleet's key: it only registers.
    let (_, said) = open(&t, "a", crate::common::WORKER_KEY).await;
    assert!(
        said.starts_with("HTTP/1.1 401") || said.starts_with("HTTP/1.1 403"),
        "{said}"
    );
    assert_eq!(t.web.presences_held(), 1);
    // b holds its own beside it.
    let b = held(&t, "b", &b_token).await;
    assert_eq!(t.web.presences_held(), 2);
    // a's presence is still a's: its end is judged as a's.
    drop(a);
    let end = end_of(&mut ends, "a").await;
    assert_eq!(end.outcome, PresenceOutcome::Gone { settled: true });
    assert_eq!(state(&t, "b").await, WorkerState::Running);
    drop(b);
    assert_eq!(
        end_of(&mut ends, "b").await.outcome,
        PresenceOutcome::Answers
    );
    t.stop().await;
}

async fn a_second_presence_replaces_the_first(store: Store) {
    let t = TestWeb::start(store).await;
    let (_, token) = register(&t, "w", &refusing_api().await).await;
    let mut ends = t.web.presence_ends();
    let mut first = held(&t, "w", &token).await;
    let second = held(&t, "w", &token).await;
    let said = read_until(&mut first, |s| s.contains("replaced\n")).await;
    assert!(said.contains("replaced\n"), "{said}");
    assert_eq!(
        end_of(&mut ends, "w").await.outcome,
        PresenceOutcome::Replaced
    );
    assert_eq!(t.web.presences_held(), 1);
    // The replaced connection closing says nothing about the worker.
    drop(first);
    assert_eq!(state(&t, "w").await, WorkerState::Running);
    drop(second);
    assert_eq!(
        end_of(&mut ends, "w").await.outcome,
        PresenceOutcome::Gone { settled: true }
    );
    t.stop().await;
}

async fn a_web_node_that_stops_stalls_nobody(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let (_, token) = register(&t, "w", &refusing_api().await).await;
    let mut ends = t.web.presence_ends();
    let mut stream = held(&t, "w", &token).await;
    t.stop().await;
    assert_eq!(
        end_of(&mut ends, "w").await.outcome,
        PresenceOutcome::WebStopping
    );
    let said = read_until(&mut stream, |s| s.contains("web-stopping\n")).await;
    assert!(said.contains("web-stopping\n"), "{said}");
    drop(stream);
    let row = store.get_worker("w").await.unwrap().unwrap();
    assert_eq!(row.state, WorkerState::Running);
}

hangar_testkit::on_both_databases!(
    a_worker_whose_process_is_gone_is_stalled_at_once,
    a_worker_that_still_answers_is_left_alone,
    a_host_that_stops_answering_is_left_to_the_ttl,
    a_goodbye_stalls_nobody,
    a_worker_cannot_hold_or_close_another_workers_presence,
    a_second_presence_replaces_the_first,
    a_web_node_that_stops_stalls_nobody,
);
