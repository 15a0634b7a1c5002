//! The AMD detector: the kernel's views first (KFD topology, DRM sysfs), then the vendor tool
//! (`amd-smi static --json` and `version --json`, or `rocm-smi --showallinfo --json` where
//! amd-smi is missing), joined by PCI address — never by a tool's index (HAZARDS.md item 24).
//! No ROCm library is loaded; every command runs through accel-host's [`Commands`] with the
//! per-query deadline, and every source may be missing.
//!
//! **What an accelerator is.** One PCI board (function 0). A board the driver has split into
//! compute partitions (MI300-class DPX/QPX/CPX) shows several KFD nodes, render nodes and
//! amd-smi processors that share one unique id; it is listed **once**, with its partitioning,
//! and feeds no family (there is no AMD partition family, and granting the board's first
//! partition as the whole card would hand a container an eighth of what it asked for). The
//! described system lists whole cards only; this keeps that and refuses the rest explicitly,
//! naming the board in a note. Two boards never share an id.
//!
//! **The identity query** is `amd-smi static --json` (each processor's ASIC serial), or
//! `rocm-smi --showallinfo --json` where amd-smi is not installed. The kernel names the boards
//! too: KFD's `unique_id` (and the DRM device's `unique_id`) is the same number, the driver's
//! own, so where the kernel answers for every board (a `unique_id` property; 0 is the driver
//! saying it has none, as on an APU, which no tool improves on), a tool that is missing, hangs,
//! exits non-zero or prints what cannot be read is a note, and every board keeps its index and
//! UUID. Where the kernel gives no answer for some board, that failure — or an answer that
//! lists no GPU for such a board — is a pass not measured ([`Unmeasured`]): the last good
//! inventory and its grants stand, never a board without the identity the good pass gave it.
//! `amd-smi version` gives no identity; its failure is a note.
//!
//! **Links.** A board's `peers` carry `XGMI` for every board its KFD node links to by XGMI
//! (`io_links`/`p2p_links` of type 11) and every board of its XGMI hive (the same non-zero
//! `hive_id`): the links read first, then joined by the pure [`xgmi_peers`]. The multi-GPU
//! preference weighs them as it weighs NVLink.
//!
//! Answers: no amdgpu card and no KFD GPU node → `Ok(empty)` (no driver); amdgpu cards but no
//! KFD topology → `Ok(empty)` with a note (ROCm cannot use them); boards found → `Ok(list)`,
//! unless the identity query failed where the kernel names not every board (`Err`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::detect::Budget;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{
    Accelerator, ComputeGeometry, DetectError, Detection, DrmNodes, ManufacturerInventory,
    Partitioning, PeerLink, Source,
};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::amdsmi::{self, StaticGpu, Versions};
use crate::drm::{self, Amdgpu as _, DrmCard};
use crate::kfd::{self, KfdBoard};
use crate::rocmsmi::{self, RocmSmi};
use crate::text::{product_name, rocr_uuid};

/// The amd-smi queries the detector runs.
pub const AMD_SMI_STATIC: &[&str] = &["amd-smi", "static", "--json"];
pub const AMD_SMI_VERSION: &[&str] = &["amd-smi", "version", "--json"];

/// Where the ROCm version is read when the tool does not say (`<rocm>/.info/version`).
pub const ROCM_VERSION_FILES: &[&str] = &[
    "/opt/rocm/.info/version",
    "/opt/rocm/.info/version-rocm",
    "/opt/rocm/.info/version-dev",
    "/opt/rocm/.info/version-libs",
];

/// The family name HSA reports for a gfx target (its `ASIC_FAMILY_ID` names), derived from the
/// target because no ROCm library is loaded here; an unknown target has none.
pub fn family(gfx: &str) -> Option<&'static str> {
    let rest = gfx.strip_prefix("gfx")?;
    Some(match rest {
        "902" | "909" | "90c" => "Raven",
        r if r.starts_with("9") && r.len() == 3 => "Arctic Islands",
        "1033" => "Van Gogh",
        "1035" => "Yellow Carp",
        "1036" => "GC 10.3.6",
        "1037" => "GC 10.3.7",
        r if r.starts_with("10") && r.len() == 4 => "Navi",
        "1103" => "GC 11.0.1",
        r if r.starts_with("115") && r.len() == 4 => "GC 11.5.0",
        r if r.starts_with("11") && r.len() == 4 => "GC 11.0.0",
        r if r.starts_with("12") && r.len() == 4 => "GC 12.0.0",
        r if r.starts_with("8") && r.len() == 3 => "Volcanic Islands",
        _ => return None,
    })
}

