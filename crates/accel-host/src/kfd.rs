//! The KFD topology (`/sys/class/kfd/kfd/topology/nodes/<n>/…`): the compute view of every GPU
//! a KFD driver exposes to its runtime (ROCr, HSA), one node per agent. The kernel tree is the
//! same whichever driver publishes it — AMD's `amdgpu`, and the fork Hygon's DCUs run (`hycu`,
//! `hydcu`), which keeps the path — so this reader names no driver; a caller keeps the GPU nodes
//! of its own vendor ([`KfdNode::vendor_id`]). It is read before any vendor tool because it needs
//! none, and it is the only source of the compute geometry a CU mask needs (compute units, shader
//! engines, XCCs) and of the gfx target without HSA.
//!
//! The shapes handled (the AMD fixtures' HAZARDS.md, items 1–9): CPU nodes first (a GPU node is
//! one with `simd_count` > 0), nodes numbered as directories and sorted numerically, ids in
//! decimal, `unique_id` a u64, properties that vary by kernel (unknown keys ignored, missing ones
//! unknown), `gfx_target_version` as decimal `MMmmss`, and a partitioned board shown as several
//! nodes that share `unique_id` and differ in `location_id`'s function bits.

use std::collections::BTreeMap;

use accel_core::busid::BusId;

use crate::Host;

/// Where the kernel publishes the topology.
pub const TOPOLOGY_DIR: &str = "/sys/class/kfd/kfd/topology";

/// One node's `properties` file: `key value` lines of unsigned decimals. Lines that are not
/// that (blank, a value that is not a u64, NUL padding) are skipped.
pub fn parse_properties(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_matches(|c: char| c == '\0' || c.is_whitespace());
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let Ok(v) = value.parse::<u64>() {
            out.insert(key.to_string(), v);
        }
    }
    out
}

/// The gfx target of a `gfx_target_version` (decimal `MMmmss`, the minor and stepping printed in
/// hex in the ISA name): 90402 → `gfx942`, 90010 → `gfx90a`, 110500 → `gfx1150`. 0 (a CPU node)
/// or a figure whose parts do not fit is `None`.
pub fn gfx_target(version: u64) -> Option<String> {
    if version == 0 {
        return None;
    }
    let major = version / 10_000;
    let minor = (version / 100) % 100;
    let stepping = version % 100;
    if major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

/// One KFD node as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KfdNode {
    /// The node's directory number.
    pub id: u32,
    pub properties: BTreeMap<String, u64>,
    /// The `name` file, trimmed (`ip discovery`, a codename, or empty): never a marketing name.
    pub name: Option<String>,
    /// The sizes of the node's memory banks (`mem_banks/<n>/properties` `size_in_bytes`), with
    /// their `heap_type`.
    pub memory_banks: Vec<MemoryBank>,
}

/// One memory bank of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBank {
    /// 0 system memory (an APU's), 1 framebuffer public, 2 framebuffer private.
    pub heap_type: Option<u64>,
    pub size_bytes: u64,
}

impl KfdNode {
    fn get(&self, key: &str) -> Option<u64> {
        self.properties.get(key).copied()
    }

    /// A GPU node: one with SIMDs.
    pub fn is_gpu(&self) -> bool {
        self.get("simd_count").is_some_and(|n| n > 0)
    }

    pub fn vendor_id(&self) -> Option<u16> {
        self.get("vendor_id").and_then(|v| u16::try_from(v).ok())
    }

    pub fn device_id(&self) -> Option<u16> {
        self.get("device_id").and_then(|v| u16::try_from(v).ok())
    }

    /// The PCI address from `domain` (0 when the kernel predates it) and `location_id` (bus in
    /// bits 8–15, device in 3–7, function in 0–2).
    pub fn bus_id(&self) -> Option<BusId> {
        let location = self.get("location_id")?;
        let domain = u32::try_from(self.get("domain").unwrap_or(0)).ok()?;
        let location = u16::try_from(location).ok()?;
        Some(BusId {
            domain,
            bus: (location >> 8) as u8,
            device: ((location >> 3) & 0x1f) as u8,
            function: (location & 0x7) as u8,
        })
    }

