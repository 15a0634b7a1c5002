//! The inventory as DRA devices: one manufacturer's section of a node's inventory becomes the
//! spec of one `resource.k8s.io/v1` ResourceSlice, a pool named after the node holding one device
//! per accelerator, with typed attributes and capacities the scheduler's CEL selectors read.
//!
//! This module owns the slice's shape, the device names and the attribute keys, and checks them
//! against the resource API's rules before anything is sent; it is pure (no API server, no
//! machine) and knows no manufacturer by name: a device's kind is the last segment of the
//! manufacturer's resource base (`nvidia.com/gpu` → `gpu-0`, `huawei.com/npu` → `npu-0`).
//!
//! Which accelerators become devices: those whose grantable state is `Whole`. An unhealthy one is
//! published with `gpustack.ai/healthy=false` (health comes and goes, and the chart's
//! DeviceClass selects `healthy` ones only, so the scheduler skips it while an operator still
//! sees it). An accelerator that cannot be given whole is left out: one passed through to a VM
//! or one with no identity would be refused by every prepare (the responder has nothing to name
//! it by).
//!
//! An accelerator in a hardware partitioning mode (MIG, Hygon's, T-Head's: grantable
//! `PartitionsOnly`) is published as partitionable devices: one device per profile and legal
//! placement (`gpu-3-3g-40gb-4`: card 3, profile `3g.40gb`, first memory slice 4), each consuming
//! the memory slices `[start, start + size)` of its card's counter set (`gpu-3-slices`, one
//! counter of 1 per memory slice), so the scheduler never allocates two overlapping placements;
//! a profile the driver allows fewer instances of than it has placements (NVIDIA's `+me`
//! profiles: one media engine) also consumes one of a counter of that many. The instance is made
//! at prepare, at exactly the allocated placement, and destroyed at unprepare.
//!
//! The API bounds a slice (128 devices, 64 where any consumes counters; counter sets only in a
//! slice without devices, at most 8), so a pool is one or more slices: the devices first, then
//! the counter sets ([`pool_specs`]); every slice carries the pool's generation and count.

use std::collections::{BTreeMap, BTreeSet};

use accel_core::inventory::{Accelerator, Grantable, ManufacturerInventory};
use accel_core::labels::{GroupNaming, group_key};
use accel_core::manufacturer::Manufacturer;
use serde::{Deserialize, Serialize};

use crate::registration::{DriverName, DriverNameError};

/// The domain our attribute and capacity names are qualified with (`gpustack.ai/uuid`): one
/// domain for every manufacturer, so a selector reads `device.attributes["gpustack.ai"]` alike
/// whichever driver published the device.
pub const ATTRIBUTE_DOMAIN: &str = "gpustack.ai";

/// The domain our drivers are named under: `<manufacturer>.gpustack.ai`.
pub const DRIVER_DOMAIN: &str = "gpustack.ai";

/// The most devices one ResourceSlice may hold (`resource.k8s.io/v1`
/// `ResourceSliceMaxDevices`).
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The most devices one ResourceSlice may hold when any of them consumes counters
/// (`ResourceSliceMaxDevicesWithAdvancedFeatures`).
pub const MAX_COUNTER_DEVICES_PER_SLICE: usize = 64;
/// The most counter sets one ResourceSlice may hold (`ResourceSliceMaxCounterSets`).
pub const MAX_COUNTER_SETS_PER_SLICE: usize = 8;
/// The most counters one counter set may hold (`ResourceSliceMaxCountersPerCounterSet`).
pub const MAX_COUNTERS_PER_SET: usize = 32;

/// The longest string or version attribute value the resource API accepts.
const ATTRIBUTE_VALUE_MAX: usize = 64;
/// The longest C identifier allowed after the domain of a qualified name.
const IDENTIFIER_MAX: usize = 32;
/// The longest DNS label (a device name).
const DNS_LABEL_MAX: usize = 63;
/// The longest DNS subdomain (a pool name, a node name, a domain).
const DNS_SUBDOMAIN_MAX: usize = 253;

/// A ResourceSlice's spec, the fields this project writes, spelled as the API spells them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    pub driver: String,
    pub pool: ResourcePool,
    pub node_name: String,
    /// A slice holds devices or counter sets, never both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<CounterSet>,
}

/// `sharedCounters[]`: one partitionable card's memory slices (and its limited profiles'
/// instance counts), which its partition devices consume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterSet {
    pub name: String,
    pub counters: BTreeMap<String, Counter>,
}

/// A counter's amount, a quantity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub value: String,
}

/// `consumesCounters[]`: what a partition device takes of its card's counter set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterConsumption {
    pub counter_set: String,
    pub counters: BTreeMap<String, Counter>,
}

/// The pool a slice belongs to: one pool per node and driver, in one slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePool {
    pub name: String,
    /// Bumped whenever the pool's devices change, so the scheduler drops slices of an older
    /// generation.
    pub generation: i64,
    pub resource_slice_count: i64,
}

/// One device of a slice: an accelerator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    /// Several claims may hold the device at once, each consuming its capacities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_multiple_allocations: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, DeviceAttribute>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, DeviceCapacity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes_counters: Vec<CounterConsumption>,
}

/// A typed attribute value: exactly one of the API's four fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceAttribute {
    Int(i64),
    Bool(bool),
    String(String),
    /// A semantic version (semver.org 2.0.0).
    Version(String),
}

/// A capacity: a Kubernetes quantity, and how a claim consumes it where the device may be
/// allocated to several claims (consumable capacity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCapacity {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_policy: Option<RequestPolicy>,
}

/// `requestPolicy`: what a claim that asks nothing consumes, and what it may ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPolicy {
    pub default: String,
    pub valid_range: ValidRange,
}

