//! Layer 1 of the NVIDIA inventory: what the kernel module shows in procfs and sysfs.
//!
//! `/proc/driver/nvidia/gpus/<bus>/information` names each GPU the driver holds (UUID, model,
//! VBIOS, bus location, minor number, exclusion); `/sys/bus/pci/devices/<bus>/numa_node` gives its
//! NUMA node; `/proc/driver/nvidia/version` the driver version (seed 002, "Where GPU facts come
//! from"). GPUs are indexed in bus order, as nvidia-smi numbers them by default. This module reads
//! and parses; it does not decide what the inventory means.

use std::collections::BTreeMap;

use accel_core::BusId;
use accel_core::inventory::{Accelerator, Source};
use accel_host::{Host, HostError};

use crate::arch::architecture_from_model;

/// The procfs folder the driver creates; its presence is the evidence of a loaded driver.
pub const DRIVER_DIR: &str = "proc/driver/nvidia";
/// One folder per GPU, named by bus address.
pub const GPUS_DIR: &str = "proc/driver/nvidia/gpus";
/// The driver's version banner.
pub const VERSION_FILE: &str = "proc/driver/nvidia/version";
/// The kernel's PCI device folder.
pub const PCI_DEVICES_DIR: &str = "sys/bus/pci/devices";

/// Why layer 1 could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcfsError {
    /// The GPU folder exists but could not be listed.
    #[error("cannot list {dir}: {source}")]
    List {
        dir: String,
        #[source]
        source: HostError,
    },
    /// A GPU's information file could not be read.
    #[error("cannot read {path}: {source}")]
    Information {
        path: String,
        #[source]
        source: HostError,
    },
}

/// The fields of one `information` file, each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuInformation {
    pub model: Option<String>,
    pub uuid: Option<String>,
    pub video_bios: Option<String>,
    pub bus_type: Option<String>,
    pub bus_location: Option<BusId>,
    pub device_minor: Option<u32>,
    /// `GPU Excluded:` (current drivers) or `Blacklisted:` (older ones).
    pub excluded: Option<bool>,
    /// `GPU Firmware:` (present when the GPU runs GSP firmware).
    pub firmware: Option<String>,
}

/// Parses an `information` file. Keys are separated from values by a colon and one or two tabs
/// (`Model: \t\t NVIDIA L4`, `GPU UUID: \t GPU-…`); unknown keys are ignored.
pub fn parse_information(text: &str) -> GpuInformation {
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        fields.insert(key.trim().to_ascii_lowercase(), value.to_string());
    }
    let text_of = |key: &str| {
        fields
            .get(key)
            .filter(|v| !is_placeholder(v))
            .map(|v| v.to_string())
    };
    let yes_no = |key: &str| {
        fields
            .get(key)
            .and_then(|v| match v.to_ascii_lowercase().as_str() {
                "yes" => Some(true),
                "no" => Some(false),
                _ => None,
            })
    };
    GpuInformation {
        model: text_of("model"),
        uuid: text_of("gpu uuid"),
        video_bios: text_of("video bios"),
        bus_type: text_of("bus type"),
        bus_location: fields.get("bus location").and_then(|v| v.parse().ok()),
        device_minor: fields.get("device minor").and_then(|v| v.parse().ok()),
        excluded: yes_no("gpu excluded").or_else(|| yes_no("blacklisted")),
        firmware: text_of("gpu firmware"),
    }
}

fn is_placeholder(value: &str) -> bool {
    let v = value.trim().trim_matches(['[', ']']);
    v.is_empty() || v.eq_ignore_ascii_case("N/A") || v.starts_with("??")
}

/// The driver version in `/proc/driver/nvidia/version`, in either form:
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 …` (proprietary) or
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (…)`
/// (open module; Jetson reports its L4T version, `35.3.1`, in the same place).
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let rest = line.trim_start_matches("NVRM version:");
    let after_module = match rest.find("Kernel Module") {
        Some(at) => &rest[at + "Kernel Module".len()..],
        None => rest,
    };
    let after_module = after_module.trim_start();
    let after_arch = match after_module.strip_prefix("for ") {
        Some(rest) => rest
            .trim_start()
            .split_once(char::is_whitespace)
            .map(|(_, r)| r)
            .unwrap_or(""),
        None => after_module,
    };
    after_arch
        .split_whitespace()
        .next()
        .filter(|v| looks_like_version(v))
        .map(str::to_string)
}

fn looks_like_version(v: &str) -> bool {
    v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// What layer 1 found on the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcfsLayer {
    /// Whether `/proc/driver/nvidia` exists (a driver is loaded).
    pub driver_loaded: bool,
    pub driver_version: Option<String>,
    /// The GPUs in bus order, indexed from 0.
    pub accelerators: Vec<Accelerator>,
    /// GPU folders that could not be read, one line each.
    pub notes: Vec<String>,
    /// How many GPU folders gave no accelerator (an unreadable `information` file, no bus
    /// location): GPUs the driver holds that this layer cannot name.
    pub unread: usize,
}

