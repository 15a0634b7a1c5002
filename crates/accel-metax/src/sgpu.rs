//! MetaX sGPU subdevices (spec/metax.md §4.4–§4.6): a logical slice is a driver object made by
//! writing the card's PCI sysfs directory, recorded by a marker file in the container's working
//! directory, and destroyed by the reclaimer once its Pod has been gone for three passes.
//!
//! | Operation | write |
//! |---|---|
//! | put the card into sGPU mode | `<BDF>/model` ← `sgpu` |
//! | fixed-share QoS | `<BDF>/sgpu/sched_class` ← `1` (only on a card with no subdevice yet) |
//! | create | `<BDF>/sgpu/create` ← the slice's VRAM in MiB |
//! | destroy | `<BDF>/sgpu/destroy` ← its index (a missing file counts as done) |
//!
//! The registry is read back, never assumed: every `<BDF>/sgpu/<entry>` whose name, less a
//! `sgpu` prefix, is an integer is a subdevice, its alias in `<entry>/alias`; a created index is
//! the new entry the driver shows. Every step runs under one mutex ([`Sgpu`]), and nothing is
//! left half-made: a marker that cannot be written destroys the subdevice it records.
//!
//! Markers (`<pods>/<pod uid>/c-<container>/metax-sgpu.json`, written to a `.metax-sgpu-*.tmp`
//! file at 0644 and renamed; the directories 0777) carry `podUID`, `container`, `cardBDF`,
//! `index` (−1: the whole card, held with no subdevice), `coresPct` and `memMiB`. They are the
//! slice ledger the allocator checks against: a retried Allocate finds its own marker and reuses
//! it, or fails closed when it no longer matches.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use accel_backend::chores::{PodDirs, make_dir};
use accel_host::{Host, HostWrites};
use serde::{Deserialize, Serialize};

/// Where the cards' PCI directories are.
pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// Subdevices a card can host (indexes 0..15).
pub const MAX_SUBDEVICES: i32 = 16;
/// The marker's file name in the container's working directory.
pub const MARKER_FILE: &str = "metax-sgpu.json";
/// The marker's index for a card held whole.
pub const WHOLE_CARD: i32 = -1;
/// The prefix of an alias naming its Pod (`gpustack-<pod uid>`).
pub const ALIAS_PREFIX: &str = "gpustack-";
/// Passes a Pod must be absent (or a card drained) before its subdevices are destroyed.
pub const RECLAIM_PASSES: u32 = 3;
/// The value `sgpu/sched_class` is set to: fixed-share (0 best-effort and 2 burst-share are
/// never written).
pub const FIXED_SHARE: &str = "1";

/// One subdevice the driver lists.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Subdevice {
    pub bdf: String,
    pub index: i32,
    /// `<entry>/alias`, trimmed; empty when unreadable.
    pub alias: String,
}

impl Subdevice {
    /// The Pod UID its alias names, when it is `gpustack-<uid>`.
    pub fn pod_uid(&self) -> Option<&str> {
        self.alias
            .strip_prefix(ALIAS_PREFIX)
            .filter(|uid| !uid.is_empty())
    }
}

fn card_dir(bdf: &str) -> String {
    format!("{PCI_DEVICES}/{bdf}")
}

/// Lists every card's subdevices (spec §4.4, "list").
pub fn list(host: &dyn Host) -> Result<Vec<Subdevice>, String> {
    let cards = host.list(PCI_DEVICES).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for bdf in cards {
        let dir = format!("{}/sgpu", card_dir(&bdf));
        let Ok(entries) = host.list(&dir) else {
            continue; // No sgpu directory: not a MetaX card, or not in sGPU mode.
        };
        for entry in entries {
            let number = entry.strip_prefix("sgpu").unwrap_or(&entry);
            let Ok(index) = number.parse::<i32>() else {
                continue;
            };
            let alias = host
                .read_to_string(&format!("{dir}/{entry}/alias"))
                .map(|a| a.trim().to_string())
                .unwrap_or_default();
            out.push(Subdevice {
                bdf: bdf.clone(),
                index,
                alias,
            });
        }
    }
    out.sort();
    Ok(out)
}

