//! `doctor` for a Cambricon node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `cambricon-driver` (MLU functions bound to Cambricon's driver), `cnmon` (the card
//! table and `cnmon info` read within their deadlines, or why the pass is not measured),
//! `device-nodes` (every detected card's `/dev/cambricon_dev<N>`, the responder's
//! precondition, and `/dev/cambricon_ctl`), `unique-ids` (a card without a UUID cannot be
//! granted), then one row per health source ([`crate::health`]): `health-state` (`cnmon
//! info`'s Health State), `health-ecc-column` (the table's `Ecc-Error`), `health-ecc-counters`
//! (`cnmon info`'s ECC counters, page retirement and row remapping) — each saying for how many
//! cards it was read, which it could not read, and which cards it takes out of service. A card
//! out of service warns (the daemon already keeps it out); it fails nothing.

use accel_backend::doctor::Check;
use accel_core::inventory::{Accelerator, Detection};
use accel_host::{Commands, Host};

use crate::cnmon::{CnmonInfo, HealthState};
use crate::detector::{self, DetectOptions, Sources};
use crate::health::{self, CardName, Fault};
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
    out.extend(health_checks(sources, &detection));
    out
}

/// The health sources' rows.
fn health_checks(sources: &Sources, detection: &Detection) -> Vec<Check> {
    let unread = |reason: &str, action: &str| -> Vec<Check> {
        ["health-state", "health-ecc-column", "health-ecc-counters"]
            .into_iter()
            .map(|name| Check::warn(name, reason, action))
            .collect()
    };
    let section = match detection {
        Ok(section) if section.accelerators.is_empty() => {
            return unread(
                "no card detected to read health from",
                "fix the cambricon-driver check first",
            );
        }
        Ok(section) => section,
        Err(_) => {
            return unread(
                "no detection to read the cards' health from",
                "fix the cnmon check first",
            );
        }
    };
    let cards: Vec<(CardName, Option<&CnmonInfo>)> = section
        .accelerators
        .iter()
        .map(|a| {
            (
                who(a),
                detector::info_of(&sources.info, a.bus_id, a.minor_number),
            )
        })
        .collect();
    vec![
        health_state(&cards),
        ecc_column(sources),
        ecc_counters(&cards, sources),
    ]
}

fn who(a: &Accelerator) -> CardName {
    CardName {
        card: a.minor_number,
        bus: a.bus_id,
    }
}

