//! The T-Head detector: the PCI bus (vendor `1ded`), the `alixpu` control nodes, then
//! `ppu-smi` (the device table, `-L` for each card's UUID and MIG devices, `-q` for the kernel
//! minor and the MIG mode), read within one pass budget and joined once ([`join`]). No HGML
//! library is loaded; every source may be missing.
//!
//! **Joins.** The table and `-L` are one tool's enumeration, joined by its index; `-q` and the
//! PCI scan by bus address. **The ordinal** (`Accelerator::index`) is a compact counter over
//! the cards that survive (a card the tool answers for without a UUID is skipped, as the
//! described system skips a card whose UUID read fails; the query itself failing is a pass not
//! measured, below), and is what the responder names `/dev/alixpu_ppu<ordinal>`
//! with; `minor_number` is `-q`'s `Minor Number`, which the responder compares with that node's
//! kernel minor before any grant (spec §3). A skipped card shifts every later ordinal; the
//! comparison is what catches that.
//!
//! **Modes.** A card whose MIG mode is currently enabled feeds only the partition family; any
//! other answer (disabled, absent, unreadable) is a whole card, logically sliceable. A pending
//! mode changes nothing until the device manager restarts (it is a note). A profile the MIG
//! cards of one group (name and memory) disagree on is offered by none of them (spec §1.2
//! step 12; `mig_cli::listing::withhold_disagreements`, shared with Hygon).
//!
//! **Health** is ECC only (spec §7): the table's `Volatile Uncorr. ECC` above zero.
//!
//! **The identity query** is the table (it enumerates the cards) with `-L` (each card's UUID;
//! `-q`'s `PPU UUID` where `-L` gives none): the kernel numbers the cards but names none. So
//! where the alixpu driver is evidently there (`/dev/alixpu`, `/sys/module/alixpu`, or a PPU
//! bound to a driver), a table that is missing, hangs past its deadline, exits non-zero or
//! prints what cannot be read, a table listing fewer cards than the `/dev/alixpu_ppu<N>` nodes,
//! or `-L` failing where `-q` does not name every card, is a pass not measured
//! ([`Unmeasured`]): the last good inventory and its grants stand, never "zero PPUs" and never
//! a card skipped for it. `-L` answering without a card's UUID skips that card (a note). The
//! MIG listings give no identity; their failures are notes.
//!
//! Answers: no T-Head function on the bus, no `/dev/alixpu` and no `ppu-smi` → `Ok(empty)`
//! with no note (not a PPU host); no driver (`ppu-smi` saying it is not loaded, or missing, and
//! no sign of the driver in the kernel) → `Ok(empty)` with a note; the driver there but the
//! identity query failing → `Err` (the daemon keeps its last detection); cards listed →
//! `Ok(list)`.

use std::fmt;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_backend::mig_cli::listing;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::health;
use accel_core::inventory::{
    Accelerator, DetectError, Detection, Ecc, Grantable, ManufacturerInventory, MigDevice, MigMode,
    Source,
};
use accel_host::pci::{PciClassPrefixes, PciFunction, scan_pci};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::devnode;
use crate::mig::published_profile;
use crate::smi::{self, ListedCard, Query, SmiError, SmiTable};

/// The kernel module's folder: the driver is loaded.
pub const MODULE_DIR: &str = "/sys/module/alixpu";
/// The kernel module's version file (a fallback for the driver version).
pub const MODULE_VERSION: &str = "/sys/module/alixpu/version";

/// What a host without the tool is told.
const NOT_INSTALLED: &str = "ppu-smi is not installed on the host (install the PPU SDK)";

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// The PCI vendor ids that are T-Head's (`GPUSTACK_THEAD_PCI_VENDOR_ID`).
    pub vendor_ids: Vec<u16>,
    /// The classes the bus scan reads (`GPUSTACK_PCI_CLASS_PREFIXES`).
    pub pci_classes: PciClassPrefixes,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: Manufacturer::Thead.default_pci_vendor_ids().to_vec(),
            pci_classes: PciClassPrefixes::default(),
        }
    }
}

