//! The node daemon's running state between its loops: the inventory (health applied), the
//! fault watch, the collector that detects, and the handle on the device plugins whose token
//! health follows the inventory. [`loops`] drives it (kernel log, detection cadence);
//! `cmd::serve` wires it; the admin socket's [`AdminHandler`] is implemented here (refresh,
//! reset). This module decides when to collect and whom to tell; what a fault means is
//! `accel_nvidia::faults`, what a reset may do is `accel_nvidia::reset`, and granting is the
//! plugins'.
//!
//! Locks, always taken in this order, never the other way: the collector (one detection or
//! reset at a time) → the push lock (health pushes in the order the inventory changed) → the
//! plugins' ledger → the state. The state is never held while calling into the plugins.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use accel_core::Manufacturer;
use accel_core::inventory::Inventory;
use accel_core::ledger::Ledger;
use accel_host::pci::{self, PciClassPrefixes, PciSetFingerprint};
use accel_host::{FsHost, KernelLog, KernelLogEntry, KmsgReader};
use accel_nvidia::detector::Deadlines;
use accel_nvidia::faults::{self, FaultWatch, WatchOutcome};
use accel_nvidia::reset::{self, GrantView, ResetError, ResetReport};
use accel_nvidia::xid::XidClasses;
use accel_plugin::PluginHandle;
use tokio::sync::watch;

use crate::admin::{AdminHandler, Refreshed};
use crate::node::Node;

pub mod loops;
#[cfg(test)]
mod tests;

/// How often the PCI device set is looked at for a card that came or went.
pub const PCI_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The full inventory's period when none is configured (DESIGN.md, "Cadence").
pub const INVENTORY_INTERVAL: Duration = Duration::from_secs(600);

/// What the daemon needs to know to collect.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// `--data-dir`: `faults.json`, the passthrough memory.
    pub data_dir: PathBuf,
    pub prefixes: PciClassPrefixes,
    pub deadlines: Deadlines,
    /// The full inventory's period.
    pub inventory_interval: Duration,
    /// How often the PCI device set is compared with the last one.
    pub pci_poll_interval: Duration,
    /// How long one `nvidia-smi --gpu-reset` may take.
    pub reset_deadline: Duration,
    pub xid_classes: XidClasses,
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
}

struct State {
    inventory: Inventory,
    faults: FaultWatch,
}

