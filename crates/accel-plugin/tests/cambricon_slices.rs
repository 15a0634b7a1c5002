//! Cambricon sMLU slices over real unix sockets: the plugin with accel-cambricon's responder
//! against the kubelet emulator, on a copy of the recorded host `cambricon-8x-mlu370-smlu` whose
//! cnmon and driver listing are the recording's stateful replay
//! ([`accel_cambricon::smlu_replay`]: `cnmon smlu -c <n> -C <p>` makes an instance the listing
//! then shows, with its node under `root/dev/cambricon-caps/`). A slice reuses or makes a profile
//! and makes an instance, and its container gets the card's nodes, the instance node and
//! `VIRTUAL_DEVICES`; a card with the mode off is switched on first and stays on once its last
//! instance is gone; a finished Pod's slice stays charged and its instance kept; a deleted Pod's
//! instance (then the profile made for it) is destroyed after three reclaim passes, across a
//! restart that finds every live instance and its owner, and the 60 s ticker alone finishes a
//! reclaim; a hand-made instance is never touched; a driver without sMLU refuses in the spec's
//! words and gives the grant back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_cambricon::responder::CambriconResponder;
use accel_cambricon::smlu::{self, ForeignInstance, Survey};
use accel_cambricon::smlu_replay::{self, STATE_FILE, SmluState};
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_core::ledger::units::CAMBRICON_SLICES_PER_ACCELERATOR;
use accel_host::{Commands, FsHost, RecordedCommands};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const SLICED: &str = "cambricon.com/mlu.sliced";
const HOST: &str = "cambricon-8x-mlu370-smlu";

struct Rig {
    dir: tempfile::TempDir,
    host: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: Option<DevicePlugins>,
    responder: Option<Arc<CambriconResponder>>,
}

fn accelerators(host: &Path) -> Vec<Accelerator> {
    let files = FsHost::new(host.join("root"));
    let commands = RecordedCommands::load(host).unwrap();
    accel_cambricon::detector::detect(
        &files,
        &commands,
        &accel_cambricon::detector::DetectOptions::default(),
    )
    .unwrap()
    .accelerators
}

impl Rig {
    async fn new() -> Rig {
        Rig::with(|_| {}).await
    }

    /// The rig on a copy of the host whose sMLU state `edit` changed first.
    async fn with(edit: impl FnOnce(&mut SmluState)) -> Rig {
        let host = accel_testkit::copy_recorded(HOST);
        let mut state = SmluState::load(&host.path().join(STATE_FILE)).unwrap();
        edit(&mut state);
        state.save(&host.path().join(STATE_FILE)).unwrap();
        smlu_replay::render(&host.path().join("root"), &state).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let mut rig = Rig {
            dir,
            host,
            kubelet,
            plugins: None,
            responder: None,
        };
        rig.start().await;
        rig
    }

    async fn start(&mut self) {
        let accelerators = accelerators(self.host.path());
        assert_eq!(accelerators.len(), 8);
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, CAMBRICON_SLICES_PER_ACCELERATOR))
            .collect();
        let root = self.host.path().join("root");
        // The recording's cnmon, wrapped as `serve --host-root` wraps it.
        let commands: Arc<dyn Commands> = Arc::from(smlu_replay::wrap(
            self.host.path(),
            Box::new(RecordedCommands::load(self.host.path()).unwrap()),
        ));
        let responder = Arc::new(CambriconResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: None,
            pod_dir_root: self.dir.path().join("data/pods"),
            preload_dir: self.dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators,
            host: Some(Arc::new(FsHost::new(&root))),
            commands: Some(commands),
            runtime_class: None,
            writes: None,
        }));
        let config = Config {
            kubelet_dir: self.dir.path().join("kubelet"),
            data_dir: self.dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer::of(Manufacturer::Cambricon),
            seats,
            responder: responder.clone(),
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
        self.responder = Some(responder);
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

    fn survey(&self) -> Survey {
        self.responder
            .as_ref()
            .and_then(|r| r.smlu())
            .unwrap()
            .survey()
    }

    fn state(&self) -> SmluState {
        SmluState::load(&self.host.path().join(STATE_FILE)).unwrap()
    }

    /// `(card, instance, profile)` of every instance the driver holds.
    fn instances(&self) -> Vec<(u32, u32, u32)> {
        self.state()
            .instances
            .iter()
            .map(|i| (i.card, i.id, i.profile))
            .collect()
    }

    fn profiles_of(&self, card: u32) -> Vec<u32> {
        self.state()
            .profiles
            .iter()
            .filter(|p| p.card == card)
            .map(|p| p.id)
            .collect()
    }

    fn marker(&self, uid: &str) -> PathBuf {
        self.dir
            .path()
            .join("data/pods")
            .join(uid)
            .join("c-main")
            .join(smlu::MARKER_FILE)
    }
}

fn pod(uid: &str, resources: &[(&str, &str)]) -> Pod {
    testing::pod(uid, 1, &[("main", resources)])
}

