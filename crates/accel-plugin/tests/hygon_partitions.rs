//! Hygon partitions through the kubelet emulator over real unix sockets, on a copy of the
//! recorded BW host in node-wide MIG mode (`hygon-8x-bw150-mig`) whose MIG state follows the
//! `hy-smi mig` commands and whose driver registry (`/etc/dmi_mig_config`) follows the state: a
//! `2g.15gb` partition is made at the lowest free placement (GI, then CI) and answered with the
//! control nodes, its card's DRM nodes, the driver's user space, its registry file mounted
//! read-only at its own host path and `DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>` (spec §6.3); its
//! ownership record is Hygon's per-card marker (spec §6.4); a restart rebinds it; its Pod's
//! deletion reclaims it (CI, then GI), leaving an instance the driver says is in use for a later
//! pass (spec §6.5).

use std::sync::Arc;
use std::time::Duration;

use accel_backend::Partitioner;
use accel_backend::mig_cli::replay::MigState;
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_host::{FsHost, RecordedCommands};
use accel_hygon::mig::HySmiPartitioner;
use accel_hygon::mig_replay::{self, STATE_FILE};
use accel_hygon::responder::HygonResponder;
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::{Offer, Orphans};
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins, Partitions};
use accel_testkit::copy_tree;

const PARTITIONED: &str = "hygon.com/dcu.partitioned";
const SMALL: &str = "hygon.com/dcu.partitioned.mig-2g.15gb";
const VISIBILITY: &str = "device.gpustack.ai/hygon.visibility";

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: Option<DevicePlugins>,
    config: Config,
    accelerators: Vec<Accelerator>,
}

