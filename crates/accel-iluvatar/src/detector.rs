//! The Iluvatar detector: the kernel's view first (the PCI functions of vendor `1e3e`, the
//! `/dev/iluvatar<N>` nodes and `/dev/itrctl`, the driver module's version), then `ixsmi` (its
//! default table for the versions, names, bus ids and memory; its CSV query for the UUIDs and
//! the compute capability), joined by PCI address — the query's rows to the table's, both to the
//! kernel's functions — and only by the tool's index where a row has no bus id, with a note.
//!
//! **The identity query is the CSV query** ([`ixsmi::QUERY_ARGV`]): it alone names each GPU's
//! UUID, and it also gives the name, bus id and memory. The table adds only the banner's
//! versions (and the name it prints), so a failed table is a note; so is a failed compute-cap
//! query, asked apart because an old IX-ML refuses it.
//!
//! Answers: no function on the bus, no device node and no ixsmi → `Ok(empty)` (no driver);
//! the driver there (functions or nodes on the host, or ixsmi's table listing GPUs) but ixsmi
//! not installed, or its query silent past its deadline, exiting non-zero, printing what cannot
//! be read or listing fewer GPUs than the bus shows → `Err(NotMeasured)`, the reason every
//! ixsmi failure of the pass, so the daemon keeps its last good inventory and its grants; GPUs
//! listed → `Ok(list)`, every failed part a note.

use std::fmt;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_backend::vendor_runtime::{board, bus_functions, numbered_nodes};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{
    Accelerator, DetectError, Detection, Grantable, ManufacturerInventory, Source,
};
use accel_core::manufacturer::PciVendorId;
use accel_host::pci::{PciClassPrefixes, PciFunction};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::ixsmi::{self, ComputeCap, IxsmiTable, QueryGpu};

/// The per-card device nodes (`/dev/iluvatar<minor>`), as a prefix under `/dev`.
pub const CARD_NODE_PREFIX: &str = "iluvatar";
/// The node every container of the runtime gets beside its cards.
pub const CONTROL_NODE: &str = "/dev/itrctl";
/// Where the kernel module tells its version, tried in order (the corex driver's module).
pub const DRIVER_VERSION_FILES: &[&str] = &[
    "/sys/module/iluvatar/version",
    "/sys/module/bi_driver/version",
];

/// What a pass could not learn, each worded once (detector, doctor and tests use these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// ixsmi is not on the host.
    NoTool,
    /// One ixsmi form failed or printed something else.
    ToolFailed(String),
    /// A GPU the tool lists has no UUID (the query failed or printed none).
    NoUuid { index: u32, bus: Option<BusId> },
    /// A tool row without a bus id was joined by the tool's index.
    JoinedByIndex { index: u32 },
    /// A board on the bus that ixsmi does not list.
    Unlisted { bus: BusId },
    /// The identity query lists fewer GPUs than the host shows.
    TooFew { listed: usize, shown: usize },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::NoTool => write!(
                f,
                "ixsmi: not found: the corex SDK's ixsmi is not installed on the host"
            ),
            Note::ToolFailed(why) => write!(f, "ixsmi: {why}"),
            Note::NoUuid { index, bus } => write!(
                f,
                "accelerator {index} ({}) reports no UUID, so it cannot be granted",
                bus.map_or_else(|| "no bus id".to_string(), |b| b.sysfs())
            ),
            Note::JoinedByIndex { index } => write!(
                f,
                "accelerator {index}: ixsmi's rows carry no bus id, joined by the tool's index"
            ),
            Note::Unlisted { bus } => write!(
                f,
                "{}: an Iluvatar function on the PCI bus that ixsmi does not list",
                bus.sysfs()
            ),
            Note::TooFew { listed, shown } => write!(
                f,
                "ixsmi: {}: lists {listed} GPU(s) where the host shows {shown}",
                ixsmi::QUERY_ARGV.join(" ")
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
            vendor_ids: Manufacturer::Iluvatar.default_constants().pci_vendor_ids,
        }
    }
}

/// What the kernel shows.
#[derive(Debug, Clone, Default)]
pub struct Kernel {
    pub functions: Vec<PciFunction>,
    pub card_nodes: Vec<u32>,
    pub control_node: bool,
    pub driver_version: Option<String>,
}

/// Reads the kernel's view.
pub fn read_kernel(host: &dyn Host, options: &DetectOptions) -> Kernel {
    Kernel {
        functions: bus_functions(host, &options.pci_classes, &options.vendor_ids),
        card_nodes: numbered_nodes(host, CARD_NODE_PREFIX),
        control_node: host.exists(CONTROL_NODE),
        driver_version: DRIVER_VERSION_FILES.iter().find_map(|p| {
            let text = host.read_to_string(p).ok()?;
            accel_backend::text::dotted_version(&text).map(str::to_string)
        }),
    }
}

/// What ixsmi said, form by form.
#[derive(Debug, Clone, Default)]
pub struct Tool {
    pub installed: bool,
    pub table: Option<IxsmiTable>,
    pub query: Option<Vec<QueryGpu>>,
    pub caps: Vec<ComputeCap>,
    pub notes: Vec<Note>,
}

fn ask<T>(
    commands: &dyn Commands,
    budget: &Budget,
    argv: &[&str],
    parse: impl Fn(&str) -> Result<T, ixsmi::IxsmiError>,
    notes: &mut Vec<Note>,
) -> Option<T> {
    let deadline = match budget.next() {
        Ok(d) => d,
        Err(e) => {
            notes.push(Note::ToolFailed(e.to_string()));
            return None;
        }
    };
    let answered = run_bounded(commands, argv, deadline)
        .map_err(|e: RunFailure| e.to_string())
        .and_then(|out| parse(&out.stdout_text()).map_err(|e| e.to_string()));
    match answered {
        Ok(value) => Some(value),
        Err(why) => {
            notes.push(Note::ToolFailed(why));
            None
        }
    }
}

