//! Two network middlemen for the relay's tests, on loopback:
//!
//! - [`Forwarder`]: a TCP forwarder in front of the local server that can **cut every open
//!   connection silently** ([`Forwarder::freeze`]): bytes stop flowing both ways but no socket
//!   is closed, no FIN, no RST, no close frame — what a laptop's sleep or a Wi-Fi change does
//!   to a connection. New connections are forwarded as before.
//! - [`HttpProxy`]: an HTTP forward proxy, `CONNECT` tunnels and absolute-form requests both,
//!   that records the request line of each connection (what went through it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Copies `from` → `to` until either ends or `frozen` is set, after which it holds both ends
/// open, moving nothing.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(Ordering::SeqCst) {
            // Cut: keep both halves alive for good, deliver nothing.
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A TCP forwarder whose open connections can be cut silently.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    open: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Forwarder {
    /// Listens on a free loopback port; connections wait for [`Forwarder::set_target`].
    ///
    /// # Panics
    /// When no port can be bound.
    #[allow(clippy::expect_used)]
    pub async fn bind() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the forwarder");
        let addr = listener.local_addr().expect("its address");
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let open: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (t, o, a) = (Arc::clone(&target), Arc::clone(&open), Arc::clone(&accepted));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let Some(to) = *t.lock().unwrap_or_else(std::sync::PoisonError::into_inner) else { continue };
                let frozen = Arc::new(AtomicBool::new(false));
                o.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Arc::clone(&frozen));
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pump(cr, sw, Arc::clone(&frozen)), pump(sr, cw, frozen));
                });
            }
        });
        Self { addr, target, open, accepted, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where connections go.
    pub fn set_target(&self, to: SocketAddr) {
        *self.target.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(to);
    }

    /// Cuts every connection open now, silently (later ones are forwarded).
    pub fn freeze(&self) {
        for f in self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            f.store(true, Ordering::SeqCst);
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// An HTTP forward proxy on loopback that records each connection's first request line.
#[derive(Debug)]
pub struct HttpProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads up to the end of the request head (bytes after it are kept in the returned buffer).
async fn head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).into_owned();
            return Some((head, got));
        }
        if got.len() > 64 * 1024 {
            return None;
        }
    }
}

impl HttpProxy {
    /// Starts it on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    #[allow(clippy::expect_used)]
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("its address");
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = Arc::clone(&s);
                tokio::spawn(async move {
                    let Some((head, bytes)) = head(&mut client).await else { return };
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line.clone());
                    let mut parts = line.split_whitespace();
                    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
                    let authority = if method == "CONNECT" {
                        target.to_owned()
                    } else {
                        // Absolute form: http://host:port/path — forwarded as it came (servers
                        // accept the absolute form).
                        target.strip_prefix("http://").and_then(|r| r.split('/').next()).unwrap_or_default().to_owned()
                    };
                    let Ok(mut server) = TcpStream::connect(authority.as_str()).await else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n").await;
                        return;
                    };
                    if method == "CONNECT" {
                        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").map_or(bytes.len(), |e| e + 4);
                        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
                            return;
                        }
                        if server.write_all(&bytes[end..]).await.is_err() {
                            return;
                        }
                    } else if server.write_all(&bytes).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        Self { addr, seen, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The first request line of every connection so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