    /// The board this node belongs to: its bus address with function 0 (a partition's node sits
    /// on a function the PCI bus does not have).
    pub fn board(&self) -> Option<BusId> {
        self.bus_id().map(|b| BusId { function: 0, ..b })
    }

    pub fn render_minor(&self) -> Option<u32> {
        self.get("drm_render_minor")
            .and_then(|v| u32::try_from(v).ok())
            .filter(|m| *m > 0)
    }

    /// The ASIC's unique id; 0 (not reported, an APU) is `None`.
    pub fn unique_id(&self) -> Option<u64> {
        self.get("unique_id").filter(|u| *u != 0)
    }

    pub fn hive_id(&self) -> Option<u64> {
        self.get("hive_id").filter(|u| *u != 0)
    }

    pub fn gfx_target(&self) -> Option<String> {
        self.get("gfx_target_version").and_then(gfx_target)
    }

    /// Compute units: `simd_count / simd_per_cu`.
    pub fn compute_units(&self) -> Option<u32> {
        let simds = self.get("simd_count")?;
        let per_cu = self.get("simd_per_cu").filter(|n| *n > 0)?;
        u32::try_from(simds / per_cu).ok().filter(|n| *n > 0)
    }

    /// Shader engines: `array_count / simd_arrays_per_engine`.
    pub fn shader_engines(&self) -> Option<u32> {
        let arrays = self.get("array_count")?;
        let per_engine = self.get("simd_arrays_per_engine").filter(|n| *n > 0)?;
        u32::try_from(arrays / per_engine).ok().filter(|n| *n > 0)
    }

    /// XCCs (accelerated compute complexes); absent on kernels before MI300 support.
    pub fn xccs(&self) -> Option<u32> {
        self.get("num_xcc")
            .and_then(|v| u32::try_from(v).ok())
            .filter(|n| *n > 0)
    }

    /// The framebuffer the node owns (public + private heaps), in bytes; `None` when it has no
    /// framebuffer bank (an APU's memory is system memory: its carve-out is DRM's figure).
    pub fn framebuffer_bytes(&self) -> Option<u64> {
        let total: u64 = self
            .memory_banks
            .iter()
            .filter(|b| matches!(b.heap_type, Some(1 | 2)))
            .map(|b| b.size_bytes)
            .sum();
        (total > 0).then_some(total)
    }
}

/// Why the topology could not be read (a missing topology is not an error: no KFD).
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct TopologyError {
    pub path: String,
    pub reason: String,
}

/// Reads every node under `dir` (`<dir>/nodes/<n>`), sorted by number. `Ok(None)`: no topology
/// (no KFD driver). A node whose `properties` cannot be read is an error; its optional files
/// (`name`, `mem_banks`) are read when present.
pub fn read_topology(host: &dyn Host, dir: &str) -> Result<Option<Vec<KfdNode>>, TopologyError> {
    let nodes_dir = format!("{dir}/nodes");
    let names = match host.list(&nodes_dir) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => {
            return Err(TopologyError {
                path: nodes_dir,
                reason: e.to_string(),
            });
        }
    };
    let mut ids: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    ids.sort_unstable();
    let mut nodes = Vec::with_capacity(ids.len());
    for id in ids {
        let base = format!("{nodes_dir}/{id}");
        let path = format!("{base}/properties");
        let text = host.read(&path).map_err(|e| TopologyError {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let properties = parse_properties(&String::from_utf8_lossy(&text));
        let name = host
            .read(&format!("{base}/name"))
            .ok()
            .and_then(|b| crate::sysfs::attribute(&String::from_utf8_lossy(&b)));
        let mut memory_banks = Vec::new();
        if let Ok(banks) = host.list(&format!("{base}/mem_banks")) {
            for bank in banks {
                let Ok(text) = host.read(&format!("{base}/mem_banks/{bank}/properties")) else {
                    continue;
                };
                let props = parse_properties(&String::from_utf8_lossy(&text));
                if let Some(size) = props.get("size_in_bytes") {
                    memory_banks.push(MemoryBank {
                        heap_type: props.get("heap_type").copied(),
                        size_bytes: *size,
                    });
                }
            }
        }
        nodes.push(KfdNode {
            id,
            properties,
            name,
            memory_banks,
        });
    }
    Ok(Some(nodes))
}

/// One board as the topology shows it: its GPU nodes (one, or one per partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdBoard {
    /// The board's address (function 0).
    pub bus_id: BusId,
    /// Its nodes, by node number; the first is the primary partition (function 0) when shown.
    pub nodes: Vec<KfdNode>,
}

