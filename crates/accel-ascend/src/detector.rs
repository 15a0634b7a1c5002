//! The Ascend detector: the kernel's view first (PCI functions of the configured vendor ids,
//! `/dev/davinci<N>`, the control nodes, the driver's and CANN's version files), then
//! `npu-smi` (`info`, `info -m`, and per chip `-t board` for the die id, `-t phyid-remap` for
//! the physical id where the table does not print it, per NPU `-t common` for the AI cores,
//! `-t ecc` with `-t ecc-enable` per NPU, or per chip where an NPU has several, `-t health`
//! per chip, and `-t topo` once where two NPUs or more have one chip each), every call bounded
//! by the pass's [`Budget`] — then one pure join ([`join`]).
//!
//! **Links.** `-t topo`'s matrix ([`crate::topo`]) fills each one-chip NPU's `peers` with
//! npu-smi's words (`HCCS`, `SYS`, `PIX`, …) by accelerator index, which the multi-NPU
//! preference weighs as it weighs NVLink. A several-chip NPU (310P, an A3's two dies) gets none:
//! which chip a matrix row means, no capture shows. A query that hangs or prints no matrix is a
//! note ([`Note::Links`]); a tool that refuses it (an exit status, not found) offers none, and
//! says nothing.
//!
//! **Health**, two sources. ECC (spec/ascend.md §7): a chip is judged by its HBM counters, or
//! its DDR ones where it has no HBM (310-class cards); it is unhealthy when ECC is enabled and
//! it counts single- or double-bit errors. A failed ECC read counts as healthy (the pass notes
//! which chips were not read). The health state (`-t health`, addendum A5, read by
//! [`crate::health`]): `Alarm` and `Critical` take the chip out of service, the reason naming
//! the state, its codes and texts and what to do; `Warning` is a note only; a query that fails or
//! a state that says nothing (`UNKNOWN`, `NA`) leaves the chip's health state unknown — never a
//! healthy reading, so the daemon keeps the last one (`reported_faults` stays `None`).
//!
//! **What an accelerator is.** One compute chip (a die on A3): what `/dev/davinci<N>` and the
//! runtime number. It carries `[physical id, card id, chip index]` (spec/ascend.md §1.3) as its
//! `physicalIndexes`; its identity is the die id, never the PCI address, and a chip whose die
//! id cannot be read is dropped with a note (seed 000).
//!
//! **Generation.** The 950 family's driver serves the V2 API: `npu-smi` prints its own table
//! layout (an `NPU ID` column, no chip column) and the chip name folds to `Ascend950`. On V2
//! the driver version, the container-share flag and the detailed memory are not declared; the
//! pass says which generation answered ([`Note::Generation`]). A V2 tool takes no `-c`
//! (addendum A1): its NPUs are asked `-i <NPU ID>` alone.
//!
//! **Super-pods and the 950's product form.** A3 (910C-class) and 950 NPUs are asked
//! `-t spod-info` (addendum A4); what it prints becomes the accelerator's `superPod` (SDID, size,
//! id, server index or chassis id, type; `4294967295`, the "not a member" value, is no value). A
//! 950's product form ([`crate::product`], spec §4.4: the `HCCL_TOPO_FILE_PATH` the responder
//! sets) is read from its board's `Main Board ID` and PCI device id and its super-pod type; a
//! form that does not resolve leaves `productType` absent and a note says why.
//!
//! **The identity query** is `npu-smi info` (it enumerates the chips) together with each chip's
//! `-t board` (its die id): the kernel numbers NPUs but names none. So while the kernel shows
//! NPUs, either one missing, hanging past its deadline, exiting non-zero or printing what cannot
//! be read — or a table listing fewer chips than there are `/dev/davinci<N>` nodes — is a pass
//! not measured ([`Unmeasured`]): the last good inventory and its grants stand, never "zero
//! NPUs" and never a chip dropped because its board query failed. A board that answers without
//! a die id drops that chip with a note. The other queries (`-m`, `phyid-remap`, `common`,
//! `ecc`) give no identity; their failures are notes.
//!
//! Answers: nothing of Ascend's on the bus, no `/dev/davinci*` and no `npu-smi` → `Ok(empty)`;
//! the kernel shows NPUs but the identity query fails or the driver will not initialise
//! (`dcmi … ret is -8020`) → `Err`; chips found → `Ok(list)`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::{Budget, OutOfTime};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::health;
use accel_core::inventory::{
    Accelerator, DetectError, Detection, Ecc, ManufacturerInventory, Source, SuperPod,
};
use accel_host::pci::{PciClassPrefixes, PciFunction};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::health::{self as state, ChipHealth, ChipName, Verdict};
use crate::kernel;
use crate::npusmi::{
    self, Board, ChipMap, EccMemory, InfoChip, InfoError, InfoTable, Layout, SpodFacts, SpodInfo,
};
use crate::product::{self, Readings};
use crate::soc::{self, Family};
use crate::topo;

/// Which DCMI generation the host's driver serves (seed 000, "Ascend: two DCMI API
/// generations").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Card/chip addressing; every driver up to 910B/310P/A3.
    V1,
    /// Flat device ids; the A5/950 generation.
    V2,
}

