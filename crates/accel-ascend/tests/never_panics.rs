//! Every Ascend parser takes any bytes without panicking: `npu-smi`'s output and the driver's
//! files are untrusted input. Random text, text built from the formats' fragments, and the real
//! captures mutated.

use std::sync::OnceLock;

use accel_ascend::{health, kernel, npuconfig, npusmi, soc, topo};
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("ascend"),
            &["npu-smi", "dev", "hccn-tool"],
        )
    })
}

/// Every pure reader on `s`; only panics matter.
fn read_all(s: &str) {
    let _ = npusmi::parse_info(s);
    let _ = npusmi::parse_mapping(s);
    let _ = npusmi::parse_blocks(s);
    let _ = npusmi::parse_board(s);
    let _ = npusmi::board_hex(s);
    if let Ok(npusmi::SpodInfo::Read(facts)) = npusmi::parse_spod_info(s) {
        let _ = facts.sdid.map(npusmi::sdid_parts);
    }
    let _ = npusmi::parse_phy_id(s);
    let _ = npusmi::parse_aicores(s, 0);
    let _ = npusmi::parse_share(s);
    let _ = health::parse_health(s);
    let _ = npusmi::parse_ecc(s, npusmi::EccMemory::Hbm);
    let _ = npusmi::parse_ecc_enable(s, npusmi::EccMemory::Ddr);
    let _ = npusmi::count_listed(s);
    let _ = npusmi::die_identity(s);
    let _ = kernel::parse_version_info(s);
    let _ = kernel::major_minor(s);
    let _ = kernel::parse_davinci_names(s.split_whitespace());
    let _ = npuconfig::ids(s);
    let _ = soc::family(s);
    let _ = topo::parse_topo(s);
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("| NPU   Name                | Health        | Power(W)    Temp(C) |\n".to_string()),
        Just(
            "| Chip  Phy-ID              | Bus-Id        | AICore(%)   HBM-Usage(MB) |\n"
                .to_string()
        ),
        Just("| NPU ID | Name | Health |\n".to_string()),
        Just("+===========================+===============+\n".to_string()),
        Just("+---------------------------+\n".to_string()),
        Just("| 0     910B2               | OK            | NA  - |\n".to_string()),
        Just("| 0     0                   | 0000:xx:00.0  | 0  0    / 0 |\n".to_string()),
        Just(
            "NPU ID                         Chip ID        Chip Logic ID      Chip Name\n"
                .to_string()
        ),
        Just("0      1      -      Mcu\n".to_string()),
        Just("Chip ID                        : 0\n".to_string()),
        Just("\tHealth Status                  : Alarm\n".to_string()),
        Just("\t                               : node type=adda\n".to_string()),
        Just("Error Code : A4025021 8C03A000\n".to_string()),
        Just("VDie ID : FFFFFFFFF 0 \n".to_string()),
        Just("Device-share Status : True\n".to_string()),
        Just("       NPU0       NPU1       CPU Affinity\n".to_string()),
        Just("NPU0       X          HCCS       0-23\n".to_string()),
        Just("dcmi model initialized failed ret is -8020\n".to_string()),
        Just("Version=".to_string()),
        Just("davinci".to_string()),
        Just("Ascend950".to_string()),
        Just("physical-npu-id=".to_string()),
        Just("\n".to_string()),
        Just("\0".to_string()),
        Just("\u{1b}[31m".to_string()),
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

/// Pieces of the process section (issue 44 item 8, HAZARDS 9): its header, rules, idle rows and
/// process rows, mixed with the chip table's.
fn process_fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("+----------------------+---------------+---------------------------+\n".to_string()),
        Just(
            "| NPU     Chip         | Process id    | Process name   | Process memory(MB) |\n"
                .to_string()
        ),
        Just("+======================+===============+===========================+\n".to_string()),
        Just("| 0       0            | 37656         | hlt_host_devmm_ | 686     |\n".to_string()),
        Just("| No running processes found in NPU 0                             |\n".to_string()),
        Just("| N/A     NA           | -             | xxx            | NA       |\n".to_string()),
        Just("| NPU   Name           | Health        | Power(W)    Temp(C)      |\n".to_string()),
        Just("...\n".to_string()),
        Just("|".to_string()),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn the_process_section_reader_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = accel_ascend::procs::parse_processes(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn the_process_section_reader_takes_its_own_fragments(s in process_fragments()) {
        let _ = accel_ascend::procs::parse_processes(&s);
    }

    #[test]
    fn the_process_section_reader_takes_mutated_captures(
        file in any::<prop::sample::Index>(),
        mutation in accel_testkit::mutate::mutation(),
    ) {
        let original: &Vec<u8> = file.get(corpus());
        let _ = accel_ascend::procs::parse_processes(&String::from_utf8_lossy(&mutation.apply(original)));
    }
}
