//! The kernel-log corpus: every file in `../shared/fixtures/nvidia/kmsg/` is read by
//! `xid::parse_text` and the events must be exactly the ones written below (code, bus id in
//! NVML form, pid, process), in order. The expectations were written by reading the files: each
//! `NVRM: Xid` line is one event, the three-line "fallen off the bus" message is one event
//! without a code, and nothing else (GPU-at-PCI lines, GSP RPC tables, stack traces,
//! nvidia-peermem noise) is one. A missing folder, or a file with no expectation here, fails.
//! Plus "never panics" over arbitrary lines and over the corpus's lines mutated.

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use accel_nvidia::xid::{self, XidEvent, XidScanner};
use proptest::prelude::*;

fn kmsg_dir() -> PathBuf {
    accel_testkit::shared_fixture_folder("nvidia", "kmsg")
}

/// `count × "xid bus pid process"` runs, `-` for absent.
type Runs = &'static [(usize, &'static str)];

fn expected(name: &str) -> Option<Runs> {
    Some(match name {
        "chia-gigahorse-301__xid-31-62-45.log" => &[
            (1, "31 00000000:0A:00.0 13332 cuda_plot_k32_v"),
            (1, "62 00000000:0A:00.0 - -"),
            (8, "45 00000000:0A:00.0 - -"),
        ],
        "dxvk-1799__journalctl-xid-31-pid-no-name.log" => &[(2, "31 00000000:C1:00.0 12890 -")],
        "gpud-kmsg_test__gb200-xid-149-154.log" => &[
            (1, "149 00000009:01:00.0 - -"),
            (1, "154 00000009:01:00.0 - -"),
            (1, "149 00000008:01:00.0 - -"),
            (1, "154 00000019:01:00.0 - -"),
            (2, "149 00000009:01:00.0 - -"),
            (1, "149 00000008:01:00.0 - -"),
            (1, "154 00000018:01:00.0 - -"),
            (1, "154 00000008:01:00.0 - -"),
        ],
        "gpud-pr1160__xid-144-149-nvlink.log" => &[
            (1, "144 00000000:01:00.0 - -"),
            (2, "149 00000000:00:00.0 - -"),
        ],
        "gpud-pr46__ctime-xid-13-109.log" => &[
            (3, "13 00000000:CB:00.0 - -"),
            (1, "109 00000000:CB:00.0 1797828 pt_main_thread"),
        ],
        "gpud__dmesg-ctime-xid-119-gsp-timeout.log" => &[
            (3, "119 00000000:9B:00.0 2024380 nvidia-smi"),
            (1, "119 00000000:9B:00.0 1263500 cache_mgr_main"),
            (1, "119 00000000:9B:00.0 1240590 gpud"),
        ],
        "gpud__dmesg-decode-iso-xid-13-43-bulk.log" => &[
            (15, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2815167 pt_main_thread"),
            (9, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2823801 pt_main_thread"),
            (90, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2839444 pt_main_thread"),
            (155, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2877200 pt_main_thread"),
            (60, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2886782 pt_main_thread"),
            (60, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2897677 pt_main_thread"),
            (240, "13 00000000:38:00.0 - -"),
            (1, "43 00000000:38:00.0 2924364 pt_main_thread"),
        ],
        "gpud__dmesg-iso-xid-48-63-94.log" => &[
            (1, "48 00000000:19:00.0 - -"),
            (1, "63 00000000:19:00.0 - -"),
            (1, "94 00000000:19:00.0 - -"),
            (8, "94 00000000:19:00.0 1248209 python3.10"),
        ],
        "nvsentinel-155__fallen-off-bus-multiline-and-xid-79.log" => &[
            (1, "- 00000000:B3:00.0 - -"),
            (1, "79 00000000:44:00.0 - -"),
        ],
        "ogkm-1150__xid-45-caused-by-previous.log" => &[
            (1, "45 00000000:DC:00.0 1818990 python3"),
            (1, "45 00000000:ED:00.0 1818992 python3"),
            (1, "45 00000000:BA:00.0 1818989 python3"),
            (1, "45 00000000:97:00.0 1818987 python3"),
            (1, "45 00000000:DC:00.0 1818990 python3"),
            (1, "45 00000000:BA:00.0 1818989 python3"),
            (1, "45 00000000:ED:00.0 1818992 python3"),
        ],
        "ogkm-363__xid-31-no-timestamp.log" => &[
            (1, "31 00000000:08:00.0 169800 chrome"),
            (1, "31 00000000:08:00.0 174421 chrome"),
        ],
        _ => return None,
    })
}

fn key(event: &XidEvent) -> String {
    let dash = || "-".to_string();
    format!(
        "{} {} {} {}",
        event.xid.map(|x| x.to_string()).unwrap_or_else(dash),
        event.bus_id.nvml(),
        event.pid.map(|p| p.to_string()).unwrap_or_else(dash),
        event.process.clone().unwrap_or_else(dash),
    )
}

fn runs(events: &[XidEvent]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for event in events {
        let k = key(event);
        match out.last_mut() {
            Some((n, last)) if *last == k => *n += 1,
            _ => out.push((1, k)),
        }
    }
    out
}

fn corpus() -> &'static [(String, String)] {
    static CORPUS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut files: Vec<(String, String)> = fs::read_dir(kmsg_dir())
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let bytes = fs::read(&path).unwrap();
                (name, String::from_utf8_lossy(&bytes).into_owned())
            })
            .collect();
        files.sort();
        assert!(!files.is_empty(), "the kmsg fixture folder is empty");
        files
    })
}

#[test]
fn every_kmsg_file_yields_exactly_its_events() {
    for (name, text) in corpus() {
        let want = expected(name)
            .unwrap_or_else(|| panic!("{name}: no expectation written for this capture yet"));
        let want: Vec<(usize, String)> = want.iter().map(|(n, k)| (*n, k.to_string())).collect();
        let events = xid::parse_text(text);
        assert_eq!(runs(&events), want, "{name}");
        for event in &events {
            // The source line is kept whole, and the message is a part of it.
            assert!(
                text.contains(event.line.as_str()),
                "{name}: {:?}",
                event.line
            );
            if event.xid.is_some() {
                assert!(event.line.contains(&event.message), "{name}: {event:?}");
            }
        }
    }
}

#[test]
fn every_xid_line_is_read_and_no_other_line_is() {
    // A check independent of the expectations above: a line is an event exactly when it holds
    // `NVRM: Xid (`, apart from the one multi-line fallen-off-the-bus message.
    for (name, text) in corpus() {
        let mut scanner = XidScanner::default();
        for line in text.lines() {
            let got = scanner.push(line).is_some();
            let want = line.contains("NVRM: Xid (") || line.contains("fallen off the bus and");
            assert_eq!(got, want, "{name}: {line:?}");
        }
    }
}

#[test]
fn the_caused_by_trailer_and_the_fallen_off_message() {
    let text = &corpus()
        .iter()
        .find(|(n, _)| n.starts_with("ogkm-1150"))
        .unwrap()
        .1;
    let causes: Vec<Option<u32>> = xid::parse_text(text).iter().map(|e| e.caused_by).collect();
    assert_eq!(
        causes,
        [149, 145, 145, 145, 149, 145, 145].map(Some).to_vec()
    );
    let text = &corpus()
        .iter()
        .find(|(n, _)| n.starts_with("nvsentinel-155"))
        .unwrap()
        .1;
    let events = xid::parse_text(text);
    assert_eq!(events[0].line.lines().count(), 3);
    assert_eq!(
        events[0].message,
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus and is not responding to commands."
    );
}

fn corpus_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| {
        corpus()
            .iter()
            .flat_map(|(_, text)| text.lines().map(str::to_string))
            .collect()
    })
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_text(text in any::<String>()) {
        let _ = xid::parse_text(&text);
        let _ = xid::parse_message(&text);
    }

    #[test]
    fn never_panics_on_arbitrary_nvrm_lines(rest in "[ -~]{0,120}") {
        let _ = xid::parse_message(&format!("NVRM: Xid {rest}"));
        let _ = xid::parse_message(&format!("[ 1.0] NVRM: The NVIDIA GPU {rest}\nNVRM: fallen off the bus {rest}"));
    }

    #[test]
    fn never_panics_on_mutated_corpus_lines(
        pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        noise in any::<char>(),
    ) {
        let line = pick.get(corpus_lines());
        let mut chars: Vec<char> = line.chars().collect();
        if !chars.is_empty() {
            let i = at.index(chars.len());
            chars[i] = noise;
            chars.truncate(cut.index(chars.len()) + 1);
        }
        let mutated: String = chars.into_iter().collect();
        let _ = xid::parse_message(&mutated);
        let _ = xid::parse_text(&format!("{line}\n{mutated}\n  {mutated}"));
    }
}
