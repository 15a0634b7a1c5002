//! The detector over the recorded Ascend hosts (`testdata/hosts/ascend-*`): each layout's
//! chips with their physical id, card id and chip index, identity from the die id, V1 and V2
//! decided from what the host answers, and the passes that fail (a missing, hanging or
//! uninitialised `npu-smi`) failing rather than answering zero NPUs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accel_ascend::detector::{self, DetectOptions, Generation, Note};
use accel_ascend::health::ChipName;
use accel_ascend::product::{BoardClass, Unresolved};
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
    // The recording holds no `-t health` answer: every chip's state is unknown, and said so.
    assert_eq!(
        section.notes,
        [
            Note::Generation(Generation::V1).to_string(),
            Note::HealthUnread {
                chips: 8,
                first: ChipName { npu: 0, chip: 0 }
            }
            .to_string()
        ]
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
    // Its boards print no Main Board ID: no product form, no topology file, and a note.
    assert_eq!(a.product_type, None);
    assert_eq!(
        section.notes,
        [
            Note::Generation(Generation::V2).to_string(),
            Note::HealthUnread {
                chips: 2,
                first: ChipName { npu: 0, chip: 0 }
            }
            .to_string(),
            // No spod-info is recorded: the replay answers it as a program not installed.
            Note::SuperPodUnread {
                chips: 2,
                first: ChipName { npu: 0, chip: 0 }
            }
            .to_string(),
            Note::NoTopology {
                npus: 2,
                first: ChipName { npu: 0, chip: 0 },
                why: Unresolved::NoMainBoard.to_string(),
            }
            .to_string()
        ]
    );
}

/// Addendum A1: the 950's tool takes no `-c`, so its NPUs are asked `-i <NPU ID>` alone, and its
/// chip map prints the physical id (`Chip Phy-ID`) beside a slot and no logic id (its NPU ID
/// is the logic id).
#[test]
fn the_950_is_asked_without_c_and_its_map_gives_the_physical_ids() {
    let dir = copy_host("ascend-950pr-v2-remapped");
    // Were the V1 form asked, this would fail the board query and the pass.
    std::fs::remove_dir_all(dir.path().join("commands/board-0-0")).unwrap();
    std::fs::remove_dir_all(dir.path().join("commands/board-1-0")).unwrap();
    // And the physical ids come from the map, not from phyid-remap.
    for n in ["phyid-0-0", "phyid-1-0"] {
        std::fs::remove_dir_all(dir.path().join("commands").join(n)).unwrap();
    }
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(slots(&section), [[4, 0, 0], [5, 1, 0]]);
}

/// Addendum A4 on the A3 server 40 of a 384-NPU super-pod: every die's `-t spod-info` (`-i
/// <card> -c <chip>`; devices 0, 1, 10, 11 and 12 the real captures) is its `superPod`, the
/// SDID unpacking to the server and device the die is.
#[test]
fn an_a3_dies_super_pod_facts_are_its_super_pod() {
    let section = detect("ascend-a3-server40-spod");
    assert_eq!(section.accelerators.len(), 16);
    let pods: Vec<_> = section
        .accelerators
        .iter()
        .map(|a| a.super_pod.unwrap())
        .collect();
    for (device, pod) in pods.iter().enumerate() {
        assert_eq!(
            (pod.size, pod.id, pod.server_index),
            (Some(384), Some(0), Some(40))
        );
        let parts = accel_ascend::npusmi::sdid_parts(pod.sdid.unwrap());
        assert_eq!((parts.server, parts.device), (40, device as u32));
        assert_eq!((pod.chassis_id, pod.pod_type), (None, None));
    }
    assert_eq!(
        pods[10].sdid,
        Some(169_082_890),
        "the real capture of device 10"
    );
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.product_type.is_none()),
        "the product form is the 950's"
    );
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V1).to_string()],
        "every fact read"
    );
}

