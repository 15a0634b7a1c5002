//! `device-manager doctor` for Ascend: one function per check, each reading the host and
//! changing nothing — the driver, its device nodes, `npu-smi`, the container-share flag of each
//! chip (read only; the grant turns it on), the vcann-rt build for the node's family and CANN
//! major, then one row per health source: `health-state` (`npu-smi info -t health`) and
//! `health-ecc` (`-t ecc` with `-t ecc-enable`), each saying for how many chips it was read,
//! which it could not read, and which chips it takes out of service or only warns about. A chip
//! out of service warns (the daemon already keeps it out); it fails nothing. `health-kernel-log`
//! says the kernel log is not watched (no Ascend fault line is known).

use accel_backend::Deadlines;
use accel_backend::doctor::Check;
use accel_core::inventory::{Accelerator, Detection};
use accel_host::{Commands, Host, RunFailure};

use crate::detector::{self, DetectOptions, Sources};
use crate::health::{ChipName, Verdict};
use crate::responder::{self, sliceable};
use crate::{backend, kernel, share, soc};

/// Every check, in order (the install roots unset: the fixed paths).
pub fn run(
    host: &dyn Host,
    commands: &dyn Commands,
    deadlines: Deadlines,
    library_dir: &str,
) -> Vec<Check> {
    run_under(
        host,
        commands,
        deadlines,
        library_dir,
        &kernel::InstallRoots::default(),
    )
}

/// Every check, in order, with the driver and the toolkit where `roots` put them.
pub fn run_under(
    host: &dyn Host,
    commands: &dyn Commands,
    deadlines: Deadlines,
    library_dir: &str,
    roots: &kernel::InstallRoots,
) -> Vec<Check> {
    let options = DetectOptions {
        deadlines,
        roots: roots.clone(),
        ..DetectOptions::default()
    };
    let sources = detector::read_sources(host, commands, &options);
    let detection = detector::join(sources.clone());
    let mut checks = vec![
        driver_under(host, roots),
        device_nodes(host),
        npu_smi(&detection),
    ];
    checks.extend(share_flags(commands, deadlines, &detection));
    checks.push(vcann_rt(host, library_dir, &detection));
    checks.push(health_state(&sources, &detection));
    checks.push(health_ecc(&detection));
    checks.push(health_kernel_log());
    checks
}

/// `health-kernel-log`: no Ascend kernel-log line is known as a fault, so none is watched.
pub fn health_kernel_log() -> Check {
    Check::ok(
        "health-kernel-log",
        "not watched: no Ascend driver fault line has been captured (spec §7 watches no kernel log), so npu-smi's health state and ECC are the NPU's health sources",
    )
}

