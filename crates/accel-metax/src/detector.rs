//! The MetaX detector: the kernel's views first (the PCI functions of MetaX's vendor ids, with
//! virtual functions skipped; each one's DRM minors from the `metax` module's listing
//! `/sys/module/metax/drivers/pci:{METAX,metax}/<bdf>/drm`; the module's version), then
//! `mx-smi` (the table, then `mx-smi -L` for the UUIDs), joined once by PCI address
//! ([`join`]).
//!
//! **What an accelerator is.** One MetaX physical function (or bare-metal function) bound to
//! the `metax` driver. A virtual function (sysfs shows a `physfn` link) is skipped, as the
//! described system skips `Virtualization_Mode_Vf` devices. Its index is a compact counter in
//! bus order; its DRM `card<N>` and `renderD<M>` minors are read apart, never one computed from
//! the other (spec §2.2).
//!
//! **The identity queries are both of mx-smi's.** `mx-smi -L` names each GPU's UUID; the
//! table lists the GPUs with their names and memory (which size the sliced family and name the
//! product labels; a name is taken in the library's form, `MetaX C500` → `MXC500`,
//! [`mxsmi::model_name`]) and the ordinal a `-L` line without a bus id is joined by. A pass without
//! either would put GPUs without identity, or without their memory, in place of the known
//! ones, and the swap would drop every live grant.
//!
//! **Health** (spec §6: unhealthy iff MXSML's DRAM uncorrectable count is above 0). After the
//! identity queries the pass asks `mx-smi --count-ecc` ([`count_ecc`]), the tool's print of that
//! library call, and each GPU's block (by PCI address, else the tool's ordinal) fills the
//! accelerator's `ecc` — `DRAM Uncorrectable` its uncorrected count, `DRAM Correctable` its
//! corrected one; neither printed is `ecc: None`, never a 0 — and the shared health rule
//! (`accel_core::health`) decides, in `detect` as in the daemon. The count is the driver's, held
//! until the GPU is reset or the node reboots (the retired-page count outlives a reboot): each
//! pass reads it afresh, so a restarted daemon finds the GPU still out and a reset or a reboot
//! brings it back; nothing goes to `faults.json`. What only warns — pages retired for
//! double-bit errors, uncorrectable SRAM errors, a count not printed, a query that failed — is
//! an [`EccNote`]; a failed query never fails the pass (spec: a failed read is healthy).
//!
//! Answers: no MetaX function → `Ok(empty)`; functions but none bound to `metax` → `Ok(empty)`
//! with a note; only virtual functions bound → `Ok(empty)` with notes; the driver there but
//! mx-smi not installed, silent past its deadline, exiting non-zero, printing what cannot be
//! read, or listing fewer GPUs than the kernel shows → `Err(NotMeasured)`, the reason a
//! [`MxSmiFailure`] (the daemon keeps its last good inventory and its grants); otherwise
//! `Ok(list)`.

use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{
    Accelerator, DetectError, Detection, DrmNodes, Ecc, ManufacturerInventory, Source,
};
use accel_host::drm;
use accel_host::pci::{PCI_DEVICES_DIR, PciClassPrefixes, PciFunction, scan_pci};
use accel_host::{Commands, Host, run_bounded};

use crate::count_ecc::{self, EccCounts};
use crate::mxsmi::{self, MxSmiError, MxSmiListed, MxSmiTable};

/// MetaX's kernel module.
pub const MODULE: &str = "metax";
/// The PCI driver names the module registers, in the order they are looked for.
pub const PCI_DRIVERS: &[&str] = &["METAX", "metax"];
/// Where the driver's version is read.
pub const DRIVER_VERSION_FILE: &str = "/sys/module/metax/version";

/// Why mx-smi gave no answer the join can use: the pass is then not measured. Worded once, by
/// its `Display`, which detector, doctor and tests use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MxSmiFailure {
    /// A query gave no answer: not installed (exit 127 included), no answer within its
    /// deadline, a non-zero exit, or the pass's time spent before it could start. The words are
    /// the bounded run's, which name the argv.
    NoAnswer(String),
    /// A query printed what its parser cannot read.
    Unreadable(MxSmiError),
    /// A query lists fewer GPUs than the kernel shows.
    TooFew {
        argv: &'static [&'static str],
        listed: usize,
        shown: usize,
    },
}

