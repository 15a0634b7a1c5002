//! The inventory: what accelerators a node has, per manufacturer, in one canonical, hashable form.
//!
//! This module owns the shape every detector produces and every consumer (labels, token pools,
//! the `Devices` spec) reads. It holds facts that change only with the hardware or the driver;
//! usage samples live apart (they never enter [`Inventory::hash`]). It must not read the machine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::busid::BusId;
use crate::manufacturer::Manufacturer;

/// What one manufacturer's detector answered.
///
/// `Ok` with an empty list means the detector measured and found nothing (no driver, a library
/// that will not initialise, a bus holding no card). `Err` means the pass could not measure and
/// carries no claim about the hardware: the daemon keeps the last detection (seed 000, "A pass
/// that failed is not a manufacturer with no accelerators").
pub type Detection = Result<ManufacturerInventory, DetectError>;

/// Why a detector could not measure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// The host shows a driver but neither layer could enumerate its accelerators.
    #[error("{manufacturer}: driver present but no accelerator could be enumerated: {reason}")]
    NotMeasured {
        manufacturer: Manufacturer,
        reason: String,
    },
    /// The host root itself could not be read.
    #[error("cannot read the host at {root}: {reason}")]
    HostUnreadable { root: String, reason: String },
}

/// The whole node: every manufacturer that answered, in [`Manufacturer::ALL`] order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub manufacturers: Vec<ManufacturerInventory>,
}

/// One manufacturer's accelerators and the single driver stack they share ("One driver stack
/// per node").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManufacturerInventory {
    pub name: Manufacturer,
    /// The kernel driver's version (`590.48.01`).
    pub driver_version: Option<String>,
    /// The runtime version: for NVIDIA the CUDA driver version (`13.0`).
    pub runtime_version: Option<String>,
    /// The management library's version, where the vendor tool reports it (NVML `13.590.48`).
    pub management_version: Option<String>,
    pub accelerators: Vec<Accelerator>,
    /// Facts the pass could not refresh and why (a layer that failed, a repeated UUID). They
    /// describe the measurement, not the hardware, and do not enter the hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ManufacturerInventory {
    /// An answer with no accelerators: what a detector says when there is nothing to manage.
    pub fn empty(name: Manufacturer) -> Self {
        ManufacturerInventory {
            name,
            driver_version: None,
            runtime_version: None,
            management_version: None,
            accelerators: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// How an accelerator is currently in MIG (hardware partitioning) mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MigMode {
    Enabled,
    Disabled,
}

/// Which families an accelerator may feed (DESIGN.md, "What can be granted").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Grantable {
    /// Exclusive, shared and sliced (an unpartitioned accelerator).
    Whole,
    /// Only the partition family (an accelerator in MIG mode).
    PartitionsOnly,
    /// Nothing: bound to vfio-pci and passed through to a VM.
    Nothing,
    /// Nothing: the driver and its tool named no identity (UUID) for it, so no grant could
    /// name it, and a token for it would be one every Allocate refuses. Listed, never
    /// advertised ([`Inventory::withhold_unidentified`]).
    Unidentified,
}

impl Grantable {
    /// Whether it feeds any family (tokens, `.count`, node capacity).
    pub fn feeds_any(self) -> bool {
        matches!(self, Grantable::Whole | Grantable::PartitionsOnly)
    }
}

/// Where an accelerator's facts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// Bound to the vendor driver and listed by it.
    Driver,
    /// A paravirtual GPU (WSL 2 `/dev/dxg`), known only to the vendor tool.
    Paravirtual,
    /// Bound to vfio-pci: the facts are the last ones seen while the driver held it.
    Passthrough,
}

