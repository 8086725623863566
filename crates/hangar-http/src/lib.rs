//! The HTTP server of web and of the worker's API: an axum router on
//! hyper's HTTP/1 connections, with the limits `axum::serve` does not set.
//!
//! - A connection must send a whole request head within
//!   [`Limits::header_read_timeout`], its first and each next one on a
//!   kept-alive connection: idle and slow-header sockets are closed, not
//!   kept for ever.
//! - At most [`Limits::max_connections`] connections are open at once, and
//!   [`Limits::max_per_peer`] from one address: past either, a new
//!   connection is closed as soon as it is accepted. A flood of sockets
//!   cannot take every descriptor of the process (which left a worker unable
//!   to answer web at all).
//!
//! Each request carries its peer's address (`ConnectInfo<SocketAddr>`), as
//! `into_make_service_with_connect_info` gives it, and its connection's
//! place under the caps ([`ConnectionPlace`]): a handler that takes the
//! connection over (an upgraded `intercept` session) holds it for as long
//! as it uses the connection, which so still counts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::Service;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection may take to send a request head (the wait for
    /// the next request on a kept-alive connection included).
    pub header_read_timeout: Duration,
    /// Connections open at once, every peer together.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_per_peer: usize,
}

impl Limits {
    /// Web's: its clients are users, CLIs, workers and, behind an ingress,
    /// one proxy address for all of them.
    pub fn web() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(30),
            max_connections: share_of_descriptors(16_384),
            max_per_peer: 4_096,
        }
    }

    /// A worker's API: its clients are the web nodes and the workers
    /// pulling a volume from it.
    pub fn worker() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(30),
            max_connections: share_of_descriptors(4_096),
            max_per_peer: 1_024,
        }
    }
}

/// `at_most`, or half the process's descriptor limit if that is lower:
/// the rest stays for files, volumes and the database.
fn share_of_descriptors(at_most: usize) -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .clamp(16, at_most)
}

/// Open connections, per peer address and in all.
#[derive(Default)]
struct Open {
    per_peer: HashMap<IpAddr, usize>,
    total: usize,
}

/// One admitted connection; dropping it gives the place back.
struct Admitted {
    open: Arc<Mutex<Open>>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(n) = open.per_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.per_peer.remove(&self.peer);
            }
        }
    }
}

