//! The fault record: the `Xid<n>` conditions raised this boot, per GPU, kept in `faults.json`
//! so a restart in the same boot still knows them (seed 002, "XIDs and GPU health"), and the
//! health rule's kernel-log half (DESIGN.md, "Health").
//!
//! Each XID on a GPU the inventory lists raises the condition `Xid<n>` (status true, the GPU's
//! UUID, the driver's text as message), one per code and GPU; an XID on an unknown bus is only
//! logged. Hardware-class faults take the GPU out of service through
//! [`accel_core::health::assess`]; application-class ones are conditions only. A reset that
//! leaves the GPU's counters clean, or a new boot, clears them. A burst of XIDs asks for one
//! inventory collection about two seconds later ([`CollectionDebounce`]), since ECC and
//! row-remap counters move with it. [`FaultWatch`] ties these together for the daemon: kernel-log
//! entries in, saved faults, GPUs to re-assess and collections out. This module owns the record
//! and its file; it does not read the kernel log itself or serve tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel_core::health;
use accel_core::inventory::{Accelerator, Inventory};
use accel_core::{BusId, Manufacturer};
use accel_host::{AtomicWriteError, Host, HostError, write_atomic};
use serde::{Deserialize, Serialize};

use crate::xid::{XidClass, XidClasses, XidEvent};

/// The fault record's file in the daemon's `--data-dir`.
pub const FILE_NAME: &str = "faults.json";
/// The kernel's id of the current boot, relative to the host root.
pub const BOOT_ID_PATH: &str = "proc/sys/kernel/random/boot_id";
/// How long after the first XID of a burst the inventory is collected again (seed 002).
pub const COLLECTION_DELAY: Duration = Duration::from_secs(2);

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

/// One condition raised on one GPU: what the `Devices` status carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// `Xid<n>`, or `FallenOffBus`.
    #[serde(rename = "type")]
    pub condition: String,
    /// Always true: a fault that no longer holds is removed, not set false.
    pub status: bool,
    /// The GPU's UUID.
    pub device_id: String,
    /// The driver's text of the latest occurrence.
    pub message: String,
    pub xid: Option<u32>,
    pub bus_id: BusId,
    pub class: XidClass,
    /// Occurrences seen this boot (best effort: the file is written when a fault is new).
    pub count: u64,
    /// When it was first seen, in seconds since the Unix epoch (absent in files written before
    /// it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

impl Fault {
    /// The health-rule reason this fault gives when it is hardware-class.
    pub fn reason(&self) -> String {
        match self.xid {
            Some(code) => format!("Xid {code}: {}", self.message),
            None => format!("fallen off the bus: {}", self.message),
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
    /// No GPU in the inventory has this bus address: logged only.
    UnknownBus(BusId),
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

    /// Records one kernel-log event against the inventory's GPUs.
    pub fn record(
        &mut self,
        event: &XidEvent,
        inventory: &Inventory,
        classes: &XidClasses,
    ) -> Recorded {
        let Some(uuid) = uuid_at(inventory, event.bus_id) else {
            tracing::warn!(
                bus = %event.bus_id,
                "kernel log reports {} on a bus no GPU of the inventory has: {}",
                event.condition(),
                event.line
            );
            return Recorded::UnknownBus(event.bus_id);
        };
        let condition = event.condition();
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
                xid: event.xid,
                bus_id: event.bus_id,
                class: classes.classify(event),
                count: 1,
                since: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs()),
            },
        );
        Recorded::New { uuid, condition }
    }

    /// Re-reads every fault's class from the settings (they may have changed across a restart).
    pub fn reclassify(&mut self, classes: &XidClasses) {
        for fault in self.faults.values_mut() {
            fault.class = classes.class_of(fault.xid);
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
            .filter(|f| f.class == XidClass::Hardware)
            .map(Fault::reason)
            .collect()
    }

    /// Applies the health rule to every accelerator of the inventory: its counters plus its
    /// hardware-class faults. Application-class faults leave it in service.
    pub fn apply(&self, inventory: &mut Inventory) {
        for section in &mut inventory.manufacturers {
            for accelerator in &mut section.accelerators {
                let reasons = match (&section.name, accelerator.uuid.as_deref()) {
                    (Manufacturer::Nvidia, Some(uuid)) => self.reasons_for(uuid),
                    _ => Vec::new(),
                };
                health::assess(accelerator, &reasons);
            }
        }
    }
}