/// What the detector is given.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    /// Each vendor-tool query's deadline and the whole pass's (one `Budget` across the pass).
    pub deadlines: Deadlines,
    /// The PCI vendor ids that are AMD's (`GPUSTACK_AMD_PCI_VENDOR_ID`): a KFD node of another
    /// vendor (a Hygon DCU runs a fork of this driver stack) is not AMD's.
    pub vendor_ids: Vec<u16>,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            deadlines: Deadlines::default(),
            vendor_ids: vec![0x1002],
        }
    }
}

/// Why a pass is not measured, worded once (the reason of [`DetectError::NotMeasured`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmeasured {
    /// The KFD topology could not be read.
    Topology(String),
    /// The identity query gave no answer for some boards (`why`: its failure, naming the argv,
    /// or which board it lists nothing for), and the kernel gives none for them either.
    Unnamed {
        why: String,
        unnamed: usize,
        boards: usize,
    },
}

impl std::fmt::Display for Unmeasured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unmeasured::Topology(e) => write!(f, "the KFD topology cannot be read: {e}"),
            Unmeasured::Unnamed {
                why,
                unnamed,
                boards,
            } => write!(
                f,
                "{why}, and the KFD topology has no unique id for {unnamed} of the {boards} board(s)"
            ),
        }
    }
}

/// Neither identity tool is installed.
const NO_TOOL: &str = "neither amd-smi nor rocm-smi is installed";

/// What the vendor tool said, whichever answered.
#[derive(Debug, Default)]
struct Tool {
    gpus: Vec<StaticGpu>,
    rocm_smi: Option<RocmSmi>,
    versions: Versions,
    notes: Vec<String>,
    /// The identity query that answered (its argv).
    answered: Option<String>,
    /// Why no identity query answered, in one line naming the argv.
    failure: Option<String>,
}

/// A tool's standard output, or its failure in the one wording of `accel_host::run_bounded`
/// (exit 127, the image wrapper's answer on a host without the tool, is "not installed").
fn run(commands: &dyn Commands, argv: &[&str], deadline: Duration) -> Result<String, String> {
    run_bounded(commands, argv, deadline)
        .map(|out| out.stdout_text())
        .map_err(|e| e.to_string())
}

/// The next call's deadline within the pass's budget, or the note that the pass ran out.
fn next_deadline(budget: &Budget, tool: &mut Tool) -> Option<Duration> {
    match budget.next() {
        Ok(deadline) => Some(deadline),
        Err(e) => {
            let note = format!("amd-smi: {e}");
            if tool.answered.is_none() && tool.failure.is_none() {
                tool.failure = Some(note.clone());
            }
            tool.notes.push(note);
            None
        }
    }
}

fn ask_tool(commands: &dyn Commands, options: &DetectOptions) -> Tool {
    let mut tool = Tool::default();
    let budget = Budget::start(options.deadlines);
    if commands.is_installed("amd-smi") {
        let Some(deadline) = next_deadline(&budget, &mut tool) else {
            return tool;
        };
        match run_bounded(commands, AMD_SMI_STATIC, deadline) {
            Err(RunFailure::NotInstalled { .. }) => {
                tool.notes
                    .push("amd-smi is not installed on the host".into());
                return ask_rocm_smi(commands, &budget, tool);
            }
            answered => {
                let text = answered
                    .map(|out| out.stdout_text())
                    .map_err(|e| e.to_string());
                // The note keeps its wording (a parse error after `amd-smi: `); the reason is
                // the failure's own text, which names the argv.
                let read = text.map_err(|e| (e.clone(), e)).and_then(|t| {
                    amdsmi::parse_static(&t).map_err(|e| (format!("amd-smi: {e}"), e.to_string()))
                });
                match read {
                    Ok(gpus) => {
                        if gpus.iter().any(|g| g.identity_unreadable) {
                            tool.notes.push(
                                "amd-smi cannot read the GPUs' identity (no access to /dev/kfd or the render nodes: run as root or in the render group)".into(),
                            );
                        }
                        tool.gpus = gpus;
                        tool.answered = Some(AMD_SMI_STATIC.join(" "));
                    }
                    Err((note, failure)) => {
                        tool.notes.push(note);
                        tool.failure = Some(failure);
                    }
                }
            }
        }
        let Some(deadline) = next_deadline(&budget, &mut tool) else {
            return tool;
        };
        match run(commands, AMD_SMI_VERSION, deadline) {
            Ok(t) => match amdsmi::parse_version_json(&t) {
                Ok(v) => tool.versions = v,
                Err(e) => match amdsmi::parse_version_text(&t) {
                    Some(v) => tool.versions = v,
                    None => tool.notes.push(format!("amd-smi: {e}")),
                },
            },
            Err(e) => tool.notes.push(e),
        }
        return tool;
    }
    ask_rocm_smi(commands, &budget, tool)
}

