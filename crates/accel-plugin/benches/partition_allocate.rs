//! The partitioned family's Allocate split into our share and the vendor call's (issue 13,
//! "BENCHMARKS.md"), over real unix sockets on a copy of `testdata/hosts/hgx-h100-8gpu-mig`
//! with `SmiPartitioner` and the MIG replay (the recorded host whose MIG state follows the
//! commands).
//!
//! Each round admits 8 Pods of one `3g.40gb` (packed two to a GPU), then deletes them and waits
//! until every instance is reclaimed. For every Allocate the kubelet emulator's timing (request
//! sent to answer decoded) is split by a wrapper around the partitioner's programs that adds up
//! the time spent inside them during that admission: the vendor share (on this host, the
//! replay's `nvidia-smi` stand-in: the listings, the create and the listing after it), and ours
//! (identification, the ledger decision, the ownership record and the journal's synced append,
//! the answer). Then the partitioner alone: `create` + `destroy` of one instance, timed apart.
//!
//! Run: `cargo bench -p accel-plugin --features testing --bench partition_allocate`
//! (`BENCH_ROUNDS` rounds, 10 by default; `BENCH_CREATES` partitioner rounds, 100 by default).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use accel_backend::partition::{PartitionGpu, Partitioner};
use accel_core::Manufacturer;
use accel_core::ledger::Seat;
use accel_host::{CommandError, CommandOutput, Commands, FsHost, RecordedCommands};
use accel_nvidia::mig_replay::{self, MigState};
use accel_nvidia::partitioner::SmiPartitioner;
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::{Offer, Orphans};
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, Call, Kubelet};
use accel_plugin::{Config, DevicePlugins, Partitions};
use accel_testkit::copy_tree;

const PARTITIONED: &str = "nvidia.com/gpu.partitioned";
const VISIBILITY: &str = "device.gpustack.ai/nvidia.visibility";

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The host's programs, adding up the time spent in them.
struct Timed {
    inner: Box<dyn Commands>,
    spent_ns: AtomicU64,
}

impl Commands for Timed {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let started = Instant::now();
        let out = self.inner.run(argv, deadline);
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.spent_ns.fetch_add(ns, Ordering::Relaxed);
        out
    }
    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        println!("{name:<58} no samples");
        return;
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<58} n={:<5} p50={:>9.1} µs  p99={:>9.1} µs  max={:>9.1} µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        at(1.0).as_secs_f64() * 1e6,
    );
}

/// A fresh copy of the MIG host and its programs (replayed, timed).
fn host(dir: &Path) -> (std::path::PathBuf, Arc<Timed>) {
    let host = dir.join("host");
    copy_tree(&accel_testkit::recorded_host("hgx-h100-8gpu-mig"), &host).unwrap();
    let commands = Arc::new(Timed {
        inner: mig_replay::wrap(&host, Box::new(RecordedCommands::load(&host).unwrap())),
        spent_ns: AtomicU64::new(0),
    });
    (host, commands)
}

fn pod(n: u32) -> Pod {
    let uid = format!("pod-{n}");
    let profile = format!("{PARTITIONED}.mig-3g.40gb");
    Pod {
        namespace: "bench".into(),
        name: uid.clone(),
        ..testing::pod(
            &uid,
            i64::from(n),
            &[("main", &[(PARTITIONED, "1"), (profile.as_str(), "1")])],
        )
    }
}

async fn allocate(rounds: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (host, commands) = host(dir.path());
    let section = accel_nvidia::detector::detect(
        &FsHost::new(host.join("root")),
        commands.as_ref(),
        accel_nvidia::detector::DetectOptions::default(),
    )
    .detection
    .unwrap();
    let seats: Vec<Seat> = section
        .accelerators
        .iter()
        .map(|a| Seat::from_accelerator(a, 0))
        .collect();
    let pods = MemoryPods::new();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), pods.clone()).await;
    let programs: Arc<dyn Commands> = commands.clone();
    let config = Config {
        kubelet_dir: dir.path().join("kubelet"),
        data_dir: dir.path().join("data"),
        settings: Settings::default(),
        offer: Offer {
            sliced: false,
            ..Offer::of(Manufacturer::Nvidia)
        },
        seats,
        responder: Arc::new(NvidiaResponder {
            strategy: InjectionStrategy::Envvar,
            cuda_major: Some(13),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
            engine: Arc::new(EngineFacts::default()),
        }),
        poll_interval: Duration::from_secs(1),
        metrics: Default::default(),
        partitions: Some(Partitions {
            partitioner: Arc::new(SmiPartitioner::default()),
            commands: programs,
            // No pass over unowned instances during the rounds (one at start).
            orphans: Orphans {
                debounce: Duration::from_secs(3600),
                period: Duration::from_secs(3600),
            },
        }),
    };
    let plugins = DevicePlugins::start(config, Arc::new(pods.clone()))
        .await
        .unwrap();
    kubelet.wait_for(&[PARTITIONED, VISIBILITY]).await;
    let state = host.join(mig_replay::STATE_FILE);
    let mut vendor = Vec::new();
    let mut n = 0;
    let started = Instant::now();
    for _ in 0..rounds {
        let mut live = Vec::new();
        for _ in 0..8 {
            let pod = pod(n);
            n += 1;
            kubelet.create(pod.clone());
            commands.spent_ns.store(0, Ordering::Relaxed);
            kubelet.admit(&pod.uid).await.unwrap();
            vendor.push(Duration::from_nanos(
                commands.spent_ns.load(Ordering::Relaxed),
            ));
            live.push(pod.uid);
        }
        for uid in live {
            kubelet.delete(&uid);
        }
        // Every instance reclaimed before the next round.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(plugins.ledger().grants().is_empty()
            && MigState::load(&state).unwrap().instances.is_empty())
        {
            assert!(
                Instant::now() < deadline,
                "the round's instances were not reclaimed"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let wall = started.elapsed();
    let total: Vec<Duration> = kubelet
        .take_timings()
        .into_iter()
        .filter(|t| t.call == Call::Allocate)
        .map(|t| t.elapsed)
        .collect();
    assert_eq!(total.len(), vendor.len());
    let ours: Vec<Duration> = total
        .iter()
        .zip(&vendor)
        .map(|(t, v)| t.saturating_sub(*v))
        .collect();
    percentiles("Allocate partitioned 3g.40gb, total (kubelet-side)", total);
    percentiles("  of which the vendor calls (nvidia-smi replay)", vendor);
    percentiles("  of which ours (total - vendor, per call)", ours);
    println!(
        "  {rounds} round(s) of 8 Pods, {n} admissions and reclaims in {:.2} s",
        wall.as_secs_f64()
    );
    plugins.stop().await;
}

fn partitioner_alone(rounds: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (_host, commands) = host(dir.path());
    let partitioner = SmiPartitioner::default();
    let gpu = PartitionGpu {
        index: 0,
        uuid: None,
    };
    let (mut creates, mut destroys) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let made = partitioner.create(commands.as_ref(), &gpu, 9, 0).unwrap();
        creates.push(started.elapsed());
        let started = Instant::now();
        partitioner
            .destroy(
                commands.as_ref(),
                &gpu,
                made.gpu_instance,
                made.compute_instances.first().copied(),
            )
            .unwrap();
        destroys.push(started.elapsed());
    }
    percentiles("SmiPartitioner::create 3g.40gb (replay)", creates);
    percentiles("SmiPartitioner::destroy CI then GI (replay)", destroys);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(allocate(env_number("BENCH_ROUNDS", 10)));
    partitioner_alone(env_number("BENCH_CREATES", 100));
}
