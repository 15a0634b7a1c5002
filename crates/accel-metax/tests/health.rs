//! Health from `mx-smi --count-ecc` (spec §6, issue 43) over the recorded MetaX hosts: the sick
//! host's one GPU with uncorrectable DRAM errors out of service and the seven others in; what
//! only warns (retired pages, SRAM errors, a count not printed, the query failing every way a
//! live node's does) leaving every GPU in service with a note, and never failing the pass; and
//! `doctor`'s `health-ecc` and `kernel-log` rows saying which source was read and which not.

use std::path::Path;

use accel_backend::doctor::{Check, Status};
use accel_core::ManufacturerInventory;
use accel_host::{FsHost, RecordedCommands};
use accel_metax::count_ecc::COUNT_ECC_ARGV;
use accel_metax::detector::{self, DetectOptions, EccNote};
use accel_testkit::failing_tool::{ToolFailure, fail_commands};

/// Eight C500, GPU 1 (`0000:0f:00.0`) with 2 uncorrectable DRAM errors.
const SICK: &str = "metax-8x-c500-gpu1-dram-ue";
const SICK_BUS: &str = "0000:0f:00.0";
/// The sick host's `mx-smi --count-ecc` recording.
const COUNT_ECC: &str = "commands/mx-smi-count-ecc/stdout";

fn detect_in(dir: &Path) -> ManufacturerInventory {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, &DetectOptions::default()).unwrap()
}

fn doctor_in(dir: &Path) -> Vec<Check> {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    accel_metax::doctor::run(&files, &commands, &DetectOptions::default())
}

fn row<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} row in {checks:#?}"))
}

/// A copy of the sick host whose `--count-ecc` output is edited by `edit`.
fn sick_copy(edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let copy = accel_testkit::copy_recorded(SICK);
    let path = copy.path().join(COUNT_ECC);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
    copy
}

fn unhealthy(section: &ManufacturerInventory) -> Vec<(u32, String, Vec<String>)> {
    section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| (a.index, a.bus_id.unwrap().sysfs(), a.health_reasons.clone()))
        .collect()
}

#[test]
fn the_one_gpu_with_uncorrectable_dram_errors_leaves_service_alone() {
    let section = detect_in(&accel_testkit::recorded_host(SICK));
    assert_eq!(section.accelerators.len(), 8);
    assert_eq!(
        unhealthy(&section),
        [(
            1,
            SICK_BUS.to_string(),
            vec!["2 uncorrectable volatile ECC errors".to_string()]
        )]
    );
    for a in &section.accelerators {
        let ecc = a.ecc.as_ref().expect("every GPU's DRAM count is printed");
        let want = if a.index == 1 { 2 } else { 0 };
        assert_eq!(ecc.volatile_uncorrected, Some(want), "GPU {}", a.index);
    }
    assert_eq!(section.notes, Vec::<String>::new());

    let checks = doctor_in(&accel_testkit::recorded_host(SICK));
    let ecc = row(&checks, "health-ecc");
    assert_eq!(ecc.status, Status::Warn);
    assert_eq!(
        ecc.reason,
        format!(
            "mx-smi --count-ecc: DRAM uncorrectable count read for 8 of 8 GPU(s); out of service: GPU 1 ({SICK_BUS}): 2 uncorrectable volatile ECC errors"
        )
    );
    let log = row(&checks, "kernel-log");
    assert_eq!(log.status, Status::Ok);
    assert!(log.reason.starts_with("not watched"), "{}", log.reason);
}

#[test]
fn a_clean_reading_keeps_every_gpu_in_service() {
    let copy = sick_copy(|t| t.replace(": 2", ": 0"));
    let section = detect_in(copy.path());
    assert!(unhealthy(&section).is_empty());
    let checks = doctor_in(copy.path());
    let ecc = row(&checks, "health-ecc");
    assert_eq!(ecc.status, Status::Ok);
    assert_eq!(
        ecc.reason,
        "mx-smi --count-ecc: DRAM uncorrectable count read for 8 of 8 GPU(s), none above 0"
    );
}

