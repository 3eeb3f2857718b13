//! Where artifact bytes live: S3 in the cloud (`lambda::s3`), a folder locally ([`DirBlobStore`]).
//!
//! Both hand out **short-lived download links** for the owner's panel: S3 presigned `GetObject`
//! URLs in the cloud; locally a URL on the local server whose query carries an expiry and an
//! HMAC-SHA256 over (key, expiry, file name, content type) with the local secret — the same idea
//! as a presigned URL, so a link can be opened in a new tab (no `Authorization` header) and
//! still not be guessed, reused later, or bent to another file.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use domain::clock::{SharedClock, Timestamp};
use domain::store::BoxError;
use hmac::{Hmac, Mac};
use http::{HeaderValue, StatusCode, header};
use sha2::Sha256;

/// How long a download link works.
pub const DOWNLOAD_LINK_TTL: Duration = Duration::from_secs(300);

/// Path prefix of local download links.
pub const LOCAL_DOWNLOAD_PREFIX: &str = "/blobs/";

/// Why artifact bytes could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// This function was deployed without an artifact bucket.
    #[error("no artifact storage is configured here")]
    NotConfigured,
    /// The backend failed.
    #[error("artifact storage failed for {key}")]
    Backend {
        /// The object key.
        key: String,
        /// The cause (S3's error, or the file system's).
        #[source]
        source: BoxError,
    },
}

/// What a download link serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download<'a> {
    /// The object key.
    pub key: &'a str,
    /// The file name the browser saves it as.
    pub name: &'a str,
    /// Its MIME type.
    pub content_type: &'a str,
}

/// Where artifact bytes go (S3 in the cloud, files locally).
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under `key` (overwriting is fine: keys are content-addressed per artifact).
    ///
    /// # Errors
    /// [`BlobError`] when the backend fails (retryable).
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), BlobError>;

    /// A link that downloads `what` for the next [`DOWNLOAD_LINK_TTL`], without credentials.
    ///
    /// # Errors
    /// [`BlobError`] when the link cannot be made.
    async fn download_url(&self, what: &Download<'_>) -> Result<String, BlobError>;
}

/// Artifacts in a local folder, served back by the local server through signed links.
#[derive(Clone)]
pub struct DirBlobStore {
    dir: PathBuf,
    base_url: String,
    secret: Vec<u8>,
    clock: SharedClock,
}

impl std::fmt::Debug for DirBlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirBlobStore").field("dir", &self.dir).field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl DirBlobStore {
    /// Blobs under `dir`; links start with `base_url` (the local server) and are signed with
    /// `secret`.
    pub fn new(dir: PathBuf, base_url: &str, secret: &[u8], clock: SharedClock) -> Self {
        Self { dir, base_url: base_url.trim_end_matches('/').to_owned(), secret: secret.to_vec(), clock }
    }

    /// HMAC-SHA256 over the length-prefixed (key, expiry, name, content type).
    fn mac(&self, what: &Download<'_>, expires: i64) -> Hmac<Sha256> {
        let mut mac = hmac_sha256(&self.secret);
        for part in [what.key, &expires.to_string(), what.name, what.content_type] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// Answers `GET /blobs/<key>?expires=…&name=…&type=…&sig=…`: the file, or 403 for a link
    /// that is expired, altered or made with another secret (404 when the file is gone).
    pub async fn serve(&self, path: &str, query: Option<&str>) -> http::Response<Bytes> {
        let deny = |status: StatusCode, text: &'static str| {
            let mut r = http::Response::new(Bytes::from_static(text.as_bytes()));
            *r.status_mut() = status;
            r
        };
        let Some(key) = path.strip_prefix(LOCAL_DOWNLOAD_PREFIX) else {
            return deny(StatusCode::NOT_FOUND, "not found");
        };
        let params: Vec<(String, String)> =
            url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let (Some(expires), Some(name), Some(content_type), Some(sig)) =
            (get("expires").and_then(|e| e.parse::<i64>().ok()), get("name"), get("type"), get("sig"))
        else {
            return deny(StatusCode::FORBIDDEN, "this download link is incomplete");
        };
        let what = Download { key, name, content_type };
        // Compared in constant time.
        let good = hex::decode(sig).ok().is_some_and(|given| self.mac(&what, expires).verify_slice(&given).is_ok());
        if !good || key.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return deny(StatusCode::FORBIDDEN, "this download link is not valid");
        }
        if self.clock.now() >= Timestamp::from_millis(expires) {
            return deny(StatusCode::FORBIDDEN, "this download link has expired; open the task again for a new one");
        }
        let file = self.dir.join(key);
        let Ok(bytes) = tokio::fs::read(&file).await else { return deny(StatusCode::NOT_FOUND, "the file is gone") };
        let mut r = http::Response::new(Bytes::from(bytes));
        let headers = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(content_type) {
            headers.insert(header::CONTENT_TYPE, v);
        }
        if let Ok(v) = HeaderValue::from_str(&content_disposition(name)) {
            headers.insert(header::CONTENT_DISPOSITION, v);
        }
        // Whatever the file is, it never runs as a page of this origin if a browser renders it.
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
        r
    }
}

