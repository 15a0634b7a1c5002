//! Issue 10 on the emulator, over real unix sockets: a valid Pod is never rejected because the
//! plugin's watch of the node's Pods lags the kubelet (the kubelet adds and admits a Pod as soon
//! as its own watch sees it), and the placement hint offers only accelerators the container's
//! real slice fits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::ledger::{GrantKey, Seat};
use accel_nvidia::responder::{EngineFacts, NvidiaResponder};
use accel_plugin::metrics::{Attribution, PluginMetrics};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::service::{DIRECT_GRACE, IDENTIFY_WAIT};
use accel_plugin::settings::{InjectionStrategy, Settings};
use accel_plugin::testing::{self, Kubelet, PodWatch, gpu_uuid as uuid, seat};
use accel_plugin::{Config, DevicePlugins};
use tokio::time::Instant;
use tonic::Code;

const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";
const MEMORY_PERCENTAGE: &str = "nvidia.com/gpu.sliced.memory-percentage";
const MEMORY_MIB: &str = "nvidia.com/gpu.sliced.memory-mib";

fn seats(n: u32) -> Vec<Seat> {
    (0..n).map(seat).collect()
}

/// The plugin on the emulated kubelet, watching the API server through a [`PodWatch`].
struct Rig {
    _dir: tempfile::TempDir,
    kubelet: Kubelet,
    watch: PodWatch,
    plugins: DevicePlugins,
    metrics: PluginMetrics,
}

impl Rig {
    async fn new(seats: Vec<Seat>, settings: Settings) -> Rig {
        Rig::with_strategy(seats, settings, InjectionStrategy::Envvar).await
    }

    async fn with_strategy(
        seats: Vec<Seat>,
        settings: Settings,
        strategy: InjectionStrategy,
    ) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let metrics = PluginMetrics::default();
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings,
            offer: Offer::of(Manufacturer::Nvidia),
            seats,
            responder: Arc::new(NvidiaResponder {
                strategy,
                cuda_major: Some(13),
                pod_dir_root: dir.path().join("data/pods"),
                preload_dir: dir.path().join("data/preload"),
                library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
                engine: std::sync::Arc::new(EngineFacts::default()),
            }),
            poll_interval: Duration::from_millis(20),
            partitions: None,
            metrics: metrics.clone(),
        };
        let watch = kubelet.watch();
        let plugins = DevicePlugins::start(config, Arc::new(watch.clone()))
            .await
            .unwrap();
        let resources = plugins.resources();
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        kubelet.wait_for(&names).await;
        Rig {
            _dir: dir,
            kubelet,
            watch,
            plugins,
            metrics,
        }
    }

    /// The accelerators the ledger charges to the container `main` of Pod `uid`.
    fn attributed(&self, by: Attribution) -> u64 {
        self.metrics.attributed_count(by)
    }

    fn accelerators_of(&self, uid: &str) -> Vec<u32> {
        self.plugins
            .ledger()
            .grant(&GrantKey::new(uid, "main"))
            .map(|g| g.accelerators.clone())
            .unwrap_or_default()
    }
}

/// A rig under which every Allocate asks the kubelet first: `auto` injection reads the Pod,
/// so no grant is answered before its container is known (the road slices always take).
async fn kubelet_first(seats: Vec<Seat>) -> Rig {
    Rig::with_strategy(seats, Settings::default(), InjectionStrategy::Auto).await
}

fn pod(uid: &str, created: i64, limits: &[(&str, &str)]) -> Pod {
    testing::pod(uid, created, &[("main", limits)])
}

/// What the plugin logs at warn and above while the guard lives (this thread's subscriber: the
/// test runtime and every task the plugin spawns on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (logs.clone(), tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

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

/// Every token of `resource` the kubelet lists now.
fn tokens(rig: &Rig, resource: &str) -> Vec<String> {
    rig.kubelet
        .devices(resource)
        .into_iter()
        .map(|d| d.id)
        .collect()
}

