//! NVIDIA behind the manufacturer seam (accel-backend): the detector (both layers of seed 002,
//! with the passthrough memory kept in the daemon's state directory), the slicing library's
//! layout (HAMi-core, one `cuda-<major>/libvgpu.so` per CUDA major), the MIG partitioner
//! (`nvidia-smi mig`, [`crate::partitioner`]) and the responder.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use accel_backend::detect::{DetectRequest, Detector, StateError};
use accel_backend::record::RecordPlan;
use accel_backend::reset::Reset;
use accel_backend::respond::{EngineSource, InjectionStrategy, Responder, ResponderSetup};
use accel_backend::slicing::SlicingLibrary;
use accel_backend::{Backend, FaultKnowledge, HostToolDirs, StateDirRule};
use accel_core::manufacturer::PciVendorId;
use accel_core::{Detection, Manufacturer, ManufacturerInventory};
use accel_host::Host;
use accel_host::pci::{self, PciClassPrefixes};

use crate::detector::{self, DetectOptions};
use crate::doctor::SmiDoctor;
use crate::passthrough::{self, GpuMemory, PciCandidate};
use crate::reset::SmiReset;
use crate::responder::NvidiaResponder;
use crate::samples::SmiSampler;
use crate::xid::{XID_APPLICATION_ENV, XID_HARDWARE_ENV, XidClasses};

/// NVIDIA's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Nvidia,
        detector: Arc::new(NvidiaDetector),
        slicing: Some(Arc::new(HamiCore)),
        partitioner: Some(Arc::new(crate::partitioner::SmiPartitioner::default())),
        responder: nvidia_responder,
        engine: Some(live_engine),
        injection: Some(InjectionStrategy::Envvar),
        faults: Some(FaultKnowledge {
            settings: &[XID_APPLICATION_ENV, XID_HARDWARE_ENV],
            build: xid_classes,
        }),
        reset: Reset::By(Arc::new(SmiReset::default())),
        doctor: Some(Arc::new(SmiDoctor)),
        preflight: Some(preflight()),
        sampler: Some(Arc::new(SmiSampler)),
        record: record_plan(),
        // nvidia-smi comes with the driver (/usr/bin); the GPU Operator's driver container puts it
        // in /usr/local/nvidia/bin, WSL 2 in /usr/lib/wsl/lib.
        tools: HostToolDirs {
            programs: &["nvidia-smi"],
            install_dirs: &["/usr/local/nvidia/bin", "/usr/lib/wsl/lib"],
            library_dirs: &[],
        },
        // Every NVIDIA node since the first release keeps its journal in the daemons' root:
        // an upgrade moves nothing.
        state_dir: StateDirRule::Root,
        replay: Some(crate::mig_replay::wrap),
        replay_writes: None,
    }
}

/// What `record` captures of an NVIDIA node: the driver's procfs tree and version, its device
/// nodes (numbered GPUs, the control and UVM nodes, WSL 2's `/dev/dxg`), and every nvidia-smi
/// query the detector, the sampler and doctor run.
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: vec!["proc/driver/nvidia/version"],
        trees: vec!["proc/driver/nvidia/gpus", "proc/driver/nvidia/capabilities"],
        device_nodes: vec![
            "dev/nvidiactl",
            "dev/nvidia-uvm",
            "dev/nvidia-uvm-tools",
            "dev/nvidia-modeset",
            "dev/dxg",
        ],
        numbered_devices: vec!["nvidia"],
        commands: detector::SNAPSHOT_QUERIES
            .iter()
            .chain(detector::SAMPLE_QUERIES)
            .chain(detector::DOCTOR_QUERIES)
            .copied()
            .collect(),
    }
}

fn live_engine(host: Arc<dyn Host>, containerd_dir: &Path) -> Arc<dyn EngineSource> {
    Arc::new(crate::engine::LiveEngine::new(host, containerd_dir))
}

fn xid_classes(
    vars: &BTreeMap<String, String>,
) -> Result<Arc<dyn accel_backend::health::FaultClassifier>, String> {
    let classes = XidClasses::from_settings(
        vars.get(XID_APPLICATION_ENV).map(String::as_str),
        vars.get(XID_HARDWARE_ENV).map(String::as_str),
    )
    .map_err(|e| e.to_string())?;
    Ok(Arc::new(classes))
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
        if !detector::is_paravirtual(request.host)
            && let Some(answer) = request.gated(Manufacturer::Nvidia)
        {
            return Ok(answer);
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
