//! Allocate and GetPreferredAllocation latency over real unix sockets, 8 accelerators, the
//! ledger filling up: identification (the pod-resources call and the pending-Pod match) and the
//! journal's synced append are inside every measured Allocate. Prints p50/p99 per call kind.
//! Run: `cargo bench -p accel-plugin --features testing --bench allocate`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_core::Manufacturer;
use accel_core::inventory::Grantable;
use accel_core::ledger::Seat;
use accel_plugin::pods::{Container, MemoryPods, Phase, Pod};
use accel_plugin::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::Kubelet;
use accel_plugin::{Config, DevicePlugins};

const SLICED: &str = "nvidia.com/gpu.sliced";
const GPU: &str = "nvidia.com/gpu";

fn uuid(i: u32) -> String {
    format!("GPU-{i:08}-0000-0000-0000-000000000000")
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    println!(
        "{name:<40} n={:<5} p50={:>8.1} µs  p99={:>8.1} µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let pods = MemoryPods::new();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), pods.clone()).await;
        let seats: Vec<Seat> = (0..8)
            .map(|i| Seat {
                index: i,
                uuid: Some(uuid(i)),
                numa_node: Some(i / 4),
                peers: BTreeMap::new(),
                memory_mib: Some(81_559),
                grantable: Grantable::Whole,
                healthy: true,
                slice_capacity: 128,
            })
            .collect();
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            manufacturer: Manufacturer::Nvidia,
            seats,
            slices: true,
            responder: NvidiaResponder {
                strategy: InjectionStrategy::Envvar,
                cuda_major: Some(13),
                pod_dir_root: dir.path().join("data/pods"),
                preload_dir: dir.path().join("data/preload"),
                engine: EngineFacts::default(),
            },
            poll_interval: Duration::from_secs(1),
        };
        let plugins = DevicePlugins::start(config, Arc::new(pods.clone()))
            .await
            .unwrap();
        kubelet.wait_for(&[GPU, SLICED]).await;

        // Sliced Allocate: 8 × 96 slices of 1 % each, the ledger filling up.
        let mut allocate = Vec::new();
        let mut preferred = Vec::new();
        let all: Vec<String> = kubelet.devices(SLICED).into_iter().map(|d| d.id).collect();
        let mut used = std::collections::BTreeSet::new();
        for n in 0..768u32 {
            let uid = format!("pod-{n}");
            pods.upsert(Pod {
                uid: uid.clone(),
                namespace: "bench".into(),
                name: uid.clone(),
                created: i64::from(n),
                phase: Phase::Pending,
                runtime_class: None,
                allocated: None,
                containers: vec![Container {
                    name: "main".into(),
                    limits: BTreeMap::from([
                        (SLICED.to_string(), "1".to_string()),
                        (format!("{SLICED}.memory-percentage"), "1".to_string()),
                    ]),
                    env: BTreeMap::new(),
                }],
            });
            let available: Vec<String> = all
                .iter()
                .filter(|id| !used.contains(*id))
                .cloned()
                .collect();
            let start = Instant::now();
            let pick = kubelet.preferred_raw(SLICED, available, 1).await.unwrap();
            preferred.push(start.elapsed());
            let start = Instant::now();
            kubelet.allocate_raw(SLICED, pick.clone()).await.unwrap();
            used.extend(pick);
            allocate.push(start.elapsed());
        }
        percentiles("GetPreferredAllocation sliced (768 tokens)", preferred);
        percentiles("Allocate sliced (identify + journal)", allocate);
        let ledger = plugins.ledger();
        let slices: u32 = ledger.occupancies().values().map(|o| o.slices).sum();
        println!("slices held after the run: {slices}");
        plugins.stop().await;
    });
}
