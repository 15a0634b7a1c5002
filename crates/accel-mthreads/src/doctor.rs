//! `doctor` for a Moore Threads node, one function per check; it reads the host and changes
//! nothing. Checks: `mtgpu-driver` (boards on the bus and `/dev/mtgpu.<N>` nodes),
//! `mthreads-gmi` (the detection it gives, or why none; inside the daemon the tool exists only
//! under the `mthreads` RuntimeClass), `unique-ids`, `runtime-class` (the MT container
//! runtime in a Pod's path; without it `MTHREADS_VISIBLE_DEVICES` grants nothing, silently),
//! and `health-ecc`, the one health source (spec §6): for how many GPUs `-q` printed the
//! volatile uncorrected DRAM ECC counter, which it did not (and whether the table's `ECC Mode`
//! says they have none to count), and which GPUs it takes out of service. A GPU out of
//! service warns (the daemon already keeps it out); it fails nothing.

use accel_backend::doctor::{Check, Options, Report};
use accel_backend::vendor_runtime::{VendorRuntime, handler_check};
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions, Kernel, Tool};
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
    let answers = detector::ask_tool(commands, options.deadlines);
    let detection = detector::answer(&kernel, &answers);
    Report::of(vec![
        driver(&kernel),
        tool(commands, &detection),
        unique_ids(&detection),
        health_ecc(&detection, &answers),
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

/// `health-ecc`: the volatile uncorrected DRAM ECC counter of `-q`, per detected GPU.
fn health_ecc(detection: &Detection, answers: &Tool) -> Check {
    const NAME: &str = "health-ecc";
    let Ok(section) = detection else {
        return Check::warn(
            NAME,
            "no detection to read the GPUs' ECC counters from",
            "fix the mthreads-gmi check first",
        );
    };
    let total = section.accelerators.len();
    if total == 0 {
        return Check::warn(
            NAME,
            "no GPU detected to read ECC counters from",
            "fix the mtgpu-driver and mthreads-gmi checks first",
        );
    }
    let mut out = Vec::new();
    let mut unread_modes = Vec::new();
    for a in &section.accelerators {
        let bus = a.bus_id.map_or_else(|| "no bus id".into(), |b| b.sysfs());
        match a.ecc.as_ref().and_then(|e| e.volatile_uncorrected) {
            Some(0) => {}
            Some(n) => out.push(format!("GPU {} ({bus}): {n} uncorrected", a.index)),
            None => unread_modes.push(
                answers
                    .table
                    .iter()
                    .flat_map(|t| &t.gpus)
                    .find(|g| {
                        g.bus_id.is_some()
                            && g.bus_id.map(accel_backend::vendor_runtime::board) == a.bus_id
                    })
                    .and_then(|g| g.ecc_mode.clone()),
            ),
        }
    }
    let read = total - unread_modes.len();
    let reason =
        format!("mthreads-gmi -q volatile DRAM ECC counter read for {read} of {total} GPU(s)");
    if !out.is_empty() {
        return Check::warn(
            NAME,
            format!("{reason}; out of service: {}", out.join(", ")),
            "drain the node and reset those GPUs (by hand with mthreads-gmi, or reboot); replace one whose count comes back",
        );
    }
    let no_ecc = unread_modes.iter().all(|mode| {
        mode.as_deref()
            .is_some_and(|m| accel_backend::text::present(m).is_none())
    });
    let unread = unread_modes.len();
    if unread == 0 {
        Check::ok(NAME, format!("{reason}, none above 0"))
    } else if no_ecc {
        Check::ok(
            NAME,
            format!(
                "{reason}; not printed for {unread}, whose ECC Mode is N/A in the table (no ECC to count)"
            ),
        )
    } else {
        Check::warn(
            NAME,
            format!(
                "{reason}; not printed for {unread}, so their uncorrected ECC errors are not seen"
            ),
            "check `mthreads-gmi -q` on the host (its ECC Errors section); until it prints the counter, a GPU with uncorrected errors stays in service",
        )
    }
}
