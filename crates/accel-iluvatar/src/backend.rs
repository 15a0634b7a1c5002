//! Iluvatar behind the manufacturer seam (accel-backend): the detector (PCI-gated), HAMi-core's
//! layout (the CUDA-12 build in the flat `<library-dir>/iluvatar/`, whatever CUDA level corex
//! reports, even none), the responder, doctor and the sampler. No partitioner (no
//! `.partitioned` family), no kernel-log faults (corex has no XID-style stream), no reset.

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

use crate::detector::{self, CARD_NODE_PREFIX, CONTROL_NODE, DRIVER_VERSION_FILES, DetectOptions};
use crate::ixsmi;
use crate::responder::{IluvatarResponder, PRELOAD_LIBRARY};
use crate::usage::IxsmiSampler;

/// Iluvatar's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Iluvatar,
        detector: Arc::new(IluvatarDetector),
        slicing: Some(Arc::new(HamiCore)),
        partitioner: None,
        responder: iluvatar_responder,
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(IluvatarDoctor)),
        preflight: Some(Arc::new(crate::preflight::IluvatarPreflight)),
        sampler: Some(Arc::new(IxsmiSampler)),
        record: record_plan(),
        // CoreX installs ixsmi in /usr/local/corex/bin, off the host's PATH, and it needs
        // libixml.so from CoreX's lib64 (without it: "libixml.so: cannot open shared object file").
        tools: HostToolDirs {
            programs: &["ixsmi"],
            install_dirs: &["/usr/local/corex/bin"],
            library_dirs: &["/usr/local/corex/lib64", "/usr/local/corex/lib"],
        },
        state_dir: StateDirRule::Named,
        replay: None,
        replay_writes: None,
    }
}

/// Why the admin socket's reset refuses Iluvatar GPUs.
pub const RESET_REFUSAL: &str = "Iluvatar GPUs are not reset by the device manager: the corex \
     driver offers no reset it can check; drain the node and reset with ixsmi by hand, or reboot";

/// What `record` captures of an Iluvatar node: the driver module's version, the device nodes,
/// and every ixsmi form the detector, the sampler and doctor run.
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: DRIVER_VERSION_FILES
            .iter()
            .map(|f| f.trim_start_matches('/'))
            .collect(),
        trees: Vec::new(),
        device_nodes: vec![CONTROL_NODE.trim_start_matches('/')],
        numbered_devices: vec![CARD_NODE_PREFIX],
        commands: vec![
            ixsmi::TABLE_ARGV,
            ixsmi::QUERY_ARGV,
            ixsmi::COMPUTE_CAP_ARGV,
        ],
    }
}

fn iluvatar_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(IluvatarResponder::from_setup(setup))
}

/// The Iluvatar detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct IluvatarDetector;

impl Detector for IluvatarDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Iluvatar
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Iluvatar) {
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

/// Iluvatar's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct IluvatarDoctor;

impl Doctor for IluvatarDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(CONTROL_NODE)
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        crate::doctor::run(host, commands, options)
    }
}

/// HAMi-core on corex: the CUDA 12 build, one artifact in a flat directory (seed 000, "Where the
/// preload libraries come from").
#[derive(Debug, Clone, Copy, Default)]
pub struct HamiCore;

/// The CUDA major of the HAMi-core build Iluvatar reuses.
pub const HAMI_CORE_CUDA_MAJOR: u32 = 12;

impl SlicingLibrary for HamiCore {
    fn runtime(&self) -> &'static str {
        "CUDA"
    }

    /// Always the build's own major: the library does not follow the CUDA level corex reports
    /// (10.2 on a host, none inside a container).
    fn runtime_major(&self, _section: &ManufacturerInventory) -> Option<u32> {
        Some(HAMI_CORE_CUDA_MAJOR)
    }

    fn library_path(&self, library_dir: &Path, _major: u32) -> String {
        IluvatarResponder::library_home(library_dir)
            .join(PRELOAD_LIBRARY)
            .display()
            .to_string()
    }
}
