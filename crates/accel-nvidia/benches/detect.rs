//! `detect` end to end on the largest recorded host (8x H100): both layers read from the
//! recorded files and replayed commands, merged, judged and canonicalised. The replay costs
//! no process spawn, so this measures our own work, not nvidia-smi's.

use std::path::Path;
use std::time::Duration;

use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::detector::{self, DetectOptions};
use criterion::{Criterion, criterion_group, criterion_main};

fn detect_largest_host(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu");
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).expect("recorded host loads");
    c.bench_function("detect hgx-h100-8gpu (8 GPUs, recorded)", |b| {
        b.iter(|| {
            let outcome = detector::detect(&host, &commands, DetectOptions::default());
            let section = outcome.detection.expect("detects");
            assert_eq!(section.accelerators.len(), 8);
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
    targets = detect_largest_host
}
criterion_main!(benches);