/// An SDID naming another server than the die's `Server Index` is a conflicting reading: both
/// are kept as printed, and a note says so.
#[test]
fn an_sdid_naming_another_server_is_noted() {
    let dir = copy_host("ascend-a3-server40-spod");
    rewrite(dir.path(), "spod-0-0", "167772160", "16777216");
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(
        section.accelerators[0].super_pod.unwrap().sdid,
        Some(16_777_216)
    );
    assert!(
        section.notes.contains(
            &Note::SdidDisagrees {
                chip: ChipName { npu: 0, chip: 0 },
                sdid: 16_777_216,
                server_index: 40
            }
            .to_string()
        ),
        "{:?}",
        section.notes
    );
}

/// Spec §4.4, addendum A2–A4: a 950 server on an A+K mainboard (`0x23`) whose super-pod type is
/// 3 is a 16P server (`server-16p`); its super-pod facts are its `superPod`.
#[test]
fn a_950_server_reads_its_product_form_from_its_board_and_super_pod_type() {
    let section = detect("ascend-950-server-16p");
    assert_eq!(section.accelerators.len(), 16);
    for a in &section.accelerators {
        assert_eq!(a.product_type.as_deref(), Some("server-16p"));
        let pod = a.super_pod.unwrap();
        assert_eq!(
            (pod.size, pod.id, pod.server_index, pod.pod_type, pod.sdid),
            (Some(16), Some(0), Some(0), Some(3), None)
        );
    }
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V2).to_string()],
        "every fact read"
    );
}

/// Copies the 950 server and rewrites every NPU's `from` into `to` in `command-<npu>`.
fn server_950_with(command: &str, from: &str, to: &str) -> tempfile::TempDir {
    let dir = copy_host("ascend-950-server-16p");
    for npu in 0..16 {
        rewrite(dir.path(), &format!("{command}-{npu}"), from, to);
    }
    dir
}

/// What does not resolve to exactly one form names no topology file: the note says why, for
/// all 16 NPUs, and no `productType` is guessed.
#[test]
fn an_unreadable_or_conflicting_product_reading_names_no_form_and_says_why() {
    let cases = [
        // Super Pod Type 0: an 8P server, or MindCluster's "abnormal" default.
        (
            server_950_with(
                "spod",
                "Super Pod Type                 : 3",
                "Super Pod Type                 : 0",
            ),
            Unresolved::ZeroPodType { main_board: 0x23 },
        ),
        // The 2P card: 0x6a in the driver, 0x6b in MindCluster.
        (
            server_950_with("board", "0x23", "0x6a(2P)"),
            Unresolved::TwoPCard { main_board: 0x6a },
        ),
        (
            server_950_with("board", "0x23", "0x6b(2P)"),
            Unresolved::TwoPCard { main_board: 0x6b },
        ),
        // A pod type on a server board.
        (
            server_950_with(
                "spod",
                "Super Pod Type                 : 3",
                "Super Pod Type                 : 1",
            ),
            Unresolved::Conflict {
                main_board: 0x23,
                class: BoardClass::AplusK,
                said: "its Super Pod Type 1 is pod-1d".into(),
            },
        ),
        // No Main Board ID line.
        (
            server_950_with("board", "Main Board ID", "Main Board Id-less"),
            Unresolved::NoMainBoard,
        ),
        // No Super Pod Type line.
        (
            server_950_with("spod", "Super Pod Type", "Super Pod Kind"),
            Unresolved::NoPodType {
                main_board: 0x23,
                answered: true,
            },
        ),
    ];
    for (dir, why) in cases {
        let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
        assert!(
            section
                .accelerators
                .iter()
                .all(|a| a.product_type.is_none()),
            "{why}"
        );
        let note = Note::NoTopology {
            npus: 16,
            first: ChipName { npu: 0, chip: 0 },
            why: why.to_string(),
        }
        .to_string();
        assert!(section.notes.contains(&note), "{note}\n{:?}", section.notes);
    }
}

