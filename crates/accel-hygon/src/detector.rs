//! The Hygon detector: the kernel's views first — the PCI functions of Hygon's vendor id, the
//! `hycu`/`hydcu` module (its version and its per-card DRM listing), the KFD topology's nodes of
//! that vendor, the multi-instance registry (the node's mode) — then the vendor tools (`hy-smi`
//! or the `rocm-smi` fork for unique id, name and VRAM; `rocminfo` for the HSA name), each bounded
//! by the pass's [`Budget`] and each allowed to be missing. [`join`] is pure: the sources in,
//! the section out.
//!
//! **Whose card.** A Hygon DCU runs a fork of AMD's stack, so both show KFD nodes and DRM cards:
//! a card is Hygon's by its PCI vendor id (the configured `GPUSTACK_HYGON_PCI_VENDOR_ID`), on the
//! bus and in its KFD node's `vendor_id`, never by a tool's banner or name (HAZARDS.md item 1).
//!
//! **Joins.** By PCI address (function 0) between the bus, KFD and the DRM listing; the tool's
//! JSON has no bus id, so its cards join by unique id (KFD's `unique_id`), and only where KFD
//! gives none by the tool's index among the DCUs in bus order, with a note.
//!
//! **The identity query** is the tool's JSON (`hy-smi`, else the `rocm-smi` fork: `Unique ID`
//! per card). The kernel names the cards too: KFD's `unique_id` is the same number, the
//! driver's own (ROCr builds the HSA `Uuid` rocminfo prints from it,
//! `rocminfo/gpustack__1x-k1xx-ai-…`), so where every DCU's KFD node carries the property (0 is
//! the driver saying it has none, which no tool improves on), a tool that is missing, hangs,
//! exits non-zero or prints what cannot be read is a note and every DCU keeps its UUID and
//! index. Where some DCU has no node or no property, that failure — or a document listing
//! fewer cards than the DCUs — is a pass not measured ([`Unmeasured`]): the last good inventory
//! and its grants stand, never a DCU dropped for it. `rocminfo` and `hy-smi mig` give no
//! identity; their failures are notes.
//!
//! **Health**, two sources, either taking a DCU out of service: the kernel's UMC counter
//! (`ras/umc_err_count`, spec §7: uncorrectable errors above 0) and `hy-smi --healthcheck`
//! (addendum H5, read by [`crate::health`], joined by bus id: any status but `Healthy`). A
//! counter the driver does not expose, a health check that fails or names no line for a DCU,
//! leaves that source unknown for it — never a healthy reading (the daemon keeps the last one).
//!
//! **MIG mode** (the registry's `dev<N>` files): each card offers the profiles `hy-smi mig
//! -lgip`/`-lgipp` list for its `N`, withheld where the listed name's `g` is not Hygon's
//! shader-engine count (addendum H3: engines per slice × the profile's slices) or not the name
//! Hygon's library gives the profile's live instances; and lists its live instances as its MIG
//! devices, read from the registry's `ci/dev<N>gi<G>ci<C>.conf` files in Hygon's grammar (what
//! Hygon's own discovery reads, H3).
//!
//! Answers: no Hygon function on the bus and no Hygon KFD node → `Ok(empty)`; functions the
//! driver does not enumerate (no KFD node, no tool answer) → `Err` (the daemon keeps its last
//! detection); DCUs found → `Ok(list)`, unless the identity query failed where the kernel names
//! not every DCU (`Err`). A DCU that the tool answered for, but with no unique id from any
//! source, is left out (spec §1.3 step 1), named in a note.

use std::collections::BTreeMap;
use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::{Budget, OutOfTime};
use accel_backend::mig_cli::listing;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{
    Accelerator, ComputeGeometry, DetectError, Detection, DrmNodes, Ecc, ManufacturerInventory,
    MigDevice, MigMode, Source,
};
use accel_host::kfd::{self, KfdBoard};
use accel_host::pci::{PciClassPrefixes, PciFunction};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::dtk;
use crate::health::{self, HealthcheckLine};
use crate::hysmi::{self, SmiCard, SmiDocument};
use crate::mig;
use crate::module;
use crate::registry::{self, NodeMode};
use crate::rocminfo::{self, HsaAgent};

/// Where the DTK's version is read when neither `ROCM_HOME` nor `ROCM_PATH` is set
/// (`<home>/.info/version…`, spec §1.4; [`dtk::RocmHome`]).
pub const RUNTIME_VERSION_FILES: &[&str] = dtk::DEFAULT_VERSION_FILES;

