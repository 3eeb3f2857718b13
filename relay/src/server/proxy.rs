//! Outbound proxies, read once from the environment the relay runs in (the launchd agent's or
//! systemd unit's variables, which `relay install` copies from the installing shell), and used
//! the same way by the HTTPS calls and the doorbell's WebSocket.
//!
//! The variables are the ones curl and the Rust HTTP stack read: `https_proxy` / `HTTPS_PROXY`
//! for `https://` and `wss://`, `http_proxy` / `HTTP_PROXY` for `http://` and `ws://`,
//! `all_proxy` / `ALL_PROXY` for either when the specific one is unset, and `no_proxy` /
//! `NO_PROXY` for hosts reached directly (the lower-case spelling wins when both are set, as in
//! curl). `NO_PROXY` is a comma-separated list of host names (a name also matches its
//! subdomains; a leading `.` is allowed), IP addresses, or `*` for everything.
//!
//! Only `http://` proxies are supported (the common corporate kind: `CONNECT` tunnels for TLS,
//! the doorbell's socket tunnelled the same way). A `socks5://` or `https://` proxy is reported
//! by `relay check` and at start-up, and the relay then connects directly.

use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The proxy variables, upper-case spelling (each is also read in lower case).
pub const VARIABLES: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"];

/// An `http://` proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// Host name or address.
    pub host: String,
    /// Port (80 when the URL gives none, as for any `http://` URL).
    pub port: u16,
    /// `user:password` from the URL, sent as `Proxy-Authorization: Basic`.
    pub credentials: Option<String>,
}

impl Proxy {
    /// `http://host:port` with its credentials, for the HTTP client.
    pub fn url(&self) -> String {
        match &self.credentials {
            Some(c) => format!("http://{c}@{}:{}", self.host, self.port),
            None => format!("http://{}:{}", self.host, self.port),
        }
    }
}

/// What the environment says about proxies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxies {
    https: Option<Proxy>,
    http: Option<Proxy>,
    no_proxy: Vec<String>,
    /// Variables that were set but cannot be used (a `socks5://` proxy), with why.
    pub unsupported: Vec<String>,
}

