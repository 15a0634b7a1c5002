//! `doctor` for a Moore Threads node, one function per check; it reads the host and changes
//! nothing. Checks: `mtgpu-driver` (boards on the bus and `/dev/mtgpu.<N>` nodes),
//! `mthreads-gmi` (the detection it gives, or why none; inside the daemon the tool exists only
//! under the `mthreads` RuntimeClass), `unique-ids`, and `runtime-class` (the MT container
//! runtime in a Pod's path; without it `MTHREADS_VISIBLE_DEVICES` grants nothing, silently).

use accel_backend::doctor::{Check, Options, Report};
use accel_backend::vendor_runtime::{VendorRuntime, handler_check};
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions, Kernel};
use crate::responder::VISIBLE_DEVICES;

/// How the MT container runtime's binary is named, and the RuntimeClass (and handler).
pub const RUNTIME_BINARY: &str = "mthreads-container-runtime";
pub const RUNTIME_CLASS: &str = "mthreads";

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
    ])
}

fn driver(kernel: &Kernel) -> Check {
    const NAME: &str = "mtgpu-driver";
    let (boards, nodes) = (kernel.functions.len(), kernel.card_nodes.len());
    if nodes == 0 {
        Check::fail(
            NAME,
            format!(
                "{boards} Moore Threads board(s) on the PCI bus and no /dev/mtgpu.<N> node: the mtgpu driver is not loaded"
            ),
            "install the MT driver and the MT Container Toolkit, then load mtgpu",
        )
    } else {
        Check::ok(
            NAME,
            format!(
                "{boards} board(s) on the bus, {nodes} /dev/mtgpu.<N> node(s), driver {}",
                kernel
                    .driver_version
                    .as_deref()
                    .unwrap_or("of unknown version")
            ),
        )
    }
}

fn tool(commands: &dyn Commands, detection: &Detection) -> Check {
    const NAME: &str = "mthreads-gmi";
    match detection {
        Ok(_) if !commands.is_installed("mthreads-gmi") => Check::warn(
            NAME,
            "mthreads-gmi is not installed",
            "run the daemon under the mthreads RuntimeClass (the chart does), which brings the tool",
        ),
        Ok(section) => Check::ok(
            NAME,
            format!(
                "{} GPU(s), driver {}",
                section.accelerators.len(),
                section.driver_version.as_deref().unwrap_or("unknown")
            ),
        ),
        Err(e) => Check::fail(
            NAME,
            e.to_string(),
            "check the MT driver with mthreads-gmi on the host (dmesg for mtgpu's errors)",
        ),
    }
}

fn unique_ids(detection: &Detection) -> Check {
    match detection {
        Ok(section) => {
            accel_backend::doctor::unique_ids(section, "GPU", "check `mthreads-gmi -q` on the host")
        }
        Err(_) => Check::warn(
            "unique-ids",
            "no detection to read the UUIDs from",
            "fix the mthreads-gmi check first",
        ),
    }
}
