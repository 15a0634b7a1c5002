//! Every Cambricon parser takes any bytes without panicking: the tool's output is untrusted
//! input.

use std::sync::OnceLock;

use accel_cambricon::{cnmon, health};
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(&accel_testkit::shared_fixtures("cambricon"), &["cnmon"])
    })
}

fn read_all(s: &str) {
    let table = cnmon::parse_table(s).ok();
    if let Ok(blocks) = cnmon::parse_info(s) {
        for (i, block) in blocks.iter().enumerate() {
            let who = health::CardName {
                card: block.card,
                bus: block.bus_id,
            };
            let row = table.as_ref().and_then(|t| t.cards.get(i));
            let _ = health::read(0, who, Some(block), row);
        }
    }
    let _ = cnmon::major_minor(s);
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("| CNMON v5.10.10   Driver v".to_string()),
        Just("| Card  VF  Name       Firmware |   Bus-Id | Util  Ecc-Error |\n".to_string()),
        Just("| Fan   Temp  Pwr:Usage/Cap |  Memory-Usage | Mode  Compute-Mode |\n".to_string()),
        Just("|=====+=====+=====|\n".to_string()),
        Just("+-----+-----+-----+\n".to_string()),
        Just("| 0  /  MLU370-X4  v1.1.6 |  0000:4F:00.0 | 0%  N/A |\n".to_string()),
        Just("0 MiB/ xxxxx MiB".to_string()),
        Just("Card ".to_string()),
        Just("UUID : ".to_string()),
        Just("PCIe Bus Id : 0000:".to_string()),
        Just("Product Name : ".to_string()),
        Just("Health State".to_string()),
        Just("Health State : N/A\n".to_string()),
        Just("  Device : In Problem\n".to_string()),
        Just("  Driver : Reset Error\n".to_string()),
        Just("Good (Running)".to_string()),
        Just("Uncorrected Err : ".to_string()),
        Just("is Pending : Yes\n".to_string()),
        Just("Pending Rows : ".to_string()),
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

/// Pieces of the `Processes:` table (issue 44 item 8): its title, both headers, rules, the idle
/// line and rows in its columns, mixed with the card table's.
fn process_fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("| Processes:                                                  |\n".to_string()),
        Just("|  Card  MI  PID     Command Line          MLU Memory Usage |\n".to_string()),
        Just("|  Card  VF  PID    Command Line          MLU Memory Usage  |\n".to_string()),
        Just("|=============================================================|\n".to_string()),
        Just("|  No running processes found                                 |\n".to_string()),
        Just("|  0     /   31337   python3 train.py              1024 MiB |\n".to_string()),
        Just("|  N/A   N/A   N/A   N/A   xxxxx MiB |\n".to_string()),
        Just("| Card  VF  Name       Firmware |   Bus-Id | Util  Ecc-Error |\n".to_string()),
        Just("+-------------------------------------------------------------+\n".to_string()),
        Just("...\n".to_string()),
        Just(" | ".to_string()),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn the_process_table_reader_takes_any_text(s in ".{0,400}") {
        let _ = accel_cambricon::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_its_own_fragments(s in process_fragments()) {
        let _ = accel_cambricon::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_mutated_captures(m in accel_testkit::mutate::mutation()) {
        for capture in corpus() {
            let _ = accel_cambricon::procs::parse_processes(&String::from_utf8_lossy(&m.apply(capture)));
        }
    }
}
