//! Issue 47, through the daemon: every manufacturer's recorded host gives one info series per
//! accelerator and usage gauges that join on it (`manufacturer`, `uuid`), and a grant is a
//! holding series while it lives, gone with its release, with the ledger's occupancy beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use accel_backend::respond::{EngineFacts, InjectionStrategy};
use accel_core::Manufacturer;
use accel_core::devices::DevicesSpec;
use accel_nvidia::responder::NvidiaResponder;
use accel_plugin::metrics::exposition::Samples;
use accel_plugin::testing;
use prometheus_client::registry::Registry;

use super::metrics::{GpuUsageMetrics, LedgerMetrics};
use super::test_support::{Rig, copy_host, data_dir, options, plugin_config, scrape};
use super::*;

const BOOT: &str = "5e0c7a31-2b94-4d6f-8a1e-93c4b7d20f58";

/// One recorded host of each manufacturer, with a usage sample recorded.
const HOSTS: [(Manufacturer, &str); 9] = [
    (Manufacturer::Nvidia, "hgx-h100-8gpu"),
    (Manufacturer::Amd, "amd-8x-mi300x"),
    (Manufacturer::Ascend, "ascend-8x-910b2"),
    (Manufacturer::Cambricon, "cambricon-8x-mlu370-cnmon-v5"),
    (Manufacturer::Hygon, "hygon-4x-k100ai"),
    (Manufacturer::Iluvatar, "iluvatar-16x-bi-v150"),
    (Manufacturer::Metax, "metax-8x-c500"),
    (Manufacturer::Mthreads, "mthreads-8x-s4000"),
    (Manufacturer::Thead, "thead-16x-zw810e"),
];

/// The usage gauges `GpuUsageMetrics` exports.
const USAGE: [&str; 6] = [
    "device_manager_gpu_utilization_percent",
    "device_manager_gpu_memory_used_mib",
    "device_manager_gpu_memory_total_mib",
    "device_manager_gpu_temperature_celsius",
    "device_manager_gpu_power_draw_watts",
    "device_manager_gpu_compute_processes",
];

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The daemon prepared on a copy of `name` as `serve` prepares it, its metrics scraped after
/// one usage sample, and the inventory they were read from.
fn scrape_host(m: Manufacturer, name: &str) -> (Samples, Inventory) {
    let host = copy_host(name, BOOT);
    let data = tempfile::tempdir().unwrap();
    let node = Node::open(host.path()).unwrap();
    let daemon = Daemon::prepare(node, options(m, &data_dir(&data))).unwrap();
    let sample = daemon
        .sample_usage()
        .unwrap_or_else(|e| panic!("{name}: no usage sample: {e}"));
    let mut registry = Registry::with_prefix("device_manager");
    registry.register_collector(Box::new(daemon.accelerator_metrics(GroupNaming::default())));
    let (_keep, usage) = watch::channel(Some(sample));
    registry.register_collector(Box::new(GpuUsageMetrics { usage }));
    (scrape(&registry), daemon.inventory())
}

