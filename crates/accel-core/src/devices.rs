//! The plain body of a node's `Devices` object (seed 000, "The `Devices` ledger"): `.spec`, what
//! the node has, per accelerator group and per accelerator; `.status`, the ledger per accelerator
//! and the detection and health conditions. And the pure builders: the spec from an inventory, the
//! status from a [`Ledger`], the conditions from what the daemon observed.
//!
//! This module owns the plain data and its shape on the wire (camelCase, absent facts omitted,
//! never filled with a made-up value). It stays free of kube types and of the clock: a time is
//! text the caller read. The CRD wrapper lives in accel-kube; the schema is derived from these
//! types there (feature `schema`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::inventory::{Accelerator, Grantable, Inventory, ManufacturerInventory, SuperPod};
use crate::labels::{GroupNaming, group_key};
use crate::ledger::{Family, Ledger, Mode, Occupancy};
use crate::manufacturer::Manufacturer;

/// `Devices.spec`: what one node has, per accelerator group.
///
/// Its one field is a list, so a JSON merge patch of `{"spec": …}` replaces it whole and a group
/// that went away leaves nothing behind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DevicesSpec {
    /// One entry per accelerator group (`<manufacturer>-<id>`), manufacturers in table order, then
    /// by key.
    #[serde(default)]
    pub groups: Vec<AcceleratorGroup>,
    /// Every network interface of the node, sorted by name (spec/rdma.md §3): node-level, the
    /// same whichever manufacturer's daemon writes it. Absent: never enumerated successfully
    /// (an empty list is a node with none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))
    )]
    pub interfaces: Option<Vec<crate::interfaces::DeviceInterface>>,
}

/// One accelerator group: the accelerators of one model on the node and the facts they share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorGroup {
    pub manufacturer: Manufacturer,
    /// The group key `<manufacturer>-<id>` (`nvidia-h100-80gb-hbm3`), as the feature labels name
    /// it; an accelerator whose product is unknown is grouped under the manufacturer's name alone.
    pub key: String,
    /// The product name as the driver reports it (`NVIDIA H100 80GB HBM3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// The exact VRAM in MiB, the smallest any member reports (a budget must fit on each).
    #[serde(rename = "memoryMiB", default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Compute cores, where the vendor reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// For NVIDIA the CUDA driver version (`13.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    /// The product family or architecture (`Hopper`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default)]
    pub accelerators: Vec<DevicesAccelerator>,
}

/// What an accelerator may be handed out as (DESIGN.md, "What can be granted").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Grantability {
    /// Exclusive, shared and sliced.
    Whole,
    /// Only hardware partitions (MIG mode).
    PartitionsOnly,
    /// Nothing: passed through to a VM, or no identity (UUID) was read for it.
    Nothing,
}

impl From<Grantable> for Grantability {
    fn from(g: Grantable) -> Self {
        match g {
            Grantable::Whole => Grantability::Whole,
            Grantable::PartitionsOnly => Grantability::PartitionsOnly,
            Grantable::Nothing | Grantable::Unidentified => Grantability::Nothing,
        }
    }
}

/// One accelerator in `Devices.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DevicesAccelerator {
    /// The position in the node's enumeration.
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The PCI address in nvidia-smi's form (`00000000:18:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// VRAM as the driver reports it for this accelerator, in MiB.
    #[serde(rename = "memoryMiB", default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    pub healthy: bool,
    /// Why it fails the health rule (its faults); empty when healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
    pub grantable: Grantability,
    /// Logical slicing, when the accelerator is offered sliced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_sliced: Option<LogicalSliced>,
    /// The partition profiles it can host, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partition_profiles: BTreeMap<String, PartitionProfile>,
    /// The super-pod it is a member of, as its driver reports it (Ascend A3 and 950 servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod: Option<SuperPod>,
}

