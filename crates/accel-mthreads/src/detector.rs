//! The Moore Threads detector: the kernel's view (the PCI functions of vendor `1ed5`, the
//! `/dev/mtgpu.<N>` nodes, the `mtgpu` module's version), then `mthreads-gmi` (its table for the
//! versions, names, bus ids, device types and memory; its `-q` report for the UUIDs and core
//! counts), joined by PCI address, the tool's index only where a row has no bus id (a note).
//! A guest's virtual device is skipped (spec §2.1), named in a note. There is no runtime version
//! (no MUSA version is read, spec §2.3).
//!
//! **Health** (spec §6): unhealthy iff the uncorrected volatile DRAM ECC counter is above 0,
//! and only where it was read. The counter comes from the `-q` report the pass already runs
//! (`gmi::GmiEcc`, no third call) into the accelerator's `ecc`, and the shared health rule
//! (`accel_core::health`) decides, in `detect` as in the daemon. A GPU whose report prints no
//! counter has no ECC reading (`ecc: None`), never a 0. The counter is the driver's, held until
//! the GPU is reset or the driver reloaded: each pass reads it afresh, so a restarted daemon
//! finds the GPU still out and a reset or a reboot brings it back; nothing goes to
//! `faults.json`.
//!
//! **The identity queries are both forms.** `-q` alone names each GPU's UUID; the table lists
//! the GPUs with their device type (a guest's virtual device is told only there) and memory
//! (which sizes the sliced family). Without either, a pass would put GPUs without identity, a
//! virtual device as a card, or cards without memory in place of the known ones.
//!
//! Answers: nothing on the bus, no node and no tool → `Ok(empty)`; the driver there (functions
//! or nodes on the host, or the table listing GPUs) but the tool not installed, or a form silent
//! past its deadline, exiting non-zero, printing what cannot be read or listing fewer GPUs than
//! the bus shows → `Err(NotMeasured)`, the reason every failure of the pass (the daemon keeps
//! its last good inventory and its grants); GPUs listed → `Ok(list)`.

use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_backend::vendor_runtime::{board, bus_functions, numbered_nodes};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{
    Accelerator, DetectError, Detection, Ecc, Grantable, ManufacturerInventory, Source,
};
use accel_core::manufacturer::PciVendorId;
use accel_host::pci::{PciClassPrefixes, PciFunction};
use accel_host::{Commands, Host, run_bounded};

use crate::gmi::{self, GmiEcc, GmiTable, QueryGpu, TableGpu};

/// The per-card device nodes (`/dev/mtgpu.<N>`), as a prefix under `/dev`.
pub const CARD_NODE_PREFIX: &str = "mtgpu.";
/// Where the `mtgpu` kernel module tells its version.
pub const DRIVER_VERSION_FILE: &str = "/sys/module/mtgpu/version";
/// The module's directory: the driver (and the sGPU support slices rely on) is loaded.
pub const DRIVER_MODULE_DIR: &str = "/sys/module/mtgpu";

/// What a pass could not learn, each worded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    NoTool,
    ToolFailed(String),
    /// A form lists fewer GPUs than the host shows.
    TooFew {
        argv: &'static [&'static str],
        listed: usize,
        shown: usize,
    },
    NoUuid {
        index: u32,
        bus: Option<BusId>,
    },
    JoinedByIndex {
        index: u32,
    },
    Virtual {
        bus: Option<BusId>,
        device_type: String,
    },
    Unlisted {
        bus: BusId,
    },
}

fn bus_text(bus: &Option<BusId>) -> String {
    bus.map_or_else(|| "no bus id".to_string(), |b| b.sysfs())
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::NoTool => write!(
                f,
                "mthreads-gmi: not found: the MT driver's mthreads-gmi is not installed on the host"
            ),
            Note::ToolFailed(why) => write!(f, "mthreads-gmi: {why}"),
            Note::TooFew {
                argv,
                listed,
                shown,
            } => write!(
                f,
                "mthreads-gmi: {}: lists {listed} GPU(s) where the host shows {shown}",
                argv.join(" ")
            ),
            Note::NoUuid { index, bus } => write!(
                f,
                "accelerator {index} ({}) reports no UUID, so it cannot be granted",
                bus_text(bus)
            ),
            Note::JoinedByIndex { index } => write!(
                f,
                "accelerator {index}: mthreads-gmi's rows carry no bus id, joined by the tool's index"
            ),
            Note::Virtual { bus, device_type } => write!(
                f,
                "{}: skipping virtual device (device type {device_type:?})",
                bus_text(bus)
            ),
            Note::Unlisted { bus } => write!(
                f,
                "{}: a Moore Threads function on the PCI bus that mthreads-gmi does not list",
                bus.sysfs()
            ),
        }
    }
}

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    pub pci_classes: PciClassPrefixes,
    pub vendor_ids: Vec<PciVendorId>,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            pci_classes: PciClassPrefixes::default(),
            vendor_ids: Manufacturer::Mthreads.default_constants().pci_vendor_ids,
        }
    }
}

