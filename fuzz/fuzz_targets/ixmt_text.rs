//! Iluvatar's and Moore Threads' untrusted text: ixsmi's table and CSV queries, mthreads-gmi's
//! table and `-q` report; ixsmi's process table.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_iluvatar::ixsmi::parse_table(&text);
    let _ = accel_iluvatar::ixsmi::parse_query(&text);
    let _ = accel_iluvatar::ixsmi::parse_compute_caps(&text);
    let _ = accel_iluvatar::procs::parse_processes(&text);
    let _ = accel_mthreads::gmi::parse_table(&text);
    let _ = accel_mthreads::gmi::parse_query(&text);
    let _ = accel_backend::text::csv_table(&text, &["uuid"]);
});
