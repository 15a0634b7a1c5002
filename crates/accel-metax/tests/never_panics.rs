//! Every MetaX parser takes any bytes without panicking: the tool's output is untrusted input.

use std::sync::OnceLock;

use accel_metax::{count_ecc, mxsmi};
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut corpus =
            accel_testkit::read_captures(&accel_testkit::shared_fixtures("metax"), &["mx-smi"]);
        corpus.extend(accel_testkit::read_captures(
            &accel_testkit::workspace_root().join("testdata/captures/metax"),
            &["mx-smi"],
        ));
        corpus
    })
}

fn read_all(s: &str) {
    let _ = mxsmi::parse_table(s);
    let _ = mxsmi::parse_list(s);
    let _ = count_ecc::parse_count_ecc(s);
    let _ = mxsmi::major_minor(s);
    let _ = mxsmi::family(s);
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("| MX-SMI 2.1.12   Kernel Mode Driver Version: ".to_string()),
        Just("| MACA Version: 2.29.0.19   BIOS Version: 1.20.3.0 |\n".to_string()),
        Just(
            "| GPU         NAME                   | Bus-id              | GPU-Util             |\n"
                .to_string()
        ),
        Just(
            "| Temp        Pwr:Usage/Cap          | Memory-Usage        |                      |\n"
                .to_string()
        ),
        Just("|====+====+====|\n".to_string()),
        Just("+----+----+----+\n".to_string()),
        Just("| 0   MetaX C500  | 0000:0e:00.0 | 0% |\n".to_string()),
        Just("826/65536 MiB".to_string()),
        Just("GPU#".to_string()),
        Just("GPU#1  MXC500  0000:0f:00.0\n".to_string()),
        Just("    ECC Errors\n".to_string()),
        Just("    Retired Pages\n".to_string()),
        Just("        DRAM Uncorrectable                        : ".to_string()),
        Just("        Double Bit ECC : ".to_string()),
        Just("(UUID: ".to_string()),
        Just("0000:".to_string()),
        Just(" | ".to_string()),
        Just("\n".to_string()),
        Just("\0".to_string()),
        "[ -~]{0,12}",
        any::<u64>().prop_map(|n| n.to_string()),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn text_parsers_never_panic(s in fragments()) {
        read_all(&s);
    }

    #[test]
    fn mutated_captures_never_panic(
        file in any::<prop::sample::Index>(),
        mutation in accel_testkit::mutate::mutation(),
    ) {
        let original: &Vec<u8> = file.get(corpus());
        let bytes = mutation.apply(original);
        read_all(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        read_all(&String::from_utf8_lossy(&bytes));
    }
}

/// Pieces of the `Process:` table (issue 44 item 8): its title, both header lines, rules, the
/// idle line and rows in its columns, mixed with the GPU table's.
fn process_fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("| Process:                                                       |\n".to_string()),
        Just("|  GPU            PID         Process Name           GPU Memory  |\n".to_string()),
        Just("|                                                    Usage(MiB)  |\n".to_string()),
        Just("|================================================================|\n".to_string()),
        Just("|  no process found                                              |\n".to_string()),
        Just("|  0              52011       python3 -m vllm        1536        |\n".to_string()),
        Just("|  N/A   N/A   N/A   N/A  |\n".to_string()),
        Just("| GPU         NAME          | Bus-id          | GPU-Util       |\n".to_string()),
        Just("+----------------------------------------------------------------+\n".to_string()),
        Just("...\n".to_string()),
        Just("|".to_string()),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn the_process_table_reader_takes_any_text(s in ".{0,400}") {
        let _ = accel_metax::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_its_own_fragments(s in process_fragments()) {
        let _ = accel_metax::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_mutated_captures(m in accel_testkit::mutate::mutation()) {
        for capture in corpus() {
            let _ = accel_metax::procs::parse_processes(&String::from_utf8_lossy(&m.apply(capture)));
        }
    }
}