/// A spod query that fails leaves the server's form unresolved (never a guessed one) and its
/// super-pod unread, each said.
#[test]
fn a_failing_spod_query_leaves_the_form_unresolved_and_says_so() {
    let dir = copy_host("ascend-950-server-16p");
    for npu in 0..16 {
        let answer = dir.path().join(format!("commands/spod-{npu}"));
        std::fs::write(answer.join("stdout"), "Error parameter of -t\n").unwrap();
        std::fs::write(answer.join("status"), "255\n").unwrap();
    }
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.product_type.is_none() && a.super_pod.is_none())
    );
    let first = ChipName { npu: 0, chip: 0 };
    assert_eq!(
        section.notes,
        [
            Note::Generation(Generation::V2).to_string(),
            Note::SuperPodUnread { chips: 16, first }.to_string(),
            Note::NoTopology {
                npus: 16,
                first,
                why: Unresolved::NoPodType {
                    main_board: 0x23,
                    answered: false
                }
                .to_string()
            }
            .to_string()
        ]
    );
}

/// The 950 card (mainboard `0x68(1P)`) answers `-t spod-info` with its refusal (the manual's
/// line, on a failing exit): it is a 1P card, its form from the mainboard alone.
#[test]
fn a_950_card_is_named_by_its_mainboard_and_refuses_spod_info() {
    let dir = server_950_with("board", "0x23", "0x68(1P)");
    let refusal = std::fs::read_to_string(accel_testkit::shared_fixtures("ascend").join(
        "npu-smi/canndriver-950doc__atlas350-info-t-spod-info-not-supported-doc-example.txt",
    ))
    .unwrap();
    for npu in 0..16 {
        let answer = dir.path().join(format!("commands/spod-{npu}"));
        std::fs::write(answer.join("stdout"), &refusal).unwrap();
        std::fs::write(answer.join("status"), "255\n").unwrap();
    }
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    for a in &section.accelerators {
        assert_eq!(a.product_type.as_deref(), Some("card-1p"));
        assert_eq!(a.super_pod, None);
    }
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V2).to_string()]
    );
}

/// Addendum A3: board ids are read as a 950 mainboard's only when the PCI device id is the
/// 950's (`0xD806`): the board's own `PCI Device ID`, else the kernel's for the NPU's function.
/// Another generation's id (`0xD500`, a 310P, whose board ids reuse the same numbers) names no
/// form, and the note says so.
#[test]
fn the_pci_device_id_decides_whether_the_board_ids_are_a_950s() {
    let other = server_950_with(
        "board",
        "PCI Device ID                  : 0xD806",
        "PCI Device ID                  : 0xD500",
    );
    let section = detect_in(other.path(), DetectOptions::default()).unwrap();
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.product_type.is_none())
    );
    let note = Note::NoTopology {
        npus: 16,
        first: ChipName { npu: 0, chip: 0 },
        why: Unresolved::NotA950 {
            pci_device_id: 0xd500,
        }
        .to_string(),
    }
    .to_string();
    assert!(section.notes.contains(&note), "{note}\n{:?}", section.notes);

    // A board that prints no PCI device id: the kernel's says which generation it is.
    let silent = server_950_with("board", "PCI Device ID                  : 0xD806\n", "");
    let section = detect_in(silent.path(), DetectOptions::default()).unwrap();
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.product_type.as_deref() == Some("server-16p")),
        "{:?}",
        section.notes
    );
    for npu in 1..=16 {
        let device = silent.path().join(format!(
            "root/sys/bus/pci/devices/0000:{npu:02x}:00.0/device"
        ));
        std::fs::write(device, "0xd500\n").unwrap();
    }
    let section = detect_in(silent.path(), DetectOptions::default()).unwrap();
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.product_type.is_none())
    );
    assert!(section.notes.contains(&note), "{note}\n{:?}", section.notes);
}

