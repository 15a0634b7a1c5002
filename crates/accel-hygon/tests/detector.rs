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

/// The note of a recording that holds no `hy-smi --healthcheck` answer (every recorded host
/// but the one made for issue 43): the health check is unknown, and said so.
fn unchecked() -> String {
    detector::Note::HealthcheckUnread.to_string()
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
    assert_eq!(section.notes, [unchecked()]);
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
        vec![
            detector::Note::MigEnabled { cards: 8 }.to_string(),
            unchecked()
        ]
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

/// Spec §1.2 and §1.5 ("mode unreadable"): a registry that cannot be read leaves the node's
/// multi-instance mode unknown, and then neither slicing family is published — no logical
/// slices, no partitions — while the cards keep their whole-card identity
/// (docs/manufacturers/hygon.md, "MIG mode").
#[test]
fn an_unreadable_registry_leaves_the_mode_unknown_and_publishes_no_slicing_family() {
    use accel_backend::slicing::SlicingLibrary;
    use accel_hygon::backend::VdevLedger;
    let section = detect_in(
        &host("hygon-4x-k100ai-registry-unreadable"),
        DetectOptions::default(),
    )
    .unwrap();
    assert_eq!(section.accelerators.len(), 4);
    assert_eq!(
        section.notes,
        [
            "could not read the node's multi-instance mode (/etc/dmi_mig_config: Not a directory (os error 20)), so neither slicing family is published".to_string(),
            unchecked()
        ]
    );
    for a in &section.accelerators {
        assert_eq!(a.mig_mode, None, "{:?}", a.uuid);
        assert_eq!(
            a.grantable,
            Grantable::Whole,
            "whole cards are still served"
        );
        assert!(a.partition_profiles.is_empty());
    }
    assert_eq!(
        VdevLedger.runtime_major(&section),
        None,
        "no logical slices where the mode is unknown"
    );
    // The same node with its registry readable (and empty: not in MIG mode) slices.
    let readable = detect_in(&host("hygon-4x-k100ai"), DetectOptions::default()).unwrap();
    assert_eq!(VdevLedger.runtime_major(&readable), Some(0));
    // The labels are the readable node's: the cards are still whole cards.
    let labels = |section| {
        accel_core::labels::labels(&accel_core::Inventory {
            manufacturers: vec![section],
        })
    };
    assert_eq!(labels(section), labels(readable));
}

/// A copy of the K100_AI host with the DTK's version file at `<dir>/.info/version` under the
/// host root.
fn host_with_dtk_at(dir: &str, version: &str) -> tempfile::TempDir {
    let copy = accel_testkit::copy_recorded("hygon-4x-k100ai");
    let info = copy
        .path()
        .join("root")
        .join(dir.trim_start_matches('/'))
        .join(".info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("version"), format!("{version}\n")).unwrap();
    copy
}

fn runtime_under(dir: &Path, home: accel_hygon::dtk::RocmHome) -> Option<String> {
    detect_in(
        dir,
        DetectOptions {
            rocm_home: home,
            ..DetectOptions::default()
        },
    )
    .unwrap()
    .runtime_version
}

/// Spec §1.1 and §1.4: the runtime version is read under `ROCM_HOME`, else `ROCM_PATH` (a host
/// path, read under the host root): `<home>/.info/version…`, then `dirname(home)/.info/…`;
/// neither set, the fixed `/opt/dtk`, `/opt/rocm` paths as before.
#[test]
fn the_rocm_home_the_environment_names_gives_the_runtime_version() {
    use accel_hygon::dtk::RocmHome;
    let copy = host_with_dtk_at("/opt/dtk-24.04.3", "24.04.3-rc1");
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        RocmHome::from_vars(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    };
    assert_eq!(
        runtime_under(copy.path(), vars(&[])),
        None,
        "unset: the fixed paths"
    );
    assert_eq!(
        runtime_under(copy.path(), vars(&[("ROCM_PATH", "/opt/dtk-24.04.3")])).as_deref(),
        Some("24.04")
    );
    // The home's parent is read after the home: a home one level below the install.
    assert_eq!(
        runtime_under(copy.path(), vars(&[("ROCM_HOME", "/opt/dtk-24.04.3/rocm")])).as_deref(),
        Some("24.04")
    );
    // ROCM_HOME wins over ROCM_PATH.
    assert_eq!(
        runtime_under(
            copy.path(),
            vars(&[
                ("ROCM_HOME", "/opt/nothing/here"),
                ("ROCM_PATH", "/opt/dtk-24.04.3")
            ])
        ),
        None
    );
    // Unset, the DTK's fixed home is read as before.
    let fixed = host_with_dtk_at("/opt/dtk", "25.04.1");
    assert_eq!(
        runtime_under(fixed.path(), RocmHome::default()).as_deref(),
        Some("25.04")
    );
}

/// Spec §1.3 step 9: `.family` is the HSA ASIC family name, absent when unknown. It is known
/// only for a gfx target whose family the kernel fixes (a Z100's `gfx906`: Arctic Islands);
/// the K100's `gfx928` and the BW's `gfx936`, Hygon's own, have none in any source.
#[test]
fn the_family_label_is_the_asic_family_only_where_it_is_known() {
    let labels = |section| {
        accel_core::labels::labels(&accel_core::Inventory {
            manufacturers: vec![section],
        })
    };
    let k100 = detect_in(&host("hygon-4x-k100ai"), DetectOptions::default()).unwrap();
    assert!(k100.accelerators.iter().all(|a| a.architecture.is_none()));
    assert!(
        !labels(k100).keys().any(|k| k.ends_with(".family")),
        "gfx928: no family"
    );
    let copy = accel_testkit::copy_recorded("hygon-4x-k100ai");
    let nodes = copy.path().join("root/sys/class/kfd/kfd/topology/nodes");
    for node in std::fs::read_dir(&nodes).unwrap() {
        let properties = node.unwrap().path().join("properties");
        let text = std::fs::read_to_string(&properties).unwrap();
        std::fs::write(
            &properties,
            text.replace("gfx_target_version 90208", "gfx_target_version 90006"),
        )
        .unwrap();
    }
    let z100_like = detect_in(copy.path(), DetectOptions::default()).unwrap();
    let a = &z100_like.accelerators[0];
    assert_eq!(a.compute_capability.as_deref(), Some("gfx906"));
    assert_eq!(a.architecture.as_deref(), Some("Arctic Islands"));
    assert_eq!(
        labels(z100_like)["acceleratable.feature.gpustack.ai/hygon-k100.family"],
        "Arctic-Islands"
    );
}

/// The recorded host whose DCU 2 counts uncorrectable UMC errors, with a health check for all.
const SICK_HOST: &str = "hygon-4x-k100ai-dcu2-umc-uncorrectable";

/// Issue 43: on the recorded sick host, DCU 2 is out of service by its UMC counter, the others
/// are in; the health check names every DCU `Healthy`, so there is nothing to note.
#[test]
fn the_sick_host_takes_dcu_2_out_and_reads_every_health_check() {
    let section = detect_in(&host(SICK_HOST), DetectOptions::default()).unwrap();
    let health: Vec<(bool, Vec<String>)> = section
        .accelerators
        .iter()
        .map(|a| (a.healthy, a.health_reasons.clone()))
        .collect();
    assert_eq!(
        health,
        [
            (true, vec![]),
            (true, vec![]),
            (
                false,
                vec!["2 uncorrectable volatile ECC errors".to_string()]
            ),
            (true, vec![]),
        ]
    );
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.reported_faults == Some(Vec::new())),
        "every DCU's health check read Healthy"
    );
    assert!(section.notes.is_empty(), "{:?}", section.notes);
}

