//! The detector over the recorded Iluvatar hosts (`testdata/hosts/iluvatar-*`): the 16-GPU
//! host, the old IX-ML, the container's N/A CUDA, a missing and a hanging ixsmi, a driver that
//! does not answer, and another vendor's host.

use std::path::Path;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_core::inventory::{DetectError, Grantable};
use accel_host::{FsHost, RecordedCommands};
use accel_iluvatar::detector::{self, DetectOptions};

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
fn without_ixsmi_the_boards_are_listed_unnamed_and_not_granted() {
    let dir = accel_testkit::copy_recorded("iluvatar-16x-bi-v150");
    std::fs::remove_dir_all(dir.path().join("commands")).unwrap();
    std::fs::create_dir(dir.path().join("commands")).unwrap();
    let section = detect_in(dir.path()).unwrap();
    assert_eq!(section.accelerators.len(), 16);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.uuid.is_none() && a.grantable == Grantable::Nothing)
    );
    assert_eq!(section.notes, [detector::Note::NoTool.to_string()]);
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
