//! The daemon's network watch (spec/rdma.md §6): the interfaces re-read every monitor period,
//! published when what counts changed (non-virtual interfaces, and virtual ones bearing RDMA: a
//! Pod's veth coming or going is no change), forced every [`FORCED_ROUNDS`] rounds; a read that
//! fails keeps the last inventory (and so the labels built from it), said once until one
//! succeeds again. The first-seen time of a failed link is carried from the last read
//! (`accel_core::interfaces::carry_first_seen`); the publisher adopts the cluster's when it is
//! older.
//!
//! Node-level: the same whichever manufacturer's daemon runs; [`Network::accelerator_places`]
//! answers where this daemon's accelerators sit on the bus for the `rdma.distance` label, and
//! [`node_feature_labels`] is the NodeFeature's label map the daemon publishes and `labels`
//! prints, built one way.
//!
//! A recorded host that captured no network tree (no `sys/class/net`: most recordings, made
//! before the network was read, or of its accelerators only) is said once at `info`, not as an
//! error: nothing is wrong with the node, there is only nothing to enumerate. On a live root
//! (and for a recording whose tree is there but unreadable) the failure stays an error, as the
//! spec logs it (§5).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use accel_core::interfaces::{
    DeviceInterface, PciPlace, carry_first_seen, rdma_labels, significant,
};
use accel_core::inventory::Inventory;
use accel_core::labels::{GroupNaming, labels_with};
use accel_host::Host;
use tokio::sync::watch;

use crate::publish::rfc3339;

/// A publish is forced every this many rounds, whatever was seen (10 min at 15 s).
pub const FORCED_ROUNDS: u32 = 40;

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Read, and what counts changed (or the forced round): published.
    Published,
    /// Read, nothing that counts changed: not published.
    Unchanged,
    /// Could not enumerate: the last inventory stands.
    Failed(String),
}

#[derive(Default)]
struct State {
    /// The last successful read, first-seen times stamped.
    last: Option<Vec<DeviceInterface>>,
    /// What counts of the last published read.
    baseline: Option<Vec<DeviceInterface>>,
    rounds: u32,
    failing: bool,
}

/// The labels the node's NodeFeature carries (spec/rdma.md §7 beside the accelerators'): the
/// inventory's under `naming`, and, when the interfaces were enumerated, the `rdma.*` labels of
/// them and of where the accelerators sit (`places`). The daemon's feed and `labels` both
/// build them here, so what `labels` prints is what the daemon publishes.
pub fn node_feature_labels(
    inventory: &Inventory,
    naming: GroupNaming,
    interfaces: Option<&[DeviceInterface]>,
    places: &[PciPlace],
) -> BTreeMap<String, String> {
    let mut labels = labels_with(inventory, naming);
    if let Some(interfaces) = interfaces {
        labels.extend(rdma_labels(interfaces, places));
    }
    labels
}

/// Whether `host` reads a recording's files (`<dir>/root` of a folder carrying the recording's
/// mark), decided from the host's own root.
fn reads_a_recording(host: &dyn Host) -> bool {
    let root = host.root();
    root.file_name().is_some_and(|n| n == accel_host::ROOT_DIR)
        && root
            .parent()
            .is_some_and(|dir| matches!(accel_host::recording::read_mark(dir), Ok(Some(_))))
}

/// The node's network interfaces as the daemon publishes them.
pub struct Network {
    host: Arc<dyn Host>,
    /// The host is a recording: a missing network tree is a note, not an error.
    recorded: bool,
    state: Mutex<State>,
    published: watch::Sender<Option<Arc<Vec<DeviceInterface>>>>,
}