/// Rewrites the sick host's health check, replacing `from` by `to`.
fn healthcheck(dir: &Path, from: &str, to: &str) {
    let path = dir.join("commands/hy-smi-healthcheck/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{text}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// Addendum H5: `hy-smi --healthcheck`, joined by bus id, takes out a DCU whose status is
/// anything but `Healthy` (Hygon's own exporter counts only `Healthy` as healthy), quoting the
/// word; a reading that clears brings it back. (`Warning` is a word made up for the test: no
/// status but `Healthy` has been seen.)
#[test]
fn a_health_check_other_than_healthy_takes_its_dcu_out_until_it_clears() {
    let dir = accel_testkit::copy_recorded(SICK_HOST);
    healthcheck(
        dir.path(),
        "0000:0c:00.0         : Healthy",
        "0000:0c:00.0         : Warning",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let dcu1 = &section.accelerators[1];
    assert_eq!(
        dcu1.bus_id.map(|b| b.sysfs()).as_deref(),
        Some("0000:0c:00.0")
    );
    assert_eq!(
        dcu1.health_reasons,
        [
            "hy-smi --healthcheck reports \"Warning\" for DCU 0000:0c:00.0: drain the node and check the card with `hy-smi --healthcheck` and `hy-smi --showrasinfo`; it returns to service once hy-smi reports it Healthy"
        ]
    );
    healthcheck(
        dir.path(),
        "0000:0c:00.0         : Warning",
        "0000:0c:00.0         : Healthy",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators[1].healthy);
}

/// A health check that fails (any of the four ways) or names no line for a DCU leaves that DCU's
/// health check unknown — a note, never a healthy reading (`reported_faults` stays `None`, so
/// the daemon keeps the last reading); the UMC counter still judges on its own.
#[test]
fn a_failing_or_silent_health_check_leaves_the_dcus_unknown_never_healthy() {
    for failure in ToolFailure::ALL {
        let dir = accel_testkit::copy_recorded(SICK_HOST);
        accel_testkit::failing_tool::fail_commands(dir.path(), "hy-smi", failure, |argv| {
            argv.iter().any(|a| a == "--healthcheck")
        });
        let section = detect_in(dir.path(), short()).unwrap();
        assert_eq!(section.accelerators.len(), 4, "{failure}");
        assert!(
            section
                .accelerators
                .iter()
                .all(|a| a.reported_faults.is_none()),
            "{failure}"
        );
        assert!(
            !section.accelerators[2].healthy,
            "{failure}: the UMC counter still judges"
        );
        assert!(
            section.notes.contains(&unchecked()),
            "{failure}: {:?}",
            section.notes
        );
    }
    let dir = accel_testkit::copy_recorded(SICK_HOST);
    healthcheck(
        dir.path(),
        "HCU[3]          : Bus Id : 0000:8d:00.0         : Healthy\n",
        "",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators[3].reported_faults, None);
    assert_eq!(
        section.notes,
        [detector::Note::HealthcheckMissing {
            dcus: 1,
            first: "0000:8d:00.0".into()
        }
        .to_string()]
    );
}

/// Issue 43 item 5: doctor says which health sources it read on the node, a row each — the UMC
/// counter naming the DCU it takes out, the health check, and the kernel log it does not watch.
#[test]
fn doctor_names_each_health_source_and_the_dcu_it_takes_out() {
    use accel_backend::doctor::{Check, Status};
    let doctor = |name: &str| {
        let dir = host(name);
        let files = FsHost::new(dir.join("root"));
        let commands = RecordedCommands::load(&dir).unwrap();
        accel_hygon::doctor::run(&files, &commands, Deadlines::default())
    };
    let row = |checks: &[Check], name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} row: {checks:?}"))
            .clone()
    };
    let checks = doctor(SICK_HOST);
    let umc = row(&checks, "health-umc-ecc");
    assert_eq!(
        (umc.status, umc.reason.as_str()),
        (
            Status::Warn,
            "ras/umc_err_count read for 4 of 4 DCU(s); out of service: DCU 0000:8a:00.0 (2 uncorrectable)"
        )
    );
    let check = row(&checks, "health-check");
    assert_eq!(
        (check.status, check.reason.as_str()),
        (
            Status::Ok,
            "hy-smi --healthcheck read for 4 of 4 DCU(s): every DCU Healthy"
        )
    );
    assert_eq!(row(&checks, "health-kernel-log").status, Status::Ok);

    // The host that records neither: both rows say so.
    let checks = doctor("hygon-4x-k100ai");
    let umc = row(&checks, "health-umc-ecc");
    assert_eq!(umc.status, Status::Warn);
    assert!(
        umc.reason
            .starts_with("ras/umc_err_count read for 0 of 4 DCU(s): "),
        "{}",
        umc.reason
    );
    let check = row(&checks, "health-check");
    assert_eq!(
        (check.status, check.reason.as_str()),
        (
            Status::Warn,
            "not read: hy-smi --healthcheck: hy-smi: not found"
        )
    );
}

/// Addendum H3: a MIG node's live instances are its registry's `ci/*.conf` files, read in
/// Hygon's grammar and named as Hygon's library names them (`g` shader-engine units, memory
/// floored to GiB), each `MIG-<mig_uuid>`, its CUs the compute instance's, its memory the GPU
/// instance's.
#[test]
fn a_mig_nodes_live_instances_are_its_registry_files() {
    let section = detect_in(&host("hygon-8x-bw150-mig-4-live"), DetectOptions::default()).unwrap();
    type Row = (
        Option<u32>,
        Option<u32>,
        Option<String>,
        Option<u64>,
        Option<u32>,
    );
    let devices = |card: usize| -> Vec<Row> {
        section.accelerators[card]
            .mig_devices
            .iter()
            .map(|d| {
                (
                    d.gpu_instance_id,
                    d.compute_instance_id,
                    d.profile.clone(),
                    d.memory_mib,
                    d.multiprocessors,
                )
            })
            .collect()
    };
    let two = Some("2g.15gb".to_string());
    assert_eq!(
        devices(0),
        [
            (Some(3), Some(0), two.clone(), Some(16380), Some(20)),
            (Some(4), Some(0), two, Some(16380), Some(20))
        ]
    );
    assert_eq!(
        devices(1),
        [(
            Some(3),
            Some(0),
            Some("4g.31gb".into()),
            Some(32760),
            Some(40)
        )]
    );
    assert_eq!(
        devices(2),
        [(
            Some(3),
            Some(0),
            Some("8g.63gb".into()),
            Some(65520),
            Some(80)
        )]
    );
    assert!(devices(3).is_empty());
    assert_eq!(
        section.accelerators[2].mig_devices[0].uuid.as_deref(),
        Some("MIG-68796702-0003-0000-0000-000000000004")
    );
    // Its profiles are the listing's, whose names are Hygon's: all offered, no note.
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.partition_profiles.len() == 3)
    );
    assert_eq!(
        section.notes,
        vec![
            detector::Note::MigEnabled { cards: 8 }.to_string(),
            unchecked()
        ]
    );
}