/// Neither identity tool is installed.
const NO_TOOL: &str = "neither hy-smi nor rocm-smi is installed";

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// Hygon's PCI vendor ids (`GPUSTACK_HYGON_PCI_VENDOR_ID`).
    pub vendor_ids: Vec<u16>,
    /// The PCI classes the bus scan keeps.
    pub pci_classes: PciClassPrefixes,
    /// The ROCm (DTK) home the runtime version is read under (`ROCM_HOME`, else `ROCM_PATH`;
    /// unset: the fixed paths).
    pub rocm_home: dtk::RocmHome,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: vec![0x1d94],
            pci_classes: PciClassPrefixes::default(),
            rocm_home: dtk::RocmHome::default(),
        }
    }
}

/// A condition worth telling, worded once (detector, doctor and tests use this wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Neither `hy-smi` nor `rocm-smi` is installed.
    NoTool,
    /// A tool's failure, in accel-host's one wording.
    ToolFailed(String),
    /// The tool's document was cut short.
    Truncated { program: String, cards: usize },
    /// A tool card joined by its index, not by identity.
    JoinedByIndex { card: u32, bus: String },
    /// A DCU no source names by unique id.
    NoUniqueId { bus: String },
    /// Two DCUs report one unique id.
    SharedUniqueId { uuid: String },
    /// The registry could not be read.
    ModeUnknown(String),
    /// The node is in MIG mode: whole-card families are off.
    MigEnabled { cards: usize },
    /// The DCUs are on the bus but no Hygon driver binds them.
    NotBound { functions: usize },
    /// A profile line left out (no legal placement), worded by the listing reader.
    LeftOut(String),
    /// A profile listed twice for one card with differing figures.
    DuplicateProfile { bus: String, name: String },
    /// A card in MIG mode the registry names no `dev<N>` for, or one offered no profile.
    NoProfiles { bus: String, why: &'static str },
    /// Cards of one group list a profile differently.
    GroupDisagrees { product: String, name: String },
    /// `hy-smi --healthcheck` gave no reading (it failed, or printed text that is not its
    /// answer). Why is `doctor`'s `health-check` row: the failure's wording is the tool's, and a
    /// note must read alike however the tool failed.
    HealthcheckUnread,
    /// `hy-smi --healthcheck` names no line for some DCUs.
    HealthcheckMissing { dcus: usize, first: String },
    /// A listed profile whose name is not the one Hygon's library forms for it.
    NotHygonsName {
        bus: String,
        name: String,
        hygons: String,
    },
    /// A registry file of a card's live instance that cannot be read.
    RegistryUnread { bus: String, why: String },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::NoTool => write!(f, "{NO_TOOL}: facts from the kernel only"),
            Note::ToolFailed(e) => f.write_str(e),
            Note::Truncated { program, cards } => write!(
                f,
                "{program}: the JSON document is cut short; {cards} card(s) read before the cut"
            ),
            Note::JoinedByIndex { card, bus } => write!(
                f,
                "hy-smi card{card}: no unique id to join by; taken as the DCU at {bus} by its position"
            ),
            Note::NoUniqueId { bus } => write!(
                f,
                "DCU {bus}: no source reports its unique id, so it is left out"
            ),
            Note::SharedUniqueId { uuid } => write!(
                f,
                "two DCUs report one unique id {uuid}: neither is named by it"
            ),
            Note::ModeUnknown(reason) => write!(
                f,
                "could not read the node's multi-instance mode ({reason}), so neither slicing family is published"
            ),
            Note::MigEnabled { cards } => write!(
                f,
                "the node is in multi-instance (MIG) mode ({cards} card(s) in the registry): DCUs are served as partitions only"
            ),
            Note::LeftOut(line) => f.write_str(line),
            Note::DuplicateProfile { bus, name } => write!(
                f,
                "DCU {bus}: hy-smi mig -lgip lists MIG profile {name} twice with differing figures, so neither is offered"
            ),
            Note::GroupDisagrees { product, name } => write!(
                f,
                "the {product} DCUs do not agree on MIG profile {name}, so no card of them offers it"
            ),
            Note::NoProfiles { bus, why } => {
                write!(f, "DCU {bus} is in MIG mode but {why}: it feeds no family")
            }
            Note::HealthcheckUnread => f.write_str(
                "hy-smi --healthcheck: no health check read; every DCU's health check is unknown, so each keeps its last reading (`doctor --manufacturer hygon` says why)",
            ),
            Note::HealthcheckMissing { dcus, first } => write!(
                f,
                "hy-smi --healthcheck: no line for {dcus} DCU(s) (first {first}); their health check is unknown, so each keeps its last reading"
            ),
            Note::NotHygonsName { bus, name, hygons } => write!(
                f,
                "DCU {bus}: hy-smi mig -lgip names a profile {name}, but Hygon's library names it {hygons} (its `g` counts shader engines, its memory is rounded down to GiB), so its instances would not be recognised: not offered"
            ),
            Note::RegistryUnread { bus, why } => write!(
                f,
                "DCU {bus}: its live MIG instances are not listed: {why}"
            ),
            Note::NotBound { functions } => write!(
                f,
                "{functions} Hygon PCI function(s) on the bus, but neither hycu nor hydcu binds them"
            ),
        }
    }
}

