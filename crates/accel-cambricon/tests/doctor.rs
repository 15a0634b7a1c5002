//! Cambricon's doctor reports, per health source, for how many cards it read what and which
//! cards it takes out of service (issue 43): `health-state` (`cnmon info`'s Health State),
//! `health-ecc-column` (the table's `Ecc-Error`), `health-ecc-counters` (`cnmon info`'s ECC
//! counters, page retirement and row remapping). A card out of service warns; nothing fails.

use std::path::Path;

use accel_backend::doctor::{Check, Status};
use accel_cambricon::detector::DetectOptions;
use accel_cambricon::doctor;
use accel_host::{FsHost, RecordedCommands};

fn checks(dir: &Path) -> Vec<Check> {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    doctor::run(&files, &commands, &DetectOptions::default())
}

fn row<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} row: {checks:?}"))
}

#[test]
fn each_health_source_says_what_it_read_and_names_the_card_out_of_service() {
    let sick = checks(&accel_testkit::recorded_host(
        "cambricon-8x-mlu370-card3-in-problem",
    ));
    let state = row(&sick, "health-state");
    assert_eq!(state.status, Status::Warn);
    assert_eq!(
        state.reason,
        "cnmon info Health State read for 8 of 8 card(s); out of service: card 3 (0000:73:00.0) In Problem"
    );
    assert_eq!(row(&sick, "health-ecc-column").status, Status::Ok);
    assert!(sick.iter().all(|c| c.status != Status::Fail), "{sick:?}");

    // The healthy copy prints no Health State: said, as a warning, never "healthy".
    let unread = checks(&accel_testkit::recorded_host(
        "cambricon-8x-mlu370-cnmon-v5",
    ));
    let state = row(&unread, "health-state");
    assert_eq!(
        (state.status, state.reason.as_str()),
        (
            Status::Warn,
            "cnmon info Health State read for 0 of 8 card(s) (not printed for 8)"
        )
    );
}

#[test]
fn ecc_errors_in_the_column_warn_and_uncorrected_counters_name_the_card() {
    let dir = accel_testkit::copy_recorded("cambricon-8x-mlu370-card3-in-problem");
    let table = dir.path().join("commands/cnmon/stdout");
    let text = std::fs::read_to_string(&table).unwrap().replace(
        "0000:53:00.0 | 0%                N/A |",
        "0000:53:00.0 | 0%                  4 |",
    );
    std::fs::write(&table, text).unwrap();
    let info = dir.path().join("commands/cnmon-info/stdout");
    let text = std::fs::read_to_string(&info).unwrap().replace(
        "  PCIe Bus Id                    : 0000:B3:00.0\n",
        "  PCIe Bus Id                    : 0000:B3:00.0\n  DDR ECC Err Count\n    Uncorrected Err              : 2\n",
    );
    std::fs::write(&info, text).unwrap();
    let found = checks(dir.path());
    let column = row(&found, "health-ecc-column");
    assert_eq!(column.status, Status::Warn);
    assert!(
        column
            .reason
            .contains("ECC errors on card 1 (0000:53:00.0) 4"),
        "{}",
        column.reason
    );
    let counters = row(&found, "health-ecc-counters");
    assert_eq!(
        (counters.status, counters.reason.as_str()),
        (
            Status::Warn,
            "cnmon info ECC counters read for 1 of 8 card(s), page retirement for 0, row remapping for 0; out of service: card 5 (0000:b3:00.0): 2 uncorrected ECC error(s)"
        )
    );
}