/// `logicalSliced`: how many logical slices an accelerator hosts at most, and whether their
/// cores percentages may add up past 100 (the specs' `{count, coresPercentageOvercommit}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LogicalSliced {
    pub count: u32,
    /// Whether compute is over-committed across the slices: true where a slice's cores cap is
    /// a per-process limit or a mask that may overlap; false where the slices' cores
    /// percentages on this accelerator sum to at most 100, so the node's
    /// `.sliced.cores-percentage` capacity counts 100 for it, not 100 a slot. The
    /// manufacturer's fact (`Manufacturer::cores_percentage_overcommit`); always written, read
    /// as false when absent.
    #[serde(default)]
    pub cores_percentage_overcommit: bool,
}

/// One partition profile an accelerator can host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PartitionProfile {
    /// The driver's profile id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// The profile's VRAM in MiB as the driver reports it.
    #[serde(rename = "memoryMiB", default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Where an instance may be placed: start slot and size, in memory slices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placement>,
}

/// One allowed placement of a partition profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

impl DevicesSpec {
    /// The spec of a whole inventory. `slices` says, per manufacturer, how many logical slices an
    /// accelerator is offered with (`None`: not sliced on this node, e.g. no preload library).
    pub fn from_inventory(
        inventory: &Inventory,
        slices: impl Fn(Manufacturer) -> Option<u32>,
    ) -> DevicesSpec {
        DevicesSpec::from_inventory_with(inventory, slices, GroupNaming::default())
    }

    /// [`DevicesSpec::from_inventory`] with the deployment's group naming.
    pub fn from_inventory_with(
        inventory: &Inventory,
        slices: impl Fn(Manufacturer) -> Option<u32>,
        naming: GroupNaming,
    ) -> DevicesSpec {
        DevicesSpec {
            interfaces: None,
            groups: inventory
                .manufacturers
                .iter()
                .flat_map(|section| groups_with(section, slices(section.name), naming))
                .collect(),
        }
    }

    /// Every group key, in order.
    pub fn group_keys(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().map(|g| g.key.as_str())
    }
}

/// The groups of one manufacturer's section. `slices` is the logical slice count an
/// unpartitioned accelerator is offered with, `None` when this node does not slice it.
pub fn groups(section: &ManufacturerInventory, slices: Option<u32>) -> Vec<AcceleratorGroup> {
    groups_with(section, slices, GroupNaming::default())
}

/// [`groups`] with the deployment's group naming.
pub fn groups_with(
    section: &ManufacturerInventory,
    slices: Option<u32>,
    naming: GroupNaming,
) -> Vec<AcceleratorGroup> {
    let m = section.name;
    let mut by_key: BTreeMap<String, Vec<&Accelerator>> = BTreeMap::new();
    for accelerator in &section.accelerators {
        let key = group_key(
            m,
            accelerator.product.as_deref().unwrap_or(""),
            accelerator.memory_mib,
            naming,
        );
        by_key.entry(key).or_default().push(accelerator);
    }
    by_key
        .into_iter()
        .map(|(key, mut members)| {
            members.sort_by_key(|a| a.index);
            let first = members.first().copied();
            AcceleratorGroup {
                manufacturer: m,
                key,
                product: first.and_then(|a| a.product.clone()),
                memory_mib: members.iter().filter_map(|a| a.memory_mib).min(),
                cores: first.and_then(|a| a.cores),
                driver_version: section.driver_version.clone(),
                runtime_version: section.runtime_version.clone(),
                family: first.and_then(|a| a.architecture.clone()),
                compute_capability: first.and_then(|a| a.compute_capability.clone()),
                accelerators: members
                    .iter()
                    .map(|a| accelerator(a, slices, m.cores_percentage_overcommit()))
                    .collect(),
            }
        })
        .collect()
}