/// `Content-Disposition` for a download saved as `name` (RFC 6266): an ASCII `filename` for
/// old clients (other characters as `_`) and the exact name as `filename*`, UTF-8
/// percent-encoded per RFC 5987 (a space is `%20`, never `+`).
pub fn content_disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| if (c.is_ascii_graphic() || c == ' ') && c != '"' && c != '\\' { c } else { '_' })
        .collect();
    let mut encoded = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        // RFC 5987 attr-char: ALPHA / DIGIT / "!" / "#" / "$" / "&" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~"
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// An HMAC-SHA256 keyed with `key`. HMAC takes keys of any length, so the fallback (a zero
/// block-sized key) is never used; it only spares a panic path.
pub fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()))
}

#[async_trait::async_trait]
impl BlobStore for DirBlobStore {
    async fn put(&self, key: &str, bytes: Vec<u8>, _content_type: &str) -> Result<(), BlobError> {
        let path = self.dir.join(key);
        let failed = |source: BoxError| BlobError::Backend { key: key.to_owned(), source };
        tokio::task::spawn_blocking(move || {
            // The blob folder and each file only the owner can read (0700 / 0600).
            if let Some(parent) = path.parent() {
                private_files::create_dir_all(parent)?;
            }
            private_files::write(&path, &bytes)
        })
        .await
        .map_err(|e| failed(e.into()))?
        .map_err(|e| failed(e.into()))
    }

    async fn download_url(&self, what: &Download<'_>) -> Result<String, BlobError> {
        let expires = self.clock.now().plus(DOWNLOAD_LINK_TTL).as_millis();
        let sig = hex::encode(self.mac(what, expires).finalize().into_bytes());
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("expires", &expires.to_string())
            .append_pair("name", what.name)
            .append_pair("type", what.content_type)
            .append_pair("sig", &sig)
            .finish();
        Ok(format!("{}{LOCAL_DOWNLOAD_PREFIX}{}?{query}", self.base_url, what.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::clock::{Clock, ManualClock};
    use std::sync::Arc;

    #[tokio::test]
    async fn local_links_work_until_they_expire_and_cannot_be_bent() {
        let dir = std::env::temp_dir().join(format!("fc-blobs-{}", uuid::Uuid::new_v4()));
        let clock = Arc::new(ManualClock::starting_now());
        let store =
            DirBlobStore::new(dir.clone(), "http://127.0.0.1:8787", b"0123456789abcdef0123456789abcdef", clock.clone());
        store.put("artifacts/l/t/a/sha", b"hello".to_vec(), "text/plain").await.unwrap();
        store.put("artifacts/l/t/b/sha", b"secret".to_vec(), "text/plain").await.unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(dir.join("artifacts/l/t/a")), 0o700, "blob folders are the owner's only");
            assert_eq!(mode(dir.join("artifacts/l/t/a/sha")), 0o600, "blob files are the owner's only");
        }
        let what = Download { key: "artifacts/l/t/a/sha", name: "notes é.txt", content_type: "text/plain" };
        let link = store.download_url(&what).await.unwrap();
        let rest = link.strip_prefix("http://127.0.0.1:8787").unwrap();
        let (path, query) = rest.split_once('?').unwrap();
        let ok = store.serve(path, Some(query)).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.body().as_ref(), b"hello");
        assert_eq!(
            ok.headers()[header::CONTENT_DISPOSITION],
            "attachment; filename=\"notes _.txt\"; filename*=UTF-8''notes%20%C3%A9.txt",
            "RFC 6266 with the RFC 5987 name: a space is %20"
        );
        assert_eq!(ok.headers()[header::CONTENT_SECURITY_POLICY], "sandbox");
        // Another key with the same signature, a changed name, a forged signature: refused.
        let other = store.serve("/blobs/artifacts/l/t/b/sha", Some(query)).await;
        assert_eq!(other.status(), StatusCode::FORBIDDEN);
        let renamed = store.serve(path, Some(&query.replace("notes", "other"))).await;
        assert_eq!(renamed.status(), StatusCode::FORBIDDEN);
        // An expiry moved later by hand (the signature covers it), and a signature of the right
        // shape made up: refused.
        let extended = store.serve(path, Some(&query.replacen("expires=", "expires=9", 1))).await;
        assert_eq!(extended.status(), StatusCode::FORBIDDEN, "an expiry edited in the URL was accepted");
        let forged = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("sig", v)) => format!("sig={}", "0".repeat(v.len())),
                _ => p.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&");
        assert_ne!(forged, query, "the link carries a signature");
        assert_eq!(store.serve(path, Some(&forged)).await.status(), StatusCode::FORBIDDEN);
        clock.advance(DOWNLOAD_LINK_TTL);
        assert_eq!(store.serve(path, Some(query)).await.status(), StatusCode::FORBIDDEN, "an expired link still works");
        let _ = clock.now();
        let _ = std::fs::remove_dir_all(dir);
    }
}
