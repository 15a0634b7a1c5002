//! The detector over the recorded AMD hosts (`testdata/hosts/amd-*`): the facts joined by PCI
//! address, the vendor-tool fallbacks, a partitioned board served not, another vendor's KFD
//! nodes not AMD's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accel_amd::detector::{self, DetectOptions};
use accel_core::inventory::{DetectError, Grantable};
use accel_core::ledger::placement::{Request, prefer};
use accel_core::ledger::{Family, Ledger, Policy, Seat};
use accel_host::{FsHost, RecordedCommands};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool};

fn host(name: &str) -> PathBuf {
    accel_testkit::recorded_host(name)
}

fn detect_in(dir: &Path, options: DetectOptions) -> accel_core::ManufacturerInventory {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options).unwrap()
}

fn copy(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn amd_smi_names_the_mi300x_boards_by_their_asic_serial() {
    let section = detect_in(&host("amd-8x-mi300x"), DetectOptions::default());
    assert_eq!(section.accelerators.len(), 8);
    let a = &section.accelerators[0];
    assert_eq!(a.uuid.as_deref(), Some("GPU-28246ce5673b4aa0"));
    assert_eq!(a.product.as_deref(), Some("AMD Instinct MI300X"));
    assert_eq!(a.memory_mib, Some(196_592));
    assert_eq!(a.cores, Some(304));
    assert_eq!(a.compute_capability.as_deref(), Some("gfx942"));
    assert_eq!(section.driver_version.as_deref(), Some("6.16.13"));
    assert_eq!(section.runtime_version.as_deref(), Some("7.2"));
    let geometry = a.compute_geometry.clone().unwrap();
    assert_eq!(
        (geometry.xccs, geometry.compute_units),
        (Some(8), Some(304))
    );
    let drm = a.drm.unwrap();
    assert_eq!((drm.card, drm.render), (Some(1), Some(128)));
}

#[test]
fn a_partitioned_board_is_listed_once_and_feeds_nothing() {
    let section = detect_in(&host("amd-mi300x-cpx"), DetectOptions::default());
    assert_eq!(section.accelerators.len(), 8);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.grantable == Grantable::Nothing)
    );
    let last = section.accelerators.last().unwrap();
    assert_eq!(last.partitioning.as_ref().unwrap().partitions, 7);
    assert_eq!(
        last.partitioning.as_ref().unwrap().compute_mode.as_deref(),
        Some("CPX")
    );
    let ids: std::collections::BTreeSet<_> = section
        .accelerators
        .iter()
        .map(|a| a.uuid.clone())
        .collect();
    assert_eq!(ids.len(), 8, "no two accelerators share an id");
    assert!(
        section
            .notes
            .iter()
            .any(|n| n.contains("split into 8 compute partitions (CPX)"))
    );
}

#[test]
fn rocm_smi_answers_where_amd_smi_is_missing_from_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let copied = dir.path().join("h");
    copy(&host("amd-rocm-smi-only-rx7800xt"), &copied);
    let section = detect_in(&copied, DetectOptions::default());
    assert_eq!(
        section.accelerators[0].product.as_deref(),
        Some("Navi 32 [Radeon RX 7700 XT / 7800 XT]")
    );
    // The image's amd-smi wrapper on a host without amd-smi exits 127: rocm-smi still answers.
    let cmd = copied.join("commands/amd-smi-static");
    std::fs::create_dir_all(&cmd).unwrap();
    std::fs::write(cmd.join("argv"), "amd-smi\nstatic\n--json\n").unwrap();
    std::fs::write(cmd.join("status"), "127\n").unwrap();
    let section = detect_in(&copied, DetectOptions::default());
    assert_eq!(
        section.accelerators[0].uuid.as_deref(),
        Some("GPU-5c88007d760374f3")
    );
    assert_eq!(
        section.accelerators[0].product.as_deref(),
        Some("Navi 32 [Radeon RX 7700 XT / 7800 XT]")
    );
    assert!(
        section
            .notes
            .iter()
            .any(|n| n == "amd-smi is not installed on the host")
    );
}

#[test]
fn kfd_nodes_of_another_vendor_are_not_amds() {
    // A Hygon DCU runs a fork of this stack: its KFD nodes carry its own vendor id.
    let options = DetectOptions {
        deadlines: accel_backend::Deadlines::default(),
        vendor_ids: vec![0x1d94],
    };
    let section = detect_in(&host("amd-8x-mi210-xgmi"), options);
    assert!(section.accelerators.is_empty());
}

/// Each accelerator's peer indexes, every one of them recorded as `XGMI`.
fn xgmi_peers(section: &accel_core::ManufacturerInventory) -> Vec<Vec<u32>> {
    section
        .accelerators
        .iter()
        .map(|a| {
            assert!(a.peers.values().all(|w| w == "XGMI"), "{:?}", a.peers);
            a.peers.keys().copied().collect()
        })
        .collect()
}

