//! The plain types of a `Devices` object's spec, as far as the webhook's pool lookup reads them.
//!
//! The cluster-integration issue extends these (status, the ledger, interfaces) and wraps them in
//! the CRD in accel-kube; this module owns only the plain data and stays free of kube types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manufacturer::Manufacturer;

/// `Devices.spec`: what one node has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevicesSpec {
    #[serde(default)]
    pub accelerators: Vec<DevicesAccelerator>,
}

/// One accelerator in `Devices.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevicesAccelerator {
    pub manufacturer: Manufacturer,
    /// The model key (`nvidia-h100-80gb-hbm3`): the group its flavor's feature label names.
    pub group: String,
    #[serde(default)]
    pub uuid: Option<String>,
    /// VRAM as the driver reports it, in MiB.
    #[serde(rename = "memoryMiB", default)]
    pub memory_mib: Option<u64>,
    /// Partition profiles the accelerator can host, each with the VRAM in MiB the driver reports
    /// for it.
    #[serde(default)]
    pub partition_profiles: BTreeMap<String, PartitionProfile>,
}

/// One partition profile an accelerator can host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionProfile {
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
}
