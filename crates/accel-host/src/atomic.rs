//! Atomic, private file writes for the node-local state (`gpus-seen.json`, `faults.json`, the
//! ledger journal's snapshots).
//!
//! A reader sees the old file or the new one, never half of either, and a crash leaves one of the
//! two on disk: the bytes go to a temporary file in the same directory (mode 0600), are synced,
//! renamed over the target, and the directory is synced so the rename itself survives a power
//! loss. This module writes files; it must not know what they hold.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The mode of every state file: the daemon's alone.
pub const STATE_FILE_MODE: u32 = 0o600;

/// A file that could not be written atomically.
#[derive(Debug, thiserror::Error)]
pub enum AtomicWriteError {
    /// The path names no file (it ends in `/`, `..`, or is empty).
    #[error("{path}: not a file path")]
    NotAFile { path: PathBuf },
    /// One step of the write failed; the target is unchanged.
    #[error("{path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Tells temporary files of concurrent writers in one process apart.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces the file at `path` with `bytes`, atomically, with mode 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicWriteError> {
    write_atomic_mode(path, bytes, STATE_FILE_MODE)
}

/// [`write_atomic`] with another mode, for a file that is not the daemon's alone: one a
/// container reads as whatever user it runs as (the preload file mounted at
/// `/etc/ld.so.preload`, 0644 like the real one; at 0600 the dynamic loader of a non-root
/// process cannot read it and silently loads no slicing library).
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AtomicWriteError> {
    let Some(file_name) = path.file_name() else {
        return Err(AtomicWriteError::NotAFile {
            path: path.to_path_buf(),
        });
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let fail = |step: &'static str| {
        move |source| AtomicWriteError::Io {
            path: path.to_path_buf(),
            step,
            source,
        }
    };
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = dir.join(temp_name);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)
            .map_err(fail("create temporary file"))?;
        // The umask may have narrowed the mode at creation, never widened it; set it exactly.
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(fail("set mode"))?;
        file.write_all(bytes).map_err(fail("write"))?;
        file.sync_all().map_err(fail("sync"))?;
        std::fs::rename(&temp, path).map_err(fail("rename into place"))
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one being returned.
        let _ = std::fs::remove_file(&temp);
        return written;
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail("sync directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_content_with_mode_0600_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("gpus-seen.json");
        std::fs::write(&target, "old, longer content").unwrap();
        std::fs::set_permissions(&target, Permissions::from_mode(0o644)).unwrap();

        write_atomic(&target, b"{\"new\":1}").unwrap();

        assert_eq!(std::fs::read(&target).unwrap(), b"{\"new\":1}");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "mode {mode:o}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["gpus-seen.json"]);
    }

    #[test]
    fn creates_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("faults.json");
        write_atomic(&target, b"[]").unwrap();
        write_atomic(&target, b"[1]").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"[1]");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("absent/faults.json");
        let message = write_atomic(&target, b"x").unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("{}: create temporary file:", target.display())),
            "{message}"
        );
        assert!(!message.contains('\n'));
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        assert!(matches!(
            write_atomic(Path::new("/tmp/.."), b"x"),
            Err(AtomicWriteError::NotAFile { .. })
        ));
    }
}
