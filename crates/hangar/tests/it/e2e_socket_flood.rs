//! A flood of idle sockets against a live worker's API, from an address
//! of its own (127.0.0.2), does not make the worker look dead: the
//! worker (started with `--http-max-connections-per-client 64`) closes
//! the flood's sockets past its cap as soon as it accepts them, goes on
//! heartbeating, and web's takeover probe, from web's address, still
//! reaches it, so a registration of another process under its name is
//! refused. Real web and worker processes on loopback.

// The cluster helpers block; the test runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, Cluster, KEY};
use hangar_api::{codes, RegisterWorker};
use tokio::io::AsyncReadExt;

const CAP: usize = 64;
/// More than the cap, fewer than the test process's own descriptors.
const FLOOD: usize = 400;

fn impostor(name: &str) -> RegisterWorker {
    RegisterWorker {
        name: name.into(),
        state_identity: "an-impostor-s-disk".into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types: vec![],
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: Some("http://127.0.0.1:9".into()),
        previous_exit: None,
        api_token: Some("an-impostor-s-api-token-0123456789".into()),
        last_generation: None,
        allow_privileged: false,
    }
}

/// Opens `n` connections to `addr` from 127.0.0.2 and keeps them idle;
/// answers the sockets, and how many the server closed within 3 s.
async fn flood(addr: std::net::SocketAddr, n: usize) -> (Vec<tokio::net::TcpStream>, usize) {
    let mut sockets = Vec::new();
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        sockets.push(socket.connect(addr).await.unwrap());
    }
    // A socket the server closed reads its end at once; one it keeps
    // reads nothing (the flood sends nothing).
    let mut reads = tokio::task::JoinSet::new();
    for mut s in sockets {
        reads.spawn(async move {
            let mut byte = [0u8; 1];
            let closed = matches!(
                tokio::time::timeout(Duration::from_secs(3), s.read(&mut byte)).await,
                Ok(Ok(0)) | Ok(Err(_))
            );
            (s, closed)
        });
    }
    let (mut kept, mut closed) = (Vec::new(), 0);
    while let Some(r) = reads.join_next().await {
        let (s, was_closed) = r.unwrap();
        if was_closed {
            closed += 1;
        } else {
            kept.push(s);
        }
    }
    (kept, closed)
}

#[test]
fn e2e_an_idle_socket_flood_neither_fells_a_live_worker_nor_lets_its_name_be_taken() {
    let c = Cluster::start();
    let name = "flooded";
    let _worker = c.worker_with(
        name,
        &c.work_dir(name),
        &["--http-max-connections-per-client", &CAP.to_string()],
    );
    let workers = c.wait_until("the worker runs", |ws| has(ws, name, "running"));
    let api = workers
        .iter()
        .find(|w| w.name == name)
        .and_then(|w| w.api_url.clone())
        .expect("the worker's API URL");
    let addr: std::net::SocketAddr = api.trim_start_matches("http://").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (kept, closed) = rt.block_on(flood(addr, FLOOD));
    assert!(
        kept.len() <= CAP,
        "{} idle sockets from one address held open; the cap is {CAP}",
        kept.len()
    );
    assert!(closed >= FLOOD - CAP, "only {closed} of {FLOOD} closed");
    // With the flood still open: another process claiming the name is
    // refused, because web's probe still reaches the live worker.
    let fleet = hangar_client::Client::new(&c.url, KEY, Duration::from_secs(30)).unwrap();
    match rt.block_on(fleet.register(&impostor(name))) {
        Err(e) => assert_eq!(e.code(), Some(codes::TAKEOVER_REFUSED), "{e}"),
        Ok(r) => panic!("the impostor took the name: {r:?}"),
    }
    // And the worker goes on: still running a few heartbeats later.
    std::thread::sleep(Duration::from_secs(2));
    let state = c.state_of(name);
    assert_eq!(state.as_deref(), Some("running"));
    drop(kept);
}
