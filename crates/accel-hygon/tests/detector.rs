//! The detector over the recorded Hygon hosts (`testdata/hosts/hygon-*`): the kernel's views
//! joined to hy-smi by unique id, the rocm-smi fork where hy-smi is missing, a node in MIG mode
//! served as partitions only, a driver that does not answer, a hanging tool, and AMD's cards
//! (which run KFD too) never Hygon's — nor Hygon's AMD's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accel_backend::Deadlines;
use accel_core::inventory::{DetectError, Grantable, MigMode};
use accel_host::{FsHost, RecordedCommands};
use accel_hygon::detector::{self, DetectOptions};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool};

fn host(name: &str) -> PathBuf {
    accel_testkit::recorded_host(name)
}

fn detect_in(dir: &Path, options: DetectOptions) -> accel_core::Detection {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options)
}

#[test]
fn four_k100_ai_are_named_by_unique_id_with_their_drm_pairs() {
    let section = detect_in(&host("hygon-4x-k100ai"), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 4);
    let a = &section.accelerators[0];
    assert_eq!(a.uuid.as_deref(), Some("GPU-7137d9b2a08a4841"));
    assert_eq!(a.product.as_deref(), Some("K100_AI"));
    assert_eq!(a.memory_mib, Some(65_520));
    assert_eq!(a.cores, Some(120));
    assert_eq!(a.compute_capability.as_deref(), Some("gfx928"));
    assert_eq!(a.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:09:00.0"));
    let drm = a.drm.unwrap();
    assert_eq!((drm.card, drm.render), (Some(1), Some(128)));
    assert_eq!(a.mig_mode, Some(MigMode::Disabled));
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.grantable == Grantable::Whole)
    );
    assert!(section.notes.is_empty(), "{:?}", section.notes);
}

#[test]
fn the_rocm_smi_fork_answers_where_hy_smi_is_missing() {
    let section = detect_in(
        &host("hygon-rocm-smi-fork-k100ai"),
        DetectOptions::default(),
    )
    .unwrap();
    assert_eq!(section.accelerators.len(), 2);
    assert_eq!(
        section.accelerators[1].uuid.as_deref(),
        Some("GPU-7137d9debed21061")
    );
    assert_eq!(section.accelerators[1].product.as_deref(), Some("K100_AI"));
    assert_eq!(
        section.driver_version.as_deref(),
        Some("rock-6.3.13-V1.12.0")
    );
    assert!(section.notes.is_empty(), "{:?}", section.notes);
}

#[test]
fn a_mig_node_serves_partitions_only_and_says_so() {
    let section = detect_in(&host("hygon-8x-bw150-mig"), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 8);
    assert!(section.accelerators.iter().all(|a| {
        a.mig_mode == Some(MigMode::Enabled) && a.grantable == Grantable::PartitionsOnly
    }));
    assert_eq!(section.accelerators[0].cores, Some(80));
    assert_eq!(
        section.accelerators[0].compute_capability.as_deref(),
        Some("gfx936")
    );
    assert_eq!(
        section.notes,
        vec![detector::Note::MigEnabled { cards: 8 }.to_string()]
    );
    // Spec §6.1's measured BW card, from hy-smi mig -lgip/-lgipp: profiles, their CU and
    // instance counts, placements (the card's 80 CUs are the most one profile spans).
    let card = &section.accelerators[3];
    type Row<'a> = (&'a str, u32, Option<u32>, Option<u32>, Vec<(u32, u32)>);
    let profiles: Vec<Row<'_>> = card
        .partition_profiles
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.id,
                p.multiprocessors,
                p.instances_total,
                p.placements.iter().map(|x| (x.start, x.size)).collect(),
            )
        })
        .collect();
    assert_eq!(
        profiles,
        vec![
            (
                "2g.15gb",
                3,
                Some(20),
                Some(4),
                vec![(0, 1), (1, 1), (2, 1), (3, 1)]
            ),
            ("4g.31gb", 1, Some(40), Some(2), vec![(0, 2), (2, 2)]),
            ("8g.63gb", 0, Some(80), Some(1), vec![(0, 4)]),
        ]
    );
    let tokens: u32 = section
        .accelerators
        .iter()
        .map(|a| {
            a.partition_profiles
                .iter()
                .filter_map(|p| p.instances_total)
                .max()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(tokens, 32, "hygon.com/dcu.partitioned: 32 (spec §1.5)");
}

#[test]
fn a_profile_the_cards_of_a_group_disagree_on_is_withheld_from_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&host("hygon-8x-bw150-mig"), dir.path()).unwrap();
    // DCU 5 lists 4g.31gb with one placement only.
    let lgipp = dir.path().join("commands/mig-lgipp/stdout");
    let text = std::fs::read_to_string(&lgipp).unwrap().replace(
        "DCU 5 profile ID 1 placements: {0,2}:2",
        "DCU 5 profile ID 1 placements: {0}:2",
    );
    std::fs::write(&lgipp, text).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    for a in &section.accelerators {
        let names: Vec<&str> = a
            .partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, vec!["2g.15gb", "8g.63gb"], "card {}", a.index);
    }
    assert!(
        section
            .notes
            .iter()
            .any(|n| n.contains("do not agree on MIG profile 4g.31gb")),
        "{:?}",
        section.notes
    );
}

