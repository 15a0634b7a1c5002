//! Hygon over real unix sockets: the plugin with accel-hygon's responder against the kubelet
//! emulator. Exclusive, shared, sliced and the visibility sidecar each answer with the exact
//! device nodes and mounts spec/hygon.md §4 and §5.3 state (no environment); two slices take
//! disjoint CU masks and distinct pipe ids in their `vdev.conf`, a fifth slice on a card is
//! refused, and a malformed `vdev.conf` under the pods directory fails the allocation by name.
//! The node's `.sliced.cores-percentage` capacity (100 a DCU) keeps off the node the slice whose
//! compute Allocate would refuse, and the ledger's count of each DCU's cores sends a slice the
//! capacity admits to the DCU whose compute can hold it.

use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, ComputeGeometry, DrmNodes, MigMode, Source};
use accel_core::ledger::Seat;
use accel_hygon::responder::HygonResponder;
use accel_hygon::vdev;
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const DCU: &str = "hygon.com/dcu";
const SHARED: &str = "hygon.com/dcu.shared";
const SLICED: &str = "hygon.com/dcu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/hygon.visibility";

/// Two K100_AI-like DCUs (120 CU, 65520 MiB), card1/renderD128 and card2/renderD129.
fn accelerators() -> Vec<Accelerator> {
    let cards = [
        ("GPU-7137d9b2a08a4841", "0000:09:00.0", 1, 128),
        ("GPU-7137d9debec858c1", "0000:0c:00.0", 2, 129),
    ];
    cards
        .iter()
        .enumerate()
        .map(|(i, (uuid, bus, card, render))| {
            let mut a = Accelerator::new(i as u32, Source::Driver);
            a.uuid = Some(uuid.to_string());
            a.bus_id = Some(bus.parse::<BusId>().unwrap());
            a.product = Some("K100_AI".into());
            a.memory_mib = Some(65_520);
            a.compute_capability = Some("gfx928".into());
            a.cores = Some(120);
            a.mig_mode = Some(MigMode::Disabled);
            a.drm = Some(DrmNodes {
                card: Some(*card),
                render: Some(*render),
            });
            a.compute_geometry = Some(ComputeGeometry {
                compute_units: Some(120),
                shader_engines: Some(8),
                xccs: None,
            });
            a
        })
        .collect()
}

const ALL_NODES: &[&str] = &[
    "/dev/kfd",
    "/dev/mkfd",
    "/dev/dri/card1",
    "/dev/dri/card2",
    "/dev/dri/renderD128",
    "/dev/dri/renderD129",
    "/opt/hyhal/bin/hy-smi",
    "/opt/dtk/bin/hipcc",
];

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
}

impl Rig {
    async fn new(nodes: &[&str]) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host_root = dir.path().join("host");
        for node in nodes {
            let path = host_root.join(node.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let plugins = start_plugins(dir.path(), &kubelet).await;
        Rig {
            dir,
            kubelet,
            plugins,
        }
    }

    fn pods_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data/pods")
    }

    fn vdev_conf(&self, pod: &str) -> String {
        std::fs::read_to_string(
            self.pods_dir()
                .join(pod)
                .join("c-main")
                .join(vdev::HOST_SUBDIR)
                .join("vdev0.conf"),
        )
        .unwrap()
    }
}

async fn start_plugins(dir: &std::path::Path, kubelet: &Kubelet) -> DevicePlugins {
    let accelerators = accelerators();
    let slices = accel_core::ledger::units::slices_per_accelerator(Manufacturer::Hygon).unwrap();
    let seats: Vec<Seat> = accelerators
        .iter()
        .map(|a| Seat::from_accelerator(a, slices))
        .collect();
    let responder = Arc::new(HygonResponder::from_setup(ResponderSetup {
        scratch: None,
        strategy: InjectionStrategy::Envvar,
        runtime_major: Some(0),
        pod_dir_root: dir.join("data/pods"),
        preload_dir: dir.join("data/preload"),
        library_dir: "/var/lib/gpustack/operator/lib".into(),
        engine: Arc::new(EngineFacts::default()),
        accelerators,
        host: Some(Arc::new(accel_host::FsHost::new(dir.join("host")))),
        commands: None,
        runtime_class: None,
        writes: None,
    }));
    let config = Config {
        kubelet_dir: dir.join("kubelet"),
        data_dir: dir.join("data"),
        settings: Settings::default(),
        offer: Offer::of(Manufacturer::Hygon),
        seats,
        responder,
        poll_interval: Duration::from_millis(20),
        metrics: Default::default(),
        partitions: None,
    };
    let plugins = DevicePlugins::start(config, Arc::new(kubelet.pods().clone()))
        .await
        .unwrap();
    let resources = plugins.resources();
    let names: Vec<&str> = resources.iter().map(String::as_str).collect();
    kubelet.wait_for(&names).await;
    plugins
}