fn accelerator(a: &Accelerator, slices: Option<u32>, overcommit: bool) -> DevicesAccelerator {
    let logical_sliced = match (a.grantable, slices) {
        (Grantable::Whole, Some(count)) if count > 0 => Some(LogicalSliced {
            count,
            cores_percentage_overcommit: overcommit,
        }),
        _ => None,
    };
    DevicesAccelerator {
        index: a.index,
        uuid: a.uuid.clone(),
        bus_id: a.bus_id.as_ref().map(ToString::to_string),
        numa_node: a.numa_node,
        memory_mib: a.memory_mib,
        healthy: a.healthy,
        health_reasons: a.health_reasons.clone(),
        grantable: a.grantable.into(),
        super_pod: a.super_pod,
        logical_sliced,
        partition_profiles: a
            .partition_profiles
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    PartitionProfile {
                        id: Some(p.id),
                        memory_mib: p.memory_mib,
                        placements: p
                            .placements
                            .iter()
                            .map(|pl| Placement {
                                start: pl.start,
                                size: pl.size,
                            })
                            .collect(),
                    },
                )
            })
            .collect(),
    }
}

/// `Devices.status`: the ledger per accelerator, and the conditions.
///
/// Both fields are lists and always serialized, so a JSON merge patch of `{"status": …}` replaces
/// each whole.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DevicesStatus {
    /// The `AcceleratorAllocation` ledger, manufacturers in table order, then by index.
    #[serde(default)]
    pub accelerators: Vec<AcceleratorAllocation>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The faults raised on each accelerator this boot (an `Xid<n>` condition per code and
    /// accelerator, seed 002 "XIDs from the kernel log"), by accelerator then type: why an
    /// accelerator left service, for `kubectl get devices -o yaml`.
    #[serde(default)]
    pub faults: Vec<AcceleratorFault>,
}

/// Whose fault an XID is (DESIGN.md, "Health"): a hardware-class fault takes the accelerator out
/// of service, an application-class one is reported only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum FaultClass {
    /// The workload's fault: raises a condition, leaves the accelerator in service.
    Application,
    /// The accelerator's fault: it fails the health rule until a reset or a reboot.
    Hardware,
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultClass::Application => "application",
            FaultClass::Hardware => "hardware",
        })
    }
}

/// One fault condition raised on one accelerator this boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorFault {
    pub manufacturer: Manufacturer,
    /// The accelerator's index, when the inventory still lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub uuid: String,
    /// The condition: `Xid<n>`, or `FallenOffBus`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The XID code, when the driver gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    pub class: FaultClass,
    /// The driver's text of the latest occurrence.
    pub message: String,
    /// When it was first seen this boot (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// An accelerator's mode in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AllocationMode {
    Free,
    Exclusive,
    Shared,
    Sliced,
    Partitioned,
}

impl From<Mode> for AllocationMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Free => AllocationMode::Free,
            Mode::Held(Family::Exclusive) => AllocationMode::Exclusive,
            Mode::Held(Family::Shared) => AllocationMode::Shared,
            Mode::Held(Family::Sliced) => AllocationMode::Sliced,
            Mode::Held(Family::Partitioned) => AllocationMode::Partitioned,
        }
    }
}

/// One accelerator's entry in the ledger (`AcceleratorAllocation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorAllocation {
    pub manufacturer: Manufacturer,
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    pub mode: AllocationMode,
    /// The units still free (`Remaining`; 1,600,000 is a whole accelerator).
    pub remaining: u64,
    /// Logical slices it hosts, one per container; present when it is offered sliced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_slices: Option<u32>,
    /// Partition profile → instances allocated; present for a hardware-partitioned accelerator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_profiles: Option<BTreeMap<String, u32>>,
    /// Partition profile → instances that can still be placed beside the allocated ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeable_profiles: Option<BTreeMap<String, u32>>,
}

/// The partitions of one accelerator, as the partition geometry reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionOccupancy {
    pub allocated: BTreeMap<String, u32>,
    pub placeable: BTreeMap<String, u32>,
}

/// The ledger entries of one manufacturer's [`Ledger`]. `partitions` holds, by accelerator
/// index, the partitions of those in a hardware partitioning mode; an accelerator absent from it
/// has no partition entries (absent, not zero).
pub fn allocations(
    manufacturer: Manufacturer,
    ledger: &Ledger,
    partitions: &BTreeMap<u32, PartitionOccupancy>,
) -> Vec<AcceleratorAllocation> {
    ledger
        .seats()
        .map(|seat| {
            let occupancy = ledger.occupancy(seat.index).unwrap_or(&Occupancy::FREE);
            let parts = partitions.get(&seat.index);
            AcceleratorAllocation {
                manufacturer,
                index: seat.index,
                uuid: seat.uuid.clone(),
                mode: occupancy.mode.into(),
                remaining: occupancy.remaining_units(),
                allocated_slices: (seat.slice_capacity > 0).then_some(occupancy.slices),
                allocated_profiles: parts.map(|p| p.allocated.clone()),
                placeable_profiles: parts.map(|p| p.placeable.clone()),
            }
        })
        .collect()
}