/// Why a pass is not measured, worded once (the reason of [`DetectError::NotMeasured`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmeasured {
    /// DCUs on the bus that neither KFD nor a tool enumerates, with the KFD read error and the
    /// tools' notes.
    NotEnumerated {
        dcus: usize,
        kfd_error: Option<String>,
        notes: Vec<String>,
    },
    /// The identity query gave no answer for every DCU (`why`: its failures, or what it
    /// listed), and the kernel gives none for `unnamed` of them.
    Unnamed {
        why: String,
        unnamed: usize,
        dcus: usize,
    },
}

impl fmt::Display for Unmeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmeasured::NotEnumerated {
                dcus,
                kfd_error,
                notes,
            } => {
                write!(
                    f,
                    "{dcus} DCU(s) on the bus, but the KFD topology shows no Hygon node"
                )?;
                if let Some(e) = kfd_error {
                    write!(f, " ({e})")?;
                }
                notes.iter().try_for_each(|n| write!(f, "; {n}"))
            }
            Unmeasured::Unnamed { why, unnamed, dcus } => write!(
                f,
                "{why}, and the KFD topology has no unique id for {unnamed} of the {dcus} DCU(s)"
            ),
        }
    }
}

/// Everything the host and the tools said.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Hygon's PCI functions (function 0 of each board), in bus order.
    pub functions: Vec<PciFunction>,
    /// The loaded module, if any.
    pub driver: Option<&'static str>,
    pub driver_version: Option<String>,
    pub runtime_version: Option<String>,
    /// DRM minors by board.
    pub minors: BTreeMap<BusId, (Option<u32>, Option<u32>)>,
    /// Hygon's KFD boards.
    pub boards: Vec<KfdBoard>,
    /// Whether the KFD topology could be read at all (`Err` text otherwise).
    pub kfd_error: Option<String>,
    pub smi: Option<(String, SmiDocument)>,
    /// Why no tool's document was read (one line: each failure, naming its argv), when none
    /// was.
    pub smi_failure: Option<String>,
    pub agents: Vec<HsaAgent>,
    pub mode: Option<NodeMode>,
    /// `hy-smi mig -lgip` and `-lgipp`, read only when the node is in MIG mode.
    pub mig_profiles: Option<String>,
    pub mig_placements: Option<String>,
    /// Each MIG-mode card's registry files (`ci/dev<N>gi<G>ci<C>.conf`) by its `N`, or why
    /// the directory could not be listed.
    pub mig_confs: BTreeMap<u32, Result<Vec<registry::ConfRead>, String>>,
    /// The kernel's UMC error counters by board (`<device>/ras/umc_err_count`), where the
    /// driver exposes them.
    pub ras: BTreeMap<BusId, UmcErrors>,
    /// `hy-smi --healthcheck`: what it printed, or why it printed nothing; `None` when `hy-smi`
    /// is not installed (or the pass had no time left to ask).
    pub healthcheck: Option<Result<String, String>>,
    pub notes: Vec<Note>,
}

/// Where the kernel counts a device's memory-controller (UMC) errors since boot: `ue: <n>` and
/// `ce: <n>` lines (the amdgpu RAS interface the `hydcu` fork inherits; no Hygon capture
/// shows it, so a device without it reads as unknown, never as healthy-by-count).
pub const UMC_ERR_COUNT: &str = "ras/umc_err_count";

/// One device's UMC error counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UmcErrors {
    pub uncorrectable: Option<u64>,
    pub correctable: Option<u64>,
}

/// Reads `umc_err_count`'s text: `ue: <n>` and `ce: <n>`, any case, in any order, other lines
/// ignored; `None` when neither count is there.
pub fn parse_umc_err_count(text: &str) -> Option<UmcErrors> {
    let mut counts = UmcErrors::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "ue" => counts.uncorrectable = Some(value),
            "ce" => counts.correctable = Some(value),
            _ => {}
        }
    }
    (counts.uncorrectable.is_some() || counts.correctable.is_some()).then_some(counts)
}

fn board(bus: BusId) -> BusId {
    BusId { function: 0, ..bus }
}