/// One physical accelerator. Absent facts are `None`, never a made-up value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accelerator {
    /// The position in the node's enumeration (bus order, as nvidia-smi numbers them).
    pub index: u32,
    pub uuid: Option<String>,
    pub product: Option<String>,
    pub bus_id: Option<BusId>,
    /// Framebuffer total in MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub numa_node: Option<u32>,
    pub architecture: Option<String>,
    pub compute_capability: Option<String>,
    pub mig_mode: Option<MigMode>,
    /// Whether the accelerator passes the health rule; see `health_reasons` when it does not.
    pub healthy: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
    pub grantable: Grantable,
    pub source: Source,
    /// Compute cores (CUDA cores, AI cores …) where the vendor reports them.
    pub cores: Option<u32>,
    /// Product brand or family as the vendor reports it (`Tesla`, `GeForce`, `NVIDIA RTX`).
    pub brand: Option<String>,
    pub serial: Option<String>,
    pub vbios_version: Option<String>,
    pub board_part_number: Option<String>,
    pub minor_number: Option<u32>,
    pub persistence_mode: Option<bool>,
    /// Windows driver model (`WDDM`, `TCC`, `MCDM`); absent on Linux.
    pub driver_model: Option<String>,
    /// GSP firmware version; present when the GPU runs GSP firmware.
    pub gsp_firmware_version: Option<String>,
    /// Excluded by the driver (`GPU Excluded: Yes`, formerly `Blacklisted`).
    pub excluded: Option<bool>,
    pub ecc: Option<Ecc>,
    pub remapped_rows: Option<RemappedRows>,
    /// What the manufacturer's own tool states about the accelerator's health in words of its
    /// own, not as a counter (Cambricon's `Health State` "In Problem", a driver state other than
    /// running, a page retirement pending): each entry one reason, worded by the
    /// manufacturer's crate, that the health rule passes through
    /// ([`crate::health::counter_reasons`]). `None` when the tool stated nothing readable (the
    /// last reading is then kept, as for the counters); `Some` and empty when it read healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_faults: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDevice>,
    /// The hardware partition profiles the accelerator offers, with their placements (MIG
    /// `-lgip`/`-lgipp`); empty when it offers none or the driver did not say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_profiles: Vec<PartitionProfile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<NvLink>,
    /// Connection to each peer accelerator, keyed by the peer's index, in the vendor's topology
    /// words (`NV18`, `XGMI`, `HCCS`, `SYS`, `PIX`, …): nvidia-smi's matrix, AMD's KFD links and
    /// XGMI hive, npu-smi's matrix. [`PeerLink::of`] tells a direct link from a PCIe path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub peers: BTreeMap<u32, String>,
    /// Where the accelerator's PCI function sits on the bus (the specs' `Topology`: PCI root,
    /// upstream switches, class), read from sysfs; absent where it has no PCI function there
    /// (a paravirtual GPU) or the link could not be walked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_topology: Option<PciTopology>,
    /// The DRM device nodes a container is handed (AMD: `/dev/dri/card<N>`, `/dev/dri/renderD<M>`),
    /// their minors read apart from sysfs; absent for a manufacturer that injects no DRM nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drm: Option<DrmNodes>,
    /// The compute geometry a compute-unit mask is derived from (AMD), when the driver shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_geometry: Option<ComputeGeometry>,
    /// The board's hardware partitioning as the driver reports it (AMD compute/memory partition
    /// modes), when it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioning: Option<Partitioning>,
    /// The driver's own numbers for the accelerator, in the vendor's slot order, where they
    /// differ from the enumeration index and a grant must name them (Ascend, spec/ascend.md
    /// §1.3: physical id, card id, chip index in the card); empty where the driver has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub physical_indexes: Vec<u32>,
    /// The super-pod the accelerator is a member of, as its driver reports it (Ascend A3 and
    /// 950 servers: `npu-smi info -t spod-info`, spec/ascend.md addendum A4); absent where the
    /// driver reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod: Option<SuperPod>,
    /// The board's product form where the vendor's fabric library is told it (Ascend 950:
    /// `server-8p`, `pod-1d`, …, `card-4p`, spec/ascend.md §4.4), read from the board and
    /// super-pod queries; absent when unread or not resolved to exactly one form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_type: Option<String>,
}

/// An accelerator's super-pod membership, each fact as the driver reports it (absent when it
/// reports none). Ascend: `SDID` (A3), `Super Pod Size`, `Super Pod ID`, `Server Index` (or
/// `Chassis ID` on a 950 POD board) and the 950's `Super Pod Type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SuperPod {
    /// The A3's super-pod device id: server index, chip, die and device packed in one number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdid: Option<u32>,
    /// How many NPUs the super-pod holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// The super-pod's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// The server's index in the super-pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_index: Option<u32>,
    /// The chassis' id (a 950 on a POD board, in place of the server index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_id: Option<u32>,
    /// The super-pod type code (the 950).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub pod_type: Option<u32>,
}

