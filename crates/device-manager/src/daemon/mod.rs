//! The node daemon's running state between its loops: the inventory (health applied), the
//! fault watch, the collector that detects, and the handle on the device plugins whose seats and
//! token health follow the inventory. [`loops`] drives it (kernel log, detection cadence);
//! `cmd::serve` wires it; the admin socket's [`AdminHandler`] is implemented here (refresh,
//! reset). This module decides when to collect, what a pass means and whom to tell; which
//! kernel-log lines are faults and whose fault each is belongs to the manufacturer's
//! `FaultClassifier` (accel-backend's seam: NVIDIA's XIDs, AMD's amdgpu faults), what is done
//! with a fault (the record, `faults.json`, the boot rule) is `accel_backend::faults`, what a
//! reset may do is the backend's (`accel_backend::reset`: its `Resetter`, or `Reset::Refused`
//! with the manufacturer's reason), and granting is the plugins'.
//!
//! What a detection pass means for the one manufacturer the daemon is asked for (seed 000, "A
//! pass that failed…" and "Before the first detection…"):
//! - `Ok` with accelerators: the inventory is replaced (this boot's faults applied).
//! - `Err` (could not measure): no claim about the hardware. The manufacturer stays as it was
//!   last detected: the plugins keep serving, the capacity stays; the failure is carried for a
//!   condition. One that never answered stays absent.
//! - `Ok` with none: the manufacturer is undetected and what was held for it is dropped (its
//!   tokens stop being advertised, its grants go, each logged naming the Pod), so a later
//!   failure cannot resurrect a card that was pulled. Before any accelerator has answered, an
//!   empty pass is a driver that has not answered yet: nothing is published and the round is
//!   repeated, loudly, every period, unless `fast_failed` is off (`--no-fast-failed`), which
//!   publishes the empty first result.
//! - The process never exits over a node that does not answer: it keeps detecting, and the
//!   plugins start when accelerators first appear ([`Daemon::start_plugins`]). When the
//!   accelerators that can be granted change between passes, the plugins' seats follow.
//!
//! What should be published is on a watch ([`Daemon::published`]): `None` until the first
//! detection (or the empty first result with `--no-fast-failed`), then a [`Published`] — the
//! inventory as last detected with health applied, the last pass's failure if it failed, and
//! when the last successful detection ran. It changes on every pass that changes it and on every
//! health change. The cluster publisher (NodeFeature, Devices, node capacity) reads it.
//!
//! Locks, always taken in this order, never the other way: the collector (one detection or
//! reset at a time) → the push lock (health pushes in the order the inventory changed) → the
//! plugins' ledger → the state. The state is never held while calling into the plugins.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use accel_backend::Deadlines;
use accel_backend::faults::{self, FaultWatch, WatchOutcome};
use accel_backend::health::FaultClassifier;
use accel_backend::reset::{self, GrantView, Reset, ResetError, ResetReport};
use accel_backend::usage::{SampleError, UsageSample, UsageSampler};
use accel_core::Manufacturer;
use accel_core::devices::AcceleratorFault;
use accel_core::inventory::{Inventory, ManufacturerInventory};
use accel_core::labels::GroupNaming;
use accel_core::ledger::units::slices_per_accelerator;
use accel_core::ledger::{Ledger, Seat};
use accel_host::pci::{self, PciClassPrefixes, PciSetFingerprint};
use accel_host::{FsHost, KernelLog, KernelLogEntry, KmsgReader};
use accel_plugin::pods::PodSource;
use accel_plugin::{Config, DevicePlugins, PluginHandle, StartError};
use tokio::sync::watch;

use crate::admin::{AdminHandler, Refreshed};
use crate::node::Node;
use metrics::{AcceleratorSeries, DaemonMetrics, PassOutcome};

#[cfg(test)]
mod amd_tests;
#[cfg(test)]
mod failing_tool_tests;
#[cfg(test)]
mod health_reading_tests;
pub mod loops;
pub mod metrics;
#[cfg(test)]
mod metrics_tests;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tool_health_tests;

/// How often the PCI device set is looked at for a card that came or went.
pub const PCI_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The full inventory's period when none is configured (DESIGN.md, "Cadence").
pub const INVENTORY_INTERVAL: Duration = Duration::from_secs(600);