/// Reads layer 1. A host with no `/proc/driver/nvidia` gives an empty layer with
/// `driver_loaded == false`; a driver folder that cannot be listed is an error (the driver is
/// there but could not be measured).
pub fn collect(host: &dyn Host) -> Result<ProcfsLayer, ProcfsError> {
    let mut layer = ProcfsLayer {
        driver_loaded: host.exists(DRIVER_DIR),
        ..ProcfsLayer::default()
    };
    if !layer.driver_loaded {
        return Ok(layer);
    }
    layer.driver_version = host
        .read_to_string(VERSION_FILE)
        .ok()
        .and_then(|t| parse_driver_version(&t));
    let entries = match host.list(GPUS_DIR) {
        Ok(entries) => entries,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(source) => {
            return Err(ProcfsError::List {
                dir: GPUS_DIR.to_string(),
                source,
            });
        }
    };
    let mut found: Vec<(BusId, GpuInformation)> = Vec::new();
    for entry in entries {
        let path = format!("{GPUS_DIR}/{entry}/information");
        let info = match host.read_to_string(&path) {
            Ok(text) => parse_information(&text),
            Err(source) => {
                layer.notes.push(
                    ProcfsError::Information {
                        path: path.clone(),
                        source,
                    }
                    .to_string(),
                );
                layer.unread += 1;
                continue;
            }
        };
        let bus = info.bus_location.or_else(|| entry.parse().ok());
        match bus {
            Some(bus) => found.push((bus, info)),
            None => {
                layer
                    .notes
                    .push(format!("{path}: no bus location, GPU skipped"));
                layer.unread += 1;
            }
        }
    }
    found.sort_by_key(|(bus, _)| *bus);
    for (index, (bus, info)) in found.into_iter().enumerate() {
        let mut accelerator = Accelerator::new(index as u32, Source::Driver);
        accelerator.bus_id = Some(bus);
        accelerator.numa_node = numa_node(host, &bus);
        accelerator.architecture = info.model.as_deref().and_then(architecture_from_model);
        accelerator.product = info.model;
        accelerator.uuid = info.uuid;
        accelerator.vbios_version = info.video_bios;
        accelerator.minor_number = info.device_minor;
        accelerator.excluded = info.excluded;
        accelerator.gsp_firmware_version = info.firmware;
        layer.accelerators.push(accelerator);
    }
    Ok(layer)
}

/// The NUMA node of a PCI function from sysfs; `-1` (no affinity) and absence are `None`.
pub fn numa_node(host: &dyn Host, bus: &BusId) -> Option<u32> {
    let text = host
        .read_to_string(&format!("{PCI_DEVICES_DIR}/{}/numa_node", bus.sysfs()))
        .ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/procfs"
    );

    fn fixture(name: &str) -> String {
        let path = format!("{FIXTURES}/{name}");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
    }

    #[test]
    fn information_two_tab_and_one_tab_keys() {
        let info = parse_information(&fixture("snapd-pr14893__l4__information.txt"));
        assert_eq!(info.model.as_deref(), Some("NVIDIA L4"));
        assert_eq!(
            info.uuid.as_deref(),
            Some("GPU-3291dfa4-fcc4-0110-615b-c894a0d7c689")
        );
        assert_eq!(info.video_bios.as_deref(), Some("95.04.65.00.13"));
        assert_eq!(info.bus_type.as_deref(), Some("PCIe"));
        assert_eq!(
            info.bus_location.map(|b| b.nvml()).as_deref(),
            Some("00000000:70:00.0")
        );
        assert_eq!(info.device_minor, Some(0));
        assert_eq!(info.excluded, Some(false));
        assert_eq!(info.firmware, None);
    }

    #[test]
    fn information_old_blacklisted_and_gsp_firmware() {
        let old = "Model: \t\t Tesla V100-SXM2-16GB\nBlacklisted:\t Yes\nGPU Firmware: \t N/A\n";
        let info = parse_information(old);
        assert_eq!(info.excluded, Some(true));
        assert_eq!(info.firmware, None, "N/A stays absent");
        let gsp = "GPU Firmware: \t 535.104.05\nGPU Excluded:\t No\n";
        assert_eq!(
            parse_information(gsp).firmware.as_deref(),
            Some("535.104.05")
        );
    }

    #[test]
    fn driver_version_every_form() {
        let cases = [
            ("neofetch-876__version-proprietary-384.98.txt", "384.98"),
            ("nixgl-121__version-open-525.60.11-x86_64.txt", "525.60.11"),
            (
                "nixgl-139__version-open-jetson-aarch64-35.3.1.txt",
                "35.3.1",
            ),
            ("nixgl-186__version-open-565.57.01-x86_64.txt", "565.57.01"),
        ];
        for (file, want) in cases {
            assert_eq!(
                parse_driver_version(&fixture(file)).as_deref(),
                Some(want),
                "{file}"
            );
        }
        assert_eq!(parse_driver_version("garbage"), None);
        assert_eq!(
            parse_driver_version("NVRM version: NVIDIA UNIX Kernel Module"),
            None
        );
    }

    #[test]
    fn capabilities_file_is_not_information() {
        let info = parse_information(&fixture("snapd-pr14893__capabilities-mig-monitor.txt"));
        assert_eq!(info, GpuInformation::default());
    }
}
