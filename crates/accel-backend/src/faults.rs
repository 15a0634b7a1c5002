//! The fault record: the kernel-log conditions raised this boot, per accelerator, kept in
//! `faults.json` so a restart in the same boot still knows them (seed 002, "XIDs and GPU
//! health"), and the health rule's kernel-log half (DESIGN.md, "Health"), for every
//! manufacturer: what a line means is the manufacturer's ([`crate::health::FaultClassifier`]:
//! NVIDIA's `Xid<n>`, AMD's `AmdRasUncorrectable` …), what is done with it is the same.
//!
//! Each fault on an accelerator the inventory lists raises its condition (status true, the
//! accelerator's UUID, the driver's text as message), one per condition and accelerator; a
//! fault on an unknown bus (or naming none) is only logged. Hardware-class faults take the
//! accelerator out of service through [`accel_core::health::assess`]; application-class ones
//! are conditions only. A reset that leaves the accelerator's counters clean, or a new boot,
//! clears them. A burst of faults asks for one inventory collection about two seconds later
//! ([`CollectionDebounce`]), since ECC and row-remap counters move with it. [`FaultWatch`] ties
//! these together for the daemon: kernel-log entries in, saved faults, accelerators to
//! re-assess and collections out. This module owns the record and its file; it does not read
//! the kernel log itself or serve tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_core::BusId;
use accel_core::health;
use accel_core::inventory::{Accelerator, Inventory};
use accel_host::{AtomicWriteError, Host, HostError, write_atomic};
use serde::{Deserialize, Serialize};

use crate::health::{FaultClass, FaultClassifier, FaultScanner, KernelFault};

/// The fault record's file in the daemon's `--data-dir`.
pub const FILE_NAME: &str = "faults.json";
/// The kernel's id of the current boot, relative to the host root.
pub const BOOT_ID_PATH: &str = "proc/sys/kernel/random/boot_id";
/// How long after the first XID of a burst the inventory is collected again (seed 002).
pub const COLLECTION_DELAY: Duration = Duration::from_secs(2);
/// The condition NVIDIA raises for a GPU fallen off the bus reported without an XID: its
/// health reason keeps the words files written before the seam used.
const FALLEN_OFF_BUS: &str = "FallenOffBus";

/// Errors of the fault record.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The boot id could not be read.
    #[error("cannot read the boot id: {0}")]
    BootId(#[source] HostError),
    /// The boot id file was empty.
    #[error("{0}: empty boot id")]
    EmptyBootId(String),
    /// `faults.json` could not be read or parsed.
    #[error("{path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// `faults.json` could not be written.
    #[error("cannot write the fault record: {0}")]
    Write(#[from] AtomicWriteError),
}

/// One condition raised on one accelerator: what the `Devices` status carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// `Xid<n>`, `FallenOffBus`, `AmdRasUncorrectable` … (the manufacturer's condition).
    #[serde(rename = "type")]
    pub condition: String,
    /// Always true: a fault that no longer holds is removed, not set false.
    pub status: bool,
    /// The accelerator's UUID.
    pub device_id: String,
    /// The driver's text of the latest occurrence.
    pub message: String,
    /// The driver's numeric code (NVIDIA's XID); `None` where it has none.
    pub xid: Option<u32>,
    pub bus_id: BusId,
    pub class: FaultClass,
    /// Occurrences seen this boot (best effort: the file is written when a fault is new).
    pub count: u64,
    /// When it was first seen, in seconds since the Unix epoch (absent in files written before
    /// it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

impl Fault {
    /// The health-rule reason this fault gives when it is hardware-class: `Xid 79: …` for a
    /// coded fault, `<condition>: …` otherwise.
    pub fn reason(&self) -> String {
        match self.xid {
            Some(code) => format!("Xid {code}: {}", self.message),
            None if self.condition == FALLEN_OFF_BUS => {
                format!("fallen off the bus: {}", self.message)
            }
            None => format!("{}: {}", self.condition, self.message),
        }
    }
}

/// What recording one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A new condition for this GPU: save the record and re-assess its health now.
    New { uuid: String, condition: String },
    /// The condition was already raised; only its count and message changed.
    Repeated { uuid: String, condition: String },
    /// No accelerator in the inventory has this bus address (`None`: the line names no
    /// device): logged only.
    UnknownBus(Option<BusId>),
}