/// `requestPolicy.validRange`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidRange {
    pub min: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// How a manufacturer's devices may be shared through DRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// One claim a device.
    #[default]
    Whole,
    /// Logical slices by consumable capacity (the device plugin offers `.sliced` here): a
    /// device may be allocated to several claims (`allowMultipleAllocations`), each consuming
    /// `memory` (a claim that asks none takes all of it: the whole card) and `coresPercentage`
    /// (one that asks none takes 100 where the manufacturer's slices may not over-commit
    /// compute, else 0, no cap); `cores`, the core count, is consumed only when asked; and one
    /// of `slices`, the `per_card` slices the ledger allows an accelerator, so the scheduler
    /// never allocates more shares of a card than the ledger would grant.
    Slices {
        cores_overcommit: bool,
        per_card: u32,
    },
}

/// The consumable cores percentage of a sliceable device.
pub const CORES_PERCENTAGE: &str = "coresPercentage";

/// The slices of a sliceable device: each share consumes one.
pub const SLICES: &str = "slices";

/// Why a manufacturer's section cannot be a ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    /// The node name cannot name the pool (it must be a DNS subdomain).
    #[error(
        "node name {node:?} is not a DNS subdomain of at most 253 characters; it names the ResourceSlice pool"
    )]
    NodeName { node: String },
    /// Two accelerators of one section share an index, so two devices would share a name.
    #[error("{manufacturer}: accelerator index {index} appears twice; device names would collide")]
    DuplicateIndex {
        manufacturer: Manufacturer,
        index: u32,
    },
    /// A partition profile whose name gives no DNS-label device name.
    #[error(
        "{manufacturer}: accelerator {index}'s partition profile {profile:?} gives no device name (a DNS label)"
    )]
    ProfileName {
        manufacturer: Manufacturer,
        index: u32,
        profile: String,
    },
    /// Two devices of one pool would share a name (two profiles spelled alike).
    #[error("{manufacturer}: two devices would be named {name}")]
    DuplicateDevice {
        manufacturer: Manufacturer,
        name: String,
    },
    /// More counters on one card than a counter set may hold.
    #[error(
        "{manufacturer}: accelerator {index} needs {count} counters, more than the {MAX_COUNTERS_PER_SET} a counter set may hold"
    )]
    TooManyCounters {
        manufacturer: Manufacturer,
        index: u32,
        count: usize,
    },
}

/// What a published device stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRef {
    /// A whole accelerator, by index.
    Whole(u32),
    /// One placement of a partition profile on an accelerator.
    Partition(PartitionRef),
}

/// One placement of a partition profile: made at prepare, exactly here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRef {
    pub index: u32,
    /// The profile as the vendor spells it (`3g.40gb`).
    pub profile: String,
    pub start: u32,
    pub size: u32,
}

impl DeviceRef {
    /// The accelerator the device is, or is a part of.
    pub fn index(&self) -> u32 {
        match self {
            DeviceRef::Whole(index) => *index,
            DeviceRef::Partition(p) => p.index,
        }
    }
}

/// The driver a manufacturer's devices are published under: `<manufacturer>.gpustack.ai`.
pub fn driver_for(manufacturer: Manufacturer) -> Result<DriverName, DriverNameError> {
    DriverName::parse(&format!("{}.{DRIVER_DOMAIN}", manufacturer.name()))
}

/// The device name of an accelerator: the manufacturer's device kind and its index (`gpu-3`).
pub fn device_name(manufacturer: Manufacturer, index: u32) -> String {
    format!("{}-{index}", device_kind(manufacturer))
}

/// The accelerator index a device name of this manufacturer stands for; `None` for any other
/// name.
pub fn index_of(manufacturer: Manufacturer, device: &str) -> Option<u32> {
    let digits = device
        .strip_prefix(device_kind(manufacturer))?
        .strip_prefix('-')?;
    // `gpu-01` is no name we publish: only the canonical spelling maps back.
    let index: u32 = digits.parse().ok()?;
    (index.to_string() == digits).then_some(index)
}

/// The last segment of the manufacturer's resource base (`nvidia.com/gpu` → `gpu`): a DNS
/// label, the word the manufacturer's users already know its devices by.
fn device_kind(manufacturer: Manufacturer) -> &'static str {
    let base = manufacturer.default_resource_base();
    base.rsplit('/').next().unwrap_or(base)
}

/// Whether an accelerator becomes a device: only one that can be given whole (see the module
/// documentation for why the others are left out).
pub fn is_published(accelerator: &Accelerator) -> bool {
    accelerator.grantable == Grantable::Whole
}

/// Whether an accelerator is published as partitionable devices: one in a partitioning mode.
pub fn is_partitioned(accelerator: &Accelerator) -> bool {
    accelerator.grantable == Grantable::PartitionsOnly
}

/// A profile name as a DNS label (`1g.10gb+me` → `1g-10gb-me`); `None` when nothing is left.
fn profile_label(profile: &str) -> Option<String> {
    let mut label = String::new();
    for c in profile.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            label.push(c);
        } else if !label.is_empty() && !label.ends_with('-') {
            label.push('-');
        }
    }
    while label.ends_with('-') {
        label.pop();
    }
    (!label.is_empty()).then_some(label)
}

/// The counter set of a partitionable accelerator (`gpu-3-slices`).
pub fn counter_set_name(manufacturer: Manufacturer, index: u32) -> String {
    format!("{}-slices", device_name(manufacturer, index))
}

/// The counter of one memory slice.
fn slice_counter(slice: u32) -> String {
    format!("memory-slice-{slice}")
}

/// The partition placements an accelerator offers, with their device names, in publication
/// order (profiles as the driver lists them, placements by start).
fn partition_devices(
    manufacturer: Manufacturer,
    a: &Accelerator,
) -> Result<
    Vec<(
        String,
        PartitionRef,
        &accel_core::inventory::PartitionProfile,
    )>,
    SliceError,