fn slice(percentage: &'static str) -> [(&'static str, &'static str); 2] {
    [(SLICED, "1"), (MEMORY_PERCENTAGE, percentage)]
}

/// Seed 000's slice packing must not place a slice where it cannot fit: a 60 % slice, then a
/// 50 % one, on two GPUs. The hint used to rank with a slice of 1 unit and offer the GPU holding
/// the 60 %, which Allocate then refused ("has 640000 units left; the slice needs 800000").
#[tokio::test]
async fn a_sixty_then_a_fifty_percent_slice_land_on_different_accelerators() {
    let rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &slice("60")));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.create(pod("b", 2, &slice("50")));
    let admitted = rig.kubelet.admit("b").await;
    assert!(admitted.is_ok(), "the 50 % slice was refused: {admitted:?}");
    assert_eq!(rig.accelerators_of("a"), [0]);
    assert_eq!(rig.accelerators_of("b"), [1]);
    let ledger = rig.plugins.ledger();
    assert_eq!(ledger.occupancy(0).unwrap().used_units, 960_000);
    assert_eq!(ledger.occupancy(1).unwrap().used_units, 800_000);
}

/// The kubelet adds the Pod and lists it in pod-resources before the plugin's watch delivers
/// it; the API server already has it. The plugin reads that one Pod and grants.
#[tokio::test]
async fn a_pod_the_kubelet_admits_before_the_watch_delivers_it_is_read_from_the_api_server() {
    let rig = kubelet_first(seats(8)).await;
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    let admitted = rig.kubelet.admit("a").await;
    assert!(admitted.is_ok(), "a valid Pod was refused: {admitted:?}");
    assert_eq!(rig.accelerators_of("a").len(), 1);
    assert_eq!(rig.watch.lookups(), 1, "exactly the one Pod is read");
}

/// The kubelet admits a Pod the watch delivers only later, and the API server cannot be read
/// directly: the plugin waits for the watch instead of refusing.
#[tokio::test]
async fn a_pod_the_watch_delivers_late_is_waited_for() {
    let rig = kubelet_first(seats(8)).await;
    rig.watch.fail_lookups(true);
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    let subscribed = rig.watch.subscriptions();
    let kubelet = &rig.kubelet;
    let admission = kubelet.admit("a");
    tokio::pin!(admission);
    tokio::select! {
        answer = &mut admission => {
            panic!("Allocate answered before the watch delivered the Pod: {answer:?}")
        }
        () = rig.watch.wait_for_subscriptions(subscribed + 1) => {}
    }
    rig.watch.deliver("a");
    let admitted = tokio::time::timeout(Duration::from_secs(10), admission)
        .await
        .expect("Allocate never answered after the watch delivered the Pod");
    assert!(admitted.is_ok(), "a valid Pod was refused: {admitted:?}");
    assert_eq!(rig.accelerators_of("a").len(), 1);
}

/// The same Pod, and the hint reads it too: GetPreferredAllocation identifies the container as
/// Allocate does, so both read the undelivered Pod, and the 50 % slice is offered the empty GPU.
#[tokio::test]
async fn a_slice_hint_reads_a_pod_the_watch_has_not_delivered() {
    let rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &slice("60")));
    rig.kubelet.admit("a").await.unwrap();
    rig.watch.hold("b");
    rig.kubelet.create(pod("b", 2, &slice("50")));
    let admitted = rig.kubelet.admit("b").await;
    assert!(admitted.is_ok(), "the 50 % slice was refused: {admitted:?}");
    assert_eq!(rig.accelerators_of("b"), [1]);
    assert_eq!(
        rig.watch.lookups(),
        2,
        "the hint and Allocate each read the Pod (no cache between them)"
    );
}

