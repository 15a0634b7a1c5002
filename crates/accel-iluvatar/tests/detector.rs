//! The detector over the recorded Iluvatar hosts (`testdata/hosts/iluvatar-*`): the 16-GPU
//! host, the old IX-ML, the container's N/A CUDA, a hanging ixsmi, a driver that does not
//! answer, another vendor's host, and ixsmi failing every way a live node's does (missing,
//! hanging, exiting non-zero, unreadable, listing too few GPUs): a pass not measured, never
//! GPUs without identity.

use std::path::Path;
use std::time::{Duration, Instant};

use accel_backend::Deadlines;
use accel_core::Manufacturer;
use accel_core::inventory::{DetectError, Grantable};
use accel_host::{FsHost, RecordedCommands};
use accel_iluvatar::detector::{self, DetectOptions};
use accel_iluvatar::ixsmi;
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};

/// The multi-card host the failures are made on.
const SIXTEEN_GPUS: &str = "iluvatar-16x-bi-v150";

/// Deadlines short enough for a hanging ixsmi to cost the test well under a second.
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
fn sixteen_bi_v150_are_named_by_uuid_and_joined_by_bus() {
    let section = detect_in(&host("iluvatar-16x-bi-v150")).unwrap();
    assert_eq!(section.accelerators.len(), 16);
    assert_eq!(section.driver_version.as_deref(), Some("4.1.0"));
    assert_eq!(section.runtime_version.as_deref(), Some("10.2"));
    assert_eq!(section.management_version.as_deref(), Some("4.1.0"));
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    let a = &section.accelerators[15];
    assert_eq!(
        a.uuid.as_deref(),
        Some("GPU-1e3e000f-0000-4000-8000-000000067000")
    );
    assert_eq!(a.product.as_deref(), Some("Iluvatar BI-V150"));
    assert_eq!(a.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:67:00.0"));
    assert_eq!(a.memory_mib, Some(32_768));
    assert_eq!(a.compute_capability.as_deref(), Some("7.1"));
    assert_eq!((a.numa_node, a.cores), (Some(1), None));
    assert_eq!(a.grantable, Grantable::Whole);
}

#[test]
fn an_old_ix_ml_without_compute_cap_keeps_everything_else() {
    let section = detect_in(&host("iluvatar-bi-v100-ixml3")).unwrap();
    assert_eq!(section.accelerators.len(), 1);
    let a = &section.accelerators[0];
    assert_eq!(a.product.as_deref(), Some("Iluvatar BI-V100"));
    assert_eq!(a.compute_capability, None);
    assert!(a.uuid.is_some());
    assert_eq!(
        (
            section.driver_version.as_deref(),
            section.management_version.as_deref()
        ),
        (Some("3.1.0"), Some("3.1.1"))
    );
    assert_eq!(section.notes.len(), 1, "{:?}", section.notes);
    assert!(section.notes[0].starts_with("ixsmi: ixsmi --query-gpu=index,pci.bus_id,compute_cap"));
}

#[test]
fn cuda_na_is_no_runtime_version() {
    let section = detect_in(&host("iluvatar-bi-v150s-cuda-na")).unwrap();
    assert_eq!(section.runtime_version, None);
    assert_eq!(section.driver_version.as_deref(), Some("4.1.0"));
    assert_eq!(section.accelerators[0].compute_capability, None);
}

#[test]
fn a_hanging_ixsmi_is_cut_and_the_pass_is_not_measured() {
    let dir = accel_testkit::copy_recorded("iluvatar-16x-bi-v150");
    for name in ["ixsmi", "query-gpu", "query-compute-cap"] {
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
    let started = std::time::Instant::now();
    let answer = detector::detect(&files, &commands, &options);
    assert!(started.elapsed() < Duration::from_secs(4));
    match answer {
        Err(DetectError::NotMeasured { reason, .. }) => {
            assert!(reason.contains("no answer within"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_driver_that_does_not_answer_is_not_measured() {
    match detect_in(&host("iluvatar-driver-not-answering")) {
        Err(e @ DetectError::NotMeasured { .. }) => assert!(
            e.to_string()
                .contains("Failed to initialize IXML: Unknown Error"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_vendors_host_has_no_iluvatar() {
    for name in ["hgx-h100-8gpu", "amd-8x-mi300x", "mthreads-8x-s4000"] {
        let section = detect_in(&host(name)).unwrap();
        assert!(
            section.accelerators.is_empty() && section.notes.is_empty(),
            "{name}"
        );
    }
}

fn detect_briefly(dir: &Path) -> accel_core::Detection {
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
    answer
}

/// The reason of a pass over `dir` that must not be measured, within the short deadlines.
fn not_measured(dir: &Path) -> String {
    match detect_briefly(dir) {
        Err(DetectError::NotMeasured {
            manufacturer,
            reason,
        }) => {
            assert_eq!(manufacturer, Manufacturer::Iluvatar);
            reason
        }
        other => panic!("expected a pass not measured, got {other:?}"),
    }
}

/// What a reason says for each failure.
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => "ixsmi: not found",
        ToolFailure::Hangs => ": no answer within 300ms, killed",
        ToolFailure::ExitsNonZero => {
            ": exited with status 1: Error: failed to initialize the management library"
        }
        ToolFailure::Unreadable => "(first line: \"*** stack smashing detected ***: terminated\")",
    }
}

fn is_identity_query(argv: &[String]) -> bool {
    argv.iter()
        .map(String::as_str)
        .eq(ixsmi::QUERY_ARGV.iter().copied())
}

#[test]
fn a_failing_ixsmi_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool(SIXTEEN_GPUS, "ixsmi", failure);
        let reason = not_measured(dir.path());
        assert!(reason.starts_with("ixsmi: "), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn a_failing_identity_query_alone_is_a_pass_not_measured() {
    for failure in ToolFailure::ALL {
        let dir = accel_testkit::copy_recorded(SIXTEEN_GPUS);
        fail_commands(dir.path(), "ixsmi", failure, is_identity_query);
        let reason = not_measured(dir.path());
        // The parse error names the tool, and the field the identity query is found by.
        let query = match failure {
            ToolFailure::Unreadable => "ixsmi: ixsmi printed no CSV header with uuid".to_string(),
            _ => format!("ixsmi: {}: ", ixsmi::QUERY_ARGV.join(" ")),
        };
        assert!(reason.starts_with(&query), "{failure}: {reason}");
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
    }
}

#[test]
fn a_failing_table_alone_loses_only_the_versions() {
    let dir = accel_testkit::copy_recorded(SIXTEEN_GPUS);
    fail_commands(dir.path(), "ixsmi", ToolFailure::ExitsNonZero, |argv| {
        argv.len() == 1
    });
    let section = detect_briefly(dir.path()).unwrap();
    assert_eq!(section.accelerators.len(), 16);
    assert!(section.accelerators.iter().all(|a| a.uuid.is_some()
        && a.grantable == Grantable::Whole
        && a.memory_mib == Some(32_768)));
    assert_eq!(section.runtime_version, None);
    assert_eq!(
        section.notes,
        ["ixsmi: ixsmi: exited with status 1: Error: failed to initialize the management library"]
    );
}

#[test]
fn an_identity_query_listing_fewer_gpus_than_the_bus_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded(SIXTEEN_GPUS);
    let query = dir.path().join("commands/query-gpu/stdout");
    let text = std::fs::read_to_string(&query).unwrap();
    let fifteen: String = text.lines().take(16).map(|l| format!("{l}\n")).collect();
    std::fs::write(&query, fifteen).unwrap();
    assert_eq!(
        not_measured(dir.path()),
        format!(
            "ixsmi: {}: lists 15 GPU(s) where the host shows 16",
            ixsmi::QUERY_ARGV.join(" ")
        )
    );
}
