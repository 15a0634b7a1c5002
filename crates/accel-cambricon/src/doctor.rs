//! `doctor` for a Cambricon node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `cambricon-driver` (MLU functions bound to Cambricon's driver), `cnmon` (the card
//! table and `cnmon info` read within their deadlines, or why the pass is not measured),
//! `device-nodes` (every detected card's `/dev/cambricon_dev<N>`, the responder's
//! precondition, and `/dev/cambricon_ctl`), `unique-ids` (a card without a UUID cannot be
//! granted).

use accel_backend::doctor::Check;
use accel_core::inventory::Detection;
use accel_host::{Commands, Host};

use crate::detector::{self, DetectOptions, Sources};
use crate::nodes;

/// Runs every check.
pub fn run(host: &dyn Host, commands: &dyn Commands, options: &DetectOptions) -> Vec<Check> {
    let sources = detector::read_sources(host, commands, options);
    checks(&sources)
}

/// The checks over what the detector read.
pub fn checks(sources: &Sources) -> Vec<Check> {
    let mut out = Vec::new();
    let bound = sources
        .functions
        .iter()
        .filter(|f| {
            f.driver
                .as_deref()
                .is_some_and(detector::is_cambricon_driver)
        })
        .count();
    out.push(if bound > 0 {
        Check::ok(
            "cambricon-driver",
            format!(
                "Cambricon's driver holds {bound} of {} MLU function(s){}",
                sources.functions.len(),
                sources
                    .driver_version_file
                    .as_deref()
                    .map(|v| format!(", version {v}"))
                    .unwrap_or_default()
            ),
        )
    } else if sources.functions.is_empty() {
        return vec![Check::fail(
            "cambricon-driver",
            "no Cambricon MLU on the PCI bus",
            "run doctor on a node with Cambricon MLUs",
        )];
    } else {
        Check::fail(
            "cambricon-driver",
            format!(
                "{} MLU function(s) on the bus, none bound to Cambricon's driver",
                sources.functions.len()
            ),
            "install the Cambricon driver (cambricon_drv) and load it",
        )
    });
    let detection = detector::join(sources.clone());
    out.push(cnmon(sources, &detection));
    let missing: Vec<String> = detection
        .iter()
        .flat_map(|section| &section.accelerators)
        .filter_map(|a| a.minor_number)
        .filter(|n| !sources.card_nodes.contains(n))
        .map(nodes::card)
        .collect();
    out.push(if missing.is_empty() && !sources.card_nodes.is_empty() {
        Check::ok(
            "device-nodes",
            format!(
                "{} card node(s) under /dev{}",
                sources.card_nodes.len(),
                if detection.is_ok() {
                    ", every detected card has its own"
                } else {
                    ""
                }
            ),
        )
    } else if missing.is_empty() {
        Check::fail(
            "device-nodes",
            format!("no /dev/{}<N> node on the host", nodes::CARD_PREFIX),
            "load the Cambricon driver; it creates the card nodes",
        )
    } else {
        Check::fail(
            "device-nodes",
            format!("the host lacks {}", missing.join(", ")),
            "reload the Cambricon driver; a card without its node cannot be granted",
        )
    });
    out.push(match &detection {
        Ok(section) => accel_backend::doctor::unique_ids(
            section,
            "card",
            "check `cnmon info` on the host; a card without a UUID is not granted",
        ),
        Err(_) => Check::warn(
            "unique-ids",
            "no detection to read the UUIDs from",
            "fix the cnmon check first",
        ),
    });
    out
}

/// `cnmon`: the table's cards, or why the pass is not measured.
fn cnmon(sources: &Sources, detection: &Detection) -> Check {
    match (detection, &sources.table) {
        (Err(e), _) => Check::fail(
            "cnmon",
            e.to_string(),
            "check that `cnmon` and `cnmon info` answer on the host (Neuware's cnmon installed, the driver loaded): until they do, a running daemon keeps its last detection",
        ),
        (Ok(_), Some(table)) => Check::ok(
            "cnmon",
            format!(
                "cnmon{} lists {} card(s)",
                table
                    .cnmon_version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default(),
                table.cards.len()
            ),
        ),
        (Ok(_), None) => Check::warn(
            "cnmon",
            "cnmon did not answer",
            "install Neuware's cnmon on the host: without it no card has a UUID or a device index",
        ),
    }
}