/// A slice's marker (spec §4.4, step 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    pub container: String,
    #[serde(rename = "cardBDF")]
    pub card_bdf: String,
    pub index: i32,
    #[serde(rename = "coresPct")]
    pub cores_pct: u32,
    #[serde(rename = "memMiB")]
    pub mem_mib: u64,
}

impl Marker {
    pub fn whole_card(&self) -> bool {
        self.index == WHOLE_CARD
    }
}

/// What a container asks of one card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pod_uid: String,
    pub container: String,
    pub bdf: String,
    pub cores_pct: u32,
    pub mem_mib: u64,
    pub whole_card: bool,
}

/// A marker found on disk, with where it lies.
#[derive(Debug, Clone)]
struct Found {
    path: PathBuf,
    marker: Marker,
}

/// A marker file's record.
fn read_marker(path: &Path) -> Result<Marker, String> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Marker>(&t).map_err(|e| e.to_string()))
}

/// Every readable marker in the container directories under `dirs`
/// (`<uid>/c-<container>/metax-sgpu.json`); unreadable or corrupt ones are logged and skipped.
fn scan(dirs: &PodDirs) -> Vec<Found> {
    let mut out = Vec::new();
    for container in dirs.containers() {
        let path = container.path.join(MARKER_FILE);
        if !path.is_file() {
            continue;
        }
        match read_marker(&path) {
            Ok(marker) => out.push(Found { path, marker }),
            Err(e) => {
                tracing::warn!(marker = %path.display(), "skipping an unreadable sgpu marker: {e}")
            }
        }
    }
    out
}

static TEMP: AtomicU64 = AtomicU64::new(0);

/// Writes `marker` at `path`: a `.metax-sgpu-*.tmp` file at 0644, renamed; its directory
/// made 0777 (the container reads it as whatever user it runs as).
fn write_marker(path: &Path, marker: &Marker) -> Result<(), String> {
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    let dir = path
        .parent()
        .ok_or_else(|| format!("{}: no directory", path.display()))?;
    make_dir(dir, Some(0o777)).map_err(|e| e.to_string())?;
    let text = serde_json::to_string(marker).map_err(|e| e.to_string())?;
    let temp = dir.join(format!(
        ".metax-sgpu-{}-{}.tmp",
        std::process::id(),
        TEMP.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::write(&temp, text.as_bytes())
        .and_then(|()| std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(fail("write", e));
    }
    Ok(())
}

/// How many passes each absent Pod and each drained card has been seen.
#[derive(Debug, Default)]
struct Passes {
    absent: BTreeMap<String, u32>,
    drained: BTreeMap<String, u32>,
}

/// One Pod's subdevices (`(bdf, index)`) and marker files.
type Holding = (Vec<(String, i32)>, Vec<PathBuf>);

/// What one reclaim pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// Subdevices destroyed, as `(bdf, index)`.
    pub destroyed: Vec<(String, i32)>,
    /// Marker files removed.
    pub markers: Vec<PathBuf>,
    /// What failed (the pass goes on; a failed destroy is tried again next pass).
    pub errors: Vec<String>,
}

/// The node's sGPU manager: the registry through `host`, the writes through `writes`, the
/// markers under `pods`; one mutex over every step.
pub struct Sgpu {
    host: Arc<dyn Host>,
    writes: Arc<dyn HostWrites>,
    dirs: PodDirs,
    passes: Mutex<Passes>,
}

impl std::fmt::Debug for Sgpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sgpu")
            .field("pods", &self.dirs.root())
            .finish_non_exhaustive()
    }
}

impl Sgpu {
    pub fn new(host: Arc<dyn Host>, writes: Arc<dyn HostWrites>, pods: PathBuf) -> Sgpu {
        Sgpu {
            host,
            writes,
            dirs: PodDirs::new(pods),
            passes: Mutex::new(Passes::default()),
        }
    }