> {
    let mut out = Vec::new();
    for profile in &a.partition_profiles {
        let label = profile_label(&profile.name)
            .map(|l| format!("{}-{l}", device_name(manufacturer, a.index)))
            .ok_or_else(|| SliceError::ProfileName {
                manufacturer,
                index: a.index,
                profile: profile.name.clone(),
            })?;
        for placement in &profile.placements {
            let name = format!("{label}-{}", placement.start);
            if !is_dns_label(&name) {
                return Err(SliceError::ProfileName {
                    manufacturer,
                    index: a.index,
                    profile: profile.name.clone(),
                });
            }
            out.push((
                name,
                PartitionRef {
                    index: a.index,
                    profile: profile.name.clone(),
                    start: placement.start,
                    size: placement.size,
                },
                profile,
            ));
        }
    }
    Ok(out)
}

/// A limited profile's instance counter (`1g-10gb-me-instances`): one whose driver allows
/// fewer instances than it has placements.
fn instance_counter(profile: &accel_core::inventory::PartitionProfile) -> Option<(String, u32)> {
    let total = profile.instances_total?;
    let placements = u32::try_from(profile.placements.len()).unwrap_or(u32::MAX);
    if total == 0 || total >= placements {
        return None;
    }
    Some((
        format!("{}-instances", profile_label(&profile.name)?),
        total,
    ))
}

/// Every device name a section publishes, with what it stands for: how a claim's allocation
/// is read back.
pub fn published_devices(section: &ManufacturerInventory) -> BTreeMap<String, DeviceRef> {
    let m = section.name;
    let mut out = BTreeMap::new();
    for a in &section.accelerators {
        if is_published(a) {
            out.insert(device_name(m, a.index), DeviceRef::Whole(a.index));
        } else if is_partitioned(a)
            && let Ok(parts) = partition_devices(m, a)
        {
            for (name, part, _) in parts {
                out.insert(name, DeviceRef::Partition(part));
            }
        }
    }
    out
}

/// The first ResourceSlice spec of one manufacturer's pool on `node`, at pool `generation`,
/// whole devices only: the whole pool where no accelerator is partitioned and there are at most
/// [`MAX_DEVICES_PER_SLICE`] devices ([`pool_specs`]).
pub fn slice_spec(
    driver: &DriverName,
    node: &str,
    section: &ManufacturerInventory,
    naming: GroupNaming,
    generation: i64,
) -> Result<ResourceSliceSpec, SliceError> {
    let mut pool = pool_specs(driver, node, section, naming, generation, Sharing::Whole)?;
    // `pool_specs` always gives at least one slice.
    Ok(pool.swap_remove(0))
}

/// The ResourceSlice specs of one manufacturer's pool on `node`, at pool `generation`: its
/// devices (whole cards shared as `sharing` says, and the partition placements of cards in a
/// partitioning mode), as many slices as the API's bounds need, then the partitionable cards'
/// counter sets in slices of their own. Never empty: a section with no device is one slice
/// with none.
pub fn pool_specs(
    driver: &DriverName,
    node: &str,
    section: &ManufacturerInventory,
    naming: GroupNaming,
    generation: i64,
    sharing: Sharing,
) -> Result<Vec<ResourceSliceSpec>, SliceError> {
    if !is_dns_subdomain(node) {
        return Err(SliceError::NodeName {
            node: node.to_string(),
        });
    }
    let manufacturer = section.name;
    let mut seen = BTreeSet::new();
    let mut whole = Vec::new();
    let mut partitioned: Vec<&Accelerator> = Vec::new();
    for accelerator in &section.accelerators {
        if !seen.insert(accelerator.index) {
            return Err(SliceError::DuplicateIndex {
                manufacturer,
                index: accelerator.index,
            });
        }
        if is_published(accelerator) {
            whole.push(device(section, accelerator, naming, sharing));
        } else if is_partitioned(accelerator) && !accelerator.partition_profiles.is_empty() {
            partitioned.push(accelerator);
        }
    }
    // Highest index first: the scheduler tries a slice's devices in order and the device
    // plugin's preference starts from the lowest, so on a node serving both APIs they meet
    // only when it is nearly full (where they do, the ledger refuses the later one).
    whole.sort_by_key(|d| std::cmp::Reverse(index_of(manufacturer, &d.name)));
    partitioned.sort_by_key(|a| std::cmp::Reverse(a.index));
    let mut parts = Vec::new();
    let mut counter_sets = Vec::new();
    let mut names: BTreeSet<String> = whole.iter().map(|d| d.name.clone()).collect();
    for a in partitioned {
        let (set, devices) = partition_pool(section, a, naming)?;
        for d in &devices {
            if !names.insert(d.name.clone()) {
                return Err(SliceError::DuplicateDevice {
                    manufacturer,
                    name: d.name.clone(),
                });
            }
        }
        counter_sets.push(set);
        parts.extend(devices);
    }
    // Whole cards first, then the partitions; a slice holding any device that consumes
    // counters holds at most 64.
    let per_slice = if parts.is_empty() {
        MAX_DEVICES_PER_SLICE
    } else {
        MAX_COUNTER_DEVICES_PER_SLICE
    };
    whole.extend(parts);
    let mut device_slices: Vec<Vec<Device>> =
        whole.chunks(per_slice).map(<[Device]>::to_vec).collect();
    let counter_slices: Vec<Vec<CounterSet>> = counter_sets
        .chunks(MAX_COUNTER_SETS_PER_SLICE)
        .map(<[CounterSet]>::to_vec)
        .collect();
    if device_slices.is_empty() && counter_slices.is_empty() {
        device_slices.push(Vec::new());
    }
    let count = i64::try_from(device_slices.len() + counter_slices.len()).unwrap_or(i64::MAX);
    let slice = |devices: Vec<Device>, shared_counters: Vec<CounterSet>| ResourceSliceSpec {
        driver: driver.as_str().to_string(),
        pool: ResourcePool {
            name: node.to_string(),
            generation,
            resource_slice_count: count,
        },
        node_name: node.to_string(),
        devices,
        shared_counters,
    };
    Ok(device_slices
        .into_iter()
        .map(|devices| slice(devices, Vec::new()))
        .chain(
            counter_slices
                .into_iter()
                .map(|sets| slice(Vec::new(), sets)),
        )
        .collect())
}