#[test]
fn a_mig_card_the_registry_does_not_name_is_offered_no_profile() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&host("hygon-8x-bw150-mig"), dir.path()).unwrap();
    // dev7's file names another address: the card at 0000:c5:00.0 has no dev<N>.
    std::fs::write(
        dir.path().join("root/etc/dmi_mig_config/dev7"),
        "0000:ee:00.0\n",
    )
    .unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators[7].partition_profiles.is_empty());
    assert!(!section.accelerators[6].partition_profiles.is_empty());
    assert!(
        section
            .notes
            .iter()
            .any(|n| n.contains("0000:c5:00.0") && n.contains("no dev<N> file")),
        "{:?}",
        section.notes
    );
}

#[test]
fn a_driver_that_does_not_answer_is_not_measured() {
    let Err(DetectError::NotMeasured { reason, .. }) =
        detect_in(&host("hygon-driver-silent"), DetectOptions::default())
    else {
        panic!("a silent driver is not an empty node");
    };
    assert!(
        reason.starts_with("4 DCU(s) on the bus, but the KFD topology shows no Hygon node"),
        "{reason}"
    );
    assert!(reason.contains("hy-smi --showid"), "{reason}");
}

#[test]
fn a_hanging_tool_is_a_note_and_the_kernel_still_lists_the_cards() {
    let tmp = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&host("hygon-4x-k100ai"), tmp.path()).unwrap();
    std::fs::write(tmp.path().join("commands/hy-smi-json/delay-ms"), "5000\n").unwrap();
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(200),
            snapshot: Duration::from_secs(2),
        },
        ..DetectOptions::default()
    };
    let section = detect_in(tmp.path(), options).unwrap();
    assert_eq!(section.accelerators.len(), 4);
    // Named by KFD's unique id; no name without the tool.
    assert_eq!(
        section.accelerators[0].uuid.as_deref(),
        Some("GPU-7137d9b2a08a4841")
    );
    assert_eq!(section.accelerators[0].product, None);
    assert!(
        section.notes[0].contains("no answer within"),
        "{:?}",
        section.notes
    );
}

#[test]
fn amd_cards_are_not_hygons_and_hygon_cards_not_amds() {
    for name in [
        "amd-8x-mi300x",
        "amd-rocm-smi-only-rx7800xt",
        "amd-8x-mi210-xgmi",
    ] {
        let section = detect_in(&host(name), DetectOptions::default()).unwrap();
        assert!(
            section.accelerators.is_empty(),
            "{name}: {:?}",
            section.accelerators
        );
    }
    let dir = host("hygon-4x-k100ai");
    let amd = accel_amd::detector::detect(
        &FsHost::new(dir.join("root")),
        &RecordedCommands::load(&dir).unwrap(),
        accel_amd::detector::DetectOptions::default(),
    )
    .unwrap();
    assert!(amd.accelerators.is_empty(), "{:?}", amd.accelerators);
}

#[test]
fn no_hygon_device_is_an_empty_section() {
    let section = detect_in(&host("no-driver"), DetectOptions::default()).unwrap();
    assert!(section.accelerators.is_empty());
    assert!(section.notes.is_empty());
}