/// The file's shape.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FaultsFile {
    boot_id: String,
    faults: Vec<Fault>,
}

/// A fault record read back at start, and what happened on the way.
#[derive(Debug)]
pub struct Loaded {
    pub record: FaultRecord,
    /// Why the record starts empty when the file was there (another boot, a torn file).
    pub notes: Vec<String>,
}

/// The faults of this boot, keyed by GPU UUID and condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    boot_id: String,
    faults: BTreeMap<(String, String), Fault>,
}

impl FaultRecord {
    /// An empty record for the boot `boot_id`.
    pub fn new(boot_id: impl Into<String>) -> Self {
        FaultRecord {
            boot_id: boot_id.into(),
            faults: BTreeMap::new(),
        }
    }

    /// The boot this record belongs to.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// Every fault, by GPU UUID then condition.
    pub fn faults(&self) -> impl Iterator<Item = &Fault> {
        self.faults.values()
    }

    /// The faults of one GPU.
    pub fn faults_of<'a>(&'a self, uuid: &'a str) -> impl Iterator<Item = &'a Fault> + 'a {
        self.faults.values().filter(move |f| f.device_id == uuid)
    }

    /// Reads `path` for the boot `boot_id`. Never fails: a missing file, a file from another
    /// boot, or an unreadable one gives an empty record; a torn file is first renamed to
    /// `faults.json.corrupt-<n>` so nothing is lost to the next write.
    pub fn load(path: &Path, boot_id: &str) -> Loaded {
        let empty = |notes: Vec<String>| Loaded {
            record: FaultRecord::new(boot_id),
            notes,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return empty(Vec::new()),
            Err(e) => {
                let note = format!(
                    "{}: cannot read ({e}); starting with no faults",
                    path.display()
                );
                tracing::error!("{note}");
                return empty(vec![note]);
            }
        };
        let file: FaultsFile = match serde_json::from_slice(&bytes) {
            Ok(file) => file,
            Err(e) => {
                let note = match keep_aside(path) {
                    Ok(aside) => format!(
                        "{}: unreadable ({e}); kept aside as {}, starting with no faults",
                        path.display(),
                        aside.display()
                    ),
                    Err(rename) => format!(
                        "{}: unreadable ({e}) and could not be kept aside ({rename}); starting with no faults",
                        path.display()
                    ),
                };
                tracing::error!("{note}");
                return empty(vec![note]);
            }
        };
        if file.boot_id.trim() != boot_id {
            let note = format!(
                "{}: from boot {}, this is boot {boot_id}: its {} faults are dropped",
                path.display(),
                file.boot_id,
                file.faults.len()
            );
            tracing::info!("{note}");
            return empty(vec![note]);
        }
        let mut record = FaultRecord::new(boot_id);
        for fault in file.faults {
            record
                .faults
                .insert((fault.device_id.clone(), fault.condition.clone()), fault);
        }
        Loaded {
            record,
            notes: Vec::new(),
        }
    }

    /// Reads `path` without changing anything on disk (what `detect --data-dir` does beside a
    /// running daemon): `Ok(None)` when the file is absent or from another boot.
    pub fn read(path: &Path, boot_id: &str) -> Result<Option<FaultRecord>, FaultError> {
        let fail = |reason: String| FaultError::Read {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e.to_string())),
        };
        let file: FaultsFile = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
        if file.boot_id.trim() != boot_id {
            return Ok(None);
        }
        let mut record = FaultRecord::new(boot_id);
        for fault in file.faults {
            record
                .faults
                .insert((fault.device_id.clone(), fault.condition.clone()), fault);
        }
        Ok(Some(record))
    }

    /// The file's JSON text.
    pub fn to_json(&self) -> String {
        let file = FaultsFile {
            boot_id: self.boot_id.clone(),
            faults: self.faults.values().cloned().collect(),
        };
        // A struct of strings, numbers and enums always serialises.
        serde_json::to_string_pretty(&file).unwrap_or_default()
    }

    /// Writes the record to `path` atomically, mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), FaultError> {
        write_atomic(path, self.to_json().as_bytes())?;
        Ok(())
    }

    /// Records one kernel-log fault against the inventory's accelerators.
    pub fn record(&mut self, event: &KernelFault, inventory: &Inventory) -> Recorded {
        let found = event
            .bus_id
            .and_then(|bus| uuid_at(inventory, bus).map(|uuid| (bus, uuid)));
        let Some((bus_id, uuid)) = found else {
            tracing::warn!(
                bus = ?event.bus_id.map(|b| b.to_string()),
                "kernel log reports {} on a bus no accelerator of the inventory has: {}",
                event.condition,
                event.line
            );
            return Recorded::UnknownBus(event.bus_id);
        };
        let condition = event.condition.clone();
        let key = (uuid.clone(), condition.clone());
        if let Some(fault) = self.faults.get_mut(&key) {
            fault.count = fault.count.saturating_add(1);
            fault.message.clone_from(&event.message);
            return Recorded::Repeated { uuid, condition };
        }
        self.faults.insert(
            key,
            Fault {
                condition: condition.clone(),
                status: true,
                device_id: uuid.clone(),
                message: event.message.clone(),
                xid: event.code,
                bus_id,
                class: event.class,
                count: 1,
                since: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs()),
            },
        );
        Recorded::New { uuid, condition }
    }

    /// Re-reads every fault's class from the settings (they may have changed across a
    /// restart); a condition the classifier does not know keeps its recorded class.
    pub fn reclassify(&mut self, classifier: &dyn FaultClassifier) {
        for fault in self.faults.values_mut() {
            if let Some(class) = classifier.class_of(&fault.condition, fault.xid) {
                fault.class = class;
            }
        }
    }

    /// Drops every fault of one GPU; returns how many there were.
    pub fn clear_gpu(&mut self, uuid: &str) -> usize {
        let before = self.faults.len();
        self.faults.retain(|(id, _), _| id != uuid);
        before - self.faults.len()
    }

    /// After a reset: drops the GPU's faults when its freshly collected counters pass the rule
    /// (no uncorrectable volatile ECC errors, no failed or pending row remap). Returns whether
    /// it did.
    pub fn clear_after_reset(&mut self, accelerator: &Accelerator) -> bool {
        let Some(uuid) = accelerator.uuid.as_deref() else {
            return false;
        };
        if !health::counter_reasons(accelerator).is_empty() {
            return false;
        }
        self.clear_gpu(uuid);
        true
    }

    /// The health-rule reasons this record gives one GPU: its hardware-class faults.
    pub fn reasons_for(&self, uuid: &str) -> Vec<String> {
        self.faults_of(uuid)
            .filter(|f| f.class == FaultClass::Hardware)
            .map(Fault::reason)
            .collect()
    }

    /// Applies the health rule to every accelerator of the inventory: its counters plus its
    /// hardware-class faults. Application-class faults leave it in service.
    pub fn apply(&self, inventory: &mut Inventory) {
        for section in &mut inventory.manufacturers {
            for accelerator in &mut section.accelerators {
                let reasons = match accelerator.uuid.as_deref() {
                    Some(uuid) => self.reasons_for(uuid),
                    None => Vec::new(),
                };
                health::assess(accelerator, &reasons);
            }
        }
    }
}