    /// Whether a marker of `pod_uid` is on disk (its directory stays until the reclaim pass
    /// has destroyed what the marker records).
    pub fn holds(&self, pod_uid: &str) -> bool {
        self.dirs
            .containers()
            .iter()
            .any(|c| c.pod_uid == pod_uid && c.path.join(MARKER_FILE).is_file())
    }

    /// The marker path of one container (`PodDirs`' container directory: each name one path
    /// component).
    pub fn marker_path(&self, pod_uid: &str, container: &str) -> Result<PathBuf, String> {
        self.dirs
            .container(pod_uid, container)
            .map(|dir| dir.join(MARKER_FILE))
            .map_err(|e| e.to_string())
    }

    fn write(&self, path: String, value: &str) -> Result<(), String> {
        self.writes.write(&path, value).map_err(|e| e.to_string())
    }

    /// Destroys one subdevice; a missing `destroy` file counts as done.
    fn destroy(&self, bdf: &str, index: i32) -> Result<(), String> {
        match self.writes.write(
            &format!("{}/sgpu/destroy", card_dir(bdf)),
            &index.to_string(),
        ) {
            Ok(()) => Ok(()),
            Err(e) if e.not_found() => Ok(()),
            Err(e) => Err(format!("card {bdf}: destroy sgpu subdevice {index}: {e}")),
        }
    }

    /// Reserves `request`'s slice (spec §4.4's steps): the index it holds, [`WHOLE_CARD`] for
    /// a whole card. Every refusal is the spec's message.
    pub fn reserve(&self, request: &Request) -> Result<i32, String> {
        let _held = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        let registry =
            list(self.host.as_ref()).map_err(|e| format!("list sgpu subdevices: {e}"))?;
        let own = self.marker_path(&request.pod_uid, &request.container)?;
        let own_text = own.display().to_string();
        if own.exists() {
            let marker =
                read_marker(&own).map_err(|e| format!("read self marker {own_text:?}: {e}"))?;
            if marker.card_bdf != request.bdf
                || marker.cores_pct != request.cores_pct
                || marker.mem_mib != request.mem_mib
                || marker.whole_card() != request.whole_card
            {
                return Err(format!(
                    "marker {own_text:?} mismatches request (card={} cores={} mem={} wholeCard={}): fail closed",
                    request.bdf, request.cores_pct, request.mem_mib, request.whole_card
                ));
            }
            if marker.whole_card() {
                return Ok(WHOLE_CARD);
            }
            if !registry
                .iter()
                .any(|s| s.bdf == marker.card_bdf && s.index == marker.index)
            {
                return Err(format!(
                    "marker {own_text:?} references missing sgpu subdevice {}#{}: fail closed",
                    marker.card_bdf, marker.index
                ));
            }
            return Ok(marker.index);
        }
        let markers: Vec<Marker> = scan(&self.dirs)
            .into_iter()
            .filter(|f| f.path != own && f.marker.card_bdf == request.bdf)
            .map(|f| f.marker)
            .collect();
        let on_card: Vec<&Subdevice> = registry.iter().filter(|s| s.bdf == request.bdf).collect();
        let marker = |index| Marker {
            pod_uid: request.pod_uid.clone(),
            container: request.container.clone(),
            card_bdf: request.bdf.clone(),
            index,
            cores_pct: request.cores_pct,
            mem_mib: request.mem_mib,
        };
        let bdf = &request.bdf;
        if request.whole_card {
            if !on_card.is_empty() || !markers.is_empty() {
                return Err(format!(
                    "card {bdf} is already occupied, cannot take it whole"
                ));
            }
            write_marker(&own, &marker(WHOLE_CARD))?;
            return Ok(WHOLE_CARD);
        }
        if markers.iter().any(Marker::whole_card) {
            return Err(format!("card {bdf} is held whole, cannot slice it"));
        }
        let used: BTreeSet<i32> = on_card
            .iter()
            .map(|s| s.index)
            .chain(markers.iter().map(|m| m.index))
            .collect();
        let Some(predicted) = (0..MAX_SUBDEVICES).find(|i| !used.contains(i)) else {
            return Err(format!(
                "card {bdf}: card sgpu pool exhausted ({MAX_SUBDEVICES} subdevices)"
            ));
        };
        let dir = card_dir(bdf);
        if on_card.is_empty() {
            // A card already hosting subdevices is never re-written: the driver rejects a
            // class change while they are in use.
            self.write(format!("{dir}/model"), "sgpu")
                .map_err(|e| format!("card {bdf}: ensure sgpu model: {e}"))?;
            self.write(format!("{dir}/sgpu/sched_class"), FIXED_SHARE)
                .map_err(|e| format!("card {bdf}: set fixed-share sched class: {e}"))?;
        }
        self.write(format!("{dir}/sgpu/create"), &request.mem_mib.to_string())
            .map_err(|e| format!("card {bdf}: create sgpu subdevice {predicted}: {e}"))?;
        // The index is the one the driver shows now and did not before.
        let before: BTreeSet<i32> = on_card.iter().map(|s| s.index).collect();
        let listed = if self.writes.takes_effect() {
            list(self.host.as_ref())
        } else {
            Err("the writes are recorded, not made (a simulation)".to_string())
        };
        let index = match listed {
            Ok(after) => {
                let new: Vec<i32> = after
                    .iter()
                    .filter(|s| s.bdf == *bdf && !before.contains(&s.index))
                    .map(|s| s.index)
                    .collect();
                if new.contains(&predicted) {
                    predicted
                } else if let [only] = new.as_slice() {
                    *only
                } else if new.is_empty() {
                    return Err(format!(
                        "card {bdf}: create sgpu subdevice {predicted}: the driver accepted the write but lists no new subdevice"
                    ));
                } else {
                    return Err(format!(
                        "card {bdf}: create sgpu subdevice {predicted}: the driver lists {} new subdevices ({new:?}), so which is this slice's cannot be told",
                        new.len()
                    ));
                }
            }
            Err(e) => {
                if self.writes.takes_effect() {
                    tracing::warn!(card = %bdf, "cannot list the subdevices after creating one ({e}); taking the predicted index {predicted}");
                }
                predicted
            }
        };
        if let Err(e) = write_marker(&own, &marker(index)) {
            if let Err(d) = self.destroy(bdf, index) {
                tracing::error!(card = %bdf, "{d}");
            }
            return Err(format!("write marker {own_text:?}: {e}"));
        }
        Ok(index)
    }

