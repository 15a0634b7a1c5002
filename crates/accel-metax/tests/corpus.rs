//! The captured MetaX corpus: every file in `../shared/fixtures/metax/`, and in this
//! repository's `testdata/captures/metax/` (captures its health reading relies on), read by the
//! parser it is for, with what it must yield. The folder missing fails; a file on disk without
//! an expectation here fails; an expectation without its file fails.

use std::path::PathBuf;

use accel_metax::count_ecc::{self, EccCounts};
use accel_metax::mxsmi::{self, MxSmiListed, MxSmiTable};

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("metax")
}

fn fixture_text(name: &str) -> String {
    let path = fixtures().join("mx-smi").join(name);
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

fn table(name: &str) -> MxSmiTable {
    mxsmi::parse_table(&fixture_text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

type Expectation = fn(&MxSmiTable);

fn expectations() -> Vec<(&'static str, Expectation)> {
    vec![
        (
            "gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt",
            |t| {
                // HAZARDS.md item 1: the preamble is skipped, the title box read for versions.
                assert_eq!(t.tool_version.as_deref(), Some("2.1.12"));
                assert_eq!(t.driver_version.as_deref(), Some("2.12.13"));
                assert_eq!(t.maca_version.as_deref(), Some("2.29.0.19"));
                assert_eq!(t.gpus.len(), 2, "the excerpt ends after GPU 1");
                let g = &t.gpus[1];
                assert_eq!(g.gpu, Some(1));
                assert_eq!(g.name.as_deref(), Some("MetaX C500"));
                assert_eq!(g.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:0f:00.0"));
                // Item 4: no blanks around the slash.
                assert_eq!(
                    (g.memory_used_mib, g.memory_total_mib),
                    (Some(826), Some(65536))
                );
                assert_eq!(mxsmi::family(g.name.as_deref().unwrap()), Some("MXC"));
            },
        ),
        (
            "paddlenlp__8x-mxc550-mx-smi2.1.6-kmd2.5.014-power-no-cap.txt",
            |t| {
                // Item 1: a three-digit patch level kept as printed; item 2: the older header.
                assert_eq!(t.driver_version.as_deref(), Some("2.5.014"));
                assert_eq!(t.maca_version.as_deref(), Some("2.23.0.1018"));
                assert_eq!(t.gpus.len(), 8, "the process table is not read (item 5)");
                let g = &t.gpus[7];
                assert_eq!(g.name.as_deref(), Some("MXC550"));
                assert_eq!(g.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:da:00.0"));
                assert_eq!(g.memory_total_mib, Some(65536));
                // Item 3: the other spelling of the name gets its family too.
                assert_eq!(mxsmi::family("MXC550"), Some("MXC"));
            },
        ),
    ]
}

#[test]
fn every_capture_is_read_as_expected() {
    let expectations = expectations();
    accel_testkit::assert_folder_covered(
        &fixtures().join("mx-smi"),
        expectations.iter().map(|(n, _)| n),
    );
    accel_testkit::assert_same_files(
        "metax",
        accel_testkit::file_names(&fixtures()),
        ["HAZARDS.md", "SOURCES.md", "mx-smi"],
    );
    for (name, check) in expectations {
        check(&table(name));
    }
}

#[test]
fn another_vendors_mx_smi_is_refused() {
    // HAZARDS.md item 6: Moffett AI's tool of the same name prints no MetaX banner or MACA.
    let text = "+------+------+\n| GPU  Name | Bus-id |\n|======+======|\n| 0  S30 | 0000:01:00.0 |\n+------+------+\n";
    let e = mxsmi::parse_table(text).unwrap_err();
    assert!(matches!(e, mxsmi::MxSmiError::NotMetax { .. }), "{e}");
    assert!(matches!(
        mxsmi::parse_table("no table\n"),
        Err(mxsmi::MxSmiError::NoTable { .. })
    ));
}

/// HAZARDS.md item 6 from the other side: the MetaX banner or the MACA version alone is
/// enough. The 2.1.6 capture without its log banner (an excerpt from the box down; its names,
/// `MXC550`, never say MetaX) is read by its MACA version; the 2.1.12 capture on a host
/// without the MACA runtime (`MACA Version: N/A`) by its banner.
#[test]
fn either_the_banner_or_the_maca_version_makes_a_table_metaxs() {
    let paddle = fixture_text("paddlenlp__8x-mxc550-mx-smi2.1.6-kmd2.5.014-power-no-cap.txt");
    let no_banner: String = paddle
        .lines()
        .filter(|l| !l.contains("MetaX"))
        .map(|l| format!("{l}\n"))
        .collect();
    let t = mxsmi::parse_table(&no_banner).unwrap();
    assert_eq!(t.maca_version.as_deref(), Some("2.23.0.1018"));
    assert_eq!(t.gpus.len(), 8);
    let gpustack = fixture_text("gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt");
    let no_maca = gpustack.replace("MACA Version: 2.29.0.19", "MACA Version: N/A      ");
    assert_ne!(no_maca, gpustack);
    let t = mxsmi::parse_table(&no_maca).unwrap();
    assert_eq!(t.maca_version, None);
    assert_eq!(t.gpus.len(), 2);
}

/// A record is a GPU when it names its ordinal or its bus id: one printed as a placeholder
/// leaves the other to identify it (the record is skipped only when neither is there).
#[test]
fn a_gpu_with_its_ordinal_or_its_bus_id_alone_is_still_read() {
    let gpustack = fixture_text("gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt");
    let masked = gpustack
        .replace("| 0000:0e:00.0        |", "| N/A                 |")
        .replace("| 1           MetaX C500", "| N/A         MetaX C500");
    let t = mxsmi::parse_table(&masked).unwrap();
    let ids: Vec<_> = t
        .gpus
        .iter()
        .map(|g| (g.gpu, g.bus_id.map(|b| b.sysfs())))
        .collect();
    assert_eq!(
        ids,
        [(Some(0), None), (None, Some("0000:0f:00.0".to_string()))]
    );
}

/// `testdata/captures/metax/` (SOURCES.md there).
fn repo_captures() -> PathBuf {
    accel_testkit::workspace_root().join("testdata/captures/metax")
}

fn capture(name: &str) -> String {
    let path = repo_captures().join("mx-smi").join(name);
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

type CaptureCheck = fn(&str);

fn repo_expectations() -> Vec<(&'static str, CaptureCheck)> {
    vec![
        (
            "kcover__8x-c500-mx-smi2.2.9-count-ecc-excerpt.txt",
            |text| {
                // The one ECC print captured: GPU 0's block, the preamble skipped; the two items
                // it prints read by section and words, the DRAM counts not printed stay none.
                let blocks = count_ecc::parse_count_ecc(text).unwrap();
                assert_eq!(
                    blocks,
                    [EccCounts {
                        gpu: Some(0),
                        bus_id: Some("0000:08:00.0".parse().unwrap()),
                        sram_correctable: Some(0),
                        retired_double_bit: Some(0),
                        ..EccCounts::default()
                    }]
                );
            },
        ),
        ("kcover__8x-c500-mx-smi2.2.9-list-excerpt.txt", |text| {
            // `mx-smi -L` as 2.2.9 prints it: the ordinal, the bus id and the UUID read
            // around the model and the `Available` state.
            let listed = mxsmi::parse_list(text).unwrap();
            assert_eq!(
                listed,
                [
                    MxSmiListed {
                        gpu: Some(0),
                        bus_id: Some("0000:08:00.0".parse().unwrap()),
                        uuid: "GPU-e702f06b-bbd6-bc06-5196-90a5554a24ba".into(),
                    },
                    MxSmiListed {
                        gpu: Some(7),
                        bus_id: Some("0000:3c:00.0".parse().unwrap()),
                        uuid: "GPU-0e715b45-bcef-1500-e2db-752724095700".into(),
                    },
                ]
            );
        }),
    ]
}

/// A bus id is a word with colons and a function after a dot: a time of day
/// (`14:23:08`, which would read as domain 0x14, bus 0x23, device 8) is none, so `mx-smi -L`
/// kept with a logger's timestamp still gives each GPU's own address.
#[test]
fn a_time_of_day_on_a_list_line_is_no_bus_id() {
    let listed = capture("kcover__8x-c500-mx-smi2.2.9-list-excerpt.txt");
    let stamped: String = listed
        .lines()
        .map(|l| format!("2026-04-23 14:23:08 {l}\n"))
        .collect();
    let buses: Vec<_> = mxsmi::parse_list(&stamped)
        .unwrap()
        .iter()
        .map(|g| g.bus_id.map(|b| b.sysfs()))
        .collect();
    assert_eq!(
        buses,
        [
            Some("0000:08:00.0".to_string()),
            Some("0000:3c:00.0".to_string())
        ]
    );
}

#[test]
fn every_repo_capture_is_read_as_expected() {
    let expectations = repo_expectations();
    accel_testkit::assert_folder_covered(
        &repo_captures().join("mx-smi"),
        expectations.iter().map(|(n, _)| n),
    );
    accel_testkit::assert_same_files(
        "testdata/captures/metax",
        accel_testkit::file_names(&repo_captures()),
        ["SOURCES.md", "mx-smi"],
    );
    for (name, check) in expectations {
        check(&capture(name));
    }
}

/// Issue 44 item 8: the `Process:` table under the GPU table (HAZARDS.md item 5), read in every
/// capture: idle (`Some([])`) where one is printed, `None` where the capture ends before it.
#[test]
fn every_process_table_is_read_as_expected() {
    use accel_metax::procs;
    let expected = [
        (
            "gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt",
            None,
        ),
        (
            "paddlenlp__8x-mxc550-mx-smi2.1.6-kmd2.5.014-power-no-cap.txt",
            Some(Vec::new()),
        ),
    ];
    accel_testkit::assert_folder_covered(
        &fixtures().join("mx-smi"),
        expected.iter().map(|(n, _)| n),
    );
    for (name, processes) in expected {
        let path = fixtures().join("mx-smi").join(name);
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert_eq!(procs::parse_processes(&text), processes, "{name}");
    }
}
