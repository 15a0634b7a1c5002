//! The detector over the recorded MetaX hosts (`testdata/hosts/metax-*`): the facts joined by
//! PCI address, DRM minors from either spelling of the module's PCI driver, a virtual function
//! skipped, no driver, another vendor's host, and mx-smi failing every way a live node's does
//! (missing, hanging, exiting non-zero, unreadable, listing too few GPUs): a pass not measured,
//! never GPUs without identity.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_core::inventory::DetectError;
use accel_core::{Manufacturer, ManufacturerInventory};
use accel_host::{FsHost, RecordedCommands};
use accel_metax::detector::{self, DetectOptions};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};

/// The multi-card host the failures are made on.
const EIGHT_GPUS: &str = "metax-8x-c500";

/// Deadlines short enough for a hanging mx-smi to cost the test well under a second.
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

/// The notes but the ECC query's: the 2.1.x hosts record no `mx-smi --count-ecc`, which
/// `tests/health.rs` covers.
fn identity_notes(section: &ManufacturerInventory) -> Vec<&str> {
    section
        .notes
        .iter()
        .map(String::as_str)
        .filter(|n| !n.starts_with("mx-smi --count-ecc: "))
        .collect()
}

#[test]
fn eight_c500_with_minors_from_the_upper_case_listing() {
    let section = detect("metax-8x-c500");
    assert_eq!(section.accelerators.len(), 8);
    assert!(identity_notes(&section).is_empty(), "{:?}", section.notes);
    assert_eq!(section.driver_version.as_deref(), Some("2.12.13"));
    assert_eq!(section.runtime_version.as_deref(), Some("2.29"));
    for (i, a) in section.accelerators.iter().enumerate() {
        assert_eq!(
            a.product.as_deref(),
            Some("MXC500"),
            "mx-smi 2.1.12 prints `MetaX C500`; the model is the library's `MXC500`"
        );
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
        identity_notes(&section),
        ["0000:2a:00.1: skipping virtual function device"]
    );
    assert_eq!(section.driver_version.as_deref(), Some("2.5.014"));
    let a = &section.accelerators[0];
    assert_eq!(a.product.as_deref(), Some("MXC550"));
    assert_eq!(a.architecture.as_deref(), Some("MXC"));
    assert_eq!(a.drm.unwrap().render, Some(128));
}

/// spec/metax.md §2.3: the group id is `NormalizeName` of the library's device name
/// (`MXC500` → `metax-mxc500`), and the `.product` label that name. `mx-smi` releases print a
/// model `MetaX C500` or `MXC550`: either way one model is one group, so two nodes of it never
/// split into two pools (InstanceType presets and Kueue flavors key on the group).
#[test]
fn one_model_is_one_group_id_whatever_the_mx_smi_release() {
    let labels = |name: &str| {
        accel_core::labels::labels(&accel_core::Inventory {
            manufacturers: vec![detect(name)],
        })
    };
    let c500 = labels("metax-8x-c500");
    let key = "acceleratable.feature.gpustack.ai/metax-mxc500";
    assert_eq!(c500.get(key).map(String::as_str), Some("true"), "{c500:?}");
    assert_eq!(c500[&format!("{key}.product")], "MXC500");
    assert_eq!(c500[&format!("{key}.count")], "8");
    let c550 = labels("metax-8x-c550");
    let key = "acceleratable.feature.gpustack.ai/metax-mxc550";
    assert_eq!(c550.get(key).map(String::as_str), Some("true"), "{c550:?}");
    assert_eq!(c550[&format!("{key}.product")], "MXC550");
    // A C550 node whose tool prints the `MetaX C550` spelling joins the same group.
    let mut older = detect("metax-8x-c550");
    for a in &mut older.accelerators {
        a.product = Some(accel_metax::mxsmi::model_name("MetaX C550"));
    }
    let older = accel_core::labels::labels(&accel_core::Inventory {
        manufacturers: vec![older],
    });
    assert_eq!(
        older.get(key).map(String::as_str),
        Some("true"),
        "{older:?}"
    );
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
            assert_eq!(manufacturer, Manufacturer::Metax);
            reason
        }
        other => panic!("expected a pass not measured, got {other:?}"),
    }
}

/// What a reason says for each failure, after the argv it names.
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => ": mx-smi: not found",
        ToolFailure::Hangs => ": no answer within 300ms, killed",
        ToolFailure::ExitsNonZero => {
            ": exited with status 1: Error: failed to initialize the management library"
        }
        ToolFailure::Unreadable => "(first line: \"*** stack smashing detected ***: terminated\")",
    }
}

#[test]
fn a_failing_mx_smi_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool(EIGHT_GPUS, "mx-smi", failure);
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("mx-smi"), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn a_failing_mx_smi_list_alone_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = accel_testkit::copy_recorded(EIGHT_GPUS);
        fail_commands(dir.path(), "mx-smi", failure, |argv| {
            argv.get(1).map(String::as_str) == Some("-L")
        });
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("mx-smi -L: "), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn mx_smi_listing_fewer_uuids_than_the_bus_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded(EIGHT_GPUS);
    let list = dir.path().join("commands/mx-smi-list/stdout");
    let text = std::fs::read_to_string(&list).unwrap();
    let seven: String = text.lines().take(7).map(|l| format!("{l}\n")).collect();
    std::fs::write(&list, seven).unwrap();
    assert_eq!(
        not_measured(dir.path()),
        "mx-smi -L: lists 7 GPU(s) where the kernel shows 8"
    );
}
