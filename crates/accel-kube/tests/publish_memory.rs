//! The publisher against the in-memory API server: an outage loses nothing and everything lands
//! once the API is back; a Pod that is gone stops its retries; retries back off and are capped;
//! the Node's capacity is put back after a kubelet restart; nothing is published before the
//! first detection; a restarted publisher does not rewrite what is already there.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_core::devices::{
    AcceleratorAllocation, AcceleratorGroup, AllocationMode, DevicesAccelerator, DevicesSpec,
    DevicesStatus, Grantability,
};
use accel_core::ledger::annotation::ALLOCATED_ANNOTATION;
use accel_core::manufacturer::Manufacturer;
use accel_kube::publish::memory::MemoryApi;
use accel_kube::publish::{
    Desired, NodeFacts, PodRef, Publisher, PublisherConfig, PublisherHandle,
};
use tokio::sync::watch;

const NODE: &str = "node-1";
const NAMESPACE: &str = "gpustack-system";

fn pod(name: &str, uid: &str) -> PodRef {
    PodRef {
        namespace: "team-a".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

fn api() -> Arc<MemoryApi> {
    let api = MemoryApi::new();
    api.put_node(
        NODE,
        NodeFacts {
            uid: "node-uid-1".into(),
            labels: BTreeMap::from([
                ("kubernetes.io/os".into(), "linux".into()),
                ("kubernetes.io/arch".into(), "amd64".into()),
            ]),
            capacity: BTreeMap::from([("cpu".into(), "8".into())]),
            allocatable: BTreeMap::from([("cpu".into(), "8".into())]),
        },
    );
    api.put_pod(&pod("a", "uid-a"));
    api.put_pod(&pod("b", "uid-b"));
    Arc::new(api)
}

fn desired() -> Desired {
    let spec = DevicesSpec {
        interfaces: None,
        groups: vec![AcceleratorGroup {
            manufacturer: Manufacturer::Nvidia,
            key: "nvidia-h100-80gb-hbm3".into(),
            product: Some("NVIDIA H100 80GB HBM3".into()),
            memory_mib: Some(81559),
            cores: None,
            driver_version: Some("590.48.01".into()),
            runtime_version: Some("13.0".into()),
            family: Some("Hopper".into()),
            compute_capability: Some("9.0".into()),
            accelerators: vec![DevicesAccelerator {
                index: 0,
                uuid: Some("GPU-0".into()),
                bus_id: None,
                numa_node: Some(0),
                memory_mib: Some(81559),
                healthy: true,
                health_reasons: vec![],
                grantable: Grantability::Whole,
                logical_sliced: None,
                partition_profiles: BTreeMap::new(),
                super_pod: None,
            }],
        }],
    };
    Desired {
        node_feature_labels: BTreeMap::from([(
            "feature.gpustack.ai/acceleratable".into(),
            "true".into(),
        )]),
        devices_spec: spec,
        devices_status: DevicesStatus {
            accelerators: vec![AcceleratorAllocation {
                manufacturer: Manufacturer::Nvidia,
                index: 0,
                uuid: Some("GPU-0".into()),
                mode: AllocationMode::Sliced,
                remaining: 1_200_000,
                allocated_slices: Some(1),
                allocated_profiles: None,
                placeable_profiles: None,
            }],
            conditions: vec![],
            faults: vec![],
        },
        capacity: BTreeMap::from([
            ("nvidia.com/gpu.sliced.units".into(), 1_600_000),
            ("nvidia.com/gpu.sliced.memory-mib".into(), 81559),
        ]),
        annotations: BTreeMap::from([
            (pod("a", "uid-a"), Some(r#"{"main":{}}"#.to_string())),
            (pod("b", "uid-b"), Some(r#"{"main":{}}"#.to_string())),
        ]),
        node_events: BTreeMap::new(),
    }
}

fn config() -> PublisherConfig {
    let mut config = PublisherConfig::new(NODE, NAMESPACE, [Manufacturer::Nvidia]);
    config.backoff_initial = Duration::from_millis(500);
    config.backoff_max = Duration::from_secs(4);
    config
}

fn start(
    api: &Arc<MemoryApi>,
    config: PublisherConfig,
) -> (watch::Sender<Option<Desired>>, PublisherHandle) {
    let (tx, rx) = watch::channel(None);
    let (publisher, handle) = Publisher::new(api.clone(), config, rx);
    tokio::spawn(publisher.run());
    (tx, handle)
}

async fn caught_up(handle: &mut PublisherHandle, what: &str) {
    tokio::time::timeout(Duration::from_secs(3600), handle.caught_up())
        .await
        .unwrap_or_else(|_| panic!("the publisher never caught up: {what}"));
}

fn calls_to(api: &MemoryApi, prefix: &str) -> usize {
    api.calls().iter().filter(|c| c.starts_with(prefix)).count()
}

#[tokio::test(start_paused = true)]
async fn an_outage_loses_nothing_and_everything_lands_when_the_api_is_back() {
    let api = api();
    api.set_reachable(false);
    let (tx, mut handle) = start(&api, config());
    tx.send_replace(Some(desired()));
    // A minute of outage: the sender never blocked, nothing landed, and the publisher knows it.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!handle.is_caught_up());
    assert_eq!(
        api.pod_annotation("team-a", "a", ALLOCATED_ANNOTATION),
        None
    );
    assert!(api.devices_object(NODE).is_none());
    // A newer state sent during the outage replaces the older one.
    let mut newer = desired();
    newer.devices_status.accelerators[0].remaining = 800_000;
    newer
        .annotations
        .insert(pod("a", "uid-a"), Some(r#"{"main":{"x":1}}"#.into()));
    tx.send_replace(Some(newer.clone()));

    api.set_reachable(true);
    caught_up(&mut handle, "after the outage").await;
    assert_eq!(
        api.pod_annotation("team-a", "a", ALLOCATED_ANNOTATION)
            .as_deref(),
        Some(r#"{"main":{"x":1}}"#)
    );
    assert_eq!(
        api.pod_annotation("team-a", "b", ALLOCATED_ANNOTATION)
            .as_deref(),
        Some(r#"{"main":{}}"#)
    );
    let devices = api.devices_object(NODE).expect("the Devices object");
    assert_eq!(devices.spec.0, newer.devices_spec);
    assert_eq!(devices.status, Some(newer.devices_status.clone()));
    let labels = devices.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("kubernetes.io/arch").map(String::as_str),
        Some("amd64")
    );
    let node = api.node_facts(NODE).unwrap();
    assert_eq!(node.capacity["nvidia.com/gpu.sliced.units"], "1600000");
    assert_eq!(
        node.allocatable["nvidia.com/gpu.sliced.memory-mib"],
        "81559"
    );
    assert_eq!(node.capacity["cpu"], "8", "keys not ours are left alone");
    let feature = api
        .node_feature_object(NAMESPACE, "node-1-gpustack-device-manager")
        .expect("the NodeFeature");
    assert_eq!(feature.spec.labels, newer.node_feature_labels);
}

#[tokio::test(start_paused = true)]
async fn a_gone_pod_stops_its_retries() {
    let api = api();
    api.set_reachable(false);
    let (tx, mut handle) = start(&api, config());
    tx.send_replace(Some(desired()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Pod a is deleted during the outage; pod b is recreated under its name with a new UID.
    api.delete_pod("team-a", "a");
    api.delete_pod("team-a", "b");
    api.put_pod(&pod("b", "uid-b-2"));
    api.set_reachable(true);
    caught_up(&mut handle, "with both Pods gone").await;
    assert_eq!(
        api.pod_annotation("team-a", "b", ALLOCATED_ANNOTATION),
        None,
        "another incarnation of the Pod never receives the grant"
    );
    let tried_a = calls_to(&api, "annotate_pod team-a/a");
    let tried_b = calls_to(&api, "annotate_pod team-a/b");
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        calls_to(&api, "annotate_pod team-a/a"),
        tried_a,
        "no retry for a deleted Pod"
    );
    assert_eq!(
        calls_to(&api, "annotate_pod team-a/b"),
        tried_b,
        "no retry for a replaced Pod"
    );
    assert!(handle.is_caught_up());
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_exponentially_up_to_the_cap() {
    let api = api();
    api.set_reachable(false);
    let (tx, _handle) = start(&api, config());
    let mut one_pod = desired();
    one_pod.annotations.remove(&pod("b", "uid-b"));
    tx.send_replace(Some(one_pod));
    tokio::time::sleep(Duration::from_secs(60)).await;
    // 0, 0.5, 1.5, 3.5, 7.5, then every 4 s to 59.5: 5 + 13 tries.
    let tries = calls_to(&api, "annotate_pod team-a/a");
    assert!((16..=20).contains(&tries), "{tries} tries in a minute");
}

#[tokio::test(start_paused = true)]
async fn capacity_is_put_back_after_a_kubelet_restart_and_removed_when_the_accelerators_go() {
    let api = api();
    let mut config = config();
    config.capacity_check = Duration::from_secs(30);
    let (tx, mut handle) = start(&api, config);
    tx.send_replace(Some(desired()));
    caught_up(&mut handle, "first publication").await;
    // The kubelet restarts and rewrites the Node's status without our keys.
    // A canonical rewrite of a value we set is not drift: nothing is patched for it.
    let mut canonical = api.node_facts(NODE).unwrap().capacity;
    canonical.insert("nvidia.com/gpu.sliced.units".into(), "1600k".into());
    api.reset_node_status(NODE, canonical);
    api.clear_calls();
    tokio::time::sleep(Duration::from_secs(31)).await;
    caught_up(&mut handle, "after a check that found no drift").await;
    assert_eq!(calls_to(&api, "node "), 1, "the Node was read back");
    assert_eq!(
        calls_to(&api, "patch_node_capacity"),
        0,
        "{:?}",
        api.calls()
    );
    api.reset_node_status(NODE, BTreeMap::from([("cpu".into(), "8".into())]));
    tokio::time::sleep(Duration::from_secs(31)).await;
    caught_up(&mut handle, "after the capacity check").await;
    let node = api.node_facts(NODE).unwrap();
    assert_eq!(node.capacity["nvidia.com/gpu.sliced.units"], "1600000");
    assert_eq!(node.allocatable["nvidia.com/gpu.sliced.units"], "1600000");

    // The accelerators go: our keys are removed, the others kept.
    let mut gone = desired();
    gone.capacity.clear();
    tx.send_replace(Some(gone));
    caught_up(&mut handle, "after the accelerators went").await;
    let node = api.node_facts(NODE).unwrap();
    assert_eq!(node.capacity, BTreeMap::from([("cpu".into(), "8".into())]));
    assert_eq!(
        node.allocatable,
        BTreeMap::from([("cpu".into(), "8".into())])
    );
}

#[tokio::test(start_paused = true)]
async fn nothing_is_published_before_the_first_detection() {
    let api = api();
    let (_tx, mut handle) = start(&api, config());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    caught_up(&mut handle, "with nothing to publish").await;
    assert_eq!(api.calls(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_restarted_publisher_rewrites_nothing_that_is_already_there() {
    let api = api();
    let (tx, mut handle) = start(&api, config());
    tx.send_replace(Some(desired()));
    caught_up(&mut handle, "first publisher").await;
    drop(tx);
    api.clear_calls();
    let (tx, mut handle) = start(&api, config());
    tx.send_replace(Some(desired()));
    caught_up(&mut handle, "second publisher").await;
    let writes: Vec<String> = api
        .calls()
        .into_iter()
        .filter(|c| {
            !(c.starts_with("node ") || c.starts_with("node_feature ") || c.starts_with("devices "))
        })
        .collect();
    // The annotations and the status are written again (the publisher cannot know they are
    // there without reading every Pod); the NodeFeature, Devices spec and capacity are not.
    assert!(
        writes
            .iter()
            .all(|c| c.starts_with("annotate_pod") || c.starts_with("patch_devices_status")),
        "{writes:?}"
    );
    assert!(
        !writes.iter().any(|c| c.starts_with("patch_devices_status")),
        "status read back equal: {writes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_devices_object_deleted_under_the_publisher_is_written_again() {
    let api = api();
    let (tx, mut handle) = start(&api, config());
    tx.send_replace(Some(desired()));
    caught_up(&mut handle, "first publication").await;
    api.delete_devices(NODE);
    let mut next = desired();
    next.devices_status.accelerators[0].remaining = 0;
    tx.send_replace(Some(next.clone()));
    caught_up(&mut handle, "after the Devices object was deleted").await;
    let devices = api.devices_object(NODE).expect("written again");
    assert_eq!(devices.spec.0, next.devices_spec);
    assert_eq!(devices.status, Some(next.devices_status));
    assert!(devices.metadata.owner_references.is_some());
}

#[tokio::test(start_paused = true)]
async fn the_backlog_counts_what_waits_and_what_retries_through_an_outage() {
    use accel_kube::publish::PublishMetrics;
    use accel_plugin::metrics::exposition::Samples;
    use prometheus_client::registry::Registry;

    let mut registry = Registry::with_prefix("device_manager");
    let metrics = PublishMetrics::register(&mut registry);
    let backlog = || {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        let samples = Samples::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut by_part = BTreeMap::new();
        for (labels, value) in samples.all("device_manager_publish_backlog") {
            by_part.insert((labels["part"].clone(), labels["state"].clone()), value);
        }
        by_part
    };
    let pending = |backlog: &BTreeMap<(String, String), f64>| -> Vec<(String, String, f64)> {
        backlog
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|((p, s), v)| (p.clone(), s.clone(), *v))
            .collect()
    };
    let api = api();
    api.set_reachable(false);
    let (tx, rx) = watch::channel(None);
    let (publisher, mut handle) = Publisher::new(api.clone(), config(), rx);
    tokio::spawn(publisher.with_metrics(metrics).run());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = backlog();
    assert_eq!(
        before.len(),
        12,
        "every part and state, from the start: {before:?}"
    );
    assert!(
        pending(&before).is_empty(),
        "nothing desired, nothing pending"
    );

    tx.send_replace(Some(desired()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    let entry = |part: &str, state: &str, n: f64| (part.to_string(), state.to_string(), n);
    assert_eq!(
        pending(&backlog()),
        vec![
            entry("capacity", "retrying", 1.0),
            // Behind the Node's read, never tried.
            entry("devices", "waiting", 1.0),
            entry("devices_status", "waiting", 1.0),
            entry("node", "retrying", 1.0),
            entry("node_feature", "waiting", 1.0),
            entry("pod_annotation", "retrying", 2.0),
        ]
    );

    api.set_reachable(true);
    caught_up(&mut handle, "after the outage").await;
    assert!(pending(&backlog()).is_empty(), "{:?}", backlog());
}

fn with_interfaces(desired: &mut Desired, failed_at: Option<&str>) {
    use accel_core::interfaces::{DeviceInterface, DeviceInterfaceLink, LinkState};
    desired.devices_spec.interfaces = Some(vec![DeviceInterface {
        name: "ibp25s0".into(),
        bus: "pci".into(),
        rdma: true,
        rdma_device: "mlx5_0".into(),
        link: Some(match failed_at {
            None => DeviceInterfaceLink::ok(),
            Some(at) => DeviceInterfaceLink {
                state: LinkState::Failed,
                reason: "the RDMA link is not usable: port 1: state=\"1: DOWN\" phys_state=\"3: Disabled\"".into(),
                first_seen_time: Some(at.into()),
            },
        }),
        ..DeviceInterface::default()
    }]);
}

/// `spec.interfaces` on a cluster whose Devices CRD predates it: the API server drops the field
/// silently (as an old CRD once dropped `status.faults`). The publisher's next read shows it, and
/// says so once, with the way out.
#[tokio::test(start_paused = true)]
async fn an_old_crd_that_prunes_the_interfaces_is_caught() {
    let api = api();
    api.set_prunes_interfaces(true);
    let (tx, mut handle) = start(&api, config());
    let mut want = desired();
    with_interfaces(&mut want, None);
    tx.send_replace(Some(want.clone()));
    caught_up(&mut handle, "first write").await;
    assert_eq!(api.devices_object(NODE).unwrap().spec.0.interfaces, None);
    assert_eq!(handle.stale_crd(), None, "not known before a read back");
    // The next change reads the object back: the interfaces are not there.
    with_interfaces(&mut want, Some("2026-12-02T01:00:00Z"));
    tx.send_replace(Some(want));
    caught_up(&mut handle, "second write").await;
    let why = handle.stale_crd().expect("the stale CRD is named");
    assert!(why.contains("drops spec.interfaces"), "{why}");
    assert!(why.contains("deploy/helm/device-manager/crds/"), "{why}");
}

/// A current CRD keeps them; a daemon that never enumerated leaves them as they are; a failure
/// first seen by another daemon of the node keeps that daemon's time.
#[tokio::test(start_paused = true)]
async fn interfaces_are_kept_merged_and_their_first_seen_time_adopted() {
    let api = api();
    let (tx, mut handle) = start(&api, config());
    let mut want = desired();
    with_interfaces(&mut want, Some("2026-12-02T01:00:00Z"));
    tx.send_replace(Some(want.clone()));
    caught_up(&mut handle, "first write").await;
    assert!(
        api.devices_object(NODE)
            .unwrap()
            .spec
            .0
            .interfaces
            .is_some()
    );
    assert_eq!(handle.stale_crd(), None);
    // A second daemon saw the same failure later.
    let (tx2, mut handle2) = start(&api, config());
    let mut later = desired();
    with_interfaces(&mut later, Some("2026-12-02T02:00:00Z"));
    tx2.send_replace(Some(later));
    caught_up(&mut handle2, "second daemon").await;
    let stored = api.devices_object(NODE).unwrap().spec.0.interfaces.unwrap();
    assert_eq!(
        stored[0].link.as_ref().unwrap().first_seen_time.as_deref(),
        Some("2026-12-02T01:00:00Z")
    );
    // A daemon with nothing to say leaves them.
    let mut none = desired();
    none.devices_spec.interfaces = None;
    none.devices_spec.groups.clear();
    tx.send_replace(Some(none));
    caught_up(&mut handle, "no interfaces").await;
    assert!(
        api.devices_object(NODE)
            .unwrap()
            .spec
            .0
            .interfaces
            .is_some()
    );
}
