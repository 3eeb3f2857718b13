//! # relay-dist — the relay's one-line installer and its builds, as the stack serves them
//!
//! One line from the panel: `curl -fsSL <stack>/relay/install.sh | sh` (SPEC §7 extension).
//!
//! | route | what |
//! |---|---|
//! | `GET /relay/install.sh` | a POSIX `sh` installer with this stack's URL filled in |
//! | `GET /relay/download/SHA256SUMS`, `GET /relay/download/relay-<version>-<target>.tar.gz` | the builds (`infra/relay-dist.sh`) |
//!
//! The installer picks the archive for the machine (`uname`), checks its SHA-256 against
//! `SHA256SUMS` (a mismatch stops it before anything is installed), installs `relay` into
//! `~/.local/bin`, runs `relay pair` and `relay install`. Where the builds come from is the
//! adapter's business: the local server reads a folder ([`DirBuilds`]); the cloud redirects to
//! a short-lived presigned URL under the artifact bucket's `relay/` prefix. Without builds the
//! downloads are refused (404 locally, 403 from S3) and the installer says the operator has not
//! published them.

use std::path::PathBuf;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};

use http_util::http_json;

/// Path of the installer.
pub const INSTALL_PATH: &str = "/relay/install.sh";
/// Prefix of the downloads.
pub const DOWNLOAD_PREFIX: &str = "/relay/download/";
/// The checksum file's name.
pub const SUMS: &str = "SHA256SUMS";
/// What a download of a build that is not there answers.
pub const NO_BUILDS: &str = "no relay builds on this server: the operator builds them with ./infra/relay-dist.sh and publishes them (docs/relay.md)";

const SCRIPT: &str = include_str!("install.sh");

/// The installer for a stack at `server_url`.
pub fn install_script(server_url: &str) -> String {
    // The URL is the stack's own (configuration, never a request header); quotes and `$` are
    // refused anyway, as they would break out of the script's double quotes.
    let safe: String =
        server_url.trim_end_matches('/').chars().filter(|c| !matches!(c, '"' | '$' | '`' | '\\')).collect();
    SCRIPT.replace("@SERVER@", &safe)
}

/// Whether `name` is a file the downloads may serve: `SHA256SUMS` or a relay archive (no
/// folders, no other files).
pub fn servable(name: &str) -> bool {
    name == SUMS
        || (name.starts_with("relay-")
            && name.ends_with(".tar.gz")
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            && !name.contains(".."))
}

/// The installer's response.
pub fn install_response(server_url: &str) -> http::Response<Bytes> {
    let mut r = http::Response::new(Bytes::from(install_script(server_url)));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/x-shellscript; charset=utf-8"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Builds kept in a folder (the local server's `dist/`).
#[derive(Debug, Clone)]
pub struct DirBuilds {
    /// The folder `infra/relay-dist.sh` wrote.
    pub dir: PathBuf,
}

impl DirBuilds {
    /// Answers `GET /relay/install.sh` and `GET /relay/download/<file>`; `None` for other paths.
    pub fn handle(&self, method: &Method, path: &str, server_url: &str) -> Option<http::Response<Bytes>> {
        if path == INSTALL_PATH {
            return Some(if method == Method::GET { install_response(server_url) } else { not_allowed() });
        }
        let name = path.strip_prefix(DOWNLOAD_PREFIX)?;
        if method != Method::GET {
            return Some(not_allowed());
        }
        if !servable(name) {
            return Some(http_json::error(StatusCode::NOT_FOUND, format!("no download {name:?}")));
        }
        Some(match std::fs::read(self.dir.join(name)) {
            Ok(bytes) => {
                let mut r = http::Response::new(Bytes::from(bytes));
                let kind = if name == SUMS { "text/plain; charset=utf-8" } else { "application/gzip" };
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
                r
            }
            Err(_) => http_json::error(StatusCode::NOT_FOUND, NO_BUILDS),
        })
    }
}

fn not_allowed() -> http::Response<Bytes> {
    http_json::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_archives_and_sums_are_served() {
        assert!(servable("SHA256SUMS"));
        assert!(servable("relay-0.1.0-aarch64-apple-darwin.tar.gz"));
        for bad in ["../SHA256SUMS", "relay-../../x.tar.gz", "relay.toml", "relay-a/b.tar.gz", "", "relay-x.tar.gz.sig"]
        {
            assert!(!servable(bad), "{bad}");
        }
    }

    #[test]
    fn the_script_carries_the_stack_url_and_nothing_that_escapes_its_quotes() {
        let s = install_script("https://abc.example/");
        assert!(s.contains("SERVER=\"https://abc.example\"\n"), "{}", &s[..400]);
        let s = install_script("https://x\"; rm -rf ~; \"$(id)`");
        let line = s.lines().find(|l| l.starts_with("SERVER=")).unwrap();
        assert_eq!(line, "SERVER=\"https://x; rm -rf ~; (id)\"");
        assert!(s.starts_with("#!/bin/sh\n"));
    }

    #[test]
    fn a_missing_build_says_so() {
        let b = DirBuilds { dir: std::env::temp_dir().join(format!("no-dist-{}", uuid::Uuid::new_v4())) };
        let r = b.handle(&Method::GET, "/relay/download/SHA256SUMS", "http://x").unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(String::from_utf8_lossy(r.body()).contains("no relay builds"));
        assert_eq!(b.handle(&Method::GET, "/relay/install.sh", "http://x").unwrap().status(), StatusCode::OK);
        assert_eq!(b.handle(&Method::POST, "/relay/install.sh", "http://x").unwrap().status(), 405);
        assert!(b.handle(&Method::GET, "/relay/other", "http://x").is_none());
    }
}
