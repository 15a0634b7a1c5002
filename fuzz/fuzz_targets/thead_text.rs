//! T-Head's untrusted text: ppu-smi's device table, `-L`, `-q`, the MIG devices table, the
//! alixpu kernel-log lines, and a recording's device-node marker.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_thead::smi::parse_table(&text);
    let _ = accel_thead::smi::parse_list(&text);
    let _ = accel_thead::smi::parse_query(&text);
    let _ = accel_thead::smi::parse_mig_table(&text);
    let _ = accel_thead::kmsg::parse(&text);
    let _ = accel_host::DeviceNumber::of_marker(&text);
});