/// A direct accelerator-to-accelerator link, one a vendor's topology names: traffic between the
/// two does not cross PCIe. What the multi-accelerator preference prefers, whichever the
/// manufacturer ([`crate::ledger::placement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerLink {
    /// NVIDIA NVLink: `nvidia-smi topo -m` prints `NV<n>`, n bonded links.
    NvLink,
    /// AMD XGMI (Infinity Fabric): a KFD `io_links`/`p2p_links` entry of type 11, or two GPUs
    /// the driver puts in one XGMI hive (the same non-zero KFD `hive_id`).
    Xgmi,
    /// Huawei HCCS: `npu-smi info -t topo` prints `HCCS`.
    Hccs,
}

impl PeerLink {
    /// The word a detector records in [`Accelerator::peers`] for an XGMI link.
    pub const XGMI_WORD: &'static str = "XGMI";
    /// The word a detector records in [`Accelerator::peers`] for an HCCS link (npu-smi's own).
    pub const HCCS_WORD: &'static str = "HCCS";

    /// The link a topology word names; `None` for a PCIe or system path (`SYS`, `NODE`, `PHB`,
    /// `PXB`, `PIX`), the diagonal (`X`) and anything else. `NV` alone is no NVLink: the matrix
    /// always prints the count.
    pub fn of(word: &str) -> Option<PeerLink> {
        let word = word.trim();
        match word {
            PeerLink::XGMI_WORD => Some(PeerLink::Xgmi),
            PeerLink::HCCS_WORD => Some(PeerLink::Hccs),
            _ => word
                .strip_prefix("NV")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .map(|_| PeerLink::NvLink),
        }
    }
}

/// Where a PCI function sits on the bus, as the bridge walk of its sysfs link reads it (spec
/// amd.md §1.5, ascend.md §1.3 step 8: `PciRootID`, the upstream switches, `PciClass`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciTopology {
    /// The outermost PCI bridge above the function, or the function itself when no bridge is
    /// above it (sysfs form, `0000:15:01.0`).
    pub root_id: String,
    /// The bridges above the function, innermost first; empty when none is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<String>,
    /// The function's 24-bit class code as sysfs prints it (`0x030200`); absent when unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

/// An accelerator's DRM minors (`card<N>`, `renderD<M>`): unrelated numbers, each as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrmNodes {
    pub card: Option<u32>,
    pub render: Option<u32>,
}

/// The compute topology of an AMD accelerator (KFD): what `HSA_CU_MASK` is quantised by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeGeometry {
    /// Compute units.
    pub compute_units: Option<u32>,
    pub shader_engines: Option<u32>,
    /// Accelerated compute complexes (MI300-class); 1 elsewhere.
    pub xccs: Option<u32>,
}

/// A board's hardware partitioning (AMD MI300-class compute and memory partition modes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Partitioning {
    /// `SPX`, `DPX`, `QPX`, `CPX` as the driver names it, when it names it.
    pub compute_mode: Option<String>,
    /// `NPS1`, `NPS4` …, when the driver names it.
    pub memory_mode: Option<String>,
    /// The compute partitions the driver shows for the board (1 when unpartitioned).
    pub partitions: u32,
}

impl Accelerator {
    /// An accelerator with nothing known but its position and origin.
    pub fn new(index: u32, source: Source) -> Self {
        Accelerator {
            index,
            uuid: None,
            product: None,
            bus_id: None,
            memory_mib: None,
            numa_node: None,
            architecture: None,
            compute_capability: None,
            mig_mode: None,
            healthy: true,
            health_reasons: Vec::new(),
            grantable: if source == Source::Passthrough {
                Grantable::Nothing
            } else {
                Grantable::Whole
            },
            source,
            cores: None,
            brand: None,
            serial: None,
            vbios_version: None,
            board_part_number: None,
            minor_number: None,
            persistence_mode: None,
            driver_model: None,
            gsp_firmware_version: None,
            excluded: None,
            ecc: None,
            remapped_rows: None,
            reported_faults: None,
            mig_devices: Vec::new(),
            partition_profiles: Vec::new(),
            nvlinks: Vec::new(),
            peers: BTreeMap::new(),
            pci_topology: None,
            drm: None,
            compute_geometry: None,
            partitioning: None,
            physical_indexes: Vec::new(),
            super_pod: None,
            product_type: None,
        }
    }