/// Runs ixsmi's forms within one pass budget: the table, the identity query, then (when the
/// identity query answered) the compute capability.
pub fn ask_tool(commands: &dyn Commands, deadlines: Deadlines) -> Tool {
    let mut tool = Tool {
        installed: commands.is_installed(ixsmi::TABLE_ARGV[0]),
        ..Tool::default()
    };
    if !tool.installed {
        return tool;
    }
    let budget = Budget::start(deadlines);
    tool.table = ask(
        commands,
        &budget,
        ixsmi::TABLE_ARGV,
        ixsmi::parse_table,
        &mut tool.notes,
    );
    tool.query = ask(
        commands,
        &budget,
        ixsmi::QUERY_ARGV,
        ixsmi::parse_query,
        &mut tool.notes,
    );
    // Without the identity query the pass is not measured: the compute capability is not asked.
    if tool.query.is_some() {
        tool.caps = ask(
            commands,
            &budget,
            ixsmi::COMPUTE_CAP_ARGV,
            ixsmi::parse_compute_caps,
            &mut tool.notes,
        )
        .unwrap_or_default();
    }
    tool
}

/// One detection pass.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Detection {
    let kernel = read_kernel(host, options);
    let evidence = !kernel.functions.is_empty() || !kernel.card_nodes.is_empty();
    if !evidence && !commands.is_installed(ixsmi::TABLE_ARGV[0]) {
        return Ok(ManufacturerInventory::empty(Manufacturer::Iluvatar));
    }
    let tool = ask_tool(commands, options.deadlines);
    join(&kernel, &tool)
}

/// Why the pass is not measured, worded: ixsmi not installed, its identity query unanswered or
/// unreadable (with every other ixsmi failure of the pass, in the order asked), or listing no
/// GPU, or fewer than the bus shows.
fn unmeasured(kernel: &Kernel, tool: &Tool) -> Option<String> {
    if !tool.installed {
        return Some(Note::NoTool.to_string());
    }
    let mut notes = tool.notes.clone();
    if let Some(query) = &tool.query {
        // The bus is the count to check against; nodes and the table only tell that there is
        // at least one GPU.
        let table_gpus = tool.table.as_ref().map_or(0, |t| t.gpus.len());
        let shown = kernel
            .functions
            .len()
            .max(kernel.card_nodes.len())
            .max(table_gpus);
        let listed = query.len();
        if listed >= kernel.functions.len() && (listed > 0 || shown == 0) {
            return None;
        }
        notes.push(Note::TooFew { listed, shown });
    }
    Some(
        notes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// The pure join: the kernel's view and the tool's answers in, the section out, or not measured
/// where the host shows the driver ([`unmeasured`]).
pub fn join(kernel: &Kernel, tool: &Tool) -> Detection {
    let m = Manufacturer::Iluvatar;
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
    let banner = tool
        .table
        .as_ref()
        .map(|t| t.banner.clone())
        .unwrap_or_default();
    section.driver_version = banner
        .driver_version
        .or_else(|| kernel.driver_version.clone());
    section.runtime_version = banner.cuda_version;
    section.management_version = banner.tool_version;
    let table = tool
        .table
        .as_ref()
        .map(|t| t.gpus.as_slice())
        .unwrap_or_default();
    let query = tool.query.as_deref().unwrap_or_default();
    // The tool's GPUs are the identity query's rows (they carry the UUID).
    for (position, (tool_index, bus)) in query.iter().map(|g| (g.index, g.bus_id)).enumerate() {
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        let bus = bus.map(board);
        let by_bus = |b: Option<BusId>| bus.is_some() && b.map(board) == bus;
        let by_index = |i: Option<u32>| bus.is_none() && tool_index.is_some() && i == tool_index;
        let q = query.iter().find(|g| by_bus(g.bus_id) || by_index(g.index));
        let t = table
            .iter()
            .find(|g| by_bus(g.bus_id))
            .or_else(|| table.iter().find(|g| by_index(g.index)));
        if bus.is_none() && tool_index.is_some() {
            notes.push(Note::JoinedByIndex { index });
        }
        let bus = bus.or_else(|| t.and_then(|g| g.bus_id).map(board));
        let function = kernel.functions.iter().find(|f| Some(f.bus_id) == bus);
        let mut a = Accelerator::new(index, Source::Driver);
        a.bus_id = bus;
        a.uuid = q.and_then(|g| g.uuid.clone());
        a.product = t
            .and_then(|g| g.name.clone())
            .or_else(|| q.and_then(|g| g.name.clone()));
        a.memory_mib = q
            .and_then(|g| g.memory_mib)
            .or_else(|| t.and_then(|g| g.memory_total_mib));
        a.numa_node = function.and_then(|f| f.numa_node);
        a.compute_capability = tool
            .caps
            .iter()
            .find(|c| {
                (bus.is_some() && c.bus_id.map(board) == bus)
                    || (c.bus_id.is_none() && c.index.is_some() && c.index == tool_index)
            })
            .and_then(|c| c.compute_cap.clone());
        if a.uuid.is_none() {
            a.grantable = Grantable::Nothing;
            notes.push(Note::NoUuid { index, bus });
        }
        section.accelerators.push(a);
    }
    for f in &kernel.functions {
        if !section
            .accelerators
            .iter()
            .any(|a| a.bus_id == Some(f.bus_id))
        {
            notes.push(Note::Unlisted { bus: f.bus_id });
        }
    }
    section.notes = notes.iter().map(ToString::to_string).collect();
    Ok(section)
}