/// Spec §4.4: a super-pod value of `0xffffffff` (`4294967295` as `%u` prints it) means "not a
/// member": it is no value, the others are kept; a record of nothing but that is no record.
#[test]
fn a_super_pod_value_of_all_ones_is_no_value() {
    let dir = copy_host("ascend-a3-server40-spod");
    rewrite(
        dir.path(),
        "spod-0-0",
        "Super Pod ID                   : 0",
        "Super Pod ID                   : 4294967295",
    );
    std::fs::write(
        dir.path().join("commands/spod-0-1/stdout"),
        "\tSDID                           : 4294967295\n\tSuper Pod Size                 : 4294967295\n\tSuper Pod ID                   : 4294967295\n\tServer Index                   : 4294967295\n",
    )
    .unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let pod = section.accelerators[0].super_pod.unwrap();
    assert_eq!(
        (pod.sdid, pod.size, pod.id, pod.server_index),
        (Some(167_772_160), Some(384), None, Some(40))
    );
    assert_eq!(section.accelerators[1].super_pod, None);
    assert_eq!(
        section.accelerators[2].super_pod.unwrap().id,
        Some(0),
        "the other dies as printed"
    );
    // An SDID and a server index of "not a member" are no readings to compare.
    assert_eq!(
        section.notes,
        [Note::Generation(Generation::V1).to_string()],
        "no SDID disagreement is made of two absent values"
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

/// A copy of `ascend-8x-910b2` whose `npu-smi info -t topo` prints `stdout`.
fn with_topology(stdout: &str) -> tempfile::TempDir {
    let dir = copy_host("ascend-8x-910b2");
    let command = dir.path().join("commands/topo");
    std::fs::create_dir(&command).unwrap();
    std::fs::write(command.join("argv"), "npu-smi\ninfo\n-t\ntopo\n").unwrap();
    std::fs::write(command.join("stdout"), stdout).unwrap();
    dir
}

#[test]
fn the_hccs_matrix_links_every_one_chip_npu_to_its_peers() {
    // The only capture of `-t topo` is of another 8-NPU host (8× 910B1, every pair HCCS); no
    // 910B2 capture exists, so it stands in for this host's answer.
    let capture = std::fs::read_to_string(
        accel_testkit::shared_fixtures("ascend")
            .join("npu-smi/arthurchiao__8x-910b1-info-t-topo-hccs.txt"),
    )
    .unwrap();
    let dir = with_topology(&capture);
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    for a in &section.accelerators {
        let peers: Vec<(u32, &str)> = a.peers.iter().map(|(p, w)| (*p, w.as_str())).collect();
        let want: Vec<(u32, &str)> = (0..8)
            .filter(|p| *p != a.index)
            .map(|p| (p, "HCCS"))
            .collect();
        assert_eq!(peers, want, "accelerator {}", a.index);
    }
    // Read as it was, nothing to say; the recording without the query says nothing either
    // (`eight_910b2_…`'s notes).
    assert!(
        !section.notes.iter().any(|n| n.contains("-t topo")),
        "{:?}",
        section.notes
    );
}

#[test]
fn a_topology_query_that_prints_no_matrix_is_a_note_and_one_refused_is_not() {
    let dir = with_topology(
        "Error parameter of -t\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
    );
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators.iter().all(|a| a.peers.is_empty()));
    let note = Note::Links(
        "npu-smi info -t topo: no NPU matrix in its output: first line \"Error parameter of -t\""
            .into(),
    );
    assert!(
        section.notes.contains(&note.to_string()),
        "{:?}",
        section.notes
    );
    assert_eq!(
        note.to_string(),
        "npu-smi info -t topo: no NPU matrix in its output: first line \"Error parameter of -t\": the NPUs' HCCS links are unknown, so a request for several NPUs is placed by NUMA node alone"
    );
    // The same text with an exit status: the tool refuses the query, the host offers no matrix.
    std::fs::write(dir.path().join("commands/topo/status"), "255\n").unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators.iter().all(|a| a.peers.is_empty()));
    assert!(
        !section.notes.iter().any(|n| n.contains("-t topo")),
        "{:?}",
        section.notes
    );
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

/// The labels of a recorded host's detection.
fn labels_of(name: &str) -> std::collections::BTreeMap<String, String> {
    accel_core::labels::labels(&accel_core::Inventory {
        manufacturers: vec![detect(name)],
    })
}

/// spec/ascend.md §1.6: the group id is `NormalizeName` of the chip name, the maker's prefix
/// dropped whether or not a separator follows it, on every generation: A3 prints its chips as
/// `Ascend910`, the 950 generation as `Ascend950PR`; the `.product` label keeps the chip name.
#[test]
fn every_generations_group_id_is_the_chip_name_without_the_makers_prefix() {
    let key = |id: &str| format!("acceleratable.feature.gpustack.ai/ascend-{id}");
    for (host, id, product, count) in [
        ("ascend-a3-2dies", "910", "Ascend910", "4"),
        ("ascend-950pr-v2", "950pr", "Ascend950PR", "2"),
        ("ascend-8x-910b2", "910b2", "910B2", "8"),
        ("ascend-8x-910a-npu-smi24", "910a", "910A", "8"),
        ("ascend-310p-2chips-gapped", "310p3", "310P3", "8"),
    ] {
        let labels = labels_of(host);
        assert_eq!(
            labels.get(&key(id)).map(String::as_str),
            Some("true"),
            "{host}: {labels:#?}"
        );
        assert_eq!(labels[&format!("{}.product", key(id))], product, "{host}");
        assert_eq!(labels[&format!("{}.count", key(id))], count, "{host}");
        assert!(
            !labels.keys().any(|k| k.contains("ascend-ascend")),
            "{host}: {labels:#?}"
        );
    }
}

/// Moves a copied host's toolkit and driver trees to the roots the variables name.
fn host_installed_elsewhere(name: &str) -> tempfile::TempDir {
    let dir = copy_host(name);
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("opt/cann")).unwrap();
    std::fs::rename(
        root.join("usr/local/Ascend/ascend-toolkit/latest/runtime"),
        root.join("opt/cann/8.5"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("opt/Ascend")).unwrap();
    std::fs::rename(
        root.join("usr/local/Ascend/driver"),
        root.join("opt/Ascend/driver"),
    )
    .unwrap();
    dir
}

/// spec/ascend.md §1.6 and §9: `ASCEND_TOOLKIT_HOME` is the toolkit's home
/// (`<it>/version.info`, then `<it>/share/info/runtime/version.info`) and `CANN_HOME` the
/// install root the driver's tree is under; both host paths, read under the host root.
#[test]
fn the_install_roots_the_environment_names_give_the_versions() {
    let dir = host_installed_elsewhere("ascend-8x-910b2");
    let unset = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(unset.runtime_version, None, "nothing at the fixed paths");
    assert_eq!(unset.driver_version, None);
    let roots = accel_ascend::kernel::InstallRoots::from_vars(|name| match name {
        "ASCEND_TOOLKIT_HOME" => Some("/opt/cann/8.5".into()),
        "CANN_HOME" => Some("/opt/Ascend".into()),
        _ => None,
    });
    let set = detect_in(
        dir.path(),
        DetectOptions {
            roots,
            ..DetectOptions::default()
        },
    )
    .unwrap();
    assert_eq!(set.runtime_version.as_deref(), Some("8.5"));
    assert_eq!(set.driver_version.as_deref(), Some("25.5.1"));
    assert_eq!(set.accelerators.len(), 8);
}

/// The toolkit's second file is read where its home has no `version.info`; a home the variable
/// names is the only one read (the fixed paths are not fallen back to).
#[test]
fn the_toolkit_home_is_read_in_the_specs_order_and_alone() {
    let dir = copy_host("ascend-8x-910b2");
    let root = dir.path().join("root");
    let info = root.join("opt/cann/share/info/runtime");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("version.info"), "Version=9.1.RC1\n").unwrap();
    let under = |home: &str| {
        let home = home.to_string();
        let roots = accel_ascend::kernel::InstallRoots::from_vars(move |name| {
            (name == "ASCEND_TOOLKIT_HOME").then(|| home.clone())
        });
        detect_in(
            dir.path(),
            DetectOptions {
                roots,
                ..DetectOptions::default()
            },
        )
        .unwrap()
        .runtime_version
    };
    assert_eq!(under("/opt/cann").as_deref(), Some("9.1"));
    std::fs::write(root.join("opt/cann/version.info"), "Version=9.0.0\n").unwrap();
    assert_eq!(
        under("/opt/cann/").as_deref(),
        Some("9.0"),
        "version.info first"
    );
    assert_eq!(
        under("/opt/elsewhere"),
        None,
        "no fallback to the fixed paths"
    );
    // Unset: today's reads, the fixed toolkit paths.
    assert_eq!(
        detect_in(dir.path(), DetectOptions::default())
            .unwrap()
            .runtime_version
            .as_deref(),
        Some("8.5")
    );
}

