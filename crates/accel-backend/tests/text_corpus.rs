//! `accel_backend::text` on the real captures: every file of every `../shared/fixtures/<m>/`
//! folder read by every reader without a panic, and the box and column tables of the seven
//! next CLIs (npu-smi, hy-smi, ppu-smi, ixsmi, mthreads-gmi, cnmon, mx-smi) read by header with
//! the values they print. The fixture folder missing fails.

use std::path::{Path, PathBuf};

use accel_backend::text::{
    self, BoxTable, ColumnTable, MemoryUnit, box_table, celsius, column_table, memory_pair, pair,
    percent, version_after, watts,
};

fn fixtures() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ));
    assert!(
        dir.is_dir(),
        "fixture folder {} is missing: the corpus tests need ../shared beside the checkout",
        dir.display()
    );
    dir
}

fn capture(path: &str) -> String {
    let file = fixtures().join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            walk(&entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

/// The anchors the seven CLIs' tables are found by, and a few that match nothing.
const ANCHORS: &[&[&str]] = &[
    &["NPU", "Name"],
    &["Name", "Health"],
    &["PPU", "Name"],
    &["GPU", "Name"],
    &["ID", "PCIe"],
    &["Card", "Bus-Id"],
    &["GPU", "Bus-id"],
    &["DCU", "Temp"],
    &["NPU ID", "Chip Name"],
    &["CPU Affinity"],
    &["Process name"],
];

fn exercise(text: &str) {
    let cleaned = text::clean(text);
    for anchor in ANCHORS {
        if let Some(table) = box_table(text, anchor) {
            for record in &table.records {
                for (label, _) in &record.fields {
                    let value = record.get(label).unwrap_or("");
                    let _ = (text::figure(value), memory_pair(value, MemoryUnit::MiB));
                }
            }
        }
        let _ = column_table(text, anchor);
    }
    for label in ["Driver Version", "Version", "Driver"] {
        let _ = version_after(&cleaned, label);
    }
    for line in cleaned.lines() {
        let _ = (
            text::present(line),
            text::figure(line),
            celsius(line),
            watts(line),
        );
        let _ = (
            percent(line),
            text::whole(line),
            text::mebibytes(line, MemoryUnit::MiB),
        );
        let _ = (pair(line), text::hex(line), text::unique_id(line));
        let _ = (text::dotted_version(line), text::split_blanks(line));
    }
}

#[test]
fn every_capture_of_every_manufacturer_is_read_without_a_panic() {
    let root = fixtures();
    let mut manufacturers = 0;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            manufacturers += 1;
            walk(&entry.path(), &mut files);
        }
    }
    assert!(
        manufacturers >= 9,
        "only {manufacturers} manufacturer folders in {}",
        root.display()
    );
    assert!(files.len() > 100, "only {} captures", files.len());
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        exercise(&String::from_utf8_lossy(&bytes));
    }
}

fn table(path: &str, anchor: &[&str]) -> BoxTable {
    box_table(&capture(path), anchor).unwrap_or_else(|| panic!("{path}: no table with {anchor:?}"))
}

fn columns(path: &str, anchor: &[&str]) -> ColumnTable {
    column_table(&capture(path), anchor)
        .unwrap_or_else(|| panic!("{path}: no columns with {anchor:?}"))
}

fn mib(raw: Option<&str>) -> (Option<u64>, Option<u64>) {
    raw.map_or((None, None), |r| memory_pair(r, MemoryUnit::MiB))
}

#[test]
fn npu_smi_info_910b_two_lines_a_device() {
    let t = table(
        "ascend/npu-smi/paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt",
        &["NPU", "Name", "Health"],
    );
    assert_eq!(t.records.len(), 2, "the process table is not read: {t:#?}");
    let r = &t.records[0];
    assert_eq!(
        (r.get("NPU"), r.get("Name"), r.get("Health")),
        (Some("0"), Some("910B2C"), Some("OK"))
    );
    assert_eq!(r.get("Power(W)").and_then(watts), Some(83.4));
    assert_eq!(r.get("Temp(C)").and_then(celsius), Some(35.0));
    assert_eq!(r.get("Hugepages-Usage(page)"), Some("0 / 0"));
    assert_eq!(
        (r.get("Chip"), r.get("Bus-Id")),
        (Some("0"), Some("0000:5A:00.0"))
    );
    assert_eq!(r.get("AICore(%)").and_then(percent), Some(0.0));
    assert_eq!(mib(r.get("HBM-Usage(MB)")), (Some(4302), Some(65536)));
    assert_eq!(t.records[1].get("Bus-Id"), Some("0000:29:00.0"));
    assert_eq!(
        version_after(
            &capture("ascend/npu-smi/paddledocs__2x-910b2c-npu-smi23.0.rc3-info-noprocs.txt"),
            "Version"
        ),
        Some("23.0.rc3")
    );
}

