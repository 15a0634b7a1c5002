//! The captured Ascend corpus: every file in `../shared/fixtures/ascend/` read by the parser it
//! is for, one insta snapshot per file, plus hand-written asserts for the numbered HAZARDS
//! items. The folder missing fails; a file on disk without an expectation here fails; an
//! expectation without its file fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use accel_ascend::npusmi::{self, InfoTable, Layout};
use accel_ascend::{health, kernel, soc, topo};

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("ascend")
}

/// Every file under the folder, as `<folder>/<file>` (or the file's name at the top).
fn on_disk(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_file() {
            out.insert(name);
            continue;
        }
        for file in std::fs::read_dir(entry.path()).unwrap() {
            let file = file.unwrap().file_name().to_string_lossy().into_owned();
            out.insert(format!("{name}/{file}"));
        }
    }
    out
}

fn read(rel: &str) -> String {
    String::from_utf8_lossy(&std::fs::read(fixtures().join(rel)).unwrap()).into_owned()
}

/// How a file is read.
#[derive(Clone, Copy)]
enum Reader {
    /// The folder's own documentation, and help text no parser reads.
    Document,
    /// `npu-smi info`.
    Info,
    /// `npu-smi info -m`.
    Mapping,
    /// `npu-smi info -t common|usages`: the generic `key : value` blocks.
    Blocks,
    /// `npu-smi info -t board`: its die id and board ids ([`npusmi::Board`]).
    Board,
    /// `npu-smi info -t spod-info`: the super-pod facts or the card's refusal.
    Spod,
    /// `npu-smi info -t health`: its own reader (`accel_ascend::health`).
    Health,
    /// `npu-smi info -t ecc`: the counters each memory's rule reads (HBM and DDR).
    Ecc,
    /// `npu-smi info -t ecc-enable`.
    EccEnable,
    /// `npu-smi info -t topo` (the matrix; `accel_ascend::topo`).
    Topology,
    /// `ls /dev/davinci*` and friends.
    DevListing,
    /// `hccn_tool` free text (`key: value`); the detector does not read it.
    HccnTool,
    /// gpustack-runtime's processed view: an expected-result reference.
    RuntimeDetect,
    RuntimeTopology,
}

