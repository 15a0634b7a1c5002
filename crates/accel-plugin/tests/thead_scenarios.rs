//! T-Head over real unix sockets: the plugin with accel-thead's responder against the kubelet
//! emulator. Exclusive, shared and the visibility sidecar answer with the two control nodes
//! plus each card's node and nothing else; a slice adds the HGGC budgets in card-ordinal order,
//! the shim mounts and a per-container ledger directory; a card whose node carries another
//! minor than the detection recorded is refused by name and its grant given back (spec §3).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, Source};
use accel_core::ledger::{Mode, Seat};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use accel_thead::responder::TheadResponder;
use tonic::Code;

const PPU: &str = "alibabacloud.com/ppu";
const SHARED: &str = "alibabacloud.com/ppu.shared";
const SLICED: &str = "alibabacloud.com/ppu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/thead.visibility";
const LIB: &str = "/var/lib/gpustack/operator/lib";

/// The first two cards of the measured 16-PPU host: ordinal 0 at a8 (minor 1), ordinal 1 at
/// a7 (minor 2).
fn accelerators() -> Vec<Accelerator> {
    let cards = [
        (
            "GPU-019e2226-4211-0208-0000-000000ab261d",
            "0000:a8:00.0",
            1,
        ),
        (
            "GPU-019e2226-84c1-0200-0000-0000c020e701",
            "0000:a7:00.0",
            2,
        ),
    ];
    cards
        .iter()
        .enumerate()
        .map(|(i, (uuid, bus, minor))| {
            let mut a = Accelerator::new(i as u32, Source::Driver);
            a.uuid = Some(uuid.to_string());
            a.bus_id = Some(bus.parse::<BusId>().unwrap());
            a.product = Some("PPU-ZW810E".into());
            a.memory_mib = Some(98_304);
            a.minor_number = Some(*minor);
            a
        })
        .collect()
}

/// The host's device nodes as recording markers (`c MAJOR:MINOR`).
const NODES: &[(&str, &str)] = &[
    ("/dev/alixpu", "c 509:0"),
    ("/dev/alixpu_ctl", "c 508:0"),
    ("/dev/alixpu_ppu0", "c 509:1"),
    ("/dev/alixpu_ppu1", "c 509:2"),
];

/// The files `<library-dir>/thead` holds once the init container staged it.
const STAGED: &[&str] = &[
    "ld.so.preload",
    "hggc_quota.so",
    "hgml_dlsym_hook.so",
    "ppu-monitor",
];

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
}

impl Rig {
    async fn new(nodes: &[(&str, &str)], staged: &[&str]) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host_root = dir.path().join("host");
        let write = |path: &str, text: &str| {
            let path = host_root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        for (node, number) in nodes {
            write(node, &format!("{number}\n"));
        }
        for file in staged {
            write(&format!("{LIB}/thead/{file}"), "staged\n");
        }
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let plugins = start_plugins(dir.path(), &kubelet).await;
        Rig {
            dir,
            kubelet,
            plugins,
        }
    }
}

