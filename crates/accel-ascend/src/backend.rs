//! Ascend behind the manufacturer seam (accel-backend): the detector ([`crate::detector`],
//! gated on the configured PCI vendor ids), vcann-rt's layout (one build per family and CANN
//! major, offered only for the pairs spec/ascend.md §5.1 lists), the responder
//! ([`crate::responder`]), doctor, and the recorded host's container-share replay. No
//! partitioner (Ascend has no partition family), no kernel-log faults (no capture exists).

use std::path::Path;
use std::sync::{Arc, OnceLock};

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
use crate::responder::{self as respond, AscendResponder};
use crate::{kernel, npusmi, soc};

/// Ascend's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Ascend,
        detector: Arc::new(AscendDetector),
        slicing: Some(Arc::new(VcannRt)),
        partitioner: None,
        responder: ascend_responder,
        // The Ascend Docker Runtime injects the nodes from ASCEND_VISIBLE_DEVICES.
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(AscendDoctor)),
        preflight: Some(Arc::new(crate::preflight::AscendPreflight)),
        sampler: Some(Arc::new(crate::usage::NpuSmiSampler::default())),
        record: record_plan(),
        // The driver package installs npu-smi in /usr/local/sbin and /usr/local/bin and keeps it in
        // its tools directory; its libraries are in the driver's lib64 tree (the installer also
        // registers them with ldconfig). The tree is `<CANN_HOME>/driver`.
        tools: env_tool_dirs(),
        state_dir: StateDirRule::Named,
        replay: Some(crate::share::wrap),
        replay_writes: None,
    }
}

/// Why the admin socket's reset refuses Ascend NPUs.
pub const RESET_REFUSAL: &str = "Ascend NPUs are not reset by the device manager: drain the node \
     and reset the chip with `npu-smi set -t reset -i <card> -c <chip>` by hand, or reboot";

/// The default places of `npu-smi` and its libraries (`CANN_HOME` unset).
pub const DEFAULT_TOOLS: HostToolDirs = HostToolDirs {
    programs: &["npu-smi"],
    install_dirs: &["/usr/local/Ascend/driver/tools"],
    library_dirs: &[
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/Ascend/driver/lib64/common",
        "/usr/local/Ascend/driver/lib64/driver",
    ],
};

/// A string kept for the life of the process (the seam's rows hold `&'static` paths; each is
/// made once, from the daemon's environment).
fn kept(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// The places of `npu-smi` under `roots`: [`DEFAULT_TOOLS`], or with `CANN_HOME` set the same
/// driver tree under it (`<CANN_HOME>/driver/tools`, `<CANN_HOME>/driver/lib64…`), where
/// spec §1.1 looks for the driver's library.
pub fn tool_dirs(roots: &kernel::InstallRoots) -> HostToolDirs {
    if roots.cann_home.is_none() {
        return DEFAULT_TOOLS;
    }
    let driver = roots.driver_dir();
    let dirs = |subdirs: &[&str]| -> &'static [&'static str] {
        let dirs: Vec<&'static str> = subdirs
            .iter()
            .map(|sub| kept(format!("{driver}/{sub}")))
            .collect();
        Box::leak(dirs.into_boxed_slice())
    };
    HostToolDirs {
        programs: DEFAULT_TOOLS.programs,
        install_dirs: dirs(&["tools"]),
        library_dirs: dirs(&["lib64", "lib64/common", "lib64/driver"]),
    }
}

/// [`tool_dirs`] under the daemon's environment, worked out once.
fn env_tool_dirs() -> HostToolDirs {
    static DIRS: OnceLock<HostToolDirs> = OnceLock::new();
    *DIRS.get_or_init(|| tool_dirs(&kernel::InstallRoots::from_env()))
}

/// What `record` captures of an Ascend node: the driver's and CANN's version files (where the
/// daemon's environment puts them, [`kernel::InstallRoots`]), the control nodes and the
/// numbered `/dev/davinci<N>`, and the node-wide `npu-smi` queries (the per-chip `-t` queries
/// depend on the table and are recorded by hand, see the hosts' NOTES).
pub fn record_plan() -> RecordPlan {
    static FILES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let files = FILES.get_or_init(|| record_files(&kernel::InstallRoots::from_env()));
    record_plan_of(files.clone())
}

