//! What cnmon's health readings mean for one MLU (spec §6 and addendum C6), pure: a card's
//! `cnmon info` block and its row of the default table in, the accelerator's health facts out.
//! It reads nothing and runs nothing; the detector joins its answer in, doctor words the same
//! readings per source.
//!
//! **Out of service** (each a reason worded here, passed through the health rule as
//! [`accel_core::inventory::Accelerator::reported_faults`]):
//! - `Health State` device state `In Problem` (§6's `Health == 0`);
//! - a driver state cnmon names other than `Running` (C6: the vendor's plugin counts a card
//!   healthy only when the device is Good *and* the driver Running; "prefer the vendor pair");
//! - `Retired Pages` `is Pending` (pages wait for a reset to be retired) or `is Failed`.
//!
//! Counters go to the shared fields the health rule already reads, with its wording:
//! `Uncorrected Err` (else `Double Bit Err`) as the volatile uncorrectable ECC count, `Corrected
//! Err` (else `Single Bit Err`) as the corrected one (never a fault), and `Row-Remapping` as
//! remapped rows (`Pending Rows` above 0 is a remap pending).
//!
//! **Only warns**: the default table's `Ecc-Error` count. cnDev keeps eight ECC counters and the
//! column names none of them, so a count above 0 may be corrected errors; it is a note unless
//! `cnmon info` gives the card's uncorrected count, which then decides. `N/A` there is ECC not
//! reported (off or not supported).
//!
//! **Absent stays absent**: `Health State : N/A`, a state word this build does not know, or a
//! block that prints none of these gives no reading (`None`), never "healthy": the daemon then
//! keeps the last reading (`Inventory::keep_known`).
//!
//! **Recovery and restarts.** Every one of these is the driver's own state or counter, held
//! until the card is reset or the driver reloaded, and cnmon prints it afresh each pass: a
//! reading that clears (cnmon reports `Good` and `Running`, the counters read 0 after a reset)
//! brings the card back, a restarted daemon reads the same state again, and a reboot starts the
//! driver's counters from zero. Nothing is recorded in `faults.json` (that record is for
//! kernel-log lines, which are gone once read).

use std::fmt;

use accel_core::busid::BusId;
use accel_core::inventory::{Ecc, RemappedRows};

use crate::cnmon::{CnmonCard, CnmonInfo, DeviceState, DriverState, HealthState};

/// Which card a reason is about: cnmon's ordinal and the PCI address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardName {
    pub card: Option<u32>,
    pub bus: Option<BusId>,
}

impl fmt::Display for CardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.card {
            Some(card) => write!(f, "card {card}")?,
            None => f.write_str("a card")?,
        }
        match self.bus {
            Some(bus) => write!(f, " ({})", bus.sysfs()),
            None => f.write_str(" (no PCI address)"),
        }
    }
}

/// What cnmon states that takes a card out of service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `Health State` device state `In Problem`.
    InProblem,
    /// A driver state cnmon names, other than `Running`.
    DriverNotRunning(DriverState),
    /// `Retired Pages` `is Pending`.
    RetirementPending,
    /// `Retired Pages` `is Failed`.
    RetirementFailed,
}

impl Fault {
    /// The health reason, naming the card and what an operator does about it.
    pub fn reason(&self, who: CardName) -> String {
        match self {
            Fault::InProblem => format!(
                "cnmon reports Health State \"In Problem\" for {who}: drain the node and check the card with cnmon info"
            ),
            Fault::DriverNotRunning(state) if state.is_transitional() => format!(
                "cnmon reports driver state \"{}\" for {who}, not Running: the driver has not brought the card up; if it stays so, drain the node and reload the Cambricon driver",
                state.word()
            ),
            Fault::DriverNotRunning(state) => format!(
                "cnmon reports driver state \"{}\" for {who}, not Running: drain the node, check the card with cnmon info and reload the Cambricon driver or reboot",
                state.word()
            ),
            Fault::RetirementPending => format!(
                "cnmon reports a page retirement pending for {who}: drain the node and reset the card (reload the Cambricon driver or reboot) so the pages are retired"
            ),
            Fault::RetirementFailed => format!(
                "cnmon reports a page retirement failed for {who}: drain the node and check the card with cnmon info; replace it if it recurs"
            ),
        }
    }
}