/// Every note the detector words, worded once (doctor and tests use the same `Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    Generation(Generation),
    /// `npu-smi` failed or is missing while the kernel shows NPUs.
    Tool(String),
    /// A chip dropped because its die id could not be read.
    NoIdentity {
        npu: u32,
        chip: u32,
        why: String,
    },
    /// A chip whose physical id no source gave.
    NoPhysicalId {
        npu: u32,
        chip: u32,
    },
    /// The physical ids were taken from the logic ids (the davinci nodes match them one for one).
    PhysicalFromLogic,
    /// `-t common` did not say the AI cores.
    NoCores {
        npu: u32,
        why: String,
    },
    /// The chip map was not read.
    Mapping(String),
    /// The ECC counters of some chips were not read (the rule counts them healthy).
    EccUnread {
        chips: usize,
        first: String,
    },
    /// ECC errors were counted on a chip whose ECC-enable flag did not read.
    EccFlagUnread {
        npu: u32,
        chip: u32,
    },
    /// `-t health` reports `Warning` (a minor alarm): the chip stays in service.
    HealthWarning {
        chip: ChipName,
        detail: String,
    },
    /// The health state of some chips was not read (the query failed, or it said nothing).
    /// Named by chip only: why is `doctor`'s `health-state` row (the failure's wording is the
    /// tool's, and a note must read alike however the tool failed).
    HealthUnread {
        chips: usize,
        first: ChipName,
    },
    /// The pass ran out of its time.
    OutOfTime(String),
    /// `-t spod-info` gave no super-pod facts for some A3 or 950 chips. Named by chip only,
    /// as [`Note::HealthUnread`] is (the failure's wording is the tool's).
    SuperPodUnread {
        chips: usize,
        first: ChipName,
    },
    /// An A3 chip's SDID names another server than its `Server Index`.
    SdidDisagrees {
        chip: ChipName,
        sdid: u32,
        server_index: u32,
    },
    /// `npu-smi info -t topo` failed or printed no matrix: the NPUs' links are unknown.
    Links(String),
    /// 950 NPUs whose product form did not resolve: no topology file for their grants.
    NoTopology {
        npus: usize,
        first: ChipName,
        why: String,
    },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Generation(Generation::V1) => f.write_str(
                "npu-smi: driver generation V1 (card/chip addressing; driver version, container-share flag and detailed memory declared)",
            ),
            Note::Generation(Generation::V2) => f.write_str(
                "npu-smi: driver generation V2 (the 950 layout: no driver version, PCIe distance, RoCE facts, detailed memory or container-share flag)",
            ),
            Note::Tool(why) => write!(f, "npu-smi: {why}"),
            Note::NoIdentity { npu, chip, why } => write!(
                f,
                "NPU {npu} chip {chip}: dropped, its die id could not be read ({why}); an NPU is never identified by its PCI address"
            ),
            Note::NoPhysicalId { npu, chip } => write!(
                f,
                "NPU {npu} chip {chip}: dropped, no physical id (neither the table nor `npu-smi info -t phyid-remap` gave one), so no grant could name it"
            ),
            Note::PhysicalFromLogic => f.write_str(
                "npu-smi: physical ids taken from the logic ids (no Phy-ID column, no phyid-remap answer; the /dev/davinci<N> nodes match the logic ids one for one)",
            ),
            Note::NoCores { npu, why } => {
                write!(f, "NPU {npu}: AI cores unknown ({why})")
            }
            Note::Mapping(why) => write!(f, "npu-smi info -m: {why}"),
            Note::EccUnread { chips, first } => write!(
                f,
                "npu-smi info -t ecc: not read for {chips} chip(s) ({first}); a failed ECC read counts as healthy"
            ),
            Note::EccFlagUnread { npu, chip } => write!(
                f,
                "NPU {npu} chip {chip}: ECC errors counted but `npu-smi info -t ecc-enable` did not say ECC is enabled, so the rule (errors while enabled) leaves it in service"
            ),
            Note::HealthWarning { chip, detail } => write!(
                f,
                "{chip}: npu-smi reports Health Warning ({detail}): a minor alarm, the chip stays in service; check it with `npu-smi info -t health`"
            ),
            Note::HealthUnread { chips, first } => write!(
                f,
                "npu-smi info -t health: no health state read for {chips} chip(s) (first {first}); their health state is unknown, so each keeps its last reading (`doctor` says why)"
            ),
            Note::OutOfTime(why) => write!(f, "npu-smi: {why}"),
            Note::SuperPodUnread { chips, first } => write!(
                f,
                "npu-smi info -t spod-info: no super-pod facts read for {chips} chip(s) (first {first}); their super-pod membership is unknown"
            ),
            Note::SdidDisagrees {
                chip,
                sdid,
                server_index,
            } => write!(
                f,
                "{chip}: its SDID {sdid} names server {} but its Server Index is {server_index}: both are kept as printed",
                npusmi::sdid_parts(*sdid).server
            ),
            Note::Links(why) => write!(
                f,
                "{why}: the NPUs' HCCS links are unknown, so a request for several NPUs is placed by NUMA node alone"
            ),
            Note::NoTopology { npus, first, why } => write!(
                f,
                "{}: no HCCL topology file for {npus} 950 NPU(s) (first {first}), so their grants carry no HCCL_TOPO_FILE_PATH: {why}",
                product::TOPO_ENV
            ),
        }
    }
}