    /// Recomputes what the accelerator may feed from its source and MIG mode.
    pub fn classify_grantable(&mut self) {
        self.grantable = match (self.source, self.mig_mode) {
            (Source::Passthrough, _) => Grantable::Nothing,
            (_, Some(MigMode::Enabled)) => Grantable::PartitionsOnly,
            _ => Grantable::Whole,
        };
    }

    /// Whether this accelerator counts as schedulable capacity (`.count` label, node capacity).
    pub fn can_be_granted(&self) -> bool {
        self.grantable.feeds_any()
    }

    /// Fills each descriptive fact this reading left absent from `last`, a reading of the same
    /// accelerator ([`Inventory::keep_known`]); returns how many were filled.
    fn keep_known(&mut self, last: &Accelerator) -> usize {
        let mut kept = 0;
        keep(&mut self.product, &last.product, &mut kept);
        keep(&mut self.bus_id, &last.bus_id, &mut kept);
        keep(&mut self.memory_mib, &last.memory_mib, &mut kept);
        keep(&mut self.numa_node, &last.numa_node, &mut kept);
        keep(&mut self.architecture, &last.architecture, &mut kept);
        keep(
            &mut self.compute_capability,
            &last.compute_capability,
            &mut kept,
        );
        keep(&mut self.cores, &last.cores, &mut kept);
        keep(&mut self.brand, &last.brand, &mut kept);
        keep(&mut self.serial, &last.serial, &mut kept);
        keep(&mut self.vbios_version, &last.vbios_version, &mut kept);
        keep(
            &mut self.board_part_number,
            &last.board_part_number,
            &mut kept,
        );
        keep(&mut self.minor_number, &last.minor_number, &mut kept);
        keep(
            &mut self.persistence_mode,
            &last.persistence_mode,
            &mut kept,
        );
        keep(&mut self.driver_model, &last.driver_model, &mut kept);
        keep(
            &mut self.gsp_firmware_version,
            &last.gsp_firmware_version,
            &mut kept,
        );
        keep(&mut self.excluded, &last.excluded, &mut kept);
        keep(&mut self.partitioning, &last.partitioning, &mut kept);
        keep(&mut self.drm, &last.drm, &mut kept);
        keep(
            &mut self.compute_geometry,
            &last.compute_geometry,
            &mut kept,
        );
        keep(&mut self.ecc, &last.ecc, &mut kept);
        keep(&mut self.remapped_rows, &last.remapped_rows, &mut kept);
        keep(&mut self.reported_faults, &last.reported_faults, &mut kept);
        keep(&mut self.super_pod, &last.super_pod, &mut kept);
        keep(&mut self.product_type, &last.product_type, &mut kept);
        keep(&mut self.pci_topology, &last.pci_topology, &mut kept);
        keep_all(
            &mut self.physical_indexes,
            &last.physical_indexes,
            &mut kept,
        );
        keep_all(&mut self.nvlinks, &last.nvlinks, &mut kept);
        keep_all(&mut self.mig_devices, &last.mig_devices, &mut kept);
        keep_all(
            &mut self.partition_profiles,
            &last.partition_profiles,
            &mut kept,
        );
        if self.peers.is_empty() && !last.peers.is_empty() {
            self.peers = last.peers.clone();
            kept += 1;
        }
        let mig_before = kept;
        keep(&mut self.mig_mode, &last.mig_mode, &mut kept);
        if kept > mig_before && self.source == Source::Driver {
            self.classify_grantable();
        }
        kept
    }

    /// Takes it out of every family when it has no identity: an accelerator no UUID names is
    /// listed, never advertised (a failing tool must not put cards without identity into
    /// service, on a first pass either).
    pub fn withhold_if_unidentified(&mut self) {
        let unnamed = self.uuid.as_deref().is_none_or(|u| u.trim().is_empty());
        if unnamed && self.grantable.feeds_any() {
            self.grantable = Grantable::Unidentified;
        }
    }
}

/// ECC state and error counters (`-q -x` `<ecc_mode>` and `<ecc_errors>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ecc {
    /// ECC currently enabled.
    pub enabled: Option<bool>,
    /// ECC enabled after the next reset.
    pub pending_enabled: Option<bool>,
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
    /// The manufacturer's rule counts corrected (single-bit) errors as a fault too, and only
    /// while ECC is enabled (Ascend: spec/ascend.md §7); absent from the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub corrected_is_fault: bool,
}

