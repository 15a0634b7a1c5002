//! MetaX sGPU slices over real unix sockets: the plugin with accel-metax's responder against the
//! kubelet emulator, on a copy of the recorded 8× C500 host whose driver is the recording's
//! ([`accel_metax::sgpu::RecordedSgpu`]: a write to `sgpu/create` makes `sgpu/sgpu<N>`). A
//! partial slice creates a subdevice and names it in `METAX_SGPUS` with `/dev/mxcd` and the
//! render node only; a whole-card slice makes none; a finished Pod's slice stays charged; a
//! deleted Pod's subdevice is destroyed after three reclaim passes — across a restart of the
//! plugins; a create the driver refuses leaves nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_core::ledger::units::METAX_SLICES_PER_ACCELERATOR;
use accel_host::{FsHost, HostWrites, RecordedCommands};
use accel_metax::detector::{self, DetectOptions};
use accel_metax::responder::MetaxResponder;
use accel_metax::sgpu::{self, RecordedSgpu};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const SLICED: &str = "metax-tech.com/gpu.sliced";
const HOST: &str = "metax-8x-c500";
/// The first card's PCI address as sysfs spells it.
const BDF: &str = "0000:0e:00.0";

struct Rig {
    dir: tempfile::TempDir,
    host: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: Option<DevicePlugins>,
}

fn accelerators(host: &Path) -> Vec<Accelerator> {
    let files = FsHost::new(host.join("root"));
    let commands = RecordedCommands::load(host).unwrap();
    detector::detect(&files, &commands, &DetectOptions::default())
        .unwrap()
        .accelerators
}

impl Rig {
    async fn new() -> Rig {
        let host = accel_testkit::copy_recorded(HOST);
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let mut rig = Rig {
            dir,
            host,
            kubelet,
            plugins: None,
        };
        rig.start().await;
        rig
    }

    async fn start(&mut self) {
        let accelerators = accelerators(self.host.path());
        assert_eq!(accelerators.len(), 8);
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, METAX_SLICES_PER_ACCELERATOR))
            .collect();
        let root = self.host.path().join("root");
        let writes: Arc<dyn HostWrites> = Arc::new(RecordedSgpu::new(&root));
        let responder = Arc::new(MetaxResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: None,
            pod_dir_root: self.dir.path().join("data/pods"),
            preload_dir: self.dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators,
            host: Some(Arc::new(FsHost::new(&root))),
            commands: None,
            runtime_class: None,
            writes: Some(writes),
        }));
        let config = Config {
            kubelet_dir: self.dir.path().join("kubelet"),
            data_dir: self.dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer::of(Manufacturer::Metax),
            seats,
            responder,
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: None,
        };
        let plugins = DevicePlugins::start(config, Arc::new(self.kubelet.pods().clone()))
            .await
            .unwrap();
        let resources = plugins.resources();
        assert!(resources.iter().any(|r| r == SLICED), "{resources:?}");
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        self.kubelet.wait_for(&names).await;
        self.plugins = Some(plugins);
    }

    async fn restart(&mut self) {
        if let Some(p) = self.plugins.take() {
            p.stop().await;
        }
        self.start().await;
    }

    fn plugins(&self) -> &DevicePlugins {
        self.plugins.as_ref().unwrap()
    }

    fn sgpu_dir(&self) -> PathBuf {
        self.host
            .path()
            .join("root/sys/bus/pci/devices")
            .join(BDF)
            .join("sgpu")
    }

    /// The card's subdevices, as the driver lists them.
    fn subdevices(&self) -> Vec<i32> {
        let files = FsHost::new(self.host.path().join("root"));
        sgpu::list(&files)
            .unwrap()
            .into_iter()
            .filter(|s| s.bdf == BDF)
            .map(|s| s.index)
            .collect()
    }

    fn marker(&self, uid: &str) -> PathBuf {
        self.dir
            .path()
            .join("data/pods")
            .join(uid)
            .join("c-main")
            .join(sgpu::MARKER_FILE)
    }
}

fn pod(uid: &str, resources: &[(&str, &str)]) -> Pod {
    testing::pod(uid, 1, &[("main", resources)])
}

fn slice(memory: &str, cores: Option<&str>) -> Vec<(&'static str, String)> {
    let mut r = vec![
        (SLICED, "1".to_string()),
        (
            "metax-tech.com/gpu.sliced.memory-percentage",
            memory.to_string(),
        ),
    ];
    if let Some(c) = cores {
        r.push(("metax-tech.com/gpu.sliced.cores-percentage", c.to_string()));
    }
    r
}

