//! Detection: one pass over the host yields one manufacturer's inventory section
//! ([`accel_core::Detection`]: `Ok(list)` measured, `Ok(empty)` nothing to manage, `Err` could not
//! measure). The backend may keep its own memory in the daemon's state directory (NVIDIA keeps the
//! GPUs it saw, to list those later passed through to VMs). It must not publish, label or grant.
//! Where an accelerator sits on the bus is read once for every manufacturer, after its pass
//! ([`place_on_bus`]).

use std::path::Path;
use std::time::{Duration, Instant};

use accel_core::inventory::PciTopology;
use accel_core::manufacturer::PciVendorId;
use accel_core::{Detection, Manufacturer, ManufacturerInventory};
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

/// The time left to one detection pass: each vendor call may take [`Deadlines::per_query`], and
/// all of them together [`Deadlines::snapshot`]. Start it when the pass starts, then ask
/// [`Budget::next`] before each call; a detector never adds up its own deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadlines: Deadlines,
    started: Instant,
}

/// The pass's time ran out before a call could start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the detection pass ran out of its {} s", .0.as_secs())]
pub struct OutOfTime(pub Duration);

impl Budget {
    /// A budget starting now.
    pub fn start(deadlines: Deadlines) -> Self {
        Budget::started_at(deadlines, Instant::now())
    }

    /// A budget that started at `started` (tests give an instant in the past).
    pub fn started_at(deadlines: Deadlines, started: Instant) -> Self {
        Budget { deadlines, started }
    }

    /// The pass's deadlines.
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    /// What is left of the pass's whole time.
    pub fn left(&self) -> Duration {
        self.deadlines
            .snapshot
            .saturating_sub(self.started.elapsed())
    }

    /// The deadline of the next call: the per-query deadline, or what is left of the pass if
    /// that is less; [`OutOfTime`] once the pass's time is spent.
    pub fn next(&self) -> Result<Duration, OutOfTime> {
        let left = self.left();
        if left.is_zero() {
            return Err(OutOfTime(self.deadlines.snapshot));
        }
        Ok(left.min(self.deadlines.per_query))
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

/// Fills each accelerator's [`PciTopology`] from the host, the same for every manufacturer: the
/// bridge walk of its PCI function's `bus/pci/devices` link (accel-host's
/// [`function_topology`](accel_host::realpath::function_topology), the walk the network
/// inventory and the bus distance use too) and the function's `class`. An accelerator with no
/// bus id, or whose function the host does not show (a paravirtual GPU, a masked bus id), gets
/// none; one its detector placed already keeps its own.
pub fn place_on_bus(host: &dyn Host, section: &mut ManufacturerInventory) {
    for accelerator in &mut section.accelerators {
        if accelerator.pci_topology.is_some() {
            continue;
        }
        let Some(bus) = accelerator.bus_id else {
            continue;
        };
        let address = bus.sysfs();
        let Some(walk) = accel_host::realpath::function_topology(host, &address) else {
            continue;
        };
        let class_file = format!("{}/{address}/class", accel_host::pci::PCI_DEVICES_DIR);
        let class = accel_host::realpath::read_attribute(host, &class_file)
            .ok()
            .filter(|c| !c.is_empty());
        accelerator.pci_topology = Some(PciTopology {
            root_id: walk.root,
            switches: walk.switches,
            class,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINES: Deadlines = Deadlines {
        per_query: Duration::from_secs(30),
        snapshot: Duration::from_secs(60),
    };

    #[test]
    fn a_fresh_pass_gives_each_call_the_per_query_deadline() {
        let budget = Budget::start(DEADLINES);
        assert_eq!(budget.next(), Ok(Duration::from_secs(30)));
        assert_eq!(budget.deadlines(), DEADLINES);
    }

    #[test]
    fn late_in_the_pass_a_call_gets_only_what_is_left() {
        let Some(started) = Instant::now().checked_sub(Duration::from_secs(50)) else {
            return; // a clock too close to its origin to go back 50 s
        };
        let next = Budget::started_at(DEADLINES, started).next().unwrap();
        assert!(next <= Duration::from_secs(10), "{next:?}");
        assert!(next > Duration::from_secs(5), "{next:?}");
    }

    #[test]
    fn a_spent_pass_starts_no_call() {
        let Some(started) = Instant::now().checked_sub(Duration::from_secs(61)) else {
            return;
        };
        let budget = Budget::started_at(DEADLINES, started);
        assert_eq!(budget.left(), Duration::ZERO);
        let e = budget.next().unwrap_err();
        assert_eq!(e, OutOfTime(Duration::from_secs(60)));
        assert_eq!(e.to_string(), "the detection pass ran out of its 60 s");
        let none = Deadlines {
            per_query: Duration::from_secs(1),
            snapshot: Duration::ZERO,
        };
        assert!(Budget::start(none).next().is_err());
    }

    #[test]
    fn every_accelerator_with_a_pci_function_is_placed_on_the_bus() {
        use accel_core::BusId;
        use accel_core::inventory::{Accelerator, Source};
        use std::os::unix::fs::symlink;

        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let behind_switch = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0";
        let flat = "sys/devices/pci0000:03/0000:03:00.0";
        std::fs::create_dir_all(root.join(behind_switch)).unwrap();
        std::fs::create_dir_all(root.join(flat)).unwrap();
        std::fs::write(root.join(behind_switch).join("class"), "0x030200\n").unwrap();
        std::fs::create_dir_all(root.join(accel_host::pci::PCI_DEVICES_DIR)).unwrap();
        for (address, target) in [("0000:17:00.0", behind_switch), ("0000:03:00.0", flat)] {
            let link = root.join(accel_host::pci::PCI_DEVICES_DIR).join(address);
            symlink(format!("../../../{}", &target["sys/".len()..]), link).unwrap();
        }
        let host = accel_host::FsHost::new(root);
        let at = |index: u32, bus: Option<&str>| {
            let mut a = Accelerator::new(index, Source::Driver);
            a.bus_id = bus.map(|b| b.parse::<BusId>().unwrap());
            a
        };
        let mut section = ManufacturerInventory::empty(Manufacturer::Amd);
        let placed = PciTopology {
            root_id: "kept".into(),
            ..PciTopology::default()
        };
        let mut already = at(4, Some("0000:03:00.0"));
        already.pci_topology = Some(placed.clone());
        section.accelerators = vec![
            at(0, Some("00000000:17:00.0")),
            at(1, Some("0000:03:00.0")),
            at(2, Some("0000:f1:00.0")),
            at(3, None),
            already,
        ];
        place_on_bus(&host, &mut section);
        let got: Vec<Option<PciTopology>> = section
            .accelerators
            .iter()
            .map(|a| a.pci_topology.clone())
            .collect();
        assert_eq!(
            got,
            [
                Some(PciTopology {
                    root_id: "0000:15:01.0".into(),
                    switches: vec!["0000:16:00.0".into(), "0000:15:01.0".into()],
                    class: Some("0x030200".into()),
                }),
                // No bridge above it: the root is the function itself; no class file, no class.
                Some(PciTopology {
                    root_id: "0000:03:00.0".into(),
                    switches: Vec::new(),
                    class: None,
                }),
                // A bus id the host does not show (WSL's virtual bus), and none at all.
                None,
                None,
                Some(placed),
            ]
        );
    }
}
