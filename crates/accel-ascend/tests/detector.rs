//! The detector over the recorded Ascend hosts (`testdata/hosts/ascend-*`): each layout's
//! chips with their physical id, card id and chip index, identity from the die id, V1 and V2
//! decided from what the host answers, and the passes that fail (a missing, hanging or
//! uninitialised `npu-smi`) failing rather than answering zero NPUs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accel_ascend::detector::{self, DetectOptions, Generation, Note};
use accel_backend::Deadlines;
use accel_core::inventory::{DetectError, Detection};
use accel_host::{FsHost, RecordedCommands};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};

fn host(name: &str) -> PathBuf {
    accel_testkit::recorded_host(name)
}

fn detect_in(dir: &Path, options: DetectOptions) -> Detection {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options)
}

fn detect(name: &str) -> accel_core::ManufacturerInventory {
    detect_in(&host(name), DetectOptions::default()).unwrap()
}

fn slots(section: &accel_core::ManufacturerInventory) -> Vec<Vec<u32>> {
    section
        .accelerators
        .iter()
        .map(|a| a.physical_indexes.clone())
        .collect()
}

#[test]
fn eight_910b2_carry_the_die_ids_the_driver_library_renders() {
    let section = detect("ascend-8x-910b2");
    assert_eq!(section.accelerators.len(), 8);
    let a = &section.accelerators[1];
    assert_eq!(
        a.uuid.as_deref(),
        Some("E281A66C 140C979 2CFBED72 A4500485 104301E3")
    );
    assert_eq!(a.product.as_deref(), Some("910B2"));
    assert_eq!(a.architecture.as_deref(), Some("910B"));
    assert_eq!(a.memory_mib, Some(65_536));
    assert_eq!(a.cores, Some(24));
    assert_eq!(a.numa_node, Some(0));
    assert_eq!(a.bus_id.unwrap().to_string(), "00000000:01:00.0");
    assert_eq!(slots(&section)[7], [7, 7, 0]);
    assert_eq!(section.driver_version.as_deref(), Some("25.5.1"));
    assert_eq!(section.runtime_version.as_deref(), Some("8.5"));
    assert_eq!(section.management_version.as_deref(), Some("25.5.1"));
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V1).to_string()]
    );
}

#[test]
fn an_old_npu_smi_without_phyid_remap_takes_the_logic_ids_the_nodes_match() {
    let section = detect("ascend-8x-910a-npu-smi24");
    assert_eq!(section.accelerators.len(), 8);
    let a = &section.accelerators[3];
    assert_eq!(a.product.as_deref(), Some("910A"), "the chip map's name");
    assert_eq!(a.architecture.as_deref(), Some("910"));
    assert_eq!(a.memory_mib, Some(32_768), "HBM, not the DDR column");
    assert_eq!(a.physical_indexes, [3, 3, 0]);
    assert!(
        section.notes.contains(&Note::PhysicalFromLogic.to_string()),
        "{:?}",
        section.notes
    );
}

#[test]
fn gapped_npu_ids_with_two_chips_keep_the_drivers_numbers() {
    let section = detect("ascend-310p-2chips-gapped");
    assert_eq!(
        slots(&section),
        [
            [2, 1, 0],
            [3, 1, 1],
            [4, 2, 0],
            [5, 2, 1],
            [8, 4, 0],
            [9, 4, 1],
            [10, 5, 0],
            [11, 5, 1]
        ]
    );
    let indexes: Vec<u32> = section.accelerators.iter().map(|a| a.index).collect();
    assert_eq!(indexes, (0..8).collect::<Vec<_>>(), "our index is compact");
    let a = &section.accelerators[0];
    assert_eq!(a.architecture.as_deref(), Some("310P"));
    assert_eq!(a.memory_mib, Some(21_525), "DDR on a 310-class card");
    assert_eq!(a.cores, None, "the 310P's -t common prints no AI cores");
    assert_eq!(section.runtime_version.as_deref(), Some("9.1"));
}

#[test]
fn a3_lists_each_die_with_its_phy_id() {
    let section = detect("ascend-a3-2dies");
    assert_eq!(
        slots(&section),
        [[0, 0, 0], [1, 0, 1], [2, 1, 0], [3, 1, 1]]
    );
    assert_eq!(
        section.accelerators[1].architecture.as_deref(),
        Some("910C")
    );
    assert_eq!(
        section.accelerators[1].product.as_deref(),
        Some("Ascend910")
    );
    assert_eq!(section.management_version.as_deref(), Some("26.0.rc2"));
}