#[test]
fn the_mi210_hives_are_xgmi_peers_and_a_pair_request_stays_in_one() {
    // KFD puts the eight boards in two hives (`hive_id`): 0-3 and 4-7 in bus order.
    let section = detect_in(&host("amd-8x-mi210-xgmi"), DetectOptions::default());
    let hives: Vec<Vec<u32>> = (0..8u32)
        .map(|me| {
            let first = me / 4 * 4;
            (first..first + 4).filter(|p| *p != me).collect()
        })
        .collect();
    assert_eq!(xgmi_peers(&section), hives);

    // The recording's NUMA nodes are assembled (0-3 on one, 4-7 on the other), so the hive is
    // shown on one node: every board on NUMA 0, a pair among 3, 4 and 5 is the hive pair 4-5,
    // not 3-4 by position.
    let seats = section.accelerators.iter().map(|a| Seat {
        numa_node: Some(0),
        ..Seat::from_accelerator(a, 0)
    });
    let ledger = Ledger::new(seats, Policy::default());
    let pair = prefer(
        &ledger,
        &Request {
            family: Family::Exclusive,
            candidates: &[3, 4, 5],
            must_include: &[],
            size: 2,
            slice_units: 0,
            cores_percentage: None,
        },
    );
    assert_eq!(pair, [4, 5]);
}

#[test]
fn without_a_hive_id_the_kfd_links_alone_name_the_peers() {
    // The recorded tree keeps the links of one GPU node (node 2, board 3): they name boards 0-2.
    let dir = tempfile::tempdir().unwrap();
    copy(&host("amd-8x-mi210-xgmi"), &dir.path().join("h"));
    let nodes = dir.path().join("h/root/sys/class/kfd/kfd/topology/nodes");
    for node in std::fs::read_dir(&nodes).unwrap() {
        let properties = node.unwrap().path().join("properties");
        let text = std::fs::read_to_string(&properties).unwrap();
        let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("hive_id")).collect();
        std::fs::write(&properties, kept.join("\n") + "\n").unwrap();
    }
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    let mut want = vec![Vec::new(); 8];
    want[3] = vec![0, 1, 2];
    assert_eq!(xgmi_peers(&section), want);
}

#[test]
fn no_driver_is_no_accelerator_and_no_error() {
    let section = detect_in(&host("amd-no-driver"), DetectOptions::default());
    assert!(section.accelerators.is_empty());
}

/// A copy of recorded host `name` with `edit` applied to its command `command`'s stdout.
fn edited(name: &str, command: &str, edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy(&host(name), &dir.path().join("h"));
    let stdout = dir.path().join("h/commands").join(command).join("stdout");
    let text = std::fs::read_to_string(&stdout).unwrap();
    std::fs::write(&stdout, edit(text)).unwrap();
    dir
}

#[test]
fn a_bare_pci_id_or_a_placeholder_is_no_product_name_and_the_next_source_names_it() {
    // amd-smi's market name a bare device id: the board's name answers.
    let dir = edited("amd-8x-mi300x", "static", |t| {
        t.replace(
            r#""market_name": "AMD Instinct MI300X""#,
            r#""market_name": "0x74a1""#,
        )
    });
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    assert_eq!(
        section.accelerators[0].product.as_deref(),
        Some("AMD Instinct MI300X OAM")
    );
    // Both placeholders or ids, and no other source: no name (the model key is then the bare
    // manufacturer), never `0x1002`.
    let dir = edited("amd-8x-mi300x", "static", |t| {
        t.replace(
            r#""market_name": "AMD Instinct MI300X""#,
            r#""market_name": "0x1002""#,
        )
        .replace(
            r#""product_name": "AMD Instinct MI300X OAM""#,
            r#""product_name": "NA""#,
        )
    });
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    assert!(section.accelerators.iter().all(|a| a.product.is_none()));
    // rocm-smi's `Card Series` a bare id: its `Device Name` answers.
    let dir = edited("amd-rocm-smi-only-rx7800xt", "rocm-smi", |t| {
        t.replace(
            r#""Card Series": "Navi 32 [Radeon RX 7700 XT / 7800 XT]""#,
            r#""Card Series": "0x747e""#,
        )
        .replace(
            r#""Device Name": "Navi 32 [Radeon RX 7700 XT / 7800 XT]""#,
            r#""Device Name": "Navi 32""#,
        )
    });
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    assert_eq!(section.accelerators[0].product.as_deref(), Some("Navi 32"));
}

