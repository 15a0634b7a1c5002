//! The detector over the recorded Moore Threads hosts (`testdata/hosts/mthreads-*`): 8× S4000,
//! one S5000, an S30 desktop, a hanging mthreads-gmi, a virtual device, a driver that does not
//! answer, another vendor's host, and mthreads-gmi failing every way a live node's does
//! (missing, hanging, exiting non-zero, unreadable, listing too few GPUs), each form alone too:
//! a pass not measured, never GPUs without identity.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_core::Manufacturer;
use accel_core::inventory::{DetectError, Grantable};
use accel_host::{FsHost, RecordedCommands};
use accel_mthreads::detector::{self, DetectOptions};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};

/// The multi-card host the failures are made on.
const EIGHT_GPUS: &str = "mthreads-8x-s4000";

/// Deadlines short enough for a hanging mthreads-gmi to cost the test well under a second.
const SHORT: Deadlines = Deadlines {
    per_query: Duration::from_millis(300),
    snapshot: Duration::from_millis(600),
};

fn detect_in(dir: &Path) -> accel_core::Detection {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, &DetectOptions::default())
}

fn host(name: &str) -> std::path::PathBuf {
    accel_testkit::recorded_host(name)
}

#[test]
fn eight_s4000_are_named_by_uuid_with_cores_and_no_runtime() {
    let section = detect_in(&host("mthreads-8x-s4000")).unwrap();
    assert_eq!(section.accelerators.len(), 8);
    assert_eq!(section.driver_version.as_deref(), Some("2.7.0"));
    assert_eq!(section.runtime_version, None);
    assert_eq!(section.management_version.as_deref(), Some("1.14.0"));
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    let a = &section.accelerators[4];
    assert_eq!(
        a.uuid.as_deref(),
        Some("1ed50004-0000-4000-8000-00000008a000")
    );
    assert_eq!(a.product.as_deref(), Some("MTT S4000"));
    assert_eq!(a.memory_mib, Some(49_152));
    assert_eq!((a.cores, a.numa_node), (Some(8192), Some(1)));
    assert_eq!(a.grantable, Grantable::Whole);
}

#[test]
fn an_s5000_keeps_its_driver_suffix_and_an_s30_its_trimmed_row() {
    let s5000 = detect_in(&host("mthreads-s5000")).unwrap();
    assert_eq!(s5000.driver_version.as_deref(), Some("3.3.5-server"));
    assert_eq!(s5000.accelerators[0].memory_mib, Some(81_920));
    assert_eq!(s5000.accelerators[0].cores, None);
    let s30 = detect_in(&host("mthreads-s30-desktop")).unwrap();
    assert_eq!(s30.accelerators.len(), 1);
    assert_eq!(s30.accelerators[0].product.as_deref(), Some("MTT S30"));
    assert_eq!(s30.accelerators[0].memory_mib, Some(4096));
}

/// The recorded host where GPU 2 has uncorrected DRAM ECC errors (issue 43).
const GPU2_ECC: &str = "mthreads-3x-s5000-gpu2-ecc";

fn health(section: &accel_core::ManufacturerInventory) -> Vec<(bool, Vec<String>)> {
    section
        .accelerators
        .iter()
        .map(|a| (a.healthy, a.health_reasons.clone()))
        .collect()
}

#[test]
fn uncorrected_volatile_dram_ecc_takes_the_gpu_out_and_the_others_stay() {
    let section = detect_in(&host(GPU2_ECC)).unwrap();
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    assert_eq!(
        health(&section),
        [
            (true, vec![]),
            (true, vec![]),
            (
                false,
                vec!["2 uncorrectable volatile ECC errors".to_string()]
            ),
        ]
    );
    let sick = &section.accelerators[2];
    assert_eq!(
        sick.uuid.as_deref(),
        Some("1ed50002-0000-4000-8000-00000004c000")
    );
    let ecc = sick.ecc.as_ref().unwrap();
    assert_eq!(
        (ecc.volatile_uncorrected, ecc.aggregate_uncorrected),
        (Some(2), Some(2))
    );
    assert_eq!(
        section.accelerators[0]
            .ecc
            .as_ref()
            .unwrap()
            .volatile_uncorrected,
        Some(0)
    );
    // A report without the section (every other recorded host) reads no ECC: no fault, no 0.
    let unread = detect_in(&host("mthreads-8x-s4000")).unwrap();
    assert!(
        unread
            .accelerators
            .iter()
            .all(|a| a.healthy && a.ecc.is_none())
    );
}

#[test]
fn a_counter_that_reads_0_again_brings_the_gpu_back_and_only_the_volatile_one_counts() {
    let dir = accel_testkit::copy_recorded(GPU2_ECC);
    let report = dir.path().join("commands/q/stdout");
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!detect_in(dir.path()).unwrap().accelerators[2].healthy);
    // After a reset the volatile counter starts again; the aggregate one keeps its count.
    let volatile = text.find("            DRAM Uncorrectable : 2").unwrap();
    let reset = format!(
        "{}            DRAM Uncorrectable : 0{}",
        &text[..volatile],
        &text[volatile + "            DRAM Uncorrectable : 2".len()..]
    );
    std::fs::write(&report, &reset).unwrap();
    let section = detect_in(dir.path()).unwrap();
    assert_eq!(health(&section), vec![(true, vec![]); 3]);
    assert_eq!(
        section.accelerators[2]
            .ecc
            .as_ref()
            .unwrap()
            .aggregate_uncorrected,
        Some(2)
    );
    // Read as N/A, the counter is no reading: not a fault, and not a 0.
    std::fs::write(
        &report,
        text.replace("Uncorrectable : 2", "Uncorrectable : N/A"),
    )
    .unwrap();
    let section = detect_in(dir.path()).unwrap();
    assert!(section.accelerators[2].healthy);
    assert_eq!(
        section.accelerators[2]
            .ecc
            .as_ref()
            .unwrap()
            .volatile_uncorrected,
        None
    );
}