/// Refuses a manufacturer that has no backend in this build, in one line.
pub fn check_detectable(manufacturer: Manufacturer) -> anyhow::Result<()> {
    crate::backends::backend(manufacturer).map(|_| ())
}

/// How many detection reasons the daemon remembers (for tests and the log).
const HISTORY: usize = 32;

/// What the daemon needs to know to collect.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The one manufacturer this daemon detects and serves (`--manufacturer`).
    pub manufacturer: Manufacturer,
    /// Before any accelerator has answered, hold back an empty result and repeat the round
    /// (the default); `false` (`--no-fast-failed`) publishes the empty first result.
    pub fast_failed: bool,
    /// `--data-dir`: `faults.json`, the passthrough memory.
    pub data_dir: PathBuf,
    pub prefixes: PciClassPrefixes,
    pub deadlines: Deadlines,
    /// The full inventory's period.
    pub inventory_interval: Duration,
    /// How often the PCI device set is compared with the last one.
    pub pci_poll_interval: Duration,
    /// The manufacturer's reset (its backend's), taken once at start.
    pub reset: Reset,
    /// How long one accelerator's reset may take (the backend's own deadline in `serve`).
    pub reset_deadline: Duration,
    /// The manufacturer's live usage sampler (its backend's), taken once at start; `None`:
    /// there is none.
    pub sampler: Option<Arc<dyn UsageSampler>>,
    /// The manufacturer's kernel-log fault classifier under the settings in force
    /// (`Settings::fault_classifier`); `None`: this build reads none of its faults.
    pub faults: Option<Arc<dyn FaultClassifier>>,
    /// Where kernel-log faults and detection passes are counted.
    pub metrics: DaemonMetrics,
}

/// Why a detection runs (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The inventory's period came round.
    Periodic,
    /// About two seconds after a burst of XIDs (or a kernel-log overrun).
    XidBurst,
    /// The PCI device set changed.
    PciChange,
    /// The admin socket's `refresh`.
    OnDemand,
    /// A GPU's health changed (an XID turned it unhealthy, or healthy again).
    HealthChange,
}

/// The fault record as `Devices.status` shows it: each condition with its accelerator's index
/// (when the inventory lists it), class, driver text and first-seen time.
fn published_faults(
    record: &faults::FaultRecord,
    inventory: &Inventory,
    manufacturer: Manufacturer,
) -> Vec<AcceleratorFault> {
    record
        .faults()
        .map(|fault| AcceleratorFault {
            manufacturer,
            index: inventory
                .manufacturer(manufacturer)
                .and_then(|section| {
                    section
                        .accelerators
                        .iter()
                        .find(|a| a.uuid.as_deref() == Some(fault.device_id.as_str()))
                })
                .map(|a| a.index),
            uuid: fault.device_id.clone(),
            type_: fault.condition.clone(),
            xid: fault.xid,
            class: fault.class,
            message: fault.message.clone(),
            time: fault.since.map(|secs| {
                crate::publish::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            }),
        })
        .collect()
}

/// What the node should publish, as the detection loop last decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// The manufacturer the daemon is asked for.
    pub manufacturer: Manufacturer,
    /// The inventory as last detected, health applied: the manufacturer's section, or no
    /// section when the last successful pass found nothing (undetected, or the empty first
    /// result with `--no-fast-failed`).
    pub inventory: Inventory,
    /// The last pass's error when it could not measure (then `inventory` is carried forward
    /// from the last successful detection); `None` when the last pass measured.
    pub failure: Option<String>,
    /// When the last successful detection ran.
    pub detected_at: SystemTime,
    /// The faults raised this boot, per accelerator (what `Devices.status.faults` shows).
    pub faults: Vec<AcceleratorFault>,
}

struct State {
    inventory: Inventory,
    faults: FaultWatch,
    /// The last successful detection that was published; `None` before the first.
    detected_at: Option<SystemTime>,
    /// The last pass's error, while it could not measure.
    failure: Option<String>,
}

