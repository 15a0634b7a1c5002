//! `device-manager doctor` for Ascend: one function per check, each reading the host and
//! changing nothing — the driver, its device nodes, `npu-smi`, the container-share flag of each
//! chip (read only; the grant turns it on), and the vcann-rt build for the node's family and
//! CANN major.

use accel_backend::Deadlines;
use accel_backend::doctor::Check;
use accel_core::inventory::Detection;
use accel_host::{Commands, Host, RunFailure};

use crate::detector::{self, DetectOptions};
use crate::responder::{self, sliceable};
use crate::{backend, kernel, share, soc};

/// Every check, in order.
pub fn run(
    host: &dyn Host,
    commands: &dyn Commands,
    deadlines: Deadlines,
    library_dir: &str,
) -> Vec<Check> {
    let detection = detector::detect(
        host,
        commands,
        DetectOptions {
            deadlines,
            ..DetectOptions::default()
        },
    );
    let mut checks = vec![driver(host), device_nodes(host), npu_smi(&detection)];
    checks.extend(share_flags(commands, deadlines, &detection));
    checks.push(vcann_rt(host, library_dir, &detection));
    checks
}

/// The driver's install tree and version.
pub fn driver(host: &dyn Host) -> Check {
    match kernel::read_driver_version(host) {
        Some(v) => Check::ok("driver", format!("Ascend driver {v}")),
        None if host.exists(kernel::DRIVER_DIR) => Check::warn(
            "driver",
            format!(
                "{} has no readable version.info",
                kernel::DRIVER_VERSION_FILE
            ),
            "reinstall the Ascend driver package (a V2 driver may carry none)",
        ),
        None => Check::fail(
            "driver",
            format!("no Ascend driver under {}", kernel::DRIVER_DIR),
            "install the Ascend NPU driver and firmware",
        ),
    }
}

/// `/dev/davinci<N>` and the control nodes.
pub fn device_nodes(host: &dyn Host) -> Check {
    let chips = kernel::read_davinci(host);
    let missing = kernel::missing_control_nodes(host);
    if chips.is_empty() {
        return Check::fail(
            "device-nodes",
            "no /dev/davinci<N> node",
            "load the Ascend driver (the davinci nodes appear with it)",
        );
    }
    if missing.is_empty() {
        return Check::ok(
            "device-nodes",
            format!("{} /dev/davinci node(s) and the control nodes", chips.len()),
        );
    }
    Check::warn(
        "device-nodes",
        format!("missing {}", missing.join(", ")),
        "the Ascend Docker Runtime mounts them into every container; a 950 has no /dev/devmm_svm",
    )
}

/// Whether `npu-smi` enumerates the chips.
pub fn npu_smi(detection: &Detection) -> Check {
    match detection {
        Ok(section) if !section.accelerators.is_empty() => Check::ok(
            "npu-smi",
            format!("npu-smi lists {} chip(s)", section.accelerators.len()),
        ),
        Ok(_) => Check::warn(
            "npu-smi",
            "npu-smi lists no chip",
            "check that the driver is loaded and npu-smi is on the host's PATH",
        ),
        Err(e) => Check::fail(
            "npu-smi",
            e.to_string(),
            "run `npu-smi info` on the host; a driver that will not initialise needs the device released or the host rebooted",
        ),
    }
}

/// The container-share flag of each chip of a V1 driver, read only.
pub fn share_flags(
    commands: &dyn Commands,
    deadlines: Deadlines,
    detection: &Detection,
) -> Vec<Check> {
    let Ok(section) = detection else {
        return Vec::new();
    };
    section
        .accelerators
        .iter()
        .filter(|a| a.architecture.as_deref() != Some(soc::Family::F950.name()))
        .filter_map(|a| {
            let [_, card, chip, ..] = a.physical_indexes[..] else {
                return None;
            };
            let name = format!("container-share {card}:{chip}");
            Some(match share::read(commands, deadlines.per_query, card, chip) {
                Ok(Some(true)) => Check::ok(&name, "container-share is enabled"),
                Ok(Some(false)) => Check::ok(
                    &name,
                    "container-share is off; the first shared, sliced or visibility grant turns it on",
                ),
                Ok(None) => Check::warn(&name, "npu-smi printed no device-share reading", format!("run `npu-smi info -t device-share -i {card} -c {chip}`")),
                Err(RunFailure::NotInstalled { .. }) => Check::warn(
                    &name,
                    share::no_api(card, chip),
                    "only exclusive grants can be served on this driver",
                ),
                Err(e) => Check::warn(&name, e.to_string(), format!("run `npu-smi info -t device-share -i {card} -c {chip}`")),
            })
        })
        .collect()
}

/// The vcann-rt build for the node's family and CANN major.
pub fn vcann_rt(host: &dyn Host, library_dir: &str, detection: &Detection) -> Check {
    let Ok(section) = detection else {
        return Check::warn(
            "vcann-rt",
            "no detection, so no family to look for",
            "fix npu-smi first",
        );
    };
    let Some(family) = backend::node_family(section) else {
        return Check::warn(
            "vcann-rt",
            "the chips' family is unknown: no logical slices",
            "none: slices need a known family",
        );
    };
    let major = backend::cann_major(section);
    if !sliceable(family, major) {
        return Check::ok(
            "vcann-rt",
            format!(
                "no vcann-rt build exists for {} with CANN {major}: logical slices are not offered",
                family.name()
            ),
        );
    }
    let lib = responder::build_dir(std::path::Path::new(library_dir), major, family)
        .join("lib")
        .join(responder::RUNTIME);
    let path = lib.display().to_string();
    if host.exists(&path) {
        Check::ok("vcann-rt", format!("{path} is staged"))
    } else {
        Check::warn(
            "vcann-rt",
            format!("{path} is not staged: logical slices are not advertised"),
            "let the device manager's init container stage the libraries (--library-dir)",
        )
    }
}