/// A MiB budget folds against each accelerator's own VRAM, as Allocate charges it: 30,000 MiB is
/// 588,531 units on the 80 GB GPU (which holds a 50 % slice and has 800,000 left) and
/// 1,171,875 on the 40 GB one. The fuller GPU fits it and is offered.
#[tokio::test]
async fn a_mib_slice_is_offered_where_it_fits_that_accelerators_vram() {
    let mut node = seats(2);
    node[1].memory_mib = Some(40_960);
    let rig = Rig::new(node, Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &slice("50")));
    rig.kubelet.admit("a").await.unwrap();
    assert_eq!(rig.accelerators_of("a"), [0]);
    rig.kubelet
        .create(pod("b", 2, &[(SLICED, "1"), (MEMORY_MIB, "30000")]));
    rig.kubelet.admit("b").await.unwrap();
    assert_eq!(rig.accelerators_of("b"), [0]);
    assert_eq!(
        rig.plugins.ledger().occupancy(0).unwrap().used_units,
        800_000 + 588_531
    );
}

/// A hint that cannot name its container still answers, at once when the kubelet's answer
/// shows there is nothing to wait for: the accelerator with the most room.
#[tokio::test(start_paused = true)]
async fn a_hint_that_cannot_name_its_container_offers_the_most_room_at_once() {
    let rig = Rig::new(seats(2), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &slice("60")));
    rig.kubelet.admit("a").await.unwrap();
    let available = tokens(&rig, SLICED);
    let started = Instant::now();
    // No Pod asks: nothing to identify.
    let offered = rig
        .kubelet
        .preferred_raw(SLICED, available, 1)
        .await
        .unwrap();
    assert!(
        started.elapsed() < IDENTIFY_WAIT,
        "the hint waited for nothing"
    );
    assert_eq!(offered.len(), 1);
    assert!(
        offered[0].starts_with(&uuid(1)),
        "the roomiest accelerator is offered: {offered:?}"
    );
}

/// Without the kubelet to ask and with no Pod to match, the hint waits for the watch within
/// its bound, then still answers.
#[tokio::test(start_paused = true)]
async fn without_the_kubelet_an_unnamed_hint_answers_after_the_bound() {
    let settings = Settings {
        identify_by_kubelet: false,
        ..Settings::default()
    };
    let rig = Rig::new(seats(2), settings).await;
    rig.kubelet.create(pod("a", 1, &slice("60")));
    rig.kubelet.admit("a").await.unwrap();
    let available = tokens(&rig, SLICED);
    let started = Instant::now();
    let offered = tokio::time::timeout(
        IDENTIFY_WAIT * 2,
        rig.kubelet.preferred_raw(SLICED, available, 1),
    )
    .await
    .expect("the hint never answered")
    .unwrap();
    assert!(started.elapsed() >= IDENTIFY_WAIT);
    assert!(offered[0].starts_with(&uuid(1)), "{offered:?}");
}

/// Identification without the kubelet (the setting off) waits for the watch as well.
#[tokio::test]
async fn without_the_kubelet_a_pod_the_watch_delivers_late_is_waited_for() {
    let settings = Settings {
        identify_by_kubelet: false,
        ..Settings::default()
    };
    let rig = Rig::new(seats(8), settings).await;
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    let subscribed = rig.watch.subscriptions();
    let kubelet = &rig.kubelet;
    let admission = kubelet.admit("a");
    tokio::pin!(admission);
    tokio::select! {
        answer = &mut admission => {
            panic!("Allocate answered before the watch delivered the Pod: {answer:?}")
        }
        () = rig.watch.wait_for_subscriptions(subscribed + 1) => {}
    }
    rig.watch.deliver("a");
    let admitted = tokio::time::timeout(Duration::from_secs(10), admission)
        .await
        .expect("Allocate never answered after the watch delivered the Pod");
    assert!(admitted.is_ok(), "a valid Pod was refused: {admitted:?}");
    assert_eq!(
        rig.watch.lookups(),
        0,
        "nothing to read without the kubelet's names"
    );
}

