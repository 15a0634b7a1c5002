//! Every T-Head parser takes any bytes without panicking: the tool's and the kernel's output is
//! untrusted input.

use std::sync::OnceLock;

use accel_thead::{kmsg, smi};
use proptest::prelude::*;

/// Every file of the T-Head captures, plus the recorded hosts' assembled `ppu-smi` outputs.
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut files = accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("thead"),
            &["ppu-smi", "kmsg", "pci"],
        );
        files.extend(accel_testkit::read_captures(
            &accel_testkit::recorded_host("thead-16x-zw810e-mig2"),
            &["commands"],
        ));
        files
    })
}

/// Every text parser on `s`; the results are dropped, only panics matter.
fn read_all(s: &str) {
    let _ = smi::parse_table(s);
    let _ = smi::parse_list(s);
    let _ = smi::parse_query(s);
    let _ = smi::parse_mig_table(s);
    let _ = smi::driver_not_loaded(s);
    let _ = smi::mig_mode(s);
    let _ = kmsg::parse(s);
    let _ = accel_host::DeviceNumber::of_marker(s);
}

/// Text built from the fragments real outputs are made of, so the parsers' deeper branches run.
fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("+-----+------+\n".to_string()),
        Just("+=====+======+\n".to_string()),
        Just("| PPU  Name | Bus-Id | MIG M. |\n".to_string()),
        Just("| PPU  GI  CI  MIG | Memory-Usage | CU |\n".to_string()),
        Just("| 0  PPU-ZW810E  N/A | 00000000:A8:00.0 | Enabled |\n".to_string()),
        Just("2MiB / 98304MiB".to_string()),
        Just("PPU 0: PPU (UUID: GPU-".to_string()),
        Just("    MIG g1.c1.i1, Device ".to_string()),
        Just("(UUID: ".to_string()),
        Just("PPU 00000000:A8:00.0\n".to_string()),
        Just("    MIG Mode\n        Current : Enabled\n".to_string()),
        Just("    Minor Number : ".to_string()),
        Just("Driver Version: 2.1.0-ra1f23041713".to_string()),
        Just("init HGML error: driver is not loaded".to_string()),
        Just("[alixpu] PPU00".to_string()),
        Just(" contains 3 active process".to_string()),
        Just("target ppu:".to_string()),
        Just("c 509:".to_string()),
        Just("N/A".to_string()),
        Just("  ".to_string()),
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