/// The daemon's shared state.
pub struct Daemon {
    collector: Mutex<Node>,
    push: Mutex<()>,
    state: Mutex<State>,
    /// The UUIDs of the GPUs a reset has withdrawn: they stay Unhealthy until it ends.
    resetting: Mutex<BTreeSet<String>>,
    plugins: OnceLock<PluginHandle>,
    options: DaemonOptions,
    /// Detection passes run since start (measured or not), for tests and the log.
    passes: watch::Sender<u64>,
    /// The last reasons a pass ran for, newest last.
    reasons: Mutex<VecDeque<Reason>>,
    /// What should be published (see the module doc).
    published: watch::Sender<Option<Published>>,
}

/// The GPUs a reset is working on, given back to the health rule when it ends (however it
/// ends).
struct Resetting<'a> {
    set: &'a Mutex<BTreeSet<String>>,
    uuids: &'a [String],
}

impl Drop for Resetting<'_> {
    fn drop(&mut self) {
        lock(self.set).retain(|u| !self.uuids.contains(u));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemon {
    /// Loads this boot's faults, runs the first detection and applies the faults to it, so the
    /// plugins start with the right health. A boot id that cannot be read keeps the faults in
    /// memory only (a restart cannot tell whether it is the same boot). A first pass that
    /// fails or finds nothing is not an error: the loop detects again every period. Fails only
    /// for a manufacturer without a detector.
    pub fn prepare(node: Node, options: DaemonOptions) -> anyhow::Result<Daemon> {
        check_detectable(options.manufacturer)?;
        let classifier = fault_classifier(&options);
        let (faults, notes) = match faults::read_boot_id(node.host.as_ref()) {
            Ok(boot_id) => FaultWatch::start(Some(&options.data_dir), &boot_id, classifier),
            Err(e) => {
                tracing::error!(
                    "{e}: kernel-log faults are kept in memory only, a restart forgets them"
                );
                FaultWatch::start(None, "unknown", classifier)
            }
        };
        for note in notes {
            tracing::warn!("{note}");
        }
        // A fault on a GPU makes no sound until something looks: say so at start.
        for fault in faults.record().faults() {
            tracing::warn!(gpu = %fault.device_id, "kept from this boot: {}", fault.reason());
        }
        let daemon = Daemon {
            collector: Mutex::new(node),
            push: Mutex::new(()),
            state: Mutex::new(State {
                inventory: Inventory::default(),
                faults,
                detected_at: None,
                failure: None,
            }),
            resetting: Mutex::new(BTreeSet::new()),
            plugins: OnceLock::new(),
            options,
            passes: watch::channel(0).0,
            reasons: Mutex::new(VecDeque::new()),
            published: watch::channel(None).0,
        };
        {
            let collector = lock(&daemon.collector);
            let pass = collect(&collector, &daemon.options);
            daemon.take_pass(pass);
        }
        Ok(daemon)
    }

    /// What should be published: `None` before the first detection, then the inventory as
    /// last detected (see the module doc).
    pub fn published(&self) -> watch::Receiver<Option<Published>> {
        self.published.subscribe()
    }

    /// Takes one live usage sample of the accelerators with the manufacturer's sampler
    /// (blocking: each query is bounded by the snapshot's per-query deadline). Shares the
    /// collector with detection, so the vendor's tool never runs twice at once.
    pub fn sample_usage(&self) -> Result<UsageSample, SampleError> {
        let sampler = self.options.sampler.as_ref().ok_or_else(|| {
            SampleError::NoTool(format!(
                "{}: no live usage sampler in this build",
                self.options.manufacturer
            ))
        })?;
        let collector = lock(&self.collector);
        sampler.sample(
            collector.commands.as_ref(),
            self.options.deadlines.per_query,
        )
    }

    /// The accelerators' info, health and detection series, read from what is published at each
    /// scrape; `naming` forms the `group` label as the `Devices` object's group ids.
    pub fn accelerator_metrics(&self, naming: GroupNaming) -> AcceleratorSeries {
        AcceleratorSeries {
            published: self.published(),
            naming,
        }
    }

    /// The reasons of the last passes run, oldest first.
    #[cfg(test)]
    pub fn reasons(&self) -> Vec<Reason> {
        lock(&self.reasons).iter().copied().collect()
    }

    /// Waits until the manufacturer's accelerators are published, then starts the device
    /// plugins over them (`config` builds the plugins' configuration from the section) and
    /// attaches them. Before that the kubelet is told nothing; a node that never answers keeps
    /// this waiting, never failing.
    pub async fn start_plugins(
        &self,
        config: impl FnOnce(&ManufacturerInventory) -> Config,
        pods: Arc<dyn PodSource>,
    ) -> Result<DevicePlugins, StartError> {
        let manufacturer = self.options.manufacturer;
        let mut published = self.published();
        let mut said = false;
        let section = loop {
            let section = published
                .borrow_and_update()
                .as_ref()
                .and_then(|p| p.inventory.manufacturer(manufacturer).cloned());
            if let Some(section) = section {
                break section;
            }
            if !said {
                tracing::info!(
                    "{manufacturer}: no accelerators detected yet; the device plugins start when they appear"
                );
                said = true;
            }
            if published.changed().await.is_err() {
                // The daemon is being dropped: nothing will ever be published.
                std::future::pending::<()>().await;
            }
        };
        let plugins = DevicePlugins::start(config(&section), pods).await?;
        self.attach(plugins.handle());
        Ok(plugins)
    }

    /// Takes one pass's result as the module doc says, and publishes what changed. Returns the
    /// notes for `refresh`.
    fn take_pass(&self, pass: Result<Inventory, String>) -> Vec<String> {
        let manufacturer = self.options.manufacturer;
        let period = self.options.inventory_interval;
        let mut notes = Vec::new();
        let mut state = lock(&self.state);
        match pass {
            Ok(mut fresh) => {
                fresh.manufacturers.retain(|s| s.name == manufacturer);
                let found = fresh.manufacturer(manufacturer).is_some();
                if !found && state.detected_at.is_none() && self.options.fast_failed {
                    let note = format!(
                        "{manufacturer}: no accelerator has answered yet; nothing is published, detecting again in {}s",
                        period.as_secs()
                    );
                    tracing::error!("{note}");
                    notes.push(note);
                } else {
                    if !found && state.inventory.manufacturer(manufacturer).is_some() {
                        tracing::warn!(
                            "{manufacturer}: a pass found no accelerator; undetected, and what was held for it is dropped"
                        );
                    }
                    // A layer that failed leaves facts unread: they keep their last value.
                    if state.detected_at.is_some() {
                        fresh.keep_known(&state.inventory);
                    }
                    state.faults.apply(&mut fresh);
                    log_inventory(state.detected_at.is_none(), &state.inventory, &fresh);
                    state.inventory = fresh;
                    state.failure = None;
                    state.detected_at = Some(SystemTime::now());
                }
            }
            Err(e) => {
                let note = if state.detected_at.is_some() {
                    format!("kept the last detection: {e}")
                } else {
                    format!(
                        "{manufacturer}: the first detection could not measure; nothing is published, detecting again in {}s: {e}",
                        period.as_secs()
                    )
                };
                tracing::error!("{note}");
                notes.push(note);
                if state.detected_at.is_some() {
                    state.failure = Some(e);
                }
            }
        }
        self.publish(&state);
        notes
    }

    /// Sends what should be published, when it changed.
    fn publish(&self, state: &State) {
        let value = state.detected_at.map(|at| Published {
            manufacturer: self.options.manufacturer,
            inventory: state.inventory.clone(),
            failure: state.failure.clone(),
            detected_at: at,
            faults: published_faults(
                state.faults.record(),
                &state.inventory,
                self.options.manufacturer,
            ),
        });
        self.published.send_if_modified(|current| {
            if *current == value {
                false
            } else {
                *current = value;
                true
            }
        });
    }

    /// The inventory as it stands, health applied.
    #[cfg(test)]
    pub fn inventory(&self) -> Inventory {
        lock(&self.state).inventory.clone()
    }

    /// Counts the detection passes run since start (the first, at prepare, not counted).
    #[cfg(test)]
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.passes.subscribe()
    }

    /// Whether `path` (relative to the host root) exists on the node.
    pub fn host_exists(&self, path: &str) -> bool {
        lock(&self.collector).host.exists(path)
    }

    /// The conditions raised this boot, as `(GPU UUID, condition)` (the Devices status
    /// publishes them once the cluster integration lands).
    #[cfg(test)]
    pub fn conditions(&self) -> Vec<(String, String)> {
        lock(&self.state)
            .faults
            .record()
            .faults()
            .map(|f| (f.device_id.clone(), f.condition.clone()))
            .collect()
    }

    /// The running plugins, once they serve.
    pub fn plugin_handle(&self) -> Option<PluginHandle> {
        self.plugins.get().cloned()
    }

    /// Connects the running plugins: from now on seat and health changes reach
    /// ListAndWatch. The current seats and health are pushed at once.
    pub fn attach(&self, plugins: PluginHandle) {
        if self.plugins.set(plugins).is_err() {
            tracing::warn!("the device plugins were attached twice; keeping the first");
        }
        self.sync_plugins();
    }

    /// Opens the kernel log: `path` when given (`--kmsg-path`), else `/dev/kmsg` under the host
    /// root. When it cannot be opened the daemon goes on without XIDs (counters still count at
    /// each collection), and says so loudly once.
    pub fn open_kernel_log(&self, path: Option<&std::path::Path>) -> Option<Box<dyn KernelLog>> {
        let root = lock(&self.collector).host.root().to_path_buf();
        let opened = match path {
            Some(path) => KmsgReader::open(path),
            None => KmsgReader::open_host(&FsHost::new(&root)),
        };
        match opened {
            Ok(reader) => Some(Box::new(reader)),
            Err(e) => {
                tracing::error!(
                    "XIDS ARE NOT WATCHED: {e}; GPU faults show only at the next inventory collection"
                );
                None
            }
        }
    }

    /// Takes one kernel-log entry at `now`: records it, and when a GPU's health may have
    /// changed, applies the rule and tells the plugins. Returns what the watch did.
    pub fn on_entry(&self, entry: &KernelLogEntry, now: Instant) -> WatchOutcome {
        let outcome = {
            let mut guard = lock(&self.state);
            let State {
                inventory, faults, ..
            } = &mut *guard;
            let outcome = faults.on_entry(entry, inventory, now);
            if let Some(event) = &outcome.event {
                let uuid = event.bus_id.and_then(|bus| {
                    inventory
                        .manufacturers
                        .iter()
                        .flat_map(|s| s.accelerators.iter())
                        .find(|a| a.bus_id == Some(bus))
                        .and_then(|a| a.uuid.as_deref())
                });
                self.options
                    .metrics
                    .fault(event, uuid, faults.counted_by_code());
            }
            if outcome.changed.is_some() {
                faults.apply(inventory);
                self.publish(&guard);
            }
            outcome
        };
        if let Some(lost) = outcome.overrun {
            match lost {
                Some(n) => tracing::warn!("kernel log overrun: {n} records lost; collecting soon"),
                None => tracing::warn!("kernel log overrun: records lost; collecting soon"),
            }
        }
        if outcome.changed.is_some() {
            self.sync_plugins();
        }
        outcome
    }

    /// When the collection a burst asked for is due.
    pub fn next_collection(&self) -> Option<Instant> {
        lock(&self.state).faults.next_collection()
    }

    /// Whether the collection a burst asked for is due at `now` (true once a burst).
    pub fn collection_due(&self, now: Instant) -> bool {
        lock(&self.state).faults.collection_due(now)
    }

    /// The PCI device set now; `None` when it cannot be read (logged).
    pub fn pci_fingerprint(&self) -> Option<PciSetFingerprint> {
        let collector = lock(&self.collector);
        match pci::scan_pci(collector.host.as_ref(), &self.options.prefixes) {
            Ok(scan) => Some(pci::pci_set_fingerprint(&scan.functions)),
            Err(e) => {
                tracing::warn!("pci scan: {e}");
                None
            }
        }
    }

    /// Runs one detection now (blocking: nvidia-smi may take its deadline) and takes it as
    /// the module doc says; the notes say what was kept or held back. Seats and health go to
    /// the plugins.
    pub fn detect(&self, reason: Reason) -> Refreshed {
        let collector = lock(&self.collector);
        tracing::debug!(?reason, "collecting the inventory");
        {
            let mut reasons = lock(&self.reasons);
            if reasons.len() == HISTORY {
                reasons.pop_front();
            }
            reasons.push_back(reason);
        }
        let pass = collect(&collector, &self.options);
        let notes = self.take_pass(pass);
        self.sync_plugins();
        self.passes.send_modify(|n| *n = n.wrapping_add(1));
        Refreshed::from_inventory(&lock(&self.state).inventory, notes)
    }

    /// Brings the plugins in line with the inventory: the seats when the accelerators that
    /// can be granted changed (grants on one that went are dropped, naming the Pod), then
    /// every seat's token health: a seat is healthy when the inventory lists its GPU (by UUID)
    /// and the GPU passes the health rule.
    fn sync_plugins(&self) {
        let Some(plugins) = self.plugins.get() else {
            return;
        };
        let _push = lock(&self.push);
        let wanted = seats_of(&lock(&self.state).inventory, self.options.manufacturer);
        let served = plugins.seats();
        if !same_seats(&served, &wanted) {
            tracing::info!(
                "the accelerators that can be granted changed ({} → {}); the plugins follow",
                served.len(),
                wanted.len()
            );
            let dropped = plugins.replace_seats(wanted);
            if !dropped.is_empty() {
                tracing::warn!(
                    "{} grant(s) dropped with their accelerators: {}",
                    dropped.len(),
                    dropped
                        .iter()
                        .map(|d| format!(
                            "{} container {}",
                            d.pod.as_deref().unwrap_or(&d.key.pod_uid),
                            d.key.container
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        // A GPU being reset stays withdrawn until the reset ends, whatever the rule says.
        let resetting = lock(&self.resetting).clone();
        let seats = plugins.with_ledger(|ledger| {
            ledger
                .seats()
                .filter(|s| !s.uuid.as_ref().is_some_and(|u| resetting.contains(u)))
                .map(|s| (s.index, s.uuid.clone()))
                .collect::<Vec<_>>()
        });
        let health = seat_health(&seats, &lock(&self.state).inventory);
        for (index, healthy) in health {
            if plugins.set_accelerator_health(index, healthy) {
                if healthy {
                    tracing::info!("accelerator {index}: healthy again, its tokens are served");
                } else {
                    tracing::warn!("accelerator {index}: unhealthy, its tokens are withdrawn");
                }
            }
        }
    }
}

/// The daemon's manufacturer's kernel-log fault knowledge; a manufacturer without any reads
/// no faults (its scanner finds none).
fn fault_classifier(options: &DaemonOptions) -> Arc<dyn FaultClassifier> {
    options.faults.clone().unwrap_or_else(|| {
        // Not a fault: where no kernel-log line is known to mean one, health is what the
        // vendor's tool and sysfs report at each detection pass (doctor lists those sources).
        tracing::info!(
            "{}: no kernel-log line is read as a fault; health is what each detection pass reads",
            options.manufacturer
        );
        Arc::new(NoFaults(options.manufacturer))
    })
}

/// The classifier of a manufacturer whose kernel-log faults this build does not read.
#[derive(Debug)]
struct NoFaults(Manufacturer);

impl accel_backend::health::FaultScanner for NoFaults {
    fn push(&mut self, _message: &str) -> Option<accel_backend::health::KernelFault> {
        None
    }
}

impl FaultClassifier for NoFaults {
    fn manufacturer(&self) -> Manufacturer {
        self.0
    }
    fn scanner(&self) -> Box<dyn accel_backend::health::FaultScanner> {
        Box::new(NoFaults(self.0))
    }
    fn parse_text(&self, _text: &str) -> Vec<accel_backend::health::KernelFault> {
        Vec::new()
    }
    fn class_of(
        &self,
        _condition: &str,
        _code: Option<u32>,
    ) -> Option<accel_backend::health::FaultClass> {
        None
    }
}

/// One detection pass as the daemon takes it: `Err` when any detector could not measure.
/// Counted by outcome and timed.
fn collect(node: &Node, options: &DaemonOptions) -> Result<Inventory, String> {
    let started = Instant::now();
    let pass = collect_untimed(node, options);
    let outcome = match &pass {
        Ok(inventory) if inventory.manufacturer(options.manufacturer).is_some() => {
            PassOutcome::Measured
        }
        Ok(_) => PassOutcome::Empty,
        Err(_) => PassOutcome::Failed,
    };
    options.metrics.pass(outcome, started.elapsed());
    pass
}

fn collect_untimed(node: &Node, options: &DaemonOptions) -> Result<Inventory, String> {
    let (inventory, detections) = node
        .collect(
            Some(&options.data_dir),
            &options.prefixes,
            options.deadlines,
        )
        .map_err(|e| format!("{e:#}"))?;
    let failures: Vec<String> = detections
        .iter()
        .filter_map(|d| d.as_ref().err().map(ToString::to_string))
        .collect();
    if failures.is_empty() {
        Ok(inventory)
    } else {
        Err(failures.join("; "))
    }
}

/// What the log says about a pass that replaced the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum InventoryNote {
    /// The first detection since start: what was found (information, not a change).
    Found(Vec<String>),
    /// A later pass whose accelerators differ from the last ones (a warning).
    Changed { before: usize, after: Vec<String> },
}

impl InventoryNote {
    /// The note for a pass that replaced `old` with `new`; `first` when nothing had been
    /// detected before (the empty inventory the daemon starts with is no reading).
    fn of(first: bool, old: &Inventory, new: &Inventory) -> Option<InventoryNote> {
        let uuids = |inventory: &Inventory| -> Vec<String> {
            gpus(inventory).filter_map(|a| a.uuid.clone()).collect()
        };
        let after = uuids(new);
        if first {
            return Some(InventoryNote::Found(after));
        }
        let before = uuids(old);
        if before == after {
            return None;
        }
        Some(InventoryNote::Changed {
            before: before.len(),
            after,
        })
    }
}

impl std::fmt::Display for InventoryNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InventoryNote::Found(uuids) if uuids.is_empty() => {
                write!(f, "first detection: no accelerator")
            }
            InventoryNote::Found(uuids) => {
                write!(
                    f,
                    "first detection: {} accelerators: {uuids:?}",
                    uuids.len()
                )
            }
            InventoryNote::Changed { before, after } => write!(
                f,
                "the node's accelerators changed ({before} → {}): {after:?}",
                after.len()
            ),
        }
    }
}

fn log_inventory(first: bool, old: &Inventory, new: &Inventory) {
    match InventoryNote::of(first, old, new) {
        Some(note @ InventoryNote::Found(_)) => tracing::info!("{note}"),
        Some(note @ InventoryNote::Changed { .. }) => tracing::warn!("{note}"),
        None => {}
    }
}

/// Every accelerator of the inventory (the daemon keeps only its manufacturer's section).
fn gpus(inventory: &Inventory) -> impl Iterator<Item = &accel_core::inventory::Accelerator> {
    inventory
        .manufacturers
        .iter()
        .flat_map(|s| s.accelerators.iter())
}

/// The ledger's seats for the manufacturer's accelerators in `inventory` (none when it is
/// absent), each with the manufacturer's slice count and its health.
pub fn seats_of(inventory: &Inventory, manufacturer: Manufacturer) -> Vec<Seat> {
    seats_with(
        inventory,
        manufacturer,
        slices_per_accelerator(manufacturer).unwrap_or(0),
    )
}

/// The ledger's seats for the manufacturer's accelerators in `inventory`, each offered
/// `slice_count` logical slices (0: not sliced here).
pub fn seats_with(
    inventory: &Inventory,
    manufacturer: Manufacturer,
    slice_count: u32,
) -> Vec<Seat> {
    inventory
        .manufacturer(manufacturer)
        .map(|section| {
            section
                .accelerators
                .iter()
                .map(|a| Seat::from_accelerator(a, slice_count))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether two seat lists serve the same accelerators the same way; health is not compared
/// (it is pushed token by token, without touching the grants).
fn same_seats(a: &[Seat], b: &[Seat]) -> bool {
    let key = |seats: &[Seat]| -> Vec<Seat> {
        let mut seats: Vec<Seat> = seats
            .iter()
            .map(|s| Seat {
                healthy: true,
                ..s.clone()
            })
            .collect();
        seats.sort_by_key(|s| s.index);
        seats
    };
    key(a) == key(b)
}

/// Each seat's health from the inventory: the GPU with the seat's UUID (by index when the seat
/// has none) and its health; a seat whose GPU the inventory no longer lists is unhealthy.
pub fn seat_health(seats: &[(u32, Option<String>)], inventory: &Inventory) -> Vec<(u32, bool)> {
    seats
        .iter()
        .map(|(index, uuid)| {
            let gpu = match uuid {
                Some(uuid) => gpus(inventory).find(|a| a.uuid.as_deref() == Some(uuid.as_str())),
                None => gpus(inventory).find(|a| a.index == *index),
            };
            (*index, gpu.is_some_and(|a| a.healthy))
        })
        .collect()
}

/// The reset's view of the ledger: a GPU is busy while any grant holds it, live or finished
/// but not yet released.
pub struct LedgerGrants<'a> {
    pub ledger: &'a Ledger,
}

impl GrantView for LedgerGrants<'_> {
    fn busy(&self, uuid: &str) -> Option<String> {
        // The ledger charges whole accelerators by index; a MIG instance's UUID names no seat
        // until partitions are granted, and then holds nothing here.
        let index = self
            .ledger
            .seats()
            .find(|s| s.uuid.as_deref() == Some(uuid))?
            .index;
        let holders: Vec<String> = self
            .ledger
            .grants()
            .iter()
            .filter(|(_, g)| g.accelerators.contains(&index))
            .map(|(key, g)| {
                let who = format!("pod {} container {}", key.pod_uid, key.container);
                if g.finished {
                    format!("release by {who} pending")
                } else {
                    format!("granted to {who} ({})", g.resource)
                }
            })
            .collect();
        if holders.is_empty() {
            None
        } else {
            Some(holders.join(", "))
        }
    }
}

impl AdminHandler for Daemon {
    fn refresh(&self) -> Result<Refreshed, String> {
        Ok(self.detect(Reason::OnDemand))
    }

    fn reset(&self, gpus: &[String]) -> Result<ResetReport, ResetError> {
        let resetter = match &self.options.reset {
            Reset::By(resetter) => resetter.clone(),
            Reset::Refused(why) => return Err(ResetError::Unsupported(why.clone())),
        };
        let plugins = self.plugins.get().ok_or_else(|| {
            ResetError::Unavailable("the device plugins have not started".to_string())
        })?;
        // One reset at a time, and no detection pass while one runs.
        let collector = lock(&self.collector);
        // The busy check and the withdrawal in one step under the ledger's lock: from here
        // nothing is granted on these GPUs, and the lock is not held while nvidia-smi works
        // (up to the deadline per GPU): Allocate and ListAndWatch carry on for the others.
        let mut targets = Vec::new();
        plugins.withdraw(|ledger| {
            let state = lock(&self.state);
            targets = reset::check(
                resetter.as_ref(),
                self.options.manufacturer,
                &state.inventory,
                gpus,
                &LedgerGrants { ledger },
            )?;
            lock(&self.resetting).extend(targets.iter().cloned());
            Ok::<_, ResetError>(
                ledger
                    .seats()
                    .filter(|s| s.uuid.as_ref().is_some_and(|u| targets.contains(u)))
                    .map(|s| s.index)
                    .collect(),
            )
        })?;
        let resetting = Resetting {
            set: &self.resetting,
            uuids: &targets,
        };
        let results = reset::run_resets(
            resetter.as_ref(),
            collector.commands.as_ref(),
            &targets,
            self.options.reset_deadline,
        );
        let fresh = collect(&collector, &self.options);
        let report = {
            let mut guard = lock(&self.state);
            let mut report =
                reset::conclude(self.options.manufacturer, results, fresh, &mut guard.faults);
            if let Some(mut fresh) = report.inventory.take() {
                fresh
                    .manufacturers
                    .retain(|s| s.name == self.options.manufacturer);
                guard.inventory = fresh.clone();
                report.inventory = Some(fresh);
            }
            self.publish(&guard);
            report
        };
        drop(collector);
        // Back in service as the fresh inventory says (still Unhealthy when the reset did not
        // cure it).
        drop(resetting);
        self.sync_plugins();
        Ok(report)
    }
}
