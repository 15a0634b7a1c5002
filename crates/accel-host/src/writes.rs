//! Writes to the node's control files: the few sysfs attributes a manufacturer's allocator
//! writes to make or remove a driver object (MetaX's `sgpu/create`, `sgpu/destroy`, `model`,
//! `sgpu/sched_class`). Behind [`HostWrites`], so a recorded host can answer a write the way
//! its driver would (a recording has no driver), and a test can refuse one.
//!
//! A control write opens a file that exists (the driver made it) and writes the value in one
//! call; it never creates the file, so a path the driver does not offer fails as "not found"
//! instead of leaving a regular file where an attribute belongs.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// A control write that failed.
#[derive(Debug, thiserror::Error)]
#[error("write {value:?} to {path}: {source}")]
pub struct WriteError {
    pub path: String,
    pub value: String,
    #[source]
    pub source: std::io::Error,
}

impl WriteError {
    /// A failure of `value` to `path` with `source`.
    pub fn new(path: &str, value: &str, source: std::io::Error) -> WriteError {
        WriteError {
            path: path.to_string(),
            value: value.to_string(),
            source,
        }
    }

    /// Whether the file was absent (MetaX's destroy counts that as done).
    pub fn not_found(&self) -> bool {
        self.source.kind() == std::io::ErrorKind::NotFound
    }
}

/// Writes to a node's control files, by host-absolute path (`/sys/bus/pci/devices/…`).
pub trait HostWrites: Send + Sync {
    /// Writes `value` to the existing file at `path`.
    fn write(&self, path: &str, value: &str) -> Result<(), WriteError>;
    /// Whether a write takes effect. A simulation's recorder (preflight) answers `false`: what
    /// a write would make cannot be read back, so the caller takes its own prediction.
    fn takes_effect(&self) -> bool {
        true
    }
    /// Removes the directory at `path` when it is empty; a directory with anything in it is an
    /// error and is left as it is (nothing in it is ever touched). The default refuses: a
    /// writer that makes only control writes removes nothing.
    fn remove_empty_dir(&self, path: &str) -> Result<(), WriteError> {
        Err(WriteError::new(
            path,
            "(remove directory)",
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this writer removes no directories",
            ),
        ))
    }
}

/// Writes recorded, never made (preflight's simulated grants): each succeeds and changes
/// nothing.
#[derive(Debug, Default)]
pub struct RecordingWrites {
    written: std::sync::Mutex<Vec<(String, String)>>,
}

impl RecordingWrites {
    /// The writes asked for, in order, as `(path, value)`.
    pub fn written(&self) -> Vec<(String, String)> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl HostWrites for RecordingWrites {
    fn write(&self, path: &str, value: &str) -> Result<(), WriteError> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((path.to_string(), value.to_string()));
        Ok(())
    }

    fn takes_effect(&self) -> bool {
        false
    }

    fn remove_empty_dir(&self, path: &str) -> Result<(), WriteError> {
        self.write(path, "(remove directory)")
    }
}

/// Control writes under a root (`/` on a live node).
#[derive(Debug, Clone)]
pub struct FsWrites {
    root: PathBuf,
}

impl FsWrites {
    pub fn new(root: impl Into<PathBuf>) -> FsWrites {
        FsWrites { root: root.into() }
    }

    /// `path` under the root; `None` when it would leave it.
    pub fn resolve(&self, path: &str) -> Option<PathBuf> {
        let mut full = self.root.clone();
        for component in Path::new(path.trim_start_matches('/')).components() {
            match component {
                Component::Normal(part) => full.push(part),
                Component::CurDir => {}
                _ => return None,
            }
        }
        Some(full)
    }
}

impl HostWrites for FsWrites {
    fn write(&self, path: &str, value: &str) -> Result<(), WriteError> {
        let full = self.resolve(path).ok_or_else(|| {
            WriteError::new(
                path,
                value,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the path leaves the host root",
                ),
            )
        })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&full)
            .map_err(|e| WriteError::new(path, value, e))?;
        file.write_all(value.as_bytes())
            .map_err(|e| WriteError::new(path, value, e))
    }

    fn remove_empty_dir(&self, path: &str) -> Result<(), WriteError> {
        let what = "(remove directory)";
        let full = self.resolve(path).ok_or_else(|| {
            WriteError::new(
                path,
                what,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the path leaves the host root",
                ),
            )
        })?;
        // `remove_dir` removes an empty directory only: one with anything in it fails, and a
        // file or a link is no directory (nothing is followed or emptied).
        std::fs::remove_dir(&full).map_err(|e| WriteError::new(path, what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_write_needs_the_file_and_stays_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/card")).unwrap();
        std::fs::write(dir.path().join("sys/card/model"), "native\n").unwrap();
        let writes = FsWrites::new(dir.path());
        writes.write("/sys/card/model", "sgpu").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sys/card/model")).unwrap(),
            "sgpu"
        );
        let e = writes.write("/sys/card/create", "1024").unwrap_err();
        assert!(e.not_found(), "{e}");
        assert!(
            !dir.path().join("sys/card/create").exists(),
            "never created"
        );
        assert!(
            e.to_string()
                .starts_with("write \"1024\" to /sys/card/create: "),
            "{e}"
        );
        let e = writes.write("/sys/../../etc/passwd", "x").unwrap_err();
        assert!(e.to_string().contains("leaves the host root"), "{e}");
    }

    #[test]
    fn only_an_empty_directory_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let writes = FsWrites::new(dir.path());
        std::fs::create_dir_all(dir.path().join("ci/empty")).unwrap();
        std::fs::create_dir_all(dir.path().join("ci/full")).unwrap();
        std::fs::write(dir.path().join("ci/full/x"), "kept").unwrap();
        std::fs::write(dir.path().join("ci/file.conf"), "kept").unwrap();
        writes.remove_empty_dir("/ci/empty").unwrap();
        assert!(!dir.path().join("ci/empty").exists());
        assert!(writes.remove_empty_dir("/ci/full").is_err());
        assert!(
            dir.path().join("ci/full/x").is_file(),
            "nothing in it touched"
        );
        assert!(writes.remove_empty_dir("/ci/file.conf").is_err());
        assert!(dir.path().join("ci/file.conf").is_file());
        assert!(writes.remove_empty_dir("/../escape").is_err());
    }
}