/// Why a pass is not measured while the kernel shows NPUs, worded once (the reason of
/// [`DetectError::NotMeasured`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmeasured {
    /// `npu-smi` is not installed.
    NotInstalled { functions: usize, nodes: usize },
    /// The identity query failed: its `RunFailure` or parse error, which names the argv.
    Query(String),
    /// `npu-smi info` lists fewer chips than the kernel's `/dev/davinci<N>` nodes.
    FewerChips { listed: usize, nodes: usize },
}

impl fmt::Display for Unmeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmeasured::NotInstalled { functions, nodes } => write!(
                f,
                "npu-smi is not installed, and the kernel shows {functions} Ascend PCI function(s) and {nodes} /dev/davinci node(s)"
            ),
            Unmeasured::Query(why) => f.write_str(why),
            Unmeasured::FewerChips { listed, nodes } => write!(
                f,
                "npu-smi info: lists {listed} chip(s), but the kernel shows {nodes} /dev/davinci node(s)"
            ),
        }
    }
}

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// The PCI vendor ids that are Ascend's (`GPUSTACK_ASCEND_PCI_VENDOR_ID`).
    pub vendor_ids: Vec<u16>,
    /// The PCI classes scanned (`GPUSTACK_PCI_CLASS_PREFIXES`).
    pub pci_classes: PciClassPrefixes,
    /// Where the driver and the CANN toolkit are installed (`CANN_HOME`,
    /// `ASCEND_TOOLKIT_HOME`; unset: the fixed paths).
    pub roots: kernel::InstallRoots,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: vec![0x19e5],
            pci_classes: PciClassPrefixes::default(),
            roots: kernel::InstallRoots::default(),
        }
    }
}

/// What one chip's per-chip queries said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChipAnswers {
    /// `-t board`, or why it gave nothing (its `RunFailure`, parse error or the pass's time
    /// running out, naming the query).
    pub board: Result<Board, String>,
    /// `-t phyid-remap`'s physical id, when it answered one.
    pub phy_id: Option<u32>,
}

/// Everything one pass read, before the join.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub pci: Vec<PciFunction>,
    pub davinci: BTreeSet<u32>,
    pub driver_version: Option<String>,
    pub cann_version: Option<String>,
    /// `npu-smi info`; `None` when not installed.
    pub info: Option<Result<InfoTable, String>>,
    /// The init failure, when that is what `npu-smi info` printed.
    pub init_failed: Option<String>,
    pub mapping: Option<Vec<ChipMap>>,
    /// Per (NPU, chip).
    pub chips: BTreeMap<(u32, u32), ChipAnswers>,
    /// AI cores per (NPU, chip), from `-t common`.
    pub cores: BTreeMap<(u32, u32), u32>,
    /// `-t ecc` and `-t ecc-enable` per (NPU, chip).
    pub ecc: BTreeMap<(u32, u32), EccTexts>,
    /// `-t health` per (NPU, chip): what it printed, or why it printed nothing.
    pub health: BTreeMap<(u32, u32), Result<String, String>>,
    /// `-t spod-info` per (NPU, chip) of A3 and 950 chips: what it printed (a refusal that
    /// exits non-zero included), or why it printed nothing.
    pub spod: BTreeMap<(u32, u32), Result<String, String>>,
    /// `npu-smi info -t topo`, asked where two NPUs or more have one chip each: what it printed,
    /// or why it printed nothing (`None`: not asked, or the tool has no such query).
    pub topology: Option<Result<String, String>>,
    pub notes: Vec<Note>,
}

/// What one chip's ECC queries printed, or why they printed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EccTexts {
    pub counts: Result<String, String>,
    pub enable: Result<String, String>,
}

impl Default for ChipAnswers {
    fn default() -> Self {
        ChipAnswers {
            board: Err("npu-smi info -t board: not asked".into()),
            phy_id: None,
        }
    }
}

/// The init-failure line a failed `npu-smi info` printed, on either stream.
fn init_failure_in(failure: &RunFailure) -> Option<String> {
    let output = failure.output()?;
    let text = format!(
        "{}\n{}",
        output.stdout_text(),
        String::from_utf8_lossy(&output.stderr)
    );
    match npusmi::parse_info(&text) {
        Err(InfoError::DriverNotInitialised { line }) => Some(line),
        _ => None,
    }
}

/// One bounded call, or [`OutOfTime`] (noted once) when the pass's time is spent.
fn ask_raw(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[String],
    notes: &mut Vec<Note>,
) -> Result<Result<String, RunFailure>, OutOfTime> {
    let deadline = budget.next().inspect_err(|e| {
        if !notes.iter().any(|n| matches!(n, Note::OutOfTime(_))) {
            notes.push(Note::OutOfTime(e.to_string()));
        }
    })?;
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Ok(run_bounded(commands, &argv, deadline).map(|o| o.stdout_text()))
}

