//! XID parsing throughput (kernel lines per second): every line of the captured `kmsg` corpus
//! through `xid::parse_message` one at a time, as the daemon's watcher reads `/dev/kmsg`, and
//! the whole corpus through `xid::parse_text`, as `device-manager xids` reads a saved log.

use std::fs;
use std::hint::black_box;
use std::path::PathBuf;

use accel_nvidia::xid;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn corpus() -> Vec<String> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/kmsg"
    ));
    let mut names: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fixture folder {} is missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| String::from_utf8_lossy(&fs::read(p).unwrap()).into_owned())
        .collect()
}

fn parse_lines(c: &mut Criterion) {
    let files = corpus();
    let lines: Vec<&str> = files.iter().flat_map(|f| f.lines()).collect();
    let xid_lines = lines.iter().filter(|l| l.contains("NVRM: Xid")).count();
    let mut group = c.benchmark_group("kernel log");
    group.throughput(Throughput::Elements(lines.len() as u64));
    group.bench_function(
        format!(
            "parse_message, {} corpus lines ({xid_lines} XIDs)",
            lines.len()
        ),
        |b| {
            b.iter(|| {
                for line in &lines {
                    black_box(xid::parse_message(black_box(line)));
                }
            })
        },
    );
    group.bench_function(format!("parse_text, {} files", files.len()), |b| {
        b.iter(|| {
            for file in &files {
                black_box(xid::parse_text(black_box(file)));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, parse_lines);
criterion_main!(benches);
