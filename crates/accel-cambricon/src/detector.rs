//! The Cambricon detector: the kernel's views first (the PCI functions of Cambricon's vendor
//! ids and the driver bound to them, the card nodes `/dev/cambricon_dev<N>`, the
//! `cambricon_drv` module's version), then `cnmon` (the card table, then `cnmon info` for the
//! UUIDs), joined once by PCI address ([`join`]). cnmon 4.x prints no PCI address: there the
//! tool's rows are matched to the bus in order, and a note says so (HAZARDS.md item 1).
//!
//! **What an accelerator is.** One MLU PCI function bound to Cambricon's driver. Its index is
//! a compact counter in bus order; `minorNumber` is cnmon's `Card` ordinal — the loop position
//! cnDev numbers its device nodes by (spec §2.2), which the responder names the nodes with
//! and `CAMBRICON_VISIBLE_DEVICES` lists. A card whose ordinal is unknown keeps `None` and
//! cannot be answered for (the responder refuses, naming it).
//!
//! Answers: no Cambricon function and no card node → `Ok(empty)`; functions but no driver
//! (no bound driver, no card node) → `Ok(empty)` with a note; otherwise `Ok(list)`, whatever
//! cnmon did (its failure is a note).

use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, Detection, ManufacturerInventory, Source};
use accel_host::pci::{PciClassPrefixes, PciFunction, scan_pci};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::cnmon::{self, CnmonCard, CnmonInfo, CnmonTable};
use crate::nodes;

/// The kernel module whose `version` names the driver (`/sys/module/cambricon_drv/version`).
pub const DRIVER_MODULE: &str = "cambricon_drv";
/// Where the driver's version is read.
pub const DRIVER_VERSION_FILE: &str = "/sys/module/cambricon_drv/version";
/// Where the Neuware (cntoolkit) version is read: a fixed path, as the described system reads
/// it (spec §2.3), not `$NEUWARE_HOME`.
pub const RUNTIME_VERSION_FILE: &str = "/usr/local/neuware/version.txt";

/// The note for a host without cnmon.
pub const NO_CNMON: &str =
    "cnmon is not installed on the host: no card has a UUID or a device index";

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// Cambricon's PCI vendor ids (`GPUSTACK_CAMBRICON_PCI_VENDOR_ID`).
    pub vendor_ids: Vec<u16>,
    pub pci_classes: PciClassPrefixes,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: Manufacturer::Cambricon.default_pci_vendor_ids().to_vec(),
            pci_classes: PciClassPrefixes::default(),
        }
    }
}

/// Whether a PCI function's bound driver is Cambricon's (`cambricon_drv`, `cambricon-drv`).
pub fn is_cambricon_driver(driver: &str) -> bool {
    driver.to_ascii_lowercase().starts_with("cambricon")
}

/// Everything the detector read, each source as its own type.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Cambricon's PCI functions, in bus order.
    pub functions: Vec<PciFunction>,
    /// The driver indexes `/dev` has a card node for.
    pub card_nodes: Vec<u32>,
    pub driver_version_file: Option<String>,
    pub runtime_version_file: Option<String>,
    pub table: Option<CnmonTable>,
    pub info: Vec<CnmonInfo>,
    /// What a source could not give, worded for the section's notes.
    pub notes: Vec<String>,
}

fn run(commands: &dyn Commands, argv: &[&str], deadline: Duration) -> Result<String, RunFailure> {
    run_bounded(commands, argv, deadline).map(|out| out.stdout_text())
}

fn first_version(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.split('.').filter(|p| !p.is_empty()).count() >= 3)
        .map(|w| w.trim_matches('.').to_string())
}

fn read_text(host: &dyn Host, path: &str) -> Option<String> {
    host.read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// Runs cnmon's two queries within the pass's budget.
fn ask_cnmon(commands: &dyn Commands, deadlines: Deadlines, sources: &mut Sources) {
    let budget = Budget::start(deadlines);
    let deadline = match budget.next() {
        Ok(d) => d,
        Err(e) => return sources.notes.push(format!("cnmon: {e}")),
    };
    match run(commands, cnmon::TABLE_ARGV, deadline) {
        Ok(text) => match cnmon::parse_table(&text) {
            Ok(table) => sources.table = Some(table),
            Err(e) => sources.notes.push(e.to_string()),
        },
        Err(RunFailure::NotInstalled { .. }) => return sources.notes.push(NO_CNMON.into()),
        Err(e) => return sources.notes.push(e.to_string()),
    }
    let deadline = match budget.next() {
        Ok(d) => d,
        Err(e) => return sources.notes.push(format!("cnmon info: {e}")),
    };
    match run(commands, cnmon::INFO_ARGV, deadline) {
        Ok(text) => sources.info = cnmon::parse_info(&text),
        Err(e) => sources.notes.push(e.to_string()),
    }
}

/// Reads every source of `host`.
pub fn read_sources(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Sources {
    let mut sources = Sources::default();
    match scan_pci(host, &options.pci_classes) {
        Ok(scan) => {
            sources.functions = scan
                .functions
                .into_iter()
                .filter(|f| options.vendor_ids.contains(&f.vendor_id))
                .collect();
        }
        Err(e) => sources.notes.push(format!("PCI scan: {e}")),
    }
    sources.card_nodes = nodes::card_indexes(host);
    sources.driver_version_file = read_text(host, DRIVER_VERSION_FILE);
    sources.runtime_version_file = read_text(host, RUNTIME_VERSION_FILE);
    let bound = sources
        .functions
        .iter()
        .any(|f| f.driver.as_deref().is_some_and(is_cambricon_driver));
    if bound || !sources.card_nodes.is_empty() {
        ask_cnmon(commands, options.deadlines, &mut sources);
    }
    sources
}

/// One detection pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Detection {
    Ok(join(read_sources(host, commands, options)))
}

/// The cnmon row of a PCI function: by address, else (cnmon 4.x) by position.
fn row_of<'a>(
    table: Option<&'a CnmonTable>,
    function: Option<&PciFunction>,
    position: usize,
) -> (Option<&'a CnmonCard>, bool) {
    let Some(table) = table else {
        return (None, false);
    };
    if let Some(f) = function
        && let Some(row) = table.cards.iter().find(|c| c.bus_id == Some(f.bus_id))
    {
        return (Some(row), false);
    }
    let no_addresses = table.cards.iter().all(|c| c.bus_id.is_none());
    if no_addresses {
        return (
            table.cards.get(position),
            table.cards.get(position).is_some(),
        );
    }
    (None, false)
}

