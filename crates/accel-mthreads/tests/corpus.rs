//! The captured Moore Threads corpus: every file in `../shared/fixtures/mthreads/` read by the
//! mthreads-gmi table parser, one insta snapshot per file, and hand-written asserts for the
//! numbered HAZARDS items. A missing folder, a file without an expectation, or an expectation
//! without its file fails.

use accel_mthreads::gmi::{self, GmiTable};

const FILES: &[&str] = &[
    "torchmusa-134__s30-gmi2.0.0-driver3.1.0-user-trimmed.txt",
    "torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt",
    "vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt",
];

fn capture(file: &str) -> String {
    let path = accel_testkit::shared_fixture_folder("mthreads", "mthreads-gmi").join(file);
    String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
}

fn read(file: &str) -> GmiTable {
    gmi::parse_table(&capture(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_gmi_capture_is_covered_and_snapshotted() {
    let root = accel_testkit::shared_fixtures("mthreads");
    let on_disk = accel_testkit::file_names(&root.join("mthreads-gmi"));
    accel_testkit::assert_same_files("mthreads/mthreads-gmi", on_disk, FILES.iter());
    for file in FILES {
        insta::assert_debug_snapshot!(format!("gmi-{file}"), read(file));
    }
}

#[test]
fn hazard_1_and_2_both_layouts_read_by_header() {
    let new = read("vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt");
    assert_eq!(new.tool_version.as_deref(), Some("2.3.2"));
    assert_eq!(new.gpus.len(), 3, "the excerpt stops inside the third");
    let g = &new.gpus[0];
    assert_eq!((g.index, g.name.as_deref()), (Some(0), Some("MTT S5000")));
    assert_eq!(g.device_type.as_deref(), Some("Physical"));
    assert_eq!(g.temperature_c, Some(52.0));
    let old = read("torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt");
    assert_eq!(old.tool_version.as_deref(), Some("1.14.0"));
    assert_eq!(old.gpus.len(), 4);
    assert_eq!(
        old.gpus
            .iter()
            .map(|g| g.bus_id.unwrap().sysfs())
            .collect::<Vec<_>>(),
        [
            "0000:0f:00.0",
            "0000:10:00.0",
            "0000:11:00.0",
            "0000:13:00.0"
        ]
    );
}

#[test]
fn hazard_3_memory_is_used_of_total_and_the_driver_keeps_its_suffix() {
    let t = read("vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt");
    assert_eq!(t.driver_version.as_deref(), Some("3.3.5-server"));
    assert_eq!(
        (t.gpus[0].memory_used_mib, t.gpus[0].memory_total_mib),
        (Some(66_641), Some(81_920))
    );
}

#[test]
fn hazard_4_the_ecc_mode_keeps_its_comma_and_n_a_is_kept_as_printed() {
    let s5000 = read("vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt");
    assert_eq!(s5000.gpus[0].ecc_mode.as_deref(), Some("On-die, EDC"));
    assert_eq!(s5000.gpus[2].ecc_mode, None, "the excerpt stops before it");
    let s4000 = read("torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt");
    assert_eq!(s4000.gpus[0].ecc_mode.as_deref(), Some("N/A"));
}

#[test]
fn hazard_5_a_trimmed_capture_gives_the_rows_it_has() {
    let t = read("torchmusa-134__s30-gmi2.0.0-driver3.1.0-user-trimmed.txt");
    assert_eq!(t.gpus.len(), 1);
    let g = &t.gpus[0];
    assert_eq!(g.name.as_deref(), Some("MTT S30"));
    assert_eq!(
        (g.memory_used_mib, g.memory_total_mib),
        (Some(509), Some(4096))
    );
    assert_eq!(g.device_type, None, "the device-type line was trimmed");
    assert!(!g.is_virtual());
}

/// The title without the table under it (the capture cut after its rule) is mthreads-gmi's
/// output with no GPUs, not another program's text; either version is title enough.
#[test]
fn a_title_alone_is_a_table_without_gpus() {
    let text = capture("torchmusa-134__s30-gmi2.0.0-driver3.1.0-user-trimmed.txt");
    let title: String = text.lines().take(4).map(|l| format!("{l}\n")).collect();
    let t = gmi::parse_table(&title).unwrap();
    assert_eq!(
        (t.tool_version.as_deref(), t.driver_version.as_deref()),
        (Some("2.0.0"), Some("3.1.0"))
    );
    assert_eq!(t.gpus, []);
    let driver_only = title.replace("mthreads-gmi:2.0.0", "mthreads-gmi     ");
    let t = gmi::parse_table(&driver_only).unwrap();
    assert_eq!(
        (t.tool_version, t.driver_version.as_deref()),
        (None, Some("3.1.0"))
    );
    assert_eq!(t.gpus, []);
}

/// A row is a GPU when it names its index or its bus id: one printed as a placeholder leaves
/// the other to identify it.
#[test]
fn a_gpu_with_its_index_or_its_bus_id_alone_is_still_read() {
    let text = capture("torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt")
        .replace("|00000000:0f:00.0    |", "|N/A                 |")
        .replace("1    MTT S4000", "-    MTT S4000");
    let t = gmi::parse_table(&text).unwrap();
    let ids: Vec<_> = t
        .gpus
        .iter()
        .map(|g| (g.index, g.bus_id.map(|b| b.sysfs())))
        .collect();
    assert_eq!(
        ids,
        [
            (Some(0), None),
            (None, Some("0000:10:00.0".to_string())),
            (Some(2), Some("0000:11:00.0".to_string())),
            (Some(3), Some("0000:13:00.0".to_string())),
        ]
    );
}
