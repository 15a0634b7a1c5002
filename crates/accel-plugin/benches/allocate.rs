//! Allocate and GetPreferredAllocation latency per family over real unix sockets, 8
//! accelerators, the ledger filling up. The kubelet emulator admits one Pod at a time the way
//! the kubelet does (pod-resources knows the Pod, GetPreferredAllocation over every healthy free
//! token, then Allocate) and times each call from request sent to answer decoded. Every
//! measured Allocate includes identification (the pod-resources List and the Pod match), the
//! ledger decision, the responder and the journal's synced append.
//!
//! Per family, rounds fill the ledger (exclusive: 8 Pods of one GPU; shared: 80 Pods of one
//! share; sliced: `BENCH_SLICED_PODS` Pods of one 1 % slice, 768 by default) and then delete
//! every Pod, so each round starts empty. Prints p50/p99 per family and call.
//! Run: `cargo bench -p accel-plugin --features testing --bench allocate`
//! (`BENCH_ROUNDS` scales the exclusive and shared rounds, 100 by default).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_core::Manufacturer;
use accel_core::ledger::Seat;
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, Call, Kubelet, seat};
use accel_plugin::{Config, DevicePlugins};

const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        println!("{name:<52} no samples");
        return;
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<52} n={:<6} p50={:>8.1} µs  p99={:>8.1} µs  max={:>8.1} µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        at(1.0).as_secs_f64() * 1e6,
    );
}

fn config(dir: &Path) -> Config {
    let seats: Vec<Seat> = (0..8).map(seat).collect();
    Config {
        kubelet_dir: dir.join("kubelet"),
        data_dir: dir.join("data"),
        settings: Settings::default(),
        offer: Offer::of(Manufacturer::Nvidia),
        seats,
        responder: Arc::new(NvidiaResponder {
            strategy: InjectionStrategy::Envvar,
            cuda_major: Some(13),
            pod_dir_root: dir.join("data/pods"),
            preload_dir: dir.join("data/preload"),
            library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
            engine: std::sync::Arc::new(EngineFacts::default()),
        }),
        poll_interval: Duration::from_secs(1),
        partitions: None,
        metrics: Default::default(),
    }
}

fn pod(n: u32, resource: &str) -> Pod {
    let memory = format!("{SLICED}.memory-percentage");
    let mut limits = vec![(resource, "1")];
    if resource == SLICED {
        limits.push((memory.as_str(), "1"));
    }
    let uid = format!("pod-{n}");
    Pod {
        namespace: "bench".into(),
        name: uid.clone(),
        ..testing::pod(&uid, i64::from(n), &[("main", &limits)])
    }
}

/// Runs `rounds` rounds of `per_round` one-token Pods of `resource` on a fresh plugin.
async fn family(resource: &str, rounds: u32, per_round: u32) {
    let dir = tempfile::tempdir().unwrap();
    let pods = MemoryPods::new();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), pods.clone()).await;
    let plugins = DevicePlugins::start(config(dir.path()), Arc::new(pods.clone()))
        .await
        .unwrap();
    kubelet.wait_for(&[GPU, SHARED, SLICED]).await;
    let started = Instant::now();
    let mut n = 0;
    for _ in 0..rounds {
        let mut live = Vec::new();
        for _ in 0..per_round {
            let pod = pod(n, resource);
            n += 1;
            live.push(pod.uid.clone());
            kubelet.create(pod.clone());
            kubelet.admit(&pod.uid).await.unwrap();
        }
        let held: usize = plugins
            .ledger()
            .grants()
            .values()
            .filter(|g| !g.finished)
            .count();
        assert_eq!(
            held, per_round as usize,
            "every Pod of the round holds its grant"
        );
        for uid in live {
            kubelet.delete(&uid);
        }
        // Let the plugin settle the deletions before the next round fills the ledger again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !plugins.ledger().grants().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let wall = started.elapsed();
    let (mut preferred, mut allocate) = (Vec::new(), Vec::new());
    for t in kubelet.take_timings() {
        match t.call {
            Call::GetPreferredAllocation => preferred.push(t.elapsed),
            Call::Allocate => allocate.push(t.elapsed),
        }
    }
    let tokens = kubelet.devices(resource).len();
    percentiles(
        &format!("GetPreferredAllocation {resource} ({tokens} tokens)"),
        preferred,
    );
    percentiles(
        &format!("Allocate {resource} (identify + journal)"),
        allocate,
    );
    println!(
        "  {rounds} round(s) of {per_round} Pods, {n} admissions in {:.2} s",
        wall.as_secs_f64()
    );
    plugins.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rounds = env_number("BENCH_ROUNDS", 100);
    let sliced = env_number("BENCH_SLICED_PODS", 768).clamp(1, 1024);
    runtime.block_on(async {
        family(GPU, rounds, 8).await;
        family(SHARED, rounds.div_ceil(10), 80).await;
        family(SLICED, 1, sliced).await;
    });
}
