//! Cambricon's and MetaX's whole cards over real unix sockets: the plugin with accel-cambricon's
//! and accel-metax's responders against the kubelet emulator, on copies of the recorded hosts
//! `cambricon-8x-mlu370-cnmon-v5` and `metax-8x-c500`, each detected by its own detector. Both
//! hand the device nodes themselves (host path = container path, `rw`), so exclusive, shared and
//! the visibility sidecar answer with exactly the nodes the spec lists (§4.2 of each): Cambricon
//! per card `/dev/cambricon_dev<idx>` and the optional per-card nodes the host has, then
//! `/dev/cambricon_ctl`, with `CAMBRICON_VISIBLE_DEVICES` naming the cnDev indexes; MetaX the
//! three control nodes, then per card its DRM card and render nodes, and no variable at all.
//! A missing `/dev/cambricon_dev<idx>` refuses the grant in the spec's words and gives it back;
//! a missing MetaX node is logged and left out, and the grant succeeds.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy, Responder, ResponderSetup};
use accel_cambricon::responder::CambriconResponder;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_host::{FsHost, RecordedCommands};
use accel_metax::responder::MetaxResponder;
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const MLU: &str = "cambricon.com/mlu";
const MLU_SHARED: &str = "cambricon.com/mlu.shared";
const MLU_VISIBILITY: &str = "device.gpustack.ai/cambricon.visibility";
const MX: &str = "metax-tech.com/gpu";
const MX_SHARED: &str = "metax-tech.com/gpu.shared";
const MX_VISIBILITY: &str = "device.gpustack.ai/metax.visibility";

/// The recorded host of a manufacturer.
fn host_of(m: Manufacturer) -> &'static str {
    match m {
        Manufacturer::Cambricon => "cambricon-8x-mlu370-cnmon-v5",
        _ => "metax-8x-c500",
    }
}

/// The recorded host's cards, as the manufacturer's detector reads them.
fn accelerators(m: Manufacturer, host: &Path) -> Vec<Accelerator> {
    let files = FsHost::new(host.join("root"));
    let commands = RecordedCommands::load(host).unwrap();
    let detection = match m {
        Manufacturer::Cambricon => accel_cambricon::detector::detect(
            &files,
            &commands,
            &accel_cambricon::detector::DetectOptions::default(),
        ),
        _ => accel_metax::detector::detect(
            &files,
            &commands,
            &accel_metax::detector::DetectOptions::default(),
        ),
    };
    detection.unwrap().accelerators
}

struct Rig {
    host: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
    accelerators: Vec<Accelerator>,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// The whole-card families of `m` on a copy of its recorded host, the responder checking
    /// the nodes on that copy.
    async fn new(m: Manufacturer) -> Rig {
        let host = accel_testkit::copy_recorded(host_of(m));
        let dir = tempfile::tempdir().unwrap();
        let accelerators = accelerators(m, host.path());
        assert_eq!(accelerators.len(), 8, "{}", host_of(m));
        let setup = ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: None,
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators: accelerators.clone(),
            host: Some(Arc::new(FsHost::new(host.path().join("root")))),
            commands: None,
            runtime_class: None,
            writes: None,
        };
        let responder: Arc<dyn Responder> = match m {
            Manufacturer::Cambricon => Arc::new(CambriconResponder::from_setup(setup)),
            _ => Arc::new(MetaxResponder::from_setup(setup)),
        };
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                sliced: false,
                partitioned: false,
                partition_kind: None,
                ..Offer::of(m)
            },
            seats: accelerators
                .iter()
                .map(|a| Seat::from_accelerator(a, 0))
                .collect(),
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
        Rig {
            host,
            kubelet,
            plugins,
            accelerators,
            _dir: dir,
        }
    }

    /// Takes a device node away from the host after detection (a driver reloaded, a card gone).
    fn remove_node(&self, path: &str) {
        std::fs::remove_file(self.host.path().join("root").join(&path[1..])).unwrap();
    }

    /// The detected card of compact index `index`.
    fn card(&self, index: u32) -> &Accelerator {
        self.accelerators.iter().find(|a| a.index == index).unwrap()
    }
}

fn pod(uid: &str, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    testing::pod(uid, 1, containers)
}