    /// One reclaim pass over the node (spec §4.6) given the live Pod UIDs: a Pod absent for
    /// [`RECLAIM_PASSES`] passes loses its subdevices, then its markers, then its empty
    /// directories; marker-less subdevices with no alias naming a Pod are destroyed when their
    /// card has had no live Pod for as many passes. A registry that cannot be listed skips the
    /// pass.
    pub fn reclaim_pass(&self, live: &BTreeSet<String>) -> Reclaimed {
        let mut passes = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut done = Reclaimed::default();
        let registry = match list(self.host.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                done.errors.push(format!("list sgpu subdevices: {e}"));
                return done;
            }
        };
        let markers = scan(&self.dirs);
        let marked: BTreeSet<(&str, i32)> = markers
            .iter()
            .map(|f| (f.marker.card_bdf.as_str(), f.marker.index))
            .collect();
        // Each holder's subdevices and markers.
        let mut holders: BTreeMap<String, Holding> = BTreeMap::new();
        for f in &markers {
            let entry = holders.entry(f.marker.pod_uid.clone()).or_default();
            if !f.marker.whole_card()
                && registry
                    .iter()
                    .any(|s| s.bdf == f.marker.card_bdf && s.index == f.marker.index)
            {
                entry.0.push((f.marker.card_bdf.clone(), f.marker.index));
            }
            entry.1.push(f.path.clone());
        }
        let mut orphans: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for s in &registry {
            if marked.contains(&(s.bdf.as_str(), s.index)) {
                continue;
            }
            match s.pod_uid() {
                Some(uid) => holders
                    .entry(uid.to_string())
                    .or_default()
                    .0
                    .push((s.bdf.clone(), s.index)),
                None => orphans.entry(s.bdf.clone()).or_default().push(s.index),
            }
        }
        passes
            .absent
            .retain(|uid, _| holders.contains_key(uid) && !live.contains(uid));
        for (uid, (subdevices, paths)) in &holders {
            if live.contains(uid) {
                continue;
            }
            let seen = passes.absent.entry(uid.clone()).or_insert(0);
            *seen += 1;
            if *seen < RECLAIM_PASSES {
                continue;
            }
            let mut failed = false;
            for (bdf, index) in subdevices {
                match self.destroy(bdf, *index) {
                    Ok(()) => done.destroyed.push((bdf.clone(), *index)),
                    Err(e) => {
                        failed = true;
                        done.errors.push(e);
                    }
                }
            }
            if failed {
                continue; // The markers stay until their subdevices are gone.
            }
            for path in paths {
                match std::fs::remove_file(path) {
                    Ok(()) => done.markers.push(path.clone()),
                    Err(e) => done.errors.push(format!("remove {}: {e}", path.display())),
                }
                if let Some(container) = path.parent() {
                    let _ = std::fs::remove_dir(container);
                    if let Some(pod) = container.parent() {
                        let _ = std::fs::remove_dir(pod);
                    }
                }
            }
            passes.absent.remove(uid);
        }
        // Cards with a live holder keep their unnamed subdevices.
        let live_cards: BTreeSet<&str> = markers
            .iter()
            .filter(|f| live.contains(&f.marker.pod_uid))
            .map(|f| f.marker.card_bdf.as_str())
            .chain(
                registry
                    .iter()
                    .filter(|s| s.pod_uid().is_some_and(|u| live.contains(u)))
                    .map(|s| s.bdf.as_str()),
            )
            .collect();
        passes
            .drained
            .retain(|bdf, _| orphans.contains_key(bdf) && !live_cards.contains(bdf.as_str()));
        for (bdf, indexes) in &orphans {
            if live_cards.contains(bdf.as_str()) {
                continue;
            }
            let seen = passes.drained.entry(bdf.clone()).or_insert(0);
            *seen += 1;
            if *seen < RECLAIM_PASSES {
                continue;
            }
            for index in indexes {
                match self.destroy(bdf, *index) {
                    Ok(()) => done.destroyed.push((bdf.clone(), *index)),
                    Err(e) => done.errors.push(e),
                }
            }
            passes.drained.remove(bdf);
        }
        done
    }
}