/// `CANN_HOME` moves the driver's tree, and so where `npu-smi` and its libraries are looked for
/// on the host (spec §1.1 searches the driver's library under it); unset, the fixed tree.
#[test]
fn cann_home_moves_where_npu_smi_is_looked_for() {
    use accel_ascend::backend::{DEFAULT_TOOLS, tool_dirs};
    use accel_ascend::kernel::InstallRoots;
    assert_eq!(tool_dirs(&InstallRoots::default()), DEFAULT_TOOLS);
    let moved = tool_dirs(&InstallRoots {
        cann_home: Some("/opt/Ascend".into()),
        ..InstallRoots::default()
    });
    assert_eq!(moved.programs, ["npu-smi"]);
    assert_eq!(moved.install_dirs, ["/opt/Ascend/driver/tools"]);
    assert_eq!(
        moved.library_dirs,
        [
            "/opt/Ascend/driver/lib64",
            "/opt/Ascend/driver/lib64/common",
            "/opt/Ascend/driver/lib64/driver"
        ]
    );
}

/// The recorded host whose NPU 0 chip 0 answers `-t health` with the real `Alarm` capture.
const ALARM_HOST: &str = "ascend-8x-910a-npu0-health-alarm";

/// The reason the real capture gives: the state, the three codes, the three texts (the two
/// after blank labels too, HAZARDS 18) and what to do.
const ALARM_REASON: &str = "npu-smi reports Health Alarm for NPU 0 chip 0 (error codes A4025021 8C03A000 8C084E00: ascend_monitor adda heart beat lost error; node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally; node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.): drain the node, look the error codes up in Huawei's fault reference and reset the chip (`npu-smi set -t reset`) or reboot; it returns to service once npu-smi reports it OK or Warning";