/// Spec §7: uncorrectable ECC errors take a DCU out of service, read from the kernel's UMC
/// counter (`ras/umc_err_count`); corrected ones alone do not, and a DCU whose driver exposes
/// no counter is not faulted by a read that could not be made.
#[test]
fn uncorrectable_umc_errors_take_the_dcu_out_and_a_missing_counter_does_not() {
    let dir = accel_testkit::copy_recorded("hygon-4x-k100ai");
    let devices = dir.path().join("root/sys/bus/pci/devices");
    let counter = |bdf: &str, text: &str| {
        let ras = devices.join(bdf).join("ras");
        std::fs::create_dir_all(&ras).unwrap();
        std::fs::write(ras.join("umc_err_count"), text).unwrap();
    };
    counter("0000:09:00.0", "ue: 2\nce: 5\n");
    counter("0000:0c:00.0", "UE: 0\nCE: 7\n");
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let a = &section.accelerators;
    assert!(!a[0].healthy);
    assert_eq!(a[0].health_reasons, ["2 uncorrectable volatile ECC errors"]);
    let ecc = a[0].ecc.as_ref().unwrap();
    assert_eq!(
        (ecc.volatile_uncorrected, ecc.volatile_corrected),
        (Some(2), Some(5))
    );
    assert!(
        a[1].healthy,
        "corrected errors alone: {:?}",
        a[1].health_reasons
    );
    assert_eq!(a[1].ecc.as_ref().unwrap().volatile_corrected, Some(7));
    assert!(a[2].healthy && a[2].ecc.is_none(), "no counter, no fault");
    assert_eq!(detector::parse_umc_err_count("garbage\n"), None);
}

#[test]
fn a_card_whose_registry_number_is_not_its_index_is_offered_no_profile() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&host("hygon-8x-bw150-mig"), dir.path()).unwrap();
    // dev0 and dev1 swapped: hy-smi mig -i 0 would be the second card's.
    let reg = dir.path().join("root/etc/dmi_mig_config");
    let zero = std::fs::read_to_string(reg.join("dev0")).unwrap();
    let one = std::fs::read_to_string(reg.join("dev1")).unwrap();
    std::fs::write(reg.join("dev0"), one).unwrap();
    std::fs::write(reg.join("dev1"), zero).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators[0].partition_profiles.is_empty());
    assert!(section.accelerators[1].partition_profiles.is_empty());
    assert!(!section.accelerators[2].partition_profiles.is_empty());
    assert!(
        section
            .notes
            .iter()
            .any(|n| n.contains("its registry number is not its index here")),
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

/// Each accelerator's index and identity: the seats a grant names.
fn seats(section: &accel_core::ManufacturerInventory) -> Vec<(u32, Option<String>)> {
    section
        .accelerators
        .iter()
        .map(|a| (a.index, a.uuid.clone()))
        .collect()
}

/// What the note says of each failure (its `RunFailure` or parse error, naming the argv).
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => "neither hy-smi nor rocm-smi is installed",
        ToolFailure::Hangs => "no answer within",
        ToolFailure::ExitsNonZero => "exited with status 1: Error: failed",
        ToolFailure::Unreadable => "not a JSON document",
    }
}

/// Issue 42 item 3, where the kernel names every card: KFD's `unique_id` is the identity
/// hy-smi's `Unique ID` reports (the HSA `Uuid` rocminfo prints is built from it), so a
/// failing hy-smi leaves every DCU and its UUID as the good pass had them, and says why.
#[test]
fn a_failing_hy_smi_leaves_the_seats_of_the_good_pass_and_names_the_tool() {
    let good = detect_in(&host("hygon-4x-k100ai"), DetectOptions::default()).unwrap();
    assert_eq!(good.accelerators.len(), 4);
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("hygon-4x-k100ai", "hy-smi", failure);
        let section = match detect_in(dir.path(), short()) {
            Ok(section) => section,
            Err(e) => panic!("{failure}: {e}"),
        };
        assert_eq!(seats(&section), seats(&good), "{failure}");
        assert!(
            section
                .notes
                .iter()
                .any(|n| n.contains("hy-smi") && n.contains(says(failure))),
            "{failure}: {:?}",
            section.notes
        );
    }
}

/// Removes every Hygon KFD node's `unique_id` line: a driver whose topology names no card.
fn without_kfd_unique_ids(dir: &Path) {
    let nodes = dir.join("root/sys/class/kfd/kfd/topology/nodes");
    for node in std::fs::read_dir(&nodes).unwrap() {
        let path = node.unwrap().path().join("properties");
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.starts_with("unique_id "))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, kept).unwrap();
    }
}

/// Where the kernel does not name the cards, hy-smi's answer is the only identity: a failing
/// hy-smi is then a pass not measured, never DCUs dropped or DCUs without an identity.
#[test]
fn without_kfd_unique_ids_a_failing_hy_smi_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded("hygon-4x-k100ai");
    without_kfd_unique_ids(dir.path());
    let good = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(good.accelerators.len(), 4, "hy-smi names them all");
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("hygon-4x-k100ai", "hy-smi", failure);
        without_kfd_unique_ids(dir.path());
        let detection = detect_in(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(
            reason.contains("hy-smi") && reason.contains(says(failure)),
            "{failure}: {reason}"
        );
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}
