//! Every ixsmi parser takes any bytes without panicking: the tool's output is untrusted input.

use std::sync::OnceLock;

use accel_iluvatar::ixsmi;
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(&accel_testkit::shared_fixtures("iluvatar"), &["ixsmi"])
    })
}

fn read_all(s: &str) {
    let _ = ixsmi::parse_table(s);
    let _ = ixsmi::parse_banner(s);
    let _ = ixsmi::parse_query(s);
    let _ = ixsmi::parse_compute_caps(s);
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just(
            "|  IX-ML: 4.1.0       Driver Version: 4.1.0       CUDA Version: 10.2  |\n".to_string()
        ),
        Just(
            "| GPU  Name                     | Bus-Id               | Clock-SM  Clock-Mem  |\n"
                .to_string()
        ),
        Just(
            "| Fan  Temp  Perf  Pwr:Usage/Cap|      Memory-Usage    | GPU-Util  Compute M. |\n"
                .to_string()
        ),
        Just(
            "|===============================+======================+======================|\n"
                .to_string()
        ),
        Just(
            "| 0    Iluvatar BI-V150         | 00000000:13:00.0     | 1500MHz   1600MHz    |\n"
                .to_string()
        ),
        Just(
            "| 0%   32C   P0    N/A / N/A    | 116MiB / 32768MiB    | 0%        Default    |\n"
                .to_string()
        ),
        Just(
            "+-------------------------------+----------------------+----------------------+\n"
                .to_string()
        ),
        Just("index, uuid, name, pci.bus_id, memory.total [MiB]\n".to_string()),
        Just("index, pci.bus_id, compute_cap\n".to_string()),
        Just("0, GPU-1, Iluvatar BI-V150, 00000000:13:00.0, 32768 MiB\n".to_string()),
        Just("1, 00000000:16:00.0, 7.1\n".to_string()),
        Just("[N/A], , ,".to_string()),
        Just("|".to_string()),
        Just("\u{1b}[1m".to_string()),
        "[ -~]{0,12}".prop_map(|s| s),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn random_text(s in ".{0,400}") {
        read_all(&s);
    }

    #[test]
    fn fragments_of_real_output(s in fragments()) {
        read_all(&s);
    }

    #[test]
    fn mutated_captures(m in accel_testkit::mutate::mutation()) {
        for capture in corpus() {
            read_all(&String::from_utf8_lossy(&m.apply(capture)));
        }
    }
}

/// Pieces of the `Processes:` table (issue 44 item 8): its title, header, rules, the idle line
/// and rows in its columns, mixed with the GPU table's.
fn process_fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just(
            "| Processes:                                                       GPU Memory |\n"
                .to_string()
        ),
        Just(
            "|  GPU        PID      Process name                                Usage(MiB) |\n"
                .to_string()
        ),
        Just(
            "|=============================================================================|\n"
                .to_string()
        ),
        Just(
            "|  No running processes found                                                 |\n"
                .to_string()
        ),
        Just(
            "|  0          4021     python3                                          1024MiB |\n"
                .to_string()
        ),
        Just("|  N/A   N/A   N/A   N/A  |\n".to_string()),
        Just(
            "+-----------------------------------------------------------------------------+\n"
                .to_string()
        ),
        Just("...\n".to_string()),
        Just("|".to_string()),
        "[ -~]{0,12}".prop_map(|s| s),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn the_process_table_reader_takes_any_text(s in ".{0,400}") {
        let _ = accel_iluvatar::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_its_own_fragments(s in process_fragments()) {
        let _ = accel_iluvatar::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_table_reader_takes_mutated_captures(m in accel_testkit::mutate::mutation()) {
        for capture in corpus() {
            let _ = accel_iluvatar::procs::parse_processes(&String::from_utf8_lossy(&m.apply(capture)));
        }
    }
}