/// Issue 43: `npu-smi info -t health`'s `Alarm` takes its chip out of service, naming every code
/// and text; the chips answering `OK` stay in, and nothing is noted when every chip was read.
#[test]
fn a_health_alarm_takes_its_chip_out_naming_every_code_and_text() {
    let section = detect(ALARM_HOST);
    assert_eq!(section.accelerators.len(), 8);
    let sick: Vec<(Vec<u32>, Vec<String>)> = section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| (a.physical_indexes.clone(), a.health_reasons.clone()))
        .collect();
    assert_eq!(sick, [(vec![0, 0, 0], vec![ALARM_REASON.to_string()])]);
    assert!(
        section.accelerators[1..]
            .iter()
            .all(|a| a.reported_faults == Some(Vec::new())),
        "OK is a reading: the others are stated healthy"
    );
    assert!(
        !section.notes.iter().any(|n| n.contains("-t health")),
        "{:?}",
        section.notes
    );
}

/// Where spec §7 is silent: `Warning` (a minor alarm) only warns — a note naming the chip, its
/// codes and texts; `Critical` is out like `Alarm`; a reading that clears (`OK`) brings the chip
/// back.
#[test]
fn a_warning_only_warns_critical_is_out_and_a_cleared_reading_brings_the_chip_back() {
    let dir = copy_host(ALARM_HOST);
    rewrite(dir.path(), "health-0-0", ": Alarm", ": Warning");
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators.iter().all(|a| a.healthy));
    let warning = Note::HealthWarning {
        chip: ChipName { npu: 0, chip: 0 },
        detail: "error codes A4025021 8C03A000 8C084E00: ascend_monitor adda heart beat lost error; node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally; node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.".into(),
    };
    assert!(
        section.notes.contains(&warning.to_string()),
        "{:?}",
        section.notes
    );
    assert!(
        warning
            .to_string()
            .starts_with("NPU 0 chip 0: npu-smi reports Health Warning (error codes A4025021")
    );

    rewrite(dir.path(), "health-0-0", ": Warning", ": Critical");
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(!section.accelerators[0].healthy);
    assert!(
        section.accelerators[0].health_reasons[0].starts_with("npu-smi reports Health Critical for NPU 0 chip 0 (error codes A4025021 8C03A000 8C084E00: "),
        "{:?}",
        section.accelerators[0].health_reasons
    );

    // The alarm clears: npu-smi answers OK (no codes), and the chip is back.
    let ok = std::fs::read_to_string(dir.path().join("commands/health-1-0/stdout")).unwrap();
    std::fs::write(dir.path().join("commands/health-0-0/stdout"), ok).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators.iter().all(|a| a.healthy));
}