/// The fallback: `rocm-smi --showallinfo --json`.
fn ask_rocm_smi(commands: &dyn Commands, budget: &Budget, mut tool: Tool) -> Tool {
    if commands.is_installed("rocm-smi") {
        let Some(deadline) = next_deadline(budget, &mut tool) else {
            return tool;
        };
        match run(commands, rocmsmi::ARGV, deadline)
            .and_then(|t| rocmsmi::parse(&t).map_err(|e| format!("rocm-smi: {e}")))
        {
            Ok(doc) => {
                tool.versions.amdgpu = doc.driver_version.clone();
                tool.rocm_smi = Some(doc);
                tool.answered = Some(rocmsmi::ARGV.join(" "));
            }
            Err(e) => {
                tool.notes.push(e.clone());
                tool.failure = Some(e);
            }
        }
        return tool;
    }
    tool.notes
        .push(format!("{NO_TOOL}: facts from the kernel only"));
    tool.failure = Some(NO_TOOL.into());
    tool
}

fn rocm_version_file(host: &dyn Host) -> Option<String> {
    ROCM_VERSION_FILES.iter().find_map(|p| {
        host.read(p)
            .ok()
            .and_then(|b| crate::text::clean(&String::from_utf8_lossy(&b)))
    })
}

/// One detection pass over `host`.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: DetectOptions) -> Detection {
    let m = Manufacturer::Amd;
    let topology = match kfd::read_topology(host, kfd::TOPOLOGY_DIR) {
        Ok(t) => t,
        Err(e) => return not_measured(Unmeasured::Topology(e.to_string())),
    };
    let cards: Vec<DrmCard> = drm::read_cards(host, drm::CLASS_DIR)
        .into_iter()
        .filter(DrmCard::is_amdgpu)
        .collect();
    let boards: Vec<KfdBoard> = topology
        .as_deref()
        .map(kfd::boards)
        .unwrap_or_default()
        .into_iter()
        .filter(|b| {
            b.primary()
                .and_then(kfd::KfdNode::vendor_id)
                .is_none_or(|v| options.vendor_ids.contains(&v))
        })
        .collect();
    let mut section = ManufacturerInventory::empty(m);
    if boards.is_empty() {
        if !cards.is_empty() {
            section.notes.push(format!(
                "amdgpu drives {} card(s) but the kernel shows no KFD GPU node ({}): ROCm cannot use them",
                cards.len(),
                kfd::TOPOLOGY_DIR
            ));
        }
        return Ok(section);
    }
    let links: BTreeMap<u32, Vec<u32>> = boards
        .iter()
        .filter_map(KfdBoard::primary)
        .map(|node| {
            let peers = kfd::xgmi_peers(host, kfd::TOPOLOGY_DIR, node.id);
            (node.id, peers)
        })
        .collect();
    let tool = ask_tool(commands, &options);
    section.notes.extend(tool.notes.iter().cloned());
    section.driver_version = tool
        .versions
        .amdgpu
        .clone()
        .or_else(|| tool.gpus.iter().find_map(|g| g.driver_version.clone()));
    let rocm = tool
        .versions
        .rocm
        .clone()
        .or_else(|| rocm_version_file(host));
    section.runtime_version = rocm.as_deref().and_then(amdsmi::major_minor);
    section.management_version = tool.versions.library.clone();

    let by_bus = |bus: BusId| {
        cards
            .iter()
            .find(|c| c.bus_id.map(|b| BusId { function: 0, ..b }) == Some(bus))
    };
    let mut seen_ids: BTreeMap<String, u32> = BTreeMap::new();
    // Boards no source names and the identity query said nothing of.
    let mut unanswered: Vec<BusId> = Vec::new();
    for (index, board) in boards.iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let card = by_bus(board.bus_id);
        let smi: Vec<&StaticGpu> = tool
            .gpus
            .iter()
            .filter(|g| g.bus_id.map(|b| BusId { function: 0, ..b }) == Some(board.bus_id))
            .collect();
        let rsmi = tool.rocm_smi.as_ref().and_then(|doc| {
            doc.cards
                .iter()
                .find(|c| c.bus_id == Some(board.bus_id))
                .or_else(|| {
                    card.and_then(|d| {
                        doc.cards
                            .iter()
                            .find(|c| c.card == d.card && c.bus_id.is_none())
                    })
                })
        });
        let mut a = accelerator(index, board, card, &smi, rsmi);
        if a.uuid.is_none() && smi.is_empty() && rsmi.is_none() && !kernel_answers_identity(board) {
            unanswered.push(board.bus_id);
        }
        if let Some(uuid) = &a.uuid {
            if let Some(other) = seen_ids.insert(uuid.clone(), index) {
                section.notes.push(format!(
                    "accelerators {other} and {index} report one unique id {uuid}: neither is named by it"
                ));
                a.uuid = None;
                if let Some(first) = section.accelerators.get_mut(other as usize) {
                    first.uuid = None;
                }
            }
        } else {
            section.notes.push(format!(
                "accelerator {index} ({}) reports no unique id, so it cannot be granted",
                board.bus_id.sysfs()
            ));
        }
        if let Some(p) = &a.partitioning
            && p.partitions > 1
        {
            a.grantable = accel_core::inventory::Grantable::Nothing;
            section.notes.push(format!(
                "accelerator {index} ({}) is split into {} compute partitions{}: a partitioned AMD board is not served (no AMD partition family); set it to SPX to serve it",
                board.bus_id.sysfs(),
                p.partitions,
                p.compute_mode.as_deref().map(|m| format!(" ({m})")).unwrap_or_default()
            ));
        }
        section.accelerators.push(a);
    }
    if let Some(first) = unanswered.first() {
        let why = match (&tool.failure, &tool.answered) {
            (Some(failure), _) => failure.clone(),
            (None, Some(argv)) => format!("{argv}: lists no GPU at {}", first.sysfs()),
            (None, None) => NO_TOOL.into(),
        };
        return not_measured(Unmeasured::Unnamed {
            why,
            unnamed: unanswered.len(),
            boards: boards.len(),
        });
    }
    for (index, peers) in xgmi_peers(&boards, &links) {
        if let Some(a) = section.accelerators.get_mut(index as usize) {
            for peer in peers {
                a.peers.insert(peer, PeerLink::XGMI_WORD.into());
            }
        }
    }
    Ok(section)
}