/// A condition's truth, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A condition in Kubernetes' shape (`metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    /// CamelCase, machine-readable.
    pub reason: String,
    pub message: String,
    /// RFC 3339; when `status` last changed.
    pub last_transition_time: String,
}

/// The condition type saying whether the last detection pass measured.
pub const DETECTED: &str = "Detected";
/// The condition type saying whether every accelerator passes the health rule.
pub const HEALTHY: &str = "Healthy";

/// What the daemon knows of its detection passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectionReport {
    /// When the last pass that measured finished (RFC 3339).
    pub last_detected_at: Option<String>,
    /// Manufacturers whose last pass could not measure, and why (they are reported as last
    /// detected).
    pub failures: BTreeMap<Manufacturer, String>,
}

impl Condition {
    fn new(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            last_transition_time: String::new(),
        }
    }

    /// The `Detected` condition of a report.
    pub fn detection(report: &DetectionReport) -> Condition {
        let since = report
            .last_detected_at
            .as_deref()
            .map(|t| format!("last detected at {t}"));
        if !report.failures.is_empty() {
            let failed: Vec<String> = report
                .failures
                .iter()
                .map(|(m, why)| format!("{m}: {why}"))
                .collect();
            let carried = since.map_or_else(
                || "nothing detected yet".to_string(),
                |s| format!("reporting what was {s}"),
            );
            return Condition::new(
                DETECTED,
                ConditionStatus::False,
                "DetectionFailed",
                format!(
                    "the last pass could not measure ({}); {carried}",
                    failed.join("; ")
                ),
            );
        }
        match since {
            Some(since) => Condition::new(DETECTED, ConditionStatus::True, "Detected", since),
            None => Condition::new(
                DETECTED,
                ConditionStatus::Unknown,
                "NotYetDetected",
                "no detection pass has finished yet".to_string(),
            ),
        }
    }

    /// The `Healthy` condition of a spec: false, naming each accelerator and its faults, when
    /// any fails the health rule.
    pub fn health(spec: &DevicesSpec) -> Condition {
        let faults: Vec<String> = spec
            .groups
            .iter()
            .flat_map(|g| g.accelerators.iter().map(move |a| (g.manufacturer, a)))
            .filter(|(_, a)| !a.healthy)
            .map(|(m, a)| {
                let name = match &a.uuid {
                    Some(uuid) => format!("{m} {} ({uuid})", a.index),
                    None => format!("{m} {}", a.index),
                };
                if a.health_reasons.is_empty() {
                    name
                } else {
                    format!("{name}: {}", a.health_reasons.join(", "))
                }
            })
            .collect();
        if faults.is_empty() {
            Condition::new(
                HEALTHY,
                ConditionStatus::True,
                "AllHealthy",
                "every accelerator passes the health rule".to_string(),
            )
        } else {
            Condition::new(
                HEALTHY,
                ConditionStatus::False,
                "Faults",
                format!("unhealthy: {}", faults.join("; ")),
            )
        }
    }
}

/// Stamps `fresh` conditions with their transition time: a condition whose type had the same
/// status in `previous` keeps its time, any other takes `now` (RFC 3339). Sorted by type.
pub fn settle_conditions(
    previous: &[Condition],
    fresh: impl IntoIterator<Item = Condition>,
    now: &str,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = fresh
        .into_iter()
        .map(|mut c| {
            c.last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == c.status)
                .map_or_else(|| now.to_string(), |p| p.last_transition_time.clone());
            c
        })
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

#[cfg(test)]
mod tests;