/// A Pod the watch never delivers and the API server cannot be read for: refused once the
/// bound has passed, naming the Pod, and logged.
#[tokio::test(start_paused = true)]
async fn a_pod_never_delivered_nor_readable_is_refused_after_the_bound_naming_it() {
    let (logs, _guard) = Logs::capture();
    let rig = kubelet_first(seats(8)).await;
    rig.watch.fail_lookups(true);
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    let started = Instant::now();
    let err = tokio::time::timeout(IDENTIFY_WAIT * 2, rig.kubelet.admit("a"))
        .await
        .expect("Allocate never answered: the wait is unbounded")
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= IDENTIFY_WAIT && waited < IDENTIFY_WAIT + Duration::from_secs(1),
        "waited {waited:?}"
    );
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        err.message(),
        "the kubelet admits ns/pod-a which the node's Pod watch has not delivered; cannot tell which container asks for 1 nvidia.com/gpu"
    );
    assert!(rig.plugins.ledger().grants().is_empty());
    let logs = logs.text();
    assert!(
        logs.contains("WARN")
            && logs.contains(
                "nvidia.com/gpu: refused an unidentified container (FailedPrecondition): the kubelet admits ns/pod-a"
            ),
        "{logs}"
    );
}

/// Every refusal is logged at warn with the Pod, the container and the reason.
#[tokio::test]
async fn a_refused_slice_is_logged_naming_the_pod_container_and_reason() {
    let (logs, _guard) = Logs::capture();
    let rig = Rig::new(seats(1), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &slice("100")));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.create(pod("b", 2, &slice("100")));
    let err = rig.kubelet.admit("b").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let logs = logs.text();
    assert!(
        logs.contains(
            "nvidia.com/gpu.sliced: refused ns/pod-b container main (FailedPrecondition): ns/pod-b container main: accelerator 0 (GPU-00000000-0000-0000-0000-000000000000) has 0 units left; the slice needs 1600000"
        ),
        "{logs}"
    );
}

/// The common path: a slice, whose answer depends on its container, asks the kubelet on the path
/// of its hint and of its Allocate; an exclusive Allocate the watch can attribute answers without
/// asking (the kubelet is asked right after, to confirm the container). No direct read of the
/// API server, no wait on the watch. The slice goes first: once an exclusive grant waits for the
/// kubelet's word, the plugin's own List may land during any later call and count as its.
#[tokio::test]
async fn the_common_path_lists_once_per_call_and_reads_no_pod_directly() {
    let rig = Rig::new(seats(8), Settings::default()).await;
    let subscribed = rig.watch.subscriptions();
    let on_path = rig.kubelet.lists_in_calls();
    rig.kubelet.create(pod("b", 2, &slice("30")));
    rig.kubelet.admit("b").await.unwrap();
    assert_eq!(
        rig.kubelet.lists_in_calls() - on_path,
        2,
        "a slice's hint and Allocate list once each"
    );
    assert_eq!(rig.attributed(Attribution::Kubelet), 1);
    let lists = rig.kubelet.lists();
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        (
            rig.attributed(Attribution::Watch),
            rig.attributed(Attribution::Kubelet)
        ),
        (1, 1),
        "an exclusive Allocate the watch attributes answers before asking the kubelet"
    );
    // The kubelet is asked after the answer, to confirm the container: by the plugin itself.
    rig.kubelet.wait_lists(lists + 1).await;
    rig.plugins.verify_grants().await;
    assert_eq!(
        rig.plugins
            .ledger()
            .grant(&GrantKey::new("a", "main"))
            .map(|g| g.device_ids.len()),
        Some(1)
    );
    assert_eq!(rig.attributed(Attribution::Moved), 0);
    assert_eq!(rig.watch.lookups(), 0);
    assert_eq!(
        rig.watch.subscriptions(),
        subscribed,
        "no wait on the watch"
    );
}