/// Reads every source of `host` (and the tools through `commands`).
pub fn read_sources(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Sources {
    let mut sources = Sources {
        driver: module::loaded(host),
        driver_version: module::read_version(host),
        runtime_version: dtk::read_runtime_version(host, &options.rocm_home),
        mode: Some(registry::read_mode(host)),
        ..Sources::default()
    };
    if let Some(NodeMode::On { cards }) = &sources.mode {
        sources.mig_confs = cards
            .keys()
            .map(|n| (*n, registry::read_confs(host, *n)))
            .collect();
    }
    if let Ok(scan) = accel_host::pci::scan_pci(host, &options.pci_classes) {
        sources.functions = scan
            .functions
            .into_iter()
            .filter(|f| options.vendor_ids.contains(&f.vendor_id) && f.bus_id.function == 0)
            .collect();
    }
    match kfd::read_topology(host, kfd::TOPOLOGY_DIR) {
        Ok(nodes) => {
            sources.boards = nodes
                .as_deref()
                .map(kfd::boards)
                .unwrap_or_default()
                .into_iter()
                .filter(|b| {
                    b.primary()
                        .and_then(kfd::KfdNode::vendor_id)
                        .is_some_and(|v| options.vendor_ids.contains(&v))
                })
                .collect();
        }
        Err(e) => sources.kfd_error = Some(e.to_string()),
    }
    if sources.functions.is_empty() && sources.boards.is_empty() {
        return sources;
    }
    let buses: Vec<BusId> = sources
        .functions
        .iter()
        .map(|f| f.bus_id)
        .chain(sources.boards.iter().map(|b| b.bus_id))
        .collect();
    for bus in buses {
        if let Some(minors) = module::read_minors(host, &bus.sysfs()) {
            sources.minors.insert(board(bus), minors);
        }
        let counter = format!("/sys/bus/pci/devices/{}/{UMC_ERR_COUNT}", bus.sysfs());
        if let Some(counts) = host
            .read_to_string(&counter)
            .ok()
            .as_deref()
            .and_then(parse_umc_err_count)
        {
            sources.ras.insert(board(bus), counts);
        }
    }
    ask_tools(commands, options, &mut sources);
    sources
}

fn ask_tools(commands: &dyn Commands, options: &DetectOptions, sources: &mut Sources) {
    let budget = Budget::start(options.deadlines);
    if ask_identity(commands, &budget, sources).is_err() {
        return;
    }
    if matches!(sources.mode, Some(NodeMode::On { .. })) {
        for (argv, slot) in [
            (mig::LGIP_ARGV, &mut sources.mig_profiles),
            (mig::LGIPP_ARGV, &mut sources.mig_placements),
        ] {
            let deadline = match budget.next() {
                Ok(d) => d,
                Err(e) => {
                    sources
                        .notes
                        .push(Note::ToolFailed(format!("{}: {e}", argv.join(" "))));
                    break;
                }
            };
            match run_bounded(commands, argv, deadline) {
                Ok(out) => *slot = Some(out.stdout_text()),
                Err(e) => sources.notes.push(Note::ToolFailed(e.to_string())),
            }
        }
    }
    if commands.is_installed(hysmi::HEALTHCHECK[0]) {
        sources.healthcheck = Some(match budget.next() {
            Ok(deadline) => run_bounded(commands, hysmi::HEALTHCHECK, deadline)
                .map(|out| out.stdout_text())
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("{}: {e}", hysmi::HEALTHCHECK.join(" "))),
        });
    }
    if commands.is_installed(rocminfo::ARGV[0])
        && let Ok(deadline) = budget.next()
    {
        match run_bounded(commands, rocminfo::ARGV, deadline) {
            Ok(out) => match rocminfo::parse(&out.stdout_text()) {
                Ok(agents) => sources.agents = agents,
                Err(e) => sources.notes.push(Note::ToolFailed(e.to_string())),
            },
            Err(e) => sources.notes.push(Note::ToolFailed(e.to_string())),
        }
    }
}

/// The identity query: the first installed tool whose JSON reads; every failure is a note,
/// and [`Sources::smi_failure`] says in one line why none answered. `Err` when the pass's time
/// ran out (nothing more is asked).
fn ask_identity(
    commands: &dyn Commands,
    budget: &Budget,
    sources: &mut Sources,
) -> Result<(), OutOfTime> {
    let installed: Vec<&[&str]> = hysmi::JSON_QUERIES
        .into_iter()
        .filter(|argv| commands.is_installed(argv[0]))
        .collect();
    let mut failures: Vec<String> = Vec::new();
    let mut ran = false;
    for argv in installed {
        let failure = match budget.next() {
            Err(e) => {
                let failure = format!("{}: {e}", argv[0]);
                sources.notes.push(Note::ToolFailed(failure.clone()));
                failures.push(failure);
                sources.smi_failure = Some(failures.join("; "));
                return Err(e);
            }
            Ok(deadline) => match run_bounded(commands, argv, deadline) {
                Ok(out) => match hysmi::parse_json(argv[0], &out.stdout_text()) {
                    Ok(doc) => {
                        if doc.truncated {
                            sources.notes.push(Note::Truncated {
                                program: argv[0].into(),
                                cards: doc.cards.len(),
                            });
                        }
                        sources.smi = Some((argv[0].to_string(), doc));
                        return Ok(());
                    }
                    Err(e) => e.to_string(),
                },
                // Installed by its path but not found when run (or the image wrapper's exit
                // 127): the next tool answers.
                Err(RunFailure::NotInstalled { .. }) => continue,
                Err(e) => e.to_string(),
            },
        };
        ran = true;
        sources.notes.push(Note::ToolFailed(failure.clone()));
        failures.push(failure);
    }
    if !ran {
        sources.notes.push(Note::NoTool);
        failures.push(NO_TOOL.into());
    }
    sources.smi_failure = Some(failures.join("; "));
    Ok(())
}