/// `value` of the first of `NAME` in lower case, then upper case, that is set and not empty.
fn var(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<(String, String)> {
    [name.to_ascii_lowercase(), name.to_owned()]
        .into_iter()
        .find_map(|n| lookup(&n).filter(|v| !v.trim().is_empty()).map(|v| (n, v.trim().to_owned())))
}

/// Parses a proxy URL (`http://[user:pass@]host[:port][/]`, or `host:port` alone).
///
/// # Errors
/// Another scheme, or no host: the message says which.
pub fn parse_proxy(value: &str) -> Result<Proxy, String> {
    let rest = match value.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "{scheme}:// proxies are not supported (only http:// proxies, which tunnel HTTPS with CONNECT)"
            ));
        }
        None => value,
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (credentials, hostport) = match authority.rsplit_once('@') {
        Some((c, h)) => (Some(c.to_owned()), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("an IPv6 address without its closing ]")?;
        (h.to_owned(), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (hostport.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("port {p:?} is not a number from 1 to 65535"))?,
        None => 80,
    };
    Ok(Proxy { host, port, credentials })
}

impl Proxies {
    /// From the relay's own environment.
    pub fn from_env() -> Self {
        Self::from_lookup(&|n| std::env::var(n).ok())
    }

    /// From variables given as pairs (the agent's environment, read from its service file).
    pub fn from_pairs(pairs: &[(String, String)]) -> Self {
        Self::from_lookup(&|n| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    /// From any lookup of variables.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut out = Self::default();
        let mut read = |name: &str| {
            let (n, v) = var(lookup, name)?;
            parse_proxy(&v).map_err(|e| out.unsupported.push(format!("{n}={v}: {e}"))).ok()
        };
        let all = read("ALL_PROXY");
        let https = read("HTTPS_PROXY");
        let http = read("HTTP_PROXY");
        out.https = https.or_else(|| all.clone());
        out.http = http.or(all);
        out.no_proxy = var(lookup, "NO_PROXY")
            .map(|(_, v)| {
                v.split(',')
                    .map(|e| e.trim().trim_start_matches('.').to_ascii_lowercase())
                    .filter(|e| !e.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        out
    }

    /// These proxies with `other`'s `NO_PROXY` entries added to the bypass list.
    pub fn with_bypass(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.no_proxy.extend(other.no_proxy.iter().cloned());
        out
    }

    /// The proxies in use, for a log line or `relay check` (never credentials).
    pub fn describe(&self) -> String {
        let show =
            |p: &Option<Proxy>| p.as_ref().map_or_else(|| "direct".to_owned(), |p| format!("{}:{}", p.host, p.port));
        format!("https {}, http {}", show(&self.https), show(&self.http))
    }

    /// Whether any proxy is configured.
    pub fn any(&self) -> bool {
        self.https.is_some() || self.http.is_some()
    }

    /// Whether `host` is reached directly (`NO_PROXY`).
    pub fn bypasses(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase();
        self.no_proxy.iter().any(|e| {
            let e = e.trim_start_matches('[').trim_end_matches(']');
            e == "*" || host == e || host.strip_suffix(e).is_some_and(|rest| rest.ends_with('.'))
        })
    }

    /// The proxy for a connection to `host` over TLS (`https`, `wss`) or not, if any.
    pub fn for_target(&self, tls: bool, host: &str) -> Option<&Proxy> {
        if self.bypasses(host) {
            return None;
        }
        if tls { self.https.as_ref() } else { self.http.as_ref() }
    }

    /// The HTTP client's proxy rule: exactly [`Proxies::for_target`].
    pub fn for_reqwest(&self) -> reqwest::Proxy {
        let me = self.clone();
        reqwest::Proxy::custom(move |url| {
            let proxy = me.for_target(url.scheme() == "https", url.host_str()?)?;
            reqwest::Url::parse(&proxy.url()).ok()
        })
    }
}

/// How long one of a host's addresses may take to connect before the next is tried (all but
/// the last; the caller's own timeout bounds the whole).
pub const PER_ADDRESS: Duration = Duration::from_secs(3);

/// A TCP connection to `host:port`, trying each address it resolves to in turn, each for at most
/// [`PER_ADDRESS`]: a network whose IPv6 route swallows packets (common on hotel and café
/// Wi-Fi, and after a VPN drops) falls back to IPv4 within seconds, where waiting out the
/// first address's TCP timeout (75 s on macOS) would outlast the doorbell's 15 s connect.
/// (The HTTPS calls get the same from hyper's happy eyeballs.)
async fn connect_host(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    connect_any(&addresses, PER_ADDRESS).await
}

/// [`connect_host`] over resolved `addresses`, each but the last for at most `each`.
pub(crate) async fn connect_any(addresses: &[std::net::SocketAddr], each: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolved to no address");
    for (i, address) in addresses.iter().enumerate() {
        let attempt = TcpStream::connect(address);
        let result = if i + 1 < addresses.len() {
            tokio::time::timeout(each, attempt).await.unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{address} did not answer within {each:?}"),
                ))
            })
        } else {
            attempt.await
        };
        match result {
            Ok(tcp) => return Ok(tcp),
            Err(e) => {
                tracing::debug!(%address, error = %e, "address failed; trying the next");
                last = e;
            }
        }
    }
    Err(last)
}

/// How long a proxy may take to answer `CONNECT`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest `CONNECT` answer head read.
const MAX_ANSWER: usize = 16 * 1024;

/// A TCP connection to `host:port`, through `proxy` (an HTTP `CONNECT` tunnel) when given.
///
/// # Errors
/// The connection failed, or the proxy refused the tunnel (its status line is in the message).
pub async fn connect(proxy: Option<&Proxy>, host: &str, port: u16) -> Result<TcpStream, String> {
    let Some(proxy) = proxy else {
        return connect_host(host, port).await.map_err(|e| format!("connecting to {host}:{port}: {e}"));
    };
    let mut tcp = connect_host(&proxy.host, proxy.port)
        .await
        .map_err(|e| format!("connecting to the proxy {}:{}: {e}", proxy.host, proxy.port))?;
    let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(c) = &proxy.credentials {
        head.push_str(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(c)
        ));
    }
    head.push_str("\r\n");
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, async {
        tcp.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
        // Byte by byte up to the blank line: nothing after it may be consumed (it is the
        // server's, inside the tunnel).
        let mut got = Vec::new();
        while !got.ends_with(b"\r\n\r\n") {
            if got.len() >= MAX_ANSWER {
                return Err("the proxy's answer is too long".to_owned());
            }
            let mut b = [0u8; 1];
            if tcp.read(&mut b).await.map_err(|e| e.to_string())? == 0 {
                return Err("the proxy closed the connection".into());
            }
            got.push(b[0]);
        }
        Ok(got)
    })
    .await
    .map_err(|_| format!("the proxy {}:{} did not answer CONNECT within 15 s", proxy.host, proxy.port))?
    .map_err(|e| format!("through the proxy {}:{}: {e}", proxy.host, proxy.port))?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some(code) if code.starts_with('2') => Ok(tcp),
        _ => Err(format!("the proxy {}:{} refused the tunnel to {target}: {status}", proxy.host, proxy.port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Proxies {
        Proxies::from_pairs(&pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>())
    }

    /// An address that swallows the connection (a listener whose queue is full: the kernel drops
    /// the SYN, as a broken IPv6 route does) is given up after `each`, and the next address
    /// (IPv4 after IPv6, in resolver order) connects.
    #[tokio::test]
    async fn a_silent_address_is_given_up_for_the_next_one() {
        let silent = tokio::net::TcpSocket::new_v4().unwrap();
        silent.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let silent = silent.listen(1).unwrap();
        let swallowing = silent.local_addr().unwrap();
        // Fill its accept queue (never accepted): the next SYN is dropped.
        let mut held = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(swallowing)).await {
                held.push(c);
            }
        }
        let good = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let answering = good.local_addr().unwrap();
        let addresses = [swallowing, answering];
        let both = connect_any(&addresses, Duration::from_millis(500));
        let tcp =
            tokio::time::timeout(Duration::from_secs(3), both).await.expect("the next address within 3 s").unwrap();
        assert_eq!(tcp.peer_addr().unwrap(), answering);
        // Without the per-address limit the first one alone outlasts that (and the caller's 15 s).
        let waited = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(swallowing)).await;
        assert!(
            waited.is_err(),
            "the full listener answered: this machine does not drop SYNs, the test proves nothing"
        );
        drop((held, silent));
    }

    #[test]
    fn proxy_urls_parse_or_say_why_not() {
        assert_eq!(
            parse_proxy("http://u:p@proxy.corp:3128/").unwrap(),
            Proxy { host: "proxy.corp".into(), port: 3128, credentials: Some("u:p".into()) }
        );
        assert_eq!(parse_proxy("proxy.corp:8080").unwrap().port, 8080);
        assert_eq!(parse_proxy("http://[::1]:3128").unwrap().host, "::1");
        assert_eq!(parse_proxy("http://proxy").unwrap().port, 80);
        assert!(parse_proxy("socks5://127.0.0.1:1080").unwrap_err().contains("socks5:// proxies are not supported"));
        assert!(parse_proxy("http://p:99999").unwrap_err().contains("port"));
        assert!(parse_proxy("http://").is_err());
    }

    /// Which variable serves which scheme, lower case first, ALL_PROXY as the fallback, and
    /// NO_PROXY by name, subdomain and `*`.
    #[test]
    fn the_variables_choose_as_curl_does() {
        let p =
            env(&[("HTTPS_PROXY", "http://upper:1"), ("https_proxy", "http://lower:2"), ("ALL_PROXY", "http://all:3")]);
        assert_eq!(p.for_target(true, "api.example").unwrap().host, "lower");
        assert_eq!(p.for_target(false, "api.example").unwrap().host, "all");
        let p = env(&[("HTTP_PROXY", "http://p:3128"), ("NO_PROXY", "localhost, .internal.corp,10.0.0.5")]);
        assert!(p.for_target(true, "api.example").is_none(), "HTTP_PROXY is not for TLS");
        assert!(p.for_target(false, "localhost").is_none());
        assert!(p.for_target(false, "git.internal.corp").is_none());
        assert!(p.for_target(false, "internal.corp").is_none());
        assert!(p.for_target(false, "notinternal.corp").is_some(), "a suffix is not a subdomain");
        assert!(p.for_target(false, "10.0.0.5").is_none());
        assert!(env(&[("ALL_PROXY", "http://p:1"), ("no_proxy", "*")]).for_target(true, "x").is_none());
        let s = env(&[("ALL_PROXY", "socks5://127.0.0.1:1080")]);
        assert!(!s.any() && s.unsupported[0].starts_with("ALL_PROXY=socks5://"), "{s:?}");
    }

    /// A CONNECT tunnel through a proxy that answers 200, and the proxy's refusal named.
    #[tokio::test]
    async fn connect_tunnels_and_reports_a_refusal() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 Connection established\r\n\r\nhello",
                "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 1024];
                let n = s.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                assert!(head.starts_with("CONNECT server.example:443 HTTP/1.1\r\n"), "{head}");
                assert!(head.contains("Proxy-Authorization: Basic dTpw\r\n"), "{head}");
                s.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let proxy = Proxy { host: "127.0.0.1".into(), port, credentials: Some("u:p".into()) };
        let mut tunnel = connect(Some(&proxy), "server.example", 443).await.unwrap();
        let mut rest = [0u8; 5];
        tunnel.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"hello", "bytes after the answer belong to the tunnel");
        let e = connect(Some(&proxy), "server.example", 443).await.unwrap_err();
        assert!(e.contains("refused the tunnel") && e.contains("407"), "{e}");
    }
}
