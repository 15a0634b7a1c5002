//! The random-history property test through the real plugin: random sequences of Pod create,
//! admit (GetPreferredAllocation + Allocate over real unix sockets, the kubelet emulator on the
//! other end), finish, delete and plugin restart (stop, then start on the same data dir) never
//! over-commit an accelerator, never lose a grant the kubelet holds, never keep one for a Pod
//! that is gone, and always agree with a recount from scratch (`Ledger::verify`).
//! Few cases and short sequences: each case starts a plugin and a kubelet, so it stays within a
//! CI budget on 2 cores.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::ledger::{GrantKey, Seat};
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::pods::{MemoryPods, Phase, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, Kubelet, seat};
use accel_plugin::{Config, DevicePlugins};
use proptest::prelude::*;

const RESOURCES: [&str; 3] = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/gpu.sliced",
];

#[derive(Debug, Clone)]
enum Op {
    /// A Pod asking `count` tokens of `RESOURCES[family]` (slices at `percent` % memory).
    Create {
        family: usize,
        count: u64,
        percent: u32,
    },
    /// The kubelet admits the n-th Pod created (modulo how many there are).
    Admit(usize),
    Finish(usize),
    Delete(usize),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, 1..=2u64, prop::sample::select(vec![10u32, 30, 60]))
            .prop_map(|(family, count, percent)| Op::Create { family, count, percent }),
        4 => any::<usize>().prop_map(Op::Admit),
        1 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Delete),
        1 => Just(Op::Restart),
    ]
}

fn seats() -> Vec<Seat> {
    (0..2)
        .map(|i| Seat {
            numa_node: Some(0),
            // Few slots, so the slot gate is reached.
            slice_capacity: 3,
            ..seat(i)
        })
        .collect()
}

fn config(dir: &std::path::Path) -> Config {
    Config {
        kubelet_dir: dir.join("kubelet"),
        data_dir: dir.join("data"),
        settings: Settings::default(),
        offer: Offer::of(Manufacturer::Nvidia),
        seats: seats(),
        responder: Arc::new(NvidiaResponder {
            strategy: InjectionStrategy::Envvar,
            cuda_major: Some(13),
            pod_dir_root: dir.join("data/pods"),
            preload_dir: dir.join("data/preload"),
            library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
            engine: std::sync::Arc::new(EngineFacts::default()),
        }),
        poll_interval: Duration::from_millis(20),
        partitions: None,
        metrics: Default::default(),
    }
}

async fn start(config: &Config, pods: &MemoryPods, kubelet: &Kubelet) -> DevicePlugins {
    let plugins = DevicePlugins::start(config.clone(), Arc::new(pods.clone()))
        .await
        .unwrap();
    let resources = plugins.resources();
    let names: Vec<&str> = resources.iter().map(String::as_str).collect();
    kubelet.wait_for(&names).await;
    plugins
}

/// What the emulated kubelet holds per live Pod: (Pod UID, resource) → device IDs, sorted.
type Held = BTreeMap<(String, String), Vec<String>>;

fn check(plugins: &DevicePlugins, held: &Held, live: &BTreeMap<String, Phase>) {
    let ledger = plugins.ledger();
    ledger
        .verify()
        .unwrap_or_else(|e| panic!("the ledger disagrees with a recount: {e}"));
    assert_eq!(ledger.recount(), *ledger.occupancies());
    for ((uid, resource), ids) in held {
        let grant = ledger
            .grant(&GrantKey::new(uid.clone(), "main"))
            .unwrap_or_else(|| {
                panic!("{uid}: the kubelet holds {ids:?} of {resource}, the ledger lost the grant")
            });
        assert_eq!(&grant.resource, resource, "{uid}");
        assert_eq!(
            &grant.device_ids, ids,
            "{uid}: the grant names other tokens"
        );
        assert!(
            !grant.finished,
            "{uid}: a running Pod's grant stopped charging"
        );
    }
    for (key, grant) in ledger.grants() {
        let phase = live.get(&key.pod_uid);
        assert!(phase.is_some(), "{key}: a grant survives its deleted Pod");
        if phase.is_some_and(|p| p.finished()) {
            assert!(grant.finished, "{key}: a finished Pod still charges");
        }
    }
}

async fn history(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let pods = MemoryPods::new();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), pods.clone()).await;
    let config = config(dir.path());
    let mut plugins = start(&config, &pods, &kubelet).await;
    let mut created: Vec<(String, &'static str)> = Vec::new();
    let mut live: BTreeMap<String, Phase> = BTreeMap::new();
    let mut held = Held::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Create {
                family,
                count,
                percent,
            } => {
                let resource = RESOURCES[family];
                let uid = format!("pod-{step}");
                let (count, percent) = (count.to_string(), percent.to_string());
                let memory = format!("{resource}.memory-percentage");
                let mut limits = vec![(resource, count.as_str())];
                if family == 2 {
                    limits.push((memory.as_str(), percent.as_str()));
                }
                kubelet.create(Pod {
                    namespace: "history".into(),
                    name: uid.clone(),
                    ..testing::pod(&uid, step as i64, &[("main", &limits)])
                });
                created.push((uid.clone(), resource));
                live.insert(uid, Phase::Pending);
            }
            Op::Admit(n) if !created.is_empty() => {
                let (uid, resource) = created[n % created.len()].clone();
                // The kubelet admits a Pod once, while it is Pending.
                if live.get(&uid) != Some(&Phase::Pending) {
                    continue;
                }
                if kubelet.admit(&uid).await.is_ok() {
                    let mut ids = kubelet.held(&uid, "main", resource);
                    ids.sort();
                    held.insert((uid.clone(), resource.to_string()), ids);
                    live.insert(uid, Phase::Running);
                }
            }
            Op::Finish(n) if !created.is_empty() => {
                let (uid, resource) = created[n % created.len()].clone();
                if live.get(&uid) == Some(&Phase::Running) {
                    kubelet.finish(&uid);
                    held.remove(&(uid.clone(), resource.to_string()));
                    live.insert(uid, Phase::Succeeded);
                }
            }
            Op::Delete(n) if !created.is_empty() => {
                let (uid, resource) = created[n % created.len()].clone();
                if live.remove(&uid).is_some() {
                    kubelet.delete(&uid);
                    held.remove(&(uid, resource.to_string()));
                }
            }
            Op::Restart => {
                plugins.stop().await;
                plugins = start(&config, &pods, &kubelet).await;
            }
            Op::Admit(_) | Op::Finish(_) | Op::Delete(_) => {}
        }
        // The Pod watcher settles asynchronously; settle now so the check sees this step: an
        // exclusive or shared grant made from the watch's answer follows its Pod once the
        // kubelet has confirmed its container (a few milliseconds after the grant).
        plugins.verify_grants().await;
        plugins.reconcile_pods();
        check(&plugins, &held, &live);
    }
    plugins.stop().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn random_histories_through_the_plugin_keep_the_ledger_true(
        ops in prop::collection::vec(op(), 1..32),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(history(ops));
    }
}
