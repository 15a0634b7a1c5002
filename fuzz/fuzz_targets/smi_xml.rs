//! `nvidia-smi -q -x` reader: any bytes are either a report or a one-line error.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = accel_nvidia::smi::xml::parse(data);
});
