//! `Host`: read-only access to the node's files under a root directory.
//!
//! The root is a parameter (default [`DEFAULT_ROOT`]); a recorded host points it at
//! `DIR/root`. Paths given to a [`Host`] are relative to the root (`proc/driver/nvidia/version`);
//! a leading `/` is ignored, so `"/proc/x"` and `"proc/x"` name the same file. This module must
//! not interpret what it reads.

use std::io;
use std::path::{Component, Path, PathBuf};

/// The node's root when the daemon runs on the host itself.
pub const DEFAULT_ROOT: &str = "/";

/// A file or directory under the host root that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The path does not exist.
    #[error("{path}: not found")]
    NotFound { path: PathBuf },
    /// The path exists but could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A path tried to leave the root with `..`.
    #[error("{path}: path escapes the host root")]
    Escapes { path: PathBuf },
}

impl HostError {
    /// Whether the error only says the path is absent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, HostError::NotFound { .. })
    }
}

/// What a path is, the final symlink not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file; `len` as the filesystem states it (sysfs says 4096 and procfs 0 whatever
    /// the content, so it is only an upper bound worth checking on ordinary filesystems).
    File {
        len: u64,
    },
    Dir,
    Link,
    /// A device node, FIFO or socket: never read (a FIFO would block the reader).
    Other,
}

/// A character device's number, `major:minor` (see [`Host::char_device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

impl DeviceNumber {
    /// The number of a recording's device-node marker: a file holding `c MAJOR:MINOR` (what
    /// `record` writes for a character device); anything else is `None`.
    pub fn of_marker(text: &str) -> Option<DeviceNumber> {
        let rest = text.trim().strip_prefix('c')?;
        let (major, minor) = rest.trim_start().split_once(':')?;
        Some(DeviceNumber {
            major: major.trim().parse().ok()?,
            minor: minor.trim().parse().ok()?,
        })
    }

    /// The split of a Linux `dev_t` (glibc's `gnu_dev_major`/`gnu_dev_minor` layout).
    pub fn of_raw(dev: u64) -> DeviceNumber {
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        DeviceNumber {
            major: u32::try_from(major).unwrap_or(u32::MAX),
            minor: u32::try_from(minor).unwrap_or(u32::MAX),
        }
    }
}

impl std::fmt::Display for DeviceNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// A path's modification time and length (see [`Host::modified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modified {
    pub at: std::time::SystemTime,
    pub len: u64,
}

/// Read access to a node's files.
pub trait Host: Send + Sync {
    /// The directory this host is rooted at, for messages.
    fn root(&self) -> &Path;
    /// A file's bytes.
    fn read(&self, path: &str) -> Result<Vec<u8>, HostError>;
    /// A file as text (invalid UTF-8 replaced, never an error).
    fn read_to_string(&self, path: &str) -> Result<String, HostError> {
        self.read(path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }
    /// The names in a directory, sorted.
    fn list(&self, path: &str) -> Result<Vec<String>, HostError>;
    /// A symbolic link's target, as written in the link.
    fn read_link(&self, path: &str) -> Result<PathBuf, HostError>;
    /// Whether the path exists (a dangling link does not).
    fn exists(&self, path: &str) -> bool;
    /// When the file or directory at `path` last changed, and its length: what a reader that
    /// caches what it read compares to know it must read again. `None` when it does not exist
    /// or the host cannot tell (the default).
    fn modified(&self, path: &str) -> Option<Modified> {
        let _ = path;
        None
    }
    /// What the path is, without following a final symlink. The default guesses from
    /// `read_link`, `list` and `read`, and so cannot tell device nodes apart: hosts over a real
    /// filesystem should override it.
    fn entry_kind(&self, path: &str) -> Result<EntryKind, HostError> {
        if self.read_link(path).is_ok() {
            return Ok(EntryKind::Link);
        }
        if self.list(path).is_ok() {
            return Ok(EntryKind::Dir);
        }
        self.read(path).map(|bytes| EntryKind::File {
            len: bytes.len() as u64,
        })
    }
    /// The device number of the character device at `path` (links followed, as `stat` does):
    /// `Ok(None)` when the path exists but is no character device. A recording's `/dev` markers
    /// stand for their nodes: one holding `c MAJOR:MINOR` is that device
    /// ([`DeviceNumber::of_marker`]), an empty one is none. The default reads markers only.
    fn char_device(&self, path: &str) -> Result<Option<DeviceNumber>, HostError> {
        let bytes = self.read(path)?;
        Ok(DeviceNumber::of_marker(&String::from_utf8_lossy(&bytes)))
    }
}

/// A [`Host`] over the real filesystem under a root directory.
#[derive(Debug, Clone)]
pub struct FsHost {
    root: PathBuf,
}

impl FsHost {
    /// A host rooted at `root` (the node itself when `root` is `/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsHost { root: root.into() }
    }

