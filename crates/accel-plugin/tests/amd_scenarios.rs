//! AMD over real unix sockets: the plugin with accel-amd's responder against the kubelet
//! emulator. Exclusive, shared, sliced and the visibility sidecar each answer with the exact
//! device nodes, environment and mounts seed 000 and spec/amd.md state; a missing render node
//! fails the allocation, naming it, and gives the grant back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_amd::responder::AmdResponder;
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, ComputeGeometry, DrmNodes, Source};
use accel_core::ledger::{Mode, Seat};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const GPU: &str = "amd.com/gpu";
const SHARED: &str = "amd.com/gpu.shared";
const SLICED: &str = "amd.com/gpu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/amd.visibility";

/// Two RX 7800 XT-like cards (60 CU, 3 shader engines, 16368 MiB) whose card and render minors
/// are unrelated: index 0 is card1/renderD128, index 1 card0/renderD129 (the spec's measured
/// host).
fn accelerators() -> Vec<Accelerator> {
    let cards = [
        ("GPU-5c88007d760374f3", "0000:04:00.0", 1, 128),
        ("GPU-d99e7fe92c7bdf75", "0000:07:00.0", 0, 129),
    ];
    cards
        .iter()
        .enumerate()
        .map(|(i, (uuid, bus, card, render))| {
            let mut a = Accelerator::new(i as u32, Source::Driver);
            a.uuid = Some(uuid.to_string());
            a.bus_id = Some(bus.parse::<BusId>().unwrap());
            a.product = Some("AMD Radeon RX 7800 XT".into());
            a.memory_mib = Some(16_368);
            a.compute_capability = Some("gfx1101".into());
            a.cores = Some(60);
            a.drm = Some(DrmNodes {
                card: Some(*card),
                render: Some(*render),
            });
            a.compute_geometry = Some(ComputeGeometry {
                compute_units: Some(60),
                shader_engines: Some(3),
                xccs: Some(1),
            });
            a
        })
        .collect()
}

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
    responder: Arc<AmdResponder>,
}