fn create(rig: &Rig, uid: &str, resources: &[(&'static str, String)]) {
    let r: Vec<(&str, &str)> = resources.iter().map(|(k, v)| (*k, v.as_str())).collect();
    rig.kubelet.create(pod(uid, &r));
}

fn envs(admission: &Admission) -> BTreeMap<String, String> {
    admission["main"][SLICED]
        .envs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn devices(admission: &Admission) -> Vec<String> {
    admission["main"][SLICED]
        .devices
        .iter()
        .map(|d| format!("{}:{}", d.host_path, d.permissions))
        .collect()
}

#[tokio::test]
async fn a_partial_slice_is_an_sgpu_subdevice_named_in_metax_sgpus() {
    let rig = Rig::new().await;
    create(&rig, "pod-uid-1", &slice("50", Some("60")));
    let a = rig.kubelet.admit("pod-uid-1").await.unwrap();
    // Half of the C500's 65536 MiB, on the first card.
    assert_eq!(
        envs(&a),
        BTreeMap::from([(
            "METAX_SGPUS".to_string(),
            format!("sgpu={BDF}#0;compute=60;vram=32768;alias=gpustack-pod-uid-1")
        )])
    );
    assert_eq!(devices(&a), ["/dev/mxcd:rw", "/dev/dri/renderD128:rw"]);
    assert_eq!(rig.subdevices(), [0]);
    let card = rig.sgpu_dir();
    assert_eq!(
        std::fs::read_to_string(card.join("../model")).unwrap(),
        "sgpu"
    );
    assert_eq!(
        std::fs::read_to_string(card.join("sched_class")).unwrap(),
        "1"
    );
    assert_eq!(
        std::fs::read_to_string(card.join("sgpu0/vram")).unwrap(),
        "32768"
    );
    let marker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rig.marker("pod-uid-1")).unwrap()).unwrap();
    assert_eq!(
        marker,
        serde_json::json!({"podUID": "pod-uid-1", "container": "main", "cardBDF": BDF,
            "index": 0, "coresPct": 60, "memMiB": 32768})
    );
    // No cores asked: the whole compute, still a partial slice.
    create(&rig, "pod-uid-2", &slice("50", None));
    let b = rig.kubelet.admit("pod-uid-2").await.unwrap();
    assert!(
        envs(&b)["METAX_SGPUS"].contains(";compute=100;vram=32768;alias=gpustack-pod-uid-2"),
        "{:?}",
        envs(&b)
    );
}

#[tokio::test]
async fn a_whole_card_slice_makes_no_subdevice_and_no_env() {
    let rig = Rig::new().await;
    create(&rig, "w", &slice("100", Some("100")));
    let a = rig.kubelet.admit("w").await.unwrap();
    assert!(envs(&a).is_empty(), "{:?}", envs(&a));
    assert!(rig.subdevices().is_empty());
    assert!(!rig.sgpu_dir().exists(), "the card is not put in sgpu mode");
    let marker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rig.marker("w")).unwrap()).unwrap();
    assert_eq!(marker["index"], -1);
}

#[tokio::test]
async fn a_finished_pods_slice_stays_charged_until_it_is_deleted_and_reclaimed() {
    let mut rig = Rig::new().await;
    create(&rig, "a", &slice("50", Some("60")));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.finish("a");
    rig.plugins().reconcile_pods();
    assert_eq!(
        rig.plugins().ledger().grants().len(),
        1,
        "a Succeeded Pod's slice is still charged: its subdevice is not destroyed yet"
    );
    assert_eq!(rig.subdevices(), [0]);
    // A restart in between: the marker and the subdevice are what the reclaimer reads.
    rig.restart().await;
    rig.kubelet.delete("a");
    // The watch's own reconcile of the deletion and this one: at most two passes.
    rig.plugins().reconcile_pods();
    assert!(
        rig.plugins().ledger().grants().is_empty(),
        "released once gone"
    );
    assert_eq!(rig.subdevices(), [0], "not before three passes");
    rig.plugins().reconcile_pods();
    rig.plugins().reconcile_pods();
    assert!(rig.subdevices().is_empty(), "three passes gone: destroyed");
    assert!(!rig.marker("a").exists(), "then its marker");
    assert!(
        !rig.dir.path().join("data/pods/a").exists(),
        "then its dirs"
    );
}

#[tokio::test]
async fn a_create_the_driver_refuses_fails_the_allocation_and_leaves_nothing() {
    let rig = Rig::new().await;
    create(&rig, "a", &slice("25", Some("30")));
    rig.kubelet.admit("a").await.unwrap();
    // The driver refuses the next create (the recording's `create` becomes a directory).
    std::fs::create_dir_all(rig.sgpu_dir().join("create")).unwrap();
    create(&rig, "b", &slice("25", Some("30")));
    let err = rig.kubelet.admit("b").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains(&format!(
            "reserve metax sgpu slice: card {BDF}: create sgpu subdevice 1: "
        )),
        "{}",
        err.message()
    );
    assert_eq!(rig.subdevices(), [0], "nothing half-made");
    assert!(!rig.marker("b").exists());
    assert_eq!(
        rig.plugins().ledger().grants().len(),
        1,
        "b's grant is given back"
    );
}

#[tokio::test]
async fn a_two_card_slice_is_refused_as_single_card() {
    let rig = Rig::new().await;
    create(
        &rig,
        "a",
        &[
            (SLICED, "2".to_string()),
            ("metax-tech.com/gpu.sliced.memory-percentage", "25".into()),
        ],
    );
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert!(
        err.message().contains(
            "sliced container \"main\" allocated 2 cards, but MetaX sgpu slicing is single-card"
        ),
        "{}",
        err.message()
    );
    assert!(rig.subdevices().is_empty());
}
