//! # logging — the one tracing set-up of every binary
//!
//! Every binary filters by `RUST_LOG` (default `info`). The local server and the relay print
//! plain text, with colours only on a terminal (a service manager's log file gets no escape
//! codes); Lambda functions print JSON lines without timestamps (CloudWatch adds its own).
//! Installing twice is harmless: the first set-up stays. A relay under launchd writes its own
//! log file, bounded in size ([`RotatingFile`]): launchd never rotates `StandardOutPath`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

/// rmcp's own `info` lines for each request it serves statelessly (`Service initialized as
/// server`, `serve finished`) say nothing an operator can use, and the first names a placeholder
/// client (`client_info: rmcp 3.11.0`) for every host: the MCP endpoint logs the client each
/// request names instead. They stay quiet unless `RUST_LOG` names rmcp.
const QUIET: &str = "rmcp::service=warn";

/// The filter from `RUST_LOG`, or `info`; with [`QUIET`] unless `RUST_LOG` names rmcp.
fn filter() -> EnvFilter {
    let named = std::env::var("RUST_LOG").is_ok_and(|s| s.contains("rmcp"));
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    match QUIET.parse() {
        Ok(quiet) if !named => filter.add_directive(quiet),
        _ => filter,
    }
}

/// Plain-text logs to stdout, coloured only when stdout is a terminal.
pub fn init_terminal() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
}

/// JSON lines for CloudWatch, without timestamps (the log service adds them). The current
/// span's fields go into each line: a request's `request_id` (API Gateway's, handed on by the
/// `mcp` function to the tool functions) ties one call's lines together.
#[cfg(feature = "json")]
pub fn init_json() {
    let _ = tracing::dispatcher::set_global_default(json_lines(std::io::stdout));
}

/// The JSON lines of [`init_json`], written to `writer`: what a test reads to check a line
/// against what reads it in CloudWatch (a metric filter's pattern, say).
#[cfg(feature = "json")]
pub fn json_lines<W>(writer: W) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter())
            .with_current_span(true)
            .with_span_list(false)
            .without_time()
            .with_writer(writer)
            .finish(),
    )
}

/// Plain-text logs (no colours) to `path`, rotated by [`RotatingFile`] at `max_bytes`.
///
/// # Errors
/// When the file cannot be opened.
pub fn init_file(path: &Path, max_bytes: u64) -> io::Result<()> {
    let file = RotatingFile::open(path, max_bytes)?;
    let _ = tracing_subscriber::fmt().with_env_filter(filter()).with_ansi(false).with_writer(file).try_init();
    Ok(())
}

/// A log file that never grows past about `max_bytes`: when a write would take it over, it is
/// renamed to `<name>.1` (replacing the previous one) and a fresh file is started. At most
/// twice `max_bytes` are kept. Created `0600` (log lines name commands and projects).
pub struct RotatingFile {
    state: Mutex<Rotating>,
}

struct Rotating {
    path: PathBuf,
    file: File,
    written: u64,
    max: u64,
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

impl RotatingFile {
    /// Opens (appends to) `path`, rotating at `max_bytes`.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<Self> {
        let file = open_append(path)?;
        let written = file.metadata()?.len();
        Ok(Self { state: Mutex::new(Rotating { path: path.to_path_buf(), file, written, max: max_bytes.max(1) }) })
    }

    /// The backup a rotation keeps: `<path>.1`.
    pub fn backup_of(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }
}

impl Rotating {
    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.written > 0 && self.written + buf.len() as u64 > self.max {
            std::fs::rename(&self.path, RotatingFile::backup_of(&self.path))?;
            self.file = open_append(&self.path)?;
            self.written = 0;
        }
        self.file.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }
}

impl Write for &RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.write(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RotatingFile {
    type Writer = &'a RotatingFile;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_rotates_and_stays_bounded() {
        let dir = std::env::temp_dir().join(format!("rotating-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.log");
        let _ = std::fs::remove_file(&path);
        let f = RotatingFile::open(&path, 1_000).unwrap();
        let line = [b'x'; 99];
        for _ in 0..1_000 {
            (&f).write_all(&line).unwrap();
            (&f).write_all(b"\n").unwrap();
        }
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert!(size(&path) <= 1_000, "{}", size(&path));
        assert!(size(&RotatingFile::backup_of(&path)) <= 1_000 && size(&RotatingFile::backup_of(&path)) > 0);
        // 100 kB written, 2 kB kept at most, and the newest line is in the current file.
        assert!(std::fs::read(&path).unwrap().ends_with(b"x\n"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Reopening appends and keeps counting the existing bytes.
        let before = size(&path);
        let g = RotatingFile::open(&path, 1_000).unwrap();
        (&g).write_all(b"y\n").unwrap();
        assert!(size(&path) == before + 2 || size(&path) == 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