fn ask(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[String],
    notes: &mut Vec<Note>,
) -> Option<Result<String, String>> {
    ask_raw(commands, budget, argv, notes)
        .ok()
        .map(|r| r.map_err(|e| e.to_string()))
}

/// A chip's board (the identity query's second half), or why it gave none, naming the query.
/// `chip` is `None` on V2, whose tool takes no `-c`.
fn ask_board(
    commands: &dyn Commands,
    budget: &Budget,
    npu: u32,
    chip: Option<u32>,
    notes: &mut Vec<Note>,
) -> Result<Board, String> {
    let argv = npusmi::device_query_argv("board", npu, chip);
    match ask_raw(commands, budget, &argv, notes) {
        Ok(Ok(text)) => npusmi::parse_board(&text).map_err(|e| e.to_string()),
        Ok(Err(failure)) => Err(failure.to_string()),
        Err(out_of_time) => Err(format!("{}: {out_of_time}", argv.join(" "))),
    }
}

/// A chip's `-t spod-info` answer: what it printed — also when it exits non-zero with the 950
/// card's refusal — or why it printed nothing, naming the query.
fn ask_spod(
    commands: &dyn Commands,
    budget: &Budget,
    npu: u32,
    chip: Option<u32>,
    notes: &mut Vec<Note>,
) -> Result<String, String> {
    let argv = npusmi::spod_argv(npu, chip);
    match ask_raw(commands, budget, &argv, notes) {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(failure)) => {
            let refused = failure.output().map(|o| {
                format!(
                    "{}\n{}",
                    o.stdout_text(),
                    String::from_utf8_lossy(&o.stderr)
                )
            });
            match refused {
                Some(text)
                    if text
                        .to_ascii_lowercase()
                        .contains(npusmi::SPOD_NOT_SUPPORTED) =>
                {
                    Ok(text)
                }
                _ => Err(failure.to_string()),
            }
        }
        Err(out_of_time) => Err(format!("{}: {out_of_time}", argv.join(" "))),
    }
}

/// The NPU-to-NPU matrix (`-t topo`), or why it gave none. `None` when the pass's time is spent
/// (noted once already) or the tool refuses the query — it exits with a status, or is not found
/// when run (a tool that answered `npu-smi info` moments ago is there: only an install or a
/// recording without this query answers so): an answer that this host offers no matrix, so
/// placement goes by NUMA node as it does for a several-chip NPU. A hang, a signal or output
/// that is no matrix is a failure, and a note.
fn ask_topology(
    commands: &dyn Commands,
    budget: &Budget,
    notes: &mut Vec<Note>,
) -> Option<Result<String, String>> {
    match ask_raw(commands, budget, &owned(topo::TOPO_ARGV), notes).ok()? {
        Ok(text) => Some(Ok(text)),
        Err(
            RunFailure::NotInstalled { .. }
            | RunFailure::Exited {
                status: Some(_), ..
            },
        ) => None,
        Err(failure) => Some(Err(failure.to_string())),
    }
}

/// The NPUs of exactly one chip, each with that chip: the ones `-t topo`'s `NPU<n>` names
/// without doubt (which chip of a several-chip NPU a row means, no capture shows).
fn one_chip_npus(keys: &[(u32, u32)]) -> BTreeMap<u32, u32> {
    let mut chips: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (npu, chip) in keys {
        chips.entry(*npu).or_default().push(*chip);
    }
    chips
        .into_iter()
        .filter_map(|(npu, chips)| match chips[..] {
            [chip] => Some((npu, chip)),
            _ => None,
        })
        .collect()
}

/// Puts the matrix's words in each one-chip NPU's `peers` (by accelerator index), or says why
/// there is none.
fn link_npus(
    topology: Option<Result<String, String>>,
    by_npu: &BTreeMap<u32, u32>,
    accelerators: &mut [Accelerator],
    notes: &mut Vec<Note>,
) {
    let matrix =
        match topology.map(|t| t.and_then(|t| topo::parse_topo(&t).map_err(|e| e.to_string()))) {
            None => return,
            Some(Ok(matrix)) => matrix,
            Some(Err(why)) => {
                notes.push(Note::Links(why));
                return;
            }
        };
    for (from, row) in &matrix.links {
        let Some(a) = by_npu
            .get(from)
            .and_then(|i| accelerators.get_mut(*i as usize))
        else {
            continue;
        };
        for (to, word) in row {
            if let Some(peer) = by_npu.get(to) {
                a.peers.insert(*peer, word.clone());
            }
        }
    }
}

/// Whether a chip of this name belongs to a generation that answers `-t spod-info` (addendum
/// A4: 910_93 and the 950).
fn has_super_pod(name: Option<&str>) -> bool {
    name.and_then(soc::family)
        .is_some_and(|f| matches!(f, Family::F910C | Family::F950))
}

fn owned(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|s| s.to_string()).collect()
}

/// The (NPU, chip) keys of a table's chips.
fn chip_keys(table: &InfoTable) -> Vec<(u32, u32)> {
    table
        .chips
        .iter()
        .filter_map(|c| Some((c.npu?, c.chip.unwrap_or(0))))
        .collect()
}

