//! `detect` end to end on the 16-PPU recorded host: the PCI scan, the three replayed `ppu-smi`
//! outputs parsed and joined, canonicalised. The replay costs no process spawn, so this
//! measures our own work, not ppu-smi's (DESIGN.md's target: under 50 ms).

use std::path::Path;
use std::time::Duration;

use accel_host::{FsHost, RecordedCommands};
use accel_thead::detector::{self, DetectOptions};
use criterion::{Criterion, criterion_group, criterion_main};

fn detect_sixteen_ppus(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/thead-16x-zw810e");
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).expect("recorded host loads");
    c.bench_function("detect thead-16x-zw810e (16 PPUs, recorded)", |b| {
        b.iter(|| {
            let section =
                detector::detect(&host, &commands, DetectOptions::default()).expect("detects");
            assert_eq!(section.accelerators.len(), 16);
            let inventory = accel_core::Inventory {
                manufacturers: vec![section],
            };
            std::hint::black_box(inventory.hash())
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = detect_sixteen_ppus
}
criterion_main!(benches);
