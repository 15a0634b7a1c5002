//! What recording a metric costs on Allocate's path: one Allocate observed (histogram), one
//! refused Allocate (histogram, the reason read off the `Status`, a counter), one grant counted,
//! on handles made once as the plugins make them. Allocate itself takes hundreds of µs (the
//! journal's fdatasync), so these must stay in the tens of nanoseconds.
//! Run: `cargo bench -p accel-plugin --bench metrics`

use std::hint::black_box;
use std::time::Duration;

use accel_core::ledger::{Family, Refusal};
use accel_plugin::PluginMetrics;
use accel_plugin::metrics::Refuse;
use criterion::{Criterion, criterion_group, criterion_main};
use prometheus_client::registry::Registry;
use tonic::Status;

fn recording(c: &mut Criterion) {
    let mut registry = Registry::with_prefix("device_manager");
    let metrics = PluginMetrics::register(&mut registry);
    let gpu = metrics.for_resource("nvidia.com/gpu");
    let refusal = Refusal::NoRoom {
        accelerator: "0".into(),
        remaining: 640_000,
        needed: 800_000,
    };
    let refused = Status::failed_precondition("refused").refused((&refusal).into());
    let took = Duration::from_micros(180);
    c.bench_function("metrics/allocate answered", |b| {
        b.iter(|| gpu.allocated(black_box(took), None))
    });
    c.bench_function("metrics/allocate refused", |b| {
        b.iter(|| gpu.allocated(black_box(took), Some(black_box(&refused))))
    });
    c.bench_function("metrics/grant counted", |b| {
        b.iter(|| metrics.granted(black_box(Some(Family::Shared))))
    });
    c.bench_function("metrics/preferred answered", |b| {
        b.iter(|| gpu.preferred(black_box(took)))
    });
}

criterion_group!(benches, recording);
criterion_main!(benches);
