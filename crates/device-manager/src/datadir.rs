//! One daemon per data directory: `serve` holds an exclusive lock on `<data-dir>/daemon.lock`
//! from before it reads any state until it stops, so a second daemon pointed at the same
//! directory — of the same manufacturer or another — refuses to start instead of sharing the
//! ledger journal, the fault record, the ownership records and the Pods' directories with it.
//!
//! The lock is the operating system's advisory whole-file lock (`File::try_lock`): it belongs to
//! the open file, so it is released when the [`DataDirLock`] is dropped (a `serve` that stops, a
//! demo node taken down) and by the kernel when the process dies however it dies; a stale file
//! left behind locks nothing. The file names the holder (`<manufacturer> <pid>`) so the refusal
//! can say who holds the directory.
//!
//! Where each manufacturer's directory is when no `--data-dir` names one: [`state_dir`].

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use accel_core::Manufacturer;
use accel_host::atomic::STATE_FILE_MODE;

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "daemon.lock";

/// A manufacturer's state directory under the daemons' root (`<GPUSTACK_DATA_DIR>/operator/
/// device-manager`, or the chart's `deviceManager.dataDir`), by its backend's rule
/// (`StateDirRule`): NVIDIA's is the root itself (the layout every NVIDIA node has had since
/// the first release, so an upgraded node reads its journal where it left it); every other
/// manufacturer's is `<root>/<manufacturer>`, so the daemons of a node with several
/// manufacturers' cards never share a file. A manufacturer without a backend gets its own
/// folder. The chart computes the same path (templates/daemonset.yaml); keep the two in step.
pub fn state_dir(root: &Path, manufacturer: Manufacturer) -> PathBuf {
    let rule = crate::backends::backend(manufacturer)
        .map(|b| b.state_dir)
        .unwrap_or(accel_backend::StateDirRule::Named);
    rule.dir(root, manufacturer)
}

/// Why the data directory could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "data directory {dir} is in use by {holder}: two daemons never share one; give this one its own --data-dir"
    )]
    Held { dir: PathBuf, holder: String },
    #[error("{path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the directory.
#[derive(Debug)]
pub struct DataDirLock {
    // Held for its lock: the lock lives as long as this open file.
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes `dir` for this process's `manufacturer` daemon, or says who holds it.
    pub fn acquire(dir: &Path, manufacturer: Manufacturer) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |step: &'static str| {
            let path = path.clone();
            move |source| LockError::Io { path, step, source }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(STATE_FILE_MODE)
            .open(&path)
            .map_err(io("opening"))?;
        // `File::try_lock`: std since 1.89, the workspace's rust-version.
        let locked = file.try_lock();
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                // What the holder wrote; unreadable or not yet written, it is still held.
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: describe_holder(&text),
                });
            }
            Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                tracing::warn!(
                    "{}: this filesystem cannot lock files; nothing stops a second daemon from sharing the data directory",
                    path.display()
                );
            }
            Err(TryLockError::Error(e)) => return Err(io("locking")(e)),
        }
        file.set_len(0).map_err(io("writing the holder"))?;
        file.seek(SeekFrom::Start(0))
            .map_err(io("writing the holder"))?;
        writeln!(file, "{} {}", manufacturer.name(), std::process::id())
            .map_err(io("writing the holder"))?;
        Ok(DataDirLock { _file: file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// "the amd daemon (pid 4242)" from the lock file's `amd 4242`.
fn describe_holder(text: &str) -> String {
    let mut words = text.split_whitespace();
    match (
        words.next(),
        words.next().and_then(|p| p.parse::<u32>().ok()),
    ) {
        (Some(name), Some(pid)) if name.parse::<Manufacturer>().is_ok() => {
            format!("the {name} daemon (pid {pid})")
        }
        _ => "another daemon".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_daemon_on_the_same_directory_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path(), Manufacturer::Nvidia).unwrap();
        // Another manufacturer's daemon, and the same manufacturer's, are both refused.
        for second in [Manufacturer::Amd, Manufacturer::Nvidia] {
            let refused = DataDirLock::acquire(dir.path(), second).unwrap_err();
            let message = refused.to_string();
            assert_eq!(
                message,
                format!(
                    "data directory {} is in use by the nvidia daemon (pid {}): two daemons never share one; give this one its own --data-dir",
                    dir.path().display(),
                    std::process::id()
                )
            );
            assert!(!message.contains('\n'));
        }
        // Released on drop: a restart in the same process takes it again.
        drop(held);
        let again = DataDirLock::acquire(dir.path(), Manufacturer::Amd).unwrap();
        let text = std::fs::read_to_string(again.path()).unwrap();
        assert_eq!(text, format!("amd {}\n", std::process::id()));
    }

    #[test]
    fn a_stale_lock_file_locks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(LOCK_FILE),
            "nvidia 1\nleft over by a crash\n",
        )
        .unwrap();
        let lock = DataDirLock::acquire(dir.path(), Manufacturer::Amd).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert_eq!(text, format!("amd {}\n", std::process::id()));
    }

    #[test]
    fn a_holder_that_did_not_say_who_it_is_is_another_daemon() {
        assert_eq!(describe_holder(""), "another daemon");
        assert_eq!(describe_holder("garbage words"), "another daemon");
        assert_eq!(describe_holder("amd 12"), "the amd daemon (pid 12)");
    }

    #[test]
    fn nvidia_keeps_the_root_and_every_other_manufacturer_has_its_own_directory() {
        let root = Path::new("/var/lib/gpustack/operator/device-manager");
        assert_eq!(state_dir(root, Manufacturer::Nvidia), root);
        assert_eq!(state_dir(root, Manufacturer::Amd), root.join("amd"));
        assert_ne!(
            state_dir(root, Manufacturer::Amd),
            state_dir(root, Manufacturer::Nvidia)
        );
    }
}