/// The UUID of the accelerator at `bus_id` (bus addresses are unique on a node, whatever the
/// manufacturer).
fn uuid_at(inventory: &Inventory, bus_id: BusId) -> Option<String> {
    inventory
        .manufacturers
        .iter()
        .flat_map(|s| s.accelerators.iter())
        .find(|a| a.bus_id == Some(bus_id))
        .and_then(|a| a.uuid.clone())
}

/// Renames a torn file to the first free `<name>.corrupt-<n>`.
fn keep_aside(path: &Path) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| FILE_NAME.to_string());
    for n in 1..=10_000u32 {
        let aside = path.with_file_name(format!("{name}.corrupt-{n}"));
        if !aside.exists() {
            std::fs::rename(path, &aside)?;
            return Ok(aside);
        }
    }
    Err(std::io::Error::other("too many corrupt copies kept"))
}

/// The current boot's id (`/proc/sys/kernel/random/boot_id`).
pub fn read_boot_id(host: &dyn Host) -> Result<String, FaultError> {
    let text = host
        .read_to_string(BOOT_ID_PATH)
        .map_err(FaultError::BootId)?;
    let id = text.trim();
    if id.is_empty() {
        return Err(FaultError::EmptyBootId(
            host.root().join(BOOT_ID_PATH).display().to_string(),
        ));
    }
    Ok(id.to_string())
}