/// `what for 3, what else for 1` from the counts that are not 0.
fn tally(parts: &[(&str, usize)]) -> String {
    parts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{what} for {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `health-state`: `cnmon info`'s Health State, per detected card.
fn health_state(cards: &[(CardName, Option<&CnmonInfo>)]) -> Check {
    const NAME: &str = "health-state";
    let (mut read, mut na, mut odd, mut absent) = (0, 0, 0, 0);
    let mut out = Vec::new();
    for (who, info) in cards {
        let state = info.and_then(|i| i.health.as_ref());
        match state {
            _ if health::state_read(state) => read += 1,
            Some(HealthState::NotAvailable) => na += 1,
            Some(HealthState::Read { .. }) => odd += 1,
            None => absent += 1,
        }
        for fault in info.and_then(health::faults).unwrap_or_default() {
            match fault {
                Fault::InProblem => out.push(format!("{who} In Problem")),
                Fault::DriverNotRunning(d) => out.push(format!("{who} driver {}", d.word())),
                Fault::RetirementPending | Fault::RetirementFailed => {}
            }
        }
    }
    let mut reason = format!(
        "cnmon info Health State read for {read} of {} card(s)",
        cards.len()
    );
    let unread = tally(&[
        ("N/A", na),
        ("not understood", odd),
        ("not printed", absent),
    ]);
    if !unread.is_empty() {
        reason.push_str(&format!(" ({unread})"));
    }
    let mut actions = Vec::new();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
        actions.push(
            "drain the node and check those cards with cnmon info; each returns to service once cnmon reports it Good and Running (a reset, a driver reload or a reboot)",
        );
    }
    if !unread.is_empty() {
        actions.push(
            "a card whose Health State is not read stays in service whatever its state: check `cnmon info` on the host (cnmon 5.10 prints it)",
        );
    }
    if actions.is_empty() {
        Check::ok(
            NAME,
            format!("{reason}: none In Problem, no driver state but Running"),
        )
    } else {
        Check::warn(NAME, reason, actions.join("; "))
    }
}

/// `health-ecc-column`: the default table's `Ecc-Error` cells.
fn ecc_column(sources: &Sources) -> Check {
    const NAME: &str = "health-ecc-column";
    let Some(table) = &sources.table else {
        return Check::warn(
            NAME,
            "no cnmon table to read Ecc-Error from",
            "fix the cnmon check first",
        );
    };
    let (mut zero, mut na, mut absent) = (0, 0, 0);
    let mut counted = Vec::new();
    for card in &table.cards {
        match (card.ecc_errors(), card.ecc_error.as_deref()) {
            (Some(0), _) => zero += 1,
            (Some(n), _) => counted.push(format!(
                "{} {n}",
                CardName {
                    card: card.card,
                    bus: card.bus_id,
                }
            )),
            (None, Some(cell)) if accel_backend::text::present(cell).is_none() => na += 1,
            (None, _) => absent += 1,
        }
    }
    let read = tally(&[
        ("0", zero),
        ("a count", counted.len()),
        ("N/A (ECC not reported: off or not supported)", na),
        ("not printed or not a count", absent),
    ]);
    let reason = format!(
        "cnmon's Ecc-Error column for {} card(s): {read}",
        table.cards.len()
    );
    if !counted.is_empty() {
        Check::warn(
            NAME,
            format!(
                "{reason}; ECC errors on {}, of a kind the column does not say, so they only warn",
                counted.join(", ")
            ),
            "check those cards with cnmon info (DDR ECC Err Count): an uncorrected count there takes a card out of service",
        )
    } else if absent > 0 {
        Check::warn(
            NAME,
            reason,
            "cnmon prints no Ecc-Error count for some cards: their ECC errors are not seen in the table",
        )
    } else {
        Check::ok(NAME, reason)
    }
}

/// `health-ecc-counters`: `cnmon info`'s ECC counters, page retirement and row remapping.
fn ecc_counters(cards: &[(CardName, Option<&CnmonInfo>)], sources: &Sources) -> Check {
    const NAME: &str = "health-ecc-counters";
    let (mut counters, mut retirement, mut rows) = (0, 0, 0);
    let mut out = Vec::new();
    for (who, info) in cards {
        let Some(info) = info else { continue };
        let ecc = health::ecc(info);
        let remap = health::remapped_rows(info);
        counters += usize::from(ecc.is_some());
        rows += usize::from(remap.is_some());
        let retired = &info.retirement;
        retirement += usize::from(retired.pending.is_some() || retired.failed.is_some());
        let mut why = Vec::new();
        if let Some(n) = ecc.and_then(|e| e.volatile_uncorrected).filter(|n| *n > 0) {
            why.push(format!("{n} uncorrected ECC error(s)"));
        }
        if remap.and_then(|r| r.pending) == Some(true) {
            why.push("a row remap pending".to_string());
        }
        if retired.pending == Some(true) {
            why.push("a page retirement pending".to_string());
        }
        if retired.failed == Some(true) {
            why.push("a page retirement failed".to_string());
        }
        if !why.is_empty() {
            out.push(format!("{who}: {}", why.join(", ")));
        }
    }
    let total = cards.len();
    let reason = format!(
        "cnmon info ECC counters read for {counters} of {total} card(s), page retirement for {retirement}, row remapping for {rows}"
    );
    if !out.is_empty() {
        return Check::warn(
            NAME,
            format!("{reason}; out of service: {}", out.join("; ")),
            "drain the node, reset those cards (reload the Cambricon driver or reboot) and replace one whose errors recur",
        );
    }
    let ecc_off = sources.table.as_ref().is_some_and(|t| {
        !t.cards.is_empty()
            && t.cards.iter().all(|c| {
                c.ecc_error
                    .as_deref()
                    .is_some_and(|cell| accel_backend::text::present(cell).is_none())
            })
    });
    if counters < total && !ecc_off {
        Check::warn(
            NAME,
            format!("{reason}: uncorrected ECC errors are not seen on the others"),
            "check `cnmon info` on the host: this cnmon prints no DDR ECC counters for those cards",
        )
    } else if counters < total {
        Check::ok(
            NAME,
            format!(
                "{reason}; none needed: the table's Ecc-Error is N/A on every card (ECC not reported)"
            ),
        )
    } else {
        Check::ok(NAME, format!("{reason}: none uncorrected, nothing pending"))
    }
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
