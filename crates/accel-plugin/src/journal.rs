//! The node-local ledger journal in `--data-dir`: every grant, release and finish, so a restart
//! of the daemon, or of the machine, loses no grant that was answered and charges none twice.
//!
//! **Durable before answered** (issue 44 item 13). An append writes its entry under the ledger
//! lock and the caller takes a [`Ticket`]; with the lock released it awaits
//! [`Ticket::durable`], which a syncer thread satisfies with one `fdatasync` for every append
//! that arrived meanwhile (group commit across concurrent Allocates). Only then is the grant
//! answered. Releases and finishes are synced the same way, nobody waiting for them.
//!
//! **Why the file is preallocated.** On the rig's disk (ext4 on a virtual disk, shared with
//! etcd and the kubelet's checkpoints) an `fdatasync` after an `O_APPEND` write cost 0.2 ms at
//! best and several ms at p99: the append grows the file, so every sync had to commit the file
//! system's own journal (jbd2), which every other writer of the disk shares. Here the file holds
//! [`PREALLOCATE`] bytes of zeros, written and synced ahead of the entries, and each entry is
//! written in place over them (`pwrite`). Overwriting allocated, written blocks changes nothing
//! `fdatasync` must persist (the size stays, mtime is not needed to read the data), so the sync
//! is the data page and the device's cache flush. The syncer grows the file by another
//! [`PREALLOCATE`] when it is idle and less than a quarter is left, so growth (the one sync that
//! does commit metadata) happens beside Allocate, not in it; an entry that finds no room (a
//! burst the syncer could not get ahead of) grows the file itself.
//!
//! **Format and replay.** JSON lines, then zeros to the end of the file; replay reads up to the
//! first zero byte. A torn last line (a crash mid-write: no newline before the zeros or the end)
//! is dropped with a warning, and so is anything written past a zero byte (a page whose sectors
//! reached the disk out of order): neither was ever answered, since an answer waits for a sync
//! covering its entry and every byte before it. Any other unreadable line makes the journal
//! corrupt: it is kept aside, untouched, and the caller rebuilds from the kubelet and the Pods.
//! On open the journal is read back, then compacted into a snapshot written atomically, and
//! preallocated again. A journal written before the preallocation (no zeros) reads the same.
//!
//! **A failed sync.** A failed `fdatasync` may have lost any write since the last good one (the
//! kernel reports the error once, then forgets it), so the journal is then *failed*: no ticket
//! past the last good sync is durable until [`Journal::compact`] rewrites the whole ledger
//! atomically (the Allocate path does it, and answers only when that succeeded).
//!
//! This module stores grants; it must not judge them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Instant;

use accel_core::ledger::{Grant, GrantKey};
use accel_host::atomic::{STATE_FILE_MODE, write_atomic};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::metrics::JournalMetrics;

/// The journal's file name in the data directory.
pub const FILE_NAME: &str = "ledger.journal";

/// The zeros kept ahead of the entries, and what the file grows by: about 3,500 grant entries.
pub const PREALLOCATE: u64 = 1 << 20;

/// The syncer grows the file when less than this is left after the entries.
const GROW_BELOW: u64 = PREALLOCATE / 4;

/// What growth writes from: zeros in `.bss`, never touched, so never resident.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// A journal that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Appending or growing failed: the entry is not in the journal.
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

/// An append the journal could not make durable: its `fdatasync` failed (or the journal closed
/// first). The grant must not be answered until [`Journal::compact`] has rewritten the ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the ledger journal could not be made durable: {0}")]
pub struct NotDurable(pub String);

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
    /// A torn write that was dropped: a last line without its newline, or bytes past a zero.
    pub torn_tail: bool,
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    segment: Arc<Segment>,
    /// Appends written so far (the sequence number of the last one).
    appended: u64,
    shared: Arc<SyncShared>,
    syncer: Syncer,
}

