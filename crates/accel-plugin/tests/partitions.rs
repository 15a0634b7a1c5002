//! The partitioned family through the kubelet emulator over real unix sockets, on copies of the
//! recorded 8×H100 MIG host whose MIG state follows the commands (issue 13, items 3 and 4):
//! the fungible pool (56 → 53), Allocate with the durable ownership record and the journal,
//! packing, retry reuse, refusals that leave nothing half-made, and a restart; reclaim, instances
//! no grant accounts for (reused first, destroyed once idle after a debounce, subdivided ones
//! stopping reclaim on their GPU), a retry the ledger lacks (the record, then the annotation),
//! a restart with the journal lost, and a random history of all of it (items 4, 6 and 7).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::ledger::{Family, Seat};
use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::mig_replay::{self, MigState};
use accel_nvidia::partitioner::SmiPartitioner;
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::ownership;
use accel_plugin::pods::{MemoryPods, Pod, PodSource};
use accel_plugin::service::{Offer, Orphans};
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, CommandLog, Kubelet, Run, pod};
use accel_plugin::{Config, DevicePlugins, Partitions};
use accel_testkit::copy_tree;
use tonic::Code;

const PARTITIONED: &str = "nvidia.com/gpu.partitioned";

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: Option<DevicePlugins>,
    config: Config,
    /// Every `nvidia-smi` the plugins ran, to wait until a pass has looked.
    log: Arc<CommandLog>,
}

impl Rig {
    async fn new() -> Rig {
        Rig::with_orphans(Orphans::default()).await
    }

    /// A rig whose passes over unowned instances run as `orphans` says.
    async fn with_orphans(orphans: Orphans) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        copy_tree(&accel_testkit::recorded_host("hgx-h100-8gpu-mig"), &host).unwrap();
        let commands: Arc<dyn accel_host::Commands> = Arc::from(mig_replay::wrap(
            &host,
            Box::new(RecordedCommands::load(&host).unwrap()),
        ));
        let detected = accel_nvidia::detector::detect(
            &FsHost::new(host.join("root")),
            commands.as_ref(),
            accel_nvidia::detector::DetectOptions::default(),
        );
        let section = detected.detection.unwrap();
        let seats: Vec<Seat> = section
            .accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 0))
            .collect();
        let log = CommandLog::over(commands);
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                sliced: false,
                ..Offer::of(Manufacturer::Nvidia)
            },
            seats,
            responder: Arc::new(NvidiaResponder {
                // Partitions take the environment whatever the strategy.
                strategy: InjectionStrategy::CdiAnnotations,
                cuda_major: Some(13),
                pod_dir_root: dir.path().join("data/pods"),
                preload_dir: dir.path().join("data/preload"),
                library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
                engine: std::sync::Arc::new(EngineFacts::default()),
            }),
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: Some(Partitions {
                partitioner: Arc::new(SmiPartitioner::default()),
                commands: log.clone(),
                orphans,
            }),
        };
        let mut rig = Rig {
            dir,
            kubelet,
            plugins: None,
            config,
            log,
        };
        rig.start_plugins().await;
        rig
    }

    async fn start_plugins(&mut self) {
        let pods = Arc::new(self.kubelet.pods().clone());
        let plugins = DevicePlugins::start(self.config.clone(), pods)
            .await
            .unwrap();
        // The whole-GPU pools are registered empty on a MIG node: wait for those with tokens.
        self.kubelet.wait_for(&[PARTITIONED, VISIBILITY]).await;
        self.plugins = Some(plugins);
    }

    async fn restart_plugins(&mut self) {
        if let Some(p) = self.plugins.take() {
            p.stop().await;
        }
        self.start_plugins().await;
    }

    fn plugins(&self) -> &DevicePlugins {
        self.plugins.as_ref().unwrap()
    }

    fn state(&self) -> MigState {
        MigState::load(&self.dir.path().join("host").join(mig_replay::STATE_FILE)).unwrap()
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// Waits until the pool advertises `healthy` Healthy tokens.
    async fn wait_healthy(&self, healthy: usize) {
        let reached = self.kubelet.until_devices(
            PARTITIONED,
            |devices| devices.iter().filter(|d| d.health == "Healthy").count() == healthy,
            testing::WAIT,
        );
        if !reached.await {
            let now = self
                .kubelet
                .devices(PARTITIONED)
                .iter()
                .filter(|d| d.health == "Healthy")
                .count();
            panic!("the pool did not reach {healthy} Healthy tokens (it has {now})");
        }
    }

    /// How many runs so far `matching` holds for.
    fn runs(&self, matching: impl Fn(&Run) -> bool) -> usize {
        self.log.count(matching)
    }

    /// Waits until `count` more runs than `since` match: a pass has looked.
    async fn wait_runs(
        &self,
        what: &str,
        since: usize,
        count: usize,
        matching: impl Fn(&Run) -> bool,
    ) {
        self.log.wait_runs(what, matching, since + count).await;
    }

    fn create(&self, uid: &str, profile: &str) {
        let profile = format!("{PARTITIONED}.mig-{profile}");
        self.kubelet.create(pod(
            uid,
            1_700_000_000,
            &[("main", &[(PARTITIONED, "1"), (profile.as_str(), "1")])],
        ));
    }

    async fn admit(&self, uid: &str, profile: &str) -> Result<String, tonic::Status> {
        self.create(uid, profile);
        let admission = self.kubelet.admit(uid).await?;
        let envs = &admission["main"][PARTITIONED].envs;
        Ok(envs["NVIDIA_VISIBLE_DEVICES"].clone())
    }
}

