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