/// A connection's place under the caps, in each of its requests'
/// extensions. The place is given back when the connection closes and
/// every clone is dropped: a handler that upgrades the connection keeps a
/// clone for as long as the upgraded stream lives, else an upgraded
/// session would stop counting once its `101` went out.
#[derive(Clone)]
pub struct ConnectionPlace(#[allow(dead_code)] Arc<Admitted>);

impl ConnectionPlace {
    /// The place of the connection `req` came on, if [`serve`] admitted it.
    pub fn of<B>(req: &axum::http::Request<B>) -> Option<ConnectionPlace> {
        req.extensions().get::<ConnectionPlace>().cloned()
    }
}

/// Why a connection was not admitted, if it was not.
fn admit(open: &Arc<Mutex<Open>>, limits: &Limits, peer: IpAddr) -> Result<Admitted, &'static str> {
    let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
    if o.total >= limits.max_connections {
        return Err("the server holds its most connections");
    }
    let from_peer = o.per_peer.entry(peer).or_insert(0);
    if *from_peer >= limits.max_per_peer {
        return Err("the peer holds its most connections");
    }
    *from_peer += 1;
    o.total += 1;
    Ok(Admitted {
        open: open.clone(),
        peer,
    })
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting and waits for the open connections to finish their requests
/// (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    // Each connection watches this; at shutdown it finishes its request
    // and closes, and `closed` says when all have.
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was
                    // taken: wait a little rather than spin on the error.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admitted = match admit(&open, &limits, peer.ip()) {
            Ok(a) => a,
            Err(why) => {
                tracing::debug!(%peer, "connection closed at once: {why}");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let place = ConnectionPlace(Arc::new(admitted));
        let in_requests = place.clone();
        let service = tower::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(in_requests.clone());
            let mut router = router.clone();
            async move { Ok::<_, Infallible>(router.call(req).await.unwrap_or_else(|e| match e {})) }
        });
        // With upgrades: `intercept` sessions leave HTTP on their connection.
        let conn = http
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .with_upgrades();
        let mut stopping = stop_rx.clone();
        tokio::spawn(async move {
            let _place = place;
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                () = async { drop(stopping.wait_for(|s| *s).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(stopping);
        });
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop.send(true);
    stop.closed().await;
    Ok(())
}

/// For tests: what [`serve`] would admit, given what is open.
#[cfg(test)]
fn admits(total: usize, from_peer: usize, limits: &Limits) -> bool {
    let open = Arc::new(Mutex::new(Open {
        per_peer: HashMap::from([(IpAddr::from([10, 0, 0, 1]), from_peer)]),
        total,
    }));
    admit(&open, limits, IpAddr::from([10, 0, 0, 1])).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn a_connection_is_admitted_below_both_caps_only() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 10,
            max_per_peer: 3,
        };
        for (total, from_peer, admitted) in [
            (0, 0, true),
            (9, 2, true),
            (10, 0, false),
            (5, 3, false),
            (2, 2, true),
        ] {
            assert_eq!(
                admits(total, from_peer, &limits),
                admitted,
                "total {total}, from the peer {from_peer}"
            );
        }
    }

    #[test]
    fn a_closed_connection_gives_its_place_back() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 2,
            max_per_peer: 1,
        };
        let open = Arc::new(Mutex::new(Open::default()));
        let peer = IpAddr::from([127, 0, 0, 1]);
        let first = admit(&open, &limits, peer).unwrap();
        assert!(admit(&open, &limits, peer).is_err());
        let other = admit(&open, &limits, IpAddr::from([127, 0, 0, 2])).unwrap();
        assert!(admit(&open, &limits, IpAddr::from([127, 0, 0, 3])).is_err());
        drop(first);
        drop(other);
        let o = open.lock().unwrap();
        assert_eq!(o.total, 0);
        assert!(o.per_peer.is_empty());
    }

    #[test]
    fn the_connection_cap_never_exceeds_half_the_descriptors() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let cap = share_of_descriptors(1_000_000) as u64;
        assert!(cap <= (soft / 2).max(16), "cap {cap}, soft limit {soft}");
    }

    /// A server on loopback with `limits`, answering `/peer` with the
    /// caller's address as it sees it, and upgrading `/session` to a
    /// session that echoes three bytes, then ends, holding its
    /// connection's place meanwhile (as an `intercept` session does).
    async fn server(limits: Limits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        use axum::routing::get;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route(
                "/peer",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
            )
            .route(
                "/session",
                get(|mut req: Request| async move {
                    let place = ConnectionPlace::of(&req);
                    assert!(place.is_some(), "every request carries its place");
                    let upgrade = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let _place = place;
                        if let Ok(up) = upgrade.await {
                            let mut io = TokioIo::new(up);
                            let mut line = [0u8; 3];
                            if io.read_exact(&mut line).await.is_ok() {
                                let _ = io.write_all(&line).await;
                            }
                        }
                    });
                    axum::response::Response::builder()
                        .status(101)
                        .header("connection", "upgrade")
                        .header("upgrade", "test")
                        .body(axum::body::Body::empty())
                        .unwrap()
                }),
            );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    /// Reads until the server closes the connection (or resets it): true
    /// when it did within `within`.
    async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(within, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    async fn get_peer(addr: SocketAddr) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.starts_with("HTTP/1.1 200")
            .then(|| out.rsplit("\r\n").next().unwrap_or("").to_string())
    }

    /// Whether the server answers `/peer` again within about 4 s: a
    /// place given back is seen once the server notices the close.
    async fn served_again(addr: SocketAddr) -> bool {
        for _ in 0..200 {
            if get_peer(addr).await.is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_header_timeout() {
        let (addr, _stop) = server(Limits {
            header_read_timeout: Duration::from_millis(200),
            max_connections: 100,
            max_per_peer: 100,
        })
        .await;
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(closed_within(&mut idle, Duration::from_secs(20)).await);
        // A connection that sends half a head is closed the same way.
        use tokio::io::AsyncWriteExt;
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /peer HTTP/1.1\r\nhost:")
            .await
            .unwrap();
        assert!(closed_within(&mut slow, Duration::from_secs(20)).await);
        // And the server still answers, naming the caller.
        let peer = get_peer(addr).await.expect("an answer");
        assert!(peer.starts_with("127.0.0.1:"), "{peer}");
    }

    /// An upgraded connection keeps its place while its handler holds the
    /// stream (an `intercept` session), and gives it back when it lets go.
    #[tokio::test]
    async fn an_upgraded_connection_counts_until_its_session_ends() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, _stop) = server(Limits {
            header_read_timeout: Duration::from_secs(60),
            max_connections: 100,
            max_per_peer: 2,
        })
        .await;
        let open_session = || async {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                b"GET /session HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: test\r\n\r\n",
            )
            .await
            .unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                s.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            assert!(
                head.starts_with(b"HTTP/1.1 101"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            s
        };
        let mut sessions = vec![open_session().await, open_session().await];
        // Both sessions are past their 101 and still hold their places: a
        // third connection from the peer is closed at once.
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(closed_within(&mut third, Duration::from_secs(20)).await);
        assert_eq!(
            get_peer(addr).await,
            None,
            "no place while two sessions run"
        );
        // A session that ends gives its place back.
        let mut first = sessions.remove(0);
        first.write_all(b"bye").await.unwrap();
        let mut echoed = [0u8; 3];
        first.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"bye");
        drop(first);
        assert!(
            served_again(addr).await,
            "served again once a session ended"
        );
        drop(sessions);
    }

    #[tokio::test]
    async fn connections_past_a_peers_cap_are_closed_at_once_and_the_place_comes_back() {
        let (addr, _stop) = server(Limits {
            header_read_timeout: Duration::from_secs(60),
            max_connections: 100,
            max_per_peer: 3,
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Give the server the time to accept the three.
        let mut fourth = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(closed_within(&mut fourth, Duration::from_secs(20)).await);
        assert_eq!(
            get_peer(addr).await,
            None,
            "a request past the cap is not served"
        );
        drop(held);
        // The places are given back as the server sees the three close.
        assert!(
            served_again(addr).await,
            "served again once the idle ones closed"
        );
    }
}
