//! The detector over the recorded Cambricon hosts (`testdata/hosts/cambricon-*`): the facts
//! joined by PCI address (cnmon 5.x) or in bus order (4.x, with a note), cnmon missing or
//! hanging, a card without its node, no driver, another vendor's host.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_cambricon::detector::{self, DetectOptions};
use accel_core::ManufacturerInventory;
use accel_host::{FsHost, RecordedCommands};

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
fn without_cnmon_the_kernel_lists_the_cards_but_none_can_be_granted() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(
        &accel_testkit::recorded_host("cambricon-8x-mlu370-cnmon-v5"),
        dir.path(),
    )
    .unwrap();
    std::fs::remove_dir_all(dir.path().join("commands")).unwrap();
    let section = detect_in(dir.path(), &DetectOptions::default());
    assert_eq!(section.accelerators.len(), 8);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.uuid.is_none() && a.minor_number.is_none())
    );
    assert_eq!(section.notes[0], detector::NO_CNMON);
    assert_eq!(
        section.driver_version.as_deref(),
        Some("5.10"),
        "the module still says"
    );
}

#[test]
fn a_hanging_cnmon_is_cut_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(
        &accel_testkit::recorded_host("cambricon-8x-mlu370-cnmon-v5"),
        dir.path(),
    )
    .unwrap();
    std::fs::write(dir.path().join("commands/cnmon/delay-ms"), "600000\n").unwrap();
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_secs(2),
        },
        ..DetectOptions::default()
    };
    let started = Instant::now();
    let section = detect_in(dir.path(), &options);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(section.accelerators.len(), 8);
    assert!(
        section.notes[0].contains("no answer within"),
        "{:?}",
        section.notes
    );
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