impl fmt::Display for MxSmiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MxSmiFailure::NoAnswer(why) => f.write_str(why),
            MxSmiFailure::Unreadable(e) => write!(f, "{e}"),
            MxSmiFailure::TooFew {
                argv,
                listed,
                shown,
            } => write!(
                f,
                "{}: lists {listed} GPU(s) where the kernel shows {shown}",
                argv.join(" ")
            ),
        }
    }
}

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// MetaX's PCI vendor ids (`GPUSTACK_METAX_PCI_VENDOR_ID`).
    pub vendor_ids: Vec<u16>,
    pub pci_classes: PciClassPrefixes,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: Manufacturer::Metax.default_pci_vendor_ids().to_vec(),
            pci_classes: PciClassPrefixes::default(),
        }
    }
}

/// Whether a PCI function's bound driver is MetaX's (`metax`, `METAX`).
pub fn is_metax_driver(driver: &str) -> bool {
    driver.eq_ignore_ascii_case(MODULE)
}

/// One MetaX function as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaxFunction {
    pub pci: PciFunction,
    /// A virtual function (`physfn` link present).
    pub virtual_function: bool,
    /// `(card, render)` from the module's listing; `None` when it cannot be read.
    pub minors: Option<(Option<u32>, Option<u32>)>,
}

/// Everything the detector read, each source as its own type.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub functions: Vec<MetaxFunction>,
    pub driver_version_file: Option<String>,
    pub table: Option<MxSmiTable>,
    pub listed: Vec<MxSmiListed>,
    /// Why mx-smi, asked because a function is bound to `metax`, gave no answer the join can
    /// use.
    pub mx_smi_failure: Option<MxSmiFailure>,
    /// `mx-smi --count-ecc`'s blocks, or why there are none (the failure's words, which name
    /// the argv); `None` when it was not asked (no identity to join it to).
    pub ecc: Option<Result<Vec<EccCounts>, String>>,
    pub notes: Vec<String>,
}

/// What the ECC counts tell beyond the health rule, worded once: detect's notes and doctor's
/// `health-ecc` check use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EccNote {
    /// `mx-smi --count-ecc` gave no reading (the words name the argv and the failure).
    Unread(String),
    /// The reading has no block for this accelerator.
    NoBlock { index: u32, bus: BusId },
    /// Blocks that print no DRAM uncorrectable count (the 2.2.9 capture prints none).
    NoDramCount { unread: usize, total: usize },
    /// Pages retired for double-bit errors: the memory is already mapped out and the count
    /// outlives a reboot, so it warns and the GPU stays in service.
    RetiredPages { index: u32, bus: BusId, pages: u64 },
    /// Uncorrectable SRAM errors: counted by MXSML, but spec §6's rule reads DRAM only.
    SramUncorrectable { index: u32, bus: BusId, errors: u64 },
}

impl fmt::Display for EccNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EccNote::Unread(why) => write!(
                f,
                "{why}: no ECC count is read this pass, so a GPU with uncorrectable DRAM errors stays in service"
            ),
            EccNote::NoBlock { index, bus } => write!(
                f,
                "accelerator {index} ({}): mx-smi --count-ecc prints no block for it, so its ECC errors are not read",
                bus.sysfs()
            ),
            EccNote::NoDramCount { unread, total } => write!(
                f,
                "mx-smi --count-ecc prints no DRAM Uncorrectable count for {unread} of {total} GPU(s), so their uncorrectable DRAM errors are not seen"
            ),
            EccNote::RetiredPages { index, bus, pages } => write!(
                f,
                "accelerator {index} ({}): {pages} page(s) retired for double-bit ECC errors (mx-smi --count-ecc); it stays in service: replace it if the count keeps growing",
                bus.sysfs()
            ),
            EccNote::SramUncorrectable { index, bus, errors } => write!(
                f,
                "accelerator {index} ({}): {errors} uncorrectable SRAM ECC error(s) (mx-smi --count-ecc); spec §6 takes a GPU out for DRAM errors only, so it stays in service: reset it or reboot if its workloads fail",
                bus.sysfs()
            ),
        }
    }
}

/// Runs one mx-smi query within the pass's budget and parses what it printed.
fn ask<T>(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[&str],
    parse: fn(&str) -> Result<T, MxSmiError>,
) -> Result<T, MxSmiFailure> {
    let deadline = budget
        .next()
        .map_err(|e| MxSmiFailure::NoAnswer(format!("{}: {e}", argv.join(" "))))?;
    let out =
        run_bounded(commands, argv, deadline).map_err(|e| MxSmiFailure::NoAnswer(e.to_string()))?;
    parse(&out.stdout_text()).map_err(MxSmiFailure::Unreadable)
}