/// A recorded host's sGPU driver: a write to `<BDF>/sgpu/create` makes `<BDF>/sgpu/sgpu<N>`
/// (the lowest free index — what the real driver does is unmeasured, and the allocator reads
/// the index back either way), a write to `destroy` removes it, any other write lands in its
/// file. Files are written under the recording's `root/`; a test refuses a write by making the
/// file a directory.
/// Any other write goes to what it wraps.
pub struct RecordedSgpu {
    root: PathBuf,
    inner: Option<Arc<dyn HostWrites>>,
}

impl std::fmt::Debug for RecordedSgpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedSgpu")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl RecordedSgpu {
    /// The driver of the recording whose files are under `root`.
    pub fn new(root: impl Into<PathBuf>) -> RecordedSgpu {
        RecordedSgpu {
            root: root.into(),
            inner: None,
        }
    }
}

/// The backend's writes wrapper: a recorded host's sGPU driver over its `root/`.
pub fn wrap(dir: &Path, inner: Arc<dyn HostWrites>) -> Arc<dyn HostWrites> {
    Arc::new(RecordedSgpu {
        root: dir.join(accel_host::ROOT_DIR),
        inner: Some(inner),
    })
}

/// Whether `path` is a card's `model` or a file of its `sgpu/` directory.
fn is_sgpu_control(path: &str) -> bool {
    let Some(rest) = path
        .strip_prefix(PCI_DEVICES)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    match rest.split_once('/') {
        Some((_, "model")) => true,
        Some((_, tail)) => tail.starts_with("sgpu/"),
        None => false,
    }
}