/// Each board's XGMI peers by accelerator index (a board's index is its position in `boards`):
/// the boards its primary node's KFD links of type 11 name (`links`, by node id), and the boards
/// in its XGMI hive — the same non-zero `hive_id`, the id the driver gives every GPU one XGMI
/// fabric joins (a trimmed or partial links tree names one end only; the hive names both).
pub fn xgmi_peers(
    boards: &[KfdBoard],
    links: &BTreeMap<u32, Vec<u32>>,
) -> BTreeMap<u32, BTreeSet<u32>> {
    let index_of = |node: u32| -> Option<u32> {
        boards
            .iter()
            .position(|b| b.nodes.iter().any(|n| n.id == node))
            .and_then(|i| u32::try_from(i).ok())
    };
    let mut peers: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for (me, board) in boards.iter().enumerate() {
        let (Ok(me), Some(primary)) = (u32::try_from(me), board.primary()) else {
            continue;
        };
        let linked = links.get(&primary.id).into_iter().flatten();
        for other in linked.filter_map(|node| index_of(*node)) {
            if other != me {
                peers.entry(me).or_default().insert(other);
            }
        }
        let Some(hive) = primary.hive_id() else {
            continue;
        };
        for (other, board) in boards.iter().enumerate() {
            let Ok(other) = u32::try_from(other) else {
                continue;
            };
            if other != me && board.primary().and_then(kfd::KfdNode::hive_id) == Some(hive) {
                peers.entry(me).or_default().insert(other);
            }
        }
    }
    peers
}

/// Whether the kernel gave its answer on the board's identity: KFD's node carries a
/// `unique_id` property. Its value is the driver's own (`adev->unique_id`), which amd-smi's ASIC
/// serial and rocm-smi's `Unique ID` read too, so 0 there (an APU, an ASIC that reports none)
/// is an answer no tool improves on; a node without the property (an older kernel) leaves the
/// identity to the tool.
fn kernel_answers_identity(board: &KfdBoard) -> bool {
    board
        .primary()
        .is_some_and(|n| n.properties.contains_key("unique_id"))
}

