//! Cambricon behind the manufacturer seam (accel-backend): the detector ([`crate::detector`],
//! gated on the configured PCI vendor ids), the responder ([`crate::responder`]), doctor and
//! preflight ([`crate::preflight`]). Slices are sMLU instances, driver objects made through
//! cnmon at Allocate ([`crate::smlu`]): no preload library and no runtime version gate them, so
//! they are offered on every Cambricon node (spec §2.4: even with the mode off, which the
//! allocator turns on), and a recorded host answers cnmon's sMLU commands from its state
//! ([`crate::smlu_replay::wrap`]). No partitioner (Cambricon has no partition family), no fault
//! reader (the described system reads none for Cambricon, and no `cambricon_drv` kernel line
//! was ever captured): health rests on what cnmon prints, read by the detector
//! ([`crate::health`]).

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
use crate::responder::CambriconResponder;

/// Cambricon's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Cambricon,
        detector: Arc::new(CambriconDetector),
        slicing: Some(Arc::new(SmluSlices)),
        partitioner: None,
        responder: cambricon_responder,
        // The responder hands /dev nodes itself: no runtime, no CDI, nothing of the engine's.
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(CambriconDoctor)),
        preflight: Some(Arc::new(crate::preflight::CambriconPreflight)),
        sampler: Some(Arc::new(crate::usage::CnmonSampler)),
        record: record_plan(),
        // The driver package moves cnmon into /usr/bin; Neuware installs keep one in its bin. cnmon
        // links only the C library.
        tools: HostToolDirs {
            programs: &["cnmon"],
            install_dirs: &["/usr/local/neuware/bin"],
            library_dirs: &[],
        },
        state_dir: StateDirRule::Named,
        replay: Some(crate::smlu_replay::wrap),
        replay_writes: None,
    }
}

/// Cambricon's slices behind the slicing seam: sMLU instances the allocator makes in the
/// driver, so nothing is staged and no runtime version is asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmluSlices;

impl SlicingLibrary for SmluSlices {
    fn runtime(&self) -> &'static str {
        "Cambricon sMLU"
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

/// Why the admin socket's reset refuses Cambricon accelerators.
pub const RESET_REFUSAL: &str = "Cambricon accelerators are not reset by the device manager: \
     drain the node and reset the card with `cnmon` by hand, or reboot";

/// What `record` captures of a Cambricon node: the driver module's version, the Neuware
/// version file, the driver's sMLU listings, the card and control nodes, the two cnmon queries
/// the detector runs and `cnmon set -h` (which names the sMLU mode option this cnmon takes).
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: vec![
            detector::DRIVER_VERSION_FILE.trim_start_matches('/'),
            detector::RUNTIME_VERSION_FILE.trim_start_matches('/'),
        ],
        trees: vec![
            "sys/module/cambricon_drv/drivers",
            "proc/driver/cambricon/mlus",
        ],
        device_nodes: vec!["dev/cambricon_ctl", "dev/cambricon_gdr"],
        numbered_devices: vec!["cambricon_dev", "cambricon_ipcm", "cmsg_ctrl", "commu"],
        commands: vec![
            crate::cnmon::TABLE_ARGV,
            crate::cnmon::INFO_ARGV,
            crate::cnmon_smlu::SET_USAGE_ARGV,
        ],
    }
}

fn cambricon_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(CambriconResponder::from_setup(setup))
}

/// Cambricon's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CambriconDoctor;

impl Doctor for CambriconDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(detector::DRIVER_VERSION_FILE) || host.exists(crate::nodes::CTL)
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        let detect = DetectOptions {
            deadlines: options.deadlines,
            ..DetectOptions::default()
        };
        Report::of(crate::doctor::run(host, commands, &detect))
    }
}

/// The Cambricon detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CambriconDetector;

impl Detector for CambriconDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Cambricon
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Cambricon) {
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
