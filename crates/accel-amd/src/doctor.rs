//! `doctor` for an AMD node: what the detector and the responder need, each check `ok`, `warn`
//! or `fail` with a one-line reason and what to do. It reads the host through [`Host`] and
//! [`Commands`] and changes nothing.
//!
//! Checks: `amdgpu-driver` (the driver bound to a card and its KFD topology showing GPU nodes),
//! `kfd` (`/dev/kfd` present and openable for reading), `amd-smi` (answering within its
//! deadline; rocm-smi alone is a warning, neither a warning: facts then come from the kernel
//! only), `device-nodes` (every detected accelerator's `/dev/dri/card<N>` and `renderD<M>` on the
//! host, the responder's precondition for passing them to a container), `unique-ids`
//! (an accelerator without one cannot be granted), `partitions` (a partitioned board is not
//! served), `slicing-library` (`<library-dir>/amd/libvrocm.so` staged; none on arm64), and the
//! health source, `kmsg`: AMD health is the kernel log's amdgpu faults (`crate::kmsg`), so the
//! check says whether the log the daemon reads is readable; amd-smi's ECC counts and bad-page
//! state are not read as health, and the row says so.

use accel_backend::Deadlines;
use accel_backend::doctor::{Check, Status};
use accel_core::inventory::ManufacturerInventory;
use accel_host::{Commands, Host, KMSG_PATH, run_bounded};

use crate::backend::vrocm_built_for;
use crate::detector::{self, AMD_SMI_VERSION, DetectOptions};
use crate::responder::{AmdResponder, KFD, SHIM};
use crate::{drm, kfd, rocmsmi};

fn check(name: &'static str, status: Status, reason: String, action: Option<&str>) -> Check {
    Check {
        name: name.to_string(),
        status,
        reason,
        action: action.map(String::from),
    }
}

/// Runs every check. `library_dir` is the host path the shim is staged under (its `amd/`);
/// `arch` the CPU architecture the daemon's image is built for; `kmsg` the kernel log when it
/// is not `dev/kmsg` under the host root (`--kmsg-path`).
pub fn run(
    host: &dyn Host,
    commands: &dyn Commands,
    deadlines: Deadlines,
    library_dir: &str,
    arch: &str,
    kmsg: Option<&std::path::Path>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let amdgpu_cards = drm::read_bound_cards(host, drm::CLASS_DIR, drm::DRIVER).len();
    let gpu_nodes = kfd::read_topology(host, kfd::TOPOLOGY_DIR)
        .ok()
        .flatten()
        .map(|n| n.iter().filter(|n| n.is_gpu()).count())
        .unwrap_or(0);
    checks.push(if gpu_nodes > 0 {
        check(
            "amdgpu-driver",
            Status::Ok,
            format!("amdgpu drives {amdgpu_cards} card(s); KFD shows {gpu_nodes} GPU node(s)"),
            None,
        )
    } else if amdgpu_cards > 0 {
        check(
            "amdgpu-driver",
            Status::Fail,
            format!(
                "amdgpu drives {amdgpu_cards} card(s) but {} shows no GPU node: ROCm cannot use them",
                kfd::TOPOLOGY_DIR
            ),
            Some("load amdgpu with KFD support (a ROCm-capable kernel or amdgpu-dkms)"),
        )
    } else {
        check(
            "amdgpu-driver",
            Status::Fail,
            "no card is bound to amdgpu and there is no KFD topology".into(),
            Some("install and load the amdgpu driver (modprobe amdgpu)"),
        )
    });
    let kfd_path = host.root().join(KFD.trim_start_matches('/'));
    checks.push(if !host.exists(KFD) {
        check(
            "kfd",
            Status::Fail,
            format!("{KFD} is missing: no accelerator can be granted"),
            Some("load amdgpu; in a container, mount the host's /dev"),
        )
    } else {
        match std::fs::OpenOptions::new().read(true).open(&kfd_path) {
            Ok(_) => check(
                "kfd",
                Status::Ok,
                format!("{KFD} is present and readable"),
                None,
            ),
            Err(e) => check(
                "kfd",
                Status::Fail,
                format!("{KFD} cannot be opened: {e}"),
                Some("run as root or in the render group (udev rule for /dev/kfd)"),
            ),
        }
    });
    checks.push(if commands.is_installed("amd-smi") {
        match run_bounded(commands, AMD_SMI_VERSION, deadlines.per_query) {
            Ok(_) => check("amd-smi", Status::Ok, "amd-smi answers".into(), None),
            Err(e) => check(
                "amd-smi",
                Status::Warn,
                e.to_string(),
                Some("check the ROCm install (amd-smi version)"),
            ),
        }
    } else if commands.is_installed(rocmsmi::ARGV[0]) {
        check(
            "amd-smi",
            Status::Warn,
            "amd-smi is not installed; rocm-smi answers in its place".into(),
            Some("install amd-smi (ROCm 6 or later)"),
        )
    } else {
        check(
            "amd-smi",
            Status::Warn,
            "neither amd-smi nor rocm-smi is installed: products and versions are not known".into(),
            Some("install amd-smi (ROCm 6 or later)"),
        )
    });
    let section = detector::detect(
        host,
        commands,
        DetectOptions {
            deadlines,
            ..DetectOptions::default()
        },
    )
    .unwrap_or_else(|_| ManufacturerInventory::empty(accel_core::Manufacturer::Amd));
    checks.push(device_nodes(host, &section));
    let nameless: Vec<String> = section
        .accelerators
        .iter()
        .filter(|a| a.uuid.is_none())
        .map(|a| a.index.to_string())
        .collect();
    checks.push(if nameless.is_empty() {
        check("unique-ids", Status::Ok, "every accelerator reports a unique id".into(), None)
    } else {
        check(
            "unique-ids",
            Status::Warn,
            format!(
                "accelerator(s) {} report no unique id: ROCR_VISIBLE_DEVICES cannot name them, so they cannot be granted",
                nameless.join(", ")
            ),
            None,
        )
    });
    let partitioned: Vec<String> = section
        .accelerators
        .iter()
        .filter(|a| a.partitioning.as_ref().is_some_and(|p| p.partitions > 1))
        .map(|a| a.index.to_string())
        .collect();
    checks.push(if partitioned.is_empty() {
        check(
            "partitions",
            Status::Ok,
            "no board is partitioned".into(),
            None,
        )
    } else {
        check(
            "partitions",
            Status::Warn,
            format!(
                "accelerator(s) {} are split into compute partitions and are not served",
                partitioned.join(", ")
            ),
            Some("set the boards to SPX (amd-smi set --compute-partition SPX)"),
        )
    });
    let library = AmdResponder::shim_dir(std::path::Path::new(library_dir)).join(SHIM);
    let library = library.display().to_string();
    checks.push(if !vrocm_built_for(arch) {
        check(
            "slicing-library",
            Status::Ok,
            format!("no AMD slicing shim is built for {arch}: logical slices are not offered"),
            None,
        )
    } else if host.exists(&library) {
        check(
            "slicing-library",
            Status::Ok,
            format!("{library} is staged"),
            None,
        )
    } else {
        check(
            "slicing-library",
            Status::Warn,
            format!("{library} is missing: logical slices are not advertised"),
            Some("stage libvrocm.so, rocm-monitor and rocm-cumask-check there yourself (the image does not ship them)"),
        )
    });
    checks.push(kmsg_check(host, kmsg));
    checks
}