#[test]
fn an_inbox_drivers_kernel_banner_is_no_driver_version_in_any_source() {
    // `version --json` without the amdgpu field: the fallback is static's `driver.version`,
    // which on an inbox driver is the kernel's `/proc/version`.
    let banner = "Linux version 6.8.0-79-generic (buildd@lcy02-amd64-049) #79-Ubuntu SMP";
    let dir = edited("amd-8x-mi300x", "static", |t| {
        t.replace(
            r#""version": "6.16.13""#,
            &format!(r#""version": "{banner}""#),
        )
    });
    let version = dir.path().join("h/commands/version/stdout");
    let text = std::fs::read_to_string(&version).unwrap();
    std::fs::write(
        &version,
        text.replace(r#""amdgpu_version": "6.16.13","#, ""),
    )
    .unwrap();
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    assert_eq!(section.accelerators.len(), 8);
    assert_eq!(section.driver_version, None);
    // A dotted figure there is the driver's version.
    let dir = edited("amd-8x-mi300x", "version", |t| {
        t.replace(r#""amdgpu_version": "6.16.13","#, "")
    });
    let section = detect_in(&dir.path().join("h"), DetectOptions::default());
    assert_eq!(section.driver_version.as_deref(), Some("6.16.13"));
}

/// One budget across the pass (`accel_backend::detect::Budget`): an amd-smi that hangs spends
/// the pass's time, and the queries after it are not started past the snapshot deadline; the
/// kernel's facts still answer, with the note.
#[test]
fn a_hanging_amd_smi_spends_the_pass_and_the_rest_is_not_asked() {
    let dir = tempfile::tempdir().unwrap();
    let copied = dir.path().join("h");
    copy(&host("amd-8x-mi300x"), &copied);
    std::fs::write(copied.join("commands/static/delay-ms"), "60000").unwrap();
    let options = DetectOptions {
        deadlines: accel_backend::Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_millis(300),
        },
        ..DetectOptions::default()
    };
    let section = detect_in(&copied, options);
    assert_eq!(
        section.accelerators.len(),
        8,
        "the kernel's view still answers"
    );
    assert!(
        section.notes.iter().any(|n| n.contains("no answer within")),
        "{:?}",
        section.notes
    );
    assert!(
        section.notes.iter().any(|n| n.contains("ran out of its")),
        "{:?}",
        section.notes
    );
    // The version query was never started: the ROCm version is not amd-smi's.
    assert_eq!(
        section.runtime_version, None,
        "no amd-smi version, no ROCm version file"
    );
}

/// Deadlines short enough that a hanging tool costs the test a fraction of a second.
fn short() -> DetectOptions {
    DetectOptions {
        deadlines: accel_backend::Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_millis(600),
        },
        ..DetectOptions::default()
    }
}

fn detection_in(dir: &Path, options: DetectOptions) -> accel_core::Detection {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options)
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
        ToolFailure::Missing => "neither amd-smi nor rocm-smi is installed",
        ToolFailure::Hangs => "amd-smi static --json: no answer within",
        ToolFailure::ExitsNonZero => "amd-smi static --json: exited with status 1: Error: failed",
        ToolFailure::Unreadable => "amd-smi static --json: not JSON",
    }
}

/// Issue 42 item 3, where the kernel names every card: KFD's `unique_id` (and the DRM
/// device's) is the ASIC serial amd-smi reports, so a failing amd-smi leaves every board at its
/// index with its UUID, as the good pass had them, and the note says why.
#[test]
fn a_failing_amd_smi_leaves_the_seats_of_the_good_pass_and_names_the_tool() {
    let good = detect_in(&host("amd-8x-mi300x"), DetectOptions::default());
    assert_eq!(good.accelerators.len(), 8);
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("amd-8x-mi300x", "amd-smi", failure);
        let section = match detection_in(dir.path(), short()) {
            Ok(section) => section,
            Err(e) => panic!("{failure}: {e}"),
        };
        assert_eq!(seats(&section), seats(&good), "{failure}");
        assert!(
            section.notes.iter().any(|n| n.contains(says(failure))),
            "{failure}: {:?}",
            section.notes
        );
    }
}

/// Removes every unique id the kernel shows (KFD nodes' `unique_id` lines, the DRM devices'
/// `unique_id` files): a driver that names no board.
fn without_kernel_unique_ids(dir: &Path) {
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
    let devices = dir.join("root/sys/devices");
    let mut stack = vec![devices];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && entry.file_name() == "unique_id" {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
    }
}

/// Where the kernel does not name the boards, amd-smi's ASIC serial is the only identity: a
/// failing amd-smi is then a pass not measured, never boards without an identity in place of
/// the ones the good pass named.
#[test]
fn without_kernel_unique_ids_a_failing_amd_smi_is_a_pass_not_measured() {
    let dir = accel_testkit::copy_recorded("amd-8x-mi300x");
    without_kernel_unique_ids(dir.path());
    let good = detect_in(dir.path(), DetectOptions::default());
    assert!(
        good.accelerators.iter().all(|a| a.uuid.is_some()),
        "amd-smi names them"
    );
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("amd-8x-mi300x", "amd-smi", failure);
        without_kernel_unique_ids(dir.path());
        let detection = detection_in(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}

/// `doctor` picks AMD on a host whose KFD shows an AMD GPU, never on a Hygon host, whose DCUs
/// run KFD too (a plain `doctor` there is Hygon's).
#[test]
fn amds_driver_shows_only_through_an_amd_kfd_node() {
    use accel_backend::doctor::Doctor;
    let shown = |name: &str| {
        let host = FsHost::new(accel_testkit::recorded_host(name).join("root"));
        accel_amd::backend::AmdDoctor.driver_shown(&host)
    };
    assert!(shown("amd-8x-mi300x"));
    assert!(shown("amd-rocm-smi-only-rx7800xt"));
    assert!(!shown("hygon-4x-k100ai"));
    assert!(!shown("hgx-h100-8gpu"));
}