/// The UUID of the NVIDIA GPU at `bus_id`.
fn uuid_at(inventory: &Inventory, bus_id: BusId) -> Option<String> {
    inventory
        .manufacturers
        .iter()
        .filter(|s| s.name == Manufacturer::Nvidia)
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
    /// The XID (or fallen-off-the-bus) event the entry held.
    pub event: Option<XidEvent>,
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
#[derive(Debug)]
pub struct FaultWatch {
    scanner: crate::xid::XidScanner,
    record: FaultRecord,
    classes: XidClasses,
    debounce: CollectionDebounce,
    path: Option<PathBuf>,
}

impl FaultWatch {
    /// Starts the watch for boot `boot_id`, reloading `<data_dir>/faults.json` (same boot:
    /// kept; another boot or a torn file: empty, see the notes). `data_dir` `None` keeps the
    /// record in memory only.
    pub fn start(
        data_dir: Option<&Path>,
        boot_id: &str,
        classes: XidClasses,
    ) -> (Self, Vec<String>) {
        let path = data_dir.map(|d| d.join(FILE_NAME));
        let (mut record, notes) = match &path {
            Some(path) => {
                let loaded = FaultRecord::load(path, boot_id);
                (loaded.record, loaded.notes)
            }
            None => (FaultRecord::new(boot_id), Vec::new()),
        };
        record.reclassify(&classes);
        let watch = FaultWatch {
            scanner: crate::xid::XidScanner::default(),
            record,
            classes,
            debounce: CollectionDebounce::default(),
            path,
        };
        (watch, notes)
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
        let recorded = self.record.record(&event, inventory, &self.classes);
        if let Recorded::New { uuid, .. } = &recorded {
            tracing::warn!(gpu = %uuid, "{}: {}", event.condition(), event.message);
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
    use accel_core::ManufacturerInventory;
    use accel_core::inventory::{Ecc, Source};
    use std::os::unix::fs::PermissionsExt;

    use crate::xid::parse_message;

    const BOOT: &str = "4c1f7c5e-0a0b-4c77-9a53-5d1b3c0f2e11";

    fn inventory() -> Inventory {
        let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
        for (index, bus) in [(0, "00000000:18:00.0"), (1, "00000000:2A:00.0")] {
            let mut a = Accelerator::new(index, Source::Driver);
            a.uuid = Some(format!("GPU-{index}"));
            a.bus_id = Some(bus.parse().unwrap());
            section.accelerators.push(a);
        }
        Inventory {
            manufacturers: vec![section],
        }
    }

    fn event(line: &str) -> XidEvent {
        parse_message(line).unwrap()
    }

    fn gpu(inventory: &Inventory, index: usize) -> &Accelerator {
        &inventory.manufacturers[0].accelerators[index]
    }

    #[test]
    fn one_condition_per_code_and_gpu() {
        let inventory = inventory();
        let classes = XidClasses::default();
        let mut record = FaultRecord::new(BOOT);
        let e79 =
            event("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=a, GPU has fallen off the bus.");
        assert_eq!(
            record.record(&e79, &inventory, &classes),
            Recorded::New {
                uuid: "GPU-0".into(),
                condition: "Xid79".into()
            }
        );
        assert!(matches!(
            record.record(&e79, &inventory, &classes),
            Recorded::Repeated { .. }
        ));
        let e13 = event(
            "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
        );
        assert!(matches!(
            record.record(&e13, &inventory, &classes),
            Recorded::New { .. }
        ));
        let unknown = event("NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus");
        assert_eq!(
            record.record(&unknown, &inventory, &classes),
            Recorded::UnknownBus("0000:99:00.0".parse().unwrap())
        );
        let faults: Vec<&Fault> = record.faults().collect();
        assert_eq!(faults.len(), 2);
        let xid79 = faults.iter().find(|f| f.condition == "Xid79").unwrap();
        assert_eq!(
            (xid79.status, xid79.device_id.as_str(), xid79.count),
            (true, "GPU-0", 2)
        );
        assert_eq!(xid79.message, "GPU has fallen off the bus.");
        assert_eq!(xid79.class, XidClass::Hardware);
        assert_eq!(record.faults_of("GPU-1").count(), 0);
    }

    #[test]
    fn hardware_faults_fail_the_rule_application_faults_do_not() {
        let mut inventory = inventory();
        let classes = XidClasses::default();
        let mut record = FaultRecord::new(BOOT);
        record.record(
            &event(
                "NVRM: Xid (PCI:0000:2a:00): 13, pid=5, name=python, Graphics SM Warp Exception",
            ),
            &inventory,
            &classes,
        );
        record.apply(&mut inventory);
        assert!(
            gpu(&inventory, 1).healthy,
            "application-class: condition only"
        );
        assert_eq!(record.faults_of("GPU-1").count(), 1);

        record.record(
            &event("NVRM: Xid (PCI:0000:2a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"),
            &inventory,
            &classes,
        );
        let fallen = "NVRM: The NVIDIA GPU 0000:18:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.";
        record.record(&event(fallen), &inventory, &classes);
        record.apply(&mut inventory);
        assert!(!gpu(&inventory, 1).healthy);
        assert_eq!(
            gpu(&inventory, 1).health_reasons,
            vec!["Xid 48: An uncorrectable double bit error"]
        );
        assert!(!gpu(&inventory, 0).healthy);
        assert!(
            gpu(&inventory, 0).health_reasons[0].starts_with("fallen off the bus: The NVIDIA GPU")
        );

        // The settings may move a code between classes across a restart.
        record.reclassify(&XidClasses::from_settings(Some("13,48"), None).unwrap());
        record.apply(&mut inventory);
        assert!(gpu(&inventory, 1).healthy);
    }

    #[test]
    fn a_reset_clears_only_a_gpu_whose_counters_pass() {
        let mut inventory = inventory();
        let classes = XidClasses::default();
        let mut record = FaultRecord::new(BOOT);
        for bus in ["18", "2a"] {
            record.record(
                &event(&format!(
                    "NVRM: Xid (PCI:0000:{bus}:00): 79, GPU has fallen off the bus"
                )),
                &inventory,
                &classes,
            );
        }
        inventory.manufacturers[0].accelerators[1].ecc = Some(Ecc {
            volatile_uncorrected: Some(3),
            ..Ecc::default()
        });
        assert!(record.clear_after_reset(gpu(&inventory, 0)));
        assert!(!record.clear_after_reset(gpu(&inventory, 1)));
        record.apply(&mut inventory);
        assert!(gpu(&inventory, 0).healthy);
        assert!(!gpu(&inventory, 1).healthy);
        assert_eq!(record.faults().count(), 1);
        assert_eq!(record.clear_gpu("GPU-1"), 1);
    }

    #[test]
    fn survives_a_restart_in_the_same_boot_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let inventory = inventory();
        let mut record = FaultRecord::new(BOOT);
        record.record(
            &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
            &inventory,
            &XidClasses::default(),
        );
        record.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let same = FaultRecord::load(&path, BOOT);
        assert_eq!(same.record, record);
        assert!(same.notes.is_empty());

        let next = FaultRecord::load(&path, "another-boot");
        assert_eq!(next.record.faults().count(), 0);
        assert_eq!(next.record.boot_id(), "another-boot");
        assert!(
            next.notes[0].contains("from boot 4c1f7c5e"),
            "{:?}",
            next.notes
        );

        let missing = FaultRecord::load(&dir.path().join("none.json"), BOOT);
        assert_eq!(
            (missing.record.faults().count(), missing.notes.len()),
            (0, 0)
        );
    }

    #[test]
    fn a_torn_file_is_kept_aside_and_the_record_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut full = FaultRecord::new(BOOT);
        full.record(
            &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
            &inventory(),
            &XidClasses::default(),
        );
        let json = full.to_json();
        for (n, torn) in [&json[..json.len() / 2], "\u{0}\u{1}garbage"]
            .iter()
            .enumerate()
        {
            std::fs::write(&path, torn).unwrap();
            let loaded = FaultRecord::load(&path, BOOT);
            assert_eq!(loaded.record.faults().count(), 0);
            let aside = dir.path().join(format!("faults.json.corrupt-{}", n + 1));
            assert_eq!(std::fs::read_to_string(&aside).unwrap(), *torn);
            assert!(!path.exists());
            assert!(
                loaded.notes[0].contains("kept aside as"),
                "{:?}",
                loaded.notes
            );
        }
    }

    #[test]
    fn read_only_reading_changes_nothing_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(FaultRecord::read(&path, BOOT).unwrap(), None);
        let mut record = FaultRecord::new(BOOT);
        record.record(
            &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
            &inventory(),
            &XidClasses::default(),
        );
        record.save(&path).unwrap();
        assert_eq!(FaultRecord::read(&path, BOOT).unwrap(), Some(record));
        assert_eq!(FaultRecord::read(&path, "other").unwrap(), None);
        std::fs::write(&path, "{torn").unwrap();
        let e = FaultRecord::read(&path, BOOT).unwrap_err();
        assert!(e.to_string().contains("faults.json"), "{e}");
        assert!(
            path.exists(),
            "a read-only reader keeps the torn file where it is"
        );
    }

    #[test]
    fn reads_the_boot_id_from_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let host = accel_host::FsHost::new(dir.path());
        assert!(matches!(read_boot_id(&host), Err(FaultError::BootId(_))));
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel/random")).unwrap();
        std::fs::write(dir.path().join(BOOT_ID_PATH), "\n").unwrap();
        assert!(
            read_boot_id(&host)
                .unwrap_err()
                .to_string()
                .ends_with("empty boot id")
        );
        std::fs::write(dir.path().join(BOOT_ID_PATH), format!("{BOOT}\n")).unwrap();
        assert_eq!(read_boot_id(&host).unwrap(), BOOT);
    }

    #[test]
    fn a_burst_asks_for_one_collection_two_seconds_after_it_starts() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut debounce = CollectionDebounce::default();
        assert!(!debounce.poll(at(0)));
        debounce.event(at(0));
        debounce.event(at(300));
        debounce.event(at(1900));
        assert_eq!(debounce.due(), Some(at(2000)));
        assert!(!debounce.poll(at(1999)));
        assert!(debounce.poll(at(2000)));
        assert!(!debounce.poll(at(2500)), "once per burst");
        debounce.event(at(2600));
        assert_eq!(debounce.due(), Some(at(4600)));
    }

    fn kmsg(sequence: u64, message: &str) -> accel_host::KernelLogEntry {
        accel_host::KernelLogEntry::Record(accel_host::KmsgRecord {
            priority: 4,
            sequence,
            timestamp_us: sequence,
            flag: '-',
            message: message.to_string(),
        })
    }

    #[test]
    fn the_watch_over_a_fed_kernel_log() {
        use accel_host::{ChannelKernelLog, KernelLog, KernelLogEntry};
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = inventory();
        let start = Instant::now();
        let (mut watch, notes) = FaultWatch::start(Some(dir.path()), BOOT, XidClasses::default());
        assert!(notes.is_empty());

        let (sender, mut log) = ChannelKernelLog::new();
        sender
            .send(kmsg(
                1,
                "NVRM: Xid (PCI:0000:2a:00): 13, pid=9, name=python, Graphics Exception",
            ))
            .unwrap();
        sender
            .send(KernelLogEntry::Overrun { lost: Some(12) })
            .unwrap();
        sender.send(kmsg(14, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")).unwrap();
        sender
            .send(kmsg(
                15,
                "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            ))
            .unwrap();
        sender.send(kmsg(16, "usb 1-1: new device")).unwrap();
        drop(sender);
        let mut outcomes = Vec::new();
        let mut ms = 0;
        while let Some(entry) = log.next_entry().unwrap() {
            outcomes.push(watch.on_entry(&entry, &inventory, start + Duration::from_millis(ms)));
            ms += 100;
        }
        assert_eq!(outcomes[0].changed.as_deref(), Some("GPU-1"));
        assert_eq!(outcomes[1].overrun, Some(Some(12)));
        assert_eq!(outcomes[2].changed.as_deref(), Some("GPU-0"));
        assert!(matches!(
            outcomes[3].recorded,
            Some(Recorded::Repeated { .. })
        ));
        assert_eq!(outcomes[3].changed, None);
        assert_eq!(outcomes[4], WatchOutcome::default());
        assert!(outcomes.iter().all(|o| o.save_error.is_none()));

        watch.apply(&mut inventory);
        assert!(gpu(&inventory, 1).healthy, "Xid 13 is the workload's");
        assert!(!gpu(&inventory, 0).healthy);
        // One collection for the burst, two seconds after its first line.
        assert_eq!(watch.next_collection(), Some(start + COLLECTION_DELAY));
        assert!(!watch.collection_due(start + Duration::from_millis(1999)));
        assert!(watch.collection_due(start + COLLECTION_DELAY));
        assert!(!watch.collection_due(start + Duration::from_secs(5)));

        // A restart in the same boot keeps both faults; a new boot drops them.
        let (again, _) = FaultWatch::start(Some(dir.path()), BOOT, XidClasses::default());
        assert_eq!(again.record().faults().count(), 2);
        let (mut restarted, _) = FaultWatch::start(Some(dir.path()), BOOT, XidClasses::default());
        let mut fresh = self::inventory();
        restarted.apply(&mut fresh);
        assert!(!gpu(&fresh, 0).healthy);
        // A reset that leaves GPU 0 clean recovers it, and the file forgets it.
        assert!(restarted.after_reset(gpu(&fresh, 0)).unwrap());
        restarted.apply(&mut fresh);
        assert!(gpu(&fresh, 0).healthy);
        let (reloaded, _) = FaultWatch::start(Some(dir.path()), BOOT, XidClasses::default());
        assert_eq!(reloaded.record().faults_of("GPU-0").count(), 0);
        let (rebooted, notes) =
            FaultWatch::start(Some(dir.path()), "next-boot", XidClasses::default());
        assert_eq!(rebooted.record().faults().count(), 0);
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn a_failed_save_is_reported_and_the_fault_still_counts() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        let (mut watch, _) = FaultWatch::start(Some(&missing), BOOT, XidClasses::default());
        let mut inventory = inventory();
        let outcome = watch.on_entry(
            &kmsg(
                1,
                "NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, DBE",
            ),
            &inventory,
            Instant::now(),
        );
        assert!(outcome.save_error.unwrap().contains("faults.json"));
        watch.apply(&mut inventory);
        assert!(!gpu(&inventory, 0).healthy);
    }
}
