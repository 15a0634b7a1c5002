//! cnmon's and mx-smi's readers (Cambricon, MetaX) on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_cambricon::cnmon::parse_table(&text);
    let _ = accel_cambricon::cnmon::parse_info(&text);
    let _ = accel_metax::mxsmi::parse_table(&text);
    let _ = accel_metax::mxsmi::parse_list(&text);
    let _ = accel_metax::count_ecc::parse_count_ecc(&text);
    let _ = accel_metax::mxsmi::family(&text);
    let _ = accel_cambricon::procs::parse_processes(&text);
    let _ = accel_metax::procs::parse_processes(&text);
});