/// Every fact worth telling about a pass, worded once (detector, doctor and tests use it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A `ppu-smi` call failed or its answer could not be read.
    Smi { args: &'static str, reason: String },
    /// The PCI bus shows PPUs the tool could not list.
    UnlistedFunctions { count: usize, why: String },
    /// A card `-L` names no UUID for: skipped, and every later ordinal shifts.
    NoUuid { tool_index: u32, bus: String },
    /// A card with no recorded minor: every allocation on it is refused.
    NoMinor { ordinal: u32, uuid: String },
    /// The MIG mode changes after a restart.
    PendingMode {
        ordinal: u32,
        current: Option<MigMode>,
        pending: MigMode,
    },
    /// A card in MIG mode: partitions only.
    PartitionsOnly { ordinal: u32, uuid: String },
    /// Its control node is missing although cards are listed.
    NoControlNode { reason: String },
    /// A profile the MIG listings offer a card is left out (no legal placement).
    LeftOut(String),
    /// Two profiles of one name with differing figures: neither is offered (spec §6.1).
    DuplicateProfile { ordinal: u32, name: String },
    /// A card in MIG mode with no profile to offer: it feeds no family.
    NoProfiles { ordinal: u32, uuid: String },
    /// Cards of one group (name and memory) list a profile differently, or not all of them
    /// list it: no card of the group offers it (spec §1.2 step 12).
    GroupDisagrees { product: String, name: String },
}

fn mode_word(mode: Option<MigMode>) -> &'static str {
    match mode {
        Some(MigMode::Enabled) => "Enabled",
        Some(MigMode::Disabled) => "Disabled",
        None => "unknown",
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Smi { args, reason } => write!(f, "ppu-smi{args}: {reason}"),
            Note::UnlistedFunctions { count, why } => write!(
                f,
                "the PCI bus shows {count} T-Head PPU function(s) but ppu-smi lists none: {why}"
            ),
            Note::NoUuid { tool_index, bus } => write!(
                f,
                "PPU {tool_index} ({bus}): ppu-smi -L names no UUID for it, so it is skipped (every later card's ordinal shifts)"
            ),
            Note::NoMinor { ordinal, uuid } => write!(
                f,
                "accelerator {ordinal} ({uuid}): recorded no minor number for a card, so every allocation on it is refused"
            ),
            Note::PendingMode {
                ordinal,
                current,
                pending,
            } => write!(
                f,
                "accelerator {ordinal}: MIG mode is {} with {} pending; the device manager serves the current mode until it restarts",
                mode_word(*current),
                mode_word(Some(*pending))
            ),
            Note::PartitionsOnly { ordinal, uuid } => write!(
                f,
                "accelerator {ordinal} ({uuid}) is in MIG mode: it feeds only the partition family"
            ),
            Note::NoControlNode { reason } => write!(
                f,
                "{reason}: no PPU can be granted until the alixpu driver creates it"
            ),
            Note::LeftOut(line) => f.write_str(line),
            Note::DuplicateProfile { ordinal, name } => write!(
                f,
                "accelerator {ordinal}: ppu-smi mig -lgip lists MIG profile {name} twice with differing figures, so neither is offered"
            ),
            Note::NoProfiles { ordinal, uuid } => write!(
                f,
                "accelerator {ordinal} ({uuid}) is in MIG mode but ppu-smi mig offers no partition profile for it: it feeds no family"
            ),
            Note::GroupDisagrees { product, name } => write!(
                f,
                "the {product} PPUs do not agree on MIG profile {name}, so no card of them offers it"
            ),
        }
    }
}

/// Why a pass is not measured, worded once (the reason of [`DetectError::NotMeasured`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmeasured {
    /// The table gave no answer: its `RunFailure` or parse error (naming the argv), or that
    /// the tool is not installed.
    Table(String),
    /// The table lists fewer cards than the kernel's per-card nodes.
    FewerCards { listed: usize, nodes: usize },
    /// `-L` failed (`why`, naming its argv) and `-q` names not every listed card: `query` is
    /// `-q`'s own failure, when it failed too.
    Unnamed {
        why: String,
        query: Option<String>,
        cards: usize,
    },
}

