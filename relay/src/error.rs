//! The errors the relay library returns to its binary.

use std::path::PathBuf;

/// Why the relay cannot start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The state folder (outbox, journal, lock) cannot be opened, locked or recovered.
    #[error("state folder {}: {source}", path.display())]
    State {
        /// The folder.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The HTTPS client cannot start (the TLS stack).
    #[error("HTTPS client: {0}")]
    Http(#[from] reqwest::Error),
}
