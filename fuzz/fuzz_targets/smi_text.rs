//! The text readers of nvidia-smi's other queries: CSV, `-L`, `topo -m`, `mig -lgip/-lgipp/-lgi/-lci`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_nvidia::smi::csv::parse_table(&text);
    let _ = accel_nvidia::smi::csv::parse_samples(&text, "");
    let _ = accel_nvidia::smi::csv::parse_compute_app_counts(&text);
    let _ = accel_nvidia::smi::csv::parse_compute_caps(&text);
    let _ = accel_nvidia::smi::list::parse(&text);
    let _ = accel_nvidia::smi::topo::parse(&text);
    let _ = accel_nvidia::smi::mig::parse_profiles(&text);
    let _ = accel_nvidia::smi::mig::parse_placements(&text);
    let _ = accel_nvidia::smi::mig::parse_gpu_instances(&text);
    let _ = accel_nvidia::smi::mig::parse_compute_instances(&text);
});