const EXPECTED: &[(&str, Reader)] = &[
    ("HAZARDS.md", Reader::Document),
    ("SOURCES.md", Reader::Document),
    (
        "dev/arthurchiao__8x-910b1-ls-dev-davinci-hisi_hdc-devmm_svm.txt",
        Reader::DevListing,
    ),
    (
        "gpustack-runtime-detect/gpustackruntime__8x-910b2-detect-json.json",
        Reader::RuntimeDetect,
    ),
    (
        "gpustack-runtime-detect/gpustackruntime__8x-910b2-topology-json.json",
        Reader::RuntimeTopology,
    ),
    (
        "hccn-tool/gpustack-test__910b-hccn-tool-gateway-iface.txt",
        Reader::HccnTool,
    ),
    (
        "hccn-tool/gpustack-test__910b-hccn-tool-link-status-down.txt",
        Reader::HccnTool,
    ),
    (
        "npu-smi/arthurchiao__8x-910b1-info-t-topo-hccs.txt",
        Reader::Topology,
    ),
    (
        "npu-smi/arthurchiao__8x-910b1-npu-smi23.0.rc2-info-elided.txt",
        Reader::Info,
    ),
    (
        "npu-smi/arthurchiao__910b1-info-t-usages-npu0-indented.txt",
        Reader::Blocks,
    ),
    (
        "npu-smi/canncontainer-46__npu-smi-in-container-dcmi-init-failed-8020.txt",
        Reader::Info,
    ),
    // The 950's columns (`Slot ID`, `Chip Phy-ID`, no `Chip Logic ID`; HAZARDS 26): the NPU ID
    // is the logic id.
    (
        "npu-smi/canndriver-950doc__atlas350-info-m-slot-and-phy-id-columns-doc-example.txt",
        Reader::Mapping,
    ),
    // HAZARDS 20 and 22: `0x68(1P)`, `0x1b`, `0xD806`; the DDie id the only die printed.
    (
        "npu-smi/canndriver-950doc__atlas350-info-t-board-i0-mainboard-1p-doc-example.txt",
        Reader::Board,
    ),
    (
        "npu-smi/canndriver-950doc__atlas350-info-t-ecc-enable-doc-example.txt",
        Reader::EccEnable,
    ),
    (
        "npu-smi/canndriver-950doc__atlas350-info-t-ecc-i0-hbm-only-doc-example.txt",
        Reader::Ecc,
    ),
    // HAZARDS 17: the 950's `Health` label after its `NPU ID` line.
    (
        "npu-smi/canndriver-950doc__atlas350-info-t-health-i0-doc-example.txt",
        Reader::Health,
    ),
    // HAZARDS 23: the 950 card's refusal, one line without a colon.
    (
        "npu-smi/canndriver-950doc__atlas350-info-t-spod-info-not-supported-doc-example.txt",
        Reader::Spod,
    ),
    // Help text: no parser reads it.
    (
        "npu-smi/canndriver-950doc__npu-smi-info-h-v2-options-doc-example.txt",
        Reader::Document,
    ),
    (
        "npu-smi/cannshmem__a3-info-t-spod-info-i0-c0-padding-stripped-doc-example.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/gpustack-6148__ascend950pr-npu-smi25.7.rc1.6-new-layout-excerpt.txt",
        Reader::Info,
    ),
    (
        "npu-smi/gpustack-test__310p-info-m-2chips-gapped-npu-ids.txt",
        Reader::Mapping,
    ),
    (
        "npu-smi/gpustack-test__310p-info-t-common-npu1-2chips.txt",
        Reader::Blocks,
    ),
    (
        "npu-smi/gpustack-test__8x-910b-info-m-mcu-rows-redacted.txt",
        Reader::Mapping,
    ),
    (
        "npu-smi/gpustack-test__910b-info-t-common-npu0.txt",
        Reader::Blocks,
    ),
    (
        "npu-smi/gpustack__atlas800-3000-4x310-info-m-mcu-row.txt",
        Reader::Mapping,
    ),
    (
        "npu-smi/gpustack__atlas800-3000-4x310-npu-smi21.0.4-info-hugepages.txt",
        Reader::Info,
    ),
    (
        "npu-smi/gpustack__atlas800-9010-8x910a-info-m.txt",
        Reader::Mapping,
    ),
    (
        "npu-smi/gpustack__atlas800-9010-8x910a-npu-smi24.1.RC2-info-procs-warning.txt",
        Reader::Info,
    ),
    (
        "npu-smi/hamiweb__2x-310p3-npu-smi25.5.1-info-power-NA.txt",
        Reader::Info,
    ),
    (
        "npu-smi/hamiweb__310p3-vnpu-container-npu-smi-log-preamble-excerpt.txt",
        Reader::Info,
    ),
    (
        "npu-smi/hamiwebui-47__910b4-1-npu-smi25.2.0-busid-masked.txt",
        Reader::Info,
    ),
    // Every line TAB-indented (HAZARDS 26).
    (
        "npu-smi/mindcluster-faultdiag__8x-910a-info-m-tab-indented.txt",
        Reader::Mapping,
    ),
    (
        "npu-smi/mindcluster-faultdiag__910a-drv23.0.5-info-t-board-i0-card-level-no-mainboard-id.txt",
        Reader::Board,
    ),
    (
        "npu-smi/mindcluster-faultdiag__910a-info-t-board-i0-c0-chip-level-vdie-ndie.txt",
        Reader::Board,
    ),
    // The tool's error lines on stdout (HAZARDS 23).
    (
        "npu-smi/mindcluster-faultdiag__910a-info-t-board-lost-device-invalid-card-id.txt",
        Reader::Board,
    ),
    // HAZARDS 18: every code and every text, the blank-label lines after empty lines too.
    (
        "npu-smi/mindcluster-faultdiag__910a-info-t-health-i0-c0-alarm-3-error-codes-multiline.txt",
        Reader::Health,
    ),
    (
        "npu-smi/mindcluster-faultdiag__910a-info-t-health-i0-c0-health-status-ok.txt",
        Reader::Health,
    ),
    (
        "npu-smi/mindcluster-faultdiag__910a-info-t-usages-i0-ddr-and-hbm.txt",
        Reader::Blocks,
    ),
    (
        "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev0-from-log-L11.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev1-from-log-L13.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev10-from-log-L15.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev11-from-log-L17.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev12-from-log-L19.txt",
        Reader::Spod,
    ),
    (
        "npu-smi/mindclusterdocs__910a-info-t-ecc-ddr-hbm-chip-id-doc-example.txt",
        Reader::Ecc,
    ),
    (
        "npu-smi/paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt",
        Reader::Info,
    ),
    (
        "npu-smi/vllmascend-12980__a3-ascend910-npu-smi26.0.rc2-phy-id-2dies-excerpt.txt",
        Reader::Info,
    ),
    (
        "npu-smi/vllmascend-2534__a3-ascend910-phy-id-narrow-layout-excerpt.txt",
        Reader::Info,
    ),
];