fn envs(admission: &Admission, container: &str, resource: &str) -> BTreeMap<String, String> {
    admission[container][resource]
        .envs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Every device node of the answer as `host path -> container path (permissions)`, in order.
fn devices(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .devices
        .iter()
        .map(|d| {
            format!(
                "{} -> {} ({})",
                d.host_path, d.container_path, d.permissions
            )
        })
        .collect()
}

/// `path -> path (rw)` for each node: what both responders hand out.
fn rw(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| format!("{p} -> {p} (rw)")).collect()
}

fn assert_no_mounts_or_annotations(admission: &Admission, container: &str, resource: &str) {
    let answer = &admission[container][resource];
    assert!(answer.mounts.is_empty(), "{resource}: {:?}", answer.mounts);
    assert!(
        answer.annotations.is_empty(),
        "{resource}: {:?}",
        answer.annotations
    );
}

fn only(variable: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(variable.to_string(), value.to_string())])
}

/// The recorded host's nodes of Cambricon cards with cnDev indexes `indexes`: per card its card
/// node and the optional ones the host has (`cmsg_ctrl<N>`, `cambricon_ipcm<N>`; no msgq, rpc
/// or commu nodes there), then the control node once (the host has no `cambricon_gdr`).
fn cambricon_nodes(indexes: &[u32]) -> Vec<String> {
    let mut paths: Vec<String> = indexes
        .iter()
        .flat_map(|i| {
            [
                format!("/dev/cambricon_dev{i}"),
                format!("/dev/cmsg_ctrl{i}"),
                format!("/dev/cambricon_ipcm{i}"),
            ]
        })
        .collect();
    paths.push("/dev/cambricon_ctl".into());
    rw(&paths.iter().map(String::as_str).collect::<Vec<_>>())
}

const CAMBRICON_VISIBLE: &str = "CAMBRICON_VISIBLE_DEVICES";

#[tokio::test]
async fn cambricon_exclusive_and_its_sidecar_get_each_cards_nodes_and_the_cndev_indexes() {
    let rig = Rig::new(Manufacturer::Cambricon).await;
    // The detection's cnDev indexes are the ones the nodes are named by.
    let indexes: Vec<Option<u32>> = rig.accelerators.iter().map(|a| a.minor_number).collect();
    assert_eq!(indexes, (0..8).map(Some).collect::<Vec<_>>());
    rig.kubelet.create(pod(
        "a",
        &[("main", &[(MLU, "2")]), ("sshd", &[(MLU_VISIBILITY, "1")])],
    ));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(envs(&a, "main", MLU), only(CAMBRICON_VISIBLE, "0,1"));
    assert_eq!(devices(&a, "main", MLU), cambricon_nodes(&[0, 1]));
    assert_no_mounts_or_annotations(&a, "main", MLU);
    // The SSH sidecar sees the owner's cards, answered alike, and is charged nothing.
    assert_eq!(
        envs(&a, "sshd", MLU_VISIBILITY),
        only(CAMBRICON_VISIBLE, "0,1")
    );
    assert_eq!(
        devices(&a, "sshd", MLU_VISIBILITY),
        cambricon_nodes(&[0, 1])
    );
    assert_no_mounts_or_annotations(&a, "sshd", MLU_VISIBILITY);
    assert_eq!(
        rig.plugins.ledger().grants().len(),
        1,
        "the main container's grant alone"
    );
}

