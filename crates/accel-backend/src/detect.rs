//! Detection: one pass over the host yields one manufacturer's inventory section
//! ([`accel_core::Detection`]: `Ok(list)` measured, `Ok(empty)` nothing to manage, `Err` could not
//! measure). The backend may keep its own memory in the daemon's state directory (NVIDIA keeps the
//! GPUs it saw, to list those later passed through to VMs). It must not publish, label or grant.

use std::path::Path;
use std::time::Duration;

use accel_core::manufacturer::PciVendorId;
use accel_core::{Detection, Manufacturer};
use accel_host::pci::PciClassPrefixes;
use accel_host::{Commands, Host};

/// How long a detection's vendor calls may take (seed 002: 30 s a query, a minute for the
/// whole read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    pub per_query: Duration,
    pub snapshot: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            per_query: Duration::from_secs(30),
            snapshot: Duration::from_secs(60),
        }
    }
}

/// What one detection pass is given.
pub struct DetectRequest<'a> {
    pub host: &'a dyn Host,
    pub commands: &'a dyn Commands,
    pub deadlines: Deadlines,
    /// The daemon's state directory, where the backend may keep its own memory; `None` (a
    /// one-off `detect`): keep none.
    pub state_dir: Option<&'a Path>,
    /// The PCI classes the bus scan treats as accelerators (`GPUSTACK_PCI_CLASS_PREFIXES`).
    pub pci_classes: &'a PciClassPrefixes,
    /// The manufacturer's configured PCI vendor ids (`GPUSTACK_<MANUFACTURER>_PCI_VENDOR_ID`):
    /// what its functions on the bus are recognised by (the PCI gate, GPUs passed through).
    pub vendor_ids: &'a [PciVendorId],
    /// The PCI gate: a bus that lists functions but none of `vendor_ids` answers `Ok(empty)`
    /// without asking the driver; false (`--no-pci-check`): no gate.
    pub pci_gate: bool,
}

/// The PCI gate's verdict for a bus scan: `Some(reason)` when the gate closes (the bus lists
/// functions, none of the configured vendor ids); `None` when it passes or cannot judge (an
/// empty or unreadable bus says nothing).
pub fn pci_gate_closed(
    host: &dyn Host,
    classes: &PciClassPrefixes,
    ids: &[PciVendorId],
) -> Option<String> {
    let scan = accel_host::pci::scan_pci(host, classes).ok()?;
    if scan.functions.is_empty() {
        return None;
    }
    let matches = |f: &accel_host::pci::PciFunction| {
        ids.iter().any(|id| {
            id.vendor == f.vendor_id
                && id
                    .class
                    .as_deref()
                    .is_none_or(|class| format!("{:06x}", f.class).starts_with(class))
        })
    };
    if scan.functions.iter().any(matches) {
        return None;
    }
    let names: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Some(format!(
        "no PCI device of vendor {} on the bus (--no-pci-check detects anyway)",
        names.join(", ")
    ))
}

/// A pass that could not run at all: the backend's own state could not be read or kept, or the
/// bus it scans could not be read. Unlike a host that could not be measured (`Ok(Err(…))`),
/// this is the command's failure.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct StateError {
    /// What was being done (`reading /var/lib/…/gpus-seen.json`).
    pub what: String,
    pub reason: String,
}

/// One manufacturer's detector.
pub trait Detector: Send + Sync {
    /// The manufacturer whose section this detector answers.
    fn manufacturer(&self) -> Manufacturer;
    /// One detection pass. `Err` only when the backend's own state is unusable; a host that
    /// cannot be measured is `Ok(Err(…))`, the detector contract's answer.
    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError>;
}

impl DetectRequest<'_> {
    /// The PCI gate for `manufacturer`, written once for every detector: with the gate on and
    /// closed, the pass's answer (an empty section carrying the reason, the driver never
    /// asked); `None` when the gate is off, passes or cannot judge.
    pub fn gated(&self, manufacturer: Manufacturer) -> Option<Detection> {
        if !self.pci_gate {
            return None;
        }
        let reason = pci_gate_closed(self.host, self.pci_classes, self.vendor_ids)?;
        let mut section = accel_core::ManufacturerInventory::empty(manufacturer);
        section.notes.push(reason);
        Some(Ok(section))
    }
}
