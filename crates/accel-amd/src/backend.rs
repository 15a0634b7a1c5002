//! AMD behind the manufacturer seam (accel-backend): the detector ([`crate::detector`], gated
//! on the configured PCI vendor ids), the slicing library's layout (`libvrocm.so`, one artifact
//! for every ROCm version in a flat `amd/` directory; none on arm64, where ROCm ships no user
//! space) and the responder ([`crate::responder`]). No partitioner: AMD has no partition family.

use std::path::Path;
use std::sync::Arc;

use accel_backend::Backend;
use accel_backend::detect::{DetectRequest, Detector, StateError, pci_gate_closed};
use accel_backend::respond::{Responder, ResponderSetup};
use accel_backend::slicing::SlicingLibrary;
use accel_core::{Detection, Manufacturer, ManufacturerInventory};

use crate::detector::{self, DetectOptions};
use crate::responder::{AmdResponder, SHIM};

/// AMD's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Amd,
        detector: Arc::new(AmdDetector),
        slicing: Some(Arc::new(Vrocm)),
        partitioner: None,
        responder: amd_responder,
    }
}

fn amd_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(AmdResponder::from_setup(setup))
}

/// The AMD detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdDetector;

impl Detector for AmdDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Amd
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if request.pci_gate
            && let Some(reason) =
                pci_gate_closed(request.host, request.pci_classes, request.vendor_ids)
        {
            let mut section = ManufacturerInventory::empty(Manufacturer::Amd);
            section.notes.push(reason);
            return Ok(Ok(section));
        }
        let options = DetectOptions {
            per_query: request.deadlines.per_query,
            vendor_ids: request.vendor_ids.iter().map(|id| id.vendor).collect(),
        };
        Ok(detector::detect(request.host, request.commands, options))
    }
}

/// Whether the AMD shim exists for a CPU architecture (ROCm publishes no aarch64 user space, so
/// the arm64 image carries none).
pub fn vrocm_built_for(arch: &str) -> bool {
    arch == "x86_64"
}

/// The AMD slicing shim, `libvrocm.so`: links no ROCm object, so one build serves every ROCm.
#[derive(Debug, Clone, Copy, Default)]
pub struct Vrocm;

impl Vrocm {
    /// [`SlicingLibrary::runtime_major`] on a given architecture: the ROCm major when the
    /// detection names it, 0 when it does not (the shim does not depend on it); `None` where no
    /// shim is built.
    pub fn runtime_major_on(arch: &str, section: &ManufacturerInventory) -> Option<u32> {
        if !vrocm_built_for(arch) {
            return None;
        }
        Some(
            section
                .runtime_version
                .as_deref()
                .and_then(|v| v.split('.').next())
                .and_then(|m| m.parse::<u32>().ok())
                .unwrap_or(0),
        )
    }
}

impl SlicingLibrary for Vrocm {
    fn runtime(&self) -> &'static str {
        "ROCm"
    }

    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32> {
        Vrocm::runtime_major_on(std::env::consts::ARCH, section)
    }

    /// The flat `<library-dir>/amd/libvrocm.so`, whatever the major.
    fn library_path(&self, library_dir: &Path, _major: u32) -> String {
        AmdResponder::shim_dir(library_dir)
            .join(SHIM)
            .display()
            .to_string()
    }
}