#[test]
fn npu_smi_layouts_across_releases() {
    // 310 (21.0.4): a Device column, no HBM column, wide blanks inside `0       / 970`.
    let t = table(
        "ascend/npu-smi/gpustack__atlas800-3000-4x310-npu-smi21.0.4-info-hugepages.txt",
        &["NPU", "Name"],
    );
    assert_eq!(t.records.len(), 4);
    let r = &t.records[0];
    assert_eq!(
        (r.get("NPU"), r.get("Chip"), r.get("Device")),
        (Some("6"), Some("0"), Some("3"))
    );
    assert_eq!(r.get("Hugepages-Usage(page)"), Some("0 / 970"));
    assert_eq!(mib(r.get("Memory-Usage(MB)")), (Some(2703), Some(8192)));
    assert_eq!(r.get("HBM-Usage(MB)"), None);
    assert_eq!(t.records[3].get("Bus-Id"), Some("0000:8C:00.0"));
    // 25.7: `NPU ID` in a cell of its own, `NPU Util(%)` one blank before the next label.
    let t = table(
        "ascend/npu-smi/gpustack-6148__ascend950pr-npu-smi25.7.rc1.6-new-layout-excerpt.txt",
        &["Name", "Health"],
    );
    assert!(
        t.has_label("NPU Util(%)") && t.has_label("Memory-Usage(MB)"),
        "{:?}",
        t.header
    );
    let r = &t.records[0];
    assert_eq!(
        (r.get("NPU ID"), r.get("Name")),
        (Some("0"), Some("Ascend950PR"))
    );
    assert_eq!(r.get("Power(W)").and_then(watts), Some(201.2));
    // Elided captures: `...` between records.
    let t = table(
        "ascend/npu-smi/arthurchiao__8x-910b1-npu-smi23.0.rc2-info-elided.txt",
        &["NPU", "Name"],
    );
    let npus: Vec<_> = t.records.iter().map(|r| r.get("NPU")).collect();
    assert_eq!(npus, [Some("0"), Some("1"), Some("7")]);
    // A3: a die per record, the second die's power `-`.
    let t = table(
        "ascend/npu-smi/vllmascend-12980__a3-ascend910-npu-smi26.0.rc2-phy-id-2dies-excerpt.txt",
        &["NPU", "Name"],
    );
    assert_eq!(t.records.len(), 2);
    assert_eq!(t.records[1].get("Phy-ID"), Some("1"));
    assert_eq!(t.records[1].raw("Power(W)"), Some("-"));
    assert_eq!(t.records[1].get("Power(W)"), None);
    assert_eq!(
        mib(t.records[1].get("HBM-Usage(MB)")),
        (Some(2874), Some(65536))
    );
    // 310P3: power `NA`.
    let t = table(
        "ascend/npu-smi/hamiweb__2x-310p3-npu-smi25.5.1-info-power-NA.txt",
        &["NPU", "Name"],
    );
    assert_eq!(t.records.len(), 2);
    assert_eq!(t.records[0].get("Power(W)"), None);
    assert_eq!(t.records[0].get("Temp(C)").and_then(celsius), Some(37.0));
    // Log lines and rows without their header: no table.
    assert_eq!(
        box_table(
            &capture(
                "ascend/npu-smi/hamiweb__310p3-vnpu-container-npu-smi-log-preamble-excerpt.txt"
            ),
            &["NPU", "Name"]
        ),
        None
    );
}

#[test]
fn npu_smi_mapping_and_topology_are_column_tables() {
    let t = columns(
        "ascend/npu-smi/gpustack-test__8x-910b-info-m-mcu-rows-redacted.txt",
        &["NPU ID", "Chip Name"],
    );
    assert_eq!(t.rows.len(), 16);
    assert_eq!(t.rows[0].get("Chip Name"), Some("Ascend xxx"));
    assert_eq!(t.rows[1].get("Chip Name"), Some("Mcu"));
    assert_eq!(t.rows[1].get("Chip Logic ID"), None);
    let t = columns(
        "ascend/npu-smi/arthurchiao__8x-910b1-info-t-topo-hccs.txt",
        &["CPU Affinity"],
    );
    assert_eq!(t.rows.len(), 8, "the legend is not a row");
    assert_eq!(t.rows[0].name.as_deref(), Some("NPU0"));
    assert_eq!(t.rows[0].get("NPU0"), Some("X"));
    assert_eq!(t.rows[0].get("NPU1"), Some("HCCS"));
    assert_eq!(t.rows[1].get("CPU Affinity"), Some("0-23"));
}