/// A partitionable card's counter set and its partition devices.
fn partition_pool(
    section: &ManufacturerInventory,
    a: &Accelerator,
    naming: GroupNaming,
) -> Result<(CounterSet, Vec<Device>), SliceError> {
    let m = section.name;
    let set = counter_set_name(m, a.index);
    let placements = partition_devices(m, a)?;
    let slices = placements
        .iter()
        .map(|(_, p, _)| p.start.saturating_add(p.size))
        .max()
        .unwrap_or(0);
    let one = || Counter { value: "1".into() };
    let mut counters: BTreeMap<String, Counter> =
        (0..slices).map(|k| (slice_counter(k), one())).collect();
    for profile in &a.partition_profiles {
        if let Some((name, total)) = instance_counter(profile) {
            counters.insert(
                name,
                Counter {
                    value: count_quantity(u64::from(total)),
                },
            );
        }
    }
    if counters.len() > MAX_COUNTERS_PER_SET {
        return Err(SliceError::TooManyCounters {
            manufacturer: m,
            index: a.index,
            count: counters.len(),
        });
    }
    // The card's attributes, once: every placement carries them. Its UUID is the parent's;
    // the instance's is made at prepare.
    let mut card = device(section, a, naming, Sharing::Whole);
    if let Some(uuid) = card.attributes.remove(&qualified("uuid")) {
        card.attributes.insert(qualified("parentUuid"), uuid);
    }
    card.attributes
        .insert(qualified("partition"), DeviceAttribute::Bool(true));
    card.capacity.clear();
    let devices = placements
        .into_iter()
        .map(|(name, part, profile)| {
            let mut device = card.clone();
            device.name = name;
            let attributes = &mut device.attributes;
            if let Some(value) = text_attribute(part.profile.clone()) {
                attributes.insert(qualified("profile"), value);
            }
            attributes.insert(
                qualified("placementStart"),
                DeviceAttribute::Int(i64::from(part.start)),
            );
            attributes.insert(
                qualified("placementSize"),
                DeviceAttribute::Int(i64::from(part.size)),
            );
            if let Some(mib) = profile.memory_mib {
                device.capacity.insert(
                    qualified("memory"),
                    DeviceCapacity {
                        value: mebibytes_quantity(mib),
                        request_policy: None,
                    },
                );
            }
            if let Some(sm) = profile.multiprocessors {
                device.capacity.insert(
                    qualified("multiprocessors"),
                    DeviceCapacity {
                        value: count_quantity(u64::from(sm)),
                        request_policy: None,
                    },
                );
            }
            let mut consumed: BTreeMap<String, Counter> = (part.start
                ..part.start.saturating_add(part.size))
                .map(|k| (slice_counter(k), one()))
                .collect();
            if let Some((name, _)) = instance_counter(profile) {
                consumed.insert(name, one());
            }
            device.consumes_counters = vec![CounterConsumption {
                counter_set: set.clone(),
                counters: consumed,
            }];
            device
        })
        .collect();
    Ok((
        CounterSet {
            name: set,
            counters,
        },
        devices,
    ))
}

fn device(
    section: &ManufacturerInventory,
    a: &Accelerator,
    naming: GroupNaming,
    sharing: Sharing,
) -> Device {
    let m = section.name;
    let mut attributes = BTreeMap::new();
    let mut put = |name: &str, value: DeviceAttribute| {
        attributes.insert(qualified(name), value);
    };
    put(
        "manufacturer",
        DeviceAttribute::String(m.name().to_string()),
    );
    put("index", DeviceAttribute::Int(i64::from(a.index)));
    put("healthy", DeviceAttribute::Bool(a.healthy));
    // Whole cards and partitions are told apart by one attribute the DeviceClasses select on.
    put("partition", DeviceAttribute::Bool(false));
    let texts = [
        ("product", a.product.clone()),
        (
            "groupId",
            a.product
                .as_deref()
                .map(|p| group_key(m, p, a.memory_mib, naming)),
        ),
        ("uuid", a.uuid.clone()),
        ("pciBusId", a.bus_id.as_ref().map(ToString::to_string)),
    ];
    for (name, text) in texts {
        if let Some(value) = text.and_then(text_attribute) {
            put(name, value);
        }
    }
    if let Some(numa) = a.numa_node {
        put("numaNode", DeviceAttribute::Int(i64::from(numa)));
    }
    if let Some(value) = section
        .driver_version
        .as_deref()
        .and_then(version_attribute)
    {
        put("driverVersion", value);
    }
    let sliced = match sharing {
        Sharing::Whole => None,
        // A card whose memory is unknown cannot be sliced by it.
        // Nor one the ledger allows no slice of.
        Sharing::Slices {
            cores_overcommit,
            per_card,
        } => a
            .memory_mib
            .filter(|_| per_card > 0)
            .map(|_| (cores_overcommit, per_card)),
    };
    let mut capacity = BTreeMap::new();
    if let Some(mib) = a.memory_mib {
        let value = mebibytes_quantity(mib);
        // Asked nothing, a claim takes all the memory: the whole card.
        let request_policy = sliced.map(|_| RequestPolicy {
            default: value.clone(),
            valid_range: ValidRange {
                min: "1Mi".into(),
                max: None,
                step: None,
            },
        });
        capacity.insert(
            qualified("memory"),
            DeviceCapacity {
                value,
                request_policy,
            },
        );
    }
    if let Some(cores) = a.cores {
        capacity.insert(
            qualified("cores"),
            DeviceCapacity {
                value: count_quantity(u64::from(cores)),
                request_policy: sliced.map(|_| RequestPolicy {
                    default: "0".into(),
                    valid_range: ValidRange {
                        min: "0".into(),
                        max: None,
                        step: None,
                    },
                }),
            },
        );
    }
    if let Some((cores_overcommit, per_card)) = sliced {
        capacity.insert(
            qualified(SLICES),
            DeviceCapacity {
                value: count_quantity(u64::from(per_card)),
                request_policy: Some(RequestPolicy {
                    default: "1".into(),
                    valid_range: ValidRange {
                        min: "1".into(),
                        max: Some("1".into()),
                        step: None,
                    },
                }),
            },
        );
        capacity.insert(
            qualified(CORES_PERCENTAGE),
            DeviceCapacity {
                value: "100".into(),
                request_policy: Some(RequestPolicy {
                    default: if cores_overcommit { "0" } else { "100" }.into(),
                    valid_range: ValidRange {
                        min: "0".into(),
                        max: Some("100".into()),
                        step: Some("1".into()),
                    },
                }),
            },
        );
    }
    Device {
        name: device_name(m, a.index),
        allow_multiple_allocations: sliced.map(|_| true),
        attributes,
        capacity,
        consumes_counters: Vec::new(),
    }
}