    /// The real path of a host path, refusing `..` so nothing outside the root is read.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, HostError> {
        let relative = Path::new(path.trim_start_matches('/'));
        let mut full = self.root.clone();
        for component in relative.components() {
            match component {
                Component::Normal(part) => full.push(part),
                Component::CurDir => {}
                _ => {
                    return Err(HostError::Escapes {
                        path: relative.to_path_buf(),
                    });
                }
            }
        }
        Ok(full)
    }

    fn error(full: PathBuf, source: io::Error) -> HostError {
        if source.kind() == io::ErrorKind::NotFound {
            HostError::NotFound { path: full }
        } else {
            HostError::Io { path: full, source }
        }
    }
}

impl Host for FsHost {
    fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, HostError> {
        let full = self.resolve(path)?;
        std::fs::read(&full).map_err(|e| Self::error(full, e))
    }

    fn list(&self, path: &str) -> Result<Vec<String>, HostError> {
        let full = self.resolve(path)?;
        let entries = std::fs::read_dir(&full).map_err(|e| Self::error(full.clone(), e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Self::error(full.clone(), e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn read_link(&self, path: &str) -> Result<PathBuf, HostError> {
        let full = self.resolve(path)?;
        std::fs::read_link(&full).map_err(|e| Self::error(full, e))
    }

    fn modified(&self, path: &str) -> Option<Modified> {
        let meta = std::fs::metadata(self.resolve(path).ok()?).ok()?;
        Some(Modified {
            at: meta.modified().ok()?,
            len: meta.len(),
        })
    }

    fn exists(&self, path: &str) -> bool {
        self.resolve(path).map(|p| p.exists()).unwrap_or(false)
    }

    fn char_device(&self, path: &str) -> Result<Option<DeviceNumber>, HostError> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let full = self.resolve(path)?;
        let metadata = std::fs::metadata(&full).map_err(|e| Self::error(full.clone(), e))?;
        let kind = metadata.file_type();
        if kind.is_char_device() {
            return Ok(Some(DeviceNumber::of_raw(metadata.rdev())));
        }
        // A marker is a few bytes; anything longer is no marker (and is not read whole).
        if !kind.is_file() || metadata.len() > 64 {
            return Ok(None);
        }
        let bytes = std::fs::read(&full).map_err(|e| Self::error(full, e))?;
        Ok(DeviceNumber::of_marker(&String::from_utf8_lossy(&bytes)))
    }

    fn entry_kind(&self, path: &str) -> Result<EntryKind, HostError> {
        let full = self.resolve(path)?;
        let metadata = std::fs::symlink_metadata(&full).map_err(|e| Self::error(full, e))?;
        let kind = metadata.file_type();
        Ok(if kind.is_symlink() {
            EntryKind::Link
        } else if kind.is_dir() {
            EntryKind::Dir
        } else if kind.is_file() {
            EntryKind::File {
                len: metadata.len(),
            }
        } else {
            EntryKind::Other
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_devices_and_markers_carry_their_numbers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        std::fs::write(dir.path().join("dev/alixpu_ppu0"), "c 509:1\n").unwrap();
        std::fs::write(dir.path().join("dev/kfd"), "").unwrap();
        let host = FsHost::new(dir.path());
        let number = host.char_device("/dev/alixpu_ppu0").unwrap();
        assert_eq!(
            number,
            Some(DeviceNumber {
                major: 509,
                minor: 1
            })
        );
        assert_eq!(number.unwrap().to_string(), "509:1");
        assert_eq!(host.char_device("dev/kfd").unwrap(), None);
        assert!(host.char_device("dev/none").unwrap_err().is_not_found());
        // /dev/null on the machine itself is char 1:3.
        let live = FsHost::new("/");
        if let Ok(Some(null)) = live.char_device("/dev/null") {
            assert_eq!(null, DeviceNumber { major: 1, minor: 3 });
        }
        assert_eq!(DeviceNumber::of_marker("c 1 3"), None);
        assert_eq!(DeviceNumber::of_marker("b 8:0"), None);
        assert_eq!(
            DeviceNumber::of_raw(0x103),
            DeviceNumber { major: 1, minor: 3 }
        );
        // A capability node's wide minor (229632) splits across the two minor fields.
        assert_eq!(
            DeviceNumber::of_raw(0x3811_fd00),
            DeviceNumber {
                major: 509,
                minor: 229_632
            }
        );
    }

    #[test]
    fn reads_under_the_root_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/driver/nvidia")).unwrap();
        std::fs::write(dir.path().join("proc/driver/nvidia/version"), "v").unwrap();
        std::os::unix::fs::symlink("../../x", dir.path().join("proc/link")).unwrap();
        let host = FsHost::new(dir.path());
        assert_eq!(
            host.read_to_string("/proc/driver/nvidia/version").unwrap(),
            "v"
        );
        assert_eq!(
            host.read_to_string("proc/driver/nvidia/version").unwrap(),
            "v"
        );
        assert_eq!(host.list("proc").unwrap(), vec!["driver", "link"]);
        assert_eq!(
            host.read_link("proc/link").unwrap(),
            PathBuf::from("../../x")
        );
        assert!(host.exists("proc/driver"));
        assert!(!host.exists("proc/link"), "a dangling link does not exist");
        assert!(host.read("proc/nothing").unwrap_err().is_not_found());
        assert!(matches!(
            host.read("../etc/passwd"),
            Err(HostError::Escapes { .. })
        ));
    }

    #[test]
    fn tells_what_a_path_is_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/devices/gpu")).unwrap();
        std::fs::write(dir.path().join("sys/devices/gpu/class"), "0x030200\n").unwrap();
        std::os::unix::fs::symlink("devices/gpu", dir.path().join("sys/link")).unwrap();
        let host = FsHost::new(dir.path());
        assert_eq!(host.entry_kind("sys/link").unwrap(), EntryKind::Link);
        assert_eq!(host.entry_kind("sys/devices").unwrap(), EntryKind::Dir);
        assert_eq!(
            host.entry_kind("sys/devices/gpu/class").unwrap(),
            EntryKind::File { len: 9 }
        );
        assert!(host.entry_kind("sys/none").unwrap_err().is_not_found());
        let null = FsHost::new("/");
        assert_eq!(null.entry_kind("dev/null").unwrap(), EntryKind::Other);

        /// A host that only has the required methods, to check the default guess.
        struct Minimal(FsHost);
        impl Host for Minimal {
            fn root(&self) -> &Path {
                self.0.root()
            }
            fn read(&self, path: &str) -> Result<Vec<u8>, HostError> {
                self.0.read(path)
            }
            fn list(&self, path: &str) -> Result<Vec<String>, HostError> {
                self.0.list(path)
            }
            fn read_link(&self, path: &str) -> Result<PathBuf, HostError> {
                self.0.read_link(path)
            }
            fn exists(&self, path: &str) -> bool {
                self.0.exists(path)
            }
        }
        let minimal = Minimal(host);
        assert_eq!(minimal.entry_kind("sys/link").unwrap(), EntryKind::Link);
        assert_eq!(minimal.entry_kind("sys/devices").unwrap(), EntryKind::Dir);
        assert_eq!(
            minimal.entry_kind("sys/devices/gpu/class").unwrap(),
            EntryKind::File { len: 9 }
        );
        assert!(minimal.entry_kind("sys/none").unwrap_err().is_not_found());
    }
}