#[test]
fn hy_smi_and_hygon_rocm_smi_columns() {
    let t = columns(
        "hygon/hy-smi/paddlenlp__4x-k100ai-dtk24.04.1-hy-smi-mode-column.txt",
        &["DCU", "Temp"],
    );
    assert_eq!(t.rows.len(), 4);
    let r = &t.rows[0];
    assert_eq!(r.get("Temp").and_then(celsius), Some(49.0));
    assert_eq!(r.get("AvgPwr").and_then(watts), Some(118.0));
    assert_eq!(r.get("VRAM%").and_then(percent), Some(0.0));
    assert_eq!(r.get("Mode"), Some("Normal"));
    let t = columns(
        "hygon/rocm-smi/paddledocs__4x-dcu-dtk23.10-rocm-smi-dcu-columns.txt",
        &["DCU", "Temp"],
    );
    assert_eq!(t.rows.len(), 4);
    assert_eq!(t.rows[3].get("Temp").and_then(celsius), Some(29.0));
    assert_eq!(t.rows[3].get("PwrCap").and_then(watts), Some(280.0));
    let rocminfo =
        capture("hygon/rocminfo/gpustack__1x-k1xx-ai-dtk24.04.3-rocminfo-ansi-banner.txt");
    assert_eq!(
        text::clean(&rocminfo).lines().next(),
        Some("hygon module is loaded")
    );
}

#[test]
fn ppu_smi_three_lines_a_device() {
    let path = "thead/ppu-smi/theadkmddoc__1x-ppu-zw810e-ppu-smi1.17-kmd2.1.1-hggc-na.txt";
    let t = table(path, &["PPU", "Name"]);
    assert_eq!(t.records.len(), 1);
    let r = &t.records[0];
    assert_eq!(r.lines, 3);
    assert_eq!(r.get("Name"), Some("PPU-ZW810E"));
    assert_eq!(r.raw("Persistence M."), Some("N/A"));
    assert_eq!(r.get("Bus-Id"), Some("00000000:00:11.0"));
    assert_eq!(r.get("Volatile Uncorr. ECC"), Some("0"));
    assert_eq!(r.get("Temp").and_then(celsius), Some(26.0));
    assert_eq!(r.get("Pwr:Usage/Cap").and_then(pair), Some(("57W", "400W")));
    assert_eq!(mib(r.get("Memory-Usage")), (Some(2), Some(98304)));
    assert_eq!(r.get("PPU-Util").and_then(percent), Some(0.0));
    assert_eq!(
        (r.get("Compute M."), r.get("MIG M.")),
        (Some("Default"), Some("Disabled"))
    );
    let banner = capture(path);
    assert_eq!(
        version_after(&banner, "Driver Version"),
        Some("2.1.1-rbd225")
    );
    assert_eq!(version_after(&banner, "HGGC Version"), None);
    assert_eq!(version_after(&banner, "PPU-SMI"), Some("1.17"));
}

#[test]
fn ixsmi_sixteen_cards() {
    let path = "iluvatar/ixsmi/paddlenlp__16x-bi-v150-ixml4.1.0-dec2024.txt";
    let t = table(path, &["GPU", "Name"]);
    assert_eq!(t.records.len(), 16);
    let r = &t.records[0];
    assert_eq!(
        (r.get("GPU"), r.get("Name")),
        (Some("0"), Some("Iluvatar BI-V150"))
    );
    assert_eq!(r.get("Bus-Id"), Some("00000000:13:00.0"));
    assert_eq!(r.get("Pwr:Usage/Cap").and_then(pair), Some(("N/A", "N/A")));
    assert_eq!(mib(r.get("Memory-Usage")), (Some(116), Some(32768)));
    assert_eq!(r.get("Clock-SM"), Some("1500MHz"));
    assert_eq!(
        t.records[1].get("Pwr:Usage/Cap").and_then(pair),
        Some(("93W", "350W"))
    );
    assert_eq!(t.records[15].get("Bus-Id"), Some("00000000:67:00.0"));
    let banner = capture(path);
    assert_eq!(version_after(&banner, "Driver Version"), Some("4.1.0"));
    assert_eq!(version_after(&banner, "CUDA Version"), Some("10.2"));
    let na =
        capture("iluvatar/ixsmi/ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt");
    assert_eq!(version_after(&na, "CUDA Version"), None);
    assert_eq!(version_after(&na, "IX-ML"), Some("4.0.0"));
}