/// How far the journal is on disk: every append up to `synced` has been through `fdatasync`
/// (or a compaction's atomic write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    pub appended: u64,
    pub synced: u64,
}

/// What the syncer publishes: appends up to `through` are durable; `failure` (until the next
/// compaction) says a sync failed and nothing past `through` can be trusted.
#[derive(Debug, Clone, Default)]
struct Progress {
    through: u64,
    failure: Option<Arc<str>>,
}

/// A claim on the durability of every append written before it was taken.
#[derive(Debug)]
pub struct Ticket {
    through: u64,
    progress: watch::Receiver<Progress>,
}

impl Ticket {
    /// Whether every append before this ticket is durable already (no waiting).
    pub fn is_durable(&self) -> bool {
        self.progress.borrow().through >= self.through
    }

    /// Waits until every append before this ticket is durable; `Err` when a sync failed first
    /// (or the journal closed): the caller must not answer on it.
    pub async fn durable(mut self) -> Result<(), NotDurable> {
        let through = self.through;
        let seen = self
            .progress
            .wait_for(|p| p.through >= through || p.failure.is_some())
            .await;
        match seen {
            Ok(p) if p.through >= through => Ok(()),
            Ok(p) => Err(NotDurable(
                p.failure.as_deref().unwrap_or("a sync failed").to_string(),
            )),
            Err(_) => Err(NotDurable("the journal closed before the sync".into())),
        }
    }

    /// The later of two tickets (the one whose durability covers both).
    pub fn max(self, other: Ticket) -> Ticket {
        if other.through > self.through {
            other
        } else {
            self
        }
    }
}

/// One journal file as it is being written: replaced as a whole by each compaction.
#[derive(Debug)]
struct Segment {
    file: File,
    /// Bumped by every compaction: a sync of an older segment says nothing about this one.
    generation: u64,
    /// Where the next entry goes: the end of the entries (written by the appender only).
    end: AtomicU64,
    /// The file's length: zeros from `end` to here.
    capacity: AtomicU64,
    /// Held while the file grows (by the syncer when idle; rarely, by an append).
    growing: Mutex<()>,
}

impl Segment {
    /// Writes zeros from the capacity to `by` bytes past it (not synced, not published).
    fn write_zeros(&self, by: u64) -> std::io::Result<u64> {
        let from = self.capacity.load(Ordering::Acquire);
        let to = from + by;
        let mut at = from;
        while at < to {
            let n = (to - at).min(ZEROS.len() as u64) as usize;
            self.file.write_all_at(&ZEROS[..n], at)?;
            at += n as u64;
        }
        Ok(to)
    }
}

/// What the journal and its syncer thread share.
#[derive(Debug)]
struct SyncShared {
    shown: String,
    progress: watch::Sender<Progress>,
    /// The generation of the segment being written ([`Segment::generation`]).
    generation: AtomicU64,
    metrics: JournalMetrics,
    #[cfg(any(test, feature = "testing"))]
    faults: SyncFaults,
}

impl SyncShared {
    /// `fdatasync` of `file`, timed.
    fn sync(&self, file: &File) -> std::io::Result<()> {
        #[cfg(any(test, feature = "testing"))]
        self.faults.before_sync()?;
        let started = Instant::now();
        let synced = file.sync_data();
        self.metrics.synced(started.elapsed());
        synced
    }

    /// Makes the appends up to `request.through` durable and says so (or that it failed).
    fn sync_request(&self, request: &SyncRequest) {
        let synced = self.sync(&request.segment.file);
        let current = request.segment.generation == self.generation.load(Ordering::Acquire);
        if let Err(e) = &synced {
            if !current {
                // A compaction replaced this file meanwhile and synced all of it.
                return;
            }
            tracing::error!(
                "ledger journal {}: fdatasync failed: {e}; no grant is answered until the journal is rewritten",
                self.shown
            );
        }
        let through = request.through;
        let mut covered = 0;
        self.progress.send_if_modified(|p| match &synced {
            Ok(()) if p.failure.is_none() && through > p.through => {
                covered = through - p.through;
                p.through = through;
                true
            }
            Ok(()) => false,
            Err(e) if current => {
                p.failure = Some(format!("{}: fdatasync failed: {e}", self.shown).into());
                true
            }
            Err(_) => false,
        });
        self.metrics.covered(covered);
    }

