//! # private-files — folders and files only their owner can read
//!
//! The local server's data folder holds the SQLite file and its WAL (webhook signing secrets,
//! task results), the token signing secret and artifact files; the relay's state folder holds
//! run arguments and results (journal, outbox). On a shared machine none of it may be readable
//! by other users, so folders are made `0700` and files `0600` *when they are created* (a file
//! made wider and narrowed later is readable in between); folders and files an older build left
//! wider are narrowed when opened.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every private folder.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every private file.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and its missing parents as `0700`; an existing `path` wider than that is
/// narrowed (parents that existed are left as they are: they may be the user's home).
///
/// # Errors
/// I/O errors.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(path)?;
    narrow(path, DIR_MODE)
}

/// Options that create (or truncate) a file for writing as `0600`.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true).mode(FILE_MODE);
    o
}

/// Writes `bytes` to `path`, a file created as `0600`.
///
/// # Errors
/// I/O errors.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut f = options().open(path)?;
    f.write_all(bytes)?;
    narrow(path, FILE_MODE)
}

/// Narrows `path` to `mode` if it is wider (an older build's file or folder).
///
/// # Errors
/// I/O errors other than "not found".
pub fn narrow(path: &Path, mode: u32) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o777 & !mode != 0 => {
            std::fs::set_permissions(path, Permissions::from_mode(mode))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_made_private_and_old_wide_ones_narrowed() {
        let root = std::env::temp_dir().join(format!("private-files-{}", std::process::id()));
        let dir = root.join("a/b");
        create_dir_all(&dir).unwrap();
        assert_eq!((mode(&root.join("a")), mode(&dir)), (DIR_MODE, DIR_MODE));
        write(&dir.join("f"), b"x").unwrap();
        assert_eq!(mode(&dir.join("f")), FILE_MODE);
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("old"), b"y").unwrap();
        std::fs::set_permissions(dir.join("old"), Permissions::from_mode(0o644)).unwrap();
        create_dir_all(&dir).unwrap();
        narrow(&dir.join("old"), FILE_MODE).unwrap();
        assert_eq!((mode(&dir), mode(&dir.join("old"))), (DIR_MODE, FILE_MODE));
        std::fs::remove_dir_all(root).unwrap();
    }
}