fn pod(uid: &str, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    testing::pod(uid, 1, containers)
}

fn devices(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect()
}

fn mounts(admission: &Admission, container: &str, resource: &str) -> Vec<(String, String, bool)> {
    admission[container][resource]
        .mounts
        .iter()
        .map(|m| (m.container_path.clone(), m.host_path.clone(), m.read_only))
        .collect()
}

fn control() -> Vec<String> {
    vec![
        "/dev/kfd=/dev/kfd:rwm".into(),
        "/dev/mkfd=/dev/mkfd:rwm".into(),
    ]
}

fn first_card() -> Vec<String> {
    let mut nodes = control();
    nodes.extend([
        "/dev/dri/card1=/dev/dri/card1:rw".to_string(),
        "/dev/dri/renderD128=/dev/dri/renderD128:rw".into(),
    ]);
    nodes
}

fn both_cards() -> Vec<String> {
    let mut nodes = first_card();
    nodes.extend([
        "/dev/dri/card2=/dev/dri/card2:rw".to_string(),
        "/dev/dri/renderD129=/dev/dri/renderD129:rw".into(),
    ]);
    nodes
}

fn hyhal() -> (String, String, bool) {
    ("/opt/hyhal".into(), "/opt/hyhal".into(), true)
}

#[tokio::test]
async fn exclusive_injects_the_control_nodes_each_cards_pair_and_hyhal_and_no_env() {
    let rig = Rig::new(ALL_NODES).await;
    rig.kubelet.create(pod("a", &[("main", &[(DCU, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", DCU), both_cards());
    assert!(admission["main"][DCU].envs.is_empty());
    assert_eq!(mounts(&admission, "main", DCU), vec![hyhal()]);
    assert!(admission["main"][DCU].annotations.is_empty());
}

#[tokio::test]
async fn shared_answers_as_exclusive_does() {
    let rig = Rig::new(ALL_NODES).await;
    rig.kubelet.create(pod("a", &[("main", &[(SHARED, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", SHARED), both_cards());
    assert!(admission["main"][SHARED].envs.is_empty());
    assert_eq!(mounts(&admission, "main", SHARED), vec![hyhal()]);
}

#[tokio::test]
async fn what_the_host_lacks_is_left_out_not_refused() {
    let without: Vec<&str> = ALL_NODES
        .iter()
        .copied()
        .filter(|n| !matches!(*n, "/dev/mkfd" | "/opt/hyhal/bin/hy-smi"))
        .collect();
    let rig = Rig::new(&without).await;
    rig.kubelet.create(pod("a", &[("main", &[(DCU, "1")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        devices(&admission, "main", DCU),
        vec![
            "/dev/kfd=/dev/kfd:rwm".to_string(),
            "/dev/dri/card1=/dev/dri/card1:rw".into(),
            "/dev/dri/renderD128=/dev/dri/renderD128:rw".into(),
        ]
    );
    assert!(mounts(&admission, "main", DCU).is_empty());
}

fn slice(percent: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        (SLICED, "1"),
        ("hygon.com/dcu.sliced.memory-percentage", percent),
        ("hygon.com/dcu.sliced.cores-percentage", percent),
    ]
}

#[tokio::test]
async fn two_slices_get_disjoint_cu_masks_and_distinct_pipe_ids_in_their_vdev_conf() {
    let rig = Rig::new(ALL_NODES).await;
    let half = slice("50");
    rig.kubelet.create(pod("a", &[("main", &half)]));
    rig.kubelet.create(pod("b", &[("main", &half)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    let b = rig.kubelet.admit("b").await.unwrap();
    // Both pack onto the first card.
    assert_eq!(devices(&a, "main", SLICED), first_card());
    assert!(a["main"][SLICED].envs.is_empty(), "no preload, no env");
    let dir = rig.pods_dir().join("a/c-main/etc/vdev/docker");
    assert_eq!(
        mounts(&a, "main", SLICED),
        vec![
            ("/opt/hygondriver".to_string(), "/opt/dtk".to_string(), true),
            hyhal(),
            ("/etc/vdev/docker".into(), dir.display().to_string(), true),
        ]
    );
    // 50% of 120 CUs and of 65520 MiB; the second slice takes the next 60 CUs, vdev 1, pipe 1.
    assert_eq!(
        rig.vdev_conf("a"),
        "PciBusId: 0000:09:00.0\ncu_mask: 0x0fffffffffffffff\ncu_mask: 0x0000000000000000\ncu_count: 60\nmem: 32760 MiB\ndevice_id: 0\nvdev_id: 0\npipe_id: 0\nenable: 1\n"
    );
    assert_eq!(
        rig.vdev_conf("b"),
        "PciBusId: 0000:09:00.0\ncu_mask: 0xf000000000000000\ncu_mask: 0x00ffffffffffffff\ncu_count: 60\nmem: 32760 MiB\ndevice_id: 0\nvdev_id: 1\npipe_id: 1\nenable: 1\n"
    );
    assert_eq!(mounts(&b, "main", SLICED).len(), 3);
}

#[tokio::test]
async fn a_fifth_slice_on_a_card_goes_elsewhere_and_past_eight_is_refused() {
    let rig = Rig::new(ALL_NODES).await;
    let tenth = slice("10");
    for i in 0..8 {
        let uid = format!("p{i}");
        rig.kubelet.create(pod(&uid, &[("main", &tenth)]));
        rig.kubelet.admit(&uid).await.unwrap();
    }
    // Four slices per DCU whatever the compute left: the fifth of each card went to the other.
    let on_first = (0..8)
        .filter(|i| {
            rig.vdev_conf(&format!("p{i}"))
                .starts_with("PciBusId: 0000:09:00.0")
        })
        .count();
    assert_eq!(on_first, 4);
    rig.kubelet.create(pod("p8", &[("main", &tenth)]));
    let err = rig.kubelet.admit("p8").await.unwrap_err();
    assert!(
        matches!(
            err.code(),
            Code::FailedPrecondition | Code::ResourceExhausted
        ),
        "{err:?}"
    );
    assert!(
        !rig.pods_dir()
            .join("p8/c-main/etc/vdev/docker/vdev0.conf")
            .exists(),
        "no record written for the refused slice"
    );
}

#[tokio::test]
async fn a_malformed_vdev_conf_fails_the_allocation_by_name() {
    let rig = Rig::new(ALL_NODES).await;
    let bad = rig
        .pods_dir()
        .join("stray/c-main/etc/vdev/docker/vdev0.conf");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "PciBusId: 0000:09:00.0\ncu_mask: 0x1\n").unwrap();
    rig.kubelet.create(pod("a", &[("main", &slice("50"))]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().ends_with(&format!(
            "allocate vdev for card 0000:09:00.0: {}: 1 cu_mask lines, not two",
            bad.display()
        )),
        "{}",
        err.message()
    );
    assert!(
        rig.plugins.ledger().grants().is_empty(),
        "the grant is given back"
    );
}

#[tokio::test]
async fn the_sidecar_gets_the_owners_nodes_and_no_ledger_file() {
    let rig = Rig::new(ALL_NODES).await;
    let main = slice("50");
    rig.kubelet
        .create(pod("a", &[("main", &main), ("sshd", &[(VISIBILITY, "1")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "sshd", VISIBILITY), first_card());
    assert!(admission["sshd"][VISIBILITY].envs.is_empty());
    assert_eq!(mounts(&admission, "sshd", VISIBILITY), vec![hyhal()]);
    assert!(!rig.pods_dir().join("a/c-sshd").exists());
    assert_eq!(rig.plugins.ledger().grants().len(), 1);
}

/// A slice of `memory` % VRAM and `cores` % compute, as the webhook leaves it (`.units` folded).
fn slice_of(memory: u64, cores: u64) -> Vec<(String, String)> {
    vec![
        (SLICED.into(), "1".into()),
        (
            "hygon.com/dcu.sliced.memory-percentage".into(),
            memory.to_string(),
        ),
        (
            "hygon.com/dcu.sliced.cores-percentage".into(),
            cores.to_string(),
        ),
        (
            "hygon.com/dcu.sliced.units".into(),
            (memory * 16_000).to_string(),
        ),
    ]
}

/// What the scheduler does with a sliced Pod on this node: it fits when every budget key it
/// asks for, added to what the bound Pods ask, stays within the node's capacity as
/// `accel_core::capacity::node_capacity` publishes it for the rig's seats.
struct Scheduler {
    capacity: std::collections::BTreeMap<String, u64>,
    bound: Vec<Vec<(String, String)>>,
}

impl Scheduler {
    fn new() -> Scheduler {
        let slices =
            accel_core::ledger::units::slices_per_accelerator(Manufacturer::Hygon).unwrap();
        let seats: Vec<Seat> = accelerators()
            .iter()
            .map(|a| Seat::from_accelerator(a, slices))
            .collect();
        let capacity = accel_core::capacity::node_capacity(
            &accel_core::resources::KeyGrammar::default(),
            Manufacturer::Hygon,
            &seats,
            &std::collections::BTreeMap::new(),
        );
        Scheduler {
            capacity,
            bound: Vec::new(),
        }
    }

    fn fits(&self, limits: &[(String, String)]) -> bool {
        limits.iter().all(|(key, _)| {
            let Some(capacity) = self.capacity.get(key) else {
                return true; // a key the plugins serve (the token): 4 a DCU, never short here
            };
            let asked: u64 = self
                .bound
                .iter()
                .chain(std::iter::once(&limits.to_vec()))
                .flatten()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.parse::<u64>().unwrap())
                .sum();
            asked <= *capacity
        })
    }
}

/// Capacity and Allocate say the same thing on Hygon (disjoint CU masks, issue 44 item 3): the
/// node's `.sliced.cores-percentage` is 100 a DCU, so the slice the scheduler would still place
/// is granted and the one whose compute no DCU has left is kept off the node by the scheduler —
/// the one Allocate refuses: the ledger, which counts each DCU's cores percent, offers it no DCU
/// and refuses it on whichever the kubelet picks (behind the ledger the responder would refuse it
/// for its CU masks, `insufficient free compute units`). With 100 a slot (800 here) the scheduler
/// would bind that Pod and the kubelet fail it at admission.
#[tokio::test]
async fn the_cores_capacity_admits_exactly_the_slices_allocate_grants() {
    let rig = Rig::new(ALL_NODES).await;
    let mut scheduler = Scheduler::new();
    assert_eq!(
        scheduler.capacity["hygon.com/dcu.sliced.cores-percentage"], 200,
        "100 a DCU, not 100 a slot"
    );
    // The first DCU whole, then the second's compute with half its VRAM: both DCUs' CUs taken,
    // VRAM and slots left on the second.
    for (uid, memory, cores) in [("a", 100, 100), ("b", 50, 100), ("c", 10, 10)] {
        let limits = slice_of(memory, cores);
        let borrowed: Vec<(&str, &str)> = limits
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let admits = scheduler.fits(&limits);
        rig.kubelet.create(pod(uid, &[("main", &borrowed)]));
        let allocated = rig.kubelet.admit(uid).await;
        match &allocated {
            Ok(_) => scheduler.bound.push(limits),
            // No DCU fits it, so the hint offers none and the kubelet picks a token: the
            // ledger refuses it on the first DCU for its VRAM, on the second for its compute.
            Err(e) => assert!(
                [
                    "accelerator 0 (GPU-7137d9b2a08a4841) has 0 units left; the slice needs 160000",
                    "accelerator 1 (GPU-7137d9debec858c1) has 100 of its 100 cores percent taken; the slice needs 10",
                ]
                .iter()
                .any(|refusal| e.message().ends_with(refusal)),
                "{uid}: {}",
                e.message()
            ),
        }
        assert_eq!(
            admits,
            allocated.is_ok(),
            "{uid} ({memory} % VRAM, {cores} % cores): the scheduler {} it, Allocate {}",
            if admits { "places" } else { "keeps it off" },
            if allocated.is_ok() {
                "grants"
            } else {
                "refuses"
            }
        );
    }
    assert!(
        !rig.pods_dir()
            .join("c/c-main/etc/vdev/docker/vdev0.conf")
            .exists(),
        "no record written for the refused slice"
    );
}

/// Where capacity and placement used to disagree (issue 44 item 3): the node-wide cores capacity
/// (200) places a second slice of 50 % cores beside one of 100 %, and the second DCU has every CU
/// free. Slices pack onto the most-used DCU that fits, and the ledger counts a Hygon DCU's cores
/// percent (`Policy::cores_overcommit` is false, from the manufacturers table): the first DCU has
/// no compute left, so the hint points the kubelet at the second, and Allocate grants it there.
#[tokio::test]
async fn a_slice_the_cores_capacity_admits_goes_where_its_compute_fits() {
    let rig = Rig::new(ALL_NODES).await;
    let mut scheduler = Scheduler::new();
    for (uid, memory, cores) in [("a", 50, 100), ("b", 25, 50)] {
        let limits = slice_of(memory, cores);
        let borrowed: Vec<(&str, &str)> = limits
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert!(
            scheduler.fits(&limits),
            "{uid}: the node's capacity places it"
        );
        rig.kubelet.create(pod(uid, &[("main", &borrowed)]));
        let allocated = rig.kubelet.admit(uid).await;
        assert!(
            allocated.is_ok(),
            "{uid}: {:?}",
            allocated.err().map(|e| e.message().to_string())
        );
        scheduler.bound.push(limits);
    }
    assert!(rig.vdev_conf("b").starts_with("PciBusId: 0000:0c:00.0"));
}