impl fmt::Display for Unmeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmeasured::Table(why) => f.write_str(why),
            Unmeasured::FewerCards { listed, nodes } => write!(
                f,
                "ppu-smi: lists {listed} card(s), but the kernel shows {nodes} {}<N> node(s)",
                devnode::CARD_PREFIX
            ),
            Unmeasured::Unnamed {
                why,
                query: Some(query),
                ..
            } => write!(f, "{why}; {query}"),
            Unmeasured::Unnamed {
                why,
                query: None,
                cards,
            } => write!(f, "{why}, and ppu-smi -q names no UUID for {cards} card(s)"),
        }
    }
}

/// What the tool said in one pass.
#[derive(Debug, Default)]
pub struct Sources {
    pub pci: Vec<PciFunction>,
    pub table: Option<SmiTable>,
    /// The device table's `MIG devices:` rows (empty with no card in MIG mode).
    pub mig_rows: Vec<smi::MigRow>,
    pub list: Vec<ListedCard>,
    pub query: Option<Query>,
    /// `ppu-smi mig -lgip` and `-lgipp`, read only when a card is in MIG mode.
    pub mig_profiles: Option<String>,
    pub mig_placements: Option<String>,
    pub module_version: Option<String>,
    /// Why `-L` and `-q` gave nothing, naming the argv (one line each).
    pub list_failure: Option<String>,
    pub query_failure: Option<String>,
    pub notes: Vec<Note>,
}

/// A call's text (standard output, with standard error after it), or its failure; the
/// driver-not-loaded answer is read from a failed call's output too.
fn call(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &'static [&'static str],
) -> Result<String, CallFailure> {
    let deadline: Duration = budget
        .next()
        .map_err(|e| CallFailure::Other(format!("{}: {e}", argv.join(" "))))?;
    match run_bounded(commands, argv, deadline) {
        Ok(out) => Ok(out.stdout_text()),
        Err(e @ RunFailure::NotInstalled { .. }) => Err(CallFailure::NotInstalled(e.to_string())),
        Err(e) => {
            let said = e
                .output()
                .map(|o| format!("{}\n{}", o.stdout_text(), o.stderr_text()))
                .unwrap_or_default();
            match smi::driver_not_loaded(&said) {
                Some(not_loaded) => Err(CallFailure::Smi(not_loaded)),
                None => Err(CallFailure::Other(e.to_string())),
            }
        }
    }
}

#[derive(Debug)]
enum CallFailure {
    /// The `RunFailure`'s text.
    NotInstalled(String),
    Smi(SmiError),
    /// The `RunFailure`'s text, or the pass's time running out, naming the argv.
    Other(String),
}

impl CallFailure {
    /// The failure in one line, naming the call.
    fn text(&self) -> String {
        match self {
            CallFailure::NotInstalled(why) | CallFailure::Other(why) => why.clone(),
            CallFailure::Smi(e) => e.to_string(),
        }
    }
}

/// Whether the kernel shows the alixpu driver: its control node, its module, or a PPU bound to
/// a driver (not vfio-pci). Without it, a missing tool or one saying the driver is not loaded
/// is a host with no driver, not a failed pass.
fn driver_evident(host: &dyn Host, pci: &[PciFunction]) -> bool {
    host.exists(devnode::CONTROL)
        || host.exists(MODULE_DIR)
        || pci
            .iter()
            .any(|f| f.driver.as_deref().is_some_and(|d| d != "vfio-pci"))
}

/// A listed card's UUID: `-L`'s by the tool's index, else `-q`'s by bus address.
fn uuid_of(card: &smi::TableCard, list: &[ListedCard], query: Option<&Query>) -> Option<String> {
    card.index
        .and_then(|i| list.iter().find(|l| l.index == i))
        .and_then(|l| l.uuid.clone())
        .or_else(|| {
            let bus = card.bus_id?;
            query?
                .cards
                .iter()
                .find(|q| q.bus_id == Some(bus))
                .and_then(|q| q.uuid.clone())
        })
}

/// Whether the identity query left listed cards without a UUID because `-L` failed.
fn unnamed(sources: &Sources) -> Option<Unmeasured> {
    let why = sources.list_failure.clone()?;
    let table = sources.table.as_ref()?;
    let cards = table
        .cards
        .iter()
        .filter(|c| uuid_of(c, &sources.list, sources.query.as_ref()).is_none())
        .count();
    (cards > 0).then(|| Unmeasured::Unnamed {
        why,
        query: sources.query_failure.clone(),
        cards,
    })
}