/// Reads every source (the kernel's, then `npu-smi`'s).
pub fn read_sources(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Sources {
    let mut s = Sources {
        pci: accel_host::pci::scan_pci(host, &options.pci_classes)
            .map(|scan| {
                scan.functions
                    .into_iter()
                    .filter(|f| options.vendor_ids.contains(&f.vendor_id))
                    .collect()
            })
            .unwrap_or_default(),
        davinci: kernel::read_davinci(host),
        driver_version: kernel::read_driver_version_in(host, &options.roots),
        cann_version: kernel::read_cann_version_in(host, &options.roots),
        ..Sources::default()
    };
    if !commands.is_installed("npu-smi") {
        return s;
    }
    let budget = Budget::start(options.deadlines);
    let info = match ask_raw(commands, &budget, &owned(npusmi::INFO_ARGV), &mut s.notes) {
        Ok(info) => info,
        Err(out_of_time) => {
            s.info = Some(Err(format!("npu-smi info: {out_of_time}")));
            return s;
        }
    };
    let table = match info {
        Ok(text) => match npusmi::parse_info(&text) {
            Ok(t) => t,
            Err(InfoError::DriverNotInitialised { line }) => {
                s.init_failed = Some(line);
                return s;
            }
            Err(e) => {
                s.info = Some(Err(e.to_string()));
                return s;
            }
        },
        // Not found when run (or the image wrapper's exit 127): not installed, worded once.
        Err(RunFailure::NotInstalled { .. }) => return s,
        Err(e) => {
            // A failing tool prints the init failure too, with a status other than 0.
            match init_failure_in(&e) {
                Some(line) => s.init_failed = Some(line),
                None => s.info = Some(Err(e.to_string())),
            }
            return s;
        }
    };
    let keys = chip_keys(&table);
    let pods: BTreeSet<(u32, u32)> = table
        .chips
        .iter()
        .filter(|c| has_super_pod(c.name.as_deref()))
        .filter_map(|c| Some((c.npu?, c.chip.unwrap_or(0))))
        .collect();
    let v2 = table.layout == Layout::NpuId;
    // Spec addendum A1: V1 addresses a chip by `-c`, V2 has no `-c`.
    let chip_addressed = generation(&table) == Generation::V1;
    s.info = Some(Ok(table.clone()));
    // The 950's tool may have no chip map: its absence is no news there.
    match ask(
        commands,
        &budget,
        &owned(npusmi::MAPPING_ARGV),
        &mut s.notes,
    ) {
        Some(Ok(text)) => match npusmi::parse_mapping(&text) {
            Ok(map) => s.mapping = Some(map),
            Err(e) => s.notes.push(Note::Mapping(e.to_string())),
        },
        Some(Err(e)) if !v2 => s.notes.push(Note::Mapping(e)),
        _ => {}
    }
    let needs_phy = table.layout == Layout::Chip || table.layout == Layout::NpuId;
    let mapped: BTreeSet<(u32, u32)> = s
        .mapping
        .iter()
        .flatten()
        .filter(|m| m.physical_id.is_some())
        .map(|m| (m.npu, m.chip))
        .collect();
    for (npu, chip) in &keys {
        let by_chip = chip_addressed.then_some(*chip);
        let mut answers = ChipAnswers {
            board: ask_board(commands, &budget, *npu, by_chip, &mut s.notes),
            ..ChipAnswers::default()
        };
        if answers.board.is_err() {
            // The identity query failed: the pass is not measured (`join`), so nothing more
            // is asked of a tool that may be hanging.
            s.chips.insert((*npu, *chip), answers);
            return s;
        }
        // The 950's chip map prints the physical id itself (addendum A1).
        if needs_phy
            && !mapped.contains(&(*npu, *chip))
            && let Some(Ok(text)) = ask(
                commands,
                &budget,
                &npusmi::device_query_argv("phyid-remap", *npu, by_chip),
                &mut s.notes,
            )
        {
            answers.phy_id = npusmi::parse_phy_id(&text);
        }
        s.chips.insert((*npu, *chip), answers);
        if pods.contains(&(*npu, *chip)) {
            let spod = ask_spod(commands, &budget, *npu, by_chip, &mut s.notes);
            s.spod.insert((*npu, *chip), spod);
        }
    }
    let npus: BTreeSet<u32> = keys.iter().map(|(n, _)| *n).collect();
    if one_chip_npus(&keys).len() > 1 {
        s.topology = ask_topology(commands, &budget, &mut s.notes);
    }
    for npu in npus {
        match ask(commands, &budget, &npusmi::common_argv(npu), &mut s.notes) {
            Some(Ok(text)) => {
                for (n, chip) in keys.iter().filter(|(n, _)| *n == npu) {
                    if let Some(cores) = npusmi::parse_aicores(&text, *chip) {
                        s.cores.insert((*n, *chip), cores);
                    }
                }
            }
            Some(Err(why)) => s.notes.push(Note::NoCores { npu, why }),
            None => {}
        }
        let chips: Vec<u32> = keys
            .iter()
            .filter(|(n, _)| *n == npu)
            .map(|(_, c)| *c)
            .collect();
        for chip in &chips {
            // A one-chip NPU is asked once; a several-chip NPU chip by chip.
            let addressed = (chips.len() > 1).then_some(*chip);
            let asked = |argv: Vec<String>, notes: &mut Vec<Note>| {
                ask(commands, &budget, &argv, notes).unwrap_or_else(|| Err("out of time".into()))
            };
            let counts = asked(npusmi::ecc_argv(npu, addressed), &mut s.notes);
            let enable = asked(npusmi::ecc_enable_argv(npu, addressed), &mut s.notes);
            s.ecc.insert((npu, *chip), EccTexts { counts, enable });
            let health = asked(
                npusmi::health_argv(npu, chip_addressed.then_some(*chip)),
                &mut s.notes,
            );
            s.health.insert((npu, *chip), health);
        }
    }
    s
}

/// One detection pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: DetectOptions) -> Detection {
    let sources = read_sources(host, commands, &options);
    join(sources)
}