/// Runs mx-smi's two identity queries within the pass's budget; after a failed table, `-L` is
/// not asked (the pass is not measured either way).
fn ask_mx_smi(commands: &dyn Commands, deadlines: Deadlines, sources: &mut Sources) {
    let budget = Budget::start(deadlines);
    let answered =
        ask(commands, &budget, mxsmi::TABLE_ARGV, mxsmi::parse_table).and_then(|table| {
            sources.table = Some(table);
            ask(commands, &budget, mxsmi::LIST_ARGV, mxsmi::parse_list)
        });
    match answered {
        Ok(listed) => {
            sources.listed = listed;
            sources.ecc = Some(ask_ecc(commands, &budget));
        }
        Err(failure) => sources.mx_smi_failure = Some(failure),
    }
}

/// Runs `mx-smi --count-ecc` within the pass's budget; a failure is its words, never the pass's.
fn ask_ecc(commands: &dyn Commands, budget: &Budget) -> Result<Vec<EccCounts>, String> {
    let argv = count_ecc::COUNT_ECC_ARGV;
    let deadline = budget
        .next()
        .map_err(|e| format!("{}: {e}", argv.join(" ")))?;
    let out = run_bounded(commands, argv, deadline).map_err(|e| e.to_string())?;
    count_ecc::parse_count_ecc(&out.stdout_text()).map_err(|e| e.to_string())
}

/// The `--count-ecc` block of the GPU at `bus`: by PCI address, else by the tool's ordinal
/// (`gpu`, the table row's) for a block that prints no bus id.
pub fn ecc_block(sources: &Sources, bus: BusId, gpu: Option<u32>) -> Option<&EccCounts> {
    let blocks = sources.ecc.as_ref()?.as_ref().ok()?;
    blocks.iter().find(|b| b.bus_id == Some(bus)).or_else(|| {
        let gpu = gpu?;
        blocks
            .iter()
            .find(|b| b.bus_id.is_none() && b.gpu == Some(gpu))
    })
}

/// The DRAM counts as the health rule reads them (spec §6: the uncorrectable one decides);
/// `None` when the block prints neither.
fn ecc_of(counts: &EccCounts) -> Option<Ecc> {
    (counts.dram_uncorrectable.is_some() || counts.dram_correctable.is_some()).then(|| Ecc {
        volatile_uncorrected: counts.dram_uncorrectable,
        volatile_corrected: counts.dram_correctable,
        ..Ecc::default()
    })
}

/// The table row's ordinal of the GPU at `bus`.
fn ordinal_at(sources: &Sources, bus: BusId) -> Option<u32> {
    let table = sources.table.as_ref()?;
    table.gpus.iter().find(|g| g.bus_id == Some(bus))?.gpu
}

/// What the ECC counts tell of `section`'s accelerators beyond the health rule.
pub fn ecc_notes(sources: &Sources, section: &ManufacturerInventory) -> Vec<EccNote> {
    let mut notes = Vec::new();
    match &sources.ecc {
        None => return notes,
        Some(Err(why)) => return vec![EccNote::Unread(why.clone())],
        Some(Ok(_)) => {}
    }
    let mut no_dram = 0;
    for a in &section.accelerators {
        let Some(bus) = a.bus_id else { continue };
        let index = a.index;
        let Some(block) = ecc_block(sources, bus, ordinal_at(sources, bus)) else {
            notes.push(EccNote::NoBlock { index, bus });
            continue;
        };
        if block.dram_uncorrectable.is_none() {
            no_dram += 1;
        }
        if let Some(pages) = block.retired_double_bit.filter(|n| *n > 0) {
            notes.push(EccNote::RetiredPages { index, bus, pages });
        }
        if let Some(errors) = block.sram_uncorrectable.filter(|n| *n > 0) {
            notes.push(EccNote::SramUncorrectable { index, bus, errors });
        }
    }
    if no_dram > 0 {
        notes.insert(
            0,
            EccNote::NoDramCount {
                unread: no_dram,
                total: section.accelerators.len(),
            },
        );
    }
    notes
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
                .map(|pci| {
                    let bdf = pci.bus_id.sysfs();
                    MetaxFunction {
                        virtual_function: host.exists(&format!("{PCI_DEVICES_DIR}/{bdf}/physfn")),
                        minors: drm::read_module_minors(host, MODULE, PCI_DRIVERS, &bdf),
                        pci,
                    }
                })
                .collect();
        }
        Err(e) => sources.notes.push(format!("PCI scan: {e}")),
    }
    sources.driver_version_file = host
        .read_to_string(DRIVER_VERSION_FILE)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    if sources
        .functions
        .iter()
        .any(|f| f.pci.driver.as_deref().is_some_and(is_metax_driver))
    {
        ask_mx_smi(commands, options.deadlines, &mut sources);
    }
    sources
}

/// One detection pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Detection {
    join(read_sources(host, commands, options))
}

