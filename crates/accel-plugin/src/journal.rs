//! The node-local ledger journal in `--data-dir`: every grant, release and finish, appended and
//! synced before Allocate answers, so a restart loses no grant and charges none twice.
//!
//! The file is JSON lines, mode 0600. On open it is read back, then compacted into a snapshot
//! written atomically. A torn last line (a crash mid-append) is dropped with a warning; any other
//! unreadable line makes the journal corrupt: it is kept aside, untouched, and the caller rebuilds
//! from the kubelet and the Pods. This module stores grants; it must not judge them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use accel_core::ledger::{Grant, GrantKey};
use accel_host::atomic::{STATE_FILE_MODE, write_atomic};
use serde::{Deserialize, Serialize};

/// The journal's file name in the data directory.
pub const FILE_NAME: &str = "ledger.journal";

/// A journal that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Appending or syncing failed: the grant is not durable.
    #[error("{path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The snapshot could not be written.
    #[error(transparent)]
    Snapshot(#[from] accel_host::AtomicWriteError),
    /// An entry could not be encoded.
    #[error("{path}: cannot encode an entry: {source}")]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Entry {
    Grant { key: GrantKey, grant: Grant },
    Release { key: GrantKey },
    Finish { pod_uid: String },
}

/// What opening the journal found.
#[derive(Debug, Default)]
pub struct Replay {
    /// The grants the journal holds, in key order.
    pub grants: BTreeMap<GrantKey, Grant>,
    /// Where a corrupt journal was kept aside (then `grants` is empty and must be rebuilt).
    pub corrupt: Option<(PathBuf, String)>,
    /// A torn last line that was dropped.
    pub torn_tail: bool,
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    /// Opens (or creates) the journal in `data_dir`, replaying and compacting it.
    pub fn open(data_dir: &Path) -> Result<(Journal, Replay), JournalError> {
        let path = data_dir.join(FILE_NAME);
        let io = |step| {
            let path = path.clone();
            move |source| JournalError::Io { path, step, source }
        };
        std::fs::create_dir_all(data_dir).map_err(io("create the data directory"))?;
        let mut replay = Replay::default();
        match std::fs::read(&path) {
            Ok(bytes) => match replay_bytes(&bytes) {
                Ok((grants, torn)) => {
                    replay.grants = grants;
                    replay.torn_tail = torn;
                }
                Err(reason) => {
                    let aside = aside_path(&path);
                    std::fs::rename(&path, &aside).map_err(io("keep the corrupt journal aside"))?;
                    replay.corrupt = Some((aside, reason));
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("read")(e)),
        }
        let mut journal = Journal {
            file: open_append(&path).map_err(io("open for append"))?,
            path,
        };
        journal.compact(&replay.grants)?;
        Ok((journal, replay))
    }

    /// Rewrites the journal as exactly these grants (atomically), then appends after them.
    pub fn compact(&mut self, grants: &BTreeMap<GrantKey, Grant>) -> Result<(), JournalError> {
        let mut text = String::new();
        for (key, grant) in grants {
            let entry = Entry::Grant {
                key: key.clone(),
                grant: grant.clone(),
            };
            text.push_str(&self.encode(&entry)?);
        }
        write_atomic(&self.path, text.as_bytes())?;
        self.file = open_append(&self.path).map_err(|source| JournalError::Io {
            path: self.path.clone(),
            step: "reopen for append",
            source,
        })?;
        Ok(())
    }

    fn encode(&self, entry: &Entry) -> Result<String, JournalError> {
        let mut line = serde_json::to_string(entry).map_err(|source| JournalError::Encode {
            path: self.path.clone(),
            source,
        })?;
        line.push('\n');
        Ok(line)
    }

    /// Appends one entry and syncs it to disk before returning.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let line = self.encode(entry)?;
        let io = |step| {
            let path = self.path.clone();
            move |source| JournalError::Io { path, step, source }
        };
        self.file.write_all(line.as_bytes()).map_err(io("append"))?;
        self.file.sync_data().map_err(io("sync"))?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(STATE_FILE_MODE)
        .open(path)
}

fn aside_path(path: &Path) -> PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".corrupt-{stamp}"));
    PathBuf::from(name)
}

/// Replays journal bytes into grants. A last line without its newline is a torn append and is
/// dropped (`true`); any other line that does not read is corruption (`Err` naming the line).
pub fn replay_bytes(bytes: &[u8]) -> Result<(BTreeMap<GrantKey, Grant>, bool), String> {
    let mut grants = BTreeMap::new();
    let complete = bytes.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let mut torn = false;
    for (n, line) in lines.iter().enumerate() {
        let last = n + 1 == lines.len();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let entry: Entry = match serde_json::from_slice(line) {
            Ok(entry) => entry,
            Err(_) if last && !complete => {
                torn = true;
                break;
            }
            Err(e) => return Err(format!("line {}: {e}", n + 1)),
        };
        match entry {
            Entry::Grant { key, grant } => {
                grants.insert(key, grant);
            }
            Entry::Release { key } => {
                grants.remove(&key);
            }
            Entry::Finish { pod_uid } => {
                for (key, grant) in grants.iter_mut() {
                    if key.pod_uid == pod_uid {
                        grant.finished = true;
                    }
                }
            }
        }
    }
    Ok((grants, torn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::ledger::Family;
    use std::os::unix::fs::PermissionsExt;

    fn grant(index: u32) -> Grant {
        Grant {
            family: Family::Exclusive,
            resource: "nvidia.com/gpu".into(),
            device_ids: vec![format!("GPU-{index}")],
            accelerators: vec![index],
            units: 1_600_000,
            cores_percentage: None,
            finished: false,
        }
    }

    #[test]
    fn entries_survive_reopen_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, replay) = Journal::open(dir.path()).unwrap();
        assert!(replay.grants.is_empty());
        let a = GrantKey::new("a", "main");
        let b = GrantKey::new("b", "main");
        j.append(&Entry::Grant {
            key: a.clone(),
            grant: grant(0),
        })
        .unwrap();
        j.append(&Entry::Grant {
            key: b.clone(),
            grant: grant(1),
        })
        .unwrap();
        j.append(&Entry::Release { key: b }).unwrap();
        j.append(&Entry::Finish {
            pod_uid: "a".into(),
        })
        .unwrap();
        drop(j);
        let (_, replay) = Journal::open(dir.path()).unwrap();
        let mut expected = grant(0);
        expected.finished = true;
        assert_eq!(replay.grants, BTreeMap::from([(a, expected)]));
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn torn_tail_is_dropped_and_corruption_kept_aside() {
        let good = serde_json::to_string(&Entry::Grant {
            key: GrantKey::new("a", "main"),
            grant: grant(0),
        })
        .unwrap();
        let (grants, torn) = replay_bytes(format!("{good}\n{{\"op\":\"gra").as_bytes()).unwrap();
        assert!(torn);
        assert_eq!(grants.len(), 1);
        assert_eq!(
            replay_bytes(format!("garbage\n{good}\n").as_bytes()).unwrap_err(),
            "line 1: expected value at line 1 column 1"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "garbage\n").unwrap();
        let (_, replay) = Journal::open(dir.path()).unwrap();
        let (aside, reason) = replay.corrupt.unwrap();
        assert!(aside.to_string_lossy().contains(".corrupt-"));
        assert_eq!(std::fs::read_to_string(aside).unwrap(), "garbage\n");
        assert!(reason.starts_with("line 1"));
        assert!(replay.grants.is_empty());
    }
}