async fn start_plugins(dir: &std::path::Path, kubelet: &Kubelet) -> DevicePlugins {
    let accelerators = accelerators();
    let seats: Vec<Seat> = accelerators
        .iter()
        .map(|a| Seat::from_accelerator(a, 128))
        .collect();
    let responder = Arc::new(TheadResponder::from_setup(ResponderSetup {
        scratch: None,
        strategy: InjectionStrategy::Envvar,
        runtime_major: Some(0),
        pod_dir_root: dir.join("data/pods"),
        preload_dir: dir.join("data/preload"),
        library_dir: LIB.into(),
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
        offer: Offer::of(Manufacturer::Thead),
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

fn nodes(cards: &[u32]) -> Vec<String> {
    let mut out = vec![
        "/dev/alixpu=/dev/alixpu:rw".to_string(),
        "/dev/alixpu_ctl=/dev/alixpu_ctl:rw".to_string(),
    ];
    out.extend(
        cards
            .iter()
            .map(|c| format!("/dev/alixpu_ppu{c}=/dev/alixpu_ppu{c}:rw")),
    );
    out
}

#[tokio::test]
async fn exclusive_injects_the_control_nodes_and_each_cards_node_only() {
    let rig = Rig::new(NODES, &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(PPU, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", PPU), nodes(&[0, 1]));
    assert!(envs(&admission, "main", PPU).is_empty(), "no env");
    assert!(mounts(&admission, "main", PPU).is_empty(), "no mounts");
    assert!(admission["main"][PPU].annotations.is_empty());
}

#[tokio::test]
async fn shared_answers_as_exclusive_does() {
    let rig = Rig::new(NODES, &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(SHARED, "1")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "main", SHARED), nodes(&[0]));
    assert!(envs(&admission, "main", SHARED).is_empty());
    assert!(mounts(&admission, "main", SHARED).is_empty());
}

#[tokio::test]
async fn the_sidecar_gets_the_owners_nodes_and_no_slicing() {
    let rig = Rig::new(NODES, STAGED).await;
    let main: &[(&str, &str)] = &[
        (SLICED, "1"),
        ("alibabacloud.com/ppu.sliced.memory-percentage", "50"),
    ];
    rig.kubelet
        .create(pod("a", &[("main", main), ("sshd", &[(VISIBILITY, "1")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&admission, "sshd", VISIBILITY), nodes(&[0]));
    assert!(envs(&admission, "sshd", VISIBILITY).is_empty());
    assert!(mounts(&admission, "sshd", VISIBILITY).is_empty());
    assert_eq!(rig.plugins.ledger().grants().len(), 1);
}

#[tokio::test]
async fn a_slice_carries_the_hggc_budgets_the_shims_and_its_own_ledger_directory() {
    let rig = Rig::new(NODES, STAGED).await;
    let slice: &[(&str, &str)] = &[
        (SLICED, "1"),
        ("alibabacloud.com/ppu.sliced.memory-percentage", "25"),
    ];
    rig.kubelet.create(pod("a", &[("main", slice)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(devices(&a, "main", SLICED), nodes(&[0]));
    assert_eq!(
        envs(&a, "main", SLICED),
        BTreeMap::from([
            // Emitted at 100 too: the shim refuses a card without it.
            ("HGGC_DEVICE_SM_LIMIT".to_string(), "100".to_string()),
            // 25% of 98304 MiB, bare MiB.
            ("HGGC_DEVICE_MEMORY_LIMIT_0".into(), "24576".into()),
            ("HGGC_LEDGER_PATH".into(), "/var/run/vppu/ledger".into()),
            ("LIBHGGC_LOG_LEVEL".into(), "1".into()),
        ])
    );
    let run_dir = rig.dir.path().join("data/pods/a/c-main/run/vppu");
    let lib = format!("{LIB}/thead");
    assert_eq!(
        mounts(&a, "main", SLICED),
        vec![
            (
                "/etc/ld.so.preload".to_string(),
                format!("{lib}/ld.so.preload"),
                true
            ),
            (
                "/usr/local/vppu/hgml_dlsym_hook.so".into(),
                format!("{lib}/hgml_dlsym_hook.so"),
                true
            ),
            (
                "/usr/local/vppu/hggc_quota.so".into(),
                format!("{lib}/hggc_quota.so"),
                true
            ),
            (
                "/usr/local/vppu/ppu-monitor".into(),
                format!("{lib}/ppu-monitor"),
                true
            ),
            ("/var/run/vppu".into(), run_dir.display().to_string(), false),
        ]
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&run_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o777, "the ledger directory is world-writable");
}

#[tokio::test]
async fn the_containers_own_log_level_is_kept() {
    let rig = Rig::new(NODES, STAGED).await;
    let mut p = pod(
        "a",
        &[(
            "main",
            &[
                (SLICED, "1"),
                ("alibabacloud.com/ppu.sliced.memory-mib", "1024"),
                ("alibabacloud.com/ppu.sliced.cores-percentage", "30"),
            ],
        )],
    );
    p.containers[0]
        .env
        .insert("LIBHGGC_LOG_LEVEL".into(), "2".into());
    rig.kubelet.create(p);
    let a = rig.kubelet.admit("a").await.unwrap();
    let env = envs(&a, "main", SLICED);
    assert_eq!(env["HGGC_DEVICE_SM_LIMIT"], "30");
    // The budget travels as units (floor of 1024 MiB over the card's VRAM) and comes back as
    // the most MiB those units hold: exactly the 1024 asked.
    assert_eq!(env["HGGC_DEVICE_MEMORY_LIMIT_0"], "1024");
    assert!(!env.contains_key("LIBHGGC_LOG_LEVEL"), "{env:?}");
}

#[tokio::test]
async fn a_slice_without_the_staged_shims_is_refused_naming_the_file() {
    let rig = Rig::new(NODES, &STAGED[1..]).await;
    rig.kubelet.create(pod("a", &[("main", &[(SLICED, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().ends_with(&format!(
            "the slicing file \"{LIB}/thead/ld.so.preload\" is not staged on the host, so no slice can be served"
        )),
        "{}",
        err.message()
    );
    assert!(rig.plugins.ledger().grants().is_empty());
}

#[tokio::test]
async fn a_node_whose_minor_does_not_match_is_refused_by_name() {
    // ppu1's node carries the minor of the card after it (the vendor's `ppu[minor]` naming).
    let wrong: Vec<(&str, &str)> = NODES
        .iter()
        .map(|(n, m)| {
            if *n == "/dev/alixpu_ppu1" {
                (*n, "c 509:3")
            } else {
                (*n, *m)
            }
        })
        .collect();
    let rig = Rig::new(&wrong, &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(PPU, "2")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().ends_with(
            "card GPU-019e2226-84c1-0200-0000-0000c020e701: device node \"/dev/alixpu_ppu1\" carries minor 3, want 2: fail closed"
        ),
        "{}",
        err.message()
    );
    let ledger = rig.plugins.ledger();
    assert!(ledger.grants().is_empty(), "the grant is given back");
    assert_eq!(ledger.occupancy(1).unwrap().mode, Mode::Free);
    // The other card is still served on its own.
    rig.kubelet.create(pod("b", &[("main", &[(PPU, "1")])]));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert_eq!(devices(&b, "main", PPU), nodes(&[0]));
}

#[tokio::test]
async fn a_card_node_that_is_not_a_character_device_or_missing_refuses() {
    let plain: Vec<(&str, &str)> = NODES
        .iter()
        .map(|(n, m)| {
            if *n == "/dev/alixpu_ppu0" {
                (*n, "")
            } else {
                (*n, *m)
            }
        })
        .collect();
    let rig = Rig::new(&plain, &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(PPU, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert!(
        err.message()
            .ends_with("\"/dev/alixpu_ppu0\" is not a character device"),
        "{}",
        err.message()
    );
    let rig = Rig::new(&NODES[1..], &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(PPU, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert!(
        err.message()
            .ends_with("device node \"/dev/alixpu\": no such file or directory"),
        "{}",
        err.message()
    );
}