/// Reads every source of one pass (the pass's budget spent across the calls).
pub fn read_sources(
    host: &dyn Host,
    commands: &dyn Commands,
    options: &DetectOptions,
) -> Result<Sources, CallOutcome> {
    let mut sources = Sources {
        pci: scan_pci(host, &options.pci_classes)
            .map(|s| {
                s.functions
                    .into_iter()
                    .filter(|f| options.vendor_ids.contains(&f.vendor_id))
                    .collect()
            })
            .unwrap_or_default(),
        module_version: host
            .read_to_string(MODULE_VERSION)
            .ok()
            .and_then(|v| accel_backend::text::dotted_version(v.trim()).map(String::from)),
        ..Sources::default()
    };
    let control = host.exists(devnode::CONTROL);
    let installed = commands.is_installed("ppu-smi");
    if sources.pci.is_empty() && !control && !installed {
        return Err(CallOutcome::NotAPpuHost);
    }
    let driver = driver_evident(host, &sources.pci);
    let budget = Budget::start(options.deadlines);
    let (table, mig_rows) = match call(commands, &budget, smi::TABLE_ARGV).and_then(|t| {
        smi::parse_table(&t)
            .map(|table| (table, smi::parse_mig_table(&t)))
            .map_err(CallFailure::Smi)
    }) {
        Ok(read) => read,
        Err(CallFailure::NotInstalled(_)) if !driver => {
            return Err(CallOutcome::empty(&sources, NOT_INSTALLED.into()));
        }
        Err(CallFailure::NotInstalled(_)) => {
            return Err(CallOutcome::Unmeasured(Unmeasured::Table(
                NOT_INSTALLED.into(),
            )));
        }
        Err(CallFailure::Smi(e @ SmiError::DriverNotLoaded { .. })) if !driver => {
            return Err(CallOutcome::empty(&sources, e.to_string()));
        }
        Err(e) => return Err(CallOutcome::Unmeasured(Unmeasured::Table(e.text()))),
    };
    let nodes = devnode::count_cards(host);
    if table.cards.len() < nodes {
        return Err(CallOutcome::Unmeasured(Unmeasured::FewerCards {
            listed: table.cards.len(),
            nodes,
        }));
    }
    sources.table = Some(table);
    sources.mig_rows = mig_rows;
    match call(commands, &budget, smi::LIST_ARGV)
        .and_then(|t| smi::parse_list(&t).map_err(CallFailure::Smi))
    {
        Ok(list) => sources.list = list,
        Err(e) => {
            sources.list_failure = Some(e.text());
            sources.notes.push(smi_note(" -L", e));
        }
    }
    match call(commands, &budget, smi::QUERY_ARGV)
        .and_then(|t| smi::parse_query(&t).map_err(CallFailure::Smi))
    {
        Ok(query) => sources.query = Some(query),
        Err(e) => {
            sources.query_failure = Some(e.text());
            sources.notes.push(smi_note(" -q", e));
        }
    }
    if let Some(why) = unnamed(&sources) {
        return Err(CallOutcome::Unmeasured(why));
    }
    // The MIG listings only where a card is in MIG mode (elsewhere the tool refuses them).
    let in_mig = |m: Option<MigMode>| m == Some(MigMode::Enabled);
    let any_mig = sources
        .table
        .as_ref()
        .is_some_and(|t| t.cards.iter().any(|c| in_mig(c.mig_mode)))
        || sources
            .query
            .as_ref()
            .is_some_and(|q| q.cards.iter().any(|c| in_mig(c.mig_current)));
    if any_mig {
        for (argv, args, into) in [
            (
                smi::MIG_PROFILES_ARGV,
                " mig -lgip",
                &mut sources.mig_profiles,
            ),
            (
                smi::MIG_PLACEMENTS_ARGV,
                " mig -lgipp",
                &mut sources.mig_placements,
            ),
        ] {
            match call(commands, &budget, argv) {
                Ok(text) => *into = Some(text),
                Err(e) => sources.notes.push(smi_note(args, e)),
            }
        }
    }
    Ok(sources)
}

