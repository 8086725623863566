//! The load balancer in front of several web nodes in a chaos run, as a
//! Kubernetes Service or an HTTP proxy would be: one address the workers
//! and the clients use, each new connection sent to a web node that passed
//! its last readiness probe (`/api/v1/info`). A node that fails a probe
//! (killed, or paused with SIGSTOP) is taken out and its connections are
//! closed, so a client's pooled connection does not hang on it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How often each node is probed, and how long a probe may take.
const PROBE_EVERY: Duration = Duration::from_millis(250);
const PROBE_TIMEOUT: Duration = Duration::from_millis(750);

struct Backend {
    addr: SocketAddr,
    ready: AtomicBool,
    /// Rung when the node is taken out: its open connections close.
    taken_out: Notify,
}

/// A running balancer; dropping it stops nothing (the run ends the process).
pub struct Balancer {
    pub addr: SocketAddr,
    backends: Arc<Vec<Backend>>,
}

impl Balancer {
    /// Listens on `listener` and balances over `nodes`.
    pub fn start(listener: TcpListener, nodes: &[SocketAddr]) -> anyhow::Result<Balancer> {
        let addr = listener.local_addr()?;
        let backends: Arc<Vec<Backend>> = Arc::new(
            nodes
                .iter()
                .map(|&addr| Backend {
                    addr,
                    ready: AtomicBool::new(true),
                    taken_out: Notify::new(),
                })
                .collect(),
        );
        tokio::spawn(probe(backends.clone()));
        tokio::spawn(accept(listener, backends.clone()));
        Ok(Balancer { addr, backends })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many nodes are in rotation now.
    pub fn ready_nodes(&self) -> usize {
        self.backends
            .iter()
            .filter(|b| b.ready.load(Ordering::Relaxed))
            .count()
    }
}

async fn probe(backends: Arc<Vec<Backend>>) {
    let Ok(http) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return;
    };
    loop {
        for b in backends.iter() {
            let url = format!("http://{}{}/info", b.addr, hangar_api::API_PREFIX);
            // Any answer is a live process: `/info` reports a lost
            // database in its body, and the node still serves reads.
            let ready = http.get(&url).send().await.is_ok();
            let was = b.ready.swap(ready, Ordering::Relaxed);
            if was && !ready {
                b.taken_out.notify_waiters();
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

async fn accept(listener: TcpListener, backends: Arc<Vec<Backend>>) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(forward(client, backends.clone(), next.clone()));
    }
}

/// Sends one connection to the next ready node (any node if none is
/// ready: better a refused connection than none).
async fn forward(mut client: TcpStream, backends: Arc<Vec<Backend>>, next: Arc<AtomicUsize>) {
    let n = backends.len();
    let start = next.fetch_add(1, Ordering::Relaxed);
    let order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
    let ready: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| backends[i].ready.load(Ordering::Relaxed))
        .collect();
    let candidates = if ready.is_empty() { order } else { ready };
    for i in candidates {
        let b = &backends[i];
        let connected = tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(b.addr)).await;
        let Ok(Ok(mut server)) = connected else {
            continue;
        };
        let taken_out = b.taken_out.notified();
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
            _ = taken_out => {}
        }
        return;
    }
}
