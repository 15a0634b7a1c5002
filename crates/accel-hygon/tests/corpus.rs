//! The captured Hygon corpus: every file in `../shared/fixtures/hygon/` read by the parser it is
//! for, one insta snapshot per file, and hand-written asserts for the numbered HAZARDS.md items.
//! The folder missing fails; a file on disk without an expectation here fails; an expectation
//! without its file fails.

use std::path::{Path, PathBuf};

use accel_hygon::{health, hysmi, rocminfo};

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("hygon")
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned()
}

/// Every `<folder>/<file>` and top-level file on disk.
fn on_disk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            for file in accel_testkit::file_names(&entry.path()) {
                out.push(format!("{name}/{file}"));
            }
        } else {
            out.push(name);
        }
    }
    out
}

/// What each capture is read by, and the snapshot's name.
fn expectations() -> Vec<&'static str> {
    vec![
        "SOURCES.md",
        "HAZARDS.md",
        "dev/gpustack-5337__bw150-ll-dev-dri-in-container-irc-group-excerpt.txt",
        "hy-smi/gpustack-2032__k100ai-hy-smi-json-truncated-excerpt.txt",
        // `hy-smi --healthcheck`, read by `accel_hygon::health` (HAZARDS 12).
        "hy-smi/hygonai-hcu-dcgm__hy-smi-healthcheck-one-card-line-source-comment-example.txt",
        "hy-smi/paddlenlp__4x-k100ai-dtk24.04.1-hy-smi-mode-column.txt",
        // No parser yet for `hy-virtual -show-device-info` (HAZARDS 13).
        "hy-virtual/hygonai-k8s-hcu-device-plugin__hy-virtual-show-device-info-in-vhcu-container-doc-example.txt",
        "rocm-smi/gpustack-3257__k100ai-rocm-smi-json-c3000-vendor-truncated-excerpt.txt",
        "rocm-smi/paddledocs__4x-dcu-dtk23.10-rocm-smi-dcu-columns.txt",
        "rocminfo/gpustack__1x-k1xx-ai-dtk24.04.3-rocminfo-ansi-banner.txt",
    ]
}

/// A capture no parser reads yet: kept as what it is, its line count and first line.
#[derive(Debug)]
#[allow(dead_code)] // read through `Debug`, for the snapshot
struct Unparsed<'a> {
    lines: usize,
    first_line: Option<&'a str>,
}

fn unparsed(text: &str) -> Unparsed<'_> {
    Unparsed {
        lines: text.lines().count(),
        first_line: text.lines().next(),
    }
}

fn snapshot_name(file: &str) -> String {
    file.replace('/', "__")
}

#[test]
fn every_capture_has_expectations_and_meets_them() {
    let root = fixtures();
    accel_testkit::assert_same_files("hygon", on_disk(&root), expectations());
    for file in expectations() {
        let text = read(&root.join(file));
        let name = snapshot_name(file);
        match file.split('/').next().unwrap_or("") {
            "dev" => {
                insta::assert_debug_snapshot!(name, accel_host::drm::listed_char_devices(&text))
            }
            "hy-smi" if file.contains("healthcheck") => {
                insta::assert_debug_snapshot!(name, health::parse_healthcheck(&text))
            }
            "hy-virtual" => insta::assert_debug_snapshot!(name, unparsed(&text)),
            "hy-smi" | "rocm-smi" if file.contains("json") => {
                let program = if file.starts_with("hy-smi") {
                    "hy-smi"
                } else {
                    "rocm-smi"
                };
                insta::assert_debug_snapshot!(name, hysmi::parse_json(program, &text));
            }
            "hy-smi" | "rocm-smi" => insta::assert_debug_snapshot!(name, hysmi::parse_table(&text)),
            "rocminfo" => insta::assert_debug_snapshot!(name, rocminfo::parse(&text)),
            _ => assert!(file.ends_with(".md"), "{file}"),
        }
    }
}

/// HAZARDS 1, 2, 3: the DTK-era rocm-smi's `DCU` table (a `Fan` column, lower-case `c`) and
/// hy-smi's (a `Mode` column, upper-case `C`) read alike, by label.
#[test]
fn tables_of_both_releases_read_by_label() {
    let root = fixtures();
    let old = hysmi::parse_table(&read(
        &root.join("rocm-smi/paddledocs__4x-dcu-dtk23.10-rocm-smi-dcu-columns.txt"),
    ))
    .unwrap();
    let new = hysmi::parse_table(&read(
        &root.join("hy-smi/paddlenlp__4x-k100ai-dtk24.04.1-hy-smi-mode-column.txt"),
    ))
    .unwrap();
    assert_eq!((old.len(), new.len()), (4, 4));
    assert_eq!(old[0].temperature_c, Some(30.0));
    assert_eq!(old[0].power_cap_watts, Some(280.0));
    assert_eq!(old[0].mode, None);
    assert_eq!(new[3].temperature_c, Some(49.0));
    assert_eq!(new[3].power_watts, Some(138.0));
    assert_eq!(new[3].mode.as_deref(), Some("Normal"));
}