/// Why mx-smi's answer cannot stand for the GPUs: its failure, or a query listing fewer GPUs
/// than the `shown` physical functions bound to `metax`.
pub fn unmeasured(sources: &Sources, shown: usize) -> Option<MxSmiFailure> {
    if let Some(failure) = &sources.mx_smi_failure {
        return Some(failure.clone());
    }
    let table = sources.table.as_ref()?;
    [
        (mxsmi::TABLE_ARGV, table.gpus.len()),
        (mxsmi::LIST_ARGV, sources.listed.len()),
    ]
    .into_iter()
    .find(|(_, listed)| *listed < shown)
    .map(|(argv, listed)| MxSmiFailure::TooFew {
        argv,
        listed,
        shown,
    })
}

/// The pure join: sources in, the section out, or not measured ([`unmeasured`]).
pub fn join(sources: Sources) -> Detection {
    let mut section = ManufacturerInventory::empty(Manufacturer::Metax);
    section.notes = sources.notes.clone();
    let mut kept: Vec<&MetaxFunction> = Vec::new();
    for f in &sources.functions {
        if !f.pci.driver.as_deref().is_some_and(is_metax_driver) {
            continue;
        }
        if f.virtual_function {
            section.notes.push(format!(
                "{}: skipping virtual function device",
                f.pci.bus_id.sysfs()
            ));
            continue;
        }
        kept.push(f);
    }
    if kept.is_empty() {
        let unbound = sources
            .functions
            .iter()
            .filter(|f| !f.pci.driver.as_deref().is_some_and(is_metax_driver))
            .count();
        if unbound > 0 {
            section.notes.push(format!(
                "metax: {unbound} MetaX function(s) on the bus but none bound to the metax driver: install the MetaX driver"
            ));
        }
        // Virtual functions alone: nothing to list, whatever mx-smi said.
        section
            .notes
            .extend(sources.mx_smi_failure.iter().map(ToString::to_string));
        return Ok(section);
    }
    if let Some(failure) = unmeasured(&sources, kept.len()) {
        return Err(DetectError::NotMeasured {
            manufacturer: Manufacturer::Metax,
            reason: failure.to_string(),
        });
    }
    let table = sources.table.as_ref();
    section.driver_version = sources
        .driver_version_file
        .clone()
        .or_else(|| table.and_then(|t| t.driver_version.clone()));
    section.runtime_version = table
        .and_then(|t| t.maca_version.as_deref())
        .and_then(mxsmi::major_minor);
    section.management_version = table.and_then(|t| t.tool_version.clone());
    for (position, f) in kept.iter().enumerate() {
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        let bus = f.pci.bus_id;
        let row = table.and_then(|t| t.gpus.iter().find(|g| g.bus_id == Some(bus)));
        let listed = sources
            .listed
            .iter()
            .find(|l| l.bus_id == Some(bus))
            .or_else(|| {
                let gpu = row.and_then(|r| r.gpu)?;
                sources
                    .listed
                    .iter()
                    .find(|l| l.bus_id.is_none() && l.gpu == Some(gpu))
            });
        let mut a = Accelerator::new(index, Source::Driver);
        a.bus_id = Some(bus);
        a.numa_node = f.pci.numa_node;
        a.product = row.and_then(|r| r.name.as_deref()).map(mxsmi::model_name);
        a.memory_mib = row.and_then(|r| r.memory_total_mib);
        a.uuid = listed.map(|l| l.uuid.clone());
        a.architecture = a
            .product
            .as_deref()
            .and_then(mxsmi::family)
            .map(str::to_string);
        let (card, render) = f.minors.unwrap_or((None, None));
        a.drm = Some(DrmNodes { card, render });
        a.minor_number = card;
        let bdf = bus.sysfs();
        if f.minors.is_none() {
            section.notes.push(format!(
                "accelerator {index} ({bdf}): {} cannot be read, so its DRM nodes are unknown",
                drm::module_drm_dir(MODULE, PCI_DRIVERS[0], &bdf)
            ));
        }
        if row.is_none() && table.is_some() {
            section.notes.push(format!(
                "accelerator {index} ({bdf}): mx-smi lists no GPU at this PCI address"
            ));
        }
        if a.uuid.is_none() {
            section.notes.push(format!(
                "accelerator {index} ({bdf}): mx-smi -L reports no UUID, so it cannot be granted"
            ));
        }
        a.ecc = ecc_block(&sources, bus, row.and_then(|r| r.gpu)).and_then(ecc_of);
        accel_core::health::assess(&mut a, &[]);
        section.accelerators.push(a);
    }
    let notes = ecc_notes(&sources, &section);
    section.notes.extend(notes.iter().map(ToString::to_string));
    Ok(section)
}
