//! The detector over the recorded Cambricon hosts (`testdata/hosts/cambricon-*`): the facts
//! joined by PCI address (cnmon 5.x) or in bus order (4.x, with a note), a card without its
//! node, no driver, another vendor's host, and cnmon failing every way a live node's does
//! (missing, hanging, exiting non-zero, unreadable, listing too few cards): a pass not
//! measured, never cards without identity.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_cambricon::detector::{self, DetectOptions};
use accel_core::inventory::DetectError;
use accel_core::{Manufacturer, ManufacturerInventory};
use accel_host::{FsHost, RecordedCommands};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};

/// The multi-card host the failures are made on.
const EIGHT_CARDS: &str = "cambricon-8x-mlu370-cnmon-v5";

/// Deadlines short enough for a hanging cnmon to cost the test well under a second.
const SHORT: Deadlines = Deadlines {
    per_query: Duration::from_millis(300),
    snapshot: Duration::from_millis(600),
};

fn detect_in(dir: &Path, options: &DetectOptions) -> ManufacturerInventory {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options).unwrap()
}

fn detect(name: &str) -> ManufacturerInventory {
    detect_in(
        &accel_testkit::recorded_host(name),
        &DetectOptions::default(),
    )
}

#[test]
fn eight_mlu370_under_cnmon_v5_are_joined_by_pci_address() {
    let section = detect("cambricon-8x-mlu370-cnmon-v5");
    assert_eq!(section.accelerators.len(), 8);
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    assert_eq!(section.driver_version.as_deref(), Some("5.10"));
    assert_eq!(section.runtime_version.as_deref(), Some("1.15"));
    assert_eq!(section.management_version.as_deref(), Some("5.10.10"));
    for (i, a) in section.accelerators.iter().enumerate() {
        assert_eq!(a.index, i as u32);
        assert_eq!(
            a.minor_number,
            Some(i as u32),
            "the cnmon ordinal names the nodes"
        );
        assert_eq!(a.product.as_deref(), Some("MLU370-X4"));
        assert_eq!(a.memory_mib, Some(23308), "MiB as reported, no conversion");
        assert!(a.uuid.as_deref().unwrap().starts_with("MLU-3f9c"));
    }
    assert_eq!(
        section.accelerators[7].bus_id.unwrap().sysfs(),
        "0000:d3:00.0"
    );
    assert_eq!(section.accelerators[7].numa_node, Some(1));
}

#[test]
fn cnmon_v4_has_no_bus_id_so_cards_are_matched_in_order_with_a_note() {
    let section = detect("cambricon-3x-mlu370-cnmon-v4");
    assert_eq!(section.accelerators.len(), 3);
    assert_eq!(section.driver_version.as_deref(), Some("4.20"));
    assert_eq!(section.runtime_version, None, "no Neuware version file");
    assert_eq!(
        section.notes,
        ["cnmon: this release prints no PCI address, so its cards are matched to the bus in order"]
    );
    let a = &section.accelerators[2];
    assert_eq!(a.bus_id.unwrap().sysfs(), "0000:5e:00.0");
    assert_eq!(a.minor_number, Some(2));
    assert_eq!(
        a.uuid.as_deref(),
        Some("MLU-3f9c02e1-7a52-4c0b-9d1e-5b3a0c7e0002")
    );
}

#[test]
fn no_driver_is_an_empty_answer_with_the_reason() {
    let section = detect("cambricon-no-driver");
    assert!(section.accelerators.is_empty());
    assert_eq!(section.notes.len(), 1);
    assert!(
        section.notes[0]
            .starts_with("cambricon: 1 MLU function(s) on the bus but no Cambricon driver")
    );
}

#[test]
fn another_vendors_host_is_not_cambricons() {
    let section = detect("amd-8x-mi300x");
    assert!(section.accelerators.is_empty() && section.notes.is_empty());
}

#[test]
fn a_card_whose_node_is_missing_is_named() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(
        &accel_testkit::recorded_host("cambricon-8x-mlu370-cnmon-v5"),
        dir.path(),
    )
    .unwrap();
    std::fs::remove_file(dir.path().join("root/dev/cambricon_dev3")).unwrap();
    let section = detect_in(dir.path(), &DetectOptions::default());
    assert_eq!(
        section.notes,
        ["accelerator 3 (0000:73:00.0): the host has no device node /dev/cambricon_dev3"]
    );
}

