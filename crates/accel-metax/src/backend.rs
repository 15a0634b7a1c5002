//! MetaX behind the manufacturer seam (accel-backend): the detector ([`crate::detector`],
//! gated on the configured PCI vendor ids), the responder ([`crate::responder`]) and doctor.
//! Slices are sGPU subdevices, driver objects made through sysfs ([`crate::sgpu`]): no preload
//! library and no runtime version gate them, so they are offered on every MetaX node (spec
//! §2.4), and a recorded host answers the writes ([`crate::sgpu::wrap`]). No partitioner (MetaX
//! has no partition family), no fault reader (health rests on detection).

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

use crate::detector::{self, DetectOptions};
use crate::responder::MetaxResponder;

/// MetaX's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Metax,
        detector: Arc::new(MetaxDetector),
        slicing: Some(Arc::new(SgpuSlices)),
        partitioner: None,
        responder: metax_responder,
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(MetaxDoctor)),
        preflight: Some(Arc::new(crate::preflight::MetaxPreflight)),
        sampler: Some(Arc::new(crate::usage::MxSmiSampler)),
        record: record_plan(),
        // The metax-driver package installs mx-smi in /opt/mxdriver/bin (off the host's PATH); MACA
        // installs keep one in /opt/maca/bin.
        tools: HostToolDirs {
            programs: &["mx-smi"],
            install_dirs: &["/opt/mxdriver/bin", "/opt/maca/bin"],
            library_dirs: &["/opt/mxdriver/lib", "/opt/maca/lib"],
        },
        state_dir: StateDirRule::Named,
        replay: None,
        replay_writes: Some(crate::sgpu::wrap),
    }
}

/// MetaX's slices behind the slicing seam: sGPU subdevices the allocator makes in the driver,
/// so nothing is staged and no runtime version is asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct SgpuSlices;

impl SlicingLibrary for SgpuSlices {
    fn runtime(&self) -> &'static str {
        "MetaX sgpu"
    }

    fn runtime_major(&self, _section: &ManufacturerInventory) -> Option<u32> {
        None
    }

    fn library_path(&self, _library_dir: &Path, _major: u32) -> String {
        String::new()
    }

    fn needs_library(&self) -> bool {
        false
    }

    fn needs_runtime(&self) -> bool {
        false
    }
}

/// Why the admin socket's reset refuses MetaX accelerators.
pub const RESET_REFUSAL: &str = "MetaX accelerators are not reset by the device manager: drain \
     the node and reset the GPU with mx-smi by hand, or reboot";

/// What `record` captures of a MetaX node: the module's version and its driver listing (each
/// card's `drm/` minors), the control and DRM nodes, and the three mx-smi queries (the table,
/// `-L`, the ECC counts).
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: vec![detector::DRIVER_VERSION_FILE.trim_start_matches('/')],
        trees: vec!["sys/module/metax/drivers"],
        device_nodes: vec!["dev/mxcd", "dev/mxnd", "dev/mxgd"],
        numbered_devices: vec!["dri/card", "dri/renderD"],
        commands: vec![
            crate::mxsmi::TABLE_ARGV,
            crate::mxsmi::LIST_ARGV,
            crate::count_ecc::COUNT_ECC_ARGV,
        ],
    }
}

fn metax_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(MetaxResponder::from_setup(setup))
}

/// MetaX's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaxDoctor;

impl Doctor for MetaxDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists("/sys/module/metax")
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        let detect = DetectOptions {
            deadlines: options.deadlines,
            ..DetectOptions::default()
        };
        Report::of(crate::doctor::run(host, commands, &detect))
    }
}

/// The MetaX detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaxDetector;

impl Detector for MetaxDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Metax
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Metax) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
            vendor_ids: request.vendor_ids.iter().map(|id| id.vendor).collect(),
            pci_classes: request.pci_classes.clone(),
        };
        Ok(detector::detect(request.host, request.commands, &options))
    }
}