impl KfdBoard {
    /// The node on function 0, else the first.
    pub fn primary(&self) -> Option<&KfdNode> {
        self.nodes
            .iter()
            .find(|n| n.bus_id().is_some_and(|b| b.function == 0))
            .or(self.nodes.first())
    }

    /// Whether the board is partitioned (more than one compute node).
    pub fn partitions(&self) -> usize {
        self.nodes.len()
    }

    /// The board's compute units: the sum over its partitions.
    pub fn compute_units(&self) -> Option<u32> {
        checked_sum(self.nodes.iter().map(KfdNode::compute_units))
    }

    /// The board's XCCs: the sum over its partitions.
    pub fn xccs(&self) -> Option<u32> {
        checked_sum(self.nodes.iter().map(KfdNode::xccs))
    }
}

/// The sum of every figure; `None` when one is unknown, there are none, or it overflows.
fn checked_sum(figures: impl Iterator<Item = Option<u32>>) -> Option<u32> {
    let mut total: Option<u32> = None;
    for figure in figures {
        total = Some(total.unwrap_or(0).checked_add(figure?)?);
    }
    total
}

/// The GPU nodes grouped into boards by domain, bus and device, in bus order. Nodes without a
/// location are left out (a CPU node, or a kernel that does not say).
pub fn boards(nodes: &[KfdNode]) -> Vec<KfdBoard> {
    let mut by_board: BTreeMap<BusId, Vec<KfdNode>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.is_gpu()) {
        if let Some(board) = node.board() {
            by_board.entry(board).or_default().push(node.clone());
        }
    }
    by_board
        .into_iter()
        .map(|(bus_id, nodes)| KfdBoard { bus_id, nodes })
        .collect()
}

/// The XGMI peers of a node: `io_links`/`p2p_links` of `type 11` name the peer node.
pub fn xgmi_peers(host: &dyn Host, dir: &str, node: u32) -> Vec<u32> {
    let mut peers = Vec::new();
    for kind in ["io_links", "p2p_links"] {
        let base = format!("{dir}/nodes/{node}/{kind}");
        let Ok(links) = host.list(&base) else {
            continue;
        };
        for link in links {
            let Ok(text) = host.read(&format!("{base}/{link}/properties")) else {
                continue;
            };
            let props = parse_properties(&String::from_utf8_lossy(&text));
            if props.get("type") == Some(&11)
                && let Some(to) = props.get("node_to").and_then(|v| u32::try_from(*v).ok())
                && !peers.contains(&to)
            {
                peers.push(to);
            }
        }
    }
    peers.sort_unstable();
    peers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_targets_print_minor_and_stepping_in_hex() {
        assert_eq!(gfx_target(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_target(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_target(90008).as_deref(), Some("gfx908"));
        assert_eq!(gfx_target(110003).as_deref(), Some("gfx1103"));
        assert_eq!(gfx_target(110500).as_deref(), Some("gfx1150"));
        assert_eq!(gfx_target(0), None);
        assert_eq!(gfx_target(91600), None);
    }

    #[test]
    fn a_location_id_is_bus_device_and_function() {
        let node = KfdNode {
            properties: parse_properties("location_id 58627\ndomain 1\nsimd_count 4\n"),
            ..KfdNode::default()
        };
        let bus = node.bus_id().unwrap();
        assert_eq!(bus.sysfs(), "0001:e5:00.3");
        assert_eq!(node.board().unwrap().sysfs(), "0001:e5:00.0");
    }

    #[test]
    fn properties_skip_what_is_not_a_key_and_a_u64() {
        let p = parse_properties("a 1\n\nb x\nc 2 3\nunique_id 16404946649897475633\0\0\n");
        assert_eq!(p.len(), 2);
        assert_eq!(p["unique_id"], 16_404_946_649_897_475_633);
    }
}
