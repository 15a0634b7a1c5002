//! `doctor` for a MetaX node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `metax-driver` (MetaX functions bound to the `metax` driver), `mx-smi` (the table
//! and `mx-smi -L` read within their deadlines, or why the pass is not measured), `control-nodes` (`/dev/mxcd`, `/dev/mxnd`, `/dev/mxgd`),
//! `drm-nodes` (each detected card's `card<N>`/`renderD<M>` named and present: the responder
//! leaves a missing one out, so the container would lack it), `unique-ids`.

use accel_backend::doctor::Check;
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions, Sources};
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
    out
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