/// The faults one `cnmon info` block states, and whether it stated anything this module reads
/// (a device or driver state it knows, a retirement flag): `None` when it stated nothing.
pub fn faults(info: &CnmonInfo) -> Option<Vec<Fault>> {
    let mut read = false;
    let mut out = Vec::new();
    if let Some(health) = &info.health {
        match health.device() {
            Some(DeviceState::Good) => read = true,
            Some(DeviceState::InProblem) => {
                read = true;
                out.push(Fault::InProblem);
            }
            Some(DeviceState::Other(_)) | None => {}
        }
        match health.driver() {
            Some(DriverState::Running) => read = true,
            Some(DriverState::Other(_)) | None => {}
            Some(state) => {
                read = true;
                out.push(Fault::DriverNotRunning(state.clone()));
            }
        }
    }
    let retired = &info.retirement;
    read |= retired.pending.is_some() || retired.failed.is_some();
    if retired.pending == Some(true) {
        out.push(Fault::RetirementPending);
    }
    if retired.failed == Some(true) {
        out.push(Fault::RetirementFailed);
    }
    read.then_some(out)
}

/// Whether the block's `Health State` was read: a device or driver state this module knows.
pub fn state_read(health: Option<&HealthState>) -> bool {
    health.is_some_and(|h| {
        matches!(h.device(), Some(DeviceState::Good | DeviceState::InProblem))
            || h.driver()
                .is_some_and(|d| !matches!(d, DriverState::Other(_)))
    })
}

/// The ECC counters a block gives, as the health rule reads them; `None` when it prints none.
pub fn ecc(info: &CnmonInfo) -> Option<Ecc> {
    let e = &info.ecc;
    let uncorrected = e.uncorrected.or(e.double_bit);
    let corrected = e.corrected.or(e.single_bit);
    (uncorrected.is_some() || corrected.is_some()).then(|| Ecc {
        volatile_uncorrected: uncorrected,
        volatile_corrected: corrected,
        ..Ecc::default()
    })
}

/// The row remapping a block gives; `None` when it prints none.
pub fn remapped_rows(info: &CnmonInfo) -> Option<RemappedRows> {
    let r = &info.retirement;
    let any =
        r.correctable_rows.is_some() || r.uncorrectable_rows.is_some() || r.pending_rows.is_some();
    any.then(|| RemappedRows {
        correctable: r.correctable_rows,
        uncorrectable: r.uncorrectable_rows,
        pending: r.pending_rows.map(|n| n > 0),
        failure: None,
    })
}

/// What only warns, worded once for detector and doctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The table's `Ecc-Error` counts errors and `cnmon info` gives no uncorrected count.
    EccColumn {
        index: u32,
        who: CardName,
        count: u64,
    },
    /// A state word under `Health State` that this build does not know.
    UnknownState {
        index: u32,
        who: CardName,
        word: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::EccColumn { index, who, count } => write!(
                f,
                "accelerator {index}: cnmon's Ecc-Error column counts {count} ECC error(s) on {who} without saying whether they were corrected, and cnmon info gives no uncorrected count: the card stays in service; check it with cnmon info"
            ),
            Warning::UnknownState { index, who, word } => write!(
                f,
                "accelerator {index}: cnmon info's Health State for {who} reads \"{word}\", no state this build knows (Good, In Problem, a driver state), so its health is not read"
            ),
        }
    }
}

/// The health facts of one card, from its `cnmon info` block and its table row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    pub ecc: Option<Ecc>,
    pub remapped_rows: Option<RemappedRows>,
    /// The out-of-service reasons, worded; `None` when nothing was stated.
    pub reported_faults: Option<Vec<String>>,
    pub warnings: Vec<Warning>,
}