    /// Grows `segment` by [`PREALLOCATE`] zeros, synced, when less than [`GROW_BELOW`] is left.
    fn grow_if_low(&self, segment: &Segment) {
        if segment.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        let left = segment
            .capacity
            .load(Ordering::Acquire)
            .saturating_sub(segment.end.load(Ordering::Acquire));
        if left >= GROW_BELOW {
            return;
        }
        // An append growing the file itself is doing it.
        let Ok(_growing) = segment.growing.try_lock() else {
            return;
        };
        let grown = segment
            .write_zeros(PREALLOCATE)
            .and_then(|to| self.sync(&segment.file).map(|()| to));
        match grown {
            Ok(to) => {
                segment.capacity.store(to, Ordering::Release);
                self.metrics.grown();
            }
            Err(e) => tracing::warn!(
                "ledger journal {}: cannot preallocate {PREALLOCATE} more bytes: {e}; appends grow it themselves",
                self.shown
            ),
        }
    }
}

/// One sync to do: the segment appended to, and the last append it covers.
struct SyncRequest {
    segment: Arc<Segment>,
    through: u64,
}

/// The thread that makes appends durable, one `fdatasync` for all the appends that arrived
/// while the previous one ran, and grows the file when idle. It ends when the journal is
/// dropped, after the last sync.
#[derive(Debug)]
struct Syncer {
    requests: Option<mpsc::Sender<SyncRequest>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    fn start(shared: &Arc<SyncShared>) -> Syncer {
        let (requests, incoming) = mpsc::channel::<SyncRequest>();
        let shared_ = shared.clone();
        let thread = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || sync_loop(&shared_, &incoming));
        match thread {
            Ok(thread) => Syncer {
                requests: Some(requests),
                thread: Some(thread),
            },
            Err(e) => {
                // No thread: sync in line instead (slower, never less durable).
                tracing::warn!("ledger journal: no sync thread ({e}); appends sync in line");
                Syncer {
                    requests: None,
                    thread: None,
                }
            }
        }
    }

    /// Queues a sync of `segment` covering appends up to `through`; syncs in line without a
    /// thread.
    fn request(&self, shared: &SyncShared, segment: &Arc<Segment>, through: u64) {
        let request = SyncRequest {
            segment: segment.clone(),
            through,
        };
        match &self.requests {
            Some(requests) => {
                if let Err(mpsc::SendError(request)) = requests.send(request) {
                    shared.sync_request(&request);
                }
            }
            None => shared.sync_request(&request),
        }
    }
}