/// The captured layout (2.2.9 prints no DRAM item): no GPU has an ECC reading, none is guessed
/// healthy by a made-up 0, and the note and doctor say the count is not seen.
#[test]
fn a_reading_without_the_dram_count_is_no_reading_and_says_so() {
    let copy = sick_copy(|t| {
        t.lines()
            .filter(|l| !l.contains("DRAM"))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let section = detect_in(copy.path());
    assert!(unhealthy(&section).is_empty());
    assert!(section.accelerators.iter().all(|a| a.ecc.is_none()));
    let note = EccNote::NoDramCount {
        unread: 8,
        total: 8,
    };
    assert_eq!(section.notes, [note.to_string()]);
    let ecc = row(&doctor_in(copy.path()), "health-ecc").clone();
    assert_eq!(ecc.status, Status::Warn);
    assert!(
        ecc.reason.contains("read for 0 of 8 GPU(s)"),
        "{}",
        ecc.reason
    );
    assert!(ecc.reason.contains(&note.to_string()), "{}", ecc.reason);
}

/// Retired double-bit pages and SRAM errors only warn (the spec's rule reads DRAM errors only,
/// and the retired-page count outlives a reboot).
#[test]
fn retired_pages_and_sram_errors_warn_and_keep_the_gpu_in_service() {
    // Split at the blank lines: the preamble's first two parts, then GPU n is part n + 2.
    let copy = sick_copy(|t| {
        let mut blocks: Vec<String> = t.split("\n\n").map(str::to_string).collect();
        blocks[5] = blocks[5].replace(
            "Double Bit ECC                            : 0",
            "Double Bit ECC                            : 4",
        );
        blocks[7] = blocks[7].replace(
            "        DRAM Uncorrectable",
            "        SRAM Uncorrectable                        : 1\n        DRAM Uncorrectable",
        );
        blocks.join("\n\n").replace(": 2", ": 0")
    });
    let section = detect_in(copy.path());
    assert!(unhealthy(&section).is_empty());
    let retired = EccNote::RetiredPages {
        index: 3,
        bus: "0000:12:00.0".parse().unwrap(),
        pages: 4,
    };
    let sram = EccNote::SramUncorrectable {
        index: 5,
        bus: "0000:8b:00.0".parse().unwrap(),
        errors: 1,
    };
    assert_eq!(section.notes, [retired.to_string(), sram.to_string()]);
    let ecc = row(&doctor_in(copy.path()), "health-ecc").clone();
    assert_eq!(ecc.status, Status::Warn);
    assert!(ecc.reason.contains(&retired.to_string()), "{}", ecc.reason);
    assert!(ecc.reason.contains(&sram.to_string()), "{}", ecc.reason);
}

/// `--count-ecc` failing any way never fails the pass nor takes a GPU out (spec §6: a failed
/// read is healthy); the note names the argv and why.
#[test]
fn a_failing_count_query_is_a_note_and_every_gpu_stays() {
    for failure in ToolFailure::ALL {
        let copy = accel_testkit::copy_recorded(SICK);
        fail_commands(copy.path(), "mx-smi", failure, |argv| {
            argv.iter()
                .map(String::as_str)
                .eq(COUNT_ECC_ARGV.iter().copied())
        });
        let files = FsHost::new(copy.path().join("root"));
        let commands = RecordedCommands::load(copy.path()).unwrap();
        let options = DetectOptions {
            deadlines: accel_backend::Deadlines {
                per_query: std::time::Duration::from_millis(300),
                snapshot: std::time::Duration::from_secs(5),
            },
            ..DetectOptions::default()
        };
        let section = detector::detect(&files, &commands, &options)
            .unwrap_or_else(|e| panic!("{failure:?}: the pass stands: {e}"));
        assert_eq!(section.accelerators.len(), 8, "{failure:?}");
        assert!(unhealthy(&section).is_empty(), "{failure:?}");
        assert!(
            section.accelerators.iter().all(|a| a.uuid.is_some()),
            "{failure:?}"
        );
        assert_eq!(section.notes.len(), 1, "{failure:?}: {:?}", section.notes);
        let note = &section.notes[0];
        assert!(
            note.starts_with("mx-smi --count-ecc: ")
                && note.ends_with(
                    ": no ECC count is read this pass, so a GPU with uncorrectable DRAM errors stays in service"
                ),
            "{failure:?}: {note}"
        );
    }
}

/// A host recorded without the query (the 2.1.x hosts): the same note, every GPU in service.
#[test]
fn a_host_without_the_query_recorded_reads_no_count() {
    let section = detect_in(&accel_testkit::recorded_host("metax-8x-c500"));
    assert!(unhealthy(&section).is_empty());
    assert!(section.accelerators.iter().all(|a| a.ecc.is_none()));
    assert_eq!(
        section.notes,
        [EccNote::Unread("mx-smi --count-ecc: mx-smi: not found".into()).to_string()]
    );
}