fn snapshot_name(rel: &str) -> String {
    rel.replace('/', "__")
}

fn read_unit(rel: &str, reader: Reader) -> serde_json::Value {
    let text = read(rel);
    match reader {
        Reader::Document => serde_json::json!({ "lines": text.lines().count() }),
        Reader::Info => match npusmi::parse_info(&text) {
            Ok(t) => serde_json::to_value(t).unwrap(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Reader::Mapping => match npusmi::parse_mapping(&text) {
            Ok(m) => serde_json::to_value(m).unwrap(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Reader::Blocks | Reader::HccnTool => {
            serde_json::to_value(npusmi::parse_blocks(&text)).unwrap()
        }
        Reader::Board => match npusmi::parse_board(&text) {
            Ok(b) => serde_json::to_value(b).unwrap(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Reader::Spod => match npusmi::parse_spod_info(&text) {
            Ok(s) => serde_json::to_value(s).unwrap(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Reader::Health => match health::parse_health(&text) {
            Ok(h) => serde_json::json!({ "reading": h, "verdict": format!("{:?}", h.verdict()) }),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Reader::Ecc => {
            let counts = |memory| {
                let c = npusmi::parse_ecc(&text, memory);
                serde_json::json!({ "singleBit": c.single_bit, "doubleBit": c.double_bit })
            };
            serde_json::json!({
                "hbm": counts(npusmi::EccMemory::Hbm),
                "ddr": counts(npusmi::EccMemory::Ddr),
            })
        }
        Reader::EccEnable => serde_json::json!({
            "hbm": npusmi::parse_ecc_enable(&text, npusmi::EccMemory::Hbm),
            "ddr": npusmi::parse_ecc_enable(&text, npusmi::EccMemory::Ddr),
        }),
        Reader::Topology => {
            let t = topo::parse_topo(&text).unwrap();
            serde_json::json!({ "links": t.links })
        }
        Reader::DevListing => {
            let names: Vec<&str> = text
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("/dev/"))
                .collect();
            serde_json::json!({
                "davinci": kernel::parse_davinci_names(names.iter().copied()),
                "nodes": names,
            })
        }
        Reader::RuntimeDetect => {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            let rows: Vec<_> = doc
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let name = d["name"].as_str().unwrap();
                    serde_json::json!({
                        "uuid": npusmi::die_identity(d["uuid"].as_str().unwrap()),
                        "family": soc::family(name).map(soc::Family::name),
                        "soc": soc::soc_name(name),
                        "physicalId": d["appendix"]["physical_id"],
                    })
                })
                .collect();
            serde_json::Value::Array(rows)
        }
        Reader::RuntimeTopology => {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            let n = doc[0]["devices_distances"].as_array().map(Vec::len);
            serde_json::json!({ "devices": n })
        }
    }
}

#[test]
fn every_capture_is_read_by_its_parser() {
    accel_testkit::assert_same_files(
        "ascend",
        on_disk(&fixtures()),
        EXPECTED.iter().map(|(f, _)| f.to_string()),
    );
    for (rel, reader) in EXPECTED {
        let value = read_unit(rel, *reader);
        insta::assert_json_snapshot!(snapshot_name(rel), value);
    }
}

fn info(rel: &str) -> InfoTable {
    npusmi::parse_info(&read(&format!("npu-smi/{rel}"))).unwrap()
}

#[test]
fn hazard_1_four_layouts() {
    let layouts = [
        (
            "gpustack__atlas800-3000-4x310-npu-smi21.0.4-info-hugepages.txt",
            Layout::ChipDevice,
        ),
        (
            "hamiweb__2x-310p3-npu-smi25.5.1-info-power-NA.txt",
            Layout::ChipDevice,
        ),
        (
            "paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt",
            Layout::Chip,
        ),
        (
            "vllmascend-2534__a3-ascend910-phy-id-narrow-layout-excerpt.txt",
            Layout::ChipPhyId,
        ),
        (
            "gpustack-6148__ascend950pr-npu-smi25.7.rc1.6-new-layout-excerpt.txt",
            Layout::NpuId,
        ),
    ];
    for (file, layout) in layouts {
        assert_eq!(info(file).layout, layout, "{file}");
    }
    // The 310's Device column is not the chip index.
    let t = info("gpustack__atlas800-3000-4x310-npu-smi21.0.4-info-hugepages.txt");
    let devices: Vec<_> = t.chips.iter().map(|c| (c.chip, c.device)).collect();
    assert_eq!(
        devices,
        [
            (Some(0), Some(3)),
            (Some(1), Some(4)),
            (Some(2), Some(5)),
            (Some(3), Some(6))
        ]
    );
}

#[test]
fn hazard_2_and_4_a3_dies_and_gapped_ids() {
    let t = info("vllmascend-2534__a3-ascend910-phy-id-narrow-layout-excerpt.txt");
    let dies: Vec<_> = t.chips.iter().map(|c| (c.npu, c.chip, c.phy_id)).collect();
    assert_eq!(
        dies,
        [
            (Some(0), Some(0), Some(0)),
            (Some(0), Some(1), Some(1)),
            (Some(1), Some(0), Some(2))
        ]
    );
    let t = info("hamiweb__2x-310p3-npu-smi25.5.1-info-power-NA.txt");
    let ids: Vec<_> = t.chips.iter().map(|c| (c.npu, c.device)).collect();
    assert_eq!(ids, [(Some(4), Some(0)), (Some(5), Some(1))]);
}

#[test]
fn hazard_3_versions_and_6_placeholders() {
    let t = info("gpustack__atlas800-3000-4x310-npu-smi21.0.4-info-hugepages.txt");
    assert_eq!(t.version.as_deref(), Some("21.0.4.B030"));
    let t = info("hamiweb__2x-310p3-npu-smi25.5.1-info-power-NA.txt");
    assert_eq!(t.chips[0].power_w, None);
    let t = info("hamiwebui-47__910b4-1-npu-smi25.2.0-busid-masked.txt");
    assert_eq!(t.chips[0].bus_id, None, "a masked bus id is no bus id");
    assert_eq!(t.chips[0].name.as_deref(), Some("910B4-1"));
    let t = info("gpustack__atlas800-9010-8x910a-npu-smi24.1.RC2-info-procs-warning.txt");
    assert_eq!(t.chips.len(), 8, "the process table is not read");
    assert_eq!(t.chips[0].name, None, "a redacted name is none");
    assert_eq!(
        (t.chips[0].hbm_total_mib, t.chips[0].memory_total_mib),
        (Some(32768), Some(15137))
    );
    assert_eq!(t.chips[3].health.as_deref(), Some("Warning"));
}

#[test]
fn hazard_10_init_failure_and_log_lines() {
    let e = npusmi::parse_info(&read(
        "npu-smi/canncontainer-46__npu-smi-in-container-dcmi-init-failed-8020.txt",
    ))
    .unwrap_err();
    assert_eq!(
        e,
        npusmi::InfoError::DriverNotInitialised {
            line: "dcmi model initialized failed, because the device is used. ret is -8020".into()
        }
    );
    let e = npusmi::parse_info(&read(
        "npu-smi/hamiweb__310p3-vnpu-container-npu-smi-log-preamble-excerpt.txt",
    ))
    .unwrap_err();
    assert!(matches!(e, npusmi::InfoError::NotATable { .. }), "{e}");
}

#[test]
fn hazard_11_mcu_rows_are_no_chips_and_12_blocks() {
    let map = npusmi::parse_mapping(&read(
        "npu-smi/gpustack__atlas800-3000-4x310-info-m-mcu-row.txt",
    ))
    .unwrap();
    assert_eq!(map.len(), 4);
    assert_eq!(map[0].name.as_deref(), Some("MiniD"));
    let map = npusmi::parse_mapping(&read(
        "npu-smi/gpustack-test__310p-info-m-2chips-gapped-npu-ids.txt",
    ))
    .unwrap();
    let logic: Vec<_> = map.iter().map(|c| (c.npu, c.chip, c.logic_id)).collect();
    assert_eq!(logic[..3], [(1, 0, 0), (1, 1, 1), (2, 0, 2)]);
    assert_eq!(map.len(), 8);
    assert!(
        map.iter().all(|c| c.name.is_none()),
        "`Ascend xxx` is redacted"
    );
    let common = read("npu-smi/gpustack-test__910b-info-t-common-npu0.txt");
    assert_eq!(npusmi::parse_aicores(&common, 0), Some(32));
    let two = read("npu-smi/gpustack-test__310p-info-t-common-npu1-2chips.txt");
    let blocks = npusmi::parse_blocks(&two);
    assert_eq!(
        blocks
            .chip(1)
            .and_then(|b| npusmi::lookup(b, "Temperature(C)")),
        Some("59")
    );
    let usages = read("npu-smi/arthurchiao__910b1-info-t-usages-npu0-indented.txt");
    assert_eq!(
        npusmi::parse_blocks(&usages).value("HBM Capacity(MB)"),
        Some("65536")
    );
}

#[test]
fn hazard_16_die_ids_keep_the_libraries_rendering() {
    let doc: serde_json::Value = serde_json::from_str(&read(
        "gpustack-runtime-detect/gpustackruntime__8x-910b2-detect-json.json",
    ))
    .unwrap();
    for d in doc.as_array().unwrap() {
        let uuid = d["uuid"].as_str().unwrap();
        let padded: Vec<String> = uuid.split(' ').map(|w| format!("{w:0>8}")).collect();
        assert_eq!(
            npusmi::die_identity(&padded.join(" ")).as_deref(),
            Some(uuid)
        );
        assert_eq!(
            soc::family(d["name"].as_str().unwrap()),
            Some(soc::Family::F910B)
        );
    }
}

/// HAZARDS 17 and 18: `Health Status` (V1) and `Health` after `NPU ID` (the 950) read alike;
/// a faulted chip's three codes sit on one line and its three texts on three, the last two under
/// blank labels after empty lines — all kept.
#[test]
fn hazard_17_both_health_labels_and_18_texts_over_several_lines() {
    let v1 = health::parse_health(&read(
        "npu-smi/mindcluster-faultdiag__910a-info-t-health-i0-c0-health-status-ok.txt",
    ))
    .unwrap();
    let v2 = health::parse_health(&read(
        "npu-smi/canndriver-950doc__atlas350-info-t-health-i0-doc-example.txt",
    ))
    .unwrap();
    assert_eq!(v1.state, Some(health::HealthState::Ok));
    assert_eq!((v1.npu, v2.npu), (None, Some(0)));
    assert_eq!(v2.state, v1.state);
    let alarm = health::parse_health(&read(
        "npu-smi/mindcluster-faultdiag__910a-info-t-health-i0-c0-alarm-3-error-codes-multiline.txt",
    ))
    .unwrap();
    assert_eq!(alarm.state, Some(health::HealthState::Alarm));
    assert_eq!(alarm.codes.len(), 3);
    assert_eq!(alarm.texts.len(), 3);
    assert!(alarm.texts[2].ends_with("event state=Heartbeat Lost."));
    assert_eq!(alarm.verdict(), health::Verdict::OutOfService);
}

/// HAZARDS 9 (issue 44 item 8): the process section after the chip table — a list of
/// processes per NPU, one `No running processes found in NPU n` row per idle NPU, or none at
/// all. Every `npu-smi info` capture is read; the ones that print a section are snapshotted
/// and named here, so a capture with a section this test does not know fails.
#[test]
fn hazard_9_the_process_section_is_read_where_printed() {
    use accel_ascend::procs;
    const WITH_SECTION: &[&str] = &[
        "npu-smi/gpustack__atlas800-9010-8x910a-npu-smi24.1.RC2-info-procs-warning.txt",
        "npu-smi/paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt",
    ];
    let mut printed = Vec::new();
    for (rel, reader) in EXPECTED {
        if !matches!(reader, Reader::Info) {
            continue;
        }
        if let Some(processes) = procs::parse_processes(&read(rel)) {
            insta::assert_json_snapshot!(format!("processes-{}", snapshot_name(rel)), processes);
            printed.push(*rel);
        }
    }
    assert_eq!(printed, WITH_SECTION);

    let listed = procs::parse_processes(&read(WITH_SECTION[0])).unwrap();
    assert_eq!(listed.len(), 32, "four processes on each of eight NPUs");
    for npu in 0..8 {
        let on: Vec<_> = listed.iter().filter(|p| p.npu == Some(npu)).collect();
        assert_eq!(on.len(), 4, "NPU {npu}");
        assert!(
            on.iter()
                .all(|p| p.chip == Some(0) && p.memory_used_mib == Some(686))
        );
    }
    assert_eq!(
        (listed[0].pid, listed[0].name.as_deref()),
        (Some(37656), Some("hlt_host_devmm_"))
    );
    assert_eq!(
        procs::parse_processes(&read(WITH_SECTION[1])),
        Some(Vec::new()),
        "each NPU's `No running processes found` row is no process"
    );
}

/// HAZARDS 20 and 22: board ids in lower-case hex with a `(<n>P)` suffix, PCI ids upper case;
/// the 950 board read as a 950's by its PCI device id (`0xD806`), its die the `DDie ID`; the
/// 910A's card level has no Main Board ID and its chip level no PCI ids.
#[test]
fn hazard_20_board_hex_and_suffixes_and_22_the_pci_device_id_decides() {
    let board = |rel: &str| npusmi::parse_board(&read(&format!("npu-smi/{rel}"))).unwrap();
    let a5 = board("canndriver-950doc__atlas350-info-t-board-i0-mainboard-1p-doc-example.txt");
    assert_eq!(
        (
            a5.board_id,
            a5.main_board_id,
            a5.main_board_npus,
            a5.pci_device_id
        ),
        (Some(0x1b), Some(0x68), Some(1), Some(0xd806))
    );
    assert_eq!(
        a5.identity.as_deref(),
        Some("870408E3 2120D518 77936EE6 80B40A0A D4100003")
    );
    let readings = accel_ascend::product::Readings {
        pci_device_id: a5.pci_device_id,
        main_board: a5.main_board_id,
        main_board_npus: a5.main_board_npus,
        spod: Some(npusmi::parse_spod_info(&read(
            "npu-smi/canndriver-950doc__atlas350-info-t-spod-info-not-supported-doc-example.txt",
        ))
        .map_err(|e| e.to_string())),
    };
    assert_eq!(
        accel_ascend::product::resolve(&readings),
        Ok(accel_ascend::product::ProductType::Card1p),
        "the manual's Atlas 350 is a 1P card"
    );
    let card = board(
        "mindcluster-faultdiag__910a-drv23.0.5-info-t-board-i0-card-level-no-mainboard-id.txt",
    );
    assert_eq!(
        (card.board_id, card.main_board_id, card.pci_device_id),
        (Some(0x02), None, Some(0xd801))
    );
    let chip = board("mindcluster-faultdiag__910a-info-t-board-i0-c0-chip-level-vdie-ndie.txt");
    assert_eq!((chip.pci_device_id, chip.main_board_id), (None, None));
    assert!(chip.identity.is_some());
    assert_eq!(npusmi::board_hex("0x6C(4P)"), (Some(0x6c), Some(4)));
    assert_eq!(npusmi::board_hex("NA"), (None, None));
}

/// HAZARDS 23 and 24: the 950 card refuses `-t spod-info` in one line; the A3's SDID is a
/// packed number whose server part is its `Server Index`, with or without the padding.
#[test]
fn hazard_23_the_spod_refusal_and_24_packed_sdids() {
    let spod = |rel: &str| npusmi::parse_spod_info(&read(&format!("npu-smi/{rel}"))).unwrap();
    assert_eq!(
        spod("canndriver-950doc__atlas350-info-t-spod-info-not-supported-doc-example.txt"),
        npusmi::SpodInfo::NotSupported
    );
    for (file, device) in [
        ("dev0-from-log-L11", 0),
        ("dev1-from-log-L13", 1),
        ("dev10-from-log-L15", 10),
        ("dev11-from-log-L17", 11),
        ("dev12-from-log-L19", 12),
    ] {
        let npusmi::SpodInfo::Read(facts) = spod(&format!(
            "mindcluster-faultdiag__a3-server40-info-t-spod-info-{file}.txt"
        )) else {
            panic!("{file}")
        };
        let parts = npusmi::sdid_parts(facts.sdid.unwrap());
        assert_eq!(
            (parts.server, parts.chip, parts.die, parts.device),
            (40, device / 2, device % 2, device),
            "{file}"
        );
        assert_eq!(
            (facts.size, facts.id, facts.server_index, facts.pod_type),
            (Some(384), Some(0), Some(40), None)
        );
    }
    let npusmi::SpodInfo::Read(shmem) =
        spod("cannshmem__a3-info-t-spod-info-i0-c0-padding-stripped-doc-example.txt")
    else {
        panic!("shmem")
    };
    assert_eq!(npusmi::sdid_parts(shmem.sdid.unwrap()).server, 4);
    assert_eq!(shmem.server_index, Some(4));
    assert!(npusmi::parse_spod_info("Must input parameter of chip id.\n").is_err());
}

/// HAZARDS 26: the 950's `-m` prints the physical id and a slot and no logic id: its NPU ID is
/// the logic id.
#[test]
fn hazard_26_the_950_map_names_the_physical_id() {
    let map = npusmi::parse_mapping(&read(
        "npu-smi/canndriver-950doc__atlas350-info-m-slot-and-phy-id-columns-doc-example.txt",
    ))
    .unwrap();
    assert_eq!(map.len(), 1);
    let row = &map[0];
    assert_eq!(
        (
            row.npu,
            row.chip,
            row.logic_id,
            row.physical_id,
            row.slot,
            row.name.as_deref()
        ),
        (0, 0, 0, Some(0), Some(0), None)
    );
    let unusable = "NPU ID   Slot ID   Chip ID   Chip Phy-ID   Chip Name\n-1       1         0         1             xxx\n2        2         0         6             Ascend950PR\n";
    let map = npusmi::parse_mapping(unusable).unwrap();
    assert_eq!(
        map.iter()
            .map(|m| (m.npu, m.logic_id, m.physical_id))
            .collect::<Vec<_>>(),
        [(2, 2, Some(6))],
        "NPU ID -1 is an unusable row"
    );
}

/// A table with a chip column is the chip layout whatever its NPU column is called: the 910B's
/// table with its `NPU` label spelled `NPU ID` is not the 950's (which has no chip column).
#[test]
fn a_chip_column_makes_the_chip_layout_whatever_the_npu_label() {
    let text = read("npu-smi/paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt");
    let relabelled = text.replace("| NPU   Name      ", "| NPU ID  Name    ");
    assert_ne!(relabelled, text);
    let t = npusmi::parse_info(&relabelled).unwrap();
    assert_eq!(t.layout, Layout::Chip);
    let ids: Vec<_> = t.chips.iter().map(|c| (c.npu, c.chip)).collect();
    assert_eq!(ids, [(Some(0), Some(0)), (Some(1), Some(0))]);
}

/// Only the 950's form (a `Chip Phy-ID` column, no `Chip Logic ID`) numbers its chips by NPU
/// ID: the 910A's map with its logic-id column cut off gives no chip, not NPU IDs read as
/// logic ids.
#[test]
fn a_map_without_logic_ids_outside_the_950s_form_gives_no_chips() {
    let text = read("npu-smi/gpustack__atlas800-9010-8x910a-info-m.txt");
    let cut: String = text
        .lines()
        .map(|line| {
            let mut fields = accel_backend::text::split_blanks(line);
            if fields.len() > 2 {
                fields.remove(2);
            }
            format!("{}\n", fields.join("    "))
        })
        .collect();
    assert!(cut.starts_with("NPU ID    Chip ID    Chip Name\n"), "{cut}");
    assert_eq!(npusmi::parse_mapping(&cut).unwrap(), []);
}
