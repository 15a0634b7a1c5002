//! The detector over the recorded MetaX hosts (`testdata/hosts/metax-*`): the facts joined by
//! PCI address, DRM minors from either spelling of the module's PCI driver, a virtual function
//! skipped, mx-smi missing or hanging, no driver, another vendor's host.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_core::ManufacturerInventory;
use accel_host::{FsHost, RecordedCommands};
use accel_metax::detector::{self, DetectOptions};

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
fn eight_c500_with_minors_from_the_upper_case_listing() {
    let section = detect("metax-8x-c500");
    assert_eq!(section.accelerators.len(), 8);
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    assert_eq!(section.driver_version.as_deref(), Some("2.12.13"));
    assert_eq!(section.runtime_version.as_deref(), Some("2.29"));
    for (i, a) in section.accelerators.iter().enumerate() {
        assert_eq!(a.product.as_deref(), Some("MetaX C500"));
        assert_eq!(a.memory_mib, Some(65536));
        assert_eq!(
            a.architecture.as_deref(),
            Some("MXC"),
            "the family rule without case"
        );
        let drm = a.drm.unwrap();
        assert_eq!(
            (drm.card, drm.render),
            (Some(i as u32 + 1), Some(128 + i as u32))
        );
        assert!(a.uuid.as_deref().unwrap().starts_with("GPU-3fd4ee0"));
    }
}

#[test]
fn eight_mxc550_under_the_lower_case_listing_and_the_virtual_function_skipped() {
    let section = detect("metax-8x-c550");
    assert_eq!(section.accelerators.len(), 8);
    assert_eq!(
        section.notes,
        ["0000:2a:00.1: skipping virtual function device"]
    );
    assert_eq!(section.driver_version.as_deref(), Some("2.5.014"));
    let a = &section.accelerators[0];
    assert_eq!(a.product.as_deref(), Some("MXC550"));
    assert_eq!(a.architecture.as_deref(), Some("MXC"));
    assert_eq!(a.drm.unwrap().render, Some(128));
}

#[test]
fn no_driver_is_an_empty_answer_with_the_reason() {
    let section = detect("metax-no-driver");
    assert!(section.accelerators.is_empty());
    assert_eq!(section.notes.len(), 1);
    assert!(section.notes[0].starts_with("metax: 1 MetaX function(s) on the bus but none bound"));
}

#[test]
fn another_vendors_host_is_not_metaxs() {
    let section = detect("amd-8x-mi300x");
    assert!(section.accelerators.is_empty() && section.notes.is_empty());
}

#[test]
fn without_mx_smi_the_kernel_lists_the_gpus_but_none_can_be_granted() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&accel_testkit::recorded_host("metax-8x-c500"), dir.path()).unwrap();
    std::fs::remove_dir_all(dir.path().join("commands")).unwrap();
    let section = detect_in(dir.path(), &DetectOptions::default());
    assert_eq!(section.accelerators.len(), 8);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.uuid.is_none() && a.drm.is_some())
    );
    assert_eq!(section.notes[0], detector::NO_MX_SMI);
}

#[test]
fn a_hanging_mx_smi_is_cut_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&accel_testkit::recorded_host("metax-8x-c500"), dir.path()).unwrap();
    std::fs::write(dir.path().join("commands/mx-smi/delay-ms"), "600000\n").unwrap();
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
