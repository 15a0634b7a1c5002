//! The node's RDMA plugin through the kubelet emulator, over the recorded HGX host's network
//! (8 ConnectX-7 InfiniBand NICs, one beside each GPU): the three keys registered, tokens with
//! their NUMA node, Allocate's exact answer, a failed link's tokens Unhealthy (still listed), the
//! endpoint nearest the Pod's accelerators preferred, one plugin per node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_core::interfaces::{DeviceInterface, DeviceInterfaceLink, LinkState, PciPlace};
use accel_host::FsHost;
use accel_plugin::pods::MemoryPods;
use accel_plugin::rdma::{RdmaConfig, RdmaPlugin};
use accel_plugin::testing::{self, Kubelet, pod};
use tokio::sync::watch;

const RDMA: &str = "device.gpustack.ai/rdma";
const SHARED: &str = "device.gpustack.ai/rdma.shared";
const PARTITIONED: &str = "device.gpustack.ai/rdma.partitioned";

struct Node {
    _host: tempfile::TempDir,
    _kubelet_dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugin: RdmaPlugin,
    interfaces: watch::Sender<Option<Arc<Vec<DeviceInterface>>>>,
    list: Vec<DeviceInterface>,
}

/// GPU 4's place on the recorded host: behind root port 0000:97:01.0, NUMA 1.
fn gpu4() -> PciPlace {
    PciPlace {
        pci_bus_id: "0000:9a:00.0".into(),
        pci_root_id: "0000:97:01.0".into(),
        pci_switches: vec![
            "0000:99:00.0".into(),
            "0000:98:00.0".into(),
            "0000:97:01.0".into(),
        ],
        numa: "1".into(),
    }
}

