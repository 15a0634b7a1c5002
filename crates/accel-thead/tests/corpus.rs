//! The captured T-Head corpus: every file in `../shared/fixtures/thead/` read by the parser it
//! is for, with what it must yield (an insta snapshot per tool output, hand-written asserts for
//! the numbered HAZARDS.md items). The runtime samples are processed output, not parser input:
//! they are the expected result the 16-PPU recorded host is checked against. The folder missing
//! fails; a file on disk without an expectation here fails; an expectation without its file
//! fails.

use std::path::{Path, PathBuf};

use accel_core::inventory::MigMode;
use accel_host::{FsHost, RecordedCommands};
use accel_thead::detector::{self, DetectOptions};
use accel_thead::kmsg::{self, AlixpuEvent};
use accel_thead::smi::{self, SmiError};

const TABLE: &str = "ppu-smi/theadkmddoc__1x-ppu-zw810e-ppu-smi1.17-kmd2.1.1-hggc-na.txt";
const NOT_LOADED: &str = "ppu-smi/theadkmddoc__ppu-smi-driver-not-loaded.txt";
const LIST_MIG: &str = "ppu-smi/theadsmidoc__2x-ppu-smi-L-mig-devices.txt";
const MIG_TABLE: &str = "ppu-smi/theadsmidoc__ppu-smi-mig-devices-table.txt";
const DMESG: &str = "kmsg/theadkmddoc__alixpu-icn-topo-16-devices-dmesg-T.log";
const LSPCI: &str = "pci/theadkmddoc__lspci-alibaba-3d-controller-6001-elided.txt";
const DETECT_JSON: &str =
    "gpustack-runtime-detect/gpustackruntime__16x-ppu-zw810e-detect-json.json";
const TOPOLOGY_JSON: &str =
    "gpustack-runtime-detect/gpustackruntime__16x-ppu-zw810e-topology-json.json";

const COVERED: &[&str] = &[
    TABLE,
    NOT_LOADED,
    LIST_MIG,
    MIG_TABLE,
    DMESG,
    LSPCI,
    DETECT_JSON,
    TOPOLOGY_JSON,
];

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("thead")
}

fn read(name: &str) -> String {
    let path = fixtures().join(name);
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

fn on_disk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for folder in std::fs::read_dir(root).unwrap() {
        let folder = folder.unwrap();
        if !folder.file_type().unwrap().is_dir() {
            continue;
        }
        let name = folder.file_name().to_string_lossy().into_owned();
        for entry in std::fs::read_dir(folder.path()).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            out.push(format!("{name}/{file}"));
        }
    }
    out
}

#[test]
fn every_capture_has_an_expectation_and_every_expectation_its_capture() {
    accel_testkit::assert_same_files(
        "thead fixtures",
        on_disk(&fixtures()),
        COVERED.iter().map(|s| s.to_string()),
    );
}

#[test]
fn the_device_table_reads_by_header_with_ppu_for_gpu() {
    // HAZARDS items 1 and 2: renamed words, a commit-suffixed driver, HGGC N/A.
    let table = smi::parse_table(&read(TABLE)).unwrap();
    assert_eq!(table.smi_version.as_deref(), Some("1.17"));
    assert_eq!(table.driver_version.as_deref(), Some("2.1.1-rbd225"));
    assert_eq!(table.hggc_version, None);
    assert_eq!(table.cards.len(), 1);
    let card = &table.cards[0];
    assert_eq!(card.index, Some(0));
    assert_eq!(card.name.as_deref(), Some("PPU-ZW810E"));
    assert_eq!(card.bus_id.unwrap().sysfs(), "0000:00:11.0");
    assert_eq!(
        (card.memory_used_mib, card.memory_total_mib),
        (Some(2), Some(98304))
    );
    assert_eq!(card.ecc_uncorrected, Some(0));
    assert_eq!(card.mig_mode, Some(MigMode::Disabled));
    insta::assert_debug_snapshot!("table-1x-zw810e", table);
}