/// Row-remapping state (`-q -x` `<remapped_rows>`, v11+).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemappedRows {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
    /// A remap is pending (takes effect at the next reset).
    pub pending: Option<bool>,
    /// A remap failed.
    pub failure: Option<bool>,
}

/// One MIG instance on a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigDevice {
    pub index: u32,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    /// `MIG-…` UUID (from `nvidia-smi -L`; the XML does not carry it).
    pub uuid: Option<String>,
    /// Profile name (`1g.10gb`, `1c.3g.71gb`; from `-L`).
    pub profile: Option<String>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub multiprocessors: Option<u32>,
}

/// A hardware partition profile an accelerator offers (a MIG GPU-instance profile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionProfile {
    /// The profile name (`1g.10gb`, `1g.12gb+me`).
    pub name: String,
    /// The driver's profile id.
    pub id: u32,
    /// The profile's VRAM as the driver reports it.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub instances_total: Option<u32>,
    pub instances_free: Option<u32>,
    pub multiprocessors: Option<u32>,
    /// Where an instance may be placed: start slot and size, in memory slices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<PartitionPlacement>,
}

/// One allowed placement of a partition profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPlacement {
    pub start: u32,
    pub size: u32,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NvLink {
    pub link: u32,
    pub active: Option<bool>,
    /// Per-link bandwidth as the driver states it (`26.562 GB/s`).
    pub bandwidth: Option<String>,
    pub remote_bus_id: Option<BusId>,
}

impl Inventory {
    /// The section of one manufacturer, if it answered.
    pub fn manufacturer(&self, name: Manufacturer) -> Option<&ManufacturerInventory> {
        self.manufacturers.iter().find(|m| m.name == name)
    }

    /// Puts the inventory in canonical form: manufacturers in table order, accelerators by index.
    pub fn canonicalize(&mut self) {
        self.manufacturers
            .sort_by_key(|m| Manufacturer::ALL.iter().position(|x| *x == m.name));
        for section in &mut self.manufacturers {
            section.accelerators.sort_by_key(|a| a.index);
            for accelerator in &mut section.accelerators {
                accelerator.mig_devices.sort_by_key(|d| d.index);
                accelerator.partition_profiles.sort_by_key(|p| p.id);
                accelerator.nvlinks.sort_by_key(|l| l.link);
            }
        }
    }

    /// Keeps what a pass could not refresh (DESIGN.md, "Detector answers": facts a failed layer
    /// could not refresh keep their last value): for each accelerator `last` names by the same
    /// UUID, every fact this pass left absent — product, memory, NUMA node, bus address,
    /// architecture, compute capability, cores, brand, serial, firmware, part number, device
    /// minor, persistence mode, driver model, GSP firmware, exclusion, DRM nodes, compute
    /// geometry and partitioning, ECC and row-remap counters, the health the vendor's tool
    /// states (`reported_faults`), the driver's own numbers,
    /// links and peers, the PCI topology, MIG devices and profiles, the MIG mode — takes its last value, and each manufacturer's versions likewise. A fact this pass read is never
    /// replaced, and health is not touched. An accelerator whose MIG mode was kept is classified
    /// again, so a MIG card does not turn whole because its tool was silent. Each section that
    /// kept anything says so in a note; returns how many facts were kept.
    pub fn keep_known(&mut self, last: &Inventory) -> usize {
        let mut kept_total = 0;
        for section in &mut self.manufacturers {
            let Some(before) = last.manufacturer(section.name) else {
                continue;
            };
            let mut kept = 0;
            keep(
                &mut section.driver_version,
                &before.driver_version,
                &mut kept,
            );
            keep(
                &mut section.runtime_version,
                &before.runtime_version,
                &mut kept,
            );
            keep(
                &mut section.management_version,
                &before.management_version,
                &mut kept,
            );
            for a in &mut section.accelerators {
                let Some(uuid) = a.uuid.as_deref() else {
                    continue;
                };
                let Some(b) = before
                    .accelerators
                    .iter()
                    .find(|b| b.uuid.as_deref() == Some(uuid))
                else {
                    continue;
                };
                kept += a.keep_known(b);
            }
            if kept > 0 {
                section.notes.push(format!(
                    "kept {kept} fact(s) of the last detection that this pass could not read"
                ));
            }
            kept_total += kept;
        }
        kept_total
    }