/// A health query that fails (any of the four ways) or that says nothing (`UNKNOWN`) is a note,
/// and the chip's health is unknown — not a healthy reading: the daemon keeps the last one, so a
/// chip out of service stays out while its tool does not answer.
#[test]
fn a_failing_health_query_leaves_the_chips_health_unknown_never_healthy() {
    let sick = detect(ALARM_HOST);
    for failure in ToolFailure::ALL {
        let dir = copy_host(ALARM_HOST);
        fail_commands(dir.path(), "npu-smi", failure, |argv| {
            argv.iter().any(|a| a == "health") && argv.get(5).map(String::as_str) == Some("0")
        });
        let section = detect_in(dir.path(), short()).unwrap();
        let chip = &section.accelerators[0];
        assert_eq!(chip.reported_faults, None, "{failure}: no reading");
        let unread = Note::HealthUnread {
            chips: 1,
            first: ChipName { npu: 0, chip: 0 },
        };
        assert!(
            section.notes.contains(&unread.to_string()),
            "{failure}: {:?}",
            section.notes
        );
        // What the daemon does with it: the last reading (out of service) stands.
        let mut now = accel_core::Inventory {
            manufacturers: vec![section],
        };
        now.keep_known(&accel_core::Inventory {
            manufacturers: vec![sick.clone()],
        });
        let mut chip = now.manufacturers[0].accelerators[0].clone();
        accel_core::health::assess(&mut chip, &[]);
        assert_eq!(chip.health_reasons, [ALARM_REASON], "{failure}");
    }

    let dir = copy_host(ALARM_HOST);
    rewrite(dir.path(), "health-0-0", ": Alarm", ": UNKNOWN");
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators[0].reported_faults, None);
    assert!(
        section.notes.contains(
            &Note::HealthUnread {
                chips: 1,
                first: ChipName { npu: 0, chip: 0 }
            }
            .to_string()
        ),
        "{:?}",
        section.notes
    );
}