/// A listing that names a profile otherwise than Hygon's library (`1g.16gb`: slices and a
/// rounded-up GiB, nvidia-smi's way) would publish a resource no instance of which is ever
/// recognised: withheld, with a note naming Hygon's name — the live instance's where there is
/// one, else the shader-engine count the name must start with.
#[test]
fn a_listed_profile_name_that_is_not_hygons_is_withheld_and_said() {
    let dir = tempfile::tempdir().unwrap();
    accel_testkit::copy_tree(&host("hygon-8x-bw150-mig-4-live"), dir.path()).unwrap();
    let lgip = dir.path().join("commands/mig-lgip/stdout");
    let text = std::fs::read_to_string(&lgip)
        .unwrap()
        .replace("MIG 2g.15gb", "MIG 1g.16gb");
    std::fs::write(&lgip, text).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    for a in &section.accelerators {
        let names: Vec<&str> = a
            .partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["4g.31gb", "8g.63gb"], "card {}", a.index);
    }
    let note = |bus: &str, hygons: &str| {
        detector::Note::NotHygonsName {
            bus: bus.into(),
            name: "1g.16gb".into(),
            hygons: hygons.into(),
        }
        .to_string()
    };
    assert!(
        section.notes.contains(&note("0000:0f:00.0", "2g.15gb")),
        "DCU 0 holds live 2g.15gb instances: {:?}",
        section.notes
    );
    assert!(
        section.notes.contains(&note("0000:34:00.0", "2g.<GB>gb")),
        "DCU 1 holds none: {:?}",
        section.notes
    );
}