/// `kmsg`: the kernel log the daemon reads amdgpu's faults from, the one AMD health source.
fn kmsg_check(host: &dyn Host, kmsg: Option<&std::path::Path>) -> Check {
    const NAME: &str = "kmsg";
    let (path, shown) = match kmsg {
        Some(path) => (path.to_path_buf(), path.display().to_string()),
        None => (host.root().join(KMSG_PATH), "/dev/kmsg".to_string()),
    };
    let counters = "amd-smi's ECC counts and bad-page state are not read as health";
    match std::fs::File::open(&path) {
        Ok(_) => check(
            NAME,
            Status::Ok,
            format!(
                "{shown} is readable: amdgpu's RAS errors, GPU resets, ring timeouts and page faults are watched ({counters})"
            ),
            None,
        ),
        Err(e) => check(
            NAME,
            Status::Warn,
            format!(
                "{shown}: {e}: amdgpu's faults cannot be watched, and they are AMD's one health source ({counters})"
            ),
            Some(
                "mount /dev/kmsg into the DaemonSet's container and give it CAP_SYSLOG (or run it privileged)",
            ),
        ),
    }
}

/// Every detected accelerator's DRM nodes present on the host.
fn device_nodes(host: &dyn Host, section: &ManufacturerInventory) -> Check {
    let mut missing = Vec::new();
    let mut unnamed = Vec::new();
    for a in &section.accelerators {
        match a.drm.and_then(|d| d.card.zip(d.render)) {
            Some((card, render)) => {
                for path in [
                    format!("/dev/dri/card{card}"),
                    format!("/dev/dri/renderD{render}"),
                ] {
                    if !host.exists(&path) {
                        missing.push(path);
                    }
                }
            }
            None => unnamed.push(a.index.to_string()),
        }
    }
    if section.accelerators.is_empty() {
        check(
            "device-nodes",
            Status::Warn,
            "no AMD accelerator detected".into(),
            None,
        )
    } else if !missing.is_empty() {
        check(
            "device-nodes",
            Status::Fail,
            format!("missing on the host: {}", missing.join(", ")),
            Some("mount the host's /dev/dri into the device manager"),
        )
    } else if !unnamed.is_empty() {
        check(
            "device-nodes",
            Status::Fail,
            format!(
                "accelerator(s) {} record no drm card and render node",
                unnamed.join(", ")
            ),
            Some("compare /sys/module/amdgpu/drivers/pci:amdgpu/<bdf>/drm"),
        )
    } else {
        check(
            "device-nodes",
            Status::Ok,
            format!(
                "/dev/kfd and the card and render nodes of {} accelerator(s) can be passed to containers",
                section.accelerators.len()
            ),
            None,
        )
    }
}