fn create(rig: &Rig, uid: &str, memory: &str, cores: Option<&str>) {
    let mut r = vec![
        (SLICED, "1"),
        ("cambricon.com/mlu.sliced.memory-percentage", memory),
    ];
    if let Some(c) = cores {
        r.push(("cambricon.com/mlu.sliced.cores-percentage", c));
    }
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
        .map(|d| format!("{}:{}:{}", d.host_path, d.container_path, d.permissions))
        .collect()
}

const CARD0: &[&str] = &[
    "/dev/cambricon_dev0:/dev/cambricon_dev0:rw",
    "/dev/cambricon_ipcm0:/dev/cambricon_ipcm0:rw",
    "/dev/cambricon-caps/cap_dev0_mi1:/dev/cambricon-caps/cap_dev0_mi1:rw",
    "/dev/cambricon_ctl:/dev/cambricon_ctl:rw",
];

#[tokio::test]
async fn a_slice_is_an_smlu_instance_with_its_node_and_virtual_devices() {
    let rig = Rig::new().await;
    let advertised = rig.kubelet.devices(SLICED).len();
    assert_eq!(advertised, 8 * 16, "16 slices a card");
    // A quarter of the memory and of the compute: the driver's own quarter profile (2).
    create(&rig, "pod-a", "25", Some("25"));
    let a = rig.kubelet.admit("pod-a").await.unwrap();
    assert_eq!(devices(&a), CARD0);
    assert_eq!(
        envs(&a),
        BTreeMap::from([(
            "VIRTUAL_DEVICES".to_string(),
            "/dev/cambricon-caps/cap_dev0_mi1".to_string()
        )])
    );
    assert!(a["main"][SLICED].mounts.is_empty() && a["main"][SLICED].annotations.is_empty());
    assert_eq!(rig.instances(), [(7, 1, 2), (0, 1, 2)]);
    let marker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rig.marker("pod-a")).unwrap()).unwrap();
    assert_eq!(
        marker,
        serde_json::json!({"podUID": "pod-a", "container": "main", "card": "0000:4f:00.0",
            "instance": "cap_dev0_mi1", "profileID": 2, "coresPct": 25, "memMiB": 5827,
            "instanceID": 1, "profileMade": false})
    );
    // Other quotas: a profile is made for them (asked on cnmon's stdin), packed on card 0.
    create(&rig, "pod-b", "10", Some("10"));
    let b = rig.kubelet.admit("pod-b").await.unwrap();
    assert_eq!(
        envs(&b)["VIRTUAL_DEVICES"],
        "/dev/cambricon-caps/cap_dev0_mi2"
    );
    let made = rig
        .state()
        .profiles
        .into_iter()
        .find(|p| p.card == 0 && p.id == 3)
        .unwrap();
    assert_eq!((made.quota, made.memory_mib), (10, 2330));
    // No cores asked: the whole compute, which card 0 no longer has (compute is a hard
    // partition): the next card.
    create(&rig, "pod-c", "10", None);
    let c = rig.kubelet.admit("pod-c").await.unwrap();
    assert_eq!(
        envs(&c)["VIRTUAL_DEVICES"],
        "/dev/cambricon-caps/cap_dev1_mi1"
    );
    let writes = rig.state().writes;
    assert_eq!(
        writes, 5,
        "instance; profile, instance; profile, instance: the mode was on"
    );
}

#[tokio::test]
async fn a_card_whose_mode_is_off_is_switched_on_first_and_stays_on() {
    let rig = Rig::with(|s| s.cards[0].enabled = false).await;
    create(&rig, "a", "50", Some("50"));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        envs(&a)["VIRTUAL_DEVICES"],
        "/dev/cambricon-caps/cap_dev0_mi1"
    );
    assert!(rig.state().cards[0].enabled);
    assert_eq!(rig.state().writes, 2, "the mode, then the instance");
    // The Pod gone and its instance reclaimed, the card's last one: the mode is not turned
    // back off (spec §4.4 step 2: an administrator clears it with cnmon).
    rig.kubelet.delete("a");
    testing::wait_released(rig.plugins(), "a").await;
    rig.plugins().reconcile_pods();
    rig.plugins().reconcile_pods();
    assert_eq!(rig.instances(), [(7, 1, 2)], "a's instance destroyed");
    assert!(rig.state().cards[0].enabled, "still on");
    assert_eq!(
        rig.state().writes,
        3,
        "the instance's destruction only: no mode write, and the driver's profile 1 stays"
    );
}