#[test]
fn every_manufacturers_accelerators_have_an_info_series_and_usage_gauges_that_join_on_it() {
    for (m, name) in HOSTS {
        let (samples, inventory) = scrape_host(m, name);
        let section = inventory
            .manufacturer(m)
            .unwrap_or_else(|| panic!("{name}: {m} not detected"));
        // The group label is the Devices object's group the accelerator is published under.
        let spec = DevicesSpec::from_inventory(&inventory, |_| None);
        let group_of: BTreeMap<u32, String> = spec
            .groups
            .iter()
            .flat_map(|g| g.accelerators.iter().map(|a| (a.index, g.key.clone())))
            .collect();
        let info = samples.all("device_manager_accelerator_info");
        assert_eq!(info.len(), section.accelerators.len(), "{name}");
        let mut uuids = BTreeSet::new();
        for a in &section.accelerators {
            let uuid = a.uuid.clone().unwrap_or_default();
            assert!(
                !uuid.is_empty(),
                "{name}: accelerator {} has no uuid",
                a.index
            );
            let index = a.index.to_string();
            let bus_id = a.bus_id.map(|b| b.to_string()).unwrap_or_default();
            let numa = a.numa_node.map(|n| n.to_string()).unwrap_or_default();
            let product = a.product.clone().unwrap_or_default();
            assert!(
                !product.is_empty(),
                "{name}: accelerator {index} has no product"
            );
            let expected = labels(&[
                ("manufacturer", m.name()),
                ("index", &index),
                ("uuid", &uuid),
                ("product", &product),
                ("group", &group_of[&a.index]),
                ("bus_id", &bus_id),
                ("numa_node", &numa),
            ]);
            assert!(
                info.contains(&(expected.clone(), 1.0)),
                "{name}: no info series {expected:?} in {info:?}"
            );
            assert_eq!(
                samples.get(
                    "device_manager_accelerator_healthy",
                    &[
                        ("manufacturer", m.name()),
                        ("index", &index),
                        ("uuid", &uuid)
                    ]
                ),
                Some(f64::from(u8::from(a.healthy))),
                "{name}"
            );
            uuids.insert(uuid);
        }
        // Usage: every gauge series names the manufacturer and a uuid the info series has.
        let mut sampled = BTreeSet::new();
        for gauge in USAGE {
            for (series, _) in samples.all(gauge) {
                assert_eq!(
                    series.keys().collect::<Vec<_>>(),
                    ["manufacturer", "uuid"],
                    "{name}: {gauge}"
                );
                assert_eq!(series["manufacturer"], m.name(), "{name}: {gauge}");
                assert!(
                    uuids.contains(&series["uuid"]),
                    "{name}: {gauge} names {} which no info series has",
                    series["uuid"]
                );
                sampled.insert(series["uuid"].clone());
            }
        }
        assert!(
            !sampled.is_empty(),
            "{name}: {m}'s sampler gave no usage gauge"
        );
        assert!(
            samples
                .all("device_manager_gpu_memory_total_mib")
                .iter()
                .chain(samples.all("device_manager_gpu_utilization_percent").iter())
                .count()
                > 0,
            "{name}: neither utilisation nor memory"
        );
        assert_eq!(
            samples.get(
                "device_manager_detection_failing",
                &[("manufacturer", m.name())]
            ),
            Some(0.0),
            "{name}"
        );
        let last = samples
            .get(
                "device_manager_detection_last_success_timestamp_seconds",
                &[("manufacturer", m.name())],
            )
            .unwrap_or(0.0);
        assert!(last > 1.6e9, "{name}: last detection at {last}");
    }
}

/// NVIDIA's plugins as `serve` configures them, slices offered.
fn sliced_config(kubelet_dir: &Path, data: &Path, section: &ManufacturerInventory) -> Config {
    let responder = Arc::new(NvidiaResponder {
        strategy: InjectionStrategy::Envvar,
        cuda_major: Some(13),
        pod_dir_root: data.join("pods"),
        preload_dir: data.join("preload"),
        library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
        engine: Arc::new(EngineFacts::default()),
    });
    let mut config = plugin_config(kubelet_dir, data, section, responder);
    config.offer.sliced = true;
    config
}