impl Rig {
    /// `nodes`: the device nodes the host has (under its root in the rig's folder).
    async fn new(nodes: &[&str]) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host_root = dir.path().join("host");
        for node in nodes {
            let path = host_root.join(node.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let (plugins, responder) = start_plugins(dir.path(), &kubelet).await;
        Rig {
            dir,
            kubelet,
            plugins,
            responder,
        }
    }

    /// The daemon restarted: its plugins stopped, `while_down` done to the cluster, then a
    /// fresh responder and plugins over the same folders (journal, Pod working directories) and
    /// the same kubelet.
    async fn restarted(self, while_down: impl FnOnce(&Kubelet)) -> Rig {
        let Rig {
            dir,
            kubelet,
            plugins,
            ..
        } = self;
        plugins.stop().await;
        while_down(&kubelet);
        let (plugins, responder) = start_plugins(dir.path(), &kubelet).await;
        Rig {
            dir,
            kubelet,
            plugins,
            responder,
        }
    }
}

async fn start_plugins(
    dir: &std::path::Path,
    kubelet: &Kubelet,
) -> (DevicePlugins, Arc<AmdResponder>) {
    let accelerators = accelerators();
    let seats: Vec<Seat> = accelerators
        .iter()
        .map(|a| Seat::from_accelerator(a, 128))
        .collect();
    let responder = Arc::new(AmdResponder::from_setup(ResponderSetup {
        scratch: None,
        strategy: InjectionStrategy::Envvar,
        runtime_major: Some(7),
        pod_dir_root: dir.join("data/pods"),
        preload_dir: dir.join("data/preload"),
        library_dir: "/var/lib/gpustack/operator/lib".into(),
        engine: std::sync::Arc::new(EngineFacts::default()),
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
        offer: Offer::of(Manufacturer::Amd),
        seats,
        responder: responder.clone(),
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
    (plugins, responder)
}

const ALL_NODES: &[&str] = &[
    "/dev/kfd",
    "/dev/dri/card0",
    "/dev/dri/card1",
    "/dev/dri/renderD128",
    "/dev/dri/renderD129",
];

fn pod(uid: &str, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    testing::pod(uid, 1, containers)
}

/// The response's device nodes as `host=container:permissions`.
fn devices(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect()
}

fn envs(admission: &Admission, container: &str, resource: &str) -> BTreeMap<String, String> {
    admission[container][resource]
        .envs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn mounts(admission: &Admission, container: &str, resource: &str) -> Vec<(String, String, bool)> {
    admission[container][resource]
        .mounts
        .iter()
        .map(|m| (m.container_path.clone(), m.host_path.clone(), m.read_only))
        .collect()
}

fn both_cards() -> Vec<String> {
    vec![
        "/dev/kfd=/dev/kfd:rw".into(),
        "/dev/dri/card1=/dev/dri/card1:rw".into(),
        "/dev/dri/renderD128=/dev/dri/renderD128:rw".into(),
        "/dev/dri/card0=/dev/dri/card0:rw".into(),
        "/dev/dri/renderD129=/dev/dri/renderD129:rw".into(),
    ]
}

fn only_none() -> BTreeMap<String, String> {
    BTreeMap::from([("AMD_VISIBLE_DEVICES".to_string(), "none".to_string())])
}

#[tokio::test]
async fn exclusive_injects_kfd_and_each_cards_pair_and_nothing_else() {
    let rig = Rig::new(ALL_NODES).await;
    rig.kubelet.create(pod("a", &[("main", &[(GPU, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", GPU), both_cards());
    assert_eq!(envs(&admission, "main", GPU), only_none());
    assert!(mounts(&admission, "main", GPU).is_empty());
    assert!(admission["main"][GPU].annotations.is_empty());
}

#[tokio::test]
async fn shared_answers_as_exclusive_does() {
    let rig = Rig::new(ALL_NODES).await;
    rig.kubelet.create(pod("a", &[("main", &[(SHARED, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", SHARED), both_cards());
    assert_eq!(envs(&admission, "main", SHARED), only_none());
    assert!(mounts(&admission, "main", SHARED).is_empty());
}

/// A slice of a quarter of the memory and of the compute units.
const QUARTER_SLICE: &[(&str, &str)] = &[
    (SLICED, "1"),
    ("amd.com/gpu.sliced.memory-percentage", "25"),
    ("amd.com/gpu.sliced.cores-percentage", "25"),
];

/// Pods `a` and `b`, each a [`QUARTER_SLICE`], admitted.
async fn two_quarter_slices(rig: &Rig) -> (Admission, Admission) {
    rig.kubelet.create(pod("a", &[("main", QUARTER_SLICE)]));
    rig.kubelet.create(pod("b", &[("main", QUARTER_SLICE)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    let b = rig.kubelet.admit("b").await.unwrap();
    (a, b)
}

#[tokio::test]
async fn a_slice_carries_the_shim_the_budgets_and_the_cu_window_in_step() {
    let rig = Rig::new(ALL_NODES).await;
    let (a, b) = two_quarter_slices(&rig).await;
    // Both slices pack onto accelerator 0 (card1/renderD128).
    let one_card = vec![
        "/dev/kfd=/dev/kfd:rw".to_string(),
        "/dev/dri/card1=/dev/dri/card1:rw".into(),
        "/dev/dri/renderD128=/dev/dri/renderD128:rw".into(),
    ];
    assert_eq!(devices(&a, "main", SLICED), one_card);
    let pods = rig.dir.path().join("data/pods");
    let expected = |mask: &str| {
        BTreeMap::from([
            ("AMD_VISIBLE_DEVICES".to_string(), "none".to_string()),
            ("ROCR_VISIBLE_DEVICES".into(), "GPU-5c88007d760374f3".into()),
            // 25% of 16368 MiB, bare MiB.
            ("VROCM_DEVICE_MEMORY_LIMIT_0".into(), "4092".into()),
            ("HSA_CU_MASK".into(), mask.into()),
            ("VROCM_LEDGER_PATH".into(), "/var/run/vrocm/ledger".into()),
            ("LIBVROCM_LOG_LEVEL".into(), "1".into()),
        ])
    };
    // 25% of 60 CU in 3-shader-engine atoms: 12 CUs; the second slice takes the next window.
    assert_eq!(envs(&a, "main", SLICED), expected("0:0-11"));
    assert_eq!(envs(&b, "main", SLICED), expected("0:12-23"));
    let lib = "/var/lib/gpustack/operator/lib/amd";
    let run_dir = pods.join("a/c-main/run/vrocm");
    assert_eq!(
        mounts(&a, "main", SLICED),
        vec![
            (
                "/etc/ld.so.preload".to_string(),
                rig.dir
                    .path()
                    .join("data/preload/amd/ld.so.preload")
                    .display()
                    .to_string(),
                true
            ),
            (
                "/usr/local/vrocm/libvrocm.so".into(),
                format!("{lib}/libvrocm.so"),
                true
            ),
            (
                "/usr/local/vrocm/rocm-monitor".into(),
                format!("{lib}/rocm-monitor"),
                true
            ),
            (
                "/usr/local/vrocm/rocm-cumask-check".into(),
                format!("{lib}/rocm-cumask-check"),
                true
            ),
            (
                "/var/run/vrocm".into(),
                run_dir.display().to_string(),
                false
            ),
        ]
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&run_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o777, "the ledger directory is world-writable");
    let preload = std::fs::read_to_string(rig.dir.path().join("data/preload/amd/ld.so.preload"));
    assert_eq!(preload.unwrap(), "/usr/local/vrocm/libvrocm.so\n");
    assert_eq!(
        rig.responder.windows_on("GPU-5c88007d760374f3"),
        [(0, 11), (12, 23)].into_iter().collect()
    );
    // A finished Pod gives its window back.
    rig.responder.reclaim("a");
    assert_eq!(
        rig.responder.windows_on("GPU-5c88007d760374f3"),
        [(12, 23)].into_iter().collect()
    );
}

#[tokio::test]
async fn a_restarted_daemon_places_new_windows_around_the_running_ones() {
    let rig = Rig::new(ALL_NODES).await;
    let (a, b) = two_quarter_slices(&rig).await;
    assert_eq!(envs(&a, "main", SLICED)["HSA_CU_MASK"], "0:0-11");
    assert_eq!(envs(&b, "main", SLICED)["HSA_CU_MASK"], "0:12-23");
    let kept = rig.dir.path().join("data/pods/b/c-main/cu-windows.json");
    assert!(
        kept.is_file(),
        "the window is kept beside the container's ledger directory"
    );

    // Pod a is deleted while the daemon is down.
    let rig = rig.restarted(|kubelet| kubelet.delete("a")).await;
    testing::wait_released(&rig.plugins, "a").await;
    assert_eq!(
        rig.responder.windows_on("GPU-5c88007d760374f3"),
        [(12, 23)].into_iter().collect(),
        "the running slice's window is known again, the gone Pod's is free"
    );
    rig.kubelet.create(pod("c", &[("main", QUARTER_SLICE)]));
    rig.kubelet.create(pod("d", &[("main", QUARTER_SLICE)]));
    let c = rig.kubelet.admit("c").await.unwrap();
    let d = rig.kubelet.admit("d").await.unwrap();
    // Both pack onto accelerator 0 beside b's 12-23: the freed 0-11, then 24-35; a restart
    // that forgot b's window would hand c 0-11 and d 12-23, over b.
    assert_eq!(envs(&c, "main", SLICED)["HSA_CU_MASK"], "0:0-11");
    assert_eq!(envs(&d, "main", SLICED)["HSA_CU_MASK"], "0:24-35");
    assert_eq!(
        rig.responder.windows_on("GPU-5c88007d760374f3"),
        [(0, 11), (12, 23), (24, 35)].into_iter().collect()
    );
}

#[tokio::test]
async fn a_slice_below_the_cards_smallest_is_refused_naming_it() {
    let rig = Rig::new(ALL_NODES).await;
    let slice: &[(&str, &str)] = &[
        (SLICED, "1"),
        ("amd.com/gpu.sliced.memory-mib", "1024"),
        ("amd.com/gpu.sliced.cores-percentage", "5"),
    ];
    rig.kubelet.create(pod("a", &[("main", slice)]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains(
            "derive the compute window of card GPU-5c88007d760374f3: cannot derive a CU mask for \"GPU-5c88007d760374f3\""
        ) && err.message().ends_with("its smallest slice is 9%"),
        "{}",
        err.message()
    );
    assert!(rig.plugins.ledger().grants().is_empty());
}

#[tokio::test]
async fn the_sidecar_gets_the_owners_nodes_and_no_slicing() {
    let rig = Rig::new(ALL_NODES).await;
    let main: &[(&str, &str)] = &[
        (SLICED, "1"),
        ("amd.com/gpu.sliced.memory-percentage", "50"),
    ];
    rig.kubelet
        .create(pod("a", &[("main", main), ("sshd", &[(VISIBILITY, "1")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        envs(&admission, "main", SLICED)["HSA_CU_MASK"],
        "0:0-59",
        "a whole-card mask is emitted at 100%"
    );
    assert_eq!(
        devices(&admission, "sshd", VISIBILITY),
        vec![
            "/dev/kfd=/dev/kfd:rw".to_string(),
            "/dev/dri/card1=/dev/dri/card1:rw".into(),
            "/dev/dri/renderD128=/dev/dri/renderD128:rw".into(),
        ]
    );
    assert_eq!(envs(&admission, "sshd", VISIBILITY), only_none());
    assert!(mounts(&admission, "sshd", VISIBILITY).is_empty());
    assert_eq!(rig.plugins.ledger().grants().len(), 1);
}

#[tokio::test]
async fn a_missing_render_node_fails_the_allocation_naming_it() {
    let without_render: Vec<&str> = ALL_NODES
        .iter()
        .copied()
        .filter(|n| *n != "/dev/dri/renderD129")
        .collect();
    let rig = Rig::new(&without_render).await;
    rig.kubelet.create(pod("a", &[("main", &[(GPU, "2")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().ends_with(
            "card GPU-d99e7fe92c7bdf75 has no device node \"/dev/dri/renderD129\" on the host"
        ),
        "{}",
        err.message()
    );
    let ledger = rig.plugins.ledger();
    assert!(ledger.grants().is_empty(), "the grant is given back");
    assert_eq!(ledger.occupancy(1).unwrap().mode, Mode::Free);
}

#[tokio::test]
async fn a_host_without_kfd_grants_nothing() {
    let rig = Rig::new(&ALL_NODES[1..]).await;
    rig.kubelet.create(pod("a", &[("main", &[(GPU, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert!(
        err.message().ends_with(
            "the host has no device node \"/dev/kfd\", so no accelerator can be granted"
        ),
        "{}",
        err.message()
    );
}