/// The daemon's shared state.
pub struct Daemon {
    collector: Mutex<Node>,
    push: Mutex<()>,
    state: Mutex<State>,
    plugins: OnceLock<PluginHandle>,
    options: DaemonOptions,
    /// Detection passes run since start (measured or not), for tests and the log.
    passes: watch::Sender<u64>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemon {
    /// Loads this boot's faults, runs the first detection and applies the faults to it, so the
    /// plugins start with the right health. A boot id that cannot be read keeps the faults in
    /// memory only (a restart cannot tell whether it is the same boot).
    pub fn prepare(node: Node, options: DaemonOptions) -> anyhow::Result<Daemon> {
        let (faults, notes) = match faults::read_boot_id(node.host.as_ref()) {
            Ok(boot_id) => FaultWatch::start(
                Some(&options.data_dir),
                &boot_id,
                options.xid_classes.clone(),
            ),
            Err(e) => {
                tracing::error!("{e}: XID faults are kept in memory only, a restart forgets them");
                FaultWatch::start(None, "unknown", options.xid_classes.clone())
            }
        };
        for note in notes {
            tracing::warn!("{note}");
        }
        let (mut inventory, detections) = node.collect(
            Some(&options.data_dir),
            &options.prefixes,
            options.deadlines,
        )?;
        for detection in &detections {
            if let Err(e) = detection {
                tracing::error!("{e}");
            }
        }
        faults.apply(&mut inventory);
        // A fault on a GPU makes no sound until something looks: say so at start.
        for fault in faults.record().faults() {
            tracing::warn!(gpu = %fault.device_id, "kept from this boot: {}", fault.reason());
        }
        Ok(Daemon {
            collector: Mutex::new(node),
            push: Mutex::new(()),
            state: Mutex::new(State { inventory, faults }),
            plugins: OnceLock::new(),
            options,
            passes: watch::channel(0).0,
        })
    }

    /// The inventory as it stands, health applied.
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

    /// Connects the running plugins: from now on health changes reach ListAndWatch. The
    /// current health is pushed at once.
    pub fn attach(&self, plugins: PluginHandle) {
        if self.plugins.set(plugins).is_err() {
            tracing::warn!("the device plugins were attached twice; keeping the first");
        }
        self.push_health();
    }

    /// Opens `/dev/kmsg` under the host root. When it cannot be opened the daemon goes on
    /// without XIDs (counters still count at each collection), and says so loudly once.
    pub fn open_kernel_log(&self) -> Option<Box<dyn KernelLog>> {
        let root = lock(&self.collector).host.root().to_path_buf();
        match KmsgReader::open_host(&FsHost::new(&root)) {
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
            let State { inventory, faults } = &mut *guard;
            let outcome = faults.on_entry(entry, inventory, now);
            if outcome.changed.is_some() {
                faults.apply(inventory);
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
            self.push_health();
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

    /// Runs one detection now (blocking: nvidia-smi may take its deadline). A pass that could
    /// not measure keeps the last detection; the notes say so. Health goes to the plugins.
    pub fn detect(&self, reason: Reason) -> Refreshed {
        let collector = lock(&self.collector);
        tracing::debug!(?reason, "collecting the inventory");
        let mut notes = Vec::new();
        match collect(&collector, &self.options) {
            Ok(mut fresh) => {
                let mut state = lock(&self.state);
                state.faults.apply(&mut fresh);
                log_changes(&state.inventory, &fresh);
                state.inventory = fresh;
            }
            Err(e) => {
                let note = format!("kept the last detection: {e}");
                tracing::error!("{note}");
                notes.push(note);
            }
        }
        self.push_health();
        self.passes.send_modify(|n| *n = n.wrapping_add(1));
        Refreshed::from_inventory(&lock(&self.state).inventory, notes)
    }

    /// Sets every seat's token health from the inventory: a seat is healthy when the inventory
    /// lists its GPU (by UUID) and the GPU passes the health rule.
    fn push_health(&self) {
        let Some(plugins) = self.plugins.get() else {
            return;
        };
        let _push = lock(&self.push);
        let seats = plugins.with_ledger(|ledger| {
            ledger
                .seats()
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

/// One detection pass as the daemon takes it: `Err` when any detector could not measure.
fn collect(node: &Node, options: &DaemonOptions) -> Result<Inventory, String> {
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

fn log_changes(old: &Inventory, new: &Inventory) {
    let uuids = |inventory: &Inventory| -> Vec<String> {
        gpus(inventory).filter_map(|a| a.uuid.clone()).collect()
    };
    let (before, after) = (uuids(old), uuids(new));
    if before != after {
        tracing::warn!(
            "the node's GPUs changed ({} → {}); the plugins keep serving the GPUs they started with until a restart",
            before.len(),
            after.len()
        );
    }
}

fn gpus(inventory: &Inventory) -> impl Iterator<Item = &accel_core::inventory::Accelerator> {
    inventory
        .manufacturers
        .iter()
        .filter(|s| s.name == Manufacturer::Nvidia)
        .flat_map(|s| s.accelerators.iter())
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
        let plugins = self.plugins.get().ok_or_else(|| {
            ResetError::Unavailable("the device plugins have not started".to_string())
        })?;
        let collector = lock(&self.collector);
        // The ledger stays locked from the busy check to the end: nothing is granted a GPU
        // while it resets.
        let report = plugins.with_ledger(|ledger| {
            let mut guard = lock(&self.state);
            let State { inventory, faults } = &mut *guard;
            let mut collect_again = || collect(&collector, &self.options);
            let report = reset::reset(
                inventory,
                gpus,
                &LedgerGrants { ledger },
                collector.commands.as_ref(),
                self.options.reset_deadline,
                &mut collect_again,
                faults,
            )?;
            if let Some(fresh) = &report.inventory {
                *inventory = fresh.clone();
            }
            Ok::<_, ResetError>(report)
        })?;
        self.push_health();
        Ok(report)
    }
}