#[tokio::test]
async fn cambricon_shared_names_distinct_cards_as_exclusive_does() {
    let rig = Rig::new(Manufacturer::Cambricon).await;
    // Two cards held whole first, so the shared grant lands on the next two.
    rig.kubelet.create(pod("a", &[("main", &[(MLU, "2")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet
        .create(pod("b", &[("main", &[(MLU_SHARED, "2")])]));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert_eq!(envs(&b, "main", MLU_SHARED), only(CAMBRICON_VISIBLE, "2,3"));
    assert_eq!(devices(&b, "main", MLU_SHARED), cambricon_nodes(&[2, 3]));
    assert_no_mounts_or_annotations(&b, "main", MLU_SHARED);
}

#[tokio::test]
async fn cambricon_without_a_cards_node_refuses_in_the_specs_words_and_gives_the_grant_back() {
    let rig = Rig::new(Manufacturer::Cambricon).await;
    // The second card of a two-card grant: every card's node is required, not the first's alone.
    rig.remove_node("/dev/cambricon_dev1");
    rig.kubelet.create(pod("a", &[("main", &[(MLU, "2")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let id = rig.card(1).uuid.clone().unwrap();
    assert!(id.starts_with("MLU-"), "{id}");
    let expected = format!(
        "accelerator {id:?} of card \"0000:53:00.0\" has no device node \"/dev/cambricon_dev1\""
    );
    assert!(
        err.message().ends_with(&expected),
        "{}\nexpected it to end with {expected}",
        err.message()
    );
    assert!(
        rig.plugins.ledger().grants().is_empty(),
        "the grant is given back"
    );
    // An optional node missing changes the answer only: card 0 alone is served without it.
    rig.remove_node("/dev/cmsg_ctrl0");
    rig.kubelet.create(pod("b", &[("main", &[(MLU, "1")])]));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert_eq!(envs(&b, "main", MLU), only(CAMBRICON_VISIBLE, "0"));
    assert_eq!(
        devices(&b, "main", MLU),
        rw(&[
            "/dev/cambricon_dev0",
            "/dev/cambricon_ipcm0",
            "/dev/cambricon_ctl"
        ])
    );
}

/// The recorded MetaX host's nodes for GPUs `indexes`: the three control nodes, then per GPU i
/// `card<i+1>` and `renderD<128+i>`, as the driver's listing names them.
fn metax_nodes(indexes: &[u32]) -> Vec<String> {
    let mut paths: Vec<String> = ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd"]
        .map(String::from)
        .to_vec();
    for i in indexes {
        paths.push(format!("/dev/dri/card{}", i + 1));
        paths.push(format!("/dev/dri/renderD{}", 128 + i));
    }
    rw(&paths.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test]
async fn metax_exclusive_and_its_sidecar_get_the_control_and_drm_nodes_and_no_variable() {
    let rig = Rig::new(Manufacturer::Metax).await;
    rig.kubelet.create(pod(
        "a",
        &[("main", &[(MX, "2")]), ("sshd", &[(MX_VISIBILITY, "1")])],
    ));
    let a = rig.kubelet.admit("a").await.unwrap();
    for (container, resource) in [("main", MX), ("sshd", MX_VISIBILITY)] {
        assert!(
            envs(&a, container, resource).is_empty(),
            "{resource}: no variable at all"
        );
        assert_eq!(devices(&a, container, resource), metax_nodes(&[0, 1]));
        assert_no_mounts_or_annotations(&a, container, resource);
    }
    assert_eq!(
        rig.plugins.ledger().grants().len(),
        1,
        "the sidecar is charged nothing"
    );
}

#[tokio::test]
async fn metax_shared_names_distinct_cards_as_exclusive_does() {
    let rig = Rig::new(Manufacturer::Metax).await;
    rig.kubelet.create(pod("a", &[("main", &[(MX, "2")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet
        .create(pod("b", &[("main", &[(MX_SHARED, "2")])]));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert!(envs(&b, "main", MX_SHARED).is_empty());
    assert_eq!(devices(&b, "main", MX_SHARED), metax_nodes(&[2, 3]));
    assert_no_mounts_or_annotations(&b, "main", MX_SHARED);
}

/// What the plugin logs at warn and above while the guard lives (this thread's subscriber: the
/// test runtime and every task the plugin spawns on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[tokio::test]
async fn metax_nodes_missing_on_the_host_are_logged_and_left_out_and_the_grant_succeeds() {
    let rig = Rig::new(Manufacturer::Metax).await;
    rig.remove_node("/dev/mxgd");
    rig.remove_node("/dev/dri/renderD128");
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    rig.kubelet.create(pod("a", &[("main", &[(MX, "1")])]));
    let a = rig.kubelet.admit("a").await.unwrap();
    drop(guard);
    assert_eq!(
        devices(&a, "main", MX),
        rw(&["/dev/mxcd", "/dev/mxnd", "/dev/dri/card1"])
    );
    assert!(envs(&a, "main", MX).is_empty());
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(
        text.contains(
            "the host exposes no control device node, so the container will not receive it"
        ) && text.contains("/dev/mxgd"),
        "{text}"
    );
    assert!(
        text.contains("the host has no device node an allocated card names, so the container will not receive it")
            && text.contains("/dev/dri/renderD128"),
        "{text}"
    );
    assert_eq!(rig.plugins.ledger().grants().len(), 1, "the grant stands");
}
