//! `doctor` for an Iluvatar node, one function per check, each `ok`, `warn` or `fail` with a
//! one-line reason and what to do; it reads the host and changes nothing. Checks:
//! `iluvatar-driver` (boards on the bus, `/dev/iluvatar<N>` and `/dev/itrctl`), `ixsmi` (the
//! detection it gives, or why none), `unique-ids` (a GPU without a UUID cannot be granted),
//! `runtime-class` (ix-container-runtime in a Pod's path: the engine's default, or the
//! RuntimeClass handler; without it `IX_VISIBLE_DEVICES` grants nothing, silently) and
//! `slicing-library` (HAMi-core's CUDA-12 `libvgpu.so` and its `ld.so.preload` staged in the
//! flat `<library-dir>/iluvatar/`), and the health sources, none of which prints a signal
//! (`docs/manufacturers/iluvatar.md`, "Health"; what was searched is in
//! `testdata/captures/iluvatar/SOURCES.md`): `health-ecc` (ixsmi prints no ECC error count or
//! health state; the health bitmask is IXML's) and `kernel-log` (no fault line of the driver
//! is known), so health rests on detection. Both are `ok`: nothing on the node would change
//! them.

use std::path::Path;

use accel_backend::doctor::{Check, Options, Report};
use accel_backend::vendor_runtime::{VendorRuntime, handler_check};
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, CONTROL_NODE, DetectOptions, Kernel};
use crate::responder::{IluvatarResponder, PRELOAD_LIBRARY, VISIBLE_DEVICES};

/// How ix-container-runtime's binary is named, and the RuntimeClass (and handler) the chart
/// creates.
pub const RUNTIME_BINARY: &str = "ix-container-runtime";
pub const RUNTIME_CLASS: &str = "iluvatar";

/// Every check, in order.
pub fn run(host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
    let detect_options = DetectOptions {
        deadlines: options.deadlines,
        ..DetectOptions::default()
    };
    let kernel = detector::read_kernel(host, &detect_options);
    let detection = detector::detect(host, commands, &detect_options);
    Report::of(vec![
        driver(&kernel),
        tool(commands, &detection),
        unique_ids(&detection),
        handler_check(
            host,
            &options.containerd_config_dir,
            &VendorRuntime {
                runtime_class: Some(RUNTIME_CLASS),
                binary_prefix: RUNTIME_BINARY,
                variable: VISIBLE_DEVICES,
            },
        ),
        library(host, &options.library_dir),
        health_ecc(&detection),
        kernel_log(),
    ])
}

/// `health-ecc`: ixsmi prints no health signal, so nothing takes a GPU out but detection.
fn health_ecc(detection: &Detection) -> Check {
    let gpus = match detection {
        Ok(section) => format!("{} GPU(s)", section.accelerators.len()),
        Err(_) => "the GPUs".to_string(),
    };
    Check::ok(
        "health-ecc",
        format!(
            "not read: health rests on detection for {gpus}: ixsmi prints no ECC error count or health state (its query form refuses ecc.errors fields; the health bitmask is IXML's ixmlDeviceGetHealth, a library call), so no reading takes a GPU out of service"
        ),
    )
}

/// `kernel-log`: the driver's kernel log is not a health source here.
fn kernel_log() -> Check {
    Check::ok(
        "kernel-log",
        "not watched: no fault line of the iluvatar driver is known (none captured)",
    )
}

fn driver(kernel: &Kernel) -> Check {
    const NAME: &str = "iluvatar-driver";
    let (boards, nodes) = (kernel.functions.len(), kernel.card_nodes.len());
    if nodes == 0 {
        return Check::fail(
            NAME,
            format!(
                "{boards} Iluvatar board(s) on the PCI bus and no /dev/iluvatar<N> node: the corex driver is not loaded"
            ),
            "install the Iluvatar CoreX driver matching the ix-container-toolkit and load it",
        );
    }
    let control = if kernel.control_node { "and" } else { "but no" };
    let reason = format!(
        "{boards} board(s) on the bus, {nodes} /dev/iluvatar<N> node(s) {control} {CONTROL_NODE}"
    );
    if kernel.control_node {
        Check::ok(NAME, reason)
    } else {
        Check::warn(
            NAME,
            reason,
            "reload the corex driver: ix-container-runtime hands every container /dev/itrctl",
        )
    }
}

fn tool(commands: &dyn Commands, detection: &Detection) -> Check {
    const NAME: &str = "ixsmi";
    match detection {
        Ok(_) if !commands.is_installed("ixsmi") => Check::warn(
            NAME,
            "ixsmi is not installed on the host",
            "install the corex SDK's ixsmi on the host",
        ),
        Ok(section) => Check::ok(
            NAME,
            format!(
                "{} GPU(s), driver {}, CUDA-compatible {}",
                section.accelerators.len(),
                section.driver_version.as_deref().unwrap_or("unknown"),
                section.runtime_version.as_deref().unwrap_or("N/A")
            ),
        ),
        Err(e) => Check::fail(
            NAME,
            e.to_string(),
            "check the corex driver with ixsmi on the host (dmesg for the driver's errors)",
        ),
    }
}

fn unique_ids(detection: &Detection) -> Check {
    match detection {
        Ok(section) => accel_backend::doctor::unique_ids(
            section,
            "GPU",
            "check `ixsmi --query-gpu=index,uuid --format=csv` on the host",
        ),
        Err(_) => Check::warn(
            "unique-ids",
            "no detection to read the UUIDs from",
            "fix the ixsmi check first",
        ),
    }
}

fn library(host: &dyn Host, library_dir: &str) -> Check {
    const NAME: &str = "slicing-library";
    let home = IluvatarResponder::library_home(&Path::new("/").join(library_dir));
    let missing: Vec<String> = [PRELOAD_LIBRARY, accel_backend::chores::PRELOAD_FILE]
        .iter()
        .map(|f| home.join(f).display().to_string())
        .filter(|p| !host.exists(p))
        .collect();
    if missing.is_empty() {
        Check::ok(
            NAME,
            format!("HAMi-core's CUDA-12 build is staged in {}", home.display()),
        )
    } else {
        Check::warn(
            NAME,
            format!(
                "{} missing: logical slices are not offered",
                missing.join(" and ")
            ),
            "let the daemon's init container stage the image's libraries (deviceManager.stageLibraries)",
        )
    }
}