fn smi_note(args: &'static str, failure: CallFailure) -> Note {
    let reason = match failure {
        CallFailure::NotInstalled(_) => "not installed".to_string(),
        CallFailure::Smi(e) => e.to_string(),
        CallFailure::Other(e) => e,
    };
    Note::Smi { args, reason }
}

/// A pass that ends before any card is read.
#[derive(Debug)]
pub enum CallOutcome {
    /// No sign of a PPU: an empty section with no note.
    NotAPpuHost,
    /// No driver or no tool: an empty section with the reason.
    Empty {
        /// The T-Head functions the PCI bus shows.
        functions: usize,
        /// The module's version file, when it has one.
        driver_version: Option<String>,
        why: String,
    },
    /// Evidence of a driver but no enumeration, or none naming every card.
    Unmeasured(Unmeasured),
}

impl CallOutcome {
    fn empty(sources: &Sources, why: String) -> CallOutcome {
        CallOutcome::Empty {
            functions: sources.pci.len(),
            driver_version: sources.module_version.clone(),
            why,
        }
    }
}

/// One detection pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: DetectOptions) -> Detection {
    let m = Manufacturer::Thead;
    match read_sources(host, commands, &options) {
        Ok(sources) => {
            let mut section = join(&sources);
            if !section.accelerators.is_empty()
                && let Err(e) = devnode::require(host, devnode::CONTROL)
            {
                section.notes.push(
                    Note::NoControlNode {
                        reason: e.to_string(),
                    }
                    .to_string(),
                );
            }
            Ok(section)
        }
        Err(CallOutcome::NotAPpuHost) => Ok(ManufacturerInventory::empty(m)),
        Err(CallOutcome::Empty {
            functions,
            driver_version,
            why,
        }) => {
            let mut section = ManufacturerInventory::empty(m);
            section.driver_version = driver_version;
            if functions == 0 {
                section.notes.push(why);
            } else {
                section.notes.push(
                    Note::UnlistedFunctions {
                        count: functions,
                        why,
                    }
                    .to_string(),
                );
            }
            Ok(section)
        }
        Err(CallOutcome::Unmeasured(why)) => Err(DetectError::NotMeasured {
            manufacturer: m,
            reason: why.to_string(),
        }),
    }
}

/// `major.minor` of a version (`12.3.1` → `12.3`).
fn major_minor(version: &str) -> Option<String> {
    let mut parts = version.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some(format!("{major}.{minor}"))
}