impl HostWrites for RecordedSgpu {
    fn remove_empty_dir(&self, path: &str) -> Result<(), accel_host::WriteError> {
        match &self.inner {
            Some(inner) => inner.remove_empty_dir(path),
            None => accel_host::FsWrites::new(&self.root).remove_empty_dir(path),
        }
    }

    fn write(&self, path: &str, value: &str) -> Result<(), accel_host::WriteError> {
        if let (false, Some(inner)) = (is_sgpu_control(path), &self.inner) {
            return inner.write(path, value);
        }
        let fs = accel_host::FsWrites::new(&self.root);
        let full = fs.resolve(path).ok_or_else(|| {
            accel_host::WriteError::new(
                path,
                value,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path leaves the root"),
            )
        })?;
        let fail = |e| accel_host::WriteError::new(path, value, e);
        let sgpu = full.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = full
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let is_sgpu_dir = sgpu.file_name().is_some_and(|n| n == "sgpu");
        if is_sgpu_dir && (name == "create" || name == "destroy") {
            if full.is_dir() {
                return Err(fail(std::io::Error::other("the driver refused the write")));
            }
            if !sgpu.is_dir() {
                return Err(fail(std::io::Error::from(std::io::ErrorKind::NotFound)));
            }
            if name == "create" {
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| fail(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
                let index = (0..MAX_SUBDEVICES)
                    .find(|i| !sgpu.join(format!("sgpu{i}")).exists())
                    .ok_or_else(|| fail(std::io::Error::other("no free subdevice")))?;
                let dir = sgpu.join(format!("sgpu{index}"));
                std::fs::create_dir_all(&dir).map_err(fail)?;
                std::fs::write(dir.join("vram"), value.trim()).map_err(fail)?;
                return Ok(());
            }
            let index: i32 = value
                .trim()
                .parse()
                .map_err(|_| fail(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
            let dir = sgpu.join(format!("sgpu{index}"));
            if !dir.is_dir() {
                return Err(fail(std::io::Error::other("no such subdevice")));
            }
            return std::fs::remove_dir_all(&dir).map_err(fail);
        }
        if name == "model" {
            // Entering sGPU mode makes the card's sgpu directory with its control files.
            std::fs::create_dir_all(sgpu.join("sgpu")).map_err(fail)?;
        }
        if full.is_dir() {
            return Err(fail(std::io::Error::other("the driver refused the write")));
        }
        std::fs::write(&full, value).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::FsHost;

    const BDF: &str = "0000:3d:00.0";

    struct Node {
        dir: tempfile::TempDir,
        sgpu: Sgpu,
    }

    fn node() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let card = dir.path().join("root/sys/bus/pci/devices").join(BDF);
        std::fs::create_dir_all(&card).unwrap();
        std::fs::write(card.join("model"), "native\n").unwrap();
        std::fs::create_dir_all(dir.path().join("root/sys/bus/pci/devices/0000:3e:00.0")).unwrap();
        let host: Arc<dyn Host> = Arc::new(FsHost::new(dir.path().join("root")));
        let writes: Arc<dyn HostWrites> = Arc::new(RecordedSgpu::new(dir.path().join("root")));
        let sgpu = Sgpu::new(host, writes, dir.path().join("pods"));
        Node { dir, sgpu }
    }

    fn request(uid: &str, mem: u64) -> Request {
        Request {
            pod_uid: uid.into(),
            container: "main".into(),
            bdf: BDF.into(),
            cores_pct: 60,
            mem_mib: mem,
            whole_card: false,
        }
    }

    fn sgpu_dir(n: &Node) -> PathBuf {
        n.dir
            .path()
            .join("root/sys/bus/pci/devices")
            .join(BDF)
            .join("sgpu")
    }

    #[test]
    fn a_slice_puts_the_card_in_sgpu_mode_once_and_is_marked() {
        let n = node();
        assert_eq!(n.sgpu.reserve(&request("a", 32768)), Ok(0));
        let card = sgpu_dir(&n);
        assert_eq!(
            std::fs::read_to_string(card.join("../model")).unwrap(),
            "sgpu"
        );
        assert_eq!(
            std::fs::read_to_string(card.join("sched_class")).unwrap(),
            "1"
        );
        assert_eq!(
            std::fs::read_to_string(card.join("sgpu0/vram")).unwrap(),
            "32768"
        );
        let marker = std::fs::read_to_string(n.sgpu.marker_path("a", "main").unwrap()).unwrap();
        assert_eq!(
            marker,
            r#"{"podUID":"a","container":"main","cardBDF":"0000:3d:00.0","index":0,"coresPct":60,"memMiB":32768}"#
        );
        let mode = std::fs::metadata(n.sgpu.marker_path("a", "main").unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // The second slice leaves the class alone: the card already hosts a subdevice.
        std::fs::write(card.join("sched_class"), "untouched").unwrap();
        assert_eq!(n.sgpu.reserve(&request("b", 16384)), Ok(1));
        assert_eq!(
            std::fs::read_to_string(card.join("sched_class")).unwrap(),
            "untouched"
        );
        // A retry finds its own marker; a changed request fails closed.
        assert_eq!(n.sgpu.reserve(&request("a", 32768)), Ok(0));
        let e = n.sgpu.reserve(&request("a", 1024)).unwrap_err();
        assert!(
            e.ends_with("mismatches request (card=0000:3d:00.0 cores=60 mem=1024 wholeCard=false): fail closed"),
            "{e}"
        );
        assert_eq!(list(n.sgpu.host.as_ref()).unwrap().len(), 2);
    }

    #[test]
    fn whole_and_sliced_holders_exclude_each_other_and_the_pool_ends_at_sixteen() {
        let n = node();
        let whole = Request {
            whole_card: true,
            cores_pct: 100,
            mem_mib: 65536,
            ..request("w", 0)
        };
        assert_eq!(n.sgpu.reserve(&whole), Ok(WHOLE_CARD));
        assert!(!sgpu_dir(&n).exists(), "a whole card makes no subdevice");
        assert_eq!(
            n.sgpu.reserve(&request("a", 1024)),
            Err(format!("card {BDF} is held whole, cannot slice it"))
        );
        std::fs::remove_dir_all(n.dir.path().join("pods/w")).unwrap();
        for i in 0..16 {
            assert_eq!(n.sgpu.reserve(&request(&format!("p{i}"), 1024)), Ok(i));
        }
        assert_eq!(
            n.sgpu.reserve(&request("x", 1024)),
            Err(format!(
                "card {BDF}: card sgpu pool exhausted (16 subdevices)"
            ))
        );
        assert_eq!(
            n.sgpu.reserve(&Request {
                pod_uid: "w2".into(),
                ..whole
            }),
            Err(format!(
                "card {BDF} is already occupied, cannot take it whole"
            ))
        );
    }

    #[test]
    fn a_refused_create_leaves_nothing_and_a_missing_subdevice_fails_closed() {
        let n = node();
        assert_eq!(n.sgpu.reserve(&request("a", 1024)), Ok(0));
        std::fs::create_dir_all(sgpu_dir(&n).join("create")).unwrap();
        let e = n.sgpu.reserve(&request("b", 1024)).unwrap_err();
        assert!(
            e.starts_with(&format!("card {BDF}: create sgpu subdevice 1: ")),
            "{e}"
        );
        assert!(!n.sgpu.marker_path("b", "main").unwrap().exists());
        assert_eq!(list(n.sgpu.host.as_ref()).unwrap().len(), 1);
        std::fs::remove_dir_all(sgpu_dir(&n).join("sgpu0")).unwrap();
        let e = n.sgpu.reserve(&request("a", 1024)).unwrap_err();
        assert!(
            e.ends_with(&format!(
                "references missing sgpu subdevice {BDF}#0: fail closed"
            )),
            "{e}"
        );
    }

    #[test]
    fn the_index_is_the_one_the_driver_shows_and_a_failed_marker_destroys_it() {
        let n = node();
        // A marker for index 0 whose subdevice is gone: the prediction skips 0, the driver
        // (lowest free) makes sgpu0, and the slice records what the driver shows.
        write_marker(
            &n.sgpu.marker_path("stale", "main").unwrap(),
            &Marker {
                pod_uid: "stale".into(),
                container: "main".into(),
                card_bdf: BDF.into(),
                index: 0,
                cores_pct: 60,
                mem_mib: 1024,
            },
        )
        .unwrap();
        assert_eq!(n.sgpu.reserve(&request("a", 1024)), Ok(0));
        // The marker cannot be written: the subdevice it would record is destroyed.
        std::fs::write(n.dir.path().join("pods/b"), "not a directory").unwrap();
        let e = n.sgpu.reserve(&request("b", 1024)).unwrap_err();
        assert!(e.starts_with("write marker "), "{e}");
        assert_eq!(
            list(n.sgpu.host.as_ref())
                .unwrap()
                .iter()
                .map(|s| s.index)
                .collect::<Vec<_>>(),
            [0],
            "nothing half-made"
        );
    }

    #[test]
    fn a_pod_gone_three_passes_loses_its_subdevices_then_its_markers() {
        let n = node();
        n.sgpu.reserve(&request("a", 1024)).unwrap();
        n.sgpu.reserve(&request("b", 1024)).unwrap();
        let live = BTreeSet::from(["b".to_string()]);
        assert_eq!(n.sgpu.reclaim_pass(&live), Reclaimed::default());
        assert_eq!(n.sgpu.reclaim_pass(&live), Reclaimed::default());
        let done = n.sgpu.reclaim_pass(&live);
        assert_eq!(done.destroyed, [(BDF.to_string(), 0)]);
        assert_eq!(done.markers, [n.sgpu.marker_path("a", "main").unwrap()]);
        assert!(
            !n.dir.path().join("pods/a").exists(),
            "its empty dirs go too"
        );
        assert!(n.sgpu.marker_path("b", "main").unwrap().exists());
        assert_eq!(
            list(n.sgpu.host.as_ref())
                .unwrap()
                .iter()
                .map(|s| s.index)
                .collect::<Vec<_>>(),
            [1]
        );
        // A Pod seen again restarts its count.
        let none = BTreeSet::new();
        n.sgpu.reclaim_pass(&none);
        n.sgpu.reclaim_pass(&live);
        n.sgpu.reclaim_pass(&none);
        assert!(
            n.sgpu.reclaim_pass(&none).destroyed.is_empty(),
            "only two passes in a row"
        );
        assert_eq!(n.sgpu.reclaim_pass(&none).destroyed, [(BDF.to_string(), 1)]);
    }

    #[test]
    fn unnamed_subdevices_go_only_from_a_drained_card_and_aliases_name_their_pod() {
        let n = node();
        n.sgpu.reserve(&request("b", 1024)).unwrap();
        let card = sgpu_dir(&n);
        // Two subdevices nobody marked: one unnamed, one whose alias names Pod "c".
        std::fs::create_dir_all(card.join("sgpu5")).unwrap();
        std::fs::create_dir_all(card.join("sgpu6")).unwrap();
        std::fs::write(card.join("sgpu6/alias"), "gpustack-c\n").unwrap();
        let live = BTreeSet::from(["b".to_string()]);
        for _ in 0..3 {
            let done = n.sgpu.reclaim_pass(&live);
            assert!(
                !done.destroyed.contains(&(BDF.to_string(), 5)),
                "b is live on the card"
            );
        }
        assert!(
            !card.join("sgpu6").exists(),
            "c is gone: its aliased subdevice went"
        );
        let none = BTreeSet::new();
        n.sgpu.reclaim_pass(&none);
        n.sgpu.reclaim_pass(&none);
        let done = n.sgpu.reclaim_pass(&none);
        assert!(done.destroyed.contains(&(BDF.to_string(), 5)), "{done:?}");
        assert!(done.destroyed.contains(&(BDF.to_string(), 0)), "{done:?}");
    }
}