/// One pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: DetectOptions) -> Detection {
    join(read_sources(host, commands, &options))
}

/// The tool card of a board: by unique id, else by position (with a note).
fn smi_card<'a>(
    doc: Option<&'a SmiDocument>,
    position: usize,
    unique: Option<u64>,
    bus: BusId,
    notes: &mut Vec<Note>,
) -> Option<&'a SmiCard> {
    let doc = doc?;
    if let Some(id) = unique {
        return doc.cards.iter().find(|c| c.unique_id == Some(id));
    }
    let card = doc.cards.get(position)?;
    notes.push(Note::JoinedByIndex {
        card: card.card,
        bus: bus.sysfs(),
    });
    Some(card)
}

/// The location id rocminfo's `BDFID` holds.
fn bdf_id(bus: BusId) -> u32 {
    (u32::from(bus.bus) << 8) | (u32::from(bus.device) << 3) | u32::from(bus.function)
}

fn not_measured(why: Unmeasured) -> Detection {
    Err(DetectError::NotMeasured {
        manufacturer: Manufacturer::Hygon,
        reason: why.to_string(),
    })
}

/// Whether the kernel gave its answer on the identity of the DCU at `bus`: its KFD node
/// carries a `unique_id` property. The value is the driver's own, which the tools read too, so
/// 0 there (none reported) is an answer no tool improves on; no node, or a node without the
/// property, leaves the identity to the tool.
fn kernel_answers_identity(sources: &Sources, bus: BusId) -> bool {
    sources
        .boards
        .iter()
        .find(|b| b.bus_id == bus)
        .and_then(KfdBoard::primary)
        .is_some_and(|n| n.properties.contains_key("unique_id"))
}

/// Why the identity query answered not every one of `dcus` DCUs: its failure, or a document
/// listing fewer cards; `None` when it answered for all.
fn identity_unanswered(sources: &Sources, dcus: usize) -> Option<String> {
    match &sources.smi {
        None => Some(
            sources
                .smi_failure
                .clone()
                .unwrap_or_else(|| "no tool was asked".into()),
        ),
        Some((program, doc)) if doc.cards.len() < dcus => {
            Some(format!("{program}: lists {} card(s)", doc.cards.len()))
        }
        Some(_) => None,
    }
}

