//! AMD behind the manufacturer seam (accel-backend): the detector ([`crate::detector`], gated
//! on the configured PCI vendor ids), the slicing library's layout (`libvrocm.so`, one artifact
//! for every ROCm version in a flat `amd/` directory; none on arm64, where ROCm ships no user
//! space) and the responder ([`crate::responder`]). No partitioner: AMD has no partition family.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use accel_backend::detect::{DetectRequest, Detector, StateError};
use accel_backend::doctor::{Doctor, Options, Report};
use accel_backend::record::RecordPlan;
use accel_backend::reset::Reset;
use accel_backend::respond::{Responder, ResponderSetup};
use accel_backend::slicing::SlicingLibrary;
use accel_backend::{Backend, FaultKnowledge, HostToolDirs, StateDirRule};
use accel_core::{Detection, Manufacturer, ManufacturerInventory};
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions};
use crate::responder::{AmdResponder, SHIM};
use crate::usage::{AMD_SMI_METRIC, AmdSmiSampler};

/// AMD's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Amd,
        detector: Arc::new(AmdDetector),
        slicing: Some(Arc::new(Vrocm)),
        partitioner: None,
        responder: amd_responder,
        // The responder hands /dev nodes itself: no runtime, no CDI, nothing of the engine's.
        engine: None,
        injection: None,
        faults: Some(FaultKnowledge {
            settings: &[],
            build: amd_faults,
        }),
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(AmdDoctor)),
        preflight: None,
        sampler: Some(Arc::new(AmdSmiSampler)),
        record: record_plan(),
        // ROCm installs both under /opt/rocm/bin (often linked from /usr/bin), their libraries in
        // /opt/rocm/lib (AMD's install guide exports it as LD_LIBRARY_PATH).
        tools: HostToolDirs {
            programs: &["amd-smi", "rocm-smi"],
            install_dirs: &["/opt/rocm/bin"],
            library_dirs: &["/opt/rocm/lib", "/opt/rocm/lib64"],
        },
        state_dir: StateDirRule::Named,
        replay: None,
        replay_writes: None,
    }
}

/// Why the admin socket's reset refuses AMD accelerators.
pub const RESET_REFUSAL: &str = "AMD accelerators are not reset by the device manager: amdgpu \
     recovers a GPU of an XGMI hive by resetting every GPU in the hive, so the grants on the \
     others could not be checked from the names given; drain the node and reset with amd-smi by \
     hand, or reboot (a new boot clears the recorded faults)";

/// What `record` captures of an AMD node: the KFD topology, the DRM cards, amdgpu's driver
/// listing (a card's `drm/` minors), ROCm's version files, `/dev/kfd` and the DRM nodes, and
/// every amd-smi and rocm-smi query the detector, the sampler and doctor run.
pub fn record_plan() -> RecordPlan {
    let mut files: Vec<&'static str> = detector::ROCM_VERSION_FILES
        .iter()
        .map(|f| f.trim_start_matches('/'))
        .collect();
    files.push("sys/module/amdgpu/version");
    RecordPlan {
        files,
        trees: vec![
            "sys/class/kfd",
            "sys/class/drm",
            "sys/module/amdgpu/drivers",
        ],
        device_nodes: vec!["dev/kfd"],
        numbered_devices: vec!["dri/card", "dri/renderD"],
        commands: vec![
            detector::AMD_SMI_STATIC,
            detector::AMD_SMI_VERSION,
            AMD_SMI_METRIC,
            crate::rocmsmi::ARGV,
        ],
    }
}

fn amd_faults(
    _settings: &BTreeMap<String, String>,
) -> Result<Arc<dyn accel_backend::health::FaultClassifier>, String> {
    Ok(Arc::new(crate::kmsg::AmdFaults))
}

/// AMD's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdDoctor;

impl Doctor for AmdDoctor {
    /// A KFD topology alone is not AMD's driver: Hygon's DCUs run KFD too. AMD's driver shows
    /// as a KFD GPU node of one of AMD's vendor ids.
    fn driver_shown(&self, host: &dyn Host) -> bool {
        let amd = Manufacturer::Amd.default_pci_vendor_ids();
        crate::kfd::read_topology(host, crate::kfd::TOPOLOGY_DIR)
            .ok()
            .flatten()
            .is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n.is_gpu() && n.vendor_id().is_some_and(|v| amd.contains(&v)))
            })
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        Report::of(crate::doctor::run(
            host,
            commands,
            options.deadlines,
            &format!("/{}", options.library_dir.trim_start_matches('/')),
            &options.arch,
            options.kmsg.as_deref(),
        ))
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
        if let Some(answer) = request.gated(Manufacturer::Amd) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
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
        Some(accel_backend::slicing::major_or_zero(section))
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