/// What the kernel shows.
#[derive(Debug, Clone, Default)]
pub struct Kernel {
    pub functions: Vec<PciFunction>,
    pub card_nodes: Vec<u32>,
    pub driver_version: Option<String>,
}

/// Reads the kernel's view.
pub fn read_kernel(host: &dyn Host, options: &DetectOptions) -> Kernel {
    Kernel {
        functions: bus_functions(host, &options.pci_classes, &options.vendor_ids),
        card_nodes: numbered_nodes(host, CARD_NODE_PREFIX),
        driver_version: host
            .read_to_string(DRIVER_VERSION_FILE)
            .ok()
            .and_then(|t| accel_backend::text::dotted_version(&t).map(str::to_string)),
    }
}

/// What mthreads-gmi said, form by form.
#[derive(Debug, Clone, Default)]
pub struct Tool {
    pub installed: bool,
    pub table: Option<GmiTable>,
    pub query: Option<Vec<QueryGpu>>,
    pub notes: Vec<Note>,
}

fn ask<T>(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[&str],
    parse: impl Fn(&str) -> Result<T, gmi::GmiError>,
    notes: &mut Vec<Note>,
) -> Option<T> {
    let answered = budget
        .next()
        .map_err(|e| e.to_string())
        .and_then(|deadline| run_bounded(commands, argv, deadline).map_err(|e| e.to_string()))
        .and_then(|out| parse(&out.stdout_text()).map_err(|e| e.to_string()));
    answered
        .map_err(|why| notes.push(Note::ToolFailed(why)))
        .ok()
}

/// Runs both forms within one pass budget.
pub fn ask_tool(commands: &dyn Commands, deadlines: Deadlines) -> Tool {
    let mut tool = Tool {
        installed: commands.is_installed(gmi::TABLE_ARGV[0]),
        ..Tool::default()
    };
    if tool.installed {
        let budget = Budget::start(deadlines);
        tool.table = ask(
            commands,
            &budget,
            gmi::TABLE_ARGV,
            gmi::parse_table,
            &mut tool.notes,
        );
        tool.query = ask(
            commands,
            &budget,
            gmi::QUERY_ARGV,
            gmi::parse_query,
            &mut tool.notes,
        );
    }
    tool
}

/// One detection pass.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Detection {
    let kernel = read_kernel(host, options);
    // A tool that is not installed is asked nothing.
    answer(&kernel, &ask_tool(commands, options.deadlines))
}

/// The pass's answer from what was read: nothing on the host and no tool is an empty answer,
/// else [`join`]. Doctor reads the same answers, so the tool runs once.
pub fn answer(kernel: &Kernel, tool: &Tool) -> Detection {
    let evidence = !kernel.functions.is_empty() || !kernel.card_nodes.is_empty();
    if !evidence && !tool.installed {
        return Ok(ManufacturerInventory::empty(Manufacturer::Mthreads));
    }
    join(kernel, tool)
}