/// The section from the sources.
pub fn join(sources: Sources) -> Detection {
    let m = Manufacturer::Hygon;
    let mut section = ManufacturerInventory::empty(m);
    let mut notes = sources.notes.clone();
    let mut buses: Vec<BusId> = sources
        .functions
        .iter()
        .map(|f| board(f.bus_id))
        .chain(sources.boards.iter().map(|b| b.bus_id))
        .collect();
    buses.sort();
    buses.dedup();
    if buses.is_empty() {
        return Ok(section);
    }
    let smi = sources.smi.as_ref().map(|(_, doc)| doc);
    let tool_cards = smi.map_or(0, |d| d.cards.len());
    if sources.boards.is_empty() && tool_cards == 0 {
        let bound = sources
            .functions
            .iter()
            .filter(|f| is_hygon_driver(f))
            .count();
        if sources.driver.is_none() && bound == 0 {
            section.notes.push(
                Note::NotBound {
                    functions: sources.functions.len(),
                }
                .to_string(),
            );
            return Ok(section);
        }
        return not_measured(Unmeasured::NotEnumerated {
            dcus: buses.len(),
            kfd_error: sources.kfd_error.clone(),
            notes: notes.iter().map(ToString::to_string).collect(),
        });
    }
    let mig = match &sources.mode {
        Some(NodeMode::On { cards }) => {
            notes.push(Note::MigEnabled { cards: cards.len() });
            Some(MigMode::Enabled)
        }
        Some(NodeMode::Off) => Some(MigMode::Disabled),
        Some(NodeMode::Unknown(reason)) => {
            notes.push(Note::ModeUnknown(reason.clone()));
            None
        }
        None => None,
    };
    section.driver_version = sources.driver_version.clone();
    section.runtime_version = sources.runtime_version.clone();
    let unnamed = buses
        .iter()
        .filter(|bus| !kernel_answers_identity(&sources, **bus))
        .count();
    if unnamed > 0
        && let Some(why) = identity_unanswered(&sources, buses.len())
    {
        return not_measured(Unmeasured::Unnamed {
            why,
            unnamed,
            dcus: buses.len(),
        });
    }
    let checked = healthcheck_lines(&sources, &mut notes);
    let mut unchecked: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (position, bus) in buses.iter().enumerate() {
        let kfd = sources.boards.iter().find(|b| b.bus_id == *bus);
        let unique = kfd
            .and_then(|b| b.primary())
            .and_then(kfd::KfdNode::unique_id);
        let card = smi_card(smi, position, unique, *bus, &mut notes);
        let Some(id) = card.and_then(|c| c.unique_id).or(unique) else {
            notes.push(Note::NoUniqueId { bus: bus.sysfs() });
            continue;
        };
        let index = u32::try_from(section.accelerators.len()).unwrap_or(u32::MAX);
        let check = match &checked {
            Some(lines) => {
                let line = health::line_for(lines, *bus);
                if line.is_none() {
                    unchecked.push(bus.sysfs());
                }
                line
            }
            None => None,
        };
        let mut a = accelerator(index, *bus, id, kfd, card, &sources, mig);
        // Addendum H5: the tool's health check, `Some` only when it names this DCU.
        a.reported_faults = check.map(|line| line.fault(*bus).into_iter().collect());
        accel_core::health::assess(&mut a, &[]);
        let uuid = a.uuid.clone().unwrap_or_default();
        if let Some(&other) = seen.get(&uuid) {
            notes.push(Note::SharedUniqueId { uuid });
            a.uuid = None;
            if let Some(first) = section.accelerators.get_mut(other) {
                first.uuid = None;
            }
        } else {
            seen.insert(uuid, section.accelerators.len());
        }
        section.accelerators.push(a);
    }
    if let Some(first) = unchecked.first() {
        notes.push(Note::HealthcheckMissing {
            dcus: unchecked.len(),
            first: first.clone(),
        });
    }
    section.accelerators.retain(|a| a.uuid.is_some());
    for (i, a) in section.accelerators.iter_mut().enumerate() {
        a.index = u32::try_from(i).unwrap_or(u32::MAX);
    }
    if let Some(NodeMode::On { cards }) = &sources.mode {
        offer_profiles(&mut section, cards, &sources, &mut notes);
    }
    section.notes = notes.iter().map(ToString::to_string).collect();
    Ok(section)
}

/// Each MIG-mode card's profiles (spec §6.1), from the `hy-smi mig` rows of the registry's
/// `dev<N>` naming its PCI address; the card's compute units become the most a profile spans
/// (`max(CUs × instances)`: HSA sees one partition in MIG mode).
fn offer_profiles(
    section: &mut ManufacturerInventory,
    cards: &BTreeMap<u32, BusId>,
    sources: &Sources,
    notes: &mut Vec<Note>,
) {
    // A listing whose call failed has its note from the call already (`ask_tools`).
    let (profiles, unread) =
        listing::rows_or_reason(sources.mig_profiles.as_deref(), listing::parse_profiles);
    notes.extend(unread.map(|r| Note::ToolFailed(format!("hy-smi mig -lgip: {r}"))));
    let (placements, unread) =
        listing::rows_or_reason(sources.mig_placements.as_deref(), listing::parse_placements);
    notes.extend(unread.map(|r| Note::ToolFailed(format!("hy-smi mig -lgipp: {r}"))));
    for a in &mut section.accelerators {
        let Some(bus) = a.bus_id else { continue };
        let Some((&row, _)) = cards.iter().find(|(_, b)| board(**b) == bus) else {
            notes.push(Note::NoProfiles {
                bus: bus.sysfs(),
                why: "the registry has no dev<N> file naming its PCI address",
            });
            continue;
        };
        if row != a.index {
            // The partitioner addresses a card by this index (`hy-smi mig -i <N>`): a card
            // whose registry number is not its index here would be another card's commands.
            notes.push(Note::NoProfiles {
                bus: bus.sysfs(),
                why: "its registry number is not its index here, so hy-smi mig -i would name another card",
            });
            continue;
        }
        let who = format!("DCU {}", bus.sysfs());
        let (offered, left_out) = listing::offered(
            &profiles,
            &placements,
            row,
            &mig::published_profile,
            &who,
            "hy-smi",
        );
        notes.extend(left_out.into_iter().map(Note::LeftOut));
        let (kept, doubled) = listing::without_duplicates(offered);
        notes.extend(doubled.into_iter().map(|name| Note::DuplicateProfile {
            bus: bus.sysfs(),
            name,
        }));
        let per_slice =
            mig::engines_per_slice(a.compute_geometry.as_ref().and_then(|g| g.shader_engines));
        let (devices, live_names) =
            live_instances(sources.mig_confs.get(&row), per_slice, &bus, notes);
        a.mig_devices = devices;
        let kept = hygons_names(kept, &live_names, per_slice, &bus, notes);
        if kept.is_empty() {
            notes.push(Note::NoProfiles {
                bus: bus.sysfs(),
                why: "hy-smi mig offers no partition profile for it",
            });
        }
        a.partition_profiles = kept;
    }
    // Spec §6.1: a profile the cards of one group (product and memory) disagree on is
    // withheld from all of them.
    notes.extend(
        listing::withhold_disagreements(&mut section.accelerators)
            .into_iter()
            .map(|d| Note::GroupDisagrees {
                product: d.product.unwrap_or_else(|| "unnamed".into()),
                name: d.profile,
            }),
    );
    // The card's compute units are the most one offered profile spans.
    for a in &mut section.accelerators {
        let spanned = a
            .partition_profiles
            .iter()
            .filter_map(|p| Some(p.multiprocessors? * p.instances_total?))
            .max();
        if let Some(cus) = spanned {
            a.cores = Some(cus);
            if let Some(g) = a.compute_geometry.as_mut() {
                g.compute_units = Some(cus);
            }
        }
    }
}

