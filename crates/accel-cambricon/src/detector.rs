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
//! **Health** is read from the same two queries, no third call ([`crate::health`]): `cnmon
//! info`'s `Health State`, ECC counters and page retirement, the table's `Ecc-Error` column.
//! The detector applies the health rule, so `detect` shows it as the daemon does.
//!
//! **The identity queries are both of cnmon's.** The table enumerates the cards and gives each
//! its `Card` ordinal (the device index its nodes are named by); `cnmon info` gives each its
//! UUID. Neither has a stand-in: without them the cards have no identity, and a pass that put
//! such cards in place of the known ones would drop every live grant.
//!
//! Answers: no Cambricon function and no card node → `Ok(empty)`; functions but no driver
//! (no bound driver, no card node) → `Ok(empty)` with a note; the driver there but cnmon not
//! installed, silent past its deadline, exiting non-zero, printing what cannot be read, or
//! listing fewer cards than the kernel shows → `Err(NotMeasured)`, the reason a
//! [`CnmonFailure`] (the daemon keeps its last good inventory and its grants); otherwise
//! `Ok(list)`.

use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, DetectError, Detection, ManufacturerInventory, Source};
use accel_host::pci::{PciClassPrefixes, PciFunction, scan_pci};
use accel_host::{Commands, Host, run_bounded};

use crate::cnmon::{self, CnmonCard, CnmonError, CnmonInfo, CnmonTable};
use crate::health::{self, CardName};
use crate::nodes;

/// The kernel module whose `version` names the driver (`/sys/module/cambricon_drv/version`).
pub const DRIVER_MODULE: &str = "cambricon_drv";
/// Where the driver's version is read.
pub const DRIVER_VERSION_FILE: &str = "/sys/module/cambricon_drv/version";
/// Where the Neuware (cntoolkit) version is read: a fixed path, as the described system reads
/// it (spec §2.3), not `$NEUWARE_HOME`.
pub const RUNTIME_VERSION_FILE: &str = "/usr/local/neuware/version.txt";

/// Why cnmon gave no answer the join can use: the pass is then not measured. Worded once, by
/// its `Display`, which detector, doctor and tests use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CnmonFailure {
    /// A query gave no answer: not installed (exit 127 included), no answer within its
    /// deadline, a non-zero exit, or the pass's time spent before it could start. The words are
    /// the bounded run's, which name the argv.
    NoAnswer(String),
    /// A query printed what its parser cannot read.
    Unreadable(CnmonError),
    /// A query lists fewer cards than the kernel shows.
    TooFew {
        argv: &'static [&'static str],
        listed: usize,
        shown: usize,
    },
}

impl fmt::Display for CnmonFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CnmonFailure::NoAnswer(why) => f.write_str(why),
            CnmonFailure::Unreadable(e) => write!(f, "{e}"),
            CnmonFailure::TooFew {
                argv,
                listed,
                shown,
            } => write!(
                f,
                "{}: lists {listed} card(s) where the kernel shows {shown}",
                argv.join(" ")
            ),
        }
    }
}

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
    /// Why cnmon, asked because the kernel shows the driver, gave no answer the join can use.
    pub cnmon_failure: Option<CnmonFailure>,
    /// What a source could not give, worded for the section's notes.
    pub notes: Vec<String>,
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

/// Runs one cnmon query within the pass's budget and parses what it printed.
fn ask<T>(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[&str],
    parse: fn(&str) -> Result<T, CnmonError>,
) -> Result<T, CnmonFailure> {
    let deadline = budget
        .next()
        .map_err(|e| CnmonFailure::NoAnswer(format!("{}: {e}", argv.join(" "))))?;
    let out =
        run_bounded(commands, argv, deadline).map_err(|e| CnmonFailure::NoAnswer(e.to_string()))?;
    parse(&out.stdout_text()).map_err(CnmonFailure::Unreadable)
}

/// Runs cnmon's two identity queries within the pass's budget; after a failed table,
/// `cnmon info` is not asked (the pass is not measured either way).
fn ask_cnmon(commands: &dyn Commands, deadlines: Deadlines, sources: &mut Sources) {
    let budget = Budget::start(deadlines);
    let answered =
        ask(commands, &budget, cnmon::TABLE_ARGV, cnmon::parse_table).and_then(|table| {
            sources.table = Some(table);
            ask(commands, &budget, cnmon::INFO_ARGV, cnmon::parse_info)
        });
    match answered {
        Ok(info) => sources.info = info,
        Err(failure) => sources.cnmon_failure = Some(failure),
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
    join(read_sources(host, commands, options))
}

/// Why cnmon's answer cannot stand for the cards: its failure, or a query listing fewer cards
/// than the kernel shows (`bound` functions; with none, the card nodes only tell that there is
/// at least one card).
pub fn unmeasured(sources: &Sources, bound: usize) -> Option<CnmonFailure> {
    if let Some(failure) = &sources.cnmon_failure {
        return Some(failure.clone());
    }
    let table = sources.table.as_ref()?;
    let shown = if bound > 0 {
        bound
    } else {
        sources.card_nodes.len()
    };
    let too_few = |argv: &'static [&'static str], listed: usize, expected: usize| {
        (listed == 0 || listed < expected).then_some(CnmonFailure::TooFew {
            argv,
            listed,
            shown: shown.max(expected),
        })
    };
    too_few(cnmon::TABLE_ARGV, table.cards.len(), bound).or_else(|| {
        too_few(
            cnmon::INFO_ARGV,
            sources.info.len(),
            bound.max(table.cards.len()),
        )
    })
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

/// The `cnmon info` block of a card: by address, else by cnmon's ordinal where the block
/// prints no address.
pub fn info_of(info: &[CnmonInfo], bus: Option<BusId>, card: Option<u32>) -> Option<&CnmonInfo> {
    info.iter()
        .find(|i| bus.is_some() && i.bus_id == bus)
        .or_else(|| {
            info.iter()
                .find(|i| card.is_some() && i.card == card && i.bus_id.is_none())
        })
}

/// The pure join: sources in, the section out, or not measured ([`unmeasured`]).
pub fn join(sources: Sources) -> Detection {
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
        return Ok(section);
    }
    if let Some(failure) = unmeasured(&sources, bound.len()) {
        return Err(DetectError::NotMeasured {
            manufacturer: Manufacturer::Cambricon,
            reason: failure.to_string(),
        });
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
        let who = CardName {
            card: a.minor_number,
            bus: a.bus_id,
        };
        let reading = health::read(index, who, info, row);
        a.ecc = reading.ecc;
        a.remapped_rows = reading.remapped_rows;
        a.reported_faults = reading.reported_faults;
        section
            .notes
            .extend(reading.warnings.iter().map(ToString::to_string));
        accel_core::health::assess(&mut a, &[]);
        section.accelerators.push(a);
    }
    if by_position {
        section.notes.push(
            "cnmon: this release prints no PCI address, so its cards are matched to the bus in order".into(),
        );
    }
    Ok(section)
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
