//! "Never panics": every nvidia-smi reader over arbitrary bytes and over real captures with
//! bytes flipped, inserted and cut off. The readers read output of a program we do not control,
//! so any input must give a value or an error, never a panic.

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use accel_backend::preflight::Preflight as _;
use accel_nvidia::preflight::NvidiaPreflight;
use accel_nvidia::smi::{csv, list, mig, topo, xml};
use proptest::prelude::*;

/// Every captured file of the folders these readers read.
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let root = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/nvidia"
        ));
        let mut files = Vec::new();
        for folder in ["smi-xml", "smi-csv", "list", "topo", "mig"] {
            let dir = root.join(folder);
            let entries = fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("fixture folder {} is missing: {e}", dir.display()));
            for entry in entries {
                files.push(fs::read(entry.unwrap().path()).unwrap());
            }
        }
        files
    })
}

/// Runs every reader on the bytes; the results are dropped, only panics matter.
fn read_all(bytes: &[u8]) {
    let _ = xml::parse(bytes);
    let text = String::from_utf8_lossy(bytes);
    let _ = csv::parse_table(&text);
    let _ = csv::parse_samples(&text, &text);
    let _ = csv::parse_compute_app_counts(&text);
    let _ = csv::parse_compute_caps(&text);
    // preflight's readers of the host's listing and of a probe container's output
    let _ = NvidiaPreflight.count_listed(&text);
    let _ = NvidiaPreflight.read_probe(&text);
    let _ = csv::refused_field(&text);
    let _ = list::parse(&text);
    let _ = topo::parse(&text);
    let _ = mig::parse_profiles(&text);
    let _ = mig::parse_placements(&text);
    let _ = mig::parse_gpu_instances(&text);
    let _ = mig::parse_compute_instances(&text);
}

/// A mutation of a real file: flips, insertions of bytes the formats care about, and a cut.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, bit: u8 },
    Insert { at: usize, byte: u8 },
    Delete { at: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let special = prop::sample::select(vec![
        b'<', b'>', b'/', b'&', b'"', b',', b' ', b'\t', b'\n', b'\r', b'|', b':', b'{', b'}',
        b'[', b']', 0x1b, 0xff, 0x00, b'-', b'.',
    ]);
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (any::<usize>(), special).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        any::<usize>().prop_map(|at| Edit::Delete { at }),
    ]
}

fn mutate(original: &[u8], edits: &[Edit], cut: Option<usize>) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for e in edits {
        if bytes.is_empty() {
            break;
        }
        match *e {
            Edit::Flip { at, bit } => {
                let i = at % bytes.len();
                bytes[i] ^= 1 << bit;
            }
            Edit::Insert { at, byte } => bytes.insert(at % (bytes.len() + 1), byte),
            Edit::Delete { at } => {
                let i = at % bytes.len();
                bytes.remove(i);
            }
        }
    }
    if let Some(cut) = cut {
        bytes.truncate(cut % (bytes.len() + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_all(&bytes);
    }

    #[test]
    fn arbitrary_text_of_format_characters(
        text in "[<>/a-z_0-9 ,.:|{}\\[\\]\t\n\r=+-]{0,512}"
    ) {
        read_all(text.as_bytes());
    }

    #[test]
    fn mutated_captures(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..16),
        cut in prop::option::of(any::<usize>()),
    ) {
        let files = corpus();
        prop_assert!(!files.is_empty());
        let original = &files[file.index(files.len())];
        read_all(&mutate(original, &edits, cut));
    }
}

/// Every prefix length of a mid-sized XML capture: a report cut off anywhere (a killed
/// nvidia-smi) is an error or a partial report, never a panic.
#[test]
fn xml_truncated_everywhere() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/smi-xml/netdata__a100-sxm4-40gb-mig-510.47.03-v11.xml"
    );
    let bytes = fs::read(path).unwrap();
    let mut errors = 0;
    for len in (0..bytes.len()).step_by(7) {
        if xml::parse(&bytes[..len]).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0, "a truncated report must be refused as not XML");
}