/// The version files `record` captures under `roots`, root-relative.
pub fn record_files(roots: &kernel::InstallRoots) -> Vec<&'static str> {
    let mut files: Vec<&'static str> = vec![kernel::DRIVER_VERSION_FILE.trim_start_matches('/')];
    files.extend(
        kernel::CANN_VERSION_FILES
            .iter()
            .map(|f| f.trim_start_matches('/')),
    );
    let chosen = std::iter::once(roots.driver_version_file()).chain(roots.cann_version_files());
    for file in chosen {
        let file = file.trim_start_matches('/');
        if !files.contains(&file) {
            files.push(kept(file.to_string()));
        }
    }
    files
}

fn record_plan_of(files: Vec<&'static str>) -> RecordPlan {
    RecordPlan {
        files,
        trees: vec![],
        device_nodes: kernel::CONTROL_NODES
            .iter()
            .map(|n| n.trim_start_matches('/'))
            .collect(),
        numbered_devices: vec![kernel::DAVINCI_PREFIX],
        commands: vec![npusmi::INFO_ARGV, npusmi::MAPPING_ARGV, npusmi::LIST_ARGV],
    }
}

fn ascend_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(AscendResponder::from_setup(setup))
}

/// The Ascend detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AscendDetector;

impl Detector for AscendDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Ascend
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Ascend) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
            vendor_ids: request.vendor_ids.iter().map(|id| id.vendor).collect(),
            pci_classes: request.pci_classes.clone(),
            roots: kernel::InstallRoots::from_env(),
        };
        Ok(detector::detect(request.host, request.commands, options))
    }
}

/// Ascend's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct AscendDoctor;

impl Doctor for AscendDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(&kernel::InstallRoots::from_env().driver_dir())
            || !kernel::read_davinci(host).is_empty()
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        Report::of(crate::doctor::run_under(
            host,
            commands,
            options.deadlines,
            &format!("/{}", options.library_dir.trim_start_matches('/')),
            &kernel::InstallRoots::from_env(),
        ))
    }
}

/// The node's family: the first accelerator's (one driver stack per node).
pub fn node_family(section: &ManufacturerInventory) -> Option<soc::Family> {
    section
        .accelerators
        .iter()
        .find_map(|a| a.architecture.as_deref().and_then(soc::Family::from_name))
}

/// The CANN major of a detection (`8.5` → 8; 8 when the toolkit says nothing, spec §5.1).
pub fn cann_major(section: &ManufacturerInventory) -> u32 {
    section
        .runtime_version
        .as_deref()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or(8)
}

/// vcann-rt: `libvruntime.so`, one build per family and CANN major.
#[derive(Debug, Clone, Copy, Default)]
pub struct VcannRt;

impl SlicingLibrary for VcannRt {
    fn runtime(&self) -> &'static str {
        "CANN"
    }

    /// The CANN major, only where a build exists for the node's family (§5.1); `None`
    /// elsewhere, so no `.sliced` pool is advertised.
    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32> {
        let family = node_family(section)?;
        let major = cann_major(section);
        respond::sliceable(family, major).then_some(major)
    }

    /// Without the family this is the 910B build's path (the family is read by
    /// [`SlicingLibrary::library_path_for`]).
    fn library_path(&self, library_dir: &Path, major: u32) -> String {
        respond::build_dir(library_dir, major, soc::Family::F910B)
            .join("lib")
            .join(respond::RUNTIME)
            .display()
            .to_string()
    }

    fn library_path_for(
        &self,
        library_dir: &Path,
        major: u32,
        section: &ManufacturerInventory,
    ) -> String {
        let family = node_family(section).unwrap_or(soc::Family::F910B);
        respond::build_dir(library_dir, major, family)
            .join("lib")
            .join(respond::RUNTIME)
            .display()
            .to_string()
    }
}