/// The (NPU, chip) of every chip the table lists.
fn listed_chips(sources: &Sources) -> Vec<ChipName> {
    match &sources.info {
        Some(Ok(table)) => table
            .chips
            .iter()
            .filter_map(|c| {
                Some(ChipName {
                    npu: c.npu?,
                    chip: c.chip.unwrap_or(0),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Why a health row has nothing to read, or `None` when chips were detected.
fn nothing_to_read(name: &str, detection: &Detection) -> Option<Check> {
    match detection {
        Ok(section) if !section.accelerators.is_empty() => None,
        Ok(_) => Some(Check::warn(
            name,
            "no chip detected to read health from",
            "fix the npu-smi check first",
        )),
        Err(_) => Some(Check::warn(
            name,
            "no detection to read the chips' health from",
            "fix the npu-smi check first",
        )),
    }
}

/// `health-state`: `npu-smi info -t health`, per chip the table lists.
pub fn health_state(sources: &Sources, detection: &Detection) -> Check {
    const NAME: &str = "health-state";
    if let Some(check) = nothing_to_read(NAME, detection) {
        return check;
    }
    let chips = listed_chips(sources);
    let (mut read, mut out, mut warned, mut unread) = (0, Vec::new(), Vec::new(), Vec::new());
    for who in &chips {
        match detector::health_reading(sources, who.npu, who.chip) {
            Ok(h) => match h.verdict() {
                Verdict::InService => read += 1,
                Verdict::Warns => {
                    read += 1;
                    warned.push(format!("{who} ({})", h.detail()));
                }
                Verdict::OutOfService => {
                    read += 1;
                    out.push(format!("{who} {} ({})", h.printed(), h.detail()));
                }
                Verdict::Unknown => unread.push(format!("{who}: Health {}", h.printed())),
            },
            Err(why) => unread.push(format!("{who}: {why}")),
        }
    }
    let mut reason = format!(
        "npu-smi info -t health read for {read} of {} chip(s)",
        chips.len()
    );
    let mut actions = Vec::new();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
        actions.push(
            "drain the node, look the error codes up in Huawei's fault reference and reset those chips (`npu-smi set -t reset`) or reboot; each returns to service once npu-smi reports it OK or Warning",
        );
    }
    if !warned.is_empty() {
        reason.push_str(&format!(
            "; Warning (a minor alarm, kept in service): {}",
            warned.join(", ")
        ));
        actions.push("check the chips in Warning with `npu-smi info -t health`");
    }
    if let Some(first) = unread.first() {
        reason.push_str(&format!(
            "; not read for {} chip(s) (first {first})",
            unread.len()
        ));
        actions.push(
            "a chip whose health state is not read keeps its last reading: run `npu-smi info -t health -i <npu>` (with `-c <chip>` on a V1 driver) on the host",
        );
    }
    if actions.is_empty() {
        Check::ok(NAME, format!("{reason}: every chip OK"))
    } else {
        Check::warn(NAME, reason, actions.join("; "))
    }
}

/// A detected chip's name as `npu-smi` addresses it (card id and chip index).
fn chip_of(a: &Accelerator) -> String {
    match a.physical_indexes[..] {
        [_, card, chip, ..] => ChipName { npu: card, chip }.to_string(),
        _ => format!("accelerator {}", a.index),
    }
}

/// `health-ecc`: `npu-smi info -t ecc` and `-t ecc-enable`, per detected chip (spec §7).
pub fn health_ecc(detection: &Detection) -> Check {
    const NAME: &str = "health-ecc";
    if let Some(check) = nothing_to_read(NAME, detection) {
        return check;
    }
    let Ok(section) = detection else {
        return Check::warn(NAME, "no detection", "fix the npu-smi check first");
    };
    let chips = &section.accelerators;
    let read = chips.iter().filter(|a| a.ecc.is_some()).count();
    let enabled = chips
        .iter()
        .filter(|a| a.ecc.as_ref().and_then(|e| e.enabled) == Some(true))
        .count();
    let out: Vec<String> = chips
        .iter()
        .filter_map(|a| {
            let ecc = a.ecc.as_ref()?;
            let single = ecc.volatile_corrected.unwrap_or(0);
            let double = ecc.volatile_uncorrected.unwrap_or(0);
            (ecc.enabled == Some(true) && single + double > 0)
                .then(|| format!("{} ({single} single-bit, {double} double-bit)", chip_of(a)))
        })
        .collect();
    let unread: Vec<String> = chips
        .iter()
        .filter(|a| a.ecc.is_none())
        .map(chip_of)
        .collect();
    let mut reason = format!(
        "npu-smi info -t ecc read for {read} of {} chip(s), ECC enabled on {enabled}",
        chips.len()
    );
    let mut actions = Vec::new();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
        actions.push(
            "drain the node and reset those chips (`npu-smi set -t reset`) or reboot; replace a chip whose errors recur",
        );
    }
    if !unread.is_empty() {
        reason.push_str(&format!("; not read: {}", unread.join(", ")));
        actions.push(
            "a failed ECC read counts as healthy (spec §7): run `npu-smi info -t ecc -i <npu>` on the host",
        );
    }
    if actions.is_empty() {
        Check::ok(NAME, format!("{reason}: no error counted"))
    } else {
        Check::warn(NAME, reason, actions.join("; "))
    }
}

/// The driver's install tree and version.
pub fn driver(host: &dyn Host) -> Check {
    driver_under(host, &kernel::InstallRoots::default())
}

/// The driver's install tree and version, the tree being `<CANN_HOME>/driver`.
pub fn driver_under(host: &dyn Host, roots: &kernel::InstallRoots) -> Check {
    let dir = roots.driver_dir();
    match kernel::read_driver_version_in(host, roots) {
        Some(v) => Check::ok("driver", format!("Ascend driver {v}")),
        None if host.exists(&dir) => Check::warn(
            "driver",
            format!(
                "{} has no readable version.info",
                roots.driver_version_file()
            ),
            "reinstall the Ascend driver package (a V2 driver may carry none)",
        ),
        None => Check::fail(
            "driver",
            format!("no Ascend driver under {dir}"),
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