/// A release that renames one of the two columns the device table is told by (`Bus-Id`,
/// `Memory-Usage`) still has its table, read by the other; a card whose bus id is a
/// placeholder is kept by its index.
#[test]
fn the_device_table_needs_one_of_its_two_columns_and_a_card_one_of_its_two_ids() {
    let text = read(TABLE);
    let renamed = text.replace("| Memory-Usage         |", "| Memory Used          |");
    assert_ne!(renamed, text);
    let table = smi::parse_table(&renamed).unwrap();
    let cards: Vec<_> = table
        .cards
        .iter()
        .map(|c| (c.index, c.bus_id.map(|b| b.sysfs()), c.memory_total_mib))
        .collect();
    assert_eq!(cards, [(Some(0), Some("0000:00:11.0".to_string()), None)]);
    let masked = text.replace("| 00000000:00:11.0     |", "| N/A                  |");
    assert_ne!(masked, text);
    let table = smi::parse_table(&masked).unwrap();
    let cards: Vec<_> = table.cards.iter().map(|c| (c.index, c.bus_id)).collect();
    assert_eq!(cards, [(Some(0), None)]);
}

/// Another program's text (here the lspci capture) is refused by every reader, quoting its
/// first line.
#[test]
fn another_programs_text_is_refused_quoting_its_first_line() {
    let text = format!("\n{}", read(LSPCI));
    let first = "0000:08:00.0 3D controller: Alibaba (China) Co., Ltd. Device 6001 (rev 01)";
    assert_eq!(
        [
            smi::parse_table(&text).map(|_| ()),
            smi::parse_list(&text).map(|_| ()),
            smi::parse_query(&text).map(|_| ()),
        ],
        ["", " -L", " -q"].map(|args| {
            Err(SmiError::NotOutput {
                args,
                first: first.into(),
            })
        })
    );
}

