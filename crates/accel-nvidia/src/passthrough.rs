//! GPUs passed through to VMs: the memory of GPUs seen on the driver (`gpus-seen.json`) and the
//! vfio-pci functions it names (seed 002, "GPUs passed through to VMs").
//!
//! A GPU bound to vfio-pci is listed by neither procfs nor nvidia-smi, so an inventory read from
//! them would drop the very GPU a VM uses. After every enriched collection each GPU is remembered
//! by its PCI address; GPUs the collection did not list are kept. A vfio-pci function of an
//! NVIDIA display class that the driver did not list is reported as the GPU last seen there,
//! after the driver's GPUs, carrying only what stays true while a VM holds it. This module holds
//! the memory as data and decides; the caller reads and writes the file.

use std::collections::BTreeMap;

use accel_core::BusId;
use accel_core::inventory::{Accelerator, Source};
use serde::{Deserialize, Serialize};

/// The memory's file name under the daemon's data directory.
pub const FILE_NAME: &str = "gpus-seen.json";
/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;
/// The driver a passed-through function is bound to.
pub const VFIO_DRIVER: &str = "vfio-pci";

/// What is remembered of one GPU: only facts that stay true while a VM holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenGpu {
    pub uuid: String,
    pub name: Option<String>,
    pub architecture: Option<String>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub serial: Option<String>,
    pub vbios_version: Option<String>,
    pub board_part_number: Option<String>,
    pub compute_capability: Option<String>,
}

/// The memory: GPUs by PCI address (NVML form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMemory {
    pub gpus: BTreeMap<BusId, SeenGpu>,
}

/// The memory file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: not a GPU memory file: {source}")]
pub struct MemoryError {
    pub path: String,
    #[source]
    pub source: serde_json::Error,
}

impl GpuMemory {
    /// Reads the memory file's text; `path` is for the message.
    pub fn from_json(path: &str, text: &str) -> Result<Self, MemoryError> {
        serde_json::from_str(text).map_err(|source| MemoryError {
            path: path.to_string(),
            source,
        })
    }

    /// The file's text (pretty, keys sorted).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{\"gpus\":{}}".to_string()) + "\n"
    }

    /// Remembers every driver-listed GPU with a UUID and a bus address; returns whether the
    /// memory changed. GPUs not listed now are kept: they may be passed through right now.
    pub fn remember(&mut self, accelerators: &[Accelerator]) -> bool {
        let mut changed = false;
        for a in accelerators.iter().filter(|a| a.source == Source::Driver) {
            let (Some(uuid), Some(bus)) = (a.uuid.clone(), a.bus_id) else {
                continue;
            };
            let seen = SeenGpu {
                uuid,
                name: a.product.clone(),
                architecture: a.architecture.clone(),
                memory_mib: a.memory_mib,
                serial: a.serial.clone(),
                vbios_version: a.vbios_version.clone(),
                board_part_number: a.board_part_number.clone(),
                compute_capability: a.compute_capability.clone(),
            };
            if self.gpus.get(&bus) != Some(&seen) {
                self.gpus.insert(bus, seen);
                changed = true;
            }
        }
        changed
    }
}

/// A PCI function as the passthrough finder needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciCandidate {
    pub bus_id: BusId,
    pub vendor: u16,
    /// The 24-bit class code (`0x030200`).
    pub class: u32,
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
}

/// Whether a function is an NVIDIA GPU bound to vfio-pci: vendor 0x10de, class 0x0300xx (VGA)
/// or 0x0302xx (3D controller).
pub fn is_passed_through_gpu(function: &PciCandidate) -> bool {
    let class = function.class >> 8;
    function.vendor == NVIDIA_VENDOR
        && (class == 0x0300 || class == 0x0302)
        && function.driver.as_deref() == Some(VFIO_DRIVER)
}

/// The GPUs passed through right now: vfio-pci NVIDIA functions the driver did not list and the
/// memory names, indexed after `next_index`, in bus order. A function never seen on the driver is
/// left out (without a UUID there is nothing to name it by); its address is returned apart so it
/// can be logged.
pub fn passed_through(
    memory: &GpuMemory,
    functions: &[PciCandidate],
    listed: &[Accelerator],
    next_index: u32,
) -> (Vec<Accelerator>, Vec<BusId>) {
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    let mut candidates: Vec<&PciCandidate> = functions
        .iter()
        .filter(|f| is_passed_through_gpu(f))
        .filter(|f| !listed.iter().any(|a| a.bus_id == Some(f.bus_id)))
        .collect();
    candidates.sort_by_key(|f| f.bus_id);
    for function in candidates {
        let Some(seen) = memory.gpus.get(&function.bus_id) else {
            unknown.push(function.bus_id);
            continue;
        };
        let mut a = Accelerator::new(next_index + found.len() as u32, Source::Passthrough);
        a.uuid = Some(seen.uuid.clone());
        a.product = seen.name.clone();
        a.architecture = seen.architecture.clone();
        a.memory_mib = seen.memory_mib;
        a.serial = seen.serial.clone();
        a.vbios_version = seen.vbios_version.clone();
        a.board_part_number = seen.board_part_number.clone();
        a.compute_capability = seen.compute_capability.clone();
        a.bus_id = Some(function.bus_id);
        a.numa_node = function.numa_node;
        a.classify_grantable();
        found.push(a);
    }
    (found, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(uuid: &str, bus: &str) -> Accelerator {
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some(uuid.into());
        a.bus_id = Some(bus.parse().unwrap());
        a.product = Some("NVIDIA L4".into());
        a.memory_mib = Some(23034);
        a
    }

    fn vfio(bus: &str, class: u32) -> PciCandidate {
        PciCandidate {
            bus_id: bus.parse().unwrap(),
            vendor: NVIDIA_VENDOR,
            class,
            driver: Some(VFIO_DRIVER.into()),
            numa_node: Some(1),
        }
    }

    #[test]
    fn remembered_gpu_is_found_behind_vfio() {
        let mut memory = GpuMemory::default();
        assert!(memory.remember(&[
            listed("GPU-a", "0000:18:00.0"),
            listed("GPU-b", "0000:2a:00.0")
        ]));
        assert!(
            !memory.remember(&[listed("GPU-a", "0000:18:00.0")]),
            "unchanged, b kept"
        );
        assert_eq!(memory.gpus.len(), 2);
        let round = GpuMemory::from_json("x", &memory.to_json()).unwrap();
        assert_eq!(round, memory);

        let functions = [
            vfio("0000:2a:00.0", 0x030200),
            vfio("0000:3b:00.0", 0x030000),
            PciCandidate {
                driver: Some("nvidia".into()),
                ..vfio("0000:18:00.0", 0x030200)
            },
            vfio("0000:4c:00.1", 0x040300),
        ];
        let (found, unknown) =
            passed_through(&round, &functions, &[listed("GPU-a", "0000:18:00.0")], 1);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].index, 1);
        assert_eq!(found[0].uuid.as_deref(), Some("GPU-b"));
        assert_eq!(found[0].source, Source::Passthrough);
        assert!(!found[0].can_be_granted());
        assert_eq!(found[0].numa_node, Some(1));
        assert_eq!(unknown, vec!["0000:3b:00.0".parse().unwrap()]);
    }

    #[test]
    fn bad_memory_file_names_its_path() {
        let err = GpuMemory::from_json("/data/gpus-seen.json", "{not json").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/data/gpus-seen.json: not a GPU memory file")
        );
    }
}