/// HAZARDS 4, 5: Hygon's JSON keys, MiB VRAM, a unique id without `0x`; the vendor string
/// differs between two K100_AI captures while the device id does not; both captures are cut,
/// and only their whole cards are read.
#[test]
fn the_cut_json_captures_keep_their_whole_cards() {
    let root = fixtures();
    let hy = hysmi::parse_json(
        "hy-smi",
        &read(&root.join("hy-smi/gpustack-2032__k100ai-hy-smi-json-truncated-excerpt.txt")),
    )
    .unwrap();
    let rocm = hysmi::parse_json(
        "rocm-smi",
        &read(&root.join(
            "rocm-smi/gpustack-3257__k100ai-rocm-smi-json-c3000-vendor-truncated-excerpt.txt",
        )),
    )
    .unwrap();
    assert!(hy.truncated && rocm.truncated);
    assert_eq!((hy.cards.len(), rocm.cards.len()), (2, 1));
    let (a, b) = (&hy.cards[0], &rocm.cards[0]);
    assert_eq!(a.unique_id, Some(0x7137_d9b2_a08a_4841));
    assert_eq!(a.vram_mib, Some(65_520));
    assert_eq!(a.name.as_deref(), Some("K100_AI"));
    assert_eq!((a.device_id, b.device_id), (Some(0x6210), Some(0x6210)));
    assert_ne!(a.vendor, b.vendor);
}

/// A release that prints a figure as a JSON number rather than a string (every capture
/// quotes them) is read the same: the number's text goes through the same conversion.
#[test]
fn a_figure_printed_as_a_json_number_reads_as_if_quoted() {
    let text =
        read(&fixtures().join("hy-smi/gpustack-2032__k100ai-hy-smi-json-truncated-excerpt.txt"));
    let numbers = text
        .replace(
            r#""vram Total Memory (MiB)": "65520""#,
            r#""vram Total Memory (MiB)": 65520"#,
        )
        .replace(r#""HCU use (%)": "0.0""#, r#""HCU use (%)": 12.5"#);
    assert_ne!(numbers, text);
    let doc = hysmi::parse_json("hy-smi", &numbers).unwrap();
    let read: Vec<_> = doc
        .cards
        .iter()
        .map(|c| (c.vram_mib, c.utilisation_percent))
        .collect();
    assert_eq!(
        read,
        [(Some(65_520), Some(12.5)), (Some(65_520), Some(12.5))]
    );
}

/// HAZARD 6: the ANSI banner is stripped, the DCU agent is `Device Type: DCU`, a redacted
/// marketing name is kept as printed (it is not a placeholder).
#[test]
fn rocminfo_finds_the_dcu_agent_past_the_coloured_banner() {
    let agents = rocminfo::parse(&read(
        &fixtures().join("rocminfo/gpustack__1x-k1xx-ai-dtk24.04.3-rocminfo-ansi-banner.txt"),
    ))
    .unwrap();
    let dcus: Vec<_> = agents.iter().filter(|a| a.is_accelerator()).collect();
    assert_eq!(dcus.len(), 1);
    assert_eq!(dcus[0].name.as_deref(), Some("gfx928"));
    assert_eq!(dcus[0].chip_id, Some(0x6210));
    assert_eq!(dcus[0].vendor_name.as_deref(), Some("HYGON"));
}

/// HAZARD 7: the in-container listing shows card0..card8 under an unrelated group name.
#[test]
fn the_dri_listing_reads_whatever_the_group_is_called() {
    let nodes = accel_host::drm::listed_char_devices(&read(
        &fixtures().join("dev/gpustack-5337__bw150-ll-dev-dri-in-container-irc-group-excerpt.txt"),
    ));
    assert_eq!(nodes.len(), 9);
    assert_eq!(nodes[8], ("card8".to_string(), 226, 8));
}

/// HAZARDS 12: the address in a `--healthcheck` line holds colons itself, so the line is read by
/// its words, not split on `:`; `Healthy` is the one status known.
#[test]
fn hazard_12_the_health_check_keeps_its_colon_bearing_address() {
    let lines = health::parse_healthcheck(&read(&fixtures().join(
        "hy-smi/hygonai-hcu-dcgm__hy-smi-healthcheck-one-card-line-source-comment-example.txt",
    )))
    .unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].card, Some(0));
    assert_eq!(
        lines[0].bus.map(|b| b.sysfs()).as_deref(),
        Some("0000:09:00.0")
    );
    assert!(lines[0].healthy());
}