/// The generation the table's layout and chip names say.
pub fn generation(table: &InfoTable) -> Generation {
    let named_950 = table
        .chips
        .iter()
        .filter_map(|c| c.name.as_deref())
        .any(|n| soc::family(n) == Some(Family::F950));
    if table.layout == Layout::NpuId || named_950 {
        Generation::V2
    } else {
        Generation::V1
    }
}

fn not_measured(why: Unmeasured) -> Detection {
    Err(DetectError::NotMeasured {
        manufacturer: Manufacturer::Ascend,
        reason: why.to_string(),
    })
}

/// Whether the kernel shows Ascend NPUs at all.
fn kernel_shows(s: &Sources) -> bool {
    !s.pci.is_empty() || !s.davinci.is_empty()
}

/// The chip's name: the table's, else the board's, else the chip map's (redactions are none).
fn chip_name(chip: &InfoChip, board: Option<&Board>, map: Option<&ChipMap>) -> Option<String> {
    chip.name
        .clone()
        .or_else(|| board.and_then(|b| b.chip_name.clone()))
        .or_else(|| map.and_then(|m| m.name.clone()))
        .map(|n| {
            // The chip map spells `Ascend 910A`; the table `910A`: one product name.
            n.strip_prefix("Ascend ").map(str::to_string).unwrap_or(n)
        })
}

/// A chip's ECC facts from its two queries (HBM where it has HBM, else DDR), judged by
/// Ascend's rule ([`Ecc::corrected_is_fault`]); `Err` when the counters did not read.
fn ecc_of(texts: &EccTexts, hbm: bool) -> Result<Ecc, String> {
    let memory = if hbm { EccMemory::Hbm } else { EccMemory::Ddr };
    let counts = npusmi::parse_ecc(texts.counts.as_ref().map_err(Clone::clone)?, memory);
    if counts.single_bit.is_none() && counts.double_bit.is_none() {
        return Err(format!(
            "no {} error counts in its output",
            if hbm { "HBM" } else { "DDR" }
        ));
    }
    Ok(Ecc {
        enabled: texts
            .enable
            .as_ref()
            .ok()
            .and_then(|t| npusmi::parse_ecc_enable(t, memory)),
        volatile_corrected: counts.single_bit,
        volatile_uncorrected: counts.double_bit,
        corrected_is_fault: true,
        ..Ecc::default()
    })
}

/// The health state `-t health` printed for a chip, or why there is none (the query's failure,
/// naming its argv, or the reader's).
pub fn health_reading(s: &Sources, npu: u32, chip: u32) -> Result<ChipHealth, String> {
    match s.health.get(&(npu, chip)) {
        Some(Ok(text)) => state::parse_health(text).map_err(|e| e.to_string()),
        Some(Err(why)) => Err(why.clone()),
        None => Err("npu-smi info -t health: not asked".into()),
    }
}

/// What the chip's health state gives the health rule (`reported_faults`: `Some` when read,
/// holding the reason when it takes the chip out), and its note; `Err` when there is no state to
/// judge by (the rule then has nothing from this source, and the last reading stands).
fn health_state_of(
    s: &Sources,
    who: ChipName,
    notes: &mut Vec<Note>,
) -> Result<Vec<String>, String> {
    let reading = health_reading(s, who.npu, who.chip)?;
    match reading.verdict() {
        Verdict::InService => Ok(Vec::new()),
        Verdict::Warns => {
            notes.push(Note::HealthWarning {
                chip: who,
                detail: reading.detail(),
            });
            Ok(Vec::new())
        }
        Verdict::OutOfService => Ok(vec![state::reason(who, &reading)]),
        Verdict::Unknown => Err(format!(
            "{who}: npu-smi reports Health {}",
            reading.printed()
        )),
    }
}

/// A chip's `-t spod-info` reading; `None` when it was not asked (no A3 or 950 chip).
fn spod_reading(s: &Sources, key: (u32, u32)) -> Option<Result<SpodInfo, String>> {
    s.spod.get(&key).map(|asked| match asked {
        Ok(text) => npusmi::parse_spod_info(text).map_err(|e| e.to_string()),
        Err(why) => Err(why.clone()),
    })
}

