//! Every mthreads-gmi parser takes any bytes without panicking.

use std::sync::OnceLock;

use accel_mthreads::gmi;
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("mthreads"),
            &["mthreads-gmi"],
        )
    })
}

fn read_all(s: &str) {
    let _ = gmi::parse_table(s);
    let _ = gmi::parse_query(s);
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("    mthreads-gmi:2.3.2           Driver Version:3.3.5-server\n".to_string()),
        Just(
            "ID   Name                 |PCIe                |%GPU  Mem             \n".to_string()
        ),
        Just(
            "     Device Type   Perf   |Pcie Lane Width     |Temp  MPC Capable     \n".to_string()
        ),
        Just(
            "                                               |      ECC Mode        \n".to_string()
        ),
        Just("+-------------------------------------------------------------------+\n".to_string()),
        Just(
            "0    MTT S5000            |00000000:2a:00.0    |0%    66641MiB(81920MiB)\n"
                .to_string()
        ),
        Just(
            "     Physical      P0     |16x(16x)            |52C   YES             \n".to_string()
        ),
        Just("GPU 00000000:2a:00.0\n".to_string()),
        Just("    GPU UUID : 7de4d75b-7522-1fdc-8dc4-db9a169a5e88\n".to_string()),
        Just("    GPU Cores : 8192\n".to_string()),
        Just("    ECC Errors\n".to_string()),
        Just("        Volatile\n".to_string()),
        Just("            DRAM Uncorrectable : 2\n".to_string()),
        Just("\tDouble Bit\n".to_string()),
        Just("Device Memory : N/A\n".to_string()),
        Just(" : \n".to_string()),
        Just("GPU ".to_string()),
        Just("|".to_string()),
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
