//! `doctor` for a MetaX node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `metax-driver` (MetaX functions bound to the `metax` driver), `mx-smi` (the table
//! and `mx-smi -L` read within their deadlines, or why the pass is not measured), `control-nodes` (`/dev/mxcd`, `/dev/mxnd`, `/dev/mxgd`),
//! `drm-nodes` (each detected card's `card<N>`/`renderD<M>` named and present: the responder
//! leaves a missing one out, so the container would lack it), `unique-ids`, and the health
//! sources: `health-ecc` (`mx-smi --count-ecc`, spec §6's one: for how many GPUs the DRAM
//! uncorrectable count was read, which GPUs it takes out of service, what only warns — retired
//! pages, SRAM errors — and what was not read; a GPU out of service warns, the daemon already
//! keeps it out) and `kernel-log` (not watched: no fault line of the `metax` driver is known).

use accel_backend::doctor::Check;
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions, EccNote, Sources};
use crate::responder::CONTROL_NODES;

/// Runs every check.
pub fn run(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Vec<Check> {
    let sources = detector::read_sources(host, commands, options);
    let mut out = Vec::new();
    let bound = sources
        .functions
        .iter()
        .filter(|f| {
            f.pci
                .driver
                .as_deref()
                .is_some_and(detector::is_metax_driver)
        })
        .count();
    if sources.functions.is_empty() {
        return vec![Check::fail(
            "metax-driver",
            "no MetaX GPU on the PCI bus",
            "run doctor on a node with MetaX GPUs",
        )];
    }
    out.push(if bound > 0 {
        Check::ok(
            "metax-driver",
            format!(
                "the metax driver holds {bound} of {} MetaX function(s){}",
                sources.functions.len(),
                sources
                    .driver_version_file
                    .as_deref()
                    .map(|v| format!(", version {v}"))
                    .unwrap_or_default()
            ),
        )
    } else {
        Check::fail(
            "metax-driver",
            format!(
                "{} MetaX function(s) on the bus, none bound to the metax driver",
                sources.functions.len()
            ),
            "install the MetaX driver (and the MXMACA SDK) on the node",
        )
    });
    let detection = detector::join(sources.clone());
    out.push(mx_smi(&sources, &detection));
    let missing: Vec<&str> = CONTROL_NODES
        .into_iter()
        .filter(|n| !host.exists(n))
        .collect();
    out.push(if missing.is_empty() {
        Check::ok(
            "control-nodes",
            "/dev/mxcd, /dev/mxnd and /dev/mxgd are present",
        )
    } else {
        Check::warn(
            "control-nodes",
            format!("the host lacks {}", missing.join(", ")),
            "load the metax driver; containers are granted without the missing nodes",
        )
    });
    let accelerators = detection.iter().flat_map(|section| &section.accelerators);
    let mut lacking = Vec::new();
    for a in accelerators.clone() {
        let drm = a.drm.unwrap_or_default();
        match (drm.card, drm.render) {
            (Some(c), Some(r)) => {
                for path in [format!("/dev/dri/card{c}"), format!("/dev/dri/renderD{r}")] {
                    if !host.exists(&path) {
                        lacking.push(path);
                    }
                }
            }
            _ => lacking.push(format!("accelerator {}'s DRM minors", a.index)),
        }
    }
    out.push(if lacking.is_empty() {
        Check::ok(
            "drm-nodes",
            format!(
                "every one of {} GPU(s) has its card and render node",
                accelerators.count()
            ),
        )
    } else {
        Check::warn(
            "drm-nodes",
            format!("missing: {}", lacking.join(", ")),
            "reload the metax driver; a container is granted without the missing nodes",
        )
    });
    out.push(match &detection {
        Ok(section) => accel_backend::doctor::unique_ids(
            section,
            "GPU",
            "check `mx-smi -L` on the host; a GPU without a UUID is not granted",
        ),
        Err(_) => Check::warn(
            "unique-ids",
            "no detection to read the UUIDs from",
            "fix the mx-smi check first",
        ),
    });
    out.push(health_ecc(&sources, &detection));
    out.push(kernel_log());
    out
}

/// `health-ecc`: what `mx-smi --count-ecc` gave for each detected GPU.
fn health_ecc(sources: &Sources, detection: &Detection) -> Check {
    const NAME: &str = "health-ecc";
    let section = match detection {
        Ok(section) if !section.accelerators.is_empty() => section,
        _ => {
            return Check::warn(
                NAME,
                "no GPU detected to read ECC counts for",
                "fix the metax-driver and mx-smi checks first",
            );
        }
    };
    let notes = detector::ecc_notes(sources, section);
    if let Some(unread) = notes.iter().find(|n| matches!(n, EccNote::Unread(_))) {
        return Check::warn(
            NAME,
            unread.to_string(),
            "check `mx-smi --count-ecc` on the host (a release without the option cannot count)",
        );
    }
    let total = section.accelerators.len();
    let read = section
        .accelerators
        .iter()
        .filter(|a| {
            a.ecc
                .as_ref()
                .and_then(|e| e.volatile_uncorrected)
                .is_some()
        })
        .count();
    let mut reason =
        format!("mx-smi --count-ecc: DRAM uncorrectable count read for {read} of {total} GPU(s)");
    let out: Vec<String> = section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| {
            let bus = a.bus_id.map_or_else(|| "no bus id".into(), |b| b.sysfs());
            format!("GPU {} ({bus}): {}", a.index, a.health_reasons.join("; "))
        })
        .collect();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
    }
    for note in &notes {
        reason.push_str(&format!("; {note}"));
    }
    if !out.is_empty() {
        Check::warn(
            NAME,
            reason,
            "drain the node and reset those GPUs with mx-smi by hand, or reboot; replace one whose count comes back",
        )
    } else if notes
        .iter()
        .any(|n| matches!(n, EccNote::NoDramCount { .. } | EccNote::NoBlock { .. }))
    {
        Check::warn(
            NAME,
            reason,
            "check `mx-smi --count-ecc` on the host: until it prints each GPU's DRAM Uncorrectable count, a GPU with such errors stays in service",
        )
    } else if !notes.is_empty() {
        Check::warn(
            NAME,
            reason,
            "watch those GPUs' counts with `mx-smi --count-ecc`; they stay in service",
        )
    } else {
        Check::ok(NAME, format!("{reason}, none above 0"))
    }
}

/// `kernel-log`: the `metax` driver's kernel log is not a health source here.
fn kernel_log() -> Check {
    Check::ok(
        "kernel-log",
        "not watched: no fault line of the metax driver is known (none captured), so health rests on mx-smi --count-ecc",
    )
}

/// `mx-smi`: the table's GPUs, or why the pass is not measured.
fn mx_smi(sources: &Sources, detection: &Detection) -> Check {
    match (detection, &sources.table) {
        (Err(e), _) => Check::fail(
            "mx-smi",
            e.to_string(),
            "check that `mx-smi` and `mx-smi -L` answer on the host (mx-smi installed, the metax driver loaded): until they do, a running daemon keeps its last detection",
        ),
        (Ok(_), Some(table)) => Check::ok(
            "mx-smi",
            format!("mx-smi lists {} GPU(s)", table.gpus.len()),
        ),
        (Ok(_), None) => Check::warn(
            "mx-smi",
            sources
                .mx_smi_failure
                .as_ref()
                .map_or_else(|| "mx-smi did not answer".into(), ToString::to_string),
            "install mx-smi on the host: without it no GPU has a UUID, a name or its memory",
        ),
    }
}