/// A Pod read directly holds its grants until the watch delivers it: the reconciler does not
/// take them for a Pod that is gone, a second container of the Pod and a retried Allocate find
/// it without reading it again, and once delivered and deleted its grants go.
#[tokio::test]
async fn a_pod_read_directly_keeps_its_grants_until_the_watch_delivers_it() {
    let rig = kubelet_first(seats(8)).await;
    rig.watch.hold("a");
    rig.kubelet.create(testing::pod(
        "a",
        1,
        &[("main", &[(GPU, "1")]), ("aux", &[(GPU, "1")])],
    ));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(rig.plugins.ledger().grants().len(), 2);
    assert_eq!(
        rig.watch.lookups(),
        1,
        "the second container needs no second read"
    );
    // Another Pod changes: the reconciler runs and keeps a's grants.
    rig.kubelet.create(pod("b", 2, &[(GPU, "1")]));
    rig.plugins.reconcile_pods();
    assert_eq!(rig.plugins.ledger().grants().len(), 2);
    // The kubelet retries a's Allocate: the same answer, charged once.
    let ids = rig.kubelet.held("a", "main", GPU);
    let again = rig.kubelet.allocate_raw(GPU, ids).await.unwrap();
    assert_eq!(again.container_responses[0], admission["main"][GPU]);
    assert_eq!(rig.plugins.ledger().grants().len(), 2);
    // Delivered, then deleted: released.
    rig.watch.deliver("a");
    rig.plugins.reconcile_pods();
    assert_eq!(rig.plugins.ledger().grants().len(), 2);
    rig.kubelet.delete("a");
    rig.plugins.reconcile_pods();
    assert!(rig.plugins.ledger().grants().is_empty());
}

/// A Pod read directly and deleted before the watch ever delivered it: its grant is released
/// once the grace has passed.
#[tokio::test(start_paused = true)]
async fn a_pod_deleted_before_the_watch_delivered_it_is_released_after_the_grace() {
    let rig = kubelet_first(seats(8)).await;
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.delete("a");
    rig.plugins.reconcile_pods();
    assert_eq!(rig.plugins.ledger().grants().len(), 1, "within the grace");
    tokio::time::advance(DIRECT_GRACE).await;
    rig.plugins.reconcile_pods();
    assert!(rig.plugins.ledger().grants().is_empty());
}

/// Issue 10's churn in the emulator: Pods created one after another, each admitted by the
/// kubelet before the watch delivers it (some delivered right after, some only after the next
/// Pod, some never before they are deleted), for every family. None is refused; every grant
/// goes when its Pod does.
#[tokio::test(start_paused = true)]
async fn churn_of_pods_the_watch_delivers_late_rejects_none() {
    let thirty_percent = slice("30");
    let families: [(&str, &[(&str, &str)]); 3] = [
        (GPU, &[(GPU, "1")]),
        (SHARED, &[(SHARED, "1")]),
        (SLICED, &thirty_percent),
    ];
    for (resource, limits) in families {
        let rig = Rig::new(seats(8), Settings::default()).await;
        // A UID is one path component (the responder names the Pod's directory after it).
        let uid = |i: usize| format!("{}-{i}", resource.replace('/', "-"));
        let live = 8;
        for i in 0..30 {
            if i >= live {
                rig.kubelet.delete(&uid(i - live));
            }
            rig.watch.hold(&uid(i));
            rig.kubelet.create(pod(&uid(i), i as i64, limits));
            if let Err(e) = rig.kubelet.admit(&uid(i)).await {
                panic!("{resource}: Pod {i} of the churn was refused: {e:?}");
            }
            match i % 3 {
                0 => rig.watch.deliver(&uid(i)),
                1 if i > 0 => rig.watch.deliver(&uid(i - 1)),
                _ => {}
            }
        }
        for i in 30 - live..30 {
            rig.watch.deliver(&uid(i));
            rig.kubelet.delete(&uid(i));
        }
        // The never-delivered ones leave after the grace.
        tokio::time::advance(DIRECT_GRACE).await;
        rig.plugins.reconcile_pods();
        let ledger = rig.plugins.ledger();
        assert!(
            ledger.grants().is_empty(),
            "{resource}: {:?}",
            ledger.grants()
        );
        ledger.verify().unwrap();
    }
}

