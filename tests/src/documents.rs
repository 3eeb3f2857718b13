//! An HTTPS host for Client ID Metadata Documents on loopback, as a client (Claude, ChatGPT)
//! hosts its own: each path answers what the test set — a document with its cache headers, a
//! redirect, a status, a body past the size cap, or nothing for a long time — and every request
//! is counted. The certificate is the fixture `loopback-tls-cert.pem` (self-signed for
//! `localhost` and `127.0.0.1`): only the servers' development switch for loopback document
//! hosts accepts it, which is the point.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one path answers.
#[derive(Debug, Clone)]
pub enum Answer {
    /// `200` with this JSON and `Cache-Control` (if any).
    Json(serde_json::Value, Option<String>),
    /// `200` with these bytes exactly (a host's own document, as published) as JSON.
    Raw(Vec<u8>),
    /// This status with an HTML page (a bot wall's challenge).
    Page(u16),
    /// `302` to this location.
    Redirect(String),
    /// This status, empty.
    Status(u16),
    /// `200` with this many bytes of JSON-looking padding.
    Big(usize),
    /// The same padding sent chunked, in 1 KiB chunks, with no `Content-Length`: only a cap
    /// on what is read stops it.
    Chunked(usize),
    /// Nothing, for this long.
    Hang(Duration),
}

/// The host.
pub struct DocumentHost {
    /// Where it listens.
    pub addr: SocketAddr,
    answers: Mutex<HashMap<String, Answer>>,
    hits: AtomicUsize,
    gate: Mutex<Option<Arc<tokio::sync::Barrier>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DocumentHost {
    /// Starts one on 127.0.0.1.
    ///
    /// # Panics
    /// When the fixture certificate cannot be read or the port cannot be bound.
    #[allow(clippy::expect_used)]
    pub async fn start() -> Arc<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("loopback-tls-cert.pem"))
            .expect("the fixture certificate")
            .collect::<Result<_, _>>()
            .expect("the fixture certificate parses");
        let key = PrivateKeyDer::from_pem_file(dir.join("loopback-tls-key.pem")).expect("the fixture key");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("a TLS server configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let host =
            Arc::new(Self { addr, answers: Mutex::default(), hits: AtomicUsize::new(0), gate: Mutex::default() });
        let serving = Arc::clone(&host);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, host) = (acceptor.clone(), Arc::clone(&serving));
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        host.serve(tls).await;
                    }
                });
            }
        });
        host
    }

    /// `https://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// Makes `path` answer `answer`.
    pub fn set(&self, path: &str, answer: Answer) {
        lock(&self.answers).insert(path.to_owned(), answer);
    }

    /// Serves `doc` at `path` with `client_id` set to its URL; the URL.
    pub fn document(&self, path: &str, mut doc: serde_json::Value, cache_control: Option<&str>) -> String {
        let url = self.url(path);
        doc["client_id"] = serde_json::Value::String(url.clone());
        self.set(path, Answer::Json(doc, cache_control.map(str::to_owned)));
        url
    }

    /// From now on holds each answer until `n` requests are waiting, then gives them all at
    /// once (callers in lockstep from there on: the way a race is made to happen).
    pub fn gather(&self, n: usize) {
        *lock(&self.gate) = Some(Arc::new(tokio::sync::Barrier::new(n)));
    }

    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    async fn serve(&self, mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&head);
        let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
        self.hits.fetch_add(1, Ordering::SeqCst);
        let gate = lock(&self.gate).clone();
        if let Some(gate) = gate {
            gate.wait().await;
        }
        let answer = lock(&self.answers).get(&path).cloned().unwrap_or(Answer::Status(404));
        if let Answer::Chunked(n) = answer {
            let head = "HTTP/1.1 200 X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            let _ = tls.write_all(head.as_bytes()).await;
            let mut left = n;
            while left > 0 {
                let size = left.min(1024);
                let chunk = format!("{size:x}\r\n{}\r\n", " ".repeat(size));
                if tls.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
                left -= size;
            }
            let _ = tls.write_all(b"0\r\n\r\n").await;
            let _ = tls.shutdown().await;
            return;
        }
        let (status, headers, body) = match answer {
            Answer::Json(v, cc) => {
                let cc = cc.map(|c| format!("cache-control: {c}\r\n")).unwrap_or_default();
                (200, format!("content-type: application/json\r\n{cc}"), v.to_string().into_bytes())
            }
            Answer::Raw(bytes) => (200, "content-type: application/json\r\n".into(), bytes),
            Answer::Page(status) => (
                status,
                "content-type: text/html; charset=UTF-8\r\n".into(),
                b"<!DOCTYPE html><html><head><title>Just a moment...</title></head><body></body></html>".to_vec(),
            ),
            Answer::Redirect(to) => (302, format!("location: {to}\r\n"), Vec::new()),
            Answer::Status(s) => (s, String::new(), Vec::new()),
            Answer::Big(n) => (200, "content-type: application/json\r\n".into(), vec![b' '; n]),
            Answer::Chunked(_) => return,
            Answer::Hang(d) => {
                tokio::time::sleep(d).await;
                (200, String::new(), Vec::new())
            }
        };
        let response =
            format!("HTTP/1.1 {status} X\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n", body.len());
        let _ = tls.write_all(response.as_bytes()).await;
        let _ = tls.write_all(&body).await;
        let _ = tls.shutdown().await;
    }
}