/// The one join: sources in, the inventory section out (no host, no commands).
pub fn join(sources: &Sources) -> ManufacturerInventory {
    let mut section = ManufacturerInventory::empty(Manufacturer::Thead);
    let table = sources.table.clone().unwrap_or_default();
    let query = sources.query.clone().unwrap_or_default();
    section.driver_version = table
        .driver_version
        .clone()
        .or_else(|| query.driver_version.clone())
        .or_else(|| sources.module_version.clone());
    section.runtime_version = table
        .hggc_version
        .as_deref()
        .or(query.hggc_version.as_deref())
        .and_then(major_minor);
    section.management_version = table.smi_version.clone();
    let mut notes: Vec<Note> = sources.notes.clone();
    let profiles = read_listing(
        sources.mig_profiles.as_deref(),
        listing::parse_profiles,
        " mig -lgip",
        &mut notes,
    );
    let placements = read_listing(
        sources.mig_placements.as_deref(),
        listing::parse_placements,
        " mig -lgipp",
        &mut notes,
    );
    let mut ordinal: u32 = 0;
    for card in &table.cards {
        let listed = card
            .index
            .and_then(|i| sources.list.iter().find(|l| l.index == i));
        let queried = card
            .bus_id
            .and_then(|b| query.cards.iter().find(|q| q.bus_id == Some(b)));
        let Some(uuid) = uuid_of(card, &sources.list, Some(&query)) else {
            notes.push(Note::NoUuid {
                tool_index: card.index.unwrap_or(ordinal),
                bus: card
                    .bus_id
                    .map(|b| b.sysfs())
                    .unwrap_or_else(|| "no bus id".into()),
            });
            continue;
        };
        let mut a = Accelerator::new(ordinal, Source::Driver);
        a.uuid = Some(uuid.clone());
        a.product = card
            .name
            .clone()
            .or_else(|| queried.and_then(|q| q.product.clone()));
        a.bus_id = card.bus_id;
        a.memory_mib = card.memory_total_mib;
        a.numa_node = card.bus_id.and_then(|b| numa_of(&sources.pci, b));
        a.minor_number = queried.and_then(|q| q.minor);
        a.mig_mode = queried.and_then(|q| q.mig_current).or(card.mig_mode);
        a.ecc = card.ecc_uncorrected.map(|n| Ecc {
            volatile_uncorrected: Some(n),
            ..Ecc::default()
        });
        if a.mig_mode == Some(MigMode::Enabled) {
            a.grantable = Grantable::PartitionsOnly;
            notes.push(Note::PartitionsOnly {
                ordinal,
                uuid: uuid.clone(),
            });
            if let Some(row) = card.index {
                let who = format!("accelerator {ordinal} ({uuid})");
                let (offered, left_out) = listing::offered(
                    &profiles,
                    &placements,
                    row,
                    &published_profile,
                    &who,
                    "ppu-smi",
                );
                notes.extend(left_out.into_iter().map(Note::LeftOut));
                let (kept, doubled) = listing::without_duplicates(offered);
                notes.extend(
                    doubled
                        .into_iter()
                        .map(|name| Note::DuplicateProfile { ordinal, name }),
                );
                a.partition_profiles = kept;
            }
            if a.partition_profiles.is_empty() {
                notes.push(Note::NoProfiles {
                    ordinal,
                    uuid: uuid.clone(),
                });
            }
        }
        if let Some(pending) = queried.and_then(|q| q.mig_pending)
            && Some(pending) != a.mig_mode
        {
            notes.push(Note::PendingMode {
                ordinal,
                current: a.mig_mode,
                pending,
            });
        }
        if a.minor_number.is_none() {
            notes.push(Note::NoMinor {
                ordinal,
                uuid: uuid.clone(),
            });
        }
        a.mig_devices = listed
            .map(|l| {
                l.mig
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let device = m.device.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
                        // The MIG devices table names the same device by card and number.
                        let row = sources
                            .mig_rows
                            .iter()
                            .find(|r| r.card == Some(l.index) && r.device == Some(device));
                        MigDevice {
                            index: device,
                            gpu_instance_id: row.and_then(|r| r.gpu_instance),
                            compute_instance_id: row.and_then(|r| r.compute_instance),
                            uuid: m.uuid.clone(),
                            profile: m.profile.clone(),
                            memory_mib: row.and_then(|r| r.memory_total_mib),
                            multiprocessors: None,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        health::assess(&mut a, &[]);
        section.accelerators.push(a);
        ordinal += 1;
    }
    // Spec §1.2 step 12: a profile the cards of one group (name and memory) disagree on is
    // withheld from all of them, as Hygon does (one implementation for both).
    notes.extend(
        listing::withhold_disagreements(&mut section.accelerators)
            .into_iter()
            .map(|d| Note::GroupDisagrees {
                product: d.product.unwrap_or_else(|| "unnamed".into()),
                name: d.profile,
            }),
    );
    section.notes = notes.iter().map(ToString::to_string).collect();
    section
}

/// One MIG listing's rows; an unreadable one is a note naming `args` and no rows.
fn read_listing<T, E: fmt::Display>(
    text: Option<&str>,
    parse: fn(&str) -> Result<Vec<T>, E>,
    args: &'static str,
    notes: &mut Vec<Note>,
) -> Vec<T> {
    let (rows, reason) = listing::rows_or_reason(text, parse);
    if let Some(reason) = reason {
        notes.push(Note::Smi { args, reason });
    }
    rows
}

fn numa_of(pci: &[PciFunction], bus: BusId) -> Option<u32> {
    pci.iter()
        .find(|f| {
            BusId {
                function: 0,
                ..f.bus_id
            } == BusId { function: 0, ..bus }
        })
        .and_then(|f| f.numa_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_versions_keep_major_and_minor() {
        assert_eq!(major_minor("12.3.1").as_deref(), Some("12.3"));
        assert_eq!(major_minor("2.1-rc"), Some("2.1".into()));
        assert_eq!(major_minor("N/A"), None);
    }
}