/// Spec §4.6: besides every Pod change, a 60 s ticker runs the reclaim pass, so a deleted
/// Pod's instance goes though nothing changes after its deletion. The clock is paused once
/// the deletion's own pass has run; each tick is then an explicit minute.
#[tokio::test]
async fn the_60_s_ticker_alone_finishes_a_reclaim() {
    use accel_backend::respond::Responder;
    let rig = Rig::new().await;
    let responder = rig.responder.clone().unwrap();
    assert_eq!(responder.reclaim_interval(), Some(Duration::from_secs(60)));
    create(&rig, "a", "10", Some("30"));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.delete("a");
    // The watch's reconcile of the deletion released the grant and ran the first pass.
    testing::wait_released(rig.plugins(), "a").await;
    tokio::time::pause();
    let mut ticks = 0;
    while rig.instances().contains(&(0, 1, 3)) {
        assert!(
            ticks < 2,
            "two ticks of the ticker did not reclaim a's instance"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        // The pass runs on a blocking thread, and the paused clock stands still while it runs:
        // a sleep ends only after it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        ticks += 1;
    }
    assert_eq!(ticks, 2, "passes two and three were the ticker's");
    assert_eq!(rig.instances(), [(7, 1, 2)]);
    assert_eq!(
        rig.profiles_of(0),
        [0, 1, 2],
        "then the profile made for it"
    );
}

#[tokio::test]
async fn a_deleted_pods_instance_is_reclaimed_after_three_passes_across_a_restart() {
    let mut rig = Rig::new().await;
    create(&rig, "a", "10", Some("30"));
    rig.kubelet.admit("a").await.unwrap();
    assert_eq!(rig.profiles_of(0), [0, 1, 2, 3], "a profile made for a");
    rig.kubelet.finish("a");
    for _ in 0..4 {
        rig.plugins().reconcile_pods();
    }
    assert_eq!(
        rig.plugins().ledger().grants().len(),
        1,
        "a Succeeded Pod's slice is still charged: its instance is not destroyed yet"
    );
    assert!(
        rig.instances().contains(&(0, 1, 3)),
        "four passes, and a finished Pod that still exists keeps its instance"
    );
    // A restart: the marker and the driver's listing are what it reads.
    rig.restart().await;
    assert_eq!(
        rig.plugins().ledger().grants().len(),
        1,
        "the restarted ledger still charges the slice"
    );
    let survey = rig.survey();
    assert_eq!(
        survey.owned,
        [(
            "0000:4f:00.0".to_string(),
            "cap_dev0_mi1".to_string(),
            "a".to_string()
        )]
    );
    assert_eq!(
        survey.foreign,
        [ForeignInstance {
            card: "0000:d3:00.0".to_string(),
            instance: "cap_dev7_mi1".to_string(),
            destroy: "cnmon smlu -c 7 -D 1".to_string(),
        }]
    );
    rig.kubelet.delete("a");
    rig.plugins().reconcile_pods();
    assert!(
        rig.plugins().ledger().grants().is_empty(),
        "released once gone"
    );
    assert!(
        rig.instances().contains(&(0, 1, 3)),
        "not before three passes"
    );
    rig.plugins().reconcile_pods();
    rig.plugins().reconcile_pods();
    assert_eq!(
        rig.instances(),
        [(7, 1, 2)],
        "three passes gone: destroyed; the hand-made one stays"
    );
    assert_eq!(
        rig.profiles_of(0),
        [0, 1, 2],
        "then the profile made for it"
    );
    assert!(!rig.marker("a").exists(), "then its marker");
    assert!(
        !rig.dir.path().join("data/pods/a").exists(),
        "then its dirs"
    );
    assert!(
        !rig.host
            .path()
            .join("root/dev/cambricon-caps/cap_dev0_mi1")
            .exists()
    );
}

#[tokio::test]
async fn a_driver_without_smlu_refuses_in_the_specs_words_and_gives_the_grant_back() {
    let rig = Rig::with(|s| s.cards[0].enabled = false).await;
    std::fs::remove_file(
        rig.host
            .path()
            .join("root/proc/driver/cambricon/mlus/0000:4f:00.0/smlu"),
    )
    .unwrap();
    create(&rig, "a", "25", Some("25"));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains(
            "reserve cambricon smlu instance: card 0000:4f:00.0 (device index 0) cannot be sliced: the driver lists no sMLU state for it"
        ) && err
            .message()
            .contains("`cnmon set -c 0 -S 1` turns its mode on"),
        "{}",
        err.message()
    );
    assert!(rig.plugins().ledger().grants().is_empty(), "given back");
    assert_eq!(rig.instances(), [(7, 1, 2)], "nothing made");
    assert_eq!(rig.state().writes, 0);
}

#[tokio::test]
async fn a_two_card_slice_is_refused_as_single_card() {
    let rig = Rig::new().await;
    rig.kubelet.create(pod(
        "a",
        &[
            (SLICED, "2"),
            ("cambricon.com/mlu.sliced.memory-percentage", "25"),
        ],
    ));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert!(
        err.message().contains(
            "sliced container \"main\" allocated 2 cards, but Cambricon sMLU slicing is single-card"
        ),
        "{}",
        err.message()
    );
    assert_eq!(rig.instances(), [(7, 1, 2)]);
}