#[test]
fn a_virtual_device_is_skipped_with_a_note() {
    let dir = accel_testkit::copy_recorded("mthreads-8x-s4000");
    let table = dir.path().join("commands/mthreads-gmi/stdout");
    let text = std::fs::read_to_string(&table).unwrap();
    // GPU 1's device-type cell, as a guest's instance would print it.
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("1    MTT S4000"))
        .unwrap()
        + 1;
    lines[at] = lines[at].replace("Physical", "Virtual ");
    std::fs::write(&table, lines.join("\n") + "\n").unwrap();
    let section = detect_in(dir.path()).unwrap();
    assert_eq!(section.accelerators.len(), 7);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.bus_id.unwrap().sysfs() != "0000:10:00.0")
    );
    assert_eq!(
        section.notes,
        ["0000:10:00.0: skipping virtual device (device type \"Virtual\")"]
    );
    assert_eq!(section.accelerators[1].index, 1, "the index stays compact");
}

#[test]
fn a_failed_report_on_a_desktop_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded("mthreads-s30-desktop");
    std::fs::write(dir.path().join("commands/q/status"), "1\n").unwrap();
    match detect_in(dir.path()) {
        Err(DetectError::NotMeasured { reason, .. }) => assert!(
            reason.starts_with("mthreads-gmi: mthreads-gmi -q: exited with status 1"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_hanging_tool_is_cut_and_the_pass_is_not_measured() {
    let dir = accel_testkit::copy_recorded("mthreads-8x-s4000");
    for name in ["mthreads-gmi", "q"] {
        std::fs::write(
            dir.path().join("commands").join(name).join("delay-ms"),
            "5000",
        )
        .unwrap();
    }
    let files = FsHost::new(dir.path().join("root"));
    let commands = RecordedCommands::load(dir.path()).unwrap();
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(200),
            snapshot: Duration::from_secs(2),
        },
        ..DetectOptions::default()
    };
    match detector::detect(&files, &commands, &options) {
        Err(DetectError::NotMeasured { reason, .. }) => {
            assert!(reason.contains("no answer within"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_driver_that_does_not_answer_is_not_measured() {
    match detect_in(&host("mthreads-driver-not-answering")) {
        Err(e @ DetectError::NotMeasured { .. }) => {
            assert!(
                e.to_string().contains("mtgpu_query_dev_info failed (-22)"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_vendors_host_has_no_moore_threads() {
    for name in ["hgx-h100-8gpu", "amd-8x-mi300x", "iluvatar-16x-bi-v150"] {
        let section = detect_in(&host(name)).unwrap();
        assert!(
            section.accelerators.is_empty() && section.notes.is_empty(),
            "{name}"
        );
    }
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
            assert_eq!(manufacturer, Manufacturer::Mthreads);
            reason
        }
        other => panic!("expected a pass not measured, got {other:?}"),
    }
}

/// What a reason says for each failure of the form `argv` names.
fn says(failure: ToolFailure, form: &str) -> String {
    match failure {
        ToolFailure::Missing if form == "mthreads-gmi" => "mthreads-gmi: not found".into(),
        ToolFailure::Missing => format!("{form}: mthreads-gmi: not found"),
        ToolFailure::Hangs => format!("{form}: no answer within 300ms, killed"),
        ToolFailure::ExitsNonZero => format!(
            "{form}: exited with status 1: Error: failed to initialize the management library"
        ),
        // The table's parser refuses the text; the report's reads no GPU in it.
        ToolFailure::Unreadable if form == "mthreads-gmi" => {
            "mthreads-gmi printed no GPU table (first line: \"*** stack smashing detected ***: terminated\")".into()
        }
        ToolFailure::Unreadable => format!("{form}: lists 0 GPU(s) where the host shows 8"),
    }
}

#[test]
fn a_failing_mthreads_gmi_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool(EIGHT_GPUS, "mthreads-gmi", failure);
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("mthreads-gmi: "), "{failure}: {reason}");
        assert!(
            reason.contains(&says(failure, "mthreads-gmi")),
            "{failure}: {reason}"
        );
    }
}

#[test]
fn either_form_failing_alone_is_a_pass_not_measured() {
    for (form, second) in [("mthreads-gmi", None), ("mthreads-gmi -q", Some("-q"))] {
        for failure in ToolFailure::ALL {
            let dir = accel_testkit::copy_recorded(EIGHT_GPUS);
            fail_commands(dir.path(), "mthreads-gmi", failure, |argv| {
                argv.get(1).map(String::as_str) == second
            });
            let reason = not_measured(dir.path());
            let form_said = match (failure, second) {
                // Alone, a missing table is an argv not recorded, not a tool not installed.
                (ToolFailure::Missing, None) => "mthreads-gmi: mthreads-gmi: not found".into(),
                _ => says(failure, form),
            };
            assert!(
                reason.starts_with("mthreads-gmi: "),
                "{form} {failure}: {reason}"
            );
            assert!(reason.contains(&form_said), "{form} {failure}: {reason}");
        }
    }
}
