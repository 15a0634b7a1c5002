//! `/dev/kmsg` records and the XID lines inside them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = accel_host::kmsg::parse_record(data);
    let text = String::from_utf8_lossy(data);
    let _ = accel_nvidia::xid::parse_text(&text);
    let _ = accel_nvidia::xid::parse_message(&text);
});