/// A size in MiB as the API server spells the quantity back (its canonical form: the largest
/// binary suffix that keeps the number whole, `15360` MiB → `15Gi`), so the slice read back
/// equals the slice computed and an unchanged node writes nothing.
fn mebibytes_quantity(mib: u64) -> String {
    canonical(mib, 1024, &["Mi", "Gi", "Ti", "Pi", "Ei"])
}

/// A count as the API server spells the quantity back (the largest decimal suffix that keeps
/// the number whole, `2000` → `2k`, `2560` → `2560`).
fn count_quantity(count: u64) -> String {
    canonical(count, 1000, &["", "k", "M", "G", "T", "P", "E"])
}

fn canonical(mut amount: u64, base: u64, suffixes: &[&str]) -> String {
    if amount == 0 {
        return "0".to_string();
    }
    let mut step = 0;
    while amount.is_multiple_of(base) && step + 1 < suffixes.len() {
        amount /= base;
        step += 1;
    }
    format!("{amount}{}", suffixes[step])
}

fn qualified(name: &str) -> String {
    format!("{ATTRIBUTE_DOMAIN}/{name}")
}

/// A string attribute, or nothing when the API would refuse the value as too long: a
/// shortened product name or UUID would be a fact nobody measured.
fn text_attribute(text: String) -> Option<DeviceAttribute> {
    (!text.is_empty() && text.len() <= ATTRIBUTE_VALUE_MAX).then_some(DeviceAttribute::String(text))
}

/// The driver version as a `version` attribute when it is a semantic version (so a selector
/// may compare it with `isGreaterThan`), else as a string: NVIDIA's `590.48.01` has a leading
/// zero, which semver forbids, and stays a string.
fn version_attribute(text: &str) -> Option<DeviceAttribute> {
    if is_semver(text) && text.len() <= ATTRIBUTE_VALUE_MAX {
        Some(DeviceAttribute::Version(text.to_string()))
    } else {
        text_attribute(text.to_string())
    }
}

/// Whether `text` is a semantic version as semver.org 2.0.0 defines it.
pub fn is_semver(text: &str) -> bool {
    let (rest, build) = match text.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (text, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let numeric = |id: &str| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && (id == "0" || !id.starts_with('0'))
    };
    let identifier =
        |id: &str| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|pre| {
            pre.split('.').all(|id| {
                identifier(id) && (!id.bytes().all(|b| b.is_ascii_digit()) || numeric(id))
            })
        })
        && build.is_none_or(|build| build.split('.').all(identifier))
}

/// Whether `name` is a DNS label: 1–63 lower-case alphanumerics or `-`, alphanumeric at both
/// ends (a device name).
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            name.len() <= DNS_LABEL_MAX
                && (first.is_ascii_lowercase() || first.is_ascii_digit())
                && (last.is_ascii_lowercase() || last.is_ascii_digit())
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        }
        _ => false,
    }
}

/// Whether `name` is a DNS subdomain: DNS labels joined by dots, at most 253 characters.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= DNS_SUBDOMAIN_MAX && name.split('.').all(is_dns_label)
}