    /// Takes every accelerator without an identity out of every family
    /// ([`Accelerator::withhold_if_unidentified`]); what every pass goes through before anything
    /// is advertised.
    pub fn withhold_unidentified(&mut self) {
        for section in &mut self.manufacturers {
            for accelerator in &mut section.accelerators {
                accelerator.withhold_if_unidentified();
            }
        }
    }

    /// The canonical hash (hex SHA-256 of the canonical JSON, notes left out). Equal hardware and
    /// driver facts give equal hashes whatever order the readers produced them in.
    pub fn hash(&self) -> String {
        let mut canonical = self.clone();
        canonical.canonicalize();
        for section in &mut canonical.manufacturers {
            section.notes.clear();
        }
        // Serialising plain structs, vectors and BTreeMaps cannot fail; an empty hash input
        // would still hash deterministically.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `now` takes `last`'s list when it has none; counts it.
fn keep_all<T: Clone>(now: &mut Vec<T>, last: &[T], kept: &mut usize) {
    if now.is_empty() && !last.is_empty() {
        *now = last.to_vec();
        *kept += 1;
    }
}

/// `now` takes `last`'s value when it has none; counts it.
fn keep<T: Clone>(now: &mut Option<T>, last: &Option<T>, kept: &mut usize) {
    if now.is_none() && last.is_some() {
        *now = last.clone();
        *kept += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = Some(uuid.to_string());
        a
    }

    fn node(order: &[(u32, &str)]) -> Inventory {
        let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
        section.accelerators = order.iter().map(|(i, u)| gpu(*i, u)).collect();
        Inventory {
            manufacturers: vec![section],
        }
    }

    #[test]
    fn hash_ignores_reader_order_and_notes() {
        let a = node(&[(0, "GPU-a"), (1, "GPU-b")]);
        let mut b = node(&[(1, "GPU-b"), (0, "GPU-a")]);
        b.manufacturers[0].notes.push("topo failed".into());
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a.hash(), node(&[(0, "GPU-a")]).hash());
    }

    #[test]
    fn a_manufacturer_section_is_found_by_its_name() {
        let [first, second, absent, ..] = Manufacturer::ALL;
        let inventory = Inventory {
            manufacturers: vec![
                ManufacturerInventory::empty(second),
                ManufacturerInventory::empty(first),
            ],
        };
        assert_eq!(inventory.manufacturer(first).map(|m| m.name), Some(first));
        assert_eq!(inventory.manufacturer(second).map(|m| m.name), Some(second));
        assert!(inventory.manufacturer(absent).is_none());
    }

    #[test]
    fn canonical_form_puts_manufacturers_in_table_order() {
        let mut inventory = Inventory {
            manufacturers: Manufacturer::ALL
                .iter()
                .rev()
                .map(|m| ManufacturerInventory::empty(*m))
                .collect(),
        };
        inventory.canonicalize();
        let names: Vec<Manufacturer> = inventory.manufacturers.iter().map(|m| m.name).collect();
        assert_eq!(names, Manufacturer::ALL);
    }

    #[test]
    fn mig_and_passthrough_limit_what_can_be_granted() {
        let mut a = gpu(0, "GPU-a");
        a.mig_mode = Some(MigMode::Enabled);
        a.classify_grantable();
        assert_eq!(a.grantable, Grantable::PartitionsOnly);
        assert!(a.can_be_granted());
        let mut p = Accelerator::new(1, Source::Passthrough);
        p.classify_grantable();
        assert_eq!(p.grantable, Grantable::Nothing);
        assert!(!p.can_be_granted());
    }

    #[test]
    fn a_pass_that_could_not_read_a_fact_keeps_its_last_value() {
        let mut last_gpu = gpu(0, "GPU-a");
        last_gpu.product = Some("NVIDIA H100 80GB HBM3".into());
        last_gpu.memory_mib = Some(81559);
        last_gpu.mig_mode = Some(MigMode::Enabled);
        last_gpu.classify_grantable();
        let mut other = gpu(1, "GPU-b");
        other.memory_mib = Some(40960);
        let last = Inventory {
            manufacturers: vec![ManufacturerInventory {
                driver_version: Some("590.48.01".into()),
                accelerators: vec![last_gpu.clone(), other],
                ..ManufacturerInventory::empty(Manufacturer::Nvidia)
            }],
        };
        // The tool was silent: procfs named the cards, nothing else. GPU-b's memory was read
        // anew; a card the last pass did not know keeps nothing.
        let mut read = gpu(1, "GPU-b");
        read.memory_mib = Some(40000);
        let mut now = Inventory {
            manufacturers: vec![ManufacturerInventory {
                accelerators: vec![gpu(0, "GPU-a"), read, gpu(2, "GPU-new")],
                ..ManufacturerInventory::empty(Manufacturer::Nvidia)
            }],
        };
        assert_eq!(now.keep_known(&last), 4);
        let section = &now.manufacturers[0];
        assert_eq!(section.driver_version.as_deref(), Some("590.48.01"));
        let a = &section.accelerators[0];
        assert_eq!(a.product, last_gpu.product);
        assert_eq!(a.memory_mib, Some(81559));
        assert_eq!(a.mig_mode, Some(MigMode::Enabled));
        assert_eq!(
            a.grantable,
            Grantable::PartitionsOnly,
            "a MIG card stays a MIG card"
        );
        assert_eq!(
            section.accelerators[1].memory_mib,
            Some(40000),
            "a fact read anew is never replaced"
        );
        assert_eq!(section.accelerators[2].memory_mib, None);
        assert_eq!(
            section.notes,
            ["kept 4 fact(s) of the last detection that this pass could not read"]
        );
        // Nothing to keep: no note.
        let mut again = now.clone();
        again.manufacturers[0].notes.clear();
        assert_eq!(again.keep_known(&now), 0);
        assert!(again.manufacturers[0].notes.is_empty());
    }

    /// The health the vendor's tool states is a fact like a counter: unread, it keeps the last
    /// reading (a card out of service stays out); read healthy, it replaces it.
    #[test]
    fn a_stated_fault_stands_until_the_tool_states_otherwise() {
        let mut sick = gpu(0, "MLU-a");
        sick.reported_faults = Some(vec!["cnmon reports Health State \"In Problem\"".into()]);
        let last = Inventory {
            manufacturers: vec![ManufacturerInventory {
                accelerators: vec![sick.clone()],
                ..ManufacturerInventory::empty(Manufacturer::Cambricon)
            }],
        };
        let pass = |reported: Option<Vec<String>>| {
            let mut a = gpu(0, "MLU-a");
            a.reported_faults = reported;
            let mut now = Inventory {
                manufacturers: vec![ManufacturerInventory {
                    accelerators: vec![a],
                    ..ManufacturerInventory::empty(Manufacturer::Cambricon)
                }],
            };
            now.keep_known(&last);
            now.manufacturers[0].accelerators[0].reported_faults.clone()
        };
        assert_eq!(pass(None), sick.reported_faults);
        assert_eq!(pass(Some(Vec::new())), Some(Vec::new()));
    }

    #[test]
    fn an_accelerator_without_identity_feeds_no_family() {
        let mut inventory = Inventory {
            manufacturers: vec![ManufacturerInventory {
                accelerators: vec![
                    gpu(0, "MLU-a"),
                    Accelerator::new(1, Source::Driver),
                    gpu(2, " "),
                    Accelerator::new(3, Source::Passthrough),
                ],
                ..ManufacturerInventory::empty(Manufacturer::Cambricon)
            }],
        };
        inventory.withhold_unidentified();
        let grantable: Vec<Grantable> = inventory.manufacturers[0]
            .accelerators
            .iter()
            .map(|a| a.grantable)
            .collect();
        assert_eq!(
            grantable,
            [
                Grantable::Whole,
                Grantable::Unidentified,
                Grantable::Unidentified,
                Grantable::Nothing
            ]
        );
        assert!(
            inventory.manufacturers[0].accelerators[1..]
                .iter()
                .all(|a| !a.can_be_granted())
        );
    }

    #[test]
    fn absent_facts_serialise_as_null() {
        let json = serde_json::to_value(gpu(0, "GPU-a")).unwrap();
        assert_eq!(json["memoryMiB"], serde_json::Value::Null);
        assert_eq!(json["busId"], serde_json::Value::Null);
        assert_eq!(json["migMode"], serde_json::Value::Null);
    }
}
