//! `doctor` for a Cambricon node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `cambricon-driver` (MLU functions bound to Cambricon's driver), `cnmon` (the card
//! table read within its deadline), `device-nodes` (every detected card's
//! `/dev/cambricon_dev<N>`, the responder's precondition, and `/dev/cambricon_ctl`),
//! `unique-ids` (a card without a UUID cannot be granted).

use accel_backend::doctor::Check;
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
    out.push(match &sources.table {
        Some(table) => Check::ok(
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
        None => Check::warn(
            "cnmon",
            sources
                .notes
                .iter()
                .find(|n| n.contains("cnmon"))
                .cloned()
                .unwrap_or_else(|| "cnmon did not answer".into()),
            "install Neuware's cnmon on the host: without it no card has a UUID or a device index",
        ),
    });
    let section = detector::join(sources.clone());
    let missing: Vec<String> = section
        .accelerators
        .iter()
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
                if sources.card_nodes.is_empty() {
                    ""
                } else {
                    ", every detected card has its own"
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
    out.push(accel_backend::doctor::unique_ids(
        &section,
        "card",
        "check `cnmon info` on the host; a card without a UUID is not granted",
    ));
    out
}
