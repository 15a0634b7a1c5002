//! T-Head behind the manufacturer seam (accel-backend): the detector ([`crate::detector`], gated
//! on the configured PCI vendor ids), the slicing library's layout (the HGGC shim pair in a flat
//! `thead/` directory, built from this project's own sources; none on arm64, where the PPU SDK
//! does not exist), the responder ([`crate::responder`]) and doctor, and the partitioner
//! (`ppu-smi mig`, [`crate::mig`]) for the cards in MIG mode, with its stateful replay on a
//! recorded host ([`crate::mig_replay`]). No kernel-log faults: the one `alixpu` capture
//! shows driver-load topology lines only, no fault (spec §7: ECC is the health rule).

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
use crate::mig::PpuSmiPartitioner;
use crate::responder::{QUOTA_SHIM, TheadResponder};
use crate::usage::PpuSmiSampler;
use crate::{devnode, smi};

/// T-Head's row of the backends registry.
pub fn backend() -> Backend {
    Backend {
        manufacturer: Manufacturer::Thead,
        detector: Arc::new(TheadDetector),
        slicing: Some(Arc::new(Hggc)),
        partitioner: Some(Arc::new(PpuSmiPartitioner::default())),
        responder: thead_responder,
        // Device nodes only: no runtime, no CDI, nothing of the engine's.
        engine: None,
        injection: None,
        faults: None,
        reset: Reset::Refused(RESET_REFUSAL.to_string()),
        doctor: Some(Arc::new(TheadDoctor)),
        preflight: Some(Arc::new(crate::preflight::TheadPreflight)),
        sampler: Some(Arc::new(PpuSmiSampler)),
        record: record_plan(),
        // The PPU driver installs ppu-smi in /usr/local/bin; the PPU SDK keeps it under
        // its home (`PPU_HOME`, default /usr/local/PPU_SDK) with its libraries in lib64 (what
        // its envsetup.sh exports).
        tools: env_tool_dirs(),
        state_dir: StateDirRule::Named,
        replay: Some(crate::mig_replay::wrap),
        replay_writes: None,
    }
}

/// `PPU_HOME`: the PPU SDK's home (spec/thead.md §1.1, §9; default `/usr/local/PPU_SDK`), a host
/// path read under the host root.
pub const PPU_HOME_ENV: &str = "PPU_HOME";

/// The places of `ppu-smi` and its libraries with `PPU_HOME` unset: the SDK at
/// `/usr/local/PPU_SDK`.
pub const DEFAULT_TOOLS: HostToolDirs = HostToolDirs {
    programs: &["ppu-smi"],
    install_dirs: &["/usr/local/PPU_SDK/ppu-smi/bin", "/usr/local/PPU_SDK/bin"],
    library_dirs: &["/usr/local/PPU_SDK/lib64", "/usr/local/PPU_SDK/lib"],
};

/// The SDK home `PPU_HOME` names (trimmed, a trailing `/` dropped); `None` when unset or empty.
pub fn ppu_home(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let value = var(PPU_HOME_ENV)?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let trimmed = value.trim_end_matches('/');
    Some(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
}

/// Where `ppu-smi` and its libraries are looked for on a host: under the SDK home `home`
/// (`<home>/ppu-smi/bin`, `<home>/bin`; libraries `<home>/lib64`, then `<home>/lib`, the order
/// spec §1.1 searches `libhgml.so` in, each only where it exists), else [`DEFAULT_TOOLS`].
/// The host's own search path comes first either way.
pub fn tool_dirs(home: Option<&str>) -> HostToolDirs {
    let Some(home) = home else {
        return DEFAULT_TOOLS;
    };
    let home = home.trim_end_matches('/');
    let dirs = |subdirs: &[&str]| -> &'static [&'static str] {
        let dirs: Vec<&'static str> = subdirs
            .iter()
            .map(|sub| &*Box::leak(format!("{home}/{sub}").into_boxed_str()))
            .collect();
        Box::leak(dirs.into_boxed_slice())
    };
    HostToolDirs {
        programs: DEFAULT_TOOLS.programs,
        install_dirs: dirs(&["ppu-smi/bin", "bin"]),
        library_dirs: dirs(&["lib64", "lib"]),
    }
}

/// [`tool_dirs`] under the daemon's environment (the chart row's `env` may set `PPU_HOME`),
/// worked out once: the seam's rows hold `&'static` paths.
fn env_tool_dirs() -> HostToolDirs {
    static DIRS: OnceLock<HostToolDirs> = OnceLock::new();
    *DIRS.get_or_init(|| tool_dirs(ppu_home(|name| std::env::var(name).ok()).as_deref()))
}