/// Reads one card: `index` is its place in the inventory, `who` names it in the reasons.
pub fn read(
    index: u32,
    who: CardName,
    info: Option<&CnmonInfo>,
    row: Option<&CnmonCard>,
) -> Reading {
    let mut reading = Reading {
        ecc: info.and_then(ecc),
        remapped_rows: info.and_then(remapped_rows),
        reported_faults: info
            .and_then(faults)
            .map(|faults| faults.iter().map(|f| f.reason(who)).collect()),
        warnings: Vec::new(),
    };
    let unknown =
        info.and_then(|i| i.health.as_ref())
            .and_then(|h| match (h.device(), h.driver()) {
                (Some(DeviceState::Other(word)), _) => Some(word.clone()),
                (_, Some(DriverState::Other(word))) => Some(word.clone()),
                _ => None,
            });
    if let Some(word) = unknown {
        reading
            .warnings
            .push(Warning::UnknownState { index, who, word });
    }
    let uncorrected_known = reading
        .ecc
        .as_ref()
        .is_some_and(|e| e.volatile_uncorrected.is_some());
    if let Some(count) = row.and_then(CnmonCard::ecc_errors).filter(|n| *n > 0)
        && !uncorrected_known
    {
        reading
            .warnings
            .push(Warning::EccColumn { index, who, count });
    }
    reading
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnmon::{InfoEcc, Retirement};

    fn who() -> CardName {
        CardName {
            card: Some(3),
            bus: "0000:73:00.0".parse().ok(),
        }
    }

    fn block(device: Option<DeviceState>, driver: Option<DriverState>) -> CnmonInfo {
        CnmonInfo {
            health: Some(HealthState::Read { device, driver }),
            ..CnmonInfo::default()
        }
    }

    #[test]
    fn the_vendor_pair_decides() {
        let good = block(Some(DeviceState::Good), Some(DriverState::Running));
        assert_eq!(faults(&good), Some(vec![]));
        let sick = block(Some(DeviceState::InProblem), Some(DriverState::Running));
        assert_eq!(
            read(3, who(), Some(&sick), None).reported_faults,
            Some(vec![
                "cnmon reports Health State \"In Problem\" for card 3 (0000:73:00.0): drain the node and check the card with cnmon info".to_string()
            ])
        );
        let resetting = block(Some(DeviceState::Good), Some(DriverState::ResetError));
        assert_eq!(
            faults(&resetting),
            Some(vec![Fault::DriverNotRunning(DriverState::ResetError)])
        );
        assert!(
            Fault::DriverNotRunning(DriverState::Booting)
                .reason(who())
                .contains("has not brought the card up")
        );
    }

    #[test]
    fn what_cannot_be_read_is_no_reading() {
        assert_eq!(faults(&CnmonInfo::default()), None);
        let na = CnmonInfo {
            health: Some(HealthState::NotAvailable),
            ..CnmonInfo::default()
        };
        assert_eq!(faults(&na), None);
        assert!(!state_read(na.health.as_ref()));
        let odd = block(Some(DeviceState::Other("Degraded".into())), None);
        let reading = read(3, who(), Some(&odd), None);
        assert_eq!(reading.reported_faults, None);
        assert_eq!(
            reading.warnings,
            [Warning::UnknownState {
                index: 3,
                who: who(),
                word: "Degraded".into()
            }]
        );
    }

    #[test]
    fn counters_go_to_the_shared_rule_and_the_column_only_warns() {
        let info = CnmonInfo {
            ecc: InfoEcc {
                double_bit: Some(2),
                single_bit: Some(7),
                ..InfoEcc::default()
            },
            retirement: Retirement {
                pending: Some(true),
                pending_rows: Some(1),
                ..Retirement::default()
            },
            ..CnmonInfo::default()
        };
        let row = CnmonCard {
            ecc_error: Some("9".into()),
            ..CnmonCard::default()
        };
        let reading = read(3, who(), Some(&info), Some(&row));
        let ecc = reading.ecc.unwrap();
        assert_eq!(
            (ecc.volatile_uncorrected, ecc.volatile_corrected),
            (Some(2), Some(7))
        );
        assert_eq!(reading.remapped_rows.unwrap().pending, Some(true));
        assert_eq!(reading.reported_faults.unwrap().len(), 1);
        assert!(reading.warnings.is_empty(), "the uncorrected count decides");
        let alone = read(3, who(), None, Some(&row));
        assert_eq!(alone.ecc, None);
        assert_eq!(
            alone.warnings,
            [Warning::EccColumn {
                index: 3,
                who: who(),
                count: 9
            }]
        );
        let na = CnmonCard {
            ecc_error: Some("N/A".into()),
            ..CnmonCard::default()
        };
        assert!(read(3, who(), None, Some(&na)).warnings.is_empty());
    }
}
