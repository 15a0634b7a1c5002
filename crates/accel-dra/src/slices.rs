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
//! it by), and one in MIG mode can only be given as partitions, which prepare does not create
//! yet.

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
    #[serde(default)]
    pub devices: Vec<Device>,
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
    /// compute, else 0, no cap); `cores`, the core count, is consumed only when asked.
    Slices { cores_overcommit: bool },
}

/// The consumable cores percentage of a sliceable device.
pub const CORES_PERCENTAGE: &str = "coresPercentage";

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
    /// More devices than one slice may hold.
    #[error(
        "{manufacturer}: {count} devices, more than the {MAX_DEVICES_PER_SLICE} one ResourceSlice may hold"
    )]
    TooManyDevices {
        manufacturer: Manufacturer,
        count: usize,
    },
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

/// The ResourceSlice spec of one manufacturer's section on `node`, at pool `generation`, whole
/// devices only.
pub fn slice_spec(
    driver: &DriverName,
    node: &str,
    section: &ManufacturerInventory,
    naming: GroupNaming,
    generation: i64,
) -> Result<ResourceSliceSpec, SliceError> {
    slice_spec_shared(driver, node, section, naming, generation, Sharing::Whole)
}

/// The ResourceSlice spec of one manufacturer's section on `node`, at pool `generation`, its
/// devices shared as `sharing` says.
pub fn slice_spec_shared(
    driver: &DriverName,
    node: &str,
    section: &ManufacturerInventory,
    naming: GroupNaming,
    generation: i64,
    sharing: Sharing,
) -> Result<ResourceSliceSpec, SliceError> {
    if !is_dns_subdomain(node) {
        return Err(SliceError::NodeName {
            node: node.to_string(),
        });
    }
    let manufacturer = section.name;
    let mut seen = BTreeSet::new();
    let mut devices = Vec::new();
    for accelerator in &section.accelerators {
        if !seen.insert(accelerator.index) {
            return Err(SliceError::DuplicateIndex {
                manufacturer,
                index: accelerator.index,
            });
        }
        if is_published(accelerator) {
            devices.push(device(section, accelerator, naming, sharing));
        }
    }
    if devices.len() > MAX_DEVICES_PER_SLICE {
        return Err(SliceError::TooManyDevices {
            manufacturer,
            count: devices.len(),
        });
    }
    // Highest index first: the scheduler tries a slice's devices in order and the device
    // plugin's preference starts from the lowest, so on a node serving both APIs they meet
    // only when it is nearly full (where they do, the ledger refuses the later one).
    devices.sort_by_key(|d| std::cmp::Reverse(index_of(manufacturer, &d.name)));
    Ok(ResourceSliceSpec {
        driver: driver.as_str().to_string(),
        pool: ResourcePool {
            name: node.to_string(),
            generation,
            resource_slice_count: 1,
        },
        node_name: node.to_string(),
        devices,
    })
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
        Sharing::Slices { cores_overcommit } => a.memory_mib.map(|_| cores_overcommit),
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
    if let Some(cores_overcommit) = sliced {
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
        let shared = |cores_overcommit| {
            let spec = slice_spec_shared(
                &driver,
                "node-1",
                &section,
                GroupNaming::default(),
                1,
                Sharing::Slices { cores_overcommit },
            )
            .unwrap();
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
        let many = (0..=128).map(accelerator).collect();
        let e = slice_spec(
            &driver,
            "node-1",
            &section(Manufacturer::Nvidia, many),
            GroupNaming::default(),
            1,
        )
        .unwrap_err();
        assert_eq!(
            e,
            SliceError::TooManyDevices {
                manufacturer: Manufacturer::Nvidia,
                count: 129
            }
        );
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
