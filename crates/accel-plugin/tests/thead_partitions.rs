//! T-Head partitions through the kubelet emulator over real unix sockets, on a copy of the
//! recorded mixed host (`thead-16x-zw810e-mig2`: PPUs 14 and 15 in MIG mode) whose MIG state
//! follows the `ppu-smi mig` commands: a partition is made at the lowest free placement and
//! answered with the control nodes, its card's proven node and the GPU and compute instance
//! capability nodes the driver's tree names (spec §6.3), its ownership record is T-Head's
//! per-card marker (spec §6.4), the owner's sidecar gets the same set, a restart rebinds it and
//! its Pod's deletion reclaims it (CI, then GI).

use std::sync::Arc;
use std::time::Duration;

use accel_backend::mig_cli::replay::MigState;
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_host::{FsHost, RecordedCommands};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::{Offer, Orphans};
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins, Partitions};
use accel_testkit::copy_tree;
use accel_thead::mig::PpuSmiPartitioner;
use accel_thead::mig_replay::{self, STATE_FILE, capability_minors};
use accel_thead::responder::TheadResponder;

const PARTITIONED: &str = "alibabacloud.com/ppu.partitioned";
const HALF: &str = "alibabacloud.com/ppu.partitioned.mig-4g.48gb";
const VISIBILITY: &str = "device.gpustack.ai/thead.visibility";

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
        copy_tree(
            &accel_testkit::recorded_host("thead-16x-zw810e-mig2"),
            &host,
        )
        .unwrap();
        let commands: Arc<dyn accel_host::Commands> = Arc::from(mig_replay::wrap(
            &host,
            Box::new(RecordedCommands::load(&host).unwrap()),
        ));
        let files = Arc::new(FsHost::new(host.join("root")));
        let section = accel_thead::detector::detect(
            files.as_ref(),
            commands.as_ref(),
            accel_thead::detector::DetectOptions::default(),
        )
        .unwrap();
        let accelerators = section.accelerators.clone();
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 128))
            .collect();
        let responder = Arc::new(TheadResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: Some(0),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators: accelerators.clone(),
            host: Some(files),
            commands: Some(commands.clone()),
            runtime_class: None,
            writes: None,
        }));
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                sliced: false,
                ..Offer::of(Manufacturer::Thead)
            },
            seats,
            responder,
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: Some(Partitions {
                partitioner: Arc::new(PpuSmiPartitioner::default()),
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
            .join(format!("data/pods/{uid}/c-main/thead-mig-{card}.json"))
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
    let main: &[(&str, &str)] = &[(PARTITIONED, "1"), (HALF, "1")];
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

fn rw(path: &str) -> String {
    format!("{path}={path}:rw")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_made_injected_marked_rebound_after_a_restart_and_reclaimed() {
    let mut rig = Rig::new().await;
    // Two cards in MIG mode, two 4g.48gb tokens each.
    assert_eq!(rig.kubelet.devices(PARTITIONED).len(), 4);

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
        ("4g48gb", 5, 0, 4),
        "the vendor's profile at the lowest free placement"
    );
    let ordinal = made.gpu; // ppu-smi's index is the ordinal on this host
    let (gi, ci) = capability_minors(ordinal, made.gpu_instance, 0);
    let want = vec![
        rw("/dev/alixpu"),
        rw("/dev/alixpu_ctl"),
        rw(&format!("/dev/alixpu_ppu{ordinal}")),
        rw(&format!("/dev/alixpu-caps/alixpu-cap{gi}")),
        rw(&format!("/dev/alixpu-caps/alixpu-cap{ci}")),
    ];
    assert_eq!(devices(&admission, "main", PARTITIONED), want);
    assert!(admission["main"][PARTITIONED].envs.is_empty(), "no env");
    assert!(
        admission["main"][PARTITIONED].mounts.is_empty(),
        "no mounts"
    );
    // The owner's sidecar: the same set, never the parent card alone.
    assert_eq!(devices(&admission, "sshd", VISIBILITY), want);

    // T-Head's marker, in the vendor's spelling, in the container's directory.
    let card = rig.accelerators[ordinal as usize].uuid.clone().unwrap();
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rig.marker("a", &card)).unwrap()).unwrap();
    assert_eq!(marker["card"], card.as_str());
    assert_eq!(marker["profile"], "4g48gb");
    assert_eq!(marker["profileID"], 5);
    assert_eq!(marker["giID"], made.gpu_instance);
    assert_eq!(marker["migUUID"], made.compute_instances[0].uuid.as_str());
    assert_eq!(
        (marker["start"].clone(), marker["length"].clone()),
        (0.into(), 4.into())
    );

    // A restart, then the kubelet's retry: the same instance, nothing new made.
    rig.restart_plugins().await;
    let held = rig.kubelet.held("a", "main", PARTITIONED);
    let again = rig.kubelet.allocate_raw(PARTITIONED, held).await.unwrap();
    let again: Vec<String> = again.container_responses[0]
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect();
    assert_eq!(again, want, "rebound");
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");

    // The Pod goes: the reclaim loop destroys the instance and the marker goes with it.
    rig.kubelet.delete("a");
    rig.wait_state("a's instance destroyed", |s| s.instances.is_empty())
        .await;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while rig.marker("a", &card).exists() {
        assert!(tokio::time::Instant::now() < until, "a's marker removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let access = format!(
        "/proc/driver/alixpu/capabilities/ppu{ordinal}/mig/gi{}",
        made.gpu_instance
    );
    assert!(!rig.host(&access).exists(), "the driver's tree follows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_node_of_another_minor_refuses_and_leaves_nothing_made() {
    let rig = Rig::new().await;
    // PPU 14's GI 0 node exists but carries another minor (a node left by another driver load).
    let (gi, _) = capability_minors(14, 0, 0);
    let node = rig.host(&format!("/dev/alixpu-caps/alixpu-cap{gi}"));
    std::fs::create_dir_all(node.parent().unwrap()).unwrap();
    std::fs::write(&node, "c 505:7\n").unwrap();
    rig.kubelet.create(owner("b", false));
    let refused = rig.kubelet.admit("b").await.unwrap_err();
    assert!(
        refused
            .message()
            .contains(&format!("carries minor 7, want {gi}")),
        "{}",
        refused.message()
    );
    assert!(rig.state().instances.is_empty(), "{:?}", rig.state());
    let card = rig.accelerators[14].uuid.clone().unwrap();
    assert!(!rig.marker("b", &card).exists(), "its marker is taken back");
    let plugins = rig.plugins.as_ref().unwrap();
    assert!(
        plugins.ledger().grants().is_empty(),
        "its reservation is given back"
    );
    // The node set right, the same container's retry is answered.
    std::fs::write(&node, format!("c 505:{gi}\n")).unwrap();
    rig.kubelet.admit("b").await.unwrap();
    assert_eq!(rig.state().instances.len(), 1);
    assert!(rig.marker("b", &card).exists());
}

/// Spec §6.5: a gone Pod's partition a compute process runs on is not destroyed (ppu-smi is
/// not known to refuse that destroy, so the replay lets it through: only the allocator's own
/// process check keeps it); it stays charged and occupied, and goes once the process ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_pods_partition_is_kept_while_a_process_runs_on_it() {
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
    // Past the first pass (and its retries' worth of time): still there, still charged.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rig.state().instances.len(), 1, "destroyed while busy");
    assert!(rig.marker("c", &card).exists(), "its marker is kept");
    let plugins = rig.plugins.as_ref().unwrap();
    assert_eq!(plugins.ledger().grants().len(), 1, "still charged");
    // The process ends: the next pass reclaims it.
    set_busy(false);
    rig.wait_state("c's instance destroyed once idle", |s| {
        s.instances.is_empty()
    })
    .await;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !plugins.ledger().grants().is_empty() {
        assert!(tokio::time::Instant::now() < until, "its grant released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