impl Network {
    /// A watch over the host's files (`host`: the host root, or a recording's files).
    pub fn new(host: Arc<dyn Host>) -> Arc<Network> {
        Arc::new(Network {
            recorded: reads_a_recording(host.as_ref()),
            host,
            state: Mutex::new(State::default()),
            published: watch::channel(None).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The interfaces as last published; `None` before the first successful read.
    pub fn published(&self) -> watch::Receiver<Option<Arc<Vec<DeviceInterface>>>> {
        self.published.subscribe()
    }

    /// The last published list, now.
    pub fn current(&self) -> Option<Arc<Vec<DeviceInterface>>> {
        self.published.borrow().clone()
    }

    /// One round: read, compare, publish when it counts (see the module).
    pub fn round(&self, now: SystemTime) -> Round {
        let read = accel_net::read_interfaces(self.host.as_ref());
        let mut state = self.lock();
        let mut list = match read {
            Ok(list) => list,
            Err(e) => {
                if !state.failing {
                    if self.recorded && !self.host.exists(accel_net::inventory::NET_CLASS) {
                        tracing::info!(
                            "this recorded host captured no network tree ({} is not in it): no interfaces and no rdma.* labels are published for it",
                            accel_net::inventory::NET_CLASS
                        );
                    } else {
                        tracing::error!(
                            error = %e,
                            consequence = "keeping whatever inventory and labels were recorded before this pass",
                            "could not enumerate network interfaces"
                        );
                    }
                }
                state.failing = true;
                return Round::Failed(e.to_string());
            }
        };
        if state.failing {
            tracing::info!("the network interfaces are enumerated again");
        }
        state.failing = false;
        carry_first_seen(
            &mut list,
            state.last.as_deref().unwrap_or(&[]),
            &rfc3339(now),
        );
        let counted = significant(&list);
        state.rounds += 1;
        let changed = state.baseline.as_ref() != Some(&counted);
        let forced = state.rounds >= FORCED_ROUNDS;
        state.last = Some(list.clone());
        if !changed && !forced {
            return Round::Unchanged;
        }
        if changed && state.baseline.is_some() {
            tracing::info!("the network interfaces changed; publishing");
        }
        state.rounds = 0;
        state.baseline = Some(counted);
        drop(state);
        self.published.send_replace(Some(Arc::new(list)));
        Round::Published
    }

    /// Rounds every `period` on the blocking pool, until the runtime stops.
    pub async fn run(self: Arc<Self>, period: Duration) {
        loop {
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.round(SystemTime::now())).await;
            tokio::time::sleep(period).await;
        }
    }

    /// Where each of the inventory's accelerators sits on the bus, for the distance label: the
    /// PCI topology the detection pass read for it (`accel_backend::detect::place_on_bus`, the
    /// bridge walk a NIC's place is read with), its NUMA node beside it.
    pub fn accelerator_places(&self, inventory: &Inventory) -> Vec<PciPlace> {
        inventory
            .manufacturers
            .iter()
            .flat_map(|s| &s.accelerators)
            .filter_map(|accelerator| {
                let bus = accelerator.bus_id?;
                let topology = accelerator.pci_topology.as_ref()?;
                Some(PciPlace {
                    pci_bus_id: bus.sysfs(),
                    pci_root_id: topology.root_id.clone(),
                    pci_switches: topology.switches.clone(),
                    numa: accelerator
                        .numa_node
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! The network part of the daemon's publishing on the in-memory API, over a copy of the
    //! recorded HGX host (8 InfiniBand NICs beside its 8 GPUs): the Devices spec and the labels,
    //! a Pod's veth appearing (nothing written), a port going down (written, the label kept while
    //! other ports are up), a failed read (the last inventory stands), every port down (the
    //! `rdma.*` labels removed after that successful read).

    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use accel_core::Manufacturer;
    use accel_core::interfaces::LinkState;
    use accel_core::resources::KeyGrammar;
    use accel_host::FsHost;
    use accel_host::pci::PciClassPrefixes;
    use accel_kube::publish::memory::MemoryApi;
    use accel_kube::publish::{NodeFacts, Publisher, PublisherConfig};
    use accel_nvidia::detector::Deadlines;
    use accel_plugin::pods::MemoryPods;
    use tokio::sync::watch;

    use super::{Network, Round};
    use crate::daemon::Published;
    use crate::node::Node;
    use crate::publish::Feed;

    const NODE: &str = "hgx-1";
    const NAMESPACE: &str = "gpustack-system";

    /// A recording's files are known by the mark beside their `root/`; a missing network tree
    /// is then a failed read said at info (the demo's first run logs no error), and the same
    /// folder without the mark is read as a live root, where it stays an error.
    #[test]
    fn a_recording_is_known_by_its_mark_and_its_missing_tree_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("root");
        std::fs::create_dir_all(&files).unwrap();
        let live = Network::new(Arc::new(FsHost::new(&files)));
        assert!(!live.recorded);
        std::fs::write(dir.path().join(accel_host::MARK_FILE), "{\"format\": 1}").unwrap();
        let recorded = Network::new(Arc::new(FsHost::new(&files)));
        assert!(recorded.recorded);
        assert!(matches!(
            recorded.round(SystemTime::UNIX_EPOCH),
            Round::Failed(_)
        ));
        assert!(recorded.current().is_none(), "nothing published");
        // A plain folder named otherwise is no recording's files.
        let other = Network::new(Arc::new(FsHost::new(dir.path())));
        assert!(!other.recorded);
    }

    fn port(root: &std::path::Path, ibdev: &str, state: &str, phys: &str) {
        let ports = root.join(format!("sys/class/infiniband/{ibdev}/ports/1"));
        std::fs::write(ports.join("state"), format!("{state}\n")).unwrap();
        std::fs::write(ports.join("phys_state"), format!("{phys}\n")).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn interfaces_and_rdma_labels_follow_the_network_not_the_veths() {
        let host = accel_testkit::copy_recorded("hgx-h100-8gpu");
        let files = host.path().join("root");
        let node = Node::open(host.path()).unwrap();
        let (inventory, _) = node
            .collect(None, &PciClassPrefixes::default(), Deadlines::default())
            .unwrap();
        let (_detected_tx, detected) = watch::channel(Some(Published {
            manufacturer: Manufacturer::Nvidia,
            inventory,
            failure: None,
            detected_at: SystemTime::UNIX_EPOCH,
            faults: Vec::new(),
        }));
        let network = Network::new(Arc::new(FsHost::new(&files)));
        assert_eq!(network.round(SystemTime::UNIX_EPOCH), Round::Published);
        let api = Arc::new(MemoryApi::new());
        api.put_node(
            NODE,
            NodeFacts {
                uid: "uid-hgx-1".into(),
                ..NodeFacts::default()
            },
        );
        let (_plugins_tx, plugins_rx) = watch::channel(None);
        let feed = Feed {
            grammar: KeyGrammar::default(),
            slices: Arc::new(|_| false),
            pods: Arc::new(MemoryPods::new()),
            detected,
            // The feed stops when a channel it watches closes: the senders live as long as the
            // test, as the daemon's do.
            plugins: plugins_rx,
            out: watch::channel(None).0,
            network: Some(network.clone()),
        };
        let mut config = PublisherConfig::new(NODE, NAMESPACE, [Manufacturer::Nvidia]);
        config.backoff_initial = Duration::from_millis(20);
        let (publisher, mut handle) = Publisher::new(api.clone(), config, feed.out.subscribe());
        let tasks = [tokio::spawn(publisher.run()), tokio::spawn(feed.run())];
        let caught_up = async |handle: &mut accel_kube::PublisherHandle| {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tokio::time::timeout(Duration::from_secs(10), handle.caught_up())
                .await
                .unwrap();
        };
        caught_up(&mut handle).await;

        let labels = |api: &MemoryApi| -> BTreeMap<String, String> {
            api.node_feature_object(NAMESPACE, &format!("{NODE}-gpustack-device-manager"))
                .unwrap()
                .spec
                .labels
                .into_iter()
                .filter(|(k, _)| k.starts_with("feature.gpustack.ai/rdma."))
                .collect()
        };
        let interfaces =
            |api: &MemoryApi| api.devices_object(NODE).unwrap().spec.0.interfaces.unwrap();
        let listed = interfaces(&api);
        let names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ibp155s0", "ibp172s0", "ibp187s0", "ibp220s0", "ibp25s0", "ibp43s0", "ibp59s0",
                "ibp94s0", "lo"
            ]
        );
        assert_eq!(
            serde_json::to_value(&listed[4]).unwrap(),
            serde_json::json!({"name": "ibp25s0", "bus": "pci", "pciBusId": "0000:19:00.0",
                "pciRootId": "0000:15:01.0",
                "pciSwitches": ["0000:17:01.0", "0000:16:00.0", "0000:15:01.0"],
                "pciVendor": "0x15b3", "pciDevice": "0x1021", "numaAffinity": "0",
                "cpuAffinity": "0-47,96-143", "mtu": 2044, "up": true, "rdma": true,
                "rdmaDevice": "mlx5_0", "link": {"state": "ok"}})
        );
        assert_eq!(
            labels(&api),
            BTreeMap::from([
                (
                    "feature.gpustack.ai/rdma.capable".to_string(),
                    "true".to_string()
                ),
                // Each NIC shares its GPU's root port.
                (
                    "feature.gpustack.ai/rdma.distance".to_string(),
                    "PXB".to_string()
                ),
                (
                    "feature.gpustack.ai/rdma.numa".to_string(),
                    "0_1".to_string()
                ),
            ])
        );

        // A Pod's veth appears: no change that counts, nothing written.
        std::fs::create_dir_all(files.join("sys/devices/virtual/net/veth3f2a1c")).unwrap();
        std::fs::write(
            files.join("sys/devices/virtual/net/veth3f2a1c/mtu"),
            "1500\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "../../devices/virtual/net/veth3f2a1c",
            files.join("sys/class/net/veth3f2a1c"),
        )
        .unwrap();
        api.clear_calls();
        assert_eq!(network.round(SystemTime::UNIX_EPOCH), Round::Unchanged);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(api.calls(), Vec::<String>::new(), "no publish for a veth");

        // A port goes down: published, its failure stamped; the label stays (7 ports up).
        port(&files, "mlx5_0", "1: DOWN", "3: Disabled");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(network.round(at), Round::Published);
        caught_up(&mut handle).await;
        let listed = interfaces(&api);
        let down = listed.iter().find(|i| i.name == "ibp25s0").unwrap();
        let link = down.link.as_ref().unwrap();
        assert_eq!(link.state, LinkState::Failed);
        assert_eq!(
            link.reason,
            "the RDMA link is not usable: port 1: state=\"1: DOWN\" phys_state=\"3: Disabled\""
        );
        assert_eq!(
            link.first_seen_time.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );
        assert!(
            listed.iter().any(|i| i.name == "veth3f2a1c"),
            "written with the next change"
        );
        assert_eq!(labels(&api)["feature.gpustack.ai/rdma.capable"], "true");

        // Still down later: the first-seen time is kept.
        std::fs::write(
            files.join("sys/class/infiniband/mlx5_0/ports/1/phys_state"),
            "2: Polling\n",
        )
        .unwrap();
        assert_eq!(
            network.round(at + Duration::from_secs(60)),
            Round::Published
        );
        caught_up(&mut handle).await;
        let kept = interfaces(&api);
        let link = kept
            .iter()
            .find(|i| i.name == "ibp25s0")
            .unwrap()
            .link
            .clone()
            .unwrap();
        assert_eq!(
            link.first_seen_time.as_deref(),
            Some("2027-01-15T08:00:00Z")
        );

        // A read that fails keeps the last inventory and labels.
        std::fs::rename(
            files.join("sys/class/net"),
            files.join("sys/class/net.gone"),
        )
        .unwrap();
        assert!(matches!(
            network.round(SystemTime::UNIX_EPOCH),
            Round::Failed(_)
        ));
        assert_eq!(network.current().unwrap().as_slice(), kept.as_slice());
        std::fs::rename(
            files.join("sys/class/net.gone"),
            files.join("sys/class/net"),
        )
        .unwrap();

        // Every port down: not capable, the stale rdma.* labels removed after this good read.
        for n in 0..8 {
            port(&files, &format!("mlx5_{n}"), "1: DOWN", "3: Disabled");
        }
        assert_eq!(network.round(at), Round::Published);
        caught_up(&mut handle).await;
        assert_eq!(labels(&api), BTreeMap::new());
        for task in tasks {
            task.abort();
        }
    }
}