#[test]
fn the_driver_not_loaded_answer_is_named_not_misread() {
    // HAZARDS item 5.
    let text = read(NOT_LOADED);
    for parsed in [
        smi::parse_table(&text).map(|_| ()),
        smi::parse_list(&text).map(|_| ()),
        smi::parse_query(&text).map(|_| ()),
    ] {
        let err = parsed.unwrap_err();
        assert!(matches!(err, SmiError::DriverNotLoaded { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "ppu-smi: the alixpu driver is not loaded (init HGML error: driver is not loaded)"
        );
    }
}

#[test]
fn the_list_keeps_uuids_of_any_shape_and_mig_children() {
    // HAZARDS item 3: every card named just `PPU`, 4-blank children, 13-digit last groups.
    let cards = smi::parse_list(&read(LIST_MIG)).unwrap();
    assert_eq!(cards.len(), 2);
    assert_eq!(cards[0].name.as_deref(), Some("PPU"));
    assert_eq!(
        cards[1].uuid.as_deref(),
        Some("GPU-019ea108-c120-040c-0000-0000c0267f1e")
    );
    assert!(cards[0].mig.is_empty());
    assert_eq!(cards[1].mig.len(), 2);
    assert_eq!(cards[1].mig[0].profile.as_deref(), Some("g1.c1.i1"));
    assert_eq!(
        cards[1].mig[0].uuid.as_deref(),
        Some("MIG-79c62632-04cc-574b-af7b-cb2e307121c85")
    );
    assert_eq!(cards[1].mig[1].device, Some(1));
    insta::assert_debug_snapshot!("list-2x-mig", cards);
}

#[test]
fn the_mig_devices_table_reads_instances_by_header() {
    // HAZARDS item 4.
    let rows = smi::parse_mig_table(&read(MIG_TABLE));
    assert_eq!(rows.len(), 3);
    assert_eq!(
        (
            rows[0].card,
            rows[0].gpu_instance,
            rows[0].compute_instance,
            rows[0].device
        ),
        (Some(0), Some(0), Some(0), Some(5))
    );
    assert_eq!(
        (rows[1].memory_used_mib, rows[1].memory_total_mib),
        (Some(6), Some(16809))
    );
    assert_eq!(rows[2].compute_instance, Some(3));
    insta::assert_debug_snapshot!("mig-devices-table", rows);
}

#[test]
fn the_kernel_log_names_cards_by_driver_index_and_holds_no_fault() {
    // HAZARDS item 7: `[alixpu]` with no PCI address, ICN routing, a 16-device summary.
    let lines = kmsg::parse(&read(DMESG));
    assert_eq!(lines.len(), 17);
    assert!(lines[..16].iter().all(|l| l.ppu == Some(15)));
    assert_eq!(lines[3].event, AlixpuEvent::IcnRoute { target: Some(3) });
    assert_eq!(lines[16].event, AlixpuEvent::IcnTotal { devices: Some(16) });
    assert!(lines.iter().all(|l| matches!(
        l.event,
        AlixpuEvent::IcnRoute { .. } | AlixpuEvent::IcnTotal { .. }
    )));
}

#[test]
fn the_lspci_capture_is_the_pci_identity_the_hosts_use() {
    // HAZARDS item 8: an unnamed device id, so vendor and class decide.
    let text = read(LSPCI);
    let functions: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("3D controller: Alibaba (China) Co., Ltd. Device 6001"))
        .collect();
    assert_eq!(functions.len(), 2);
    let host = FsHost::new(accel_testkit::recorded_host("thead-driver-not-loaded").join("root"));
    let scan = accel_host::scan_pci(&host, &Default::default()).unwrap();
    let buses: Vec<String> = scan.functions.iter().map(|f| f.bus_id.sysfs()).collect();
    assert_eq!(buses, ["0000:08:00.0", "0000:09:00.0"]);
    assert!(
        scan.functions
            .iter()
            .all(|f| f.vendor_id == 0x1ded && f.device_id == 0x6001 && f.class == 0x030200)
    );
}

/// The runtime's view of the 16-PPU host is what the recorded host must detect (HAZARDS
/// item 6: index, minor and bus order all differ).
#[test]
fn the_sixteen_ppu_host_detects_what_the_runtime_sample_shows() {
    let sample: Vec<serde_json::Value> = serde_json::from_str(&read(DETECT_JSON)).unwrap();
    let topology: Vec<serde_json::Value> = serde_json::from_str(&read(TOPOLOGY_JSON)).unwrap();
    let distances = topology[0]["devices_distances"].as_array().unwrap();
    assert_eq!(distances.len(), sample.len());
    let dir = accel_testkit::recorded_host("thead-16x-zw810e");
    let section = detector::detect(
        &FsHost::new(dir.join("root")),
        &RecordedCommands::load(&dir).unwrap(),
        DetectOptions::default(),
    )
    .unwrap();
    assert_eq!(section.accelerators.len(), 16);
    for (card, a) in sample.iter().zip(&section.accelerators) {
        assert_eq!(u64::from(a.index), card["index"].as_u64().unwrap());
        assert_eq!(a.uuid.as_deref(), card["uuid"].as_str());
        assert_eq!(a.product.as_deref(), card["name"].as_str());
        assert_eq!(a.memory_mib, card["memory"].as_u64());
        let appendix = &card["appendix"];
        assert_eq!(
            a.bus_id.map(|b| b.sysfs()).as_deref(),
            appendix["bdf"].as_str()
        );
        assert_eq!(
            a.minor_number.map(u64::from),
            appendix["minor_number"].as_u64()
        );
        assert_eq!(
            a.numa_node.map(|n| n.to_string()).as_deref(),
            appendix["numa"].as_str()
        );
        assert_eq!(a.mig_mode, Some(MigMode::Disabled));
        assert!(a.healthy);
    }
    assert_eq!(
        section.driver_version.as_deref(),
        sample[0]["driver_version"].as_str()
    );
    assert_eq!(section.runtime_version, None);
}