async fn start(near: BTreeMap<String, PciPlace>) -> Node {
    let host = accel_testkit::copy_recorded("hgx-h100-8gpu");
    let files = Arc::new(FsHost::new(host.path().join("root")));
    let list = accel_net::read_interfaces(files.as_ref()).unwrap();
    let (interfaces, rx) = watch::channel(Some(Arc::new(list.clone())));
    let kubelet_dir = tempfile::tempdir().unwrap();
    let pods = MemoryPods::new();
    let kubelet = Kubelet::start(kubelet_dir.path(), pods.clone()).await;
    let plugin = RdmaPlugin::start(RdmaConfig {
        kubelet_dir: kubelet_dir.path().to_path_buf(),
        host: files,
        interfaces: rx,
        shared: true,
        partitioned: true,
        pods: Arc::new(pods),
        near: Arc::new(move |key| near.get(&key.pod_uid).cloned().into_iter().collect()),
        poll_interval: Duration::from_millis(100),
    });
    assert!(
        kubelet
            .until_listed(&[RDMA, SHARED, PARTITIONED], testing::WAIT)
            .await,
        "the three RDMA keys register"
    );
    Node {
        _host: host,
        _kubelet_dir: kubelet_dir,
        kubelet,
        plugin,
        interfaces,
        list,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_keys_register_with_numa_on_every_token() {
    let node = start(BTreeMap::new()).await;
    assert!(node.plugin.serving());
    node.kubelet.wait_devices(RDMA, |d| d.len() == 8).await;
    node.kubelet
        .wait_devices(SHARED, |d| d.len() == 8 * 64)
        .await;
    let exclusive = node.kubelet.devices(RDMA);
    let first = exclusive
        .iter()
        .find(|d| d.id == "ibp25s0:ibp25s0:0000")
        .unwrap();
    assert_eq!(first.health, "Healthy");
    assert_eq!(first.topology.as_ref().unwrap().nodes[0].id, 0);
    let numa1 = exclusive
        .iter()
        .find(|d| d.id == "ibp155s0:ibp155s0:0000")
        .unwrap();
    assert_eq!(numa1.topology.as_ref().unwrap().nodes[0].id, 1);
    let shared = node.kubelet.devices(SHARED);
    assert!(shared.iter().any(|d| d.id == "ibp25s0:ibp25s0:0063"));
    // No interface has VFs: the partitioned key is registered with no token.
    assert!(node.kubelet.devices(PARTITIONED).is_empty());
    node.plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_answers_the_verbs_node_rdma_cm_and_nccl_ib_hca() {
    let node = start(BTreeMap::new()).await;
    node.kubelet.wait_devices(RDMA, |d| d.len() == 8).await;
    let answer = node
        .kubelet
        .allocate_raw(
            RDMA,
            vec!["ibp43s0:ibp43s0:0000".into(), "ibp25s0:ibp25s0:0000".into()],
        )
        .await
        .unwrap();
    let response = &answer.container_responses[0];
    assert_eq!(
        response.envs,
        BTreeMap::from([("NCCL_IB_HCA".to_string(), "mlx5_0,mlx5_1".to_string())])
            .into_iter()
            .collect()
    );
    let devices: Vec<(&str, &str, &str)> = response
        .devices
        .iter()
        .map(|d| {
            (
                d.container_path.as_str(),
                d.host_path.as_str(),
                d.permissions.as_str(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            ("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0", "rw"),
            ("/dev/infiniband/uverbs1", "/dev/infiniband/uverbs1", "rw"),
            ("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
        ]
    );
    assert!(response.mounts.is_empty());
    // Two shared tokens of one endpoint are one device.
    let shared = node
        .kubelet
        .allocate_raw(
            SHARED,
            vec!["ibp25s0:ibp25s0:0001".into(), "ibp25s0:ibp25s0:0002".into()],
        )
        .await
        .unwrap();
    assert_eq!(shared.container_responses[0].devices.len(), 2);
    // Refusals in the spec's words.
    let unknown = node
        .kubelet
        .allocate_raw(RDMA, vec!["eth9:eth9:0000".into()])
        .await
        .unwrap_err();
    assert_eq!(
        unknown.message(),
        "device id \"eth9:eth9:0000\" names no RDMA endpoint of the exclusive family"
    );
    let bad = node
        .kubelet
        .allocate_raw(RDMA, vec!["nonsense".into()])
        .await
        .unwrap_err();
    assert!(
        bad.message().starts_with("invalid device id \"nonsense\""),
        "{}",
        bad.message()
    );
    node.plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_link_turns_its_tokens_unhealthy_without_removing_them() {
    let node = start(BTreeMap::new()).await;
    node.kubelet.wait_devices(RDMA, |d| d.len() == 8).await;
    let mut list = node.list.clone();
    let nic = list.iter_mut().find(|i| i.name == "ibp59s0").unwrap();
    nic.link = Some(DeviceInterfaceLink {
        state: LinkState::Failed,
        reason: "the RDMA link is not usable: port 1: state=\"1: DOWN\" phys_state=\"3: Disabled\""
            .into(),
        first_seen_time: Some("2026-12-02T01:00:00Z".into()),
    });
    node.interfaces.send_replace(Some(Arc::new(list)));
    node.kubelet
        .wait_devices(RDMA, |d| {
            d.len() == 8
                && d.iter()
                    .all(|t| (t.health == "Unhealthy") == t.id.starts_with("ibp59s0:"))
        })
        .await;
    node.kubelet
        .wait_devices(SHARED, |d| {
            d.len() == 512 && d.iter().filter(|t| t.health == "Unhealthy").count() == 64
        })
        .await;
    node.plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_nearest_the_pods_accelerators_is_preferred() {
    // The Pod's container holds GPU 4 (bus 9a, NUMA 1): its NIC ibp155s0 (bus 9b) sits behind the
    // same root port (PXB); every other NIC is farther (NODE or SYS).
    let node = start(BTreeMap::from([("near".to_string(), gpu4())])).await;
    node.kubelet.wait_devices(RDMA, |d| d.len() == 8).await;
    node.kubelet
        .create(pod("near", 1, &[("main", &[(RDMA, "1")])]));
    let admission = node.kubelet.admit("near").await.unwrap();
    assert_eq!(
        node.kubelet.held("near", "main", RDMA),
        ["ibp155s0:ibp155s0:0000"]
    );
    assert_eq!(
        admission["main"][RDMA]
            .envs
            .get("NCCL_IB_HCA")
            .map(String::as_str),
        Some("mlx5_4")
    );
    // A Pod whose accelerators are not known gets the first endpoints by id.
    node.kubelet
        .create(pod("far", 2, &[("main", &[(RDMA, "1")])]));
    node.kubelet.admit("far").await.unwrap();
    assert_eq!(
        node.kubelet.held("far", "main", RDMA),
        ["ibp172s0:ibp172s0:0000"]
    );
    node.plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_node_waits_and_takes_over() {
    let node = start(BTreeMap::new()).await;
    let (_tx, rx) = watch::channel(Some(Arc::new(node.list.clone())));
    let mut second = RdmaPlugin::start(RdmaConfig {
        kubelet_dir: node._kubelet_dir.path().to_path_buf(),
        host: Arc::new(FsHost::new(node._host.path().join("root"))),
        interfaces: rx,
        shared: true,
        partitioned: true,
        pods: Arc::new(MemoryPods::new()),
        near: Arc::new(|_| Vec::new()),
        poll_interval: Duration::from_millis(100),
    });
    assert!(
        !second.until_serving(Duration::from_millis(500)).await,
        "one plugin per node"
    );
    node.plugin.stop().await;
    assert!(second.until_serving(testing::WAIT).await, "takes over");
    second.stop().await;
}