/// Why the admin socket's reset refuses PPUs.
pub const RESET_REFUSAL: &str = "T-Head PPUs are not reset by the device manager: the PPU SDK \
     names no reset the driver would accept while its control nodes are held; drain the node \
     and reset with the vendor's tools, or reboot (a new boot clears the recorded faults)";

/// What `record` captures of a PPU node: the driver's version file, the control nodes and
/// every card's node (their numbers kept in the markers), the three `ppu-smi` queries and its two MIG listings (refused by a
/// driver with no card in MIG mode; recorded as answered).
pub fn record_plan() -> RecordPlan {
    RecordPlan {
        files: vec![detector::MODULE_VERSION.trim_start_matches('/')],
        trees: vec![],
        device_nodes: vec!["dev/alixpu", "dev/alixpu_ctl"],
        numbered_devices: vec!["alixpu_ppu"],
        commands: vec![
            smi::TABLE_ARGV,
            smi::LIST_ARGV,
            smi::QUERY_ARGV,
            smi::MIG_PROFILES_ARGV,
            smi::MIG_PLACEMENTS_ARGV,
        ],
    }
}

/// T-Head's doctor behind the seam ([`crate::doctor::run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct TheadDoctor;

impl Doctor for TheadDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(devnode::CONTROL) || host.exists("sys/module/alixpu")
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        Report::of(crate::doctor::run(
            host,
            commands,
            options.deadlines,
            &format!("/{}", options.library_dir.trim_start_matches('/')),
            &options.arch,
        ))
    }
}

fn thead_responder(setup: ResponderSetup) -> Arc<dyn Responder> {
    Arc::new(TheadResponder::from_setup(setup))
}

/// The T-Head detector behind [`Detector`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TheadDetector;

impl Detector for TheadDetector {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Thead
    }

    fn detect(&self, request: &DetectRequest<'_>) -> Result<Detection, StateError> {
        if let Some(answer) = request.gated(Manufacturer::Thead) {
            return Ok(answer);
        }
        let options = DetectOptions {
            deadlines: request.deadlines,
            vendor_ids: request.vendor_ids.iter().map(|id| id.vendor).collect(),
            pci_classes: request.pci_classes.clone(),
        };
        Ok(detector::detect(request.host, request.commands, options))
    }
}

/// Whether the HGGC shims exist for a CPU architecture (the PPU SDK is `x86_64`-only, so the
/// arm64 image carries none; a PPU only exists in an `x86_64` host).
pub fn hggc_built_for(arch: &str) -> bool {
    arch == "x86_64"
}

/// The T-Head slicing shims: `hggc_quota.so` (enforcement) and `hgml_dlsym_hook.so`
/// (visibility), one build for every HGGC runtime (the SDK lives in the workload image).
#[derive(Debug, Clone, Copy, Default)]
pub struct Hggc;

impl Hggc {
    /// [`SlicingLibrary::runtime_major`] on a given architecture: the HGGC major when the
    /// detection names it, 0 when it does not (the shims do not depend on it); `None` where no
    /// shim is built.
    pub fn runtime_major_on(arch: &str, section: &ManufacturerInventory) -> Option<u32> {
        if !hggc_built_for(arch) {
            return None;
        }
        Some(accel_backend::slicing::major_or_zero(section))
    }
}

impl SlicingLibrary for Hggc {
    fn runtime(&self) -> &'static str {
        "HGGC"
    }

    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32> {
        Hggc::runtime_major_on(std::env::consts::ARCH, section)
    }

    /// The flat `<library-dir>/thead/hggc_quota.so`, whatever the major (the responder refuses
    /// a slice naming any other staged file that is missing).
    fn library_path(&self, library_dir: &Path, _major: u32) -> String {
        TheadResponder::shim_dir(library_dir)
            .join(QUOTA_SHIM)
            .display()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shims_exist_on_x86_64_only_and_lie_flat() {
        let section = ManufacturerInventory::empty(Manufacturer::Thead);
        assert_eq!(Hggc::runtime_major_on("x86_64", &section), Some(0));
        assert_eq!(Hggc::runtime_major_on("aarch64", &section), None);
        assert_eq!(
            Hggc.library_path(Path::new("/var/lib/gpustack/operator/lib"), 0),
            "/var/lib/gpustack/operator/lib/thead/hggc_quota.so"
        );
    }
}
