//! `detect` end to end for each manufacturer other than NVIDIA (whose own bench is
//! `accel-nvidia/benches/detect.rs`), on its largest recorded host, through the backend row
//! exactly as the daemon asks it (`Backend::detector` with a `DetectRequest`): the PCI scan, the
//! kernel's view, the vendor CLI's outputs replayed from the recording and parsed, the join, the
//! inventory canonicalised and hashed. The replay spawns no process, so this is our own work,
//! not the vendor tool's (DESIGN.md's target: under 50 ms a pass).

use std::path::Path;
use std::time::Duration;

use accel_backend::{Backend, Deadlines, DetectRequest};
use accel_host::pci::PciClassPrefixes;
use accel_host::{FsHost, RecordedCommands};
use criterion::{Criterion, criterion_group, criterion_main};

/// Each backend with its largest recorded host and the accelerators that host has.
fn rows() -> Vec<(Backend, &'static str, usize)> {
    vec![
        (accel_amd::backend::backend(), "amd-8x-mi300x", 8),
        (accel_hygon::backend::backend(), "hygon-8x-bw150-mig", 8),
        (accel_ascend::backend::backend(), "ascend-8x-910b2", 8),
        (accel_thead::backend::backend(), "thead-16x-zw810e", 16),
        (
            accel_iluvatar::backend::backend(),
            "iluvatar-16x-bi-v150",
            16,
        ),
        (accel_mthreads::backend::backend(), "mthreads-8x-s4000", 8),
        (
            accel_cambricon::backend::backend(),
            "cambricon-8x-mlu370-cnmon-v5",
            8,
        ),
        (accel_metax::backend::backend(), "metax-8x-c500", 8),
    ]
}

fn detect_each_manufacturer(c: &mut Criterion) {
    let hosts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts");
    let classes = PciClassPrefixes::default();
    for (backend, name, count) in rows() {
        let dir = hosts.join(name);
        let host = FsHost::new(dir.join("root"));
        let commands = RecordedCommands::load(&dir).expect("the recorded host loads");
        let vendor_ids = backend.manufacturer.default_constants().pci_vendor_ids;
        let request = DetectRequest {
            host: &host,
            commands: &commands,
            deadlines: Deadlines::default(),
            state_dir: None,
            pci_classes: &classes,
            vendor_ids: &vendor_ids,
            pci_gate: true,
        };
        let label = format!("detect {} {name} ({count})", backend.manufacturer.name());
        c.bench_function(&label, |b| {
            b.iter(|| {
                let section = backend
                    .detector
                    .detect(&request)
                    .expect("no state error")
                    .expect("detects");
                assert_eq!(section.accelerators.len(), count, "{name}");
                let mut inventory = accel_core::Inventory {
                    manufacturers: vec![section],
                };
                inventory.canonicalize();
                std::hint::black_box(inventory.hash())
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).sample_size(50);
    targets = detect_each_manufacturer
}
criterion_main!(benches);
