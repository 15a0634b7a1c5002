//! NVIDIA behind the manufacturer seam (accel-backend): the detector (both layers of seed 002,
//! with the passthrough memory kept in the daemon's state directory), the slicing library's
//! layout (HAMi-core, one `cuda-<major>/libvgpu.so` per CUDA major), the MIG partitioner
//! (`nvidia-smi mig`, [`crate::partitioner`]) and the responder.

use std::path::Path;
use std::sync::Arc;

use accel_backend::Backend;
use accel_backend::detect::{DetectRequest, Detector, StateError, pci_gate_closed};
use accel_backend::respond::{Responder, ResponderSetup};
use accel_backend::slicing::SlicingLibrary;
use accel_core::manufacturer::PciVendorId;
use accel_core::{Detection, Manufacturer, ManufacturerInventory};
use accel_host::Host;
use accel_host::pci::{self, PciClassPrefixes};

use crate::detector::{self, DetectOptions};
use crate::passthrough::{self, GpuMemory, PciCandidate};
use crate::responder::NvidiaResponder;

/// NVIDIA's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Nvidia,
        detector: Arc::new(NvidiaDetector),
        slicing: Some(Arc::new(HamiCore)),
        partitioner: Some(Arc::new(crate::partitioner::SmiPartitioner::default())),
        responder: nvidia_responder,
    }
}

fn nvidia_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(NvidiaResponder::from_setup(setup))
}

/// The NVIDIA detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NvidiaDetector;

impl Detector for NvidiaDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Nvidia
    }

    /// With a state directory, GPUs passed through to VMs are listed too and the memory of the
    /// GPUs seen (`gpus-seen.json`) is updated there.
    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        // The PCI gate (a WSL 2 guest's GPUs are on no bus it can see: no gate there).
        if request.pci_gate
            && !detector::is_paravirtual(request.host)
            && let Some(reason) =
                pci_gate_closed(request.host, request.pci_classes, request.vendor_ids)
        {
            let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
            section.notes.push(reason);
            return Ok(Ok(section));
        }
        let mut options = DetectOptions {
            deadlines: request.deadlines,
            ..DetectOptions::default()
        };
        let memory_path = request.state_dir.map(|d| d.join(passthrough::FILE_NAME));
        if let Some(path) = &memory_path {
            options.memory = Some(load_memory(path)?);
            options.pci = pci_candidates(request.host, request.pci_classes, request.vendor_ids)?;
        }
        let outcome = detector::detect(request.host, request.commands, options);
        if let (Some(path), Some(memory)) = (&memory_path, &outcome.memory) {
            accel_host::atomic::write_atomic(path, memory.to_json().as_bytes()).map_err(|e| {
                StateError {
                    what: format!("writing {}", path.display()),
                    reason: e.to_string(),
                }
            })?;
        }
        Ok(outcome.detection)
    }
}

fn load_memory(path: &Path) -> Result<GpuMemory, StateError> {
    let failed = |reason: String| StateError {
        what: format!("reading {}", path.display()),
        reason,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => GpuMemory::from_json(&path.display().to_string(), &text)
            .map_err(|e| failed(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(GpuMemory::default()),
        Err(e) => Err(failed(e.to_string())),
    }
}

/// The bus's functions for the passthrough scan, as NVIDIA's: a function of a configured vendor
/// id is NVIDIA's ([`passthrough::NVIDIA_VENDOR`] to the scan), one of `10de` that the
/// configuration does not name is nobody's.
fn pci_candidates(
    host: &dyn Host,
    prefixes: &PciClassPrefixes,
    vendor_ids: &[PciVendorId],
) -> Result<Vec<PciCandidate>, StateError> {
    let scan = pci::scan_pci(host, prefixes).map_err(|e| StateError {
        what: "scanning the PCI bus".to_string(),
        reason: e.to_string(),
    })?;
    for note in &scan.notes {
        tracing::warn!("pci scan: {note}");
    }
    Ok(scan
        .functions
        .into_iter()
        .map(|f| PciCandidate {
            vendor: if vendor_ids.iter().any(|id| id.vendor == f.vendor_id) {
                passthrough::NVIDIA_VENDOR
            } else if f.vendor_id == passthrough::NVIDIA_VENDOR {
                0
            } else {
                f.vendor_id
            },
            bus_id: f.bus_id,
            class: f.class,
            driver: f.driver,
            numa_node: f.numa_node,
        })
        .collect())
}

/// HAMi-core, NVIDIA's preload library: one build per CUDA major.
#[derive(Debug, Clone, Copy, Default)]
pub struct HamiCore;

impl SlicingLibrary for HamiCore {
    fn runtime(&self) -> &'static str {
        "CUDA"
    }

    /// The CUDA driver version's major (`13.0` → 13).
    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32> {
        section
            .runtime_version
            .as_deref()
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse::<u32>().ok())
    }

    fn library_path(&self, library_dir: &Path, major: u32) -> String {
        NvidiaResponder::library_path(library_dir, major)
    }
}

/// NVIDIA's preflight row (`device-manager preflight`).
pub fn preflight() -> Arc<dyn accel_backend::preflight::Preflight> {
    Arc::new(crate::preflight::NvidiaPreflight)
}