/// The super-pod record of what `-t spod-info` printed: `4294967295` (the driver's "not a
/// member", spec §4.4) is no value, and a record with no value is none.
fn super_pod_of(facts: &SpodFacts) -> Option<SuperPod> {
    let value = |v: Option<u32>| v.filter(|v| *v != u32::MAX);
    let pod = SuperPod {
        sdid: value(facts.sdid),
        size: value(facts.size),
        id: value(facts.id),
        server_index: value(facts.server_index),
        chassis_id: value(facts.chassis_id),
        pod_type: value(facts.pod_type),
    };
    (pod != SuperPod::default()).then_some(pod)
}

/// What one chip's super-pod and product-form readings left to tell.
#[derive(Default)]
struct FabricNotes {
    /// Chips whose `-t spod-info` gave nothing.
    spod_unread: Vec<ChipName>,
    /// 950 NPUs whose form did not resolve, by the reason.
    unresolved: BTreeMap<String, Vec<ChipName>>,
}

impl FabricNotes {
    fn into_notes(self) -> Vec<Note> {
        let mut notes = Vec::new();
        if let Some(first) = self.spod_unread.first() {
            notes.push(Note::SuperPodUnread {
                chips: self.spod_unread.len(),
                first: *first,
            });
        }
        for (why, chips) in self.unresolved {
            if let Some(first) = chips.first() {
                notes.push(Note::NoTopology {
                    npus: chips.len(),
                    first: *first,
                    why,
                });
            }
        }
        notes
    }
}

/// A chip's super-pod record and, on the 950, its product form (spec §4.4, addendum A2–A4).
fn fabric(
    s: &Sources,
    a: &mut Accelerator,
    who: ChipName,
    board: &Board,
    fabric_notes: &mut FabricNotes,
    notes: &mut Vec<Note>,
) {
    let spod = spod_reading(s, (who.npu, who.chip));
    match &spod {
        Some(Ok(SpodInfo::Read(facts))) => {
            a.super_pod = super_pod_of(facts);
            // Compared as read into the record: "not a member" on either side is no reading.
            let read = a.super_pod.unwrap_or_default();
            if let (Some(sdid), Some(server_index)) = (read.sdid, read.server_index)
                && npusmi::sdid_parts(sdid).server != server_index
            {
                notes.push(Note::SdidDisagrees {
                    chip: who,
                    sdid,
                    server_index,
                });
            }
        }
        Some(Err(_)) => fabric_notes.spod_unread.push(who),
        Some(Ok(SpodInfo::NotSupported)) | None => {}
    }
    if a.architecture.as_deref() != Some(Family::F950.name()) {
        return;
    }
    // The board's PCI device id, else the kernel's for the chip's function (HAZARDS item 22).
    let kernel_device = a
        .bus_id
        .and_then(|b| s.pci.iter().find(|f| f.bus_id == b))
        .map(|f| u32::from(f.device_id));
    let readings = Readings {
        pci_device_id: board.pci_device_id.or(kernel_device),
        main_board: board.main_board_id,
        main_board_npus: board.main_board_npus,
        spod,
    };
    match product::resolve(&readings) {
        Ok(form) => a.product_type = Some(form.name().to_string()),
        Err(why) => fabric_notes
            .unresolved
            .entry(why.to_string())
            .or_default()
            .push(who),
    }
}

