//! The captured Iluvatar corpus: every file in `../shared/fixtures/iluvatar/` read by the ixsmi
//! table parser, one insta snapshot per file, and hand-written asserts for the numbered HAZARDS
//! items. The folder missing fails; a file without an expectation here fails; an expectation
//! without its file fails.

use accel_iluvatar::ixsmi::{self, IxsmiTable};

const FILES: &[&str] = &[
    "gpustack-3256__1x-bi-v100-ixml3.1.1-driver3.1.0-centos7-excerpt.txt",
    "ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt",
    "paddlenlp__16x-bi-v150-ixml4.1.0-dec2024.txt",
];

fn capture(file: &str) -> String {
    let path = accel_testkit::shared_fixture_folder("iluvatar", "ixsmi").join(file);
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

fn read(file: &str) -> IxsmiTable {
    ixsmi::parse_table(&capture(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_ixsmi_capture_is_covered_and_snapshotted() {
    let root = accel_testkit::shared_fixtures("iluvatar");
    let on_disk = accel_testkit::file_names(&root.join("ixsmi"));
    accel_testkit::assert_same_files("iluvatar/ixsmi", on_disk, FILES.iter());
    for file in FILES {
        insta::assert_debug_snapshot!(format!("ixsmi-{file}"), read(file));
    }
}

#[test]
fn hazard_1_the_table_is_read_by_its_own_header_with_or_without_a_timestamp() {
    let t = read("ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt");
    assert_eq!(t.gpus.len(), 1, "the process table is not a GPU");
    let g = &t.gpus[0];
    assert_eq!(g.name.as_deref(), Some("Iluvatar BI-V150S"));
    assert_eq!(g.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:8a:00.0"));
    assert_eq!(
        (g.memory_used_mib, g.memory_total_mib),
        (Some(114), Some(32_768))
    );
    assert_eq!(
        (g.temperature_c, g.utilization_percent),
        (Some(33.0), Some(0.0))
    );
}

#[test]
fn hazard_2_tool_and_driver_versions_differ_and_cuda_may_be_absent() {
    let old = read("gpustack-3256__1x-bi-v100-ixml3.1.1-driver3.1.0-centos7-excerpt.txt").banner;
    assert_eq!(old.tool_version.as_deref(), Some("3.1.1"));
    assert_eq!(old.driver_version.as_deref(), Some("3.1.0"));
    assert_eq!(old.cuda_version.as_deref(), Some("10.2"));
    let container = read("ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt").banner;
    assert_eq!(
        (
            container.tool_version.as_deref(),
            container.driver_version.as_deref()
        ),
        (Some("4.0.0"), Some("4.1.0"))
    );
    assert_eq!(container.cuda_version, None, "N/A is no version");
}

/// The banner without the GPU box under it (the capture cut after its title) is ixsmi's
/// output with no GPUs, not text of another program; either version is banner enough.
#[test]
fn a_banner_alone_is_a_table_without_gpus() {
    let text = capture("ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt");
    let banner: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    assert!(banner.contains("IX-ML: 4.0.0"), "{banner}");
    let t = ixsmi::parse_table(&banner).unwrap();
    assert_eq!(t.banner.driver_version.as_deref(), Some("4.1.0"));
    assert_eq!(t.gpus, []);
    let driver_only = banner.replace("IX-ML: 4.0.0", "IX-ML: N/A  ");
    let t = ixsmi::parse_table(&driver_only).unwrap();
    assert_eq!(
        (t.banner.tool_version, t.banner.driver_version.as_deref()),
        (None, Some("4.1.0"))
    );
    assert_eq!(t.gpus, []);
}

#[test]
fn hazard_3_half_the_bi_v150s_report_no_power_and_that_is_none() {
    let t = read("paddlenlp__16x-bi-v150-ixml4.1.0-dec2024.txt");
    assert_eq!(t.gpus.len(), 16);
    for (i, g) in t.gpus.iter().enumerate() {
        assert_eq!(g.index, Some(i as u32));
        if i % 2 == 0 {
            assert_eq!((g.power_draw_w, g.power_limit_w), (None, None), "gpu {i}");
        } else {
            assert_eq!(g.power_limit_w, Some(350.0), "gpu {i}");
        }
    }
    assert_eq!(t.gpus[1].power_draw_w, Some(93.0));
}

#[test]
fn hazard_4_and_5_names_keep_their_prefix_and_cells_read_whole() {
    let t = read("gpustack-3256__1x-bi-v100-ixml3.1.1-driver3.1.0-centos7-excerpt.txt");
    let g = &t.gpus[0];
    assert_eq!(g.name.as_deref(), Some("Iluvatar BI-V100"));
    assert_eq!(
        g.memory_total_mib,
        Some(32_768),
        "a 'BI100 24G' prints 32768MiB"
    );
    assert_eq!((g.power_draw_w, g.power_limit_w), (Some(40.0), Some(250.0)));
    assert_eq!(g.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:98:00.0"));
}

/// Issue 44 item 8: the `Processes:` table under the GPU table, one snapshot per capture that
/// prints one (every ixsmi capture does, each `No running processes found`: `Some([])`, never
/// `None`, which means no table was printed).
#[test]
fn every_ixsmi_process_table_is_read_and_snapshotted() {
    use accel_iluvatar::procs;
    for file in FILES {
        let path = accel_testkit::shared_fixture_folder("iluvatar", "ixsmi").join(file);
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let processes = procs::parse_processes(&text);
        assert_eq!(processes, Some(Vec::new()), "{file}: an idle table");
        insta::assert_debug_snapshot!(format!("ixsmi-processes-{file}"), processes);
    }
}