/// A card's live MIG instances from its registry files, named as Hygon's library names them
/// (addendum H3: card, name, `MIG-<mig_uuid>`, the CI's CUs, the GI's memory, GI and CI ids);
/// a file that cannot be read is a note. Also the name Hygon's library gives each profile id
/// seen live.
fn live_instances(
    confs: Option<&Result<Vec<registry::ConfRead>, String>>,
    per_slice: Option<u32>,
    bus: &BusId,
    notes: &mut Vec<Note>,
) -> (Vec<MigDevice>, BTreeMap<u32, String>) {
    let unread = |why: String| Note::RegistryUnread {
        bus: bus.sysfs(),
        why,
    };
    let confs = match confs {
        Some(Ok(confs)) => confs,
        Some(Err(why)) => {
            notes.push(unread(why.clone()));
            return Default::default();
        }
        None => return Default::default(),
    };
    let mut devices = Vec::new();
    let mut names = BTreeMap::new();
    for read in confs {
        let conf = match &read.conf {
            Ok(conf) => conf,
            Err(why) => {
                notes.push(unread(format!("registry file {}: {why}", read.path)));
                continue;
            }
        };
        let g = &conf.gi;
        let name = match (per_slice, g.gpu_slice_count, g.memory_size_mb) {
            (Some(per), Some(gi_slices), Some(memory)) => Some(mig::profile_name(
                per,
                gi_slices,
                conf.ci.gpu_slice_count.unwrap_or(gi_slices),
                memory,
            )),
            _ => None,
        };
        if let (Some(id), Some(name)) = (g.profile_id, &name) {
            names.insert(id, name.clone());
        }
        devices.push(MigDevice {
            index: u32::try_from(devices.len()).unwrap_or(u32::MAX),
            gpu_instance_id: Some(read.gpu_instance),
            compute_instance_id: Some(read.compute_instance),
            uuid: conf.ci.mig_uuid.as_deref().map(mig::mig_id),
            profile: name,
            memory_mib: g.memory_size_mb,
            multiprocessors: conf.ci.cu_count,
        });
    }
    (devices, names)
}

/// The offered profiles whose listed names are Hygon's (addendum H3): a profile whose live
/// instances Hygon's library names otherwise (`live`, by profile id), or whose `g` is not the
/// shader engines its slices hold (engines per slice × its placement's size: the measured BW
/// card's slices), is withheld with a note.
fn hygons_names(
    offered: Vec<accel_core::inventory::PartitionProfile>,
    live: &BTreeMap<u32, String>,
    per_slice: Option<u32>,
    bus: &BusId,
    notes: &mut Vec<Note>,
) -> Vec<accel_core::inventory::PartitionProfile> {
    offered
        .into_iter()
        .filter(|p| {
            let size = p.placements.first().map(|pl| pl.size);
            let by_engines = per_slice.zip(size).map(|(per, size)| per * size);
            let named_live = live.get(&p.id).filter(|n| **n != p.name);
            let hygons = match (named_live, by_engines) {
                (Some(live), _) => Some(live.clone()),
                (None, Some(g)) if mig::se_units(&p.name) != Some(g) => {
                    Some(format!("{g}g.<GB>gb"))
                }
                _ => None,
            };
            let Some(hygons) = hygons else { return true };
            notes.push(Note::NotHygonsName {
                bus: bus.sysfs(),
                name: p.name.clone(),
                hygons,
            });
            false
        })
        .collect()
}