/// Whether `name` is a qualified attribute or capacity name as the API accepts it: a C
/// identifier of at most 32 characters, optionally after a DNS subdomain and `/`.
pub fn is_qualified_name(name: &str) -> bool {
    let identifier = match name.split_once('/') {
        Some((domain, identifier)) => {
            if !is_dns_subdomain(domain) {
                return false;
            }
            identifier
        }
        None => name,
    };
    let bytes = identifier.as_bytes();
    identifier.len() <= IDENTIFIER_MAX
        && bytes
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::inventory::Source;
    use proptest::prelude::*;

    fn accelerator(index: u32) -> Accelerator {
        serde_json::from_value(serde_json::json!({
            "index": index, "uuid": format!("GPU-{index}"), "product": "Tesla T4",
            "busId": null, "memoryMiB": 15360, "numaNode": 0, "architecture": null,
            "computeCapability": null, "migMode": null, "healthy": true, "grantable": "whole",
            "source": "driver", "cores": 2560, "brand": null, "serial": null,
            "vbiosVersion": null, "boardPartNumber": null, "minorNumber": null,
            "persistenceMode": null, "driverModel": null, "gspFirmwareVersion": null,
            "excluded": null, "ecc": null, "remappedRows": null
        }))
        .unwrap()
    }

    fn section(m: Manufacturer, accelerators: Vec<Accelerator>) -> ManufacturerInventory {
        ManufacturerInventory {
            driver_version: Some("6.8.5".into()),
            accelerators,
            ..ManufacturerInventory::empty(m)
        }
    }

    fn spec(section: &ManufacturerInventory) -> ResourceSliceSpec {
        let driver = driver_for(section.name).unwrap();
        slice_spec(&driver, "node-1", section, GroupNaming::default(), 1).unwrap()
    }

    #[test]
    fn sliceable_devices_are_consumable_capacity_whose_default_is_the_whole_card() {
        let mut no_memory = accelerator(2);
        no_memory.memory_mib = None;
        let section = section(Manufacturer::Nvidia, vec![accelerator(0), no_memory]);
        let driver = driver_for(Manufacturer::Nvidia).unwrap();
        let first = |sharing| {
            pool_specs(
                &driver,
                "node-1",
                &section,
                GroupNaming::default(),
                1,
                sharing,
            )
            .unwrap()
            .swap_remove(0)
        };
        let shared = |cores_overcommit| {
            let spec = first(Sharing::Slices {
                cores_overcommit,
                per_card: 128,
            });
            serde_json::to_value(&spec.devices).unwrap()
        };
        // Highest index first: the card whose memory is unknown (2), then card 0.
        let devices = shared(true);
        assert_eq!(devices[1]["allowMultipleAllocations"], true);
        assert_eq!(
            devices[1]["capacity"],
            serde_json::json!({
                "gpustack.ai/memory": {"value": "15Gi", "requestPolicy":
                    {"default": "15Gi", "validRange": {"min": "1Mi"}}},
                "gpustack.ai/cores": {"value": "2560", "requestPolicy":
                    {"default": "0", "validRange": {"min": "0"}}},
                "gpustack.ai/coresPercentage": {"value": "100", "requestPolicy":
                    {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}},
                // One of the card's 128 slices a share: no more shares than the ledger grants.
                "gpustack.ai/slices": {"value": "128", "requestPolicy":
                    {"default": "1", "validRange": {"min": "1", "max": "1"}}},
            })
        );
        // Where slices may not over-commit compute, one that asks none takes all of it.
        assert_eq!(
            shared(false)[1]["capacity"]["gpustack.ai/coresPercentage"]["requestPolicy"]["default"],
            "100"
        );
        // A card whose memory is unknown is published whole.
        assert!(devices[0].get("allowMultipleAllocations").is_none());
        assert!(
            devices[0]["capacity"]["gpustack.ai/cores"]
                .get("requestPolicy")
                .is_none()
        );
        // A manufacturer the ledger allows no slice of publishes its cards whole (a `slices`
        // capacity of 0 would be refused by the API: its minimum of 1 above the capacity).
        let none = first(Sharing::Slices {
            cores_overcommit: false,
            per_card: 0,
        });
        assert!(
            none.devices
                .iter()
                .all(|d| d.allow_multiple_allocations.is_none())
        );
        // Whole devices carry no request policy (the API refuses one on them).
        let whole = serde_json::to_value(&spec(&section).devices).unwrap();
        assert!(whole[1].get("allowMultipleAllocations").is_none());
        assert_eq!(
            whole[1]["capacity"]["gpustack.ai/memory"],
            serde_json::json!({"value": "15Gi"})
        );
    }

    #[test]
    fn every_manufacturer_has_a_driver_name_and_device_names_that_map_back() {
        for m in Manufacturer::ALL {
            assert_eq!(
                driver_for(m).unwrap().as_str(),
                format!("{}.gpustack.ai", m.name())
            );
            let name = device_name(m, 12);
            assert!(is_dns_label(&name), "{name}");
            assert_eq!(index_of(m, &name), Some(12));
        }
        assert_eq!(device_name(Manufacturer::Ascend, 0), "npu-0");
        assert_eq!(index_of(Manufacturer::Nvidia, "gpu-01"), None);
        assert_eq!(index_of(Manufacturer::Nvidia, "npu-1"), None);
        assert_eq!(index_of(Manufacturer::Nvidia, "gpu-"), None);
        assert_eq!(index_of(Manufacturer::Nvidia, "gpu-+1"), None);
    }

    /// The checks the property test relies on accept and refuse what the API does.
    #[test]
    fn the_name_rules_match_the_api() {
        for good in [
            "gpustack.ai/uuid",
            "numaNode",
            "_x",
            "a.b-c/x_1",
            "gpustack.ai/abcdefghijklmnopqrstuvwxyz012345",
        ] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in [
            "",
            "gpustack.ai/",
            "/uuid",
            "Gpustack.ai/uuid",
            "gpustack.ai/1x",
            "a/b/c",
            "gpustack.ai/pci-bus",
            "gpustack.ai/abcdefghijklmnopqrstuvwxyz0123456",
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        for good in ["gpu-0", "a", "0a"] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "Gpu-0", "gpu_0", "gpu.0", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("node-1.example.com"));
        assert!(!is_dns_subdomain("node..1"));
        assert!(!is_dns_subdomain(&format!("{}.a", "a".repeat(252))));
    }

    #[test]
    fn quantities_are_spelled_as_the_api_server_spells_them_back() {
        assert_eq!(mebibytes_quantity(15360), "15Gi");
        assert_eq!(mebibytes_quantity(24564), "24564Mi");
        assert_eq!(mebibytes_quantity(1024 * 1024), "1Ti");
        assert_eq!(mebibytes_quantity(512), "512Mi");
        assert_eq!(mebibytes_quantity(0), "0");
        assert_eq!(count_quantity(2560), "2560");
        assert_eq!(count_quantity(2000), "2k");
        assert_eq!(count_quantity(16_000_000), "16M");
        assert_eq!(count_quantity(304), "304");
        assert_eq!(count_quantity(0), "0");
    }

    #[test]
    fn semver_only_where_it_parses() {
        for good in [
            "6.8.5",
            "0.0.0",
            "1.2.3-rc.1+build.5",
            "10.20.30-alpha-beta",
        ] {
            assert!(is_semver(good), "{good}");
        }
        for bad in [
            "590.48.01",
            "13.0",
            "6.8",
            "1.2.3-01",
            "1.2.3+",
            "v1.2.3",
            "",
            "1..3",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
        assert_eq!(
            version_attribute("590.48.01"),
            Some(DeviceAttribute::String("590.48.01".into()))
        );
        assert_eq!(
            version_attribute("6.8.5"),
            Some(DeviceAttribute::Version("6.8.5".into()))
        );
    }

    #[test]
    fn only_whole_accelerators_become_devices_and_health_is_an_attribute() {
        let mut sick = accelerator(1);
        sick.healthy = false;
        let mut passthrough = accelerator(2);
        passthrough.grantable = Grantable::Nothing;
        passthrough.source = Source::Passthrough;
        let mut unidentified = accelerator(3);
        unidentified.grantable = Grantable::Unidentified;
        let mut mig = accelerator(4);
        mig.grantable = Grantable::PartitionsOnly;
        let s = spec(&section(
            Manufacturer::Nvidia,
            vec![mig, unidentified, passthrough, sick, accelerator(0)],
        ));
        // Highest index first (the scheduler tries them in this order).
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-1", "gpu-0"]);
        assert_eq!(
            s.devices[0].attributes["gpustack.ai/healthy"],
            DeviceAttribute::Bool(false)
        );
        assert_eq!(
            s.devices[1].attributes["gpustack.ai/healthy"],
            DeviceAttribute::Bool(true)
        );
    }

    #[test]
    fn the_spec_serializes_as_the_api_spells_it() {
        let json =
            serde_json::to_value(spec(&section(Manufacturer::Amd, vec![accelerator(0)]))).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "driver": "amd.gpustack.ai",
                "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-1",
                "devices": [{
                    "name": "gpu-0",
                    "attributes": {
                        "gpustack.ai/manufacturer": {"string": "amd"},
                        "gpustack.ai/index": {"int": 0},
                        "gpustack.ai/healthy": {"bool": true},
                        "gpustack.ai/partition": {"bool": false},
                        "gpustack.ai/product": {"string": "Tesla T4"},
                        "gpustack.ai/groupId": {"string": "amd-tesla-t4"},
                        "gpustack.ai/uuid": {"string": "GPU-0"},
                        "gpustack.ai/numaNode": {"int": 0},
                        "gpustack.ai/driverVersion": {"version": "6.8.5"},
                    },
                    "capacity": {
                        "gpustack.ai/memory": {"value": "15Gi"},
                        "gpustack.ai/cores": {"value": "2560"},
                    },
                }],
            })
        );
    }

    #[test]
    fn bad_sections_are_refused_with_what_and_where() {
        let driver = driver_for(Manufacturer::Nvidia).unwrap();
        let s = section(Manufacturer::Nvidia, vec![accelerator(0), accelerator(0)]);
        let e = slice_spec(&driver, "node-1", &s, GroupNaming::default(), 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nvidia: accelerator index 0 appears twice; device names would collide"
        );
        let e = slice_spec(&driver, "Node_1", &s, GroupNaming::default(), 1).unwrap_err();
        assert!(matches!(e, SliceError::NodeName { .. }), "{e}");
        // More devices than one slice holds: the pool is two slices, each counting both.
        let many = (0..=128).map(accelerator).collect();
        let pool = whole_pool(&section(Manufacturer::Nvidia, many), 1);
        let sizes: Vec<usize> = pool.iter().map(|s| s.devices.len()).collect();
        assert_eq!(sizes, [128, 1]);
        assert!(pool.iter().all(|s| s.pool.resource_slice_count == 2));
        // A profile that gives no device name is refused, naming it.
        let mut odd = partitioned(0);
        odd.partition_profiles[0].name = "+.+".into();
        let e = slice_spec(
            &driver,
            "node-1",
            &section(Manufacturer::Nvidia, vec![odd]),
            GroupNaming::default(),
            1,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "nvidia: accelerator 0's partition profile \"+.+\" gives no device name (a DNS label)"
        );
    }

    /// A card in MIG mode offering H100's 3g.40gb (two placements), 1g.10gb (seven) and a
    /// media-engine 1g.10gb+me (seven placements, one instance).
    fn partitioned(index: u32) -> Accelerator {
        let mut a = accelerator(index);
        a.grantable = Grantable::PartitionsOnly;
        a.partition_profiles = serde_json::from_value(serde_json::json!([
            {"name": "3g.40gb", "id": 9, "memoryMiB": 40448, "instancesTotal": 2,
             "instancesFree": 2, "multiprocessors": 60,
             "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]},
            {"name": "1g.10gb", "id": 19, "memoryMiB": 9984, "instancesTotal": 7,
             "instancesFree": 7, "multiprocessors": 16,
             "placements": (0..7).map(|s| serde_json::json!({"start": s, "size": 1}))
                .collect::<Vec<_>>()},
            {"name": "1g.10gb+me", "id": 20, "memoryMiB": 9984, "instancesTotal": 1,
             "instancesFree": 1, "multiprocessors": 16,
             "placements": (0..7).map(|s| serde_json::json!({"start": s, "size": 1}))
                .collect::<Vec<_>>()},
        ]))
        .unwrap();
        a
    }

    /// NVIDIA's pool of `section`, cards published whole, at `generation`.
    fn whole_pool(section: &ManufacturerInventory, generation: i64) -> Vec<ResourceSliceSpec> {
        let driver = driver_for(Manufacturer::Nvidia).unwrap();
        pool_specs(
            &driver,
            "node-1",
            section,
            GroupNaming::default(),
            generation,
            Sharing::Whole,
        )
        .unwrap()
    }

    #[test]
    fn partitioned_cards_are_placements_consuming_their_cards_memory_slices() {
        let s = section(Manufacturer::Nvidia, vec![accelerator(0), partitioned(1)]);
        let pool = whole_pool(&s, 3);
        // The devices, then the counter sets in a slice of their own; one generation and count.
        assert_eq!(pool.len(), 2);
        assert!(
            pool.iter()
                .all(|s| s.pool.resource_slice_count == 2 && s.pool.generation == 3)
        );
        let (devices, counters) = (&pool[0], &pool[1]);
        assert!(devices.shared_counters.is_empty() && counters.devices.is_empty());
        // The whole card, then 2 + 7 + 7 placements of card 1.
        assert_eq!(devices.devices.len(), 17);
        assert_eq!(devices.devices[0].name, "gpu-0");
        assert_eq!(
            devices.devices[0].attributes["gpustack.ai/partition"],
            DeviceAttribute::Bool(false)
        );
        let by_name = |n: &str| {
            devices
                .devices
                .iter()
                .find(|d| d.name == n)
                .unwrap_or_else(|| panic!("no device {n}"))
        };
        let json = serde_json::to_value(by_name("gpu-1-3g-40gb-4")).unwrap();
        assert_eq!(
            json["consumesCounters"],
            serde_json::json!([{"counterSet": "gpu-1-slices", "counters": {
                "memory-slice-4": {"value": "1"}, "memory-slice-5": {"value": "1"},
                "memory-slice-6": {"value": "1"}, "memory-slice-7": {"value": "1"}}}])
        );
        assert_eq!(
            json["capacity"],
            serde_json::json!({"gpustack.ai/memory": {"value": "40448Mi"},
                "gpustack.ai/multiprocessors": {"value": "60"}})
        );
        let attributes = &json["attributes"];
        assert_eq!(
            attributes["gpustack.ai/partition"],
            serde_json::json!({"bool": true})
        );
        assert_eq!(
            attributes["gpustack.ai/profile"],
            serde_json::json!({"string": "3g.40gb"})
        );
        assert_eq!(
            attributes["gpustack.ai/placementStart"],
            serde_json::json!({"int": 4})
        );
        assert_eq!(
            attributes["gpustack.ai/placementSize"],
            serde_json::json!({"int": 4})
        );
        assert_eq!(
            attributes["gpustack.ai/index"],
            serde_json::json!({"int": 1})
        );
        // The card's UUID is the partition's parent; the instance has none until made.
        assert_eq!(
            attributes["gpustack.ai/parentUuid"],
            serde_json::json!({"string": "GPU-1"})
        );
        assert!(attributes.get("gpustack.ai/uuid").is_none());
        // A profile of fewer instances than placements also takes one of its instance counter.
        let me = serde_json::to_value(by_name("gpu-1-1g-10gb-me-6")).unwrap();
        assert_eq!(
            me["consumesCounters"][0]["counters"],
            serde_json::json!({"memory-slice-6": {"value": "1"},
                "1g-10gb-me-instances": {"value": "1"}})
        );
        // The card's counter set: one counter per memory slice, and the instance counter.
        assert_eq!(counters.shared_counters.len(), 1);
        let set = &counters.shared_counters[0];
        assert_eq!(set.name, "gpu-1-slices");
        let names: Vec<&str> = set.counters.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "1g-10gb-me-instances",
                "memory-slice-0",
                "memory-slice-1",
                "memory-slice-2",
                "memory-slice-3",
                "memory-slice-4",
                "memory-slice-5",
                "memory-slice-6",
                "memory-slice-7"
            ]
        );
        // Every device name maps back to what it stands for.
        let published = published_devices(&s);
        assert_eq!(published.len(), 17);
        assert_eq!(published["gpu-0"], DeviceRef::Whole(0));
        assert_eq!(
            published["gpu-1-3g-40gb-4"],
            DeviceRef::Partition(PartitionRef {
                index: 1,
                profile: "3g.40gb".into(),
                start: 4,
                size: 4
            })
        );
        for d in &devices.devices {
            assert!(published.contains_key(&d.name), "{}", d.name);
            assert!(is_dns_label(&d.name), "{}", d.name);
        }
    }

    #[test]
    fn a_pool_of_partitions_keeps_to_the_apis_bounds() {
        // Nine cards of 16 placements: 144 devices (64 a slice where counters are consumed),
        // nine counter sets (8 a slice).
        let s = section(Manufacturer::Nvidia, (0..9).map(partitioned).collect());
        let pool = whole_pool(&s, 1);
        let shape: Vec<(usize, usize)> = pool
            .iter()
            .map(|s| (s.devices.len(), s.shared_counters.len()))
            .collect();
        assert_eq!(shape, [(64, 0), (64, 0), (16, 0), (0, 8), (0, 1)]);
        assert!(pool.iter().all(|s| s.pool.resource_slice_count == 5));
        // Highest card first, as whole cards are.
        assert!(pool[0].devices[0].name.starts_with("gpu-8-"));
        // A slice holds devices or counter sets: the empty one is left out of the JSON.
        let json = serde_json::to_value(&pool[3]).unwrap();
        assert!(json.get("devices").is_none());
        assert_eq!(json["sharedCounters"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn an_overlong_text_is_left_out_not_shortened() {
        let mut a = accelerator(0);
        a.uuid = Some("U".repeat(65));
        let s = spec(&section(Manufacturer::Nvidia, vec![a]));
        assert!(!s.devices[0].attributes.contains_key("gpustack.ai/uuid"));
    }

    proptest! {
        /// Whatever the detector reported, every name the slice carries is one the API accepts
        /// and every text value fits.
        #[test]
        fn names_keys_and_values_are_valid(
            index in any::<u32>(),
            product in proptest::option::of(".{0,100}"),
            uuid in proptest::option::of(".{0,100}"),
            version in proptest::option::of("[0-9a-z.+-]{0,80}"),
            memory in proptest::option::of(any::<u64>()),
            with_memory in any::<bool>(),
            m in proptest::sample::select(Manufacturer::ALL.to_vec()),
        ) {
            let mut a = accelerator(index);
            a.product = product;
            a.uuid = uuid;
            a.memory_mib = memory;
            let mut s = section(m, vec![a]);
            s.driver_version = version;
            let driver = driver_for(m).unwrap();
            let naming = GroupNaming { with_memory };
            let spec = slice_spec(&driver, "node-1", &s, naming, 1).unwrap();
            prop_assert!(is_dns_subdomain(&spec.driver) && spec.driver.len() <= 63);
            for device in &spec.devices {
                prop_assert!(is_dns_label(&device.name), "{}", device.name);
                prop_assert!(device.attributes.len() + device.capacity.len() <= 32);
                for key in device.attributes.keys().chain(device.capacity.keys()) {
                    prop_assert!(is_qualified_name(key), "{key}");
                }
                for value in device.attributes.values() {
                    match value {
                        DeviceAttribute::String(t) => prop_assert!(!t.is_empty() && t.len() <= 64),
                        DeviceAttribute::Version(v) => prop_assert!(is_semver(v) && v.len() <= 64),
                        _ => {}
                    }
                }
            }
        }
    }
}