/// (GPU, start, profile) of every instance on the host.
fn placements(state: &MigState) -> Vec<(u32, u32, String)> {
    let mut all: Vec<(u32, u32, String)> = state
        .instances
        .iter()
        .map(|i| (i.gpu, i.start, i.profile.clone()))
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_56_then_53_with_the_record_and_the_instance_injected() {
    let rig = Rig::new().await;
    let devices = rig.kubelet.devices(PARTITIONED);
    assert_eq!(devices.len(), 56, "8 GPUs × 7 tokens");
    assert!(
        devices.iter().all(|d| d.topology.is_none()),
        "no NUMA on partition tokens"
    );
    rig.wait_healthy(56).await;

    let uuid = rig.admit("a", "3g.40gb").await.unwrap();
    assert!(uuid.starts_with("MIG-"), "{uuid}");
    rig.wait_healthy(53).await;
    // The walkthrough: GPU 0, slices 0-3, one GI with one CI, the UUID the container sees.
    let state = rig.state();
    assert_eq!(placements(&state), [(0, 0, "3g.40gb".to_string())]);
    assert_eq!(state.instances[0].compute_instances.len(), 1);
    assert_eq!(state.instances[0].compute_instances[0].uuid, uuid);

    let record = ownership::read(&rig.data(), "a", "main").unwrap().unwrap();
    assert_eq!(
        (
            record.gpu_index.unwrap(),
            record.profile.as_str(),
            record.start,
            record.mig_uuid.as_str(),
            record.gpu_instance
        ),
        (
            0,
            "3g.40gb",
            0,
            uuid.as_str(),
            state.instances[0].gpu_instance
        )
    );
    assert!(
        record
            .gpu_uuid
            .as_deref()
            .is_some_and(|u| u.starts_with("GPU-"))
    );
    let ledger = rig.plugins().ledger();
    let grant = ledger
        .grants()
        .values()
        .find(|g| g.family == Family::Partitioned)
        .unwrap();
    assert_eq!(grant.accelerators, [0]);
    // 3g.40gb folded against the H100's VRAM: the webhook's function.
    let vram = ledger.seat(0).unwrap().memory_mib;
    assert_eq!(
        Ok(grant.units),
        accel_core::units::fold(accel_core::units::MemoryBudget::Profile(40448), vram)
    );
    let journal =
        std::fs::read_to_string(rig.data().join(accel_plugin::journal::FILE_NAME)).unwrap();
    assert!(
        journal.contains(&uuid),
        "the journal entry names the instance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_pack_onto_the_most_occupied_gpu_and_a_retry_reuses_its_instance() {
    let rig = Rig::new().await;
    rig.admit("a", "3g.40gb").await.unwrap();
    rig.admit("b", "3g.40gb").await.unwrap();
    rig.admit("c", "1g.10gb").await.unwrap();
    assert_eq!(
        placements(&rig.state()),
        [
            (0, 0, "3g.40gb".to_string()),
            (0, 4, "3g.40gb".to_string()),
            (1, 0, "1g.10gb".to_string()),
        ],
        "GPU 0 is filled before GPU 1 is opened"
    );
    rig.admit("d", "1g.10gb").await.unwrap();
    assert_eq!(placements(&rig.state())[3], (1, 1, "1g.10gb".to_string()));

    // The kubelet retries a's Allocate with the same IDs: the same instance, nothing new.
    let held = rig.kubelet.held("a", "main", PARTITIONED);
    let again = rig.kubelet.allocate_raw(PARTITIONED, held).await.unwrap();
    let record = ownership::read(&rig.data(), "a", "main").unwrap().unwrap();
    assert_eq!(
        again.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        record.mig_uuid
    );
    assert_eq!(rig.state().instances.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_no_gpu_offers_and_a_failed_create_are_refused_with_nothing_left() {
    let rig = Rig::new().await;
    let refused = rig.admit("x", "9g.99gb").await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused
            .message()
            .contains("no GPU on this node can place a 9g.99gb instance")
            && refused.message().contains("does not offer it"),
        "{}",
        refused.message()
    );

    // An instance carved by hand on GPU 0 at 0-3: the ledger does not know it, so the
    // allocator picks GPU 0 at 0 and the driver refuses. The reservation is given back.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    state.instances.push(mig_replay::StateInstance {
        gpu: 0,
        gpu_instance: 9,
        profile_id: 5,
        profile: "4g.40gb".into(),
        start: 0,
        size: 4,
        compute_instances: vec![],
        busy: false,
    });
    state.save(&path).unwrap();
    let refused = rig.admit("y", "3g.40gb").await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    let message = refused.message();
    assert!(
        message.contains("3g.40gb on GPU 0")
            && message.contains("Insufficient Resources")
            && !message.contains('\n'),
        "{message}"
    );
    assert!(
        rig.plugins().ledger().grants().is_empty(),
        "the reservation was given back"
    );
    assert_eq!(rig.state().instances.len(), 1, "only the hand-carved one");
    assert_eq!(ownership::read(&rig.data(), "y", "main"), Ok(None));
    rig.wait_healthy(56).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_partition_and_its_tokens() {
    let mut rig = Rig::new().await;
    let uuid = rig.admit("a", "2g.20gb").await.unwrap();
    // GPU 0: 1 allocated + five 1g starts left; the other seven: 7 each.
    rig.wait_healthy(55).await;
    rig.restart_plugins().await;
    rig.wait_healthy(55).await;
    let ledger = rig.plugins().ledger();
    let grant = ledger.grants().values().next().unwrap();
    let placement = grant.partition.as_ref().unwrap();
    assert_eq!(
        placement.instance.as_ref().map(|i| i.uuid.as_str()),
        Some(uuid.as_str())
    );
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");
}

fn set_busy(rig: &Rig, busy: bool) {
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    for instance in &mut state.instances {
        instance.busy = busy;
    }
    state.save(&path).unwrap();
}

/// Waits (bounded) until `check` holds for the host's MIG state.
async fn wait_state(rig: &Rig, what: &str, check: impl Fn(&MigState) -> bool) {
    testing::wait_read(what, || rig.state(), check).await;
}

/// `nvidia-smi -q -x -i <gpu>`: the process listing a pass reads before it destroys.
fn process_listing(gpu: u32) -> impl Fn(&Run) -> bool {
    let words = format!("-q -x -i {gpu}");
    move |run: &Run| run.has(&words)
}

/// `nvidia-smi mig -i <gpu> -lgi`: the instance listing every pass over unowned instances
/// starts with.
fn instance_listing(gpu: u32) -> impl Fn(&Run) -> bool {
    let words = format!("mig -i {gpu} -lgi");
    move |run: &Run| run.has(&words)
}

/// Passes of [`quick_orphans`] that span one and a half debounces.
const PASSES_PAST_THE_DEBOUNCE: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_pods_partition_stays_occupied_until_destroyed_then_is_released() {
    let rig = Rig::new().await;
    rig.admit("a", "3g.40gb").await.unwrap();
    // Processes still run on it: the reclaim leaves it for a later pass.
    set_busy(&rig, true);
    let listed = rig.runs(process_listing(0));
    rig.kubelet.delete("a");
    rig.wait_runs(
        "a's reclaim read GPU 0's processes",
        listed,
        1,
        process_listing(0),
    )
    .await;
    assert_eq!(rig.state().instances.len(), 1, "not destroyed while in use");
    assert!(
        rig.plugins()
            .ledger()
            .grants()
            .keys()
            .any(|k| k.pod_uid == "a"),
        "the outgoing instance stays counted"
    );
    // A same-profile replacement is never handed the outgoing instance's placement.
    rig.admit("b", "3g.40gb").await.unwrap();
    assert_eq!(
        placements(&rig.state()),
        [(0, 0, "3g.40gb".to_string()), (0, 4, "3g.40gb".to_string())]
    );
    // The processes end: the next pass destroys it (CI, then GI) and releases the grant.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    state.instances[0].busy = false;
    state.save(&path).unwrap();
    wait_state(&rig, "a's instance destroyed", |s| s.instances.len() == 1).await;
    assert_eq!(placements(&rig.state()), [(0, 4, "3g.40gb".to_string())]);
    testing::wait_released(rig.plugins(), "a").await;
    assert_eq!(ownership::read(&rig.data(), "a", "main"), Ok(None));
    assert!(ownership::read(&rig.data(), "b", "main").unwrap().is_some());
    // b's 3g at 4 is allocated; the largest free on GPU 0 is four 1g.10gb at 0-3.
    rig.wait_healthy(49 + 1 + 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_record_whose_gi_carries_another_uuid_fails_closed_and_is_never_destroyed()
 {
    let mut rig = Rig::new().await;
    let uuid = rig.admit("a", "1g.10gb").await.unwrap();
    let held = rig.kubelet.held("a", "main", PARTITIONED);
    rig.plugins.take().unwrap().stop().await;
    // Meanwhile (a reboot and a hand carve) GPU instance 1 was made again: another UUID.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    state.instances[0].compute_instances[0].uuid = "MIG-someone-else".into();
    state.save(&path).unwrap();
    rig.start_plugins().await;

    // The restarted plugin registers again on a new socket: retry until it answers.
    let until = tokio::time::Instant::now() + testing::WAIT;
    let refused = loop {
        let answer = rig.kubelet.allocate_raw(PARTITIONED, held.clone()).await;
        match answer {
            Err(e) if e.code() == Code::Unavailable && tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other.unwrap_err(),
        }
    };
    assert_eq!(
        refused.code(),
        Code::FailedPrecondition,
        "{}",
        refused.message()
    );
    assert!(
        refused
            .message()
            .contains("now carries MIG-someone-else, not")
            && refused.message().contains(&uuid)
            && refused.message().contains("not re-created"),
        "{}",
        refused.message()
    );
    assert_eq!(rig.state().instances.len(), 1, "nothing re-created");

    // Its Pod goes: the grant and the record go, the other instance is not destroyed.
    rig.kubelet.delete("a");
    testing::wait_released(rig.plugins(), "a").await;
    assert_eq!(ownership::read(&rig.data(), "a", "main"), Ok(None));
    // A window for a wrong destroy to show (a stale grant is never acted on): a loaded machine
    // only makes it longer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rig.state().instances[0].compute_instances[0].uuid,
        "MIG-someone-else"
    );
    assert_eq!(
        rig.runs(|r| r.has("-dci") || r.has("-dgi")),
        0,
        "nothing destroyed"
    );
}

const VISIBILITY: &str = "device.gpustack.ai/nvidia.visibility";

fn with_sidecar(uid: &str) -> Pod {
    let profile = format!("{PARTITIONED}.mig-1g.20gb");
    pod(
        uid,
        1_700_000_000,
        &[
            ("main", &[(PARTITIONED, "1"), (profile.as_str(), "1")]),
            ("sshd", &[(VISIBILITY, "1")]),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_owners_sidecar_sees_the_partition_and_fails_closed_without_its_record() {
    let rig = Rig::new().await;
    rig.kubelet.create(with_sidecar("s"));
    let admission = rig.kubelet.admit("s").await.unwrap();
    let main = &admission["main"][PARTITIONED].envs["NVIDIA_VISIBLE_DEVICES"];
    let sshd = &admission["sshd"][VISIBILITY].envs["NVIDIA_VISIBLE_DEVICES"];
    assert!(main.starts_with("MIG-"), "{main}");
    assert_eq!(
        sshd, main,
        "the sidecar sees the partition, never the parent GPU"
    );

    // Another owner whose record is lost: its sidecar is refused, never widened to the GPU.
    rig.kubelet.create(with_sidecar("t"));
    rig.kubelet.admit_only("t", &["main"]).await.unwrap();
    ownership::remove(&rig.data(), "t", "main").unwrap();
    let refused = rig.kubelet.admit_only("t", &["sshd"]).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused
            .message()
            .contains("has no partition ownership record")
            && refused.message().contains("the parent GPU never is"),
        "{}",
        refused.message()
    );
}

/// Waits until the (re)started plugin answers on its socket.
async fn wait_registered(rig: &Rig) {
    let until = tokio::time::Instant::now() + testing::WAIT;
    loop {
        match rig.kubelet.allocate_raw(PARTITIONED, Vec::new()).await {
            Err(e) if e.code() == Code::Unavailable || e.code() == Code::NotFound => {
                assert!(
                    tokio::time::Instant::now() < until,
                    "the plugin never answered: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => return,
        }
    }
}

/// A small deterministic generator (xorshift), so a failing history can be replayed by seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const PROFILES: [&str; 6] = [
    "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
];

/// Every invariant the history must keep, checked from the host's MIG state, the ledger and the
/// ownership records.
fn check(rig: &Rig, live: &[String], seed: u64, step: usize) {
    let at = format!("seed {seed} step {step}");
    let state = rig.state();
    // No two instances share a memory slice on a GPU.
    for (n, a) in state.instances.iter().enumerate() {
        for b in &state.instances[n + 1..] {
            let overlap =
                a.gpu == b.gpu && a.start < b.start + b.size && b.start < a.start + a.size;
            assert!(!overlap, "{at}: {a:?} overlaps {b:?}");
        }
    }
    let ledger = rig.plugins().ledger();
    ledger.verify().unwrap_or_else(|e| panic!("{at}: {e}"));
    let (records, errors) = ownership::read_all(&rig.data());
    assert!(errors.is_empty(), "{at}: {errors:?}");
    // Every live Pod's partition is in the ledger, recorded, and on the host as recorded.
    for uid in live {
        let record = records
            .iter()
            .find(|r| &r.pod_uid == uid)
            .unwrap_or_else(|| panic!("{at}: {uid} has no record"));
        let on_host = state.instances.iter().any(|i| {
            i.gpu == record.gpu_index.unwrap()
                && i.start == record.start
                && i.compute_instances
                    .iter()
                    .any(|c| c.uuid == record.mig_uuid)
        });
        assert!(on_host, "{at}: {uid}'s instance is not on the host");
        assert!(
            ledger.grants().keys().any(|k| &k.pod_uid == uid),
            "{at}: {uid}"
        );
    }
    // Every instance we made is owned by a record (a gone Pod's until it is reclaimed).
    for instance in &state.instances {
        let hand = instance
            .compute_instances
            .iter()
            .any(|c| c.uuid.starts_with("MIG-hand"));
        let owned = instance
            .compute_instances
            .iter()
            .any(|c| records.iter().any(|r| r.mig_uuid == c.uuid));
        assert!(hand || owned, "{at}: {instance:?} is nobody's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_histories_share_no_placement_and_leak_nothing_across_restarts() {
    // What the histories did, so a history that exercises nothing fails.
    let (mut admitted, mut deleted, mut retried, mut restarts, mut carved) = (0, 0, 0, 0, 0);
    let mut lost = 0;
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x1234_5678, 0xdead_beef_cafe] {
        // Unowned instances are reused, and destroyed once idle for 0.6 s.
        let mut rig = Rig::with_orphans(Orphans {
            debounce: Duration::from_millis(600),
            period: Duration::from_millis(150),
        })
        .await;
        let mut dice = Dice(seed);
        let mut live: Vec<String> = Vec::new();
        let mut made = 0;
        for step in 0..30 {
            match dice.roll(10) {
                0..=3 => {
                    made += 1;
                    let uid = format!("p{made}");
                    let profile = PROFILES[dice.roll(6) as usize];
                    match rig.admit(&uid, profile).await {
                        Ok(uuid) => {
                            assert!(uuid.starts_with("MIG-"), "{uuid}");
                            live.push(uid);
                            admitted += 1;
                        }
                        Err(e) => {
                            // No room (or a hand-carved instance in the way): refused, and the
                            // kubelet fails the Pod, which is then deleted.
                            assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
                            rig.kubelet.delete(&uid);
                        }
                    }
                }
                4 | 5 if !live.is_empty() => {
                    let uid = live.remove(dice.roll(live.len() as u64) as usize);
                    rig.kubelet.delete(&uid);
                    deleted += 1;
                }
                6 if !live.is_empty() => {
                    let uid = &live[dice.roll(live.len() as u64) as usize];
                    let held = rig.kubelet.held(uid, "main", PARTITIONED);
                    let again = rig.kubelet.allocate_raw(PARTITIONED, held).await.unwrap();
                    let record = ownership::read(&rig.data(), uid, "main").unwrap().unwrap();
                    assert_eq!(
                        again.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
                        record.mig_uuid,
                        "a retry reuses its instance"
                    );
                    retried += 1;
                }
                7 => {
                    rig.restart_plugins().await;
                    wait_registered(&rig).await;
                    restarts += 1;
                }
                9 => {
                    // A restart with the journal lost: the ownership records rebuild it.
                    rig.plugins.take().unwrap().stop().await;
                    let _ = std::fs::remove_file(rig.data().join(accel_plugin::journal::FILE_NAME));
                    rig.start_plugins().await;
                    wait_registered(&rig).await;
                    lost += 1;
                }
                8 => {
                    // Someone carves a 1g by hand at a free slice.
                    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
                    let mut state = rig.state();
                    let gpu = dice.roll(8) as u32;
                    let free = (0..7).find(|s| {
                        !state
                            .instances
                            .iter()
                            .any(|i| i.gpu == gpu && i.start <= *s && *s < i.start + i.size)
                    });
                    if let Some(start) = free {
                        let id = free_gpu_instance(&state, gpu);
                        state.instances.push(mig_replay::StateInstance {
                            gpu,
                            gpu_instance: id,
                            profile_id: 19,
                            profile: "1g.10gb".into(),
                            start,
                            size: 1,
                            compute_instances: vec![mig_replay::StateCompute {
                                id: 0,
                                uuid: format!("MIG-hand-{step}"),
                            }],
                            busy: false,
                        });
                        state.save(&path).unwrap();
                        carved += 1;
                    }
                }
                _ => {}
            }
            // Let the Pod watch and the reclaimer settle what this step changed.
            testing::wait_ledger(
                rig.plugins(),
                &format!("seed {seed} step {step}: every gone Pod's partition reclaimed"),
                |ledger| ledger.grants().keys().all(|k| live.contains(&k.pod_uid)),
            )
            .await;
            check(&rig, &live, seed, step);
        }
        // Every Pod goes: no grant, no record, and every instance is reclaimed (the hand-carved
        // ones not claimed are idle, so they go after the debounce).
        for uid in live.drain(..) {
            rig.kubelet.delete(&uid);
        }
        testing::wait_ledger(
            rig.plugins(),
            &format!("seed {seed}: all released"),
            |ledger| ledger.grants().is_empty(),
        )
        .await;
        wait_state(
            &rig,
            &format!("seed {seed}: every instance reclaimed"),
            |s| s.instances.is_empty(),
        )
        .await;
        assert_eq!(ownership::read_all(&rig.data()), (vec![], vec![]));
    }
    let did = (admitted, deleted, retried, restarts, carved, lost);
    assert!(
        admitted >= 10 && deleted >= 3 && retried >= 1 && restarts >= 1 && carved >= 1 && lost >= 1,
        "(admitted, deleted, retried, restarts, carved, journal lost) = {did:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_instance_of_the_profile_is_claimed_before_one_is_made() {
    let rig = Rig::new().await;
    // A 3g.40gb carved by hand on GPU 0 at slices 4-7, with its one compute instance.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    state.instances.push(mig_replay::StateInstance {
        gpu: 0,
        gpu_instance: 2,
        profile_id: 9,
        profile: "3g.40gb".into(),
        start: 4,
        size: 4,
        compute_instances: vec![mig_replay::StateCompute {
            id: 0,
            uuid: "MIG-hand-carved".into(),
        }],
        busy: false,
    });
    state.save(&path).unwrap();
    let uuid = rig.admit("a", "3g.40gb").await.unwrap();
    assert_eq!(uuid, "MIG-hand-carved", "claimed, not made");
    assert_eq!(placements(&rig.state()), [(0, 4, "3g.40gb".to_string())]);
    let record = ownership::read(&rig.data(), "a", "main").unwrap().unwrap();
    assert_eq!((record.start, record.gpu_instance), (4, 2));
    let ledger = rig.plugins().ledger();
    let grant = ledger.grants().values().next().unwrap();
    assert_eq!(grant.partition.as_ref().map(|p| p.start), Some(4));
    // Now owned: its Pod's end destroys it.
    rig.kubelet.delete("a");
    wait_state(&rig, "the claimed instance reclaimed", |s| {
        s.instances.is_empty()
    })
    .await;
}

/// The lowest GPU instance id not in use on `gpu`, as the driver hands them out.
fn free_gpu_instance(state: &MigState, gpu: u32) -> u32 {
    (1..)
        .find(|id| {
            !state
                .instances
                .iter()
                .any(|i| i.gpu == gpu && i.gpu_instance == *id)
        })
        .unwrap()
}

/// Adds a hand-carved instance to the host: one GPU instance of `profile` (size `size`) at
/// `start`, with a compute instance per UUID given.
fn carve(
    rig: &Rig,
    gpu: u32,
    profile: &str,
    start: u32,
    size: u32,
    uuids: &[&str],
    busy: bool,
) -> u32 {
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    let id = free_gpu_instance(&state, gpu);
    let profile_id = match profile {
        "1g.10gb" => 19,
        "2g.20gb" => 14,
        "3g.40gb" => 9,
        "4g.40gb" => 5,
        _ => 0,
    };
    state.instances.push(mig_replay::StateInstance {
        gpu,
        gpu_instance: id,
        profile_id,
        profile: profile.into(),
        start,
        size,
        compute_instances: uuids
            .iter()
            .zip(0..)
            .map(|(uuid, ci)| mig_replay::StateCompute {
                id: ci,
                uuid: (*uuid).to_string(),
            })
            .collect(),
        busy,
    });
    state.save(&path).unwrap();
    id
}

fn has_uuid(state: &MigState, uuid: &str) -> bool {
    state
        .instances
        .iter()
        .any(|i| i.compute_instances.iter().any(|c| c.uuid == uuid))
}

/// Waits until `gone` holds for the host's MIG state (the instance destroyed), failing if any
/// look begun less than `debounce` after `since` (taken before the instance could be seen
/// unowned and idle) already found it so: a loaded machine looks less often, never wrongly.
async fn gone_not_before(
    rig: &Rig,
    what: &str,
    since: tokio::time::Instant,
    debounce: Duration,
    gone: impl Fn(&MigState) -> bool,
) {
    testing::wait_until(what, || {
        let looked = since.elapsed();
        let state = rig.state();
        assert!(
            !gone(&state) || looked >= debounce,
            "{what} before its debounce: {looked:?} after it was idle"
        );
        gone(&state)
    })
    .await;
}

/// Passes every 100 ms; an unowned instance goes after 1 s unowned and idle.
fn quick_orphans() -> Orphans {
    Orphans {
        debounce: Duration::from_secs(1),
        period: Duration::from_millis(100),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_idle_instance_is_destroyed_after_the_debounce_and_a_busy_one_is_kept() {
    let rig = Rig::with_orphans(quick_orphans()).await;
    let debounce = quick_orphans().debounce;
    // Taken before the carve: nothing can have seen the instances earlier.
    let carved = tokio::time::Instant::now();
    carve(&rig, 2, "1g.10gb", 0, 1, &["MIG-hand-busy"], true);
    carve(&rig, 2, "1g.10gb", 1, 1, &["MIG-hand-idle"], false);
    // Not before the debounce: every look begun within it still finds the instance (a loaded
    // machine looks less often, never wrongly).
    gone_not_before(
        &rig,
        "the idle unowned instance destroyed",
        carved,
        debounce,
        |s| !has_uuid(s, "MIG-hand-idle"),
    )
    .await;
    // The busy one stays while its process runs, however long: pass after pass sees it busy.
    let listed = rig.runs(process_listing(2));
    rig.wait_runs(
        "the passes read GPU 2's processes",
        listed,
        PASSES_PAST_THE_DEBOUNCE,
        process_listing(2),
    )
    .await;
    assert!(
        has_uuid(&rig.state(), "MIG-hand-busy"),
        "a busy instance is kept"
    );
    // Its process ends: it goes (a debounce after the last pass that saw it busy, which on a
    // loaded machine may be well before this; the debounce itself is checked above).
    set_busy(&rig, false);
    wait_state(&rig, "the unowned instance destroyed once idle", |s| {
        s.instances.is_empty()
    })
    .await;
    // What a grant owns is never taken for unowned: pass after pass leaves it.
    let uuid = rig.admit("a", "1g.10gb").await.unwrap();
    let gpu = ownership::read(&rig.data(), "a", "main")
        .unwrap()
        .unwrap()
        .gpu_index
        .unwrap();
    let listed = rig.runs(instance_listing(gpu));
    rig.wait_runs(
        "the passes listed the owned instance's GPU",
        listed,
        PASSES_PAST_THE_DEBOUNCE,
        instance_listing(gpu),
    )
    .await;
    assert!(
        has_uuid(&rig.state(), &uuid),
        "an owned instance is never an orphan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_instance_on_any_gpu_is_reused_first_and_others_are_placed_around() {
    let rig = Rig::with_orphans(Orphans {
        debounce: Duration::from_secs(600),
        period: Duration::from_millis(100),
    })
    .await;
    // A 3g carved on GPU 5, and a 4g with no compute instance on GPU 0 at 0-3.
    carve(&rig, 5, "3g.40gb", 4, 4, &["MIG-hand-3g"], false);
    carve(&rig, 0, "4g.40gb", 0, 4, &[], false);
    // A pass has booked both: GPU 0 three 1g in 4-6, GPU 5 the claimable 3g and four 1g in
    // 0-3, the other six 7 each.
    rig.wait_healthy(3 + 5 + 6 * 7).await;
    // Reused, though the packed choice on an empty ledger is GPU 0.
    let uuid = rig.admit("a", "3g.40gb").await.unwrap();
    assert_eq!(uuid, "MIG-hand-3g");
    let record = ownership::read(&rig.data(), "a", "main").unwrap().unwrap();
    assert_eq!((record.gpu_index.unwrap(), record.start), (5, 4));
    // The next 3g is made beside the 4g on GPU 0 (its slices are taken), not into it.
    let made = rig.admit("b", "3g.40gb").await.unwrap();
    assert!(made.starts_with("MIG-") && made != uuid, "{made}");
    let b = ownership::read(&rig.data(), "b", "main").unwrap().unwrap();
    assert_eq!(
        (b.gpu_index.unwrap(), b.start),
        (0, 4),
        "packed beside the unowned 4g"
    );
    assert_eq!(rig.state().instances.len(), 3, "nothing else made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subdivided_gpu_instance_stops_reclaim_on_its_gpu_only_and_is_never_used() {
    let rig = Rig::with_orphans(quick_orphans()).await;
    rig.admit("a", "7g.80gb").await.unwrap(); // GPU 0
    rig.admit("x", "3g.40gb").await.unwrap(); // GPU 1 at 0
    // A 2g on GPU 1 subdivided by hand into two compute instances.
    carve(
        &rig,
        1,
        "2g.20gb",
        4,
        2,
        &["MIG-split-0", "MIG-split-1"],
        false,
    );
    // A pass has booked it: GPU 0 a's 7g, GPU 1 x's 3g and one 1g at 6, the other six 7 each.
    rig.wait_healthy(1 + 2 + 6 * 7).await;
    rig.admit("y", "7g.80gb").await.unwrap(); // GPU 2
    // Never claimed or placed over: a 1g lands in GPU 1's last free slice (packed), past it.
    rig.admit("z", "1g.10gb").await.unwrap();
    let z = ownership::read(&rig.data(), "z", "main").unwrap().unwrap();
    assert_eq!((z.gpu_index.unwrap(), z.start), (1, 6));
    let listed = rig.runs(instance_listing(1));
    rig.kubelet.delete("x");
    rig.kubelet.delete("y");
    wait_state(&rig, "y's instance on GPU 2 reclaimed", |s| {
        !s.instances.iter().any(|i| i.gpu == 2)
    })
    .await;
    // Past the debounce and a few passes: the subdivided one and x's stay.
    rig.wait_runs(
        "the passes listed GPU 1",
        listed,
        PASSES_PAST_THE_DEBOUNCE,
        instance_listing(1),
    )
    .await;
    let state = rig.state();
    assert!(has_uuid(&state, "MIG-split-1"), "never destroyed");
    assert!(
        state.instances.iter().any(|i| i.gpu == 1 && i.start == 0),
        "x's instance stays while GPU 1 holds a subdivided GPU instance"
    );
    assert!(
        rig.plugins()
            .ledger()
            .grants()
            .keys()
            .any(|k| k.pod_uid == "x"),
        "x stays counted"
    );
    // One compute instance again: x's is reclaimed on a later pass, the 2g is now unowned and
    // idle and goes after its debounce.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    for i in &mut state.instances {
        i.compute_instances.retain(|c| c.uuid != "MIG-split-1");
    }
    state.save(&path).unwrap();
    wait_state(&rig, "x's instance and the unowned 2g destroyed", |s| {
        !s.instances
            .iter()
            .any(|i| i.gpu == 1 && (i.start == 0 || i.start == 4))
    })
    .await;
    // The record goes right after the destroy, on the reclaim's own task: wait for it.
    testing::wait_until("x's ownership record dropped after its instance", || {
        ownership::read(&rig.data(), "x", "main").unwrap().is_none()
    })
    .await;
}

/// The grant a Pod's annotation would carry for a made partition.
fn annotation_of(index: u32, gi: u32, start: u32, uuid: &str) -> String {
    let grant = accel_core::ledger::Grant {
        family: Family::Partitioned,
        resource: PARTITIONED.into(),
        device_ids: vec![],
        accelerators: vec![index],
        units: 1,
        cores_percentage: None,
        partition: Some(accel_core::ledger::partitions::PartitionPlacement {
            profile: "1g.10gb".into(),
            start,
            size: 1,
            instance: Some(accel_core::ledger::partitions::PartitionInstance {
                gpu_instance: gi,
                compute_instance: 0,
                uuid: uuid.into(),
            }),
        }),
        finished: false,
    };
    accel_core::ledger::annotation::render(&BTreeMap::from([("main".to_string(), grant)]))
}

fn record_of(rig: &Rig, uid: &str, index: u32, gi: u32, start: u32, uuid: &str) {
    let seat = rig.plugins().ledger().seat(index).unwrap().clone();
    ownership::Store::generic(rig.data())
        .write(&ownership::OwnershipRecord {
            gpu_uuid: seat.uuid,
            gpu_index: Some(index),
            profile: "1g.10gb".into(),
            profile_id: None,
            gpu_instance: gi,
            compute_instance: 0,
            start,
            size: 1,
            mig_uuid: uuid.into(),
            pod_uid: uid.into(),
            container: "main".into(),
            created: 1_700_000_000,
            device_ids: vec![],
            vendor: BTreeMap::new(),
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocate_the_ledger_lacks_reuses_the_record_then_the_annotation_and_never_recreates() {
    let rig = Rig::new().await;
    // b held a 1g on GPU 3 that the ledger lost; its record names it.
    let gi = carve(&rig, 3, "1g.10gb", 2, 1, &["MIG-of-b"], false);
    record_of(&rig, "b", 3, gi, 2, "MIG-of-b");
    assert_eq!(rig.admit("b", "1g.10gb").await.unwrap(), "MIG-of-b");
    let grant = rig
        .plugins()
        .ledger()
        .grants()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(grant.accelerators, [3]);
    let record = ownership::read(&rig.data(), "b", "main").unwrap().unwrap();
    assert_eq!(
        record.device_ids, grant.device_ids,
        "the record keeps the device IDs"
    );

    // c's Pod annotation names a 1g on GPU 5 (no record).
    let gi = carve(&rig, 5, "1g.10gb", 6, 1, &["MIG-of-c"], false);
    rig.create("c", "1g.10gb");
    let mut pod = rig
        .kubelet
        .pods()
        .pods()
        .unwrap()
        .into_iter()
        .find(|p| p.uid == "c")
        .unwrap();
    pod.allocated = Some(annotation_of(5, gi, 6, "MIG-of-c"));
    rig.kubelet.pods().upsert(pod);
    let admission = rig.kubelet.admit("c").await.unwrap();
    assert_eq!(
        admission["main"][PARTITIONED].envs["NVIDIA_VISIBLE_DEVICES"],
        "MIG-of-c"
    );
    assert_eq!(
        ownership::read(&rig.data(), "c", "main")
            .unwrap()
            .map(|r| r.mig_uuid),
        Some("MIG-of-c".to_string()),
        "the record is written for it"
    );
    assert_eq!(rig.state().instances.len(), 2, "nothing made");

    // d's record names an instance that is gone: refused, twice, nothing made; its Pod's end
    // drops the record and destroys nothing.
    record_of(&rig, "d", 4, 3, 0, "MIG-gone");
    for _ in 0..2 {
        let refused = rig.admit("d", "1g.10gb").await.unwrap_err();
        assert_eq!(refused.code(), Code::FailedPrecondition);
        assert!(
            refused
                .message()
                .contains("GPU instance 3 (MIG-gone) is gone from GPU 4")
                && refused.message().contains("not re-created")
                && !refused.message().contains('\n'),
            "{}",
            refused.message()
        );
    }
    assert_eq!(rig.state().instances.len(), 2, "never re-created");
    rig.kubelet.delete("d");
    testing::wait_until("d's record dropped", || {
        ownership::read(&rig.data(), "d", "main").unwrap().is_none()
    })
    .await;
    assert_eq!(rig.state().instances.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_with_the_journal_lost_partitions_are_rebuilt_from_their_records() {
    let mut rig = Rig::new().await;
    let a = rig.admit("a", "3g.40gb").await.unwrap();
    let b = rig.admit("b", "1g.10gb").await.unwrap();
    rig.wait_healthy(49 + 2 + 2).await;
    let held_a = rig.kubelet.held("a", "main", PARTITIONED);
    let held_b = rig.kubelet.held("b", "main", PARTITIONED);
    rig.plugins.take().unwrap().stop().await;
    std::fs::remove_file(rig.data().join(accel_plugin::journal::FILE_NAME)).unwrap();
    // Meanwhile b's GPU instance was made again by hand: another UUID.
    let path = rig.dir.path().join("host").join(mig_replay::STATE_FILE);
    let mut state = rig.state();
    for i in &mut state.instances {
        for c in &mut i.compute_instances {
            if c.uuid == b {
                c.uuid = "MIG-someone-else".into();
            }
        }
    }
    state.save(&path).unwrap();
    rig.start_plugins().await;

    // a's partition is back in the ledger before any Allocate: its tokens and placement count.
    let ledger = rig.plugins().ledger();
    let grant = ledger
        .grant(&accel_core::ledger::GrantKey::new("a", "main"))
        .unwrap();
    assert_eq!(
        grant
            .partition
            .as_ref()
            .and_then(|p| p.instance.as_ref())
            .map(|i| i.uuid.as_str()),
        Some(a.as_str())
    );
    let mut sorted = held_a.clone();
    sorted.sort();
    assert_eq!(grant.device_ids, sorted);
    assert!(
        rig.plugins()
            .rebuild_notes()
            .iter()
            .any(|n| n.contains("from its ownership record")),
        "{:?}",
        rig.plugins().rebuild_notes()
    );
    // a's retry reuses it; b's fails closed, nothing is re-created.
    let until = tokio::time::Instant::now() + testing::WAIT;
    let again = loop {
        match rig.kubelet.allocate_raw(PARTITIONED, held_a.clone()).await {
            Err(e) if e.code() == Code::Unavailable && tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(
        again.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        a
    );
    let refused = rig
        .kubelet
        .allocate_raw(PARTITIONED, held_b)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Code::FailedPrecondition,
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("now carries MIG-someone-else")
            && refused.message().contains("not re-created"),
        "{}",
        refused.message()
    );
    assert_eq!(rig.state().instances.len(), 2, "nothing re-created");
    // a goes: its instance is reclaimed as usual; b goes: nothing of someone else's destroyed.
    rig.kubelet.delete("a");
    rig.kubelet.delete("b");
    wait_state(&rig, "a reclaimed", |s| !has_uuid(s, &a)).await;
    testing::wait_ledger(rig.plugins(), "all released", |ledger| {
        ledger.grants().is_empty()
    })
    .await;
    assert!(has_uuid(&rig.state(), "MIG-someone-else"));
    assert_eq!(ownership::read_all(&rig.data()), (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unowned_instances_count_in_the_tokens_and_the_capacity_keys() {
    let rig = Rig::with_orphans(Orphans {
        debounce: Duration::from_secs(600),
        period: Duration::from_millis(100),
    })
    .await;
    rig.wait_healthy(56).await;
    let profiles = |rig: &Rig| {
        let ledger = rig.plugins().ledger();
        accel_core::ledger::partitions::node_profiles(&accel_core::ledger::partitions::occupancies(
            &ledger,
        ))
    };
    // A claimable 3g on GPU 5 at 4-7; a 2g subdivided into two compute instances on GPU 6 at
    // 0-1; a 4g with no compute instance on GPU 7 at 0-3.
    carve(&rig, 5, "3g.40gb", 4, 4, &["MIG-hand-3g"], false);
    carve(
        &rig,
        6,
        "2g.20gb",
        0,
        2,
        &["MIG-split-0", "MIG-split-1"],
        false,
    );
    carve(&rig, 7, "4g.40gb", 0, 4, &[], false);
    // GPUs 0-4: 7 each. GPU 5: the claimable 3g + four 1g in 0-3. GPU 6: five 1g in 2-6.
    // GPU 7: three 1g in 4-6.
    rig.wait_healthy(35 + 5 + 5 + 3).await;
    let keys = profiles(&rig);
    assert_eq!(keys["1g.10gb"], 35 + 4 + 5 + 3, "{keys:?}");
    // GPU 5: the claimable one and start 0; GPU 6: start 4 only; GPU 7: start 4 only.
    assert_eq!(keys["3g.40gb"], 10 + 2 + 1 + 1, "{keys:?}");
    assert_eq!(keys["7g.80gb"], 5, "{keys:?}");
    // Claimed: counted once, as the grant.
    let uuid = rig.admit("a", "3g.40gb").await.unwrap();
    assert_eq!(uuid, "MIG-hand-3g");
    rig.wait_healthy(48).await;
    assert_eq!(profiles(&rig)["3g.40gb"], 14);
    // Reclaimed with its Pod: GPU 5 is whole again.
    rig.kubelet.delete("a");
    wait_state(&rig, "the claimed instance reclaimed", |s| {
        !has_uuid(s, "MIG-hand-3g")
    })
    .await;
    rig.wait_healthy(35 + 7 + 5 + 3).await;
    assert_eq!(profiles(&rig)["7g.80gb"], 6);
}

/// Found on the rig: the real kubelet offers the free tokens in no order, so a partition made on
/// GPU 0 was handed a token of GPU 6, and every restart said the kubelet's record disagreed with
/// the ledger. The emulator now offers them shuffled, as the kubelet does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_handed_tokens_of_other_gpus_survive_restarts() {
    let mut rig = Rig::new().await;
    rig.kubelet.shuffle_available(0x5eed);
    let uuid_of = |index: u32| rig.config.seats[index as usize].uuid.clone().unwrap();
    let mut foreign = 0;
    for (pod, profile) in [("a", "3g.40gb"), ("b", "3g.40gb"), ("c", "7g.80gb")] {
        rig.admit(pod, profile).await.unwrap();
        let record = ownership::read(&rig.data(), pod, "main").unwrap().unwrap();
        let token = rig.kubelet.held(pod, "main", PARTITIONED).remove(0);
        if !token.starts_with(&format!("{}::", uuid_of(record.gpu_index.unwrap()))) {
            foreign += 1;
        }
    }
    assert!(
        foreign >= 2,
        "the shuffle handed tokens of other GPUs ({foreign} of 3)"
    );
    let placed = |rig: &Rig| -> BTreeMap<String, Vec<u32>> {
        rig.plugins()
            .ledger()
            .grants()
            .iter()
            .map(|(k, g)| (k.pod_uid.clone(), g.accelerators.clone()))
            .collect()
    };
    let before = placed(&rig);
    assert_eq!(before["a"], [0]);
    assert_eq!(before["b"], [0]);
    assert_eq!(before["c"], [1]);

    // A restart: the kubelet's record agrees with the journal's ledger.
    rig.restart_plugins().await;
    assert_eq!(placed(&rig), before);
    let notes = rig.plugins().rebuild_notes();
    assert!(notes.is_empty(), "{notes:?}");

    // A restart with the journal lost: rebuilt on the GPUs the records name, not the tokens'.
    rig.plugins.take().unwrap().stop().await;
    std::fs::remove_file(rig.data().join(accel_plugin::journal::FILE_NAME)).unwrap();
    rig.start_plugins().await;
    assert_eq!(placed(&rig), before);
    let notes = rig.plugins().rebuild_notes();
    assert!(
        notes
            .iter()
            .all(|n| n.contains("from its ownership record")),
        "{notes:?}"
    );
    // The next one is placed beside them, nothing overlapping.
    rig.admit("d", "1g.10gb").await.unwrap();
    let d = ownership::read(&rig.data(), "d", "main").unwrap().unwrap();
    assert_eq!(
        (d.gpu_index.unwrap(), d.start),
        (2, 0),
        "GPUs 0 and 1 are full"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_unowned_instance_is_never_handed_to_a_container() {
    let rig = Rig::with_orphans(Orphans {
        debounce: Duration::from_secs(600),
        period: Duration::from_millis(100),
    })
    .await;
    // A 3g carved on GPU 5 with somebody's process running on it.
    carve(&rig, 5, "3g.40gb", 4, 4, &["MIG-hand-busy"], true);
    // GPU 5: no token for it, four 1g fit in 0-3.
    rig.wait_healthy(49 + 4).await;
    let made = rig.admit("a", "3g.40gb").await.unwrap();
    assert_ne!(
        made, "MIG-hand-busy",
        "somebody's running work is not handed out"
    );
    let a = ownership::read(&rig.data(), "a", "main").unwrap().unwrap();
    assert_eq!(
        (a.gpu_index.unwrap(), a.start),
        (5, 0),
        "packed beside it on the most occupied GPU"
    );
    // Its process ends: the next container asking for a 3g is handed it.
    set_busy(&rig, false);
    // GPU 5: a's grant + the claimable one; the other seven whole.
    rig.wait_healthy(49 + 2).await;
    assert_eq!(rig.admit("b", "3g.40gb").await.unwrap(), "MIG-hand-busy");
}

/// A ResourceClaim's MIG partition: the profile at the placement the scheduler allocated.
fn mig_claim(
    uid: &str,
    index: u32,
    profile: &str,
    start: u32,
) -> accel_plugin::service::ClaimGrant {
    testing::partition_claim("nvidia.gpustack.ai", "gpu", uid, index, profile, start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_partition_is_made_where_allocated_shares_the_ledger_and_is_destroyed_at_release()
{
    let mut rig = Rig::new().await;
    rig.wait_healthy(56).await;
    let handle = rig.plugins().handle();
    // The scheduler placed a 3g.40gb at memory slice 4 of GPU 2: it is made exactly there (the
    // device plugin's own choice would have been GPU 0, slice 0).
    let injection = handle
        .grant_claim(&mig_claim("c1", 2, "3g.40gb", 4))
        .await
        .unwrap();
    let uuid = injection.envs["NVIDIA_VISIBLE_DEVICES"].clone();
    assert!(uuid.starts_with("MIG-"), "{uuid}");
    let state = rig.state();
    assert_eq!(placements(&state), [(2, 4, "3g.40gb".to_string())]);
    assert_eq!(state.instances[0].compute_instances[0].uuid, uuid);
    // Its slices are taken, and it is no token of the kubelet's: GPU 2 keeps room for four
    // 1g.10gb (slices 0–3), so the pool has 49 + 4 Healthy tokens.
    rig.wait_healthy(53).await;
    let ledger = rig.plugins().ledger();
    let (key, grant) = ledger
        .grants()
        .iter()
        .find(|(k, _)| k.claim_uid() == Some("c1"))
        .map(|(k, g)| (k.clone(), g.clone()))
        .expect("the claim's grant");
    assert_eq!(grant.family, Family::Partitioned);
    assert_eq!(grant.resource, "nvidia.gpustack.ai");
    let placement = grant.partition.clone().unwrap();
    assert_eq!((placement.start, placement.size), (4, 4));
    assert_eq!(placement.instance.unwrap().uuid, uuid);
    // Durable as a container's partition: the ownership record under the claim's key.
    let record = ownership::read(&rig.data(), &key.pod_uid, &key.container)
        .unwrap()
        .expect("the claim's ownership record");
    assert_eq!((record.start, record.mig_uuid.as_str()), (4, uuid.as_str()));
    // A retried prepare is answered with the same instance; nothing more is made.
    let again = handle
        .grant_claim(&mig_claim("c1", 2, "3g.40gb", 4))
        .await
        .unwrap();
    assert_eq!(again.envs["NVIDIA_VISIBLE_DEVICES"], uuid);
    assert_eq!(rig.state().instances.len(), 1);
    // An overlapping placement is refused by the one ledger, and nothing is made.
    let refused = handle
        .grant_claim(&mig_claim("c2", 2, "1g.10gb", 5))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("the ledger refused ResourceClaim c2:"),
        "{refused}"
    );
    assert_eq!(rig.state().instances.len(), 1);
    // A container's partition packs beside it (GPU 2 is the most occupied), never over it.
    let container = rig.admit("a", "3g.40gb").await.unwrap();
    assert_ne!(container, uuid);
    assert_eq!(
        placements(&rig.state()),
        [(2, 0, "3g.40gb".to_string()), (2, 4, "3g.40gb".to_string())]
    );
    rig.wait_healthy(50).await;
    // A restart finds the claim's partition in the journal.
    rig.restart_plugins().await;
    let handle = rig.plugins().handle();
    assert_eq!(handle.claim_uids(), ["c1".to_string()].into());
    rig.wait_healthy(50).await;
    // Released (unprepare): the instance destroyed, then the grant and the record.
    assert!(handle.release_claim("c1").await);
    assert_eq!(placements(&rig.state()), [(2, 0, "3g.40gb".to_string())]);
    assert!(handle.claim_uids().is_empty());
    assert!(
        ownership::read(&rig.data(), &key.pod_uid, &key.container)
            .unwrap()
            .is_none()
    );
    assert!(!handle.release_claim("c1").await);
    rig.wait_healthy(53).await;
}