#[test]
fn the_950_is_v2_without_a_driver_version() {
    let section = detect("ascend-950pr-v2");
    assert_eq!(section.accelerators.len(), 2);
    assert_eq!(slots(&section), [[0, 0, 0], [1, 1, 0]]);
    let a = &section.accelerators[0];
    assert_eq!(a.product.as_deref(), Some("Ascend950PR"));
    assert_eq!(a.architecture.as_deref(), Some("950"));
    assert_eq!(a.memory_mib, Some(131_072));
    assert_eq!(section.driver_version, None);
    assert_eq!(section.runtime_version.as_deref(), Some("9.0"));
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V2).to_string()]
    );
}

#[test]
fn a_driver_that_will_not_initialise_is_a_failed_pass() {
    let e = detect_in(
        &host("ascend-driver-not-initialised"),
        DetectOptions::default(),
    )
    .unwrap_err();
    let DetectError::NotMeasured { reason, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        reason,
        "npu-smi info: the driver did not initialise: dcmi model initialized failed, because the device is used. ret is -8020"
    );
}

fn copy_host(name: &str) -> tempfile::TempDir {
    accel_testkit::copy_recorded(name)
}

#[test]
fn a_missing_npu_smi_on_a_host_with_npus_is_a_failed_pass() {
    let dir = copy_host("ascend-8x-910b2");
    std::fs::remove_dir_all(dir.path().join("commands")).unwrap();
    std::fs::create_dir(dir.path().join("commands")).unwrap();
    let e = detect_in(dir.path(), DetectOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("npu-smi is not installed, and the kernel shows 8 Ascend PCI function(s) and 8 /dev/davinci node(s)"),
        "{e}"
    );
}

#[test]
fn a_hanging_npu_smi_is_a_failed_pass_within_the_deadline() {
    let dir = copy_host("ascend-8x-910b2");
    std::fs::write(dir.path().join("commands/info/delay-ms"), "60000\n").unwrap();
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(200),
            snapshot: Duration::from_secs(2),
        },
        ..DetectOptions::default()
    };
    let started = std::time::Instant::now();
    let e = detect_in(dir.path(), options).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(e.to_string().contains("no answer within"), "{e}");
}

#[test]
fn a_chip_without_a_readable_die_id_is_dropped_not_named_by_its_bus() {
    let dir = copy_host("ascend-8x-910b2");
    // The board answers, but without its die id (a query that fails is another matter: the
    // pass is then not measured, `a_failing_board_query_is_a_pass_not_measured_not_a_chip_dropped`).
    rewrite(
        dir.path(),
        "board-3-0",
        "VDie ID                        : 687DA66C 0100D2DF 1915AB72 99D00485 104301E3\n",
        "",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 7);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.physical_indexes[0] != 3)
    );
    assert!(
        section
            .notes
            .iter()
            .any(|n| n.starts_with("NPU 3 chip 0: dropped, its die id could not be read")),
        "{:?}",
        section.notes
    );
}

#[test]
fn a_host_without_ascend_answers_nothing() {
    let section = detect("no-driver");
    assert!(section.accelerators.is_empty());
    let section = detect("amd-8x-mi300x");
    assert!(
        section.accelerators.is_empty(),
        "another vendor's cards are not Ascend's"
    );
}