/// When to collect the inventory after XIDs: about [`COLLECTION_DELAY`] after the first event
/// of a burst, once for the whole burst. Events that arrive before the collection join it; the
/// window does not slide, so an endless storm still gets a collection every delay. Pure: the
/// caller passes the clock.
#[derive(Debug, Clone)]
pub struct CollectionDebounce {
    delay: Duration,
    due: Option<Instant>,
}

impl Default for CollectionDebounce {
    fn default() -> Self {
        CollectionDebounce::new(COLLECTION_DELAY)
    }
}

impl CollectionDebounce {
    /// A debouncer with its own delay.
    pub fn new(delay: Duration) -> Self {
        CollectionDebounce { delay, due: None }
    }

    /// An event at `now`: schedules a collection unless one is already pending.
    pub fn event(&mut self, now: Instant) {
        if self.due.is_none() {
            self.due = Some(now + self.delay);
        }
    }

    /// When the pending collection is due, if one is.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// True exactly once when a pending collection is due at `now`.
    pub fn poll(&mut self, now: Instant) -> bool {
        match self.due {
            Some(due) if now >= due => {
                self.due = None;
                true
            }
            _ => false,
        }
    }
}

/// What one kernel-log entry did to the watch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchOutcome {
    /// The fault the entry held.
    pub event: Option<KernelFault>,
    /// What recording it did.
    pub recorded: Option<Recorded>,
    /// The GPU whose health may have changed: apply the record to the inventory and tell the
    /// kubelet now (ListAndWatch), without waiting for the collection.
    pub changed: Option<String>,
    /// The entry was an overrun: records were lost (how many, when known). A collection is
    /// scheduled, since the counters may show what the lost lines said.
    pub overrun: Option<Option<u64>>,
    /// `faults.json` could not be written (logged; the record in memory still holds).
    pub save_error: Option<String>,
}

