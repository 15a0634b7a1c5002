//! The shared vendor-text readers of `accel_backend::text`: cleaning, placeholders, figures and
//! `used / total` pairs, hex and unique ids, versions, and the box and column table readers
//! every next vendor's CLI output goes through (npu-smi, hy-smi, ppu-smi, ixsmi, mthreads-gmi,
//! cnmon, mx-smi); plus accel-host's kernel-log prefix stripping.
#![no_main]
use accel_backend::text::{self, MemoryUnit};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = text::clean(&text);
    for anchor in [&["NPU", "Name"][..], &["ID", "PCIe"], &["Card", "Bus-Id"], &["DCU", "Temp"]] {
        if let Some(table) = text::box_table(&text, anchor) {
            for record in &table.records {
                let _ = record.get("Name").map(|v| text::memory_pair(v, MemoryUnit::MiB));
            }
        }
        let _ = text::column_table(&text, anchor);
    }
    let _ = text::version_after(&text, "Driver Version");
    for line in text.lines() {
        let _ = (text::present(line), text::figure(line), text::celsius(line));
        let _ = (text::watts(line), text::percent(line), text::whole(line));
        let _ = (text::mebibytes(line, MemoryUnit::GiB), text::pair(line));
        let _ = (text::hex(line), text::unique_id(line), text::dotted_version(line));
        let _ = accel_host::kmsg::strip_prefixes(line);
    }
});
