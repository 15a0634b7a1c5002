//! Scenario tests over real unix sockets: the plugin against the kubelet emulator, one test per
//! behaviour seed 000 states, plus the bad inputs.

use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::inventory::Grantable;
use accel_core::ledger::annotation;
use accel_core::ledger::{Family, GrantKey, Mode, Seat};
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::pods::{MemoryPods, Pod, PodSource};
use accel_plugin::service::Offer;
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, Kubelet, gpu_uuid as uuid, pod, seat};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/nvidia.visibility";

fn seats(n: u32) -> Vec<Seat> {
    (0..n).map(seat).collect()
}

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: Option<DevicePlugins>,
    config: Config,
}

impl Rig {
    async fn new(seats: Vec<Seat>, settings: Settings) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings,
            offer: Offer::of(Manufacturer::Nvidia),
            seats,
            responder: Arc::new(NvidiaResponder {
                strategy: InjectionStrategy::Envvar,
                cuda_major: Some(13),
                pod_dir_root: dir.path().join("data/pods"),
                preload_dir: dir.path().join("data/preload"),
                library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
                engine: std::sync::Arc::new(EngineFacts::default()),
            }),
            poll_interval: Duration::from_millis(20),
            partitions: None,
            metrics: Default::default(),
        };
        let mut rig = Rig {
            dir,
            kubelet,
            plugins: None,
            config,
        };
        rig.start_plugins().await;
        rig
    }

    async fn start_plugins(&mut self) {
        let pods = Arc::new(self.kubelet.pods().clone());
        let plugins = DevicePlugins::start(self.config.clone(), pods)
            .await
            .unwrap();
        let resources = plugins.resources();
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        self.kubelet.wait_for(&names).await;
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
}

fn env<'a>(
    admission: &'a accel_plugin::testing::Admission,
    container: &str,
    resource: &str,
    key: &str,
) -> &'a str {
    admission[container][resource].envs[key].as_str()
}

#[tokio::test]
async fn exclusive_grant_end_to_end_and_other_modes_turn_unhealthy() {
    let rig = Rig::new(seats(8), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "2")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    // NUMA 0 holds four free accelerators; the set stays on it.
    assert_eq!(
        env(&admission, "main", GPU, "NVIDIA_VISIBLE_DEVICES"),
        format!("{},{}", uuid(0), uuid(1))
    );
    let ledger = rig.plugins().ledger();
    assert_eq!(
        ledger.occupancy(0).unwrap().mode,
        Mode::Held(Family::Exclusive)
    );
    let held = uuid(0);
    rig.kubelet
        .wait_devices(SHARED, |d| {
            d.iter()
                .filter(|t| t.id.starts_with(&held))
                .all(|t| t.health == "Unhealthy")
        })
        .await;
    let devices = rig.kubelet.devices(GPU);
    assert!(devices.iter().all(|d| d.health == "Healthy"));
    assert_eq!(devices[0].topology.as_ref().unwrap().nodes[0].id, 0);
    assert_eq!(devices[7].topology.as_ref().unwrap().nodes[0].id, 1);
}

#[tokio::test]
async fn two_slices_created_in_the_same_second_bound_in_the_other_order_keep_their_limits() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    let slice = |pct: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            (SLICED, "1"),
            ("nvidia.com/gpu.sliced.memory-percentage", pct),
        ]
    };
    let (a, b) = (slice("25"), slice("50"));
    rig.kubelet.create(pod("a", 100, &[("main", &a)]));
    rig.kubelet.create(pod("b", 100, &[("main", &b)]));
    // The kubelet binds b first; our own matching would have taken a (same second, name first).
    let for_b = rig.kubelet.admit("b").await.unwrap();
    let for_a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        env(&for_b, "main", SLICED, "CUDA_DEVICE_MEMORY_LIMIT_0"),
        "40779m"
    );
    assert_eq!(
        env(&for_a, "main", SLICED, "CUDA_DEVICE_MEMORY_LIMIT_0"),
        "20389m"
    );
    assert_eq!(env(&for_a, "main", SLICED, "CUDA_DEVICE_SM_LIMIT"), "100");
    assert_eq!(
        env(&for_a, "main", SLICED, "CUDA_DEVICE_ORDER"),
        "PCI_BUS_ID"
    );
    assert_eq!(env(&for_a, "main", SLICED, "LIBCUDA_LOG_LEVEL"), "0");
    let mounts = &for_a["main"][SLICED].mounts;
    assert!(
        mounts
            .iter()
            .any(|m| m.container_path == "/etc/ld.so.preload")
    );
    assert!(mounts.iter().any(|m| m.host_path.ends_with("/data/pods/a")));
    assert_eq!(
        rig.plugins().ledger().occupancy(0).unwrap().used_units,
        1_200_000
    );
}