fn not_measured(why: Unmeasured) -> Detection {
    Err(DetectError::NotMeasured {
        manufacturer: Manufacturer::Amd,
        reason: why.to_string(),
    })
}

fn accelerator(
    index: u32,
    board: &KfdBoard,
    card: Option<&DrmCard>,
    smi: &[&StaticGpu],
    rsmi: Option<&rocmsmi::RocmSmiCard>,
) -> Accelerator {
    let mut a = Accelerator::new(index, Source::Driver);
    let primary = board.primary();
    let first_smi = smi
        .iter()
        .find(|g| g.bus_id.is_some_and(|b| b.function == 0))
        .or(smi.first())
        .copied();
    a.bus_id = Some(board.bus_id);
    let unique = first_smi
        .and_then(|g| g.unique_id)
        .or_else(|| primary.and_then(kfd::KfdNode::unique_id))
        .or_else(|| card.and_then(|c| c.unique_id))
        .or_else(|| rsmi.and_then(|c| c.unique_id));
    a.uuid = unique.map(rocr_uuid);
    // Each source's name is already none for a placeholder or a bare PCI id; the DRM file's
    // is checked here by the same rule.
    a.product = first_smi
        .and_then(|g| g.market_name.clone())
        .or_else(|| first_smi.and_then(|g| g.board_name.clone()))
        .or_else(|| rsmi.and_then(|c| c.name.clone()))
        .or_else(|| {
            card.and_then(|c| c.product_name.as_deref())
                .and_then(product_name)
        });
    let partitions = board.partitions();
    // A partitioned board's tool and KFD figures are per partition; its DRM figure is the
    // board's.
    a.memory_mib = if partitions > 1 {
        card.and_then(|c| c.vram_bytes).map(|b| b >> 20)
    } else {
        first_smi
            .and_then(|g| g.vram_mib)
            .or_else(|| card.and_then(|c| c.vram_bytes).map(|b| b >> 20))
            .or_else(|| rsmi.and_then(|c| c.vram_bytes).map(|b| b >> 20))
            .or_else(|| {
                primary
                    .and_then(kfd::KfdNode::framebuffer_bytes)
                    .map(|b| b >> 20)
            })
    };
    a.numa_node = card
        .and_then(|c| c.numa_node)
        .or_else(|| rsmi.and_then(|c| c.numa_node));
    a.compute_capability = primary
        .and_then(kfd::KfdNode::gfx_target)
        .or_else(|| first_smi.and_then(|g| g.gfx_target.clone()));
    a.architecture = a
        .compute_capability
        .as_deref()
        .and_then(family)
        .map(String::from);
    a.cores = board
        .compute_units()
        .or_else(|| first_smi.and_then(|g| g.compute_units));
    a.serial = first_smi
        .and_then(|g| g.serial.clone())
        .or_else(|| card.and_then(|c| c.serial_number.clone()));
    a.vbios_version = card
        .and_then(|c| c.vbios_version.clone())
        .or_else(|| first_smi.and_then(|g| g.vbios_version.clone()));
    a.minor_number = card.map(|c| c.card);
    a.drm = Some(DrmNodes {
        card: card.map(|c| c.card),
        render: card
            .and_then(|c| c.render)
            .or_else(|| primary.and_then(kfd::KfdNode::render_minor)),
    });
    a.compute_geometry = Some(ComputeGeometry {
        compute_units: a.cores,
        shader_engines: primary.and_then(kfd::KfdNode::shader_engines),
        xccs: board.xccs(),
    });
    let compute_mode = card.and_then(|c| c.compute_partition.clone());
    let memory_mode = card.and_then(|c| c.memory_partition.clone());
    if partitions > 1 || compute_mode.is_some() || memory_mode.is_some() {
        a.partitioning = Some(Partitioning {
            compute_mode,
            memory_mode,
            partitions: u32::try_from(partitions).unwrap_or(u32::MAX),
        });
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_follow_the_gfx_target() {
        assert_eq!(family("gfx942"), Some("Arctic Islands"));
        assert_eq!(family("gfx90a"), Some("Arctic Islands"));
        assert_eq!(family("gfx1101"), Some("GC 11.0.0"));
        assert_eq!(family("gfx1150"), Some("GC 11.5.0"));
        assert_eq!(family("gfx1103"), Some("GC 11.0.1"));
        assert_eq!(family("gfx1030"), Some("Navi"));
        assert_eq!(family("gfx1201"), Some("GC 12.0.0"));
        assert_eq!(family("gfx"), None);
        assert_eq!(family("sm_90"), None);
    }
}
