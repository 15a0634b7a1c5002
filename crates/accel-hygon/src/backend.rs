//! Hygon behind the manufacturer seam (accel-backend): the detector ([`crate::detector`], gated
//! on the configured PCI vendor ids), the slice ledger as its slicing "library" (none to stage:
//! the host's DTK reads each container's `vdev.conf`), the responder ([`crate::responder`]) and
//! doctor ([`crate::doctor`]), and the partitioner ([`crate::mig`]: `hy-smi mig`, the MIG
//! UUIDs from the driver's registry). The MIG mode is node-wide: a MIG node's cards feed the
//! partition family only, so whole cards and slices are off there.

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
use crate::mig::{self, HySmiPartitioner};
use crate::responder::HygonResponder;
use crate::{hysmi, module, registry, rocminfo};

/// Hygon's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Hygon,
        detector: Arc::new(HygonDetector),
        slicing: Some(Arc::new(VdevLedger)),
        partitioner: Some(Arc::new(HySmiPartitioner::default())),
        responder: hygon_responder,
        engine: None,
        // The responder injects its own nodes and mounts: the strategy setting has no effect.
        injection: None,
        // Health is the ECC rule of detection (spec §7: the kernel's UMC counter; no
        // kernel-log watching).
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(HygonDoctor)),
        preflight: Some(Arc::new(crate::preflight::HygonPreflight)),
        sampler: Some(Arc::new(crate::usage::HySmiSampler)),
        record: record_plan(),
        // hy-smi and Hygon's rocm-smi fork are HYHAL's (/opt/hyhal/bin, not on the host's PATH;
        // some installs use /usr/local/hyhal), rocminfo the DTK's (/opt/dtk/bin); their libraries
        // are HYHAL's and the DTK's lib directories (what /opt/dtk/env.sh exports). rocm-smi is
        // AMD's name too: it is looked for in AMD's places, then these.
        tools: HostToolDirs {
            programs: &["hy-smi", "rocm-smi", "rocminfo"],
            install_dirs: &["/opt/hyhal/bin", "/usr/local/hyhal/bin", "/opt/dtk/bin"],
            library_dirs: &["/opt/hyhal/lib", "/opt/dtk/lib"],
        },
        state_dir: StateDirRule::Named,
        replay: Some(crate::mig_replay::wrap),
        replay_writes: None,
    }
}

/// Why the admin socket's reset refuses Hygon DCUs.
pub const RESET_REFUSAL: &str = "Hygon DCUs are not reset by the device manager (the described \
     system has no reset for them): drain the node and reset with hy-smi by hand, or reboot";

/// What `record` captures of a Hygon node: the module (version, DRM listings), the KFD topology,
/// the multi-instance registry, the DTK's version files, the control and DRM nodes, and every
/// query the detector and doctor run.
pub fn record_plan() -> RecordPlan {
    static FILES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let mut files = FILES
        .get_or_init(|| version_files_to_record(&crate::dtk::RocmHome::from_env()))
        .clone();
    files.extend(["sys/module/hycu/version", "sys/module/hydcu/version"]);
    RecordPlan {
        files,
        trees: vec![
            "sys/class/kfd",
            "sys/module/hycu/drivers",
            "sys/module/hydcu/drivers",
            registry::DIR.trim_start_matches('/'),
        ],
        device_nodes: vec!["dev/kfd", "dev/mkfd"],
        numbered_devices: vec!["dri/card", "dri/renderD"],
        commands: vec![
            hysmi::HY_SMI_JSON,
            hysmi::ROCM_SMI_JSON,
            hysmi::HY_SMI_TABLE,
            rocminfo::ARGV,
            mig::LGIP_ARGV,
            mig::LGIPP_ARGV,
        ],
    }
}

fn hygon_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(HygonResponder::from_setup(setup))
}

/// The Hygon detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HygonDetector;

impl Detector for HygonDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Hygon
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Hygon) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
            vendor_ids: request.vendor_ids.iter().map(|id| id.vendor).collect(),
            pci_classes: request.pci_classes.clone(),
            rocm_home: crate::dtk::RocmHome::from_env(),
        };
        Ok(detector::detect(request.host, request.commands, options))
    }
}

/// The runtime version files `record` captures, root-relative: the fixed ones, and those under
/// the home `ROCM_HOME`/`ROCM_PATH` names (each made once for the process).
pub fn version_files_to_record(home: &crate::dtk::RocmHome) -> Vec<&'static str> {
    let mut files: Vec<&'static str> = detector::RUNTIME_VERSION_FILES
        .iter()
        .map(|f| f.trim_start_matches('/'))
        .collect();
    for file in home.version_files() {
        let file = file.trim_start_matches('/');
        if !files.contains(&file) {
            files.push(Box::leak(file.to_string().into_boxed_str()));
        }
    }
    files
}

/// Hygon's doctor behind the seam.
#[derive(Debug, Clone, Copy, Default)]
pub struct HygonDoctor;

impl Doctor for HygonDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        module::loaded(host).is_some()
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        Report::of(crate::doctor::run(host, commands, options.deadlines))
    }
}

/// Hygon's slices as the seam sees them: the `vdev.conf` ledger, which needs no library on the
/// host. Slices are offered wherever the node's multi-instance mode is known (spec §1.5: an
/// unreadable mode publishes neither slicing family; a MIG node's cards feed partitions only).
#[derive(Debug, Clone, Copy, Default)]
pub struct VdevLedger;

impl SlicingLibrary for VdevLedger {
    fn runtime(&self) -> &'static str {
        "DTK"
    }

    /// The DTK major when the detection names one, 0 when it does not (the file format does not
    /// depend on it); `None` when any card's multi-instance mode is unknown.
    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32> {
        if section.accelerators.iter().any(|a| a.mig_mode.is_none()) {
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

    fn library_path(&self, _library_dir: &Path, _major: u32) -> String {
        String::new()
    }

    fn needs_library(&self) -> bool {
        false
    }
}