#[tokio::test]
async fn without_the_kubelet_lookup_same_second_slices_are_matched_oldest_first() {
    let settings = Settings {
        identify_by_kubelet: false,
        ..Settings::default()
    };
    let rig = Rig::new(seats(1), settings).await;
    let a = [
        (SLICED, "1"),
        ("nvidia.com/gpu.sliced.memory-percentage", "25"),
    ];
    let b = [
        (SLICED, "1"),
        ("nvidia.com/gpu.sliced.memory-percentage", "50"),
    ];
    rig.kubelet.create(pod("a", 100, &[("main", &a)]));
    rig.kubelet.create(pod("b", 100, &[("main", &b)]));
    // The seed's hazard, shown: b's call is recorded on a.
    let for_b = rig.kubelet.admit("b").await.unwrap();
    assert_eq!(
        env(&for_b, "main", SLICED, "CUDA_DEVICE_MEMORY_LIMIT_0"),
        "20389m"
    );
}

#[tokio::test]
async fn shared_two_on_a_one_accelerator_node_is_refused() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    rig.kubelet
        .create(pod("a", 1, &[("main", &[(SHARED, "2")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("was assigned twice: a shared grant of N is N distinct accelerators"),
        "{}",
        err.message()
    );
    assert!(rig.plugins().ledger().grants().is_empty());
}

#[tokio::test]
async fn an_exclusive_tenant_blocks_a_slice_on_every_path() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet
        .wait_devices(SLICED, |d| d.iter().all(|t| t.health == "Unhealthy"))
        .await;
    // The kubelet's path: no healthy slice token.
    rig.kubelet
        .create(pod("b", 2, &[("main", &[(SLICED, "1")])]));
    let err = rig.kubelet.admit("b").await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    // A kubelet that allocates anyway (a stale view): the ledger refuses.
    rig.kubelet
        .create(pod("c", 3, &[("main", &[(SLICED, "1")])]));
    let err = rig
        .kubelet
        .allocate_raw(SLICED, vec![format!("{}::0", uuid(0))])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("is held exclusive; a sliced grant cannot use it"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn a_retried_allocate_is_not_charged_twice() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    let limits = [
        (SLICED, "1"),
        ("nvidia.com/gpu.sliced.memory-percentage", "30"),
    ];
    rig.kubelet.create(pod("a", 1, &[("main", &limits)]));
    let first = rig.kubelet.admit("a").await.unwrap();
    let ids = rig.kubelet.held("a", "main", SLICED);
    let again = rig.kubelet.allocate_raw(SLICED, ids).await.unwrap();
    assert_eq!(again.container_responses[0], first["main"][SLICED]);
    let ledger = rig.plugins().ledger();
    assert_eq!(ledger.occupancy(0).unwrap().slices, 1);
    assert_eq!(ledger.occupancy(0).unwrap().used_units, 480_000);
}

#[tokio::test]
async fn a_finished_pod_frees_its_slice() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    let whole = [
        (SLICED, "1"),
        ("nvidia.com/gpu.sliced.memory-percentage", "100"),
    ];
    rig.kubelet.create(pod("a", 1, &[("main", &whole)]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.create(pod("b", 2, &[("main", &whole)]));
    let err = rig.kubelet.admit("b").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("units left; the slice needs 1600000"),
        "{}",
        err.message()
    );
    rig.kubelet.finish("a");
    testing::wait_ledger(
        rig.plugins(),
        "a's slice uncharged once it finished",
        |ledger| ledger.occupancy(0).unwrap().used_units == 0,
    )
    .await;
    // b is handed the very token a held; it is b's grant, not a retry of a's.
    rig.kubelet.admit("b").await.unwrap();
    assert_eq!(
        rig.kubelet.held("b", "main", SLICED),
        vec![format!("{}::0", uuid(0))]
    );
    assert!(
        rig.plugins()
            .ledger()
            .grants()
            .keys()
            .any(|k| k.pod_uid == "b")
    );
    // Deleting the finished Pod drops its grant and reclaims its working directory.
    assert!(rig.dir.path().join("data/pods/a").is_dir());
    rig.kubelet.delete("a");
    testing::wait_released(rig.plugins(), "a").await;
    testing::wait_until("Pod a's working directory reclaimed", || {
        !rig.dir.path().join("data/pods/a").exists()
    })
    .await;
    assert_eq!(rig.plugins().ledger().grants().len(), 1, "b's grant stays");
}

#[tokio::test]
async fn a_responder_refusal_gives_the_grant_back() {
    let mut nameless = seats(1);
    nameless[0].uuid = None;
    let rig = Rig::new(nameless, Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("accelerator 0 has no UUID"),
        "{}",
        err.message()
    );
    let ledger = rig.plugins().ledger();
    assert!(ledger.grants().is_empty());
    assert_eq!(ledger.occupancy(0).unwrap().mode, Mode::Free);
    let journal = std::fs::read(rig.dir.path().join("data/ledger.journal")).unwrap();
    let (entries, _) = accel_plugin::journal::written_part(&journal);
    assert!(entries.is_empty(), "{}", String::from_utf8_lossy(entries));
}

#[tokio::test]
async fn the_sidecar_finds_its_owners_accelerators_after_a_restart() {
    let mut rig = Rig::new(seats(4), Settings::default()).await;
    rig.kubelet.create(pod(
        "a",
        1,
        &[("main", &[(GPU, "2")]), ("sshd", &[(VISIBILITY, "2")])],
    ));
    rig.kubelet.admit_only("a", &["main"]).await.unwrap();
    rig.restart_plugins().await;
    let admission = rig.kubelet.admit_only("a", &["sshd"]).await.unwrap();
    assert_eq!(
        env(&admission, "sshd", VISIBILITY, "NVIDIA_VISIBLE_DEVICES"),
        format!("{},{}", uuid(0), uuid(1))
    );
    // The sidecar took no ledger capacity.
    assert_eq!(rig.plugins().ledger().grants().len(), 1);
}

#[tokio::test]
async fn grants_survive_a_plugin_restart_and_a_corrupt_journal_is_rebuilt_from_the_kubelet() {
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.restart_plugins().await;
    assert_eq!(rig.plugins().ledger().grants().len(), 1);
    // A restart charged nothing twice: the other accelerator is still free.
    assert_eq!(
        rig.plugins().ledger().occupancy(1).unwrap().mode,
        Mode::Free
    );

    rig.plugins.take().unwrap().stop().await;
    std::fs::write(
        rig.dir.path().join("data/ledger.journal"),
        "{not json\n{}\n",
    )
    .unwrap();
    rig.start_plugins().await;
    let ledger = rig.plugins().ledger();
    assert_eq!(ledger.grants().len(), 1, "rebuilt from pod-resources");
    assert_eq!(
        ledger.occupancy(0).unwrap().mode,
        Mode::Held(Family::Exclusive)
    );
    let aside: Vec<_> = std::fs::read_dir(rig.dir.path().join("data"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
}

#[tokio::test]
async fn unknown_device_ids_and_empty_requests_are_invalid() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    let err = rig
        .kubelet
        .allocate_raw(GPU, vec!["GPU-nope".into()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "unknown device ID \"GPU-nope\" for nvidia.com/gpu"
    );
    let err = rig.kubelet.allocate_raw(GPU, vec![]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "allocate for nvidia.com/gpu names no device IDs"
    );
    assert!(rig.plugins().ledger().grants().is_empty());
}

#[tokio::test]
async fn a_vanished_kubelet_is_waited_for_and_a_restarted_one_registered_with_again() {
    let mut rig = Rig::new(seats(1), Settings::default()).await;
    rig.kubelet.vanish().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    rig.kubelet.restart().await;
    rig.kubelet
        .wait_for(&[GPU, SHARED, SLICED, VISIBILITY])
        .await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
}

#[tokio::test]
async fn marking_an_accelerator_unhealthy_flips_its_tokens() {
    let rig = Rig::new(seats(2), Settings::default()).await;
    rig.plugins().set_accelerator_health(1, false);
    let sick = uuid(1);
    rig.kubelet
        .wait_devices(GPU, |d| {
            d.iter().any(|t| t.id == sick && t.health == "Unhealthy")
                && d.iter().any(|t| t.id != sick && t.health == "Healthy")
        })
        .await;
    rig.plugins().set_accelerator_health(1, true);
    rig.kubelet
        .wait_devices(GPU, |d| d.iter().all(|t| t.health == "Healthy"))
        .await;
}

/// The Pod as the API server holds it now, with its `accelerator.allocated` annotation set to
/// what the ledger records for it (as the cluster publisher writes it).
fn annotate(rig: &Rig, uid: &str, ledger: &accel_core::ledger::Ledger) {
    let mut pod = rig
        .kubelet
        .pods()
        .pods()
        .unwrap()
        .into_iter()
        .find(|p| p.uid == uid)
        .unwrap();
    pod.allocated = Some(annotation::render(&annotation::for_pod(
        uid,
        ledger.grants(),
    )));
    rig.kubelet.pods().upsert(pod);
}

fn set_annotation(rig: &Rig, uid: &str, value: &str) {
    let mut pod = rig
        .kubelet
        .pods()
        .pods()
        .unwrap()
        .into_iter()
        .find(|p| p.uid == uid)
        .unwrap();
    pod.allocated = Some(value.to_string());
    rig.kubelet.pods().upsert(pod);
}

fn lose_the_journal(rig: &Rig) {
    std::fs::remove_file(rig.dir.path().join("data/ledger.journal")).unwrap();
}

#[tokio::test]
async fn a_lost_journal_is_rebuilt_from_the_pods_annotations() {
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    let before = rig.plugins().ledger();
    annotate(&rig, "a", &before);
    rig.plugins.take().unwrap().stop().await;
    lose_the_journal(&rig);
    rig.start_plugins().await;
    let ledger = rig.plugins().ledger();
    assert_eq!(ledger.grants(), before.grants());
    let notes = rig.plugins().rebuild_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("pod ns/pod-a container main: restored nvidia.com/gpu")
            && notes[0]
                .ends_with("from its accelerator.allocated annotation (the journal lacked it)"),
        "{notes:?}"
    );
    // Made durable again: a second restart finds it in the journal, and says nothing.
    rig.restart_plugins().await;
    assert_eq!(rig.plugins().ledger().grants(), before.grants());
    assert!(rig.plugins().rebuild_notes().is_empty());
}

#[tokio::test]
async fn the_sidecar_finds_its_owners_accelerators_from_the_annotation_after_the_journal_is_lost() {
    let mut rig = Rig::new(seats(4), Settings::default()).await;
    rig.kubelet.create(pod(
        "a",
        1,
        &[("main", &[(GPU, "2")]), ("sshd", &[(VISIBILITY, "2")])],
    ));
    rig.kubelet.admit_only("a", &["main"]).await.unwrap();
    let held = rig.kubelet.held("a", "main", GPU);
    annotate(&rig, "a", &rig.plugins().ledger());
    rig.plugins.take().unwrap().stop().await;
    lose_the_journal(&rig);
    rig.start_plugins().await;
    assert!(
        rig.plugins()
            .rebuild_notes()
            .iter()
            .any(|n| n.contains("from its accelerator.allocated annotation")),
        "{:?}",
        rig.plugins().rebuild_notes()
    );
    let admission = rig.kubelet.admit_only("a", &["sshd"]).await.unwrap();
    let mut expected = held.clone();
    expected.sort();
    assert_eq!(
        env(&admission, "sshd", VISIBILITY, "NVIDIA_VISIBLE_DEVICES"),
        expected.join(",")
    );
}

#[tokio::test]
async fn a_disagreement_keeps_the_journals_grant_and_names_the_pod() {
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.create(pod("b", 2, &[("main", &[(GPU, "1")])]));
    let held = rig.kubelet.held("a", "main", GPU);
    let journal = rig.plugins().ledger();
    // The annotation says pod a holds the other accelerator.
    let mut wrong = annotation::for_pod("a", journal.grants());
    let grant = wrong.get_mut("main").unwrap();
    let other = if held[0] == uuid(0) { 1 } else { 0 };
    grant.device_ids = vec![uuid(other)];
    grant.accelerators = vec![other];
    set_annotation(&rig, "a", &annotation::render(&wrong));
    // Pod b's annotation is not a map of container name to grant.
    set_annotation(&rig, "b", r#"{"main":"GPU-0"}"#);
    rig.restart_plugins().await;
    assert_eq!(rig.plugins().ledger().grants(), journal.grants());
    let notes = rig.plugins().rebuild_notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes.iter().any(|n| n.starts_with(
            "pod ns/pod-a container main: its accelerator.allocated annotation records"
        ) && n.ends_with("keeping the ledger's")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with(
            "pod ns/pod-b: UNREADABLE ANNOTATION, not used to rebuild the ledger: annotation device.gpustack.ai/accelerator.allocated: "
        )),
        "{notes:?}"
    );
}

#[tokio::test]
async fn replacing_the_seats_follows_the_accelerators_and_drops_grants_on_those_that_went() {
    let rig = Rig::new(seats(3), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.create(pod("b", 2, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("b").await.unwrap();
    rig.kubelet
        .create(pod("c", 3, &[("main", &[(SHARED, "1")])]));
    rig.kubelet.admit("c").await.unwrap();
    let on = |uid: &str, resource: &str| -> u32 {
        let id = rig.kubelet.held(uid, "main", resource)[0].clone();
        (0..3).find(|i| id.starts_with(&uuid(*i))).unwrap()
    };
    let (a, b, c) = (on("a", GPU), on("b", GPU), on("c", SHARED));
    // a's accelerator vanishes; b's enters MIG mode; c's stays, renumbered to index 0.
    let mut next = seats(3);
    next[b as usize].grantable = Grantable::PartitionsOnly;
    next.remove(a as usize);
    for (i, seat) in next.iter_mut().enumerate() {
        seat.index = i as u32;
    }
    let dropped = rig.plugins().handle().replace_seats(next.clone());
    let mut who: Vec<(Option<String>, String)> = dropped
        .iter()
        .map(|d| (d.pod.clone(), d.reason.clone()))
        .collect();
    who.sort();
    assert_eq!(
        who,
        [
            (
                Some("ns/pod-a".to_string()),
                format!("accelerator {a} ({}) is gone", uuid(a))
            ),
            (
                Some("ns/pod-b".to_string()),
                format!(
                    "accelerator {b} ({}) can no longer be granted whole (PartitionsOnly)",
                    uuid(b)
                )
            ),
        ]
    );
    let ledger = rig.plugins().ledger();
    assert_eq!(ledger.grants().len(), 1);
    let kept = ledger.grants().values().next().unwrap();
    let now = next.iter().find(|s| s.uuid == Some(uuid(c))).unwrap().index;
    assert_eq!(kept.accelerators, vec![now]);
    // Only c's accelerator feeds the pools now.
    rig.kubelet
        .wait_devices(GPU, |d| d.len() == 1 && d[0].id == uuid(c))
        .await;
    rig.kubelet.wait_devices(SHARED, |d| d.len() == 10).await;
    // The release is durable: a restart does not bring the dropped grants back.
    let journal = std::fs::read_to_string(rig.dir.path().join("data/ledger.journal")).unwrap();
    assert_eq!(
        journal.matches("\"op\":\"release\"").count(),
        2,
        "{journal}"
    );
    // Every accelerator gone: no token at all, and no grant.
    let dropped = rig.plugins().handle().replace_seats(Vec::new());
    assert_eq!(dropped.len(), 1);
    rig.kubelet.wait_devices(GPU, <[_]>::is_empty).await;
    rig.kubelet.wait_devices(SHARED, <[_]>::is_empty).await;
    assert!(rig.plugins().ledger().grants().is_empty());
}

/// A Pod source that has not synced until opened (the API server's watch at start).
struct Unsynced {
    pods: MemoryPods,
    open: std::sync::atomic::AtomicBool,
}

impl PodSource for Unsynced {
    fn pods(&self) -> Option<Vec<Pod>> {
        if self.open.load(std::sync::atomic::Ordering::SeqCst) {
            self.pods.pods()
        } else {
            None
        }
    }

    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pods.changes()
    }
}

#[tokio::test]
async fn the_annotations_are_read_when_the_pods_first_sync_after_start() {
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    let before = rig.plugins().ledger();
    annotate(&rig, "a", &before);
    rig.plugins.take().unwrap().stop().await;
    lose_the_journal(&rig);
    let source = Arc::new(Unsynced {
        pods: rig.kubelet.pods().clone(),
        open: std::sync::atomic::AtomicBool::new(false),
    });
    let plugins = DevicePlugins::start(rig.config.clone(), source.clone())
        .await
        .unwrap();
    assert!(plugins.ledger().grants().is_empty(), "nothing known yet");
    // The watch syncs.
    source.open.store(true, std::sync::atomic::Ordering::SeqCst);
    annotate(&rig, "a", &before);
    testing::wait_ledger(
        &plugins,
        "a's grant rebuilt from its annotation once the Pods synced",
        |ledger| ledger.grants() == before.grants(),
    )
    .await;
    assert!(
        plugins.rebuild_notes()[0].contains("from its accelerator.allocated annotation"),
        "{:?}",
        plugins.rebuild_notes()
    );
    plugins.stop().await;
}

/// A restart finds a grant the journal holds unattributed (answered before its container was
/// named, the daemon stopped before the kubelet named it): the kubelet's record names it at
/// start, nothing is charged twice, and a grant nobody holds any more is released.
#[tokio::test]
async fn a_restart_names_the_grants_the_journal_holds_unattributed() {
    use accel_plugin::journal::{Entry, FILE_NAME, replay_bytes};
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    rig.kubelet.admit("a").await.unwrap();
    rig.plugins().verify_grants().await;
    rig.plugins.take().unwrap().stop().await;
    // The journal as a daemon stopped right after its answer would have left it: a's grant
    // unattributed, and one more on the other GPU that nobody holds (its Pod's admission
    // failed after the answer).
    let journal = rig.dir.path().join("data").join(FILE_NAME);
    let (grants, _) = replay_bytes(&std::fs::read(&journal).unwrap()).unwrap();
    let a = grants[&GrantKey::new("a", "main")].clone();
    let mut orphan = a.clone();
    orphan.device_ids = vec![uuid(1)];
    orphan.accelerators = vec![1];
    let mut text = String::new();
    for (key, grant) in [
        (GrantKey::unattributed(GPU, &a.device_ids), a.clone()),
        (GrantKey::unattributed(GPU, &orphan.device_ids), orphan),
    ] {
        text.push_str(&serde_json::to_string(&Entry::Grant { key, grant }).unwrap());
        text.push('\n');
    }
    std::fs::write(&journal, text).unwrap();
    rig.start_plugins().await;
    rig.plugins().verify_grants().await;
    rig.plugins().reconcile_pods();
    let ledger = rig.plugins().ledger();
    assert_eq!(
        ledger.grants().keys().cloned().collect::<Vec<_>>(),
        vec![GrantKey::new("a", "main")],
        "named from the kubelet's record; the one nobody holds released"
    );
    assert_eq!(
        ledger.grants()[&GrantKey::new("a", "main")].device_ids,
        a.device_ids
    );
    assert_eq!(ledger.occupancy(1).unwrap().mode, Mode::Free);
    ledger.verify().unwrap();
}

#[tokio::test]
async fn auto_injection_follows_a_cdi_spec_generated_after_the_plugins_started() {
    use accel_nvidia::engine::LiveEngine;
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    // A node whose engine resolves CDI, before the toolkit has generated the vendor spec.
    let host = rig.dir.path().join("host");
    std::fs::create_dir_all(host.join("etc/containerd")).unwrap();
    std::fs::write(
        host.join("etc/containerd/config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n",
    )
    .unwrap();
    let engine = LiveEngine::new(Arc::new(accel_host::FsHost::new(&host)), "/etc/containerd");
    rig.config.responder = Arc::new(NvidiaResponder {
        strategy: InjectionStrategy::Auto,
        cuda_major: Some(13),
        pod_dir_root: rig.dir.path().join("data/pods"),
        preload_dir: rig.dir.path().join("data/preload"),
        library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
        engine: Arc::new(engine),
    });
    rig.restart_plugins().await;
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    let first = rig.kubelet.admit("a").await.unwrap();
    let granted = env(&first, "main", GPU, "NVIDIA_VISIBLE_DEVICES").to_string();
    assert!(first["main"][GPU].annotations.is_empty());
    // The toolkit writes the vendor spec naming both GPUs.
    std::fs::create_dir_all(host.join("etc/cdi")).unwrap();
    let spec = format!(
        "{{\"cdiVersion\":\"0.5.0\",\"kind\":\"nvidia.com/gpu\",\"devices\":[{{\"name\":\"{}\"}},{{\"name\":\"{}\"}}]}}",
        uuid(0),
        uuid(1)
    );
    std::fs::write(host.join("etc/cdi/nvidia.json"), spec).unwrap();
    rig.kubelet.create(pod("b", 2, &[("main", &[(GPU, "1")])]));
    let second = rig.kubelet.admit("b").await.unwrap();
    let answer = &second["main"][GPU];
    assert!(
        !answer.envs.contains_key("NVIDIA_VISIBLE_DEVICES"),
        "{answer:?}"
    );
    let other = if granted == uuid(0) { uuid(1) } else { uuid(0) };
    assert_eq!(
        answer.annotations["cdi.k8s.io/gpustack-nvidia"],
        format!("nvidia.com/gpu={other}")
    );
}

fn claim_on(index: u32, uid: &str) -> accel_plugin::service::ClaimGrant {
    accel_plugin::service::ClaimGrant {
        claim_uid: uid.into(),
        pod: pod("claimer", 1, &[("main", &[])]),
        driver: "nvidia.gpustack.ai".into(),
        devices: vec![format!("gpu-{index}")],
        accelerators: vec![index],
        slice: None,
        partition: None,
    }
}

#[tokio::test]
async fn a_claims_card_is_never_granted_to_a_container_and_the_reverse_across_a_restart() {
    let mut rig = Rig::new(seats(2), Settings::default()).await;
    // DRA takes card 0: the responder's answer for it, charged and journalled.
    let handle = rig.plugins().handle();
    let injection = handle.grant_claim(&claim_on(0, "claim-1")).await.unwrap();
    assert_eq!(injection.envs["NVIDIA_VISIBLE_DEVICES"], uuid(0));
    // Its every token turns Unhealthy for the kubelet, the exclusive one too.
    let held = uuid(0);
    for resource in [GPU, SHARED, SLICED] {
        rig.kubelet
            .wait_devices(resource, |d| {
                d.iter()
                    .filter(|t| t.id.starts_with(&held))
                    .all(|t| t.health == "Unhealthy")
            })
            .await;
    }
    // A kubelet that allocates it anyway is refused by the one ledger.
    rig.kubelet.create(pod("a", 1, &[("main", &[(GPU, "1")])]));
    let err = rig
        .kubelet
        .allocate_raw(GPU, vec![uuid(0)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    // The kubelet's own path takes card 1, which DRA then cannot have.
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        env(&admission, "main", GPU, "NVIDIA_VISIBLE_DEVICES"),
        uuid(1)
    );
    let refused = handle
        .grant_claim(&claim_on(1, "claim-2"))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("the ledger refused ResourceClaim claim-2: accelerator 1"),
        "{refused}"
    );
    // A restart finds the claim in the journal: card 0 stays DRA's, and a retried prepare is
    // answered without a second charge.
    rig.restart_plugins().await;
    let handle = rig.plugins().handle();
    assert_eq!(handle.claim_uids(), ["claim-1".to_string()].into());
    rig.kubelet
        .wait_devices(GPU, |d| {
            d.iter()
                .any(|t| t.id.starts_with(&held) && t.health == "Unhealthy")
        })
        .await;
    handle.grant_claim(&claim_on(0, "claim-1")).await.unwrap();
    assert_eq!(rig.plugins().ledger().occupancy(0).unwrap().holders, 1);
    // Released (unprepare): the card is the kubelet's again.
    assert!(handle.release_claim("claim-1").await);
    assert!(!handle.release_claim("claim-1").await);
    rig.kubelet
        .wait_devices(GPU, |d| d.iter().all(|t| t.health == "Healthy"))
        .await;
    rig.restart_plugins().await;
    assert!(rig.plugins().handle().claim_uids().is_empty());
}

#[tokio::test]
async fn claims_slice_a_card_by_consumed_capacity_and_a_whole_claim_waits_for_it() {
    let rig = Rig::new(seats(1), Settings::default()).await;
    let handle = rig.plugins().handle();
    let slice = |uid: &str, mib: u64, cores: Option<u32>| accel_plugin::service::ClaimGrant {
        slice: Some(accel_plugin::service::ClaimSlice {
            memory_mib: mib,
            cores_percentage: cores,
        }),
        devices: vec![format!("gpu-0/{uid}-share")],
        ..claim_on(0, uid)
    };
    let injection = handle
        .grant_claim(&slice("s-1", 20_000, Some(30)))
        .await
        .unwrap();
    // The responder's sliced answer: the memory limit and compute cap the preload library reads.
    assert_eq!(injection.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "20000m");
    assert_eq!(injection.envs["CUDA_DEVICE_SM_LIMIT"], "30");
    handle
        .grant_claim(&slice("s-2", 40_000, None))
        .await
        .unwrap();
    let ledger = rig.plugins().ledger();
    let grant = ledger.grant(&GrantKey::claim("s-1", "claimer")).unwrap();
    assert_eq!(grant.family, Family::Sliced);
    assert_eq!(grant.cores_percentage, Some(30));
    assert_eq!(ledger.occupancy(0).unwrap().slices, 2);
    assert_eq!(
        ledger.occupancy(0).unwrap().mode,
        Mode::Held(Family::Sliced)
    );
    // A claim that consumed all the memory is the whole card: refused while slices hold it.
    let whole = handle
        .grant_claim(&slice("w-1", 81_559, None))
        .await
        .unwrap_err();
    assert_eq!(
        whole.to_string(),
        format!(
            "the ledger refused ResourceClaim w-1: accelerator 0 ({}) is held sliced; a exclusive grant cannot use it",
            uuid(0)
        )
    );
    assert_eq!(
        rig.plugins()
            .ledger()
            .grant(&GrantKey::claim("w-1", "claimer")),
        None,
        "nothing charged for a refusal"
    );
    // The card's device-plugin slice tokens are the claims' too.
    let held = uuid(0);
    rig.kubelet
        .wait_devices(SLICED, |d| {
            d.iter()
                .filter(|t| t.id.starts_with(&held))
                .all(|t| t.health == "Unhealthy")
        })
        .await;
    // The slices' working directory for their Pod (the shared cache) goes with the last of
    // them.
    let pod_dir = rig.dir.path().join("data/pods/claimer");
    assert!(pod_dir.is_dir(), "{}", pod_dir.display());
    assert!(handle.release_claim("s-1").await);
    assert!(pod_dir.is_dir(), "s-2 still names the Pod");
    assert!(handle.release_claim("s-2").await);
    assert!(
        !pod_dir.exists(),
        "{} outlived its claims",
        pod_dir.display()
    );
    let exclusive = handle
        .grant_claim(&slice("w-1", 81_559, None))
        .await
        .unwrap();
    assert_eq!(exclusive.envs["NVIDIA_VISIBLE_DEVICES"], uuid(0));
    assert_eq!(
        rig.plugins()
            .ledger()
            .grant(&GrantKey::claim("w-1", "claimer"))
            .unwrap()
            .family,
        Family::Exclusive
    );
}

#[tokio::test]
async fn a_claims_grant_names_the_pod_it_was_prepared_for_across_a_restart() {
    let mut rig = Rig::new(seats(4), Settings::default()).await;
    let ask = accel_plugin::service::ClaimGrant {
        pod: pod("a", 1, &[("main", &[])]),
        ..claim_on(2, "claim-a")
    };
    rig.plugins().handle().grant_claim(&ask).await.unwrap();
    rig.restart_plugins().await;
    let ledger = rig.plugins().ledger();
    let key = ledger.claim_key("claim-a").cloned();
    assert_eq!(key, Some(GrantKey::claim("claim-a", "a")));
    // Another Pod's retry of the same claim keeps the key it was granted under.
    let again = accel_plugin::service::ClaimGrant {
        pod: pod("b", 2, &[("main", &[])]),
        ..claim_on(2, "claim-a")
    };
    rig.plugins().handle().grant_claim(&again).await.unwrap();
    let ledger = rig.plugins().ledger();
    assert_eq!(ledger.grants().len(), 1);
    assert_eq!(
        ledger.claim_key("claim-a").and_then(GrantKey::claim_pod),
        Some("a")
    );
}
