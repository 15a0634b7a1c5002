//! "Never panics": every nvidia-smi reader over arbitrary bytes and over real captures with
//! bytes flipped, inserted and cut off. The readers read output of a program we do not control,
//! so any input must give a value or an error, never a panic.

use std::fs;
use std::sync::OnceLock;

use accel_backend::preflight::Preflight as _;
use accel_nvidia::preflight::NvidiaPreflight;
use accel_nvidia::smi::{csv, list, mig, topo, xml};
use proptest::prelude::*;

/// Every captured file of the folders these readers read.
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("nvidia"),
            &["smi-xml", "smi-csv", "list", "topo", "mig"],
        )
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
        mutation in accel_testkit::mutate::mutation(),
    ) {
        let files = corpus();
        prop_assert!(!files.is_empty());
        let original: &Vec<u8> = file.get(files);
        read_all(&mutation.apply(original));
    }
}

/// Every prefix length of a mid-sized XML capture: a report cut off anywhere (a killed
/// nvidia-smi) is an error or a partial report, never a panic.
#[test]
fn xml_truncated_everywhere() {
    let path = accel_testkit::shared_fixture_folder("nvidia", "smi-xml")
        .join("netdata__a100-sxm4-40gb-mig-510.47.03-v11.xml");
    let bytes = fs::read(path).unwrap();
    let mut errors = 0;
    for len in (0..bytes.len()).step_by(7) {
        if xml::parse(&bytes[..len]).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0, "a truncated report must be refused as not XML");
}