/// Why the pass is not measured, worded: the tool not installed, a form unanswered or
/// unreadable (with every failure of the pass, in the order asked), or a form listing no GPU, or
/// fewer than the bus shows.
fn unmeasured(kernel: &Kernel, tool: &Tool) -> Option<String> {
    if !tool.installed {
        return Some(Note::NoTool.to_string());
    }
    let mut notes = tool.notes.clone();
    if let (Some(table), Some(query)) = (&tool.table, &tool.query) {
        // The bus is the count to check against; nodes only tell that there is at least one GPU.
        let shown = kernel
            .functions
            .len()
            .max(kernel.card_nodes.len())
            .max(table.gpus.len());
        let too_few = [
            (gmi::TABLE_ARGV, table.gpus.len()),
            (gmi::QUERY_ARGV, query.len()),
        ]
        .into_iter()
        .find(|(_, listed)| *listed < kernel.functions.len() || (*listed == 0 && shown > 0));
        let (argv, listed) = too_few?;
        notes.push(Note::TooFew {
            argv,
            listed,
            shown,
        });
    }
    Some(
        notes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// The report's DRAM counters as the health rule reads them (spec §6: the volatile
/// uncorrected one decides).
fn ecc_of(ecc: &GmiEcc) -> Ecc {
    Ecc {
        volatile_uncorrected: ecc.volatile_uncorrected,
        volatile_corrected: ecc.volatile_corrected,
        aggregate_uncorrected: ecc.aggregate_uncorrected,
        aggregate_corrected: ecc.aggregate_corrected,
        ..Ecc::default()
    }
}

/// The pure join: the kernel's view and the tool's answers in, the section out, or not measured
/// where the host shows the driver ([`unmeasured`]).
pub fn join(kernel: &Kernel, tool: &Tool) -> Detection {
    let m = Manufacturer::Mthreads;
    let mut section = ManufacturerInventory::empty(m);
    let mut notes = tool.notes.clone();
    if let Some(reason) = unmeasured(kernel, tool) {
        let listed_by_table = tool.table.as_ref().is_some_and(|t| !t.gpus.is_empty());
        if !kernel.functions.is_empty() || !kernel.card_nodes.is_empty() || listed_by_table {
            return Err(DetectError::NotMeasured {
                manufacturer: m,
                reason,
            });
        }
        // No driver anywhere: the tool's failure is only a note.
        section.notes.push(reason);
        return Ok(section);
    }
    section.driver_version = tool
        .table
        .as_ref()
        .and_then(|t| t.driver_version.clone())
        .or_else(|| kernel.driver_version.clone());
    section.management_version = tool.table.as_ref().and_then(|t| t.tool_version.clone());
    let table: &[TableGpu] = tool
        .table
        .as_ref()
        .map(|t| t.gpus.as_slice())
        .unwrap_or_default();
    let query: &[QueryGpu] = tool.query.as_deref().unwrap_or_default();
    // The table's rows: only they tell a virtual device.
    for (tool_index, bus) in table.iter().map(|g| (g.index, g.bus_id)) {
        let bus = bus.map(board);
        let matches = |b: Option<BusId>, i: Option<u32>| match bus {
            Some(_) => b.map(board) == bus,
            None => tool_index.is_some() && i == tool_index,
        };
        let t = table.iter().find(|g| matches(g.bus_id, g.index));
        let q = query.iter().find(|g| matches(g.bus_id, g.index));
        if let Some(t) = t.filter(|t| t.is_virtual()) {
            notes.push(Note::Virtual {
                bus,
                device_type: t.device_type.clone().unwrap_or_default(),
            });
            continue;
        }
        let index = u32::try_from(section.accelerators.len()).unwrap_or(u32::MAX);
        if bus.is_none() {
            notes.push(Note::JoinedByIndex { index });
        }
        let mut a = Accelerator::new(index, Source::Driver);
        a.bus_id = bus.or_else(|| q.and_then(|g| g.bus_id).map(board));
        a.uuid = q.and_then(|g| g.uuid.clone());
        a.product = t
            .and_then(|g| g.name.clone())
            .or_else(|| q.and_then(|g| g.name.clone()));
        a.memory_mib = t.and_then(|g| g.memory_total_mib);
        a.cores = q.and_then(|g| g.cores);
        a.numa_node = kernel
            .functions
            .iter()
            .find(|f| Some(f.bus_id) == a.bus_id)
            .and_then(|f| f.numa_node);
        if a.uuid.is_none() {
            a.grantable = Grantable::Nothing;
            notes.push(Note::NoUuid {
                index,
                bus: a.bus_id,
            });
        }
        a.ecc = q.and_then(|g| g.ecc.as_ref()).map(ecc_of);
        accel_core::health::assess(&mut a, &[]);
        section.accelerators.push(a);
    }
    for f in &kernel.functions {
        let listed = section
            .accelerators
            .iter()
            .any(|a| a.bus_id == Some(f.bus_id));
        let skipped = table
            .iter()
            .any(|t| t.is_virtual() && t.bus_id.map(board) == Some(f.bus_id));
        if !listed && !skipped {
            notes.push(Note::Unlisted { bus: f.bus_id });
        }
    }
    section.notes = notes.iter().map(ToString::to_string).collect();
    Ok(section)
}