/// The watch's answer is checked against the kubelet's right after: a Pod the kubelet never
/// admitted (still Pending in the watch, say rejected a moment ago) is the watch's only
/// candidate while the kubelet admits another Pod the watch has not delivered. The exclusive
/// grant answers at once, charged to the watch's candidate; the kubelet then names the holder,
/// and the grant moves there, in the ledger and in the journal. The stale Pod's own admission
/// later gets a grant of its own.
#[tokio::test]
async fn a_grant_the_watch_gave_the_wrong_pod_moves_to_the_one_the_kubelet_names() {
    let (logs, _guard) = Logs::capture();
    let rig = Rig::new(seats(8), Settings::default()).await;
    rig.kubelet.create(pod("stale", 1, &[(GPU, "1")]));
    rig.watch.hold("new");
    rig.kubelet.create(pod("new", 2, &[(GPU, "1")]));
    // The kubelet does not answer who holds what until the watch's charge is looked at: the
    // plugin would otherwise move the grant a few milliseconds after its answer.
    rig.kubelet.fail_lists(true);
    rig.kubelet.admit("new").await.unwrap();
    assert_eq!(
        rig.attributed(Attribution::Watch),
        1,
        "answered from the watch"
    );
    let held = rig.kubelet.held("new", "main", GPU);
    assert_eq!(
        rig.plugins
            .ledger()
            .grant(&GrantKey::new("stale", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held.clone()),
        "the watch's candidate was charged first"
    );
    rig.kubelet.fail_lists(false);
    rig.plugins.verify_grants().await;
    let ledger = rig.plugins.ledger();
    assert_eq!(ledger.grant(&GrantKey::new("stale", "main")), None);
    assert_eq!(
        ledger
            .grant(&GrantKey::new("new", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held.clone()),
        "the kubelet's word moved it"
    );
    assert_eq!(
        rig.watch.lookups(),
        1,
        "the holder was read from the API server"
    );
    assert_eq!(rig.attributed(Attribution::Moved), 1);
    assert!(
        logs.text()
            .contains("the kubelet says pod new container main holds"),
        "{}",
        logs.text()
    );
    // Until the watch delivers it, the moved grant's Pod is kept (not released as gone).
    rig.plugins.reconcile_pods();
    assert!(
        rig.plugins
            .ledger()
            .grant(&GrantKey::new("new", "main"))
            .is_some()
    );
    rig.watch.deliver("new");
    // The stale Pod, admitted after all, gets a grant of its own on another accelerator.
    rig.kubelet.admit("stale").await.unwrap();
    rig.plugins.verify_grants().await;
    let ledger = rig.plugins.ledger();
    let stale = ledger.grant(&GrantKey::new("stale", "main")).unwrap();
    let new = ledger.grant(&GrantKey::new("new", "main")).unwrap();
    assert_ne!(stale.accelerators, new.accelerators);
    ledger.verify().unwrap();
    // The journal, replayed as a restart replays it, says the same.
    let journal = rig
        ._dir
        .path()
        .join("data")
        .join(accel_plugin::journal::FILE_NAME);
    let (replayed, _) =
        accel_plugin::journal::replay_bytes(&std::fs::read(journal).unwrap()).unwrap();
    assert_eq!(
        replayed
            .get(&GrantKey::new("new", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held)
    );
    assert_eq!(replayed.get(&GrantKey::new("stale", "main")), Some(stale));
}

/// A Pod deleted before the kubelet confirmed its grant keeps the grant until then (its Pod's
/// word alone could free an accelerator another Pod holds, were the watch's answer wrong), and
/// loses it as soon as the kubelet shows nobody holds its devices.
#[tokio::test]
async fn a_pod_gone_before_its_grant_is_confirmed_releases_it_once_confirmed() {
    let rig = Rig::new(seats(8), Settings::default()).await;
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.delete("a");
    rig.plugins.verify_grants().await;
    rig.plugins.reconcile_pods();
    assert!(rig.plugins.ledger().grants().is_empty());
    rig.plugins.ledger().verify().unwrap();
}

/// The protection the unverified state gives: the watch charged a stale Pod with a grant another
/// Pod holds; that stale Pod leaves before the kubelet was asked. Its departure must not free the
/// accelerator (the other Pod runs on it): the grant waits, then moves to the real holder.
#[tokio::test]
async fn a_wrongly_charged_pod_leaving_does_not_free_what_another_holds() {
    let rig = Rig::new(seats(8), Settings::default()).await;
    rig.kubelet.create(pod("stale", 1, &[(GPU, "1")]));
    rig.watch.hold("new");
    rig.kubelet.create(pod("new", 2, &[(GPU, "1")]));
    // The kubelet is not asked successfully until the stale Pod has left (else the plugin's
    // check a few milliseconds after the grant may move it first).
    rig.kubelet.fail_lists(true);
    rig.kubelet.admit("new").await.unwrap();
    let held = rig.kubelet.held("new", "main", GPU);
    rig.kubelet.delete("stale");
    rig.plugins.reconcile_pods();
    assert_eq!(
        rig.plugins
            .ledger()
            .grant(&GrantKey::new("stale", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held.clone()),
        "not released on the stale Pod's departure before the kubelet spoke"
    );
    rig.kubelet.fail_lists(false);
    rig.plugins.verify_grants().await;
    rig.plugins.reconcile_pods();
    let ledger = rig.plugins.ledger();
    assert_eq!(
        ledger
            .grant(&GrantKey::new("new", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held)
    );
    assert_eq!(ledger.grants().len(), 1);
    ledger.verify().unwrap();
}

/// The kubelet admits a Pod as soon as its own watch sees it; ours is often a moment behind. An
/// exclusive Allocate does not wait for it nor ask the kubelet first: it answers under an
/// unattributed key (the answer is the same for every container), and the kubelet's record
/// names the container right after (the Pod read from the API server, the watch lacking it).
#[tokio::test]
async fn an_exclusive_pod_the_watch_has_not_delivered_is_answered_then_named() {
    let rig = Rig::new(seats(8), Settings::default()).await;
    rig.watch.hold("a");
    rig.kubelet.create(pod("a", 1, &[(GPU, "1")]));
    let subscribed = rig.watch.subscriptions();
    // Held unnamed until looked at: the kubelet answers no List before.
    rig.kubelet.fail_lists(true);
    rig.kubelet.admit("a").await.unwrap();
    assert_eq!(rig.attributed(Attribution::Unnamed), 1);
    assert_eq!(
        rig.watch.subscriptions(),
        subscribed,
        "no wait on the watch"
    );
    let held = rig.kubelet.held("a", "main", GPU);
    assert!(
        rig.plugins
            .ledger()
            .grant(&GrantKey::unattributed(GPU, &held))
            .is_some(),
        "charged before the container is named"
    );
    // The Pod reconciler does not release a grant whose container is not named yet.
    rig.plugins.reconcile_pods();
    assert_eq!(rig.plugins.ledger().grants().len(), 1);
    rig.kubelet.fail_lists(false);
    rig.plugins.verify_grants().await;
    assert_eq!(rig.attributed(Attribution::Named), 1);
    assert_eq!(rig.watch.lookups(), 1, "the Pod the kubelet names is read");
    let ledger = rig.plugins.ledger();
    assert_eq!(ledger.grants().len(), 1);
    assert_eq!(
        ledger
            .grant(&GrantKey::new("a", "main"))
            .map(|g| g.device_ids.clone()),
        Some(held)
    );
    // Once named and delivered, it is the Pod's grant like any other: deleted, released.
    rig.watch.deliver("a");
    rig.plugins.reconcile_pods();
    rig.kubelet.delete("a");
    rig.plugins.reconcile_pods();
    assert!(rig.plugins.ledger().grants().is_empty());
}
