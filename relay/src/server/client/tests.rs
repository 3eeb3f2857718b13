//! Tests of the relay API client: connections, reports and control answers.

#![allow(clippy::unwrap_used)]

use super::*;

/// A server that answers every request on a kept connection with a control answer (not
/// cancelled), counting the connections it accepted and recording each request's path and
/// whether it carried the relay's report.
struct ControlServer {
    addr: std::net::SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, bool)>>>,
}

impl ControlServer {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Self { addr, accepted: std::sync::Arc::default(), seen: std::sync::Arc::default() };
        let (counted, log) = (std::sync::Arc::clone(&server.accepted), std::sync::Arc::clone(&server.seen));
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let log = std::sync::Arc::clone(&log);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = tcp.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                        while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                            let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                            let reported = head.lines().any(|l| l.starts_with(domain::fleet::RELAY_HEADER));
                            log.lock().unwrap().push((path, reported));
                            got.drain(..end + 4);
                            let body = r#"{"cancel_requested":false}"#;
                            let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                            if tcp.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        server
    }
}

/// After a wake or a network change the relay connects afresh: requests reuse one kept
/// connection until `renew_connections`, and the next opens a new one (a server counting
/// the connections it accepted, each answering any number of requests).
#[tokio::test]
async fn renewed_connections_connect_afresh() {
    use std::sync::atomic::Ordering;
    let server = ControlServer::start().await;
    let (addr, accepted) = (server.addr, std::sync::Arc::clone(&server.accepted));
    let client = Client::new(&format!("http://{addr}"), "fcd_test").unwrap();
    let id = CommandId::generate();
    assert_eq!(client.control(id).await.unwrap(), Control::Go);
    assert_eq!(client.control(id).await.unwrap(), Control::Go);
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the kept connection is reused");
    client.renew_connections();
    assert_eq!(client.control(id).await.unwrap(), Control::Go);
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "renewed: a new connection");
}

/// During a long run (no syncs) the relay still tells the server it is alive: the first
/// control check carries its report, the next ones within a minute do not, and the first
/// one a minute on does again (the server keeps "last seen" to the minute, and the desktop
/// watch marks a desktop without a report offline). A server records which requests
/// carried the header; the minute passes by moving the last report back.
#[tokio::test]
async fn a_long_runs_control_checks_carry_the_report_once_a_minute() {
    let server = ControlServer::start().await;
    let (addr, seen) = (server.addr, std::sync::Arc::clone(&server.seen));
    let client = Client::new(&format!("http://{addr}"), "fcd_test").unwrap();
    let id = CommandId::generate();
    for _ in 0..3 {
        assert_eq!(client.control(id).await.unwrap(), Control::Go);
    }
    // A minute on.
    let back = std::time::Instant::now().checked_sub(domain::fleet::DEVICE_SEEN_GRANULARITY).unwrap();
    *client.transport.reported.lock().unwrap() = Some(back);
    for _ in 0..2 {
        assert_eq!(client.control(id).await.unwrap(), Control::Go);
    }
    let carried: Vec<bool> = seen.lock().unwrap().iter().map(|(_, r)| *r).collect();
    assert_eq!(carried, [true, false, false, true, false], "which control checks carried the report");
}

/// Answers every request with one status and body.
struct Answers(u16, &'static str);

impl Transport for Answers {
    async fn request(
        &self,
        _method: &'static str,
        _path: &str,
        _body: Option<Vec<u8>>,
    ) -> Result<(u16, String), ClientError> {
        Ok((self.0, self.1.to_owned()))
    }
}

/// A control answer's three meanings, from the server's documented bodies: go on, the
/// agent cancelled, the server has the run ended (a `failed` there is a run it stopped
/// waiting for, which the relay may explain).
#[tokio::test]
async fn a_control_answer_tells_cancel_from_a_run_the_server_ended() {
    let id = CommandId::generate();
    let go = Client::over(Answers(200, r#"{"cancel_requested":false,"future_field":1}"#));
    assert_eq!(go.control(id).await.unwrap(), Control::Go);
    let cancel = Client::over(Answers(200, r#"{"cancel_requested":true}"#));
    assert_eq!(cancel.control(id).await.unwrap(), Control::Cancel);
    let ended = Client::over(Answers(200, r#"{"cancel_requested":true,"status":"failed"}"#));
    assert_eq!(ended.control(id).await.unwrap(), Control::Ended("failed".into()));
}

/// The server's own 404 stops the run and drops its completion; a gateway's 404 for a
/// route the stack lacks does neither (the run goes on, the completion stays for later).
#[tokio::test]
async fn only_the_relay_apis_own_404_says_a_command_is_gone() {
    let id = CommandId::generate();
    let c = Completion {
        execution_id: "x".into(),
        status: domain::runs::FinalStatus::Completed,
        result: Some("done".into()),
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    };
    let ours = Client::over(Answers(404, r#"{"error":"command_id: no such command"}"#));
    assert_eq!(ours.control(id).await.unwrap(), Control::Ended("missing".into()));
    assert_eq!(
        ours.progress(id, "x", &domain::progress::Progress::default()).await.unwrap(),
        Control::Ended("missing".into())
    );
    assert!(matches!(ours.complete(id, &c).await.unwrap(), Completed::Conflict(_)));
    assert!(matches!(ours.start(id, "x").await.unwrap(), Started::Refused(_)));
    let gateway = Client::over(Answers(404, r#"{"message":"Not Found"}"#));
    assert!(matches!(gateway.control(id).await, Err(ClientError::Retryable(_))));
    assert!(matches!(
        gateway.progress(id, "x", &domain::progress::Progress::default()).await,
        Err(ClientError::Retryable(_))
    ));
    assert!(matches!(gateway.complete(id, &c).await, Err(ClientError::Retryable(_))));
    assert!(matches!(gateway.start(id, "x").await, Err(ClientError::Retryable(_))));
}