/// The recorded host where card 3 is "In Problem" (issue 43).
const CARD3_IN_PROBLEM: &str = "cambricon-8x-mlu370-card3-in-problem";
const CARD3_REASON: &str = "cnmon reports Health State \"In Problem\" for card 3 (0000:73:00.0): drain the node and check the card with cnmon info";

/// Each accelerator's health as (healthy, reasons).
fn health(section: &ManufacturerInventory) -> Vec<(bool, Vec<String>)> {
    section
        .accelerators
        .iter()
        .map(|a| (a.healthy, a.health_reasons.clone()))
        .collect()
}

/// `cnmon info`'s text of a copied host, edited.
fn edit_info(dir: &Path, edit: impl FnOnce(String) -> String) {
    let path = dir.join("commands/cnmon-info/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
}

/// Adds `lines` to card `card`'s `cnmon info` block (after its bus id).
fn add_to_card(text: &str, card: u32, lines: &str) -> String {
    let start = text.find(&format!("Card {card}\n")).unwrap();
    let at = start + text[start..].find("PCIe Bus Id").unwrap();
    let at = at + text[at..].find('\n').unwrap() + 1;
    format!("{}{lines}{}", &text[..at], &text[at..])
}

#[test]
fn a_card_in_problem_leaves_service_and_the_others_stay() {
    let section = detect(CARD3_IN_PROBLEM);
    assert_eq!(section.accelerators.len(), 8);
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    let mut want = vec![(true, Vec::new()); 8];
    want[3] = (false, vec![CARD3_REASON.to_string()]);
    assert_eq!(health(&section), want);
    let card3 = &section.accelerators[3];
    assert_eq!(
        card3.uuid.as_deref(),
        Some("MLU-3f9c03e1-7a52-4c0b-9d1e-5b3a0c7e0003")
    );
    assert_eq!(card3.reported_faults, Some(vec![CARD3_REASON.to_string()]));
    // Read and healthy is a reading; not printed at all (the healthy copy) is none.
    assert_eq!(section.accelerators[0].reported_faults, Some(Vec::new()));
    let unread = detect(EIGHT_CARDS);
    assert!(
        unread
            .accelerators
            .iter()
            .all(|a| a.healthy && a.reported_faults.is_none() && a.ecc.is_none())
    );
}

#[test]
fn a_health_state_that_clears_brings_the_card_back() {
    let dir = accel_testkit::copy_recorded(CARD3_IN_PROBLEM);
    let options = DetectOptions::default();
    assert!(!detect_in(dir.path(), &options).accelerators[3].healthy);
    edit_info(dir.path(), |t| t.replace("In Problem", "Good"));
    let section = detect_in(dir.path(), &options);
    assert_eq!(health(&section), vec![(true, Vec::new()); 8]);
    // A driver state other than Running takes the card out too (the vendor's pair), and
    // cnmon's `N/A` reads nothing: the card is not "healthy by reading".
    edit_info(dir.path(), |t| {
        let card2 = t.find("Card 2\n").unwrap();
        let running = card2 + t[card2..].find("Running").unwrap();
        let t = format!(
            "{}Reset Error{}",
            &t[..running],
            &t[running + "Running".len()..]
        );
        // Card 0's item, as cnmon prints it when it cannot read the health.
        t.replacen(
            "  Health State\n    Device                       : Good\n    Driver                       : Running\n",
            "  Health State : N/A\n",
            1,
        )
    });
    let section = detect_in(dir.path(), &options);
    assert_eq!(
        section.accelerators[2].health_reasons,
        [
            "cnmon reports driver state \"Reset Error\" for card 2 (0000:6f:00.0), not Running: drain the node, check the card with cnmon info and reload the Cambricon driver or reboot"
        ]
    );
    let card0 = &section.accelerators[0];
    assert_eq!((card0.healthy, &card0.reported_faults), (true, &None));
}

#[test]
fn uncorrected_ecc_and_retirement_in_cnmon_info_take_a_card_out_and_the_column_only_warns() {
    let dir = accel_testkit::copy_recorded(CARD3_IN_PROBLEM);
    edit_info(dir.path(), |t| {
        let t = add_to_card(
            &t,
            5,
            "  DDR ECC Err Count\n    Corrected Err                : 12\n    Uncorrected Err              : 2\n",
        );
        let t = add_to_card(
            &t,
            6,
            "  Retired Pages\n    is Pending                   : Yes\n    is Failed                    : No\n",
        );
        add_to_card(
            &t,
            7,
            "  DDR ECC Err Count\n    Corrected Err                : 40\n    Uncorrected Err              : 0\n",
        )
    });
    // The table's Ecc-Error counts errors on card 1 (none in cnmon info) and on card 7 (whose
    // cnmon info says they were all corrected).
    let table = dir.path().join("commands/cnmon/stdout");
    let text = std::fs::read_to_string(&table).unwrap();
    let text = text
        .replace(
            "0000:53:00.0 | 0%                N/A |",
            "0000:53:00.0 | 0%                  4 |",
        )
        .replace(
            "0000:D3:00.0 | 0%                N/A |",
            "0000:D3:00.0 | 0%                 40 |",
        );
    std::fs::write(&table, text).unwrap();
    let section = detect_in(dir.path(), &DetectOptions::default());
    let reasons: Vec<Vec<String>> = section
        .accelerators
        .iter()
        .map(|a| a.health_reasons.clone())
        .collect();
    assert_eq!(reasons[5], ["2 uncorrectable volatile ECC errors"]);
    assert_eq!(
        reasons[6],
        [
            "cnmon reports a page retirement pending for card 6 (0000:cf:00.0): drain the node and reset the card (reload the Cambricon driver or reboot) so the pages are retired"
        ]
    );
    assert!(section.accelerators[7].healthy, "corrected errors only");
    assert!(section.accelerators[1].healthy, "the column only warns");
    assert_eq!(
        section.notes,
        [
            "accelerator 1: cnmon's Ecc-Error column counts 4 ECC error(s) on card 1 (0000:53:00.0) without saying whether they were corrected, and cnmon info gives no uncorrected count: the card stays in service; check it with cnmon info"
        ]
    );
    let ecc = section.accelerators[7].ecc.as_ref().unwrap();
    assert_eq!(
        (ecc.volatile_uncorrected, ecc.volatile_corrected),
        (Some(0), Some(40))
    );
}

/// The reason of a pass over `dir` that must not be measured, within the short deadlines.
fn not_measured(dir: &Path) -> String {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    let options = DetectOptions {
        deadlines: SHORT,
        ..DetectOptions::default()
    };
    let started = Instant::now();
    let answer = detector::detect(&files, &commands, &options);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a hang was not cut"
    );
    match answer {
        Err(DetectError::NotMeasured {
            manufacturer,
            reason,
        }) => {
            assert_eq!(manufacturer, Manufacturer::Cambricon);
            reason
        }
        other => panic!("expected a pass not measured, got {other:?}"),
    }
}

/// What a reason says for each failure, after the argv it names.
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => ": cnmon: not found",
        ToolFailure::Hangs => ": no answer within 300ms, killed",
        ToolFailure::ExitsNonZero => {
            ": exited with status 1: Error: failed to initialize the management library"
        }
        ToolFailure::Unreadable => "(first line: \"*** stack smashing detected ***: terminated\")",
    }
}

#[test]
fn a_failing_cnmon_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool(EIGHT_CARDS, "cnmon", failure);
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("cnmon"), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn a_failing_cnmon_info_alone_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = accel_testkit::copy_recorded(EIGHT_CARDS);
        fail_commands(dir.path(), "cnmon", failure, |argv| {
            argv.get(1).map(String::as_str) == Some("info")
        });
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("cnmon info: "), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn cnmon_info_listing_fewer_cards_than_the_bus_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded(EIGHT_CARDS);
    let info = dir.path().join("commands/cnmon-info/stdout");
    let text = std::fs::read_to_string(&info).unwrap();
    let seven = &text[..text.find("Card 7").unwrap()];
    std::fs::write(&info, seven).unwrap();
    assert_eq!(
        not_measured(dir.path()),
        "cnmon info: lists 7 card(s) where the kernel shows 8"
    );
}
