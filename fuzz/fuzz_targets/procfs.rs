//! `/proc/driver/nvidia/gpus/*/information` and `/proc/driver/nvidia/version`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_nvidia::procfs::parse_information(&text);
    let _ = accel_nvidia::procfs::parse_driver_version(&text);
});