/// `hy-smi --healthcheck`'s lines; `None` (with a note when it was asked) when there are none to
/// judge by.
fn healthcheck_lines(sources: &Sources, notes: &mut Vec<Note>) -> Option<Vec<HealthcheckLine>> {
    let read = match sources.healthcheck.as_ref()? {
        Ok(text) => health::parse_healthcheck(text).map_err(|e| e.to_string()),
        Err(why) => Err(why.clone()),
    };
    read.inspect_err(|_| notes.push(Note::HealthcheckUnread))
        .ok()
}

fn is_hygon_driver(f: &PciFunction) -> bool {
    f.driver
        .as_deref()
        .is_some_and(|d| module::DRIVERS.contains(&d))
}

/// The `GPU-<hex>` UUID of a unique id (spec §1.3: lower-case, no leading zeros).
pub fn uuid_of(unique: u64) -> String {
    format!("GPU-{unique:x}")
}

fn accelerator(
    index: u32,
    bus: BusId,
    unique: u64,
    kfd: Option<&KfdBoard>,
    card: Option<&SmiCard>,
    sources: &Sources,
    mig: Option<MigMode>,
) -> Accelerator {
    let mut a = Accelerator::new(index, Source::Driver);
    let primary = kfd.and_then(KfdBoard::primary);
    let function = sources.functions.iter().find(|f| board(f.bus_id) == bus);
    let agent = sources
        .agents
        .iter()
        .find(|g| g.is_accelerator() && g.bdf_id == Some(bdf_id(bus)));
    a.bus_id = Some(bus);
    a.uuid = Some(uuid_of(unique));
    // HSA's name only outside MIG mode (it sees one partition then, spec §1.3 step 7).
    let hsa_name = agent
        .filter(|_| mig != Some(MigMode::Enabled))
        .and_then(|g| g.marketing_name.as_deref())
        .and_then(hysmi::product_name);
    a.product = hsa_name.or_else(|| card.and_then(|c| c.name.clone()));
    a.memory_mib = card.and_then(|c| c.vram_mib).or_else(|| {
        primary
            .and_then(kfd::KfdNode::framebuffer_bytes)
            .map(|b| b >> 20)
    });
    a.numa_node = function.and_then(|f| f.numa_node);
    a.compute_capability = primary.and_then(kfd::KfdNode::gfx_target).or_else(|| {
        agent
            .and_then(|g| g.name.clone())
            .filter(|n| n.starts_with("gfx"))
    });
    // Spec §1.3 step 9: the HSA ASIC family, known only where the kernel fixes it for the
    // target ([`dtk::asic_family`]); absent otherwise.
    a.architecture = a
        .compute_capability
        .as_deref()
        .and_then(dtk::asic_family)
        .map(String::from);
    a.cores = kfd
        .and_then(KfdBoard::compute_units)
        .or_else(|| agent.and_then(|g| g.compute_units));
    a.serial = card.and_then(|c| c.serial.clone());
    let (drm_card, render) = sources.minors.get(&bus).copied().unwrap_or((None, None));
    let render = render.or_else(|| primary.and_then(kfd::KfdNode::render_minor));
    a.minor_number = drm_card;
    a.drm = Some(DrmNodes {
        card: drm_card,
        render,
    });
    a.compute_geometry = Some(ComputeGeometry {
        compute_units: a.cores,
        shader_engines: primary.and_then(kfd::KfdNode::shader_engines),
        xccs: None,
    });
    a.mig_mode = mig;
    // Spec §7: uncorrectable ECC errors take the DCU out; an unreadable count is no fault.
    a.ecc = sources.ras.get(&bus).map(|c| Ecc {
        volatile_uncorrected: c.uncorrectable,
        volatile_corrected: c.correctable,
        ..Ecc::default()
    });
    a.classify_grantable();
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_lower_case_hex_without_leading_zeros() {
        assert_eq!(uuid_of(0x5c88_007d_7603_74f3), "GPU-5c88007d760374f3");
        assert_eq!(uuid_of(0x00ab), "GPU-ab");
    }

    #[test]
    fn rocminfo_bdf_ids_are_location_ids() {
        let bus: BusId = "0000:0f:00.0".parse().unwrap();
        assert_eq!(bdf_id(bus), 3840);
    }

    #[test]
    fn nothing_on_the_bus_is_an_empty_section() {
        let section = join(Sources::default()).unwrap();
        assert!(section.accelerators.is_empty());
        assert!(section.notes.is_empty());
    }
}