impl Rig {
    async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        copy_tree(&accel_testkit::recorded_host("hygon-8x-bw150-mig"), &host).unwrap();
        let commands: Arc<dyn accel_host::Commands> = Arc::from(mig_replay::wrap(
            &host,
            Box::new(RecordedCommands::load(&host).unwrap()),
        ));
        let files: Arc<dyn accel_host::Host> = Arc::new(FsHost::new(host.join("root")));
        let section = accel_hygon::detector::detect(
            files.as_ref(),
            commands.as_ref(),
            accel_hygon::detector::DetectOptions::default(),
        )
        .unwrap();
        let accelerators = section.accelerators.clone();
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 128))
            .collect();
        let responder = Arc::new(HygonResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: Some(0),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators: accelerators.clone(),
            host: Some(files.clone()),
            commands: Some(commands.clone()),
            runtime_class: None,
            writes: None,
        }));
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let partitioner = HySmiPartitioner::default()
            .on_host(files)
            .expect("hy-smi's partitioner reads the registry on the node's files");
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                sliced: false,
                ..Offer::of(Manufacturer::Hygon)
            },
            seats,
            responder,
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: Some(Partitions {
                partitioner,
                commands,
                orphans: Orphans::default(),
            }),
        };
        let mut rig = Rig {
            dir,
            kubelet,
            plugins: None,
            config,
            accelerators,
        };
        rig.start_plugins().await;
        rig
    }

    async fn start_plugins(&mut self) {
        let pods = Arc::new(self.kubelet.pods().clone());
        let plugins = DevicePlugins::start(self.config.clone(), pods)
            .await
            .unwrap();
        self.kubelet.wait_for(&[PARTITIONED, VISIBILITY]).await;
        self.plugins = Some(plugins);
    }

    async fn restart_plugins(&mut self) {
        if let Some(p) = self.plugins.take() {
            p.stop().await;
        }
        self.start_plugins().await;
    }

    fn state(&self) -> MigState {
        MigState::load(&self.dir.path().join("host").join(STATE_FILE)).unwrap()
    }

    fn host(&self, path: &str) -> std::path::PathBuf {
        self.dir
            .path()
            .join("host/root")
            .join(path.trim_start_matches('/'))
    }

    fn marker(&self, uid: &str, card: &str) -> std::path::PathBuf {
        self.dir
            .path()
            .join(format!("data/pods/{uid}/c-main/hygon-mig-{card}.json"))
    }

    async fn wait_state(&self, what: &str, check: impl Fn(&MigState) -> bool) {
        let until = tokio::time::Instant::now() + Duration::from_secs(15);
        while !check(&self.state()) {
            assert!(
                tokio::time::Instant::now() < until,
                "{what}: {:?}",
                self.state()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn owner(uid: &str, sidecar: bool) -> Pod {
    let main: &[(&str, &str)] = &[(PARTITIONED, "1"), (SMALL, "1")];
    let sshd: &[(&str, &str)] = &[(VISIBILITY, "1")];
    if sidecar {
        testing::pod(uid, 1_700_000_000, &[("main", main), ("sshd", sshd)])
    } else {
        testing::pod(uid, 1_700_000_000, &[("main", main)])
    }
}

fn devices(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect()
}

fn mounts(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .mounts
        .iter()
        .map(|m| format!("{}={}:{}", m.host_path, m.container_path, m.read_only))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_made_injected_marked_rebound_after_a_restart_and_reclaimed() {
    let mut rig = Rig::new().await;
    // The spec's worked example: eight BW cards, four 2g.15gb each.
    assert_eq!(rig.kubelet.devices(PARTITIONED).len(), 32);
    assert!(
        rig.kubelet.devices("hygon.com/dcu").is_empty(),
        "a MIG node serves partitions only"
    );

    rig.kubelet.create(owner("a", true));
    let admission = rig.kubelet.admit("a").await.unwrap();
    let state = rig.state();
    assert_eq!(state.instances.len(), 1, "{state:?}");
    let made = &state.instances[0];
    assert_eq!(
        (
            made.profile.as_str(),
            made.profile_id,
            made.start,
            made.size
        ),
        ("2g.15gb", 3, 0, 1),
        "the driver's profile at the lowest free placement"
    );
    assert_eq!(made.compute_instances.len(), 1, "one CI covering the GI");
    let dev = made.gpu;
    let conf = format!(
        "/etc/dmi_mig_config/ci/dev{dev}gi{}ci{}.conf",
        made.gpu_instance, made.compute_instances[0].id
    );
    assert!(
        rig.host(&conf).is_file(),
        "the driver wrote its registry file"
    );
    let uuid = made.compute_instances[0].uuid.clone();
    assert!(uuid.starts_with("MIG-"), "{uuid}");
    let card = dev + 1; // card0 is the BMC's display on this host
    let want = vec![
        "/dev/kfd=/dev/kfd:rwm".to_string(),
        "/dev/mkfd=/dev/mkfd:rwm".to_string(),
        format!("/dev/dri/card{card}=/dev/dri/card{card}:rw"),
        format!("/dev/dri/renderD{r}=/dev/dri/renderD{r}:rw", r = 128 + dev),
    ];
    assert_eq!(devices(&admission, "main", PARTITIONED), want);
    let main_mounts = mounts(&admission, "main", PARTITIONED);
    assert!(
        main_mounts.contains(&format!("{conf}={conf}:true")),
        "the registry file at its own host path, read-only: {main_mounts:?}"
    );
    assert!(main_mounts.contains(&"/opt/hyhal=/opt/hyhal:true".to_string()));
    assert_eq!(
        admission["main"][PARTITIONED]
            .envs
            .get("DMI_MIG_VISIBLE_DEVICE"),
        Some(&uuid),
        "the MIG- prefixed UUID the registry file names"
    );
    // The owner's sidecar: the same answer.
    assert_eq!(devices(&admission, "sshd", VISIBILITY), want);
    assert_eq!(mounts(&admission, "sshd", VISIBILITY), main_mounts);

    // Hygon's marker in the container's directory.
    let card_uuid = rig.accelerators[dev as usize].uuid.clone().unwrap();
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rig.marker("a", &card_uuid)).unwrap()).unwrap();
    assert_eq!(marker["card"], card_uuid.as_str());
    assert_eq!(marker["profile"], "2g.15gb");
    assert_eq!(marker["profileID"], 3);
    assert_eq!(marker["giID"], made.gpu_instance);
    assert_eq!(marker["migUUID"], uuid.as_str());
    assert_eq!(
        marker["pciBusID"],
        rig.accelerators[dev as usize]
            .bus_id
            .unwrap()
            .sysfs()
            .as_str()
    );
    assert_eq!(marker["confPath"], conf.as_str());

    // A restart, then the kubelet's retry: the same instance, nothing new made.
    rig.restart_plugins().await;
    let held = rig.kubelet.held("a", "main", PARTITIONED);
    let again = rig.kubelet.allocate_raw(PARTITIONED, held).await.unwrap();
    assert_eq!(
        again.container_responses[0]
            .envs
            .get("DMI_MIG_VISIBLE_DEVICE"),
        Some(&uuid),
        "rebound"
    );
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");

    // The Pod goes: the reclaim loop destroys the instance; its marker and registry file go.
    rig.kubelet.delete("a");
    rig.wait_state("a's instance destroyed", |s| s.instances.is_empty())
        .await;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while rig.marker("a", &card_uuid).exists() {
        assert!(tokio::time::Instant::now() < until, "a's marker removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!rig.host(&conf).exists(), "the registry follows the driver");
}

/// Spec §6.5: the driver refuses to destroy an instance in use (`The device is exist and may
/// be in use.`); the partition stays charged and occupied, and goes on a later pass once idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_driver_says_is_in_use_is_left_for_a_later_pass() {
    let rig = Rig::new().await;
    rig.kubelet.create(owner("c", false));
    rig.kubelet.admit("c").await.unwrap();
    let file = rig.dir.path().join("host").join(STATE_FILE);
    let set_busy = |busy: bool| {
        let mut state = rig.state();
        state.instances[0].busy = busy;
        state.save(&file).unwrap();
    };
    set_busy(true);
    let card = rig.accelerators[rig.state().instances[0].gpu as usize]
        .uuid
        .clone()
        .unwrap();
    rig.kubelet.delete("c");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rig.state().instances.len(), 1, "destroyed while in use");
    assert!(rig.marker("c", &card).exists(), "its marker is kept");
    let plugins = rig.plugins.as_ref().unwrap();
    assert_eq!(plugins.ledger().grants().len(), 1, "still charged");
    set_busy(false);
    rig.wait_state("c's instance destroyed once idle", |s| {
        s.instances.is_empty()
    })
    .await;
}

/// A partition whose registry file is gone (a reboot, a hand) cannot be activated by the
/// container: the kubelet's retry is refused with the spec's words, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_without_its_registry_file_is_refused_naming_it() {
    let rig = Rig::new().await;
    rig.kubelet.create(owner("b", false));
    rig.kubelet.admit("b").await.unwrap();
    let made = rig.state().instances[0].clone();
    let conf = format!(
        "/etc/dmi_mig_config/ci/dev{}gi{}ci{}.conf",
        made.gpu, made.gpu_instance, made.compute_instances[0].id
    );
    std::fs::remove_file(rig.host(&conf)).unwrap();
    let held = rig.kubelet.held("b", "main", PARTITIONED);
    let refused = rig
        .kubelet
        .allocate_raw(PARTITIONED, held)
        .await
        .unwrap_err();
    assert!(
        refused
            .message()
            .contains("so the container could not activate it"),
        "{}",
        refused.message()
    );
}