/// The health query is asked per chip in the driver's addressing: V1 by `-i <npu> -c <chip>`
/// (the alarm host's recordings), the 950 (V2, no `-c`) by `-i <npu>` — here answered for NPU 0
/// with the 950 manual's `Health : OK` example; a chip no recording answers is noted unread.
#[test]
fn the_health_query_is_asked_in_each_generations_addressing() {
    let dir = copy_host("ascend-950pr-v2");
    let answer = dir.path().join("commands/health-0");
    std::fs::create_dir_all(&answer).unwrap();
    std::fs::write(answer.join("argv"), "npu-smi\ninfo\n-t\nhealth\n-i\n0\n").unwrap();
    std::fs::copy(
        accel_testkit::shared_fixtures("ascend")
            .join("npu-smi/canndriver-950doc__atlas350-info-t-health-i0-doc-example.txt"),
        answer.join("stdout"),
    )
    .unwrap();
    let v2 = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(v2.accelerators[0].reported_faults, Some(Vec::new()));
    assert_eq!(v2.accelerators[1].reported_faults, None);
    assert!(
        v2.notes.contains(
            &Note::HealthUnread {
                chips: 1,
                first: ChipName { npu: 1, chip: 0 }
            }
            .to_string()
        ),
        "{:?}",
        v2.notes
    );
    let v1 = detect("ascend-310p-2chips-gapped");
    assert!(
        v1.accelerators
            .iter()
            .all(|a| a.healthy && a.reported_faults.is_none())
    );
}

/// Issue 43 item 5: doctor says which health sources it read on the node, a row each — the
/// health state naming the chip it takes out, ECC, and the kernel log it does not watch.
#[test]
fn doctor_names_each_health_source_and_the_chip_it_takes_out() {
    use accel_backend::doctor::Status;
    let doctor = |dir: &Path| {
        let host = FsHost::new(dir.join("root"));
        let commands = RecordedCommands::load(dir).unwrap();
        accel_ascend::doctor::run(&host, &commands, Deadlines::default(), "/lib")
    };
    let checks = doctor(&host(ALARM_HOST));
    let row = |checks: &[accel_backend::doctor::Check], name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} row: {checks:?}"))
            .clone()
    };
    let state = row(&checks, "health-state");
    assert_eq!(state.status, Status::Warn);
    assert!(
        state.reason.starts_with(
            "npu-smi info -t health read for 8 of 8 chip(s); out of service: NPU 0 chip 0 Alarm (error codes A4025021 8C03A000 8C084E00: "
        ),
        "{}",
        state.reason
    );
    let ecc = row(&checks, "health-ecc");
    assert_eq!(
        (ecc.status, ecc.reason.as_str()),
        (
            Status::Ok,
            "npu-smi info -t ecc read for 8 of 8 chip(s), ECC enabled on 8: no error counted"
        )
    );
    assert_eq!(row(&checks, "health-kernel-log").status, Status::Ok);

    // A host that records no health answer: the row says none was read, and why.
    let checks = doctor(&host("ascend-8x-910a-npu-smi24"));
    let state = row(&checks, "health-state");
    assert_eq!(state.status, Status::Warn);
    assert_eq!(
        state.reason,
        "npu-smi info -t health read for 0 of 8 chip(s); not read for 8 chip(s) (first NPU 0 chip 0: npu-smi info -t health -i 0 -c 0: npu-smi: not found)"
    );
}

/// The A3 super-pod facts reach the `Devices` record, per accelerator, in its wire form.
#[test]
fn the_devices_record_carries_each_dies_super_pod() {
    let inventory = accel_core::inventory::Inventory {
        manufacturers: vec![detect("ascend-a3-server40-spod")],
    };
    let spec = accel_core::devices::DevicesSpec::from_inventory(&inventory, |_| None);
    let accelerators = &spec.groups[0].accelerators;
    assert_eq!(accelerators.len(), 16);
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        json["groups"][0]["accelerators"][1]["superPod"],
        serde_json::json!({"sdid": 167_837_697, "size": 384, "id": 0, "serverIndex": 40})
    );
    let server = accel_core::inventory::Inventory {
        manufacturers: vec![detect("ascend-950-server-16p")],
    };
    let spec = accel_core::devices::DevicesSpec::from_inventory(&server, |_| None);
    assert_eq!(
        serde_json::to_value(&spec).unwrap()["groups"][0]["accelerators"][0]["superPod"],
        serde_json::json!({"size": 16, "id": 0, "serverIndex": 0, "type": 3})
    );
}