/// The pure join: sources in, the inventory section out.
pub fn join(mut s: Sources) -> Detection {
    let m = Manufacturer::Ascend;
    if let Some(line) = s.init_failed.take() {
        let failure = InfoError::DriverNotInitialised { line };
        return not_measured(Unmeasured::Query(failure.to_string()));
    }
    let table = match s.info.take() {
        None if kernel_shows(&s) => {
            return not_measured(Unmeasured::NotInstalled {
                functions: s.pci.len(),
                nodes: s.davinci.len(),
            });
        }
        None => return Ok(ManufacturerInventory::empty(m)),
        Some(Err(e)) if kernel_shows(&s) => return not_measured(Unmeasured::Query(e)),
        Some(Err(e)) => {
            let mut section = ManufacturerInventory::empty(m);
            section.notes.push(Note::Tool(e).to_string());
            return Ok(section);
        }
        Some(Ok(t)) => t,
    };
    let listed = chip_keys(&table).len();
    if listed < s.davinci.len() {
        return not_measured(Unmeasured::FewerChips {
            listed,
            nodes: s.davinci.len(),
        });
    }
    let generation = generation(&table);
    let mut notes = vec![Note::Generation(generation)];
    notes.append(&mut s.notes);
    let maps: BTreeMap<(u32, u32), &ChipMap> = s
        .mapping
        .iter()
        .flatten()
        .map(|c| ((c.npu, c.chip), c))
        .collect();
    let logic_of = |npu: u32, chip: u32| -> Option<u32> {
        maps.get(&(npu, chip)).map(|c| c.logic_id).or(
            // V2: every device is a card of one device, card id = logic id (spec §1.2).
            (generation == Generation::V2).then_some(npu),
        )
    };
    // Physical ids from the logic ids only where the davinci nodes are exactly the logic ids.
    let logic_ids: BTreeSet<u32> = chip_keys(&table)
        .iter()
        .filter_map(|(n, c)| logic_of(*n, *c))
        .collect();
    let logic_is_physical = !s.davinci.is_empty() && logic_ids == s.davinci;
    let mut used_logic = false;
    let mut ecc_unread: Vec<String> = Vec::new();
    let mut health_unread: Vec<ChipName> = Vec::new();
    let mut fabric_notes = FabricNotes::default();
    let mut accelerators = Vec::new();
    // One-chip NPUs by NPU id, then by accelerator index: what `-t topo` rows name.
    let one_chip = one_chip_npus(&chip_keys(&table));
    let mut by_npu: BTreeMap<u32, u32> = BTreeMap::new();
    for chip in &table.chips {
        let Some(npu) = chip.npu else { continue };
        let index_in_card = chip.chip.unwrap_or(0);
        let answers = s
            .chips
            .get(&(npu, index_in_card))
            .cloned()
            .unwrap_or_default();
        // A board query that failed is the identity query failing: the pass is not measured
        // (a chip dropped for it would take its grants with it). A board that answered
        // without a die id drops the chip.
        let board = match &answers.board {
            Ok(b) => b,
            Err(why) => return not_measured(Unmeasured::Query(why.clone())),
        };
        let Some(uuid) = board.identity.clone() else {
            notes.push(Note::NoIdentity {
                npu,
                chip: index_in_card,
                why: "no die id in `-t board`".into(),
            });
            continue;
        };
        let board_read = board;
        let board = Some(board);
        let logic = logic_of(npu, index_in_card);
        let mapped = maps.get(&(npu, index_in_card)).and_then(|m| m.physical_id);
        let physical = chip
            .phy_id
            .or(mapped)
            .or(answers.phy_id)
            .or(chip.device)
            .or_else(|| {
                logic
                    .filter(|_| logic_is_physical)
                    .inspect(|_| used_logic = true)
            });
        let Some(physical) = physical else {
            notes.push(Note::NoPhysicalId {
                npu,
                chip: index_in_card,
            });
            continue;
        };
        let card = match generation {
            Generation::V1 => npu,
            Generation::V2 => logic.unwrap_or(npu),
        };
        let name = chip_name(chip, board, maps.get(&(npu, index_in_card)).copied());
        let mut a = Accelerator::new(accelerators.len() as u32, Source::Driver);
        a.uuid = Some(uuid);
        a.architecture = name
            .as_deref()
            .and_then(soc::family)
            .map(|f| f.name().to_string());
        a.product = name;
        a.bus_id = chip.bus_id.as_deref().and_then(|b| b.parse::<BusId>().ok());
        a.numa_node = a
            .bus_id
            .and_then(|b| s.pci.iter().find(|f| f.bus_id == b))
            .and_then(|f| f.numa_node);
        // HBM is the VRAM; 310-class cards have DDR only (`0 / 0` HBM is no HBM).
        a.memory_mib = chip
            .hbm_total_mib
            .filter(|m| *m > 0)
            .or(chip.memory_total_mib.filter(|m| *m > 0));
        a.cores = s.cores.get(&(npu, index_in_card)).copied();
        match s.ecc.get(&(npu, index_in_card)) {
            Some(texts) => match ecc_of(texts, chip.hbm_total_mib.is_some_and(|m| m > 0)) {
                Ok(ecc) => {
                    let counted = ecc.volatile_corrected.unwrap_or(0) > 0
                        || ecc.volatile_uncorrected.unwrap_or(0) > 0;
                    if counted && ecc.enabled.is_none() {
                        notes.push(Note::EccFlagUnread {
                            npu,
                            chip: index_in_card,
                        });
                    }
                    a.ecc = Some(ecc);
                }
                Err(why) => ecc_unread.push(why),
            },
            None => ecc_unread.push("not asked".into()),
        }
        let who = ChipName {
            npu,
            chip: index_in_card,
        };
        match health_state_of(&s, who, &mut notes) {
            Ok(faults) => a.reported_faults = Some(faults),
            Err(_) => health_unread.push(who),
        }
        health::assess(&mut a, &[]);
        fabric(&s, &mut a, who, board_read, &mut fabric_notes, &mut notes);
        a.physical_indexes = vec![
            physical,
            card,
            if generation == Generation::V2 {
                0
            } else {
                index_in_card
            },
        ];
        if one_chip.get(&npu) == Some(&index_in_card) {
            by_npu.insert(npu, a.index);
        }
        accelerators.push(a);
    }
    if used_logic {
        notes.push(Note::PhysicalFromLogic);
    }
    if let Some(first) = ecc_unread.first() {
        notes.push(Note::EccUnread {
            chips: ecc_unread.len(),
            first: first.clone(),
        });
    }
    if let Some(first) = health_unread.first() {
        notes.push(Note::HealthUnread {
            chips: health_unread.len(),
            first: *first,
        });
    }
    notes.extend(fabric_notes.into_notes());
    link_npus(s.topology.take(), &by_npu, &mut accelerators, &mut notes);
    let mut section = ManufacturerInventory::empty(m);
    section.driver_version = match generation {
        Generation::V1 => s.driver_version,
        Generation::V2 => None,
    };
    section.runtime_version = s.cann_version;
    section.management_version = table.version;
    section.accelerators = accelerators;
    section.notes = notes.iter().map(ToString::to_string).collect();
    Ok(section)
}