fn info_of(info: &[CnmonInfo], bus: Option<BusId>, card: Option<u32>) -> Option<&CnmonInfo> {
    info.iter()
        .find(|i| bus.is_some() && i.bus_id == bus)
        .or_else(|| {
            info.iter()
                .find(|i| card.is_some() && i.card == card && i.bus_id.is_none())
        })
}

/// The pure join: sources in, the section out.
pub fn join(sources: Sources) -> ManufacturerInventory {
    let mut section = ManufacturerInventory::empty(Manufacturer::Cambricon);
    section.notes = sources.notes.clone();
    let bound: Vec<&PciFunction> = sources
        .functions
        .iter()
        .filter(|f| f.driver.as_deref().is_some_and(is_cambricon_driver))
        .collect();
    if bound.is_empty() && sources.card_nodes.is_empty() {
        if !sources.functions.is_empty() {
            section.notes.push(format!(
                "cambricon: {} MLU function(s) on the bus but no Cambricon driver bound to them and no /dev/{}<N> node: install the Cambricon driver (cambricon_drv)",
                sources.functions.len(),
                nodes::CARD_PREFIX
            ));
        }
        return section;
    }
    let table = sources.table.as_ref();
    section.driver_version = sources
        .driver_version_file
        .as_deref()
        .and_then(cnmon::major_minor)
        .or_else(|| {
            table
                .and_then(|t| t.driver_version.as_deref())
                .and_then(cnmon::major_minor)
        });
    section.runtime_version = sources
        .runtime_version_file
        .as_deref()
        .and_then(first_version)
        .and_then(|v| cnmon::major_minor(&v));
    section.management_version = table.and_then(|t| t.cnmon_version.clone());
    // The kernel's functions when the bus shows them; else cnmon's rows alone (a container
    // without the host's sysfs).
    let count = if bound.is_empty() {
        table.map_or(0, |t| t.cards.len())
    } else {
        bound.len()
    };
    let mut by_position = false;
    for position in 0..count {
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        let function = bound.get(position).copied();
        let (row, positional) = if bound.is_empty() {
            (table.and_then(|t| t.cards.get(position)), false)
        } else {
            row_of(table, function, position)
        };
        by_position |= positional;
        let mut a = Accelerator::new(index, Source::Driver);
        a.bus_id = function.map(|f| f.bus_id).or(row.and_then(|r| r.bus_id));
        a.numa_node = function.and_then(|f| f.numa_node);
        a.minor_number = row.and_then(|r| r.card);
        let info = info_of(&sources.info, a.bus_id, a.minor_number);
        a.product = row
            .and_then(|r| r.name.clone())
            .or_else(|| info.and_then(|i| i.product.clone()));
        a.memory_mib = row.and_then(|r| r.memory_total_mib);
        a.vbios_version = row.and_then(|r| r.firmware.clone());
        a.uuid = info
            .and_then(|i| i.uuid.as_deref())
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| format!("MLU-{u}"));
        let bus = a
            .bus_id
            .map(|b| b.sysfs())
            .unwrap_or_else(|| "no PCI address".into());
        if row.is_none() && table.is_some() {
            section.notes.push(format!(
                "accelerator {index} ({bus}): cnmon lists no card at this PCI address"
            ));
        }
        if let Some(card) = a.minor_number
            && !sources.card_nodes.contains(&card)
        {
            section.notes.push(format!(
                "accelerator {index} ({bus}): the host has no device node {}",
                nodes::card(card)
            ));
        }
        if a.uuid.is_none() {
            section.notes.push(format!(
                "accelerator {index} ({bus}): cnmon info reports no UUID, so it cannot be granted"
            ));
        }
        section.accelerators.push(a);
    }
    if by_position {
        section.notes.push(
            "cnmon: this release prints no PCI address, so its cards are matched to the bus in order".into(),
        );
    }
    section
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_version_is_the_first_three_part_number() {
        assert_eq!(
            first_version("Neuware 1.15.0 (build 3)").as_deref(),
            Some("1.15.0")
        );
        assert_eq!(first_version("v5.10"), None);
    }
}
