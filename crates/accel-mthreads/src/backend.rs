//! Moore Threads behind the manufacturer seam (accel-backend): the detector (PCI-gated), the
//! slicing "library" (none is staged: the host's sGPU kernel module enforces the QoS variables,
//! so the gate is the `mtgpu` module being loaded), the stateless responder, doctor and the
//! sampler. No partitioner, no kernel-log faults, no reset.

use std::path::Path;
use std::sync::Arc;

use accel_backend::detect::{DetectRequest, Detector, StateError};
use accel_backend::doctor::{Doctor, Options, Report};
use accel_backend::record::RecordPlan;
use accel_backend::reset::Reset;
use accel_backend::respond::{Responder, ResponderSetup};
use accel_backend::slicing::SlicingLibrary;
use accel_backend::{Backend, HostToolDirs, StateDirRule};
use accel_core::{Detection, Manufacturer, ManufacturerInventory};
use accel_host::{Commands, Host};

use crate::detector::{
    self, CARD_NODE_PREFIX, DRIVER_MODULE_DIR, DRIVER_VERSION_FILE, DetectOptions,
};
use crate::gmi;
use crate::responder::MthreadsResponder;
use crate::usage::GmiSampler;

/// Moore Threads' row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Mthreads,
        detector: Arc::new(MthreadsDetector),
        slicing: Some(Arc::new(SgpuModule)),
        partitioner: None,
        responder: mthreads_responder,
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(MthreadsDoctor)),
        preflight: Some(Arc::new(crate::preflight::MthreadsPreflight)),
        sampler: Some(Arc::new(GmiSampler)),
        record: record_plan(),
        // The MUSA driver installs mthreads-gmi in /usr/bin, on the host's own search path.
        tools: HostToolDirs {
            programs: &["mthreads-gmi"],
            install_dirs: &[],
            library_dirs: &[],
        },
        state_dir: StateDirRule::Named,
        replay: None,
        replay_writes: None,
    }
}

/// Why the admin socket's reset refuses Moore Threads GPUs.
pub const RESET_REFUSAL: &str = "Moore Threads GPUs are not reset by the device manager: no \
     reset it can check is offered; drain the node and reset with mthreads-gmi by hand, or reboot";

/// What `record` captures of a Moore Threads node.
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: vec![DRIVER_VERSION_FILE.trim_start_matches('/')],
        trees: Vec::new(),
        device_nodes: Vec::new(),
        numbered_devices: vec![CARD_NODE_PREFIX],
        commands: vec![gmi::TABLE_ARGV, gmi::QUERY_ARGV],
    }
}

fn mthreads_responder(_setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(MthreadsResponder)
}

/// The Moore Threads detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MthreadsDetector;

impl Detector for MthreadsDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Mthreads
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Mthreads) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
            pci_classes: request.pci_classes.clone(),
            vendor_ids: request.vendor_ids.to_vec(),
        };
        Ok(detector::detect(request.host, request.commands, &options))
    }
}

/// Moore Threads' doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct MthreadsDoctor;

impl Doctor for MthreadsDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(DRIVER_MODULE_DIR)
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        crate::doctor::run(host, commands, options)
    }
}

/// The slices' enforcer: the host's sGPU support in the `mtgpu` kernel module. Nothing is
/// staged, so the gate "its library is present" is the module being loaded.
#[derive(Debug, Clone, Copy, Default)]
pub struct SgpuModule;

impl SlicingLibrary for SgpuModule {
    fn runtime(&self) -> &'static str {
        "MUSA"
    }

    /// No runtime generation matters (nothing is built per MUSA version): always 0.
    fn runtime_major(&self, _section: &ManufacturerInventory) -> Option<u32> {
        Some(0)
    }

    /// The kernel module's directory, whatever the library directory.
    fn library_path(&self, _library_dir: &Path, _major: u32) -> String {
        DRIVER_MODULE_DIR.to_string()
    }
}