#[test]
fn mthreads_gmi_without_column_joints() {
    let path = "mthreads/mthreads-gmi/vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt";
    let t = table(path, &["ID", "PCIe"]);
    assert_eq!(t.records.len(), 3, "the excerpt stops inside the third");
    let r = &t.records[0];
    assert_eq!((r.get("ID"), r.get("Name")), (Some("0"), Some("MTT S5000")));
    assert_eq!(
        (r.get("Device Type"), r.get("Perf")),
        (Some("Physical"), Some("P0"))
    );
    assert_eq!(r.get("PCIe"), Some("00000000:2a:00.0"));
    assert_eq!(
        r.get("Pcie Lane Width").and_then(pair),
        Some(("16x", "16x"))
    );
    assert_eq!(mib(r.get("Mem")), (Some(66641), Some(81920)));
    assert_eq!(r.get("Temp").and_then(celsius), Some(52.0));
    assert_eq!(r.get("ECC Mode"), Some("On-die, EDC"));
    assert_eq!(t.records[2].lines, 2);
    assert_eq!(
        version_after(&capture(path), "Driver Version"),
        Some("3.3.5-server")
    );
    assert_eq!(version_after(&capture(path), "mthreads-gmi"), Some("2.3.2"));
    // The older layout without `Perf`, and a capture trimmed to one line a GPU.
    let t = table(
        "mthreads/mthreads-gmi/torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt",
        &["ID", "PCIe"],
    );
    assert_eq!(t.records[0].get("Perf"), None);
    assert_eq!(t.records[0].raw("ECC Mode"), Some("N/A"));
    let t = table(
        "mthreads/mthreads-gmi/torchmusa-134__s30-gmi2.0.0-driver3.1.0-user-trimmed.txt",
        &["ID", "PCIe"],
    );
    assert_eq!(t.records.len(), 1);
    assert_eq!(mib(t.records[0].get("Mem")), (Some(509), Some(4096)));
}

#[test]
fn cnmon_tables_redacted_and_old() {
    let path = "cambricon/cnmon/paddlenlp__8x-mluxxx-redacted-cnmon-v5.10.31-mode-full.txt";
    let t = table(path, &["Card", "Bus-Id"]);
    assert_eq!(t.records.len(), 8, "the process table is not read");
    let r = &t.records[0];
    assert_eq!(
        (r.get("Card"), r.raw("VF"), r.get("Name")),
        (Some("0"), Some("/"), Some("MLUXXX-XX"))
    );
    assert_eq!(
        (r.get("Firmware"), r.get("Bus-Id")),
        (Some("v1.5.0"), Some("0000:4F:00.0"))
    );
    assert_eq!(
        mib(r.get("Memory-Usage")),
        (Some(0), None),
        "the redacted total is absent"
    );
    assert_eq!(
        r.get("Pwr:Usage/Cap").and_then(pair),
        Some(("105 W", "550 W"))
    );
    assert_eq!(
        (r.get("Mode"), r.get("Compute-Mode")),
        (Some("FULL"), Some("Default"))
    );
    assert_eq!(version_after(&capture(path), "Driver"), Some("5.10.31"));
    let t = table(
        "cambricon/cnmon/paddledocs__3x-mlu370-x4-cnmon-v4.20.11-inited-vmemory.txt",
        &["Card", "Name"],
    );
    assert_eq!(t.records.len(), 3);
    let r = &t.records[2];
    assert_eq!(
        (r.get("Inited"), r.get("Driver"), r.get("Bus-Id")),
        (Some("On"), Some("v4.20.11"), None)
    );
    assert_eq!(mib(r.get("vMemory-Usage")), (Some(10240), Some(1_048_576)));
    assert_eq!(mib(r.get("Memory-Usage")), (Some(0), Some(23308)));
}

#[test]
fn mx_smi_tables_with_and_without_a_power_cap() {
    let path = "metax/mx-smi/gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt";
    let t = table(path, &["GPU", "Bus-id"]);
    let r = &t.records[0];
    assert_eq!(
        (r.get("NAME"), r.get("Bus-id")),
        (Some("MetaX C500"), Some("0000:0e:00.0"))
    );
    assert_eq!(r.get("GPU-Util").and_then(percent), Some(0.0));
    assert_eq!(r.get("Temp").and_then(celsius), Some(35.0));
    assert_eq!(r.get("Pwr:Usage/Cap").and_then(pair), Some(("54W", "350W")));
    assert_eq!(mib(r.get("Memory-Usage")), (Some(826), Some(65536)));
    let banner = capture(path);
    assert_eq!(
        version_after(&banner, "Kernel Mode Driver Version"),
        Some("2.12.13")
    );
    assert_eq!(version_after(&banner, "MACA Version"), Some("2.29.0.19"));
    let t = table(
        "metax/mx-smi/paddlenlp__8x-mxc550-mx-smi2.1.6-kmd2.5.014-power-no-cap.txt",
        &["GPU", "Bus-id"],
    );
    assert_eq!(t.records.len(), 8, "the process table is not read");
    assert_eq!(t.records[7].get("Power").and_then(watts), Some(47.0));
    assert_eq!(t.records[7].get("Pwr:Usage/Cap"), None);
}
