//! The node-local ledger journal in `--data-dir`: every grant, release and finish, appended
//! before Allocate answers, so a restart of the daemon loses no grant and charges none twice.
//!
//! An append is written to the file (the kernel holds it from then on: no crash of this process
//! can lose it) and made durable on disk by a syncer thread right after, one `fdatasync` for
//! every append that arrived meanwhile (group commit). The sync is not on Allocate's path: on the
//! rig's node it cost 0.2–2.4 ms a grant (the disk shared with other writers), more than the
//! whole of NVIDIA's Allocate, while what it protects against — the machine going down within a
//! millisecond of the answer — also ends every container the grant served; after such a crash
//! the ledger is rebuilt from the kubelet's own checkpoint (pod-resources) and the Pods'
//! annotations (DESIGN.md, "Restart"). [`Journal::durability`] says how far the syncer got.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

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
    file: Arc<File>,
    /// Appends written so far (the sequence number of the last one).
    appended: u64,
    syncer: Syncer,
}

/// How far the journal is on disk: every append up to `synced` has been through `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    pub appended: u64,
    pub synced: u64,
}

/// One sync to do: the file as it was appended to, and the last append it covers.
struct SyncRequest {
    file: Arc<File>,
    through: u64,
}

/// The thread that makes appends durable, one `fdatasync` for all the appends that arrived
/// while the previous one ran. It ends when the journal is dropped, after the last sync.
#[derive(Debug)]
struct Syncer {
    requests: Option<mpsc::Sender<SyncRequest>>,
    synced: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    fn start(path: &Path) -> Syncer {
        let (requests, incoming) = mpsc::channel::<SyncRequest>();
        let synced = Arc::new(AtomicU64::new(0));
        let progress = synced.clone();
        let shown = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || {
                while let Ok(mut request) = incoming.recv() {
                    // Group commit: everything that queued up meanwhile goes in this one sync.
                    while let Ok(later) = incoming.try_recv() {
                        if !Arc::ptr_eq(&later.file, &request.file) {
                            // The journal was compacted in between: finish the old file first.
                            sync(&request.file, &shown);
                        }
                        request = later;
                    }
                    if sync(&request.file, &shown) {
                        progress.fetch_max(request.through, Ordering::Release);
                    }
                }
            });
        match thread {
            Ok(thread) => Syncer {
                requests: Some(requests),
                synced,
                thread: Some(thread),
            },
            Err(e) => {
                // No thread: sync in line instead (slower, never less durable).
                tracing::warn!("ledger journal: no sync thread ({e}); appends sync in line");
                Syncer {
                    requests: None,
                    synced,
                    thread: None,
                }
            }
        }
    }

    /// Queues a sync of `file` covering appends up to `through`; syncs in line without a thread.
    fn request(&self, file: &Arc<File>, through: u64, path: &Path) {
        let request = SyncRequest {
            file: file.clone(),
            through,
        };
        let queued = match &self.requests {
            Some(requests) => requests.send(request).is_ok(),
            None => false,
        };
        if !queued && sync(file, &path.display().to_string()) {
            self.synced.fetch_max(through, Ordering::Release);
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish the syncs queued, then end.
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `fdatasync` of the journal; a failure is logged loudly (the grant stands: it was answered).
fn sync(file: &File, path: &str) -> bool {
    match file.sync_data() {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(
                "ledger journal {path}: fdatasync failed: {e}; the last grants may not survive a machine crash"
            );
            false
        }
    }
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
            file: Arc::new(open_append(&path).map_err(io("open for append"))?),
            appended: 0,
            syncer: Syncer::start(&path),
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
        self.file = Arc::new(open_append(&self.path).map_err(|source| JournalError::Io {
            path: self.path.clone(),
            step: "reopen for append",
            source,
        })?);
        // The snapshot was synced by its atomic write: everything appended so far is on disk.
        self.syncer
            .synced
            .fetch_max(self.appended, Ordering::Release);
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

    /// Appends one entry: written to the file before returning (no crash of this process can
    /// lose it), made durable on disk by the syncer right after (see the module docs).
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let line = self.encode(entry)?;
        (&*self.file)
            .write_all(line.as_bytes())
            .map_err(|source| JournalError::Io {
                path: self.path.clone(),
                step: "append",
                source,
            })?;
        self.appended += 1;
        self.syncer.request(&self.file, self.appended, &self.path);
        Ok(())
    }

    /// How many appends were written, and how many of them the syncer has made durable.
    pub fn durability(&self) -> Durability {
        Durability {
            appended: self.appended,
            synced: self.syncer.synced.load(Ordering::Acquire),
        }
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
            partition: None,
            finished: false,
        }
    }

    #[test]
    fn appends_are_written_at_once_and_synced_by_the_syncer_right_after() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        for n in 0..50 {
            j.append(&Entry::Grant {
                key: GrantKey::new(format!("pod-{n}"), "main"),
                grant: grant(n % 8),
            })
            .unwrap();
        }
        // Written before append returned: another reader sees every line at once.
        let text = std::fs::read_to_string(j.path()).unwrap();
        assert_eq!(text.lines().count(), 50);
        // Synced by the thread soon after, in as few fdatasyncs as it could group.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while j.durability().synced < 50 {
            assert!(
                std::time::Instant::now() < until,
                "the syncer did not catch up: {:?}",
                j.durability()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            j.durability(),
            Durability {
                appended: 50,
                synced: 50
            }
        );
        // A compaction's snapshot is written synced: nothing is left for the thread.
        let (grants, _) = replay_bytes(text.as_bytes()).unwrap();
        j.append(&Entry::Release {
            key: GrantKey::new("pod-0", "main"),
        })
        .unwrap();
        j.compact(&grants).unwrap();
        assert_eq!(j.durability().synced, 51);
    }

    #[test]
    fn dropping_the_journal_waits_for_its_last_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        j.append(&Entry::Finish {
            pod_uid: "a".into(),
        })
        .unwrap();
        let synced = j.syncer.synced.clone();
        drop(j);
        assert_eq!(
            synced.load(Ordering::Acquire),
            1,
            "the queued sync ran before the drop returned"
        );
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