/// The kernel-log half of the health rule as the node daemon runs it: kernel-log entries in;
/// faults recorded and saved, GPUs to re-assess, and inventory collections out. Synchronous
/// and clock-free (the caller passes `now`), so the daemon drives it from any runtime and
/// tests drive it with a paused clock.
pub struct FaultWatch {
    scanner: Box<dyn FaultScanner>,
    record: FaultRecord,
    classifier: Arc<dyn FaultClassifier>,
    debounce: CollectionDebounce,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for FaultWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultWatch")
            .field("record", &self.record)
            .field("classifier", &self.classifier)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FaultWatch {
    /// Starts the watch for boot `boot_id` over the manufacturer's `classifier`, reloading
    /// `<data_dir>/faults.json` (same boot: kept; another boot or a torn file: empty, see the
    /// notes). `data_dir` `None` keeps the record in memory only.
    pub fn start(
        data_dir: Option<&Path>,
        boot_id: &str,
        classifier: Arc<dyn FaultClassifier>,
    ) -> (Self, Vec<String>) {
        let path = data_dir.map(|d| d.join(FILE_NAME));
        let (mut record, notes) = match &path {
            Some(path) => {
                let loaded = FaultRecord::load(path, boot_id);
                (loaded.record, loaded.notes)
            }
            None => (FaultRecord::new(boot_id), Vec::new()),
        };
        record.reclassify(classifier.as_ref());
        let watch = FaultWatch {
            scanner: classifier.scanner(),
            record,
            classifier,
            debounce: CollectionDebounce::default(),
            path,
        };
        (watch, notes)
    }

    /// Whether the watch's classifier counts its faults by code (NVIDIA's XIDs).
    pub fn counted_by_code(&self) -> bool {
        self.classifier.counted_by_code()
    }

    /// The faults recorded this boot.
    pub fn record(&self) -> &FaultRecord {
        &self.record
    }

    /// Applies the health rule (counters plus hardware-class faults) to the inventory.
    pub fn apply(&self, inventory: &mut Inventory) {
        self.record.apply(inventory);
    }

    /// Takes one kernel-log entry at `now`.
    pub fn on_entry(
        &mut self,
        entry: &accel_host::KernelLogEntry,
        inventory: &Inventory,
        now: Instant,
    ) -> WatchOutcome {
        let mut outcome = WatchOutcome::default();
        let record = match entry {
            accel_host::KernelLogEntry::Overrun { lost } => {
                self.debounce.event(now);
                outcome.overrun = Some(*lost);
                return outcome;
            }
            accel_host::KernelLogEntry::Record(record) => record,
        };
        let Some(event) = self.scanner.push(&record.message) else {
            return outcome;
        };
        self.debounce.event(now);
        let recorded = self.record.record(&event, inventory);
        if let Recorded::New { uuid, .. } = &recorded {
            tracing::warn!(gpu = %uuid, "{}: {}", event.condition, event.message);
            outcome.save_error = self.save();
            outcome.changed = Some(uuid.clone());
        }
        outcome.recorded = Some(recorded);
        outcome.event = Some(event);
        outcome
    }

    /// Whether the inventory collection a burst asked for is due at `now` (true once a burst).
    pub fn collection_due(&mut self, now: Instant) -> bool {
        self.debounce.poll(now)
    }

    /// When the pending collection is due, for the caller's timer.
    pub fn next_collection(&self) -> Option<Instant> {
        self.debounce.due()
    }

    /// After a reset and a fresh collection: clears the GPU's faults when its counters pass,
    /// and saves. Returns whether it cleared them.
    pub fn after_reset(&mut self, accelerator: &Accelerator) -> Result<bool, FaultError> {
        if !self.record.clear_after_reset(accelerator) {
            return Ok(false);
        }
        if let Some(path) = &self.path {
            self.record.save(path)?;
        }
        Ok(true)
    }

    fn save(&self) -> Option<String> {
        let path = self.path.as_ref()?;
        match self.record.save(path) {
            Ok(()) => None,
            Err(e) => {
                tracing::error!("{e}");
                Some(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::inventory::Source;
    use accel_core::{Manufacturer, ManufacturerInventory};

    const BOOT: &str = "boot-1";

    /// A manufacturer whose driver writes `FAULT <bus> <hw|app> <text>`.
    #[derive(Debug)]
    struct Toy;

    struct ToyScanner;

    fn parse(line: &str) -> Option<KernelFault> {
        let mut words = line.strip_prefix("FAULT ")?.splitn(3, ' ');
        let bus = words.next()?;
        let class = match words.next()? {
            "hw" => FaultClass::Hardware,
            _ => FaultClass::Application,
        };
        Some(KernelFault {
            manufacturer: Manufacturer::Amd,
            condition: if class == FaultClass::Hardware {
                "ToyHard".into()
            } else {
                "ToySoft".into()
            },
            code: None,
            bus_id: bus.parse().ok(),
            pid: None,
            process: None,
            message: words.next().unwrap_or("").to_string(),
            line: line.to_string(),
            class,
        })
    }

    impl FaultScanner for ToyScanner {
        fn push(&mut self, message: &str) -> Option<KernelFault> {
            parse(message)
        }
    }

    impl FaultClassifier for Toy {
        fn manufacturer(&self) -> Manufacturer {
            Manufacturer::Amd
        }
        fn scanner(&self) -> Box<dyn FaultScanner> {
            Box::new(ToyScanner)
        }
        fn parse_text(&self, text: &str) -> Vec<KernelFault> {
            text.lines().filter_map(parse).collect()
        }
        fn class_of(&self, condition: &str, _code: Option<u32>) -> Option<FaultClass> {
            match condition {
                "ToyHard" => Some(FaultClass::Hardware),
                "ToySoft" => Some(FaultClass::Application),
                _ => None,
            }
        }
    }

    fn inventory() -> Inventory {
        let mut section = ManufacturerInventory::empty(Manufacturer::Amd);
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some("GPU-aa".into());
        a.bus_id = Some("0000:68:00.0".parse().unwrap());
        section.accelerators.push(a);
        Inventory {
            manufacturers: vec![section],
        }
    }

    fn record(sequence: u64, message: &str) -> accel_host::KernelLogEntry {
        accel_host::KernelLogEntry::Record(accel_host::KmsgRecord {
            priority: 3,
            sequence,
            timestamp_us: sequence,
            flag: '-',
            message: message.to_string(),
        })
    }

    #[test]
    fn any_manufacturers_faults_feed_the_same_record_and_rule() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = inventory();
        let now = Instant::now();
        let (mut watch, _) = FaultWatch::start(Some(dir.path()), BOOT, Arc::new(Toy));
        let soft = watch.on_entry(
            &record(1, "FAULT 0000:68:00.0 app a page fault"),
            &inventory,
            now,
        );
        assert_eq!(soft.changed.as_deref(), Some("GPU-aa"));
        watch.apply(&mut inventory);
        assert!(inventory.manufacturers[0].accelerators[0].healthy);
        // A line naming no device, or another bus, is logged only.
        let nowhere = watch.on_entry(&record(2, "FAULT drmn0 hw lost"), &inventory, now);
        assert_eq!(nowhere.recorded, Some(Recorded::UnknownBus(None)));
        watch.on_entry(
            &record(3, "FAULT 0000:68:00.0 hw uncorrectable"),
            &inventory,
            now,
        );
        watch.apply(&mut inventory);
        let gpu = &inventory.manufacturers[0].accelerators[0];
        assert!(!gpu.healthy);
        assert_eq!(gpu.health_reasons, vec!["ToyHard: uncorrectable"]);
        let saved = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert!(
            saved.contains("ToyHard") && saved.contains("ToySoft"),
            "{saved}"
        );
        // Reloaded in the same boot by the same manufacturer: the classes stand.
        let (again, _) = FaultWatch::start(Some(dir.path()), BOOT, Arc::new(Toy));
        assert_eq!(again.record().reasons_for("GPU-aa").len(), 1);
    }

    #[test]
    fn a_classifier_keeps_the_class_of_a_condition_it_does_not_know() {
        let mut record = FaultRecord::new(BOOT);
        let mut fault = parse("FAULT 0000:68:00.0 hw x").unwrap();
        fault.condition = "Other".into();
        record.record(&fault, &inventory());
        record.reclassify(&Toy);
        assert_eq!(record.reasons_for("GPU-aa"), vec!["Other: x"]);
    }
}