fn sync_loop(shared: &SyncShared, incoming: &mpsc::Receiver<SyncRequest>) {
    let mut next = None;
    loop {
        let mut request = match next.take() {
            Some(request) => request,
            None => match incoming.recv() {
                Ok(request) => request,
                Err(_) => return,
            },
        };
        // Group commit: everything that queued up meanwhile goes in this one sync.
        while let Ok(later) = incoming.try_recv() {
            if !Arc::ptr_eq(&later.segment, &request.segment) {
                // The journal was compacted in between: finish the old file first.
                shared.sync_request(&request);
            }
            request = later;
        }
        shared.sync_request(&request);
        match incoming.try_recv() {
            Ok(later) => next = Some(later),
            // Idle: the time to grow the file, off every Allocate's path.
            Err(mpsc::TryRecvError::Empty) => shared.grow_if_low(&request.segment),
            Err(mpsc::TryRecvError::Disconnected) => return,
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

impl Journal {
    /// Opens (or creates) the journal in `data_dir`, replaying and compacting it; its syncs are
    /// counted nowhere.
    pub fn open(data_dir: &Path) -> Result<(Journal, Replay), JournalError> {
        Journal::open_measured(data_dir, JournalMetrics::default())
    }

    /// [`Journal::open`], its syncs timed into `metrics`.
    pub fn open_measured(
        data_dir: &Path,
        metrics: JournalMetrics,
    ) -> Result<(Journal, Replay), JournalError> {
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
        let shared = Arc::new(SyncShared {
            shown: path.display().to_string(),
            progress: watch::channel(Progress::default()).0,
            generation: AtomicU64::new(0),
            metrics,
            #[cfg(any(test, feature = "testing"))]
            faults: SyncFaults::default(),
        });
        let mut journal = Journal {
            // Replaced by the compaction below before anything is written to it.
            segment: Arc::new(Segment {
                file: open_write(&path).map_err(io("open for writing"))?,
                generation: 0,
                end: AtomicU64::new(0),
                capacity: AtomicU64::new(0),
                growing: Mutex::new(()),
            }),
            appended: 0,
            syncer: Syncer::start(&shared),
            shared,
            path,
        };
        journal.compact(&replay.grants)?;
        Ok((journal, replay))
    }

    /// Rewrites the journal as exactly these grants (atomically), preallocates it again, then
    /// appends after them. Everything appended before is durable once this returns `Ok` (the
    /// snapshot was synced), and a failed sync before it no longer matters.
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
        let file = open_write(&self.path).map_err(|source| JournalError::Io {
            path: self.path.clone(),
            step: "reopen for writing",
            source,
        })?;
        let end = text.len() as u64;
        let segment = Segment {
            file,
            generation: self.shared.generation.load(Ordering::Acquire) + 1,
            end: AtomicU64::new(end),
            capacity: AtomicU64::new(end),
            growing: Mutex::new(()),
        };
        // Preallocated before the first append. Without it (a full disk) appends grow the file
        // themselves, and say so if they cannot.
        match segment
            .write_zeros(PREALLOCATE)
            .and_then(|to| segment.file.sync_data().map(|()| to))
        {
            Ok(to) => segment.capacity.store(to, Ordering::Release),
            Err(e) => tracing::warn!(
                "ledger journal {}: cannot preallocate {PREALLOCATE} bytes: {e}",
                self.path.display()
            ),
        }
        self.shared
            .generation
            .store(segment.generation, Ordering::Release);
        self.segment = Arc::new(segment);
        let appended = self.appended;
        self.shared.progress.send_modify(|p| {
            p.through = p.through.max(appended);
            p.failure = None;
        });
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

    /// Appends one entry: written in place before returning (no crash of this process can lose
    /// it), made durable by the syncer right after; a [`Ticket`] taken now waits for that.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let line = self.encode(entry)?;
        let segment = &self.segment;
        let end = segment.end.load(Ordering::Acquire);
        let len = line.len() as u64;
        let io = |step| {
            let path = self.path.clone();
            move |source| JournalError::Io { path, step, source }
        };
        if end + len > segment.capacity.load(Ordering::Acquire) {
            // No room left (the syncer grows the file ahead of this, when it is idle): grow it
            // here; this entry's sync then also commits the new size.
            let _growing = segment
                .growing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let capacity = segment.capacity.load(Ordering::Acquire);
            if end + len > capacity {
                let by = (end + len - capacity).next_multiple_of(PREALLOCATE);
                let to = segment.write_zeros(by).map_err(io("grow"))?;
                segment.capacity.store(to, Ordering::Release);
                self.shared.metrics.grown();
            }
        }
        if let Err(e) = segment.file.write_all_at(line.as_bytes(), end) {
            // Zeros back over what part of it was written, best effort: the next entry goes
            // here, and nothing of this one may be read as part of it.
            let _ = segment
                .file
                .write_all_at(&ZEROS[..line.len().min(ZEROS.len())], end);
            return Err(io("append")(e));
        }
        segment.end.store(end + len, Ordering::Release);
        self.appended += 1;
        self.syncer
            .request(&self.shared, &self.segment, self.appended);
        Ok(())
    }

    /// A claim on every append written so far: [`Ticket::durable`] resolves when they are all
    /// on disk. Take it under the same lock as the appends it must cover.
    pub fn ticket(&self) -> Ticket {
        Ticket {
            through: self.appended,
            progress: self.shared.progress.subscribe(),
        }
    }

    /// How many appends were written, and how many of them are durable.
    pub fn durability(&self) -> Durability {
        Durability {
            appended: self.appended,
            synced: self.shared.progress.borrow().through,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length: where the zeros ahead of the entries end.
    pub fn capacity(&self) -> u64 {
        self.segment.capacity.load(Ordering::Acquire)
    }

    /// The syncs this journal will fail or hold (tests only).
    #[cfg(any(test, feature = "testing"))]
    pub fn faults(&self) -> SyncFaults {
        self.shared.faults.clone()
    }
}

/// Syncs a test makes fail or wait: [`SyncFaults::fail_next`] fails the next `n` syncs,
/// [`SyncFaults::hold`] holds every sync (the appends stay written, not durable) until
/// [`SyncFaults::release`]; [`SyncFaults::syncs`] counts the syncs tried.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone, Default)]
pub struct SyncFaults {
    state: Arc<(Mutex<FaultState>, std::sync::Condvar)>,
}

#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default)]
struct FaultState {
    fail: u32,
    held: bool,
    syncs: u64,
}

#[cfg(any(test, feature = "testing"))]
impl SyncFaults {
    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next `n` syncs fail (as a failing disk's `fdatasync` would).
    pub fn fail_next(&self, n: u32) {
        self.state().fail = n;
    }

    /// Every sync waits until [`SyncFaults::release`].
    pub fn hold(&self) {
        self.state().held = true;
    }

    pub fn release(&self) {
        self.state().held = false;
        self.state.1.notify_all();
    }

    /// The syncs tried so far (the appends' and the growths', failed ones included).
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    fn before_sync(&self) -> std::io::Result<()> {
        let mut state = self.state();
        while state.held {
            state = self
                .state
                .1
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.syncs += 1;
        if state.fail > 0 {
            state.fail -= 1;
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        Ok(())
    }
}

/// Opened for positional writes (never `O_APPEND`: Linux would ignore the offset), created 0600.
fn open_write(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
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

/// The entries' part of a journal file: everything before the first zero byte (the
/// preallocated room, or a hole a torn write left), and whether anything but zeros follows it.
pub fn written_part(bytes: &[u8]) -> (&[u8], bool) {
    match bytes.iter().position(|b| *b == 0) {
        None => (bytes, false),
        Some(at) => (&bytes[..at], bytes[at..].iter().any(|b| *b != 0)),
    }
}

/// Replays journal bytes into grants. The entries end at the first zero byte
/// ([`written_part`]); a last line without its newline, or bytes past that zero, are a torn
/// write and are dropped (`true`); any other line that does not read is corruption (`Err`
/// naming the line).
pub fn replay_bytes(bytes: &[u8]) -> Result<(BTreeMap<GrantKey, Grant>, bool), String> {
    let (bytes, past_a_hole) = written_part(bytes);
    let mut grants = BTreeMap::new();
    let complete = bytes.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let mut torn = past_a_hole;
    for (n, line) in lines.iter().enumerate() {
        let last = n + 1 == lines.len();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if last && !complete {
            // Written in part: never synced, never answered, whatever it reads as.
            torn = true;
            break;
        }
        let entry: Entry = match serde_json::from_slice(line) {
            Ok(entry) => entry,
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
mod tests;