/// Rewrites one recorded answer's standard output, replacing `from` by `to`.
fn rewrite(dir: &Path, command: &str, from: &str, to: &str) {
    let path = dir.join("commands").join(command).join("stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{command}: {text}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// spec/ascend.md §7: an NPU is unhealthy when ECC is enabled and it counts single- or
/// double-bit errors (HBM on the 910B, DDR on the 310P); with ECC off, or no counters read, it
/// stays in service.
#[test]
fn ecc_errors_of_either_kind_take_an_npu_out_of_service_while_ecc_is_enabled() {
    let section = detect("ascend-8x-910b2");
    assert!(section.accelerators.iter().all(|a| a.healthy));
    let ecc = section.accelerators[0].ecc.clone().unwrap();
    assert_eq!(ecc.enabled, Some(true));
    assert_eq!(ecc.volatile_corrected, Some(0));

    let dir = copy_host("ascend-8x-910b2");
    rewrite(
        dir.path(),
        "ecc-3",
        "HBM Single Bit Error Count               : 0",
        "HBM Single Bit Error Count               : 2",
    );
    // DDR errors do not count on a chip judged by its HBM.
    rewrite(
        dir.path(),
        "ecc-5",
        "DDR Double Bit Error Count               : 0",
        "DDR Double Bit Error Count               : 7",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let sick: Vec<(u32, Vec<String>)> = section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| (a.physical_indexes[0], a.health_reasons.clone()))
        .collect();
    assert_eq!(
        sick,
        [(
            3,
            vec!["ECC errors with ECC enabled: 2 single-bit, 0 double-bit".to_string()]
        )]
    );

    // ECC disabled: the counters do not take it out of service.
    rewrite(
        dir.path(),
        "ecc-enable-3",
        "HBM ECC-Enable Status          : True",
        "HBM ECC-Enable Status          : False",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators.iter().all(|a| a.healthy));

    // The 310P's chips are asked one by one and judged by their DDR.
    let dir = copy_host("ascend-310p-2chips-gapped");
    rewrite(
        dir.path(),
        "ecc-4-1",
        "DDR Double Bit Error Count               : 0",
        "DDR Double Bit Error Count               : 1",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let sick: Vec<&Vec<u32>> = section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| &a.physical_indexes)
        .collect();
    assert_eq!(sick, [&vec![9, 4, 1]]);
}

/// A failed ECC read counts as healthy, and the pass says which chips were not read.
#[test]
fn an_ecc_query_that_fails_leaves_the_npu_in_service_with_a_note() {
    let dir = copy_host("ascend-8x-910b2");
    for npu in [2, 6] {
        std::fs::remove_dir_all(dir.path().join(format!("commands/ecc-{npu}"))).unwrap();
    }
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 8);
    assert!(section.accelerators.iter().all(|a| a.healthy));
    assert_eq!(section.accelerators[2].ecc, None);
    assert!(
        section.notes.iter().any(|n| n
            .starts_with("npu-smi info -t ecc: not read for 2 chip(s) (")
            && n.ends_with("a failed ECC read counts as healthy")),
        "{:?}",
        section.notes
    );
}

/// Deadlines short enough that a hanging tool costs the test a fraction of a second.
fn short() -> DetectOptions {
    DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_millis(600),
        },
        ..DetectOptions::default()
    }
}

/// What the reason says of each failure (its `RunFailure` or parse error, naming the argv).
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => "npu-smi is not installed",
        ToolFailure::Hangs => "npu-smi info: no answer within",
        ToolFailure::ExitsNonZero => "npu-smi info: exited with status 1: Error: failed",
        ToolFailure::Unreadable => "npu-smi info: no NPU table in its output",
    }
}

/// Issue 42 item 3: the die id comes only from `npu-smi`, so a tool that is missing, hangs,
/// exits non-zero or prints what cannot be read is a pass not measured — never zero NPUs, never
/// NPUs without an identity.
#[test]
fn a_failing_npu_smi_is_a_pass_not_measured_whichever_way_it_fails() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("ascend-8x-910b2", "npu-smi", failure);
        let started = std::time::Instant::now();
        let detection = detect_in(dir.path(), short());
        assert!(started.elapsed() < Duration::from_secs(5), "{failure}");
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}

/// The identity query is `-t board` as much as `npu-smi info`: a chip whose board query fails
/// (any of the four ways) is not dropped from an otherwise measured pass — the pass is not
/// measured, so the last good inventory and its grants stand.
#[test]
fn a_failing_board_query_is_a_pass_not_measured_not_a_chip_dropped() {
    for failure in ToolFailure::ALL {
        let dir = accel_testkit::copy_recorded("ascend-8x-910b2");
        fail_commands(dir.path(), "npu-smi", failure, |argv| {
            argv.iter().any(|a| a == "board") && argv.get(5).map(String::as_str) == Some("3")
        });
        let detection = detect_in(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        // A failed run names its argv; text that is no board is named by the parser.
        let subject = match failure {
            ToolFailure::Unreadable => "npu-smi info -t board: no board facts in its output",
            _ => "npu-smi info -t board -i 3 -c 0: ",
        };
        assert!(reason.starts_with(subject), "{failure}: {reason}");
    }
}

/// `npu-smi info` answering a table of fewer chips than the kernel's `/dev/davinci<N>` nodes
/// is an answer that cannot be read as the host's NPUs.
#[test]
fn a_table_of_fewer_chips_than_the_kernel_shows_is_a_pass_not_measured() {
    let dir = copy_host("ascend-8x-910b2");
    let path = dir.path().join("commands/info/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    // Keep the banner and header rows only: a well-formed table listing no NPU.
    let header: String = text
        .lines()
        .take_while(|l| !l.contains("910B2"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, header).unwrap();
    let e = detect_in(dir.path(), DetectOptions::default()).unwrap_err();
    assert!(
        e.to_string().ends_with(
            "npu-smi info: lists 0 chip(s), but the kernel shows 8 /dev/davinci node(s)"
        ),
        "{e}"
    );
}
