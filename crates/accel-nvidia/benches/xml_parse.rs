//! XML parse throughput over the whole captured `smi-xml` corpus (bytes per second), the cost
//! of reading one full `nvidia-smi -q -x` snapshot.

use std::fs;
use std::hint::black_box;
use std::path::PathBuf;

use accel_nvidia::smi::xml;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn corpus() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/smi-xml"
    ));
    let mut names: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fixture folder {} is missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names.iter().map(|p| fs::read(p).unwrap()).collect()
}

fn parse_corpus(c: &mut Criterion) {
    let files = corpus();
    let bytes: usize = files.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("nvidia-smi -q -x");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function(
        format!("whole smi-xml corpus ({} files)", files.len()),
        |b| {
            b.iter(|| {
                for file in &files {
                    let report = xml::parse(black_box(file)).unwrap();
                    black_box(report);
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, parse_corpus);
criterion_main!(benches);