const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_a_holding_series_while_it_lives_and_gone_with_its_release() {
    let host = copy_host("hgx-h100-8gpu", BOOT);
    let data = tempfile::tempdir().unwrap();
    let data = data_dir(&data);
    let node = Node::open(host.path()).unwrap();
    let daemon = Arc::new(Daemon::prepare(node, options(Manufacturer::Nvidia, &data)).unwrap());
    let rig = Rig::start(
        daemon.clone(),
        &data,
        sliced_config,
        &["nvidia.com/gpu", SHARED, SLICED],
    )
    .await;
    let mut registry = Registry::with_prefix("device_manager");
    registry.register_collector(Box::new(LedgerMetrics {
        manufacturer: Manufacturer::Nvidia,
        plugins: {
            let daemon = daemon.clone();
            Arc::new(move || daemon.plugin_handle())
        },
        pods: Arc::new(rig.kubelet.pods().clone()),
    }));
    let samples = scrape(&registry);
    assert!(samples.all("device_manager_ledger_holding").is_empty());
    let used = samples.all("device_manager_ledger_used_percent");
    assert_eq!(used.len(), 8);
    assert!(used.iter().all(|(_, v)| *v == 0.0), "{used:?}");

    // A slice of 25 % memory and 50 % compute, and one share of another card.
    rig.kubelet.create(testing::pod(
        "uid-slice",
        1_700_000_000,
        &[(
            "infer",
            &[
                (SLICED, "1"),
                ("nvidia.com/gpu.sliced.memory-percentage", "25"),
                ("nvidia.com/gpu.sliced.cores-percentage", "50"),
            ],
        )],
    ));
    rig.kubelet.admit("uid-slice").await.unwrap();
    rig.kubelet.create(testing::pod(
        "uid-share",
        1_700_000_001,
        &[("web", &[(SHARED, "1")])],
    ));
    rig.kubelet.admit("uid-share").await.unwrap();
    let ledger = daemon.plugin_handle().unwrap().ledger();
    let on = |uid: &str| {
        let (_, grant) = ledger
            .grants()
            .iter()
            .find(|(k, _)| k.pod_uid == uid)
            .unwrap();
        let index = grant.accelerators[0];
        let uuid = ledger.seat(index).unwrap().uuid.clone().unwrap();
        (index.to_string(), uuid)
    };
    let (slice_index, slice_uuid) = on("uid-slice");
    let (share_index, share_uuid) = on("uid-share");

    let samples = scrape(&registry);
    let holding = |index: &str, uuid: &str, uid: &str, container: &str, family: &str| {
        labels(&[
            ("manufacturer", "nvidia"),
            ("index", index),
            ("uuid", uuid),
            ("namespace", "ns"),
            ("pod", &format!("pod-{uid}")),
            ("pod_uid", uid),
            ("container", container),
            ("family", family),
            ("profile", ""),
        ])
    };
    let slice = holding(&slice_index, &slice_uuid, "uid-slice", "infer", "sliced");
    let share = holding(&share_index, &share_uuid, "uid-share", "web", "shared");
    let mut expected = vec![(slice.clone(), 1.0), (share.clone(), 1.0)];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(samples.all("device_manager_ledger_holding"), expected);
    // 25 % of 81,559 MiB, as the preload library is told; cores as asked; a share has neither.
    assert_eq!(
        samples.all("device_manager_ledger_holding_memory_mib"),
        vec![(slice.clone(), 20_389.0)]
    );
    assert_eq!(
        samples.all("device_manager_ledger_holding_cores_percent"),
        vec![(slice.clone(), 50.0)]
    );
    let card = |index: &str, uuid: &str| {
        [("manufacturer", "nvidia"), ("index", index), ("uuid", uuid)]
            .map(|(k, v)| (k, v.to_string()))
    };
    let get = |name: &str, index: &str, uuid: &str| {
        let c = card(index, uuid);
        let pairs: Vec<(&str, &str)> = c.iter().map(|(k, v)| (*k, v.as_str())).collect();
        samples.get(name, &pairs)
    };
    assert_eq!(
        get(
            "device_manager_ledger_used_percent",
            &slice_index,
            &slice_uuid
        ),
        Some(25.0)
    );
    assert_eq!(
        get(
            "device_manager_ledger_slices_taken",
            &slice_index,
            &slice_uuid
        ),
        Some(1.0)
    );
    assert_eq!(
        get(
            "device_manager_ledger_used_percent",
            &share_index,
            &share_uuid
        ),
        Some(10.0)
    );
    assert_eq!(
        get(
            "device_manager_ledger_shares_taken",
            &share_index,
            &share_uuid
        ),
        Some(1.0)
    );
    assert_eq!(
        get("device_manager_ledger_holders", &share_index, &share_uuid),
        Some(1.0)
    );

    // The slice's Pod goes: its holding goes with the grant; the share's stays.
    rig.kubelet.delete("uid-slice");
    testing::wait_released(rig.plugins.as_ref().unwrap(), "uid-slice").await;
    let samples = scrape(&registry);
    assert_eq!(
        samples.all("device_manager_ledger_holding"),
        vec![(share, 1.0)]
    );
    assert!(
        samples
            .all("device_manager_ledger_holding_memory_mib")
            .is_empty()
    );
    let c = card(&slice_index, &slice_uuid);
    let pairs: Vec<(&str, &str)> = c.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        samples.get("device_manager_ledger_used_percent", &pairs),
        Some(0.0)
    );
    rig.stop().await;
}
