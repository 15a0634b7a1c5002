//! A kubelet emulator for tests and benchmarks, speaking the real protocols over real unix
//! sockets: it serves Registration and pod-resources List, opens ListAndWatch on every plugin
//! that registers, and admits Pods one at a time the way the kubelet does (healthy tokens only,
//! GetPreferredAllocation, then Allocate per container). It can restart (removing every plugin
//! socket and recreating its own), vanish, finish Pods and delete them. It also plays the API
//! server through a [`MemoryPods`], and the plugin's watch of it through a [`PodWatch`] that can
//! deliver a Pod late or never, the way a real watch lags the kubelet's own (the kubelet adds
//! and admits a Pod as soon as its watch sees it). Behind the `testing` feature: the scenario
//! tests and benchmarks use it, and so does `device-manager demo`, which runs the real daemon
//! against it in one process (the `try_`/`until_` methods answer instead of panicking, for it).
//! Never on the node daemon's path.
//!
//! By default it offers a plugin the free healthy tokens in the order advertised. The real
//! kubelet offers them in no order (a Go set's iteration): [`Kubelet::shuffle_available`] makes
//! the emulator do the same, so a plugin that reads meaning into which token it was handed (a
//! partition token naming the GPU the partition lands on, found on the rig) is caught here.
//!
//! What the plugin does in the background (a deleted Pod's release, the kubelet's word on a
//! grant made from the Pod watch, the token lists after either, a reclaim pass) lands a moment
//! later, later still on a loaded machine: a test waits for the state it needs with the waits
//! here ([`wait_until`], [`wait_read`], [`wait_ledger`], [`wait_released`],
//! [`Kubelet::wait_free`], [`Kubelet::wait_devices`], [`Kubelet::wait_lists`],
//! [`CommandLog::wait_runs`]), each bounded by [`WAIT`] and failing with what did not happen,
//! never for a fixed time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use accel_core::inventory::Grantable;
use accel_core::ledger::{Ledger, Seat};
use accel_host::{CommandError, CommandOutput, Commands};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use crate::api::deviceplugin as dp;
use crate::api::deviceplugin::device_plugin_client::DevicePluginClient;
use crate::api::deviceplugin::registration_server::{Registration, RegistrationServer};
use crate::api::podresources as pr;
use crate::api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use crate::pods::{Container, LookupError, MemoryPods, Phase, Pod, PodLookup, PodSource};
use crate::service::DevicePlugins;
use crate::socket;

/// How long a wait of the test kit gives the state it waits for before failing: ample for a
/// machine whose cores are all busy with other work (docs/TESTING.md), and only ever spent
/// when the state never comes.
pub const WAIT: Duration = Duration::from_secs(30);

/// How often [`wait_until`] and [`wait_ledger`] look again.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// Waits until `check` holds, looking again every few milliseconds; after [`WAIT`] fails
/// naming `what` (the state that never came: "Pod a's record dropped"). For a state nothing
/// signals (a file, the host's partitions); the ledger and the token lists have their own
/// waits, woken by their changes.
pub async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: not within {WAIT:?}");
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// [`wait_until`] for a state `look` reads (the host's partitions, a record on disk): answers
/// the first one `done` holds for; the failure shows the last one read.
pub async fn wait_read<T: std::fmt::Debug>(
    what: &str,
    mut look: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = look();
        if done(&now) {
            return now;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: not within {WAIT:?}; last seen: {now:?}");
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// Waits until `check` holds for the plugins' ledger: looked at on every grant, release and
/// health change the plugins announce, and every 50 ms besides (not every change is announced:
/// the rebuild at the Pod watch's first sync is not). After [`WAIT`] fails naming `what` and the
/// grants the ledger holds.
pub async fn wait_ledger(plugins: &DevicePlugins, what: &str, check: impl Fn(&Ledger) -> bool) {
    let handle = plugins.handle();
    let mut changes = handle.changes();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        changes.borrow_and_update();
        if handle.with_ledger(&check) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let held: Vec<String> = handle
                .ledger()
                .grants()
                .keys()
                .map(ToString::to_string)
                .collect();
            panic!("{what}: not within {WAIT:?}; the ledger holds {held:?}");
        }
        if let Ok(Err(_)) = tokio::time::timeout(LOOK_AGAIN * 5, changes.changed()).await {
            // The plugins stopped: nothing will tick again, look on the clock alone.
            tokio::time::sleep(LOOK_AGAIN).await;
        }
    }
}

/// Waits until the plugins hold no grant of Pod `uid`: its deletion or finish has been seen by
/// the Pod watcher, a grant made from the watch's answer has been confirmed by the kubelet,
/// and the reconciler has released it (or, for a partition, its instance is reclaimed).
pub async fn wait_released(plugins: &DevicePlugins, uid: &str) {
    wait_ledger(plugins, &format!("Pod {uid}'s grants released"), |ledger| {
        !ledger.grants().keys().any(|k| k.pod_uid == uid)
    })
    .await;
}

/// The UUID the scenario tests and benchmarks give synthetic GPU `i`.
pub fn gpu_uuid(i: u32) -> String {
    format!("GPU-{i:08}-0000-0000-0000-000000000000")
}

/// Synthetic GPU `i` as a ledger seat: an 80 GB H100's memory, whole, healthy, 128 slice slots,
/// four GPUs to a NUMA node. Anything else is set with struct update syntax:
/// `Seat { numa_node: Some(0), ..seat(i) }`.
pub fn seat(i: u32) -> Seat {
    Seat {
        index: i,
        uuid: Some(gpu_uuid(i)),
        numa_node: Some(i / 4),
        peers: BTreeMap::new(),
        memory_mib: Some(81_559),
        grantable: Grantable::Whole,
        healthy: true,
        slice_capacity: 128,
        partitions: Vec::new(),
    }
}

/// A ResourceClaim's hardware partition as the DRA driver asks for it: `profile` at memory
/// slice `start` of accelerator `index`, the device `<kind>-<index>-<profile>-<start>` of
/// `driver` (`nvidia.gpustack.ai`, `gpu`), for the Pod `pod-<uid>`.
pub fn partition_claim(
    driver: &str,
    kind: &str,
    uid: &str,
    index: u32,
    profile: &str,
    start: u32,
) -> crate::service::ClaimGrant {
    crate::service::ClaimGrant {
        claim_uid: uid.into(),
        pod: pod(&format!("pod-{uid}"), 1_700_000_000, &[("main", &[])]),
        driver: driver.into(),
        devices: vec![format!(
            "{kind}-{index}-{}-{start}",
            profile.replace(['.', '+'], "-")
        )],
        accelerators: vec![index],
        slice: None,
        partition: Some(crate::service::ClaimPartition {
            profile: profile.into(),
            start,
        }),
    }
}

/// A Pending Pod for the emulator to admit, as the scenario tests and benchmarks write one: in
/// namespace `ns`, named `pod-<uid>`, created at `created` (seconds), each container a name and
/// its limits (`&[("main", &[("nvidia.com/gpu", "1")])]`). Anything else is set with struct
/// update syntax: `Pod { namespace: "bench".into(), ..pod(uid, 1, containers) }`.
pub fn pod(uid: &str, created: i64, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    Pod {
        uid: uid.into(),
        namespace: "ns".into(),
        name: format!("pod-{uid}"),
        created,
        phase: Phase::Pending,
        runtime_class: None,
        allocated: None,
        containers: containers
            .iter()
            .map(|(name, limits)| Container {
                name: name.to_string(),
                limits: limits
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                env: BTreeMap::new(),
            })
            .collect(),
    }
}

/// One registered plugin as the emulator sees it.
#[derive(Clone)]
struct Plugin {
    client: DevicePluginClient<tonic::transport::Channel>,
    options: dp::DevicePluginOptions,
    devices: watch::Receiver<Vec<dp::Device>>,
    /// Whether ListAndWatch has sent its first list (possibly empty).
    listed: watch::Receiver<bool>,
    /// Whether its ListAndWatch stream is still open: a plugin that stopped is waited for
    /// again, as the kubelet marks its endpoint stopped until it registers anew.
    open: Arc<AtomicBool>,
    /// Its socket: one that is gone (a plugin that stopped removes its own) is waited for
    /// again, as the kubelet drops an endpoint whose socket is removed, even before the stream
    /// is seen to end.
    socket: PathBuf,
}

#[derive(Default)]
struct Books {
    plugins: BTreeMap<String, Plugin>,
    /// Device IDs held, by Pod UID, container, resource (the kubelet's checkpoint).
    allocated: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<String>>>>,
    /// Pods the kubelet has added (admitted or being admitted), by UID.
    active: BTreeSet<String>,
}

struct Inner {
    dir: PathBuf,
    books: Mutex<Books>,
    pods: MemoryPods,
    registrations: watch::Sender<u64>,
    /// Calls timed while admitting Pods, for the benchmarks.
    timings: Mutex<Vec<CallTiming>>,
    /// How many pod-resources List calls were answered.
    lists: watch::Sender<usize>,
    /// pod-resources List calls are refused ([`Kubelet::fail_lists`]).
    lists_fail: AtomicBool,
    /// Plugin calls (GetPreferredAllocation, Allocate) in flight now.
    calls_in_flight: std::sync::atomic::AtomicUsize,
    /// pod-resources List calls answered while a plugin call was in flight: the plugin asked
    /// the kubelet on that call's path.
    lists_in_calls: std::sync::atomic::AtomicUsize,
    /// The plugin's watch of `pods`.
    watch: PodWatch,
    /// When set, the state of the generator that orders the free tokens offered (the real
    /// kubelet's set iteration); `None`: the advertised order.
    shuffle: Mutex<Option<u64>>,
}

/// Which plugin call a [`CallTiming`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    GetPreferredAllocation,
    Allocate,
}

/// One call the emulator made while admitting a Pod, timed as the kubelet sees it: from the
/// request being sent to the answer decoded, over the plugin's unix socket.
#[derive(Debug, Clone)]
pub struct CallTiming {
    pub resource: String,
    pub call: Call,
    pub elapsed: Duration,
}

/// One plugin call in flight, counted while it lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Inner {
    fn in_flight(&self) -> InFlight<'_> {
        self.calls_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(&self.calls_in_flight)
    }

    fn timed(&self, resource: &str, call: Call, since: Instant) {
        let elapsed = since.elapsed();
        self.timings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(CallTiming {
                resource: resource.to_string(),
                call,
                elapsed,
            });
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Fisher–Yates over `items`, drawing from an xorshift generator whose state is `state`.
fn shuffle<T>(items: &mut [T], state: &mut u64) {
    for i in (1..items.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let j = usize::try_from(*state % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

/// The emulated kubelet.
pub struct Kubelet {
    inner: Arc<Inner>,
    servers: Option<(watch::Sender<bool>, Vec<JoinHandle<()>>)>,
}

/// What one container was answered, per resource.
pub type Admission = BTreeMap<String, BTreeMap<String, dp::ContainerAllocateResponse>>;

impl Kubelet {
    /// Starts a kubelet whose directory is `dir` (`device-plugins/`, `pod-resources/`).
    pub async fn start(dir: &Path, pods: MemoryPods) -> Kubelet {
        match Kubelet::try_start(dir, pods).await {
            Ok(kubelet) => kubelet,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a kubelet whose directory is `dir`, or says which socket could not be bound.
    pub async fn try_start(dir: &Path, pods: MemoryPods) -> Result<Kubelet, String> {
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            books: Mutex::new(Books::default()),
            watch: PodWatch::over(pods.clone()),
            pods,
            registrations: watch::channel(0).0,
            timings: Mutex::new(Vec::new()),
            lists: watch::channel(0).0,
            lists_fail: AtomicBool::new(false),
            calls_in_flight: std::sync::atomic::AtomicUsize::new(0),
            lists_in_calls: std::sync::atomic::AtomicUsize::new(0),
            shuffle: Mutex::new(None),
        });
        let mut kubelet = Kubelet {
            inner,
            servers: None,
        };
        kubelet.serve()?;
        Ok(kubelet)
    }

    fn serve(&mut self) -> Result<(), String> {
        let plugin_dir = self.inner.dir.join("device-plugins");
        let resources_dir = self.inner.dir.join("pod-resources");
        let _ = std::fs::create_dir_all(&plugin_dir);
        let _ = std::fs::create_dir_all(&resources_dir);
        let (stop, _) = watch::channel(false);
        let mut tasks = Vec::new();
        for (path, which) in [
            (plugin_dir.join("kubelet.sock"), 0),
            (resources_dir.join("kubelet.sock"), 1),
        ] {
            let _ = std::fs::remove_file(&path);
            let listener = tokio::net::UnixListener::bind(&path)
                .map_err(|e| format!("emulated kubelet cannot bind {}: {e}", path.display()))?;
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let mut stopped = stop.subscribe();
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let router = if which == 0 {
                tonic::transport::Server::builder().add_service(RegistrationServer::new(
                    RegistrationService {
                        inner: self.inner.clone(),
                    },
                ))
            } else {
                tonic::transport::Server::builder().add_service(PodResourcesListerServer::new(
                    PodResourcesService {
                        inner: self.inner.clone(),
                    },
                ))
            };
            tasks.push(tokio::spawn(async move {
                let _ = router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await;
            }));
        }
        self.servers = Some((stop, tasks));
        Ok(())
    }

    async fn halt(&mut self) {
        if let Some((stop, tasks)) = self.servers.take() {
            let _ = stop.send(true);
            for t in tasks {
                let _ = t.await;
            }
        }
        self.inner.books().plugins.clear();
    }

    /// From now on the free tokens are offered (to GetPreferredAllocation, and taken when a
    /// plugin prefers none) in an order drawn from `seed`, as the real kubelet's are; the same
    /// seed gives the same orders.
    pub fn shuffle_available(&self, seed: u64) {
        *self
            .inner
            .shuffle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(seed | 1);
    }

    /// The kubelet restarts: every socket in `device-plugins/` is removed and its own is
    /// recreated; what it allocated (its checkpoint) is kept.
    pub async fn restart(&mut self) {
        self.halt().await;
        if let Ok(entries) = std::fs::read_dir(self.inner.dir.join("device-plugins")) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        if let Err(e) = self.serve() {
            panic!("{e}");
        }
    }

    /// The kubelet goes away: its sockets vanish and stay gone until [`Kubelet::restart`].
    pub async fn vanish(&mut self) {
        self.halt().await;
        let _ = std::fs::remove_file(self.inner.dir.join("device-plugins/kubelet.sock"));
        let _ = std::fs::remove_file(self.inner.dir.join("pod-resources/kubelet.sock"));
    }

    /// The API server's Pods.
    pub fn pods(&self) -> &MemoryPods {
        &self.inner.pods
    }

    /// The plugin's watch of the API server's Pods (one shared view: every clone holds back the
    /// same Pods).
    pub fn watch(&self) -> PodWatch {
        self.inner.watch.clone()
    }

    /// How many pod-resources List calls the kubelet has answered.
    pub fn lists(&self) -> usize {
        *self.inner.lists.borrow()
    }

    /// How many of them arrived while a GetPreferredAllocation or Allocate call was in flight
    /// (asked on that call's path, before it answered).
    pub fn lists_in_calls(&self) -> usize {
        self.inner
            .lists_in_calls
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the kubelet has answered `count` pod-resources List calls in all (the
    /// plugin asked it, by itself, who holds a grant's devices).
    pub async fn wait_lists(&self, count: usize) {
        let mut rx = self.inner.lists.subscribe();
        if tokio::time::timeout(WAIT, rx.wait_for(|n| *n >= count))
            .await
            .is_err()
        {
            panic!(
                "the plugin did not ask the kubelet's pod-resources within {WAIT:?} ({} List calls answered, {count} expected)",
                self.lists()
            );
        }
    }

    /// Refuses every pod-resources List (`true`, Unavailable, as a kubelet that is restarting
    /// does) or answers again (`false`). While refused, nothing the plugin granted from its Pod
    /// watch's answer alone is confirmed or moved: a test holds a grant in that state to look
    /// at it, instead of racing the plugin's check a few milliseconds after the grant.
    pub fn fail_lists(&self, fail: bool) {
        self.inner.lists_fail.store(fail, Ordering::SeqCst);
    }

    /// Waits until every resource has registered and listed its tokens.
    pub async fn wait_for(&self, resources: &[&str]) {
        if !self.until_registered(resources, WAIT).await {
            panic!("plugins for {resources:?} did not register within {WAIT:?}");
        }
    }

    /// Waits at most `within` until every resource has registered and listed its tokens;
    /// answers whether they did.
    pub async fn until_registered(&self, resources: &[&str], within: Duration) -> bool {
        self.until_plugins(resources, within, |p| !p.devices.borrow().is_empty())
            .await
    }

    /// Waits at most `within` until every resource has registered and sent its first token
    /// list, empty or not (a pool whose accelerators all serve another family lists none);
    /// answers whether they did.
    pub async fn until_listed(&self, resources: &[&str], within: Duration) -> bool {
        self.until_plugins(resources, within, |p| *p.listed.borrow())
            .await
    }

    async fn until_plugins(
        &self,
        resources: &[&str],
        within: Duration,
        ready: impl Fn(&Plugin) -> bool,
    ) -> bool {
        let mut registrations = self.inner.registrations.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ready = {
                let books = self.inner.books();
                resources.iter().all(|r| {
                    books.plugins.get(*r).is_some_and(|p| {
                        p.open.load(Ordering::SeqCst) && p.socket.exists() && ready(p)
                    })
                })
            };
            if ready {
                return true;
            }
            if tokio::time::timeout_at(deadline, registrations.changed())
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// The resources registered now.
    pub fn resources(&self) -> Vec<String> {
        self.inner.books().plugins.keys().cloned().collect()
    }

    /// The tokens a resource advertises now (id → healthy).
    pub fn devices(&self, resource: &str) -> Vec<dp::Device> {
        self.inner
            .books()
            .plugins
            .get(resource)
            .map(|p| p.devices.borrow().clone())
            .unwrap_or_default()
    }

    /// Waits until `check` holds for a resource's token list.
    pub async fn wait_devices(&self, resource: &str, check: impl Fn(&[dp::Device]) -> bool) {
        if !self.inner.books().plugins.contains_key(resource) {
            panic!("{resource} is not registered");
        }
        if !self.until_devices(resource, check, WAIT).await {
            panic!("{resource}: the token list never reached the expected state");
        }
    }

    /// Waits until at least `count` tokens of `resource` are Healthy and held by no Pod the
    /// kubelet has: what admitting a Pod that asks for them needs. A Pod deleted or finished
    /// gives its tokens back to the kubelet at once, but the plugin hears of it through its
    /// Pod watch and tells the kubelet through ListAndWatch a moment later (a token another
    /// family's grant held turns Healthy only then).
    pub async fn wait_free(&self, resource: &str, count: usize) {
        // What the kubelet holds changes only by the test's own calls, made before this one.
        let taken = self.taken(resource);
        let free = |devices: &[dp::Device]| {
            devices
                .iter()
                .filter(|d| d.health == "Healthy" && !taken.contains(&d.id))
                .count()
        };
        if !self
            .until_devices(resource, |d| free(d) >= count, WAIT)
            .await
        {
            panic!(
                "{resource}: {count} Healthy free tokens did not show within {WAIT:?} (the kubelet sees {}): the release waited for never reached it",
                free(&self.devices(resource))
            );
        }
    }

    /// The tokens of `resource` held by the Pods the kubelet has.
    fn taken(&self, resource: &str) -> BTreeSet<String> {
        let books = self.inner.books();
        books
            .allocated
            .iter()
            .filter(|(uid, _)| books.active.contains(*uid))
            .flat_map(|(_, containers)| containers.values())
            .filter_map(|by_resource| by_resource.get(resource))
            .flatten()
            .cloned()
            .collect()
    }

    /// Waits at most `within` until `check` holds for a resource's token list; answers whether
    /// it did (never, for a resource not registered or whose ListAndWatch ended).
    pub async fn until_devices(
        &self,
        resource: &str,
        check: impl Fn(&[dp::Device]) -> bool,
        within: Duration,
    ) -> bool {
        let mut rx = {
            let books = self.inner.books();
            match books.plugins.get(resource) {
                Some(p) => p.devices.clone(),
                None => return false,
            }
        };
        let wait = async {
            loop {
                if check(&rx.borrow_and_update()) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(within, wait).await.unwrap_or(false)
    }

    /// Creates a Pod in the API server (Pending; the kubelet has not seen it).
    pub fn create(&self, pod: Pod) {
        self.inner.pods.upsert(pod);
    }

    /// Admits a created Pod: adds it, then per container and resource picks healthy free
    /// tokens (asking GetPreferredAllocation when offered) and calls Allocate. On a failure the
    /// Pod's devices are released and the error returned, as the kubelet fails the Pod with
    /// `UnexpectedAdmissionError`.
    pub async fn admit(&self, uid: &str) -> Result<Admission, Status> {
        self.admit_some(uid, None).await
    }

    /// Admits only the named containers of a Pod (to stop between two of them), leaving the Pod
    /// added and Pending.
    pub async fn admit_only(&self, uid: &str, containers: &[&str]) -> Result<Admission, Status> {
        self.admit_some(uid, Some(containers)).await
    }

    async fn admit_some(&self, uid: &str, only: Option<&[&str]>) -> Result<Admission, Status> {
        let pod = self
            .inner
            .pods
            .pods()
            .unwrap_or_default()
            .into_iter()
            .find(|p| p.uid == uid)
            .ok_or_else(|| Status::not_found(format!("no pod {uid}")))?;
        self.inner.books().active.insert(uid.to_string());
        let result = self.admit_containers(&pod, only).await;
        let mut books = self.inner.books();
        match &result {
            Ok(_) if only.is_some() => {}
            Ok(_) => {
                drop(books);
                self.inner.pods.set_phase(uid, Phase::Running);
            }
            Err(_) => {
                books.allocated.remove(uid);
                books.active.remove(uid);
            }
        }
        result
    }

    async fn admit_containers(
        &self,
        pod: &Pod,
        only: Option<&[&str]>,
    ) -> Result<Admission, Status> {
        let mut admission = Admission::new();
        for container in &pod.containers {
            if only.is_some_and(|names| !names.contains(&container.name.as_str())) {
                continue;
            }
            for resource in container.limits.keys() {
                let plugin = self.inner.books().plugins.get(resource).cloned();
                let Some(mut plugin) = plugin else { continue };
                let Some(count) = container.count(resource) else {
                    continue;
                };
                let ids = self.pick(resource, &mut plugin, count as usize).await?;
                let since = Instant::now();
                let flight = self.inner.in_flight();
                let response = plugin
                    .client
                    .allocate(dp::AllocateRequest {
                        container_requests: vec![dp::ContainerAllocateRequest {
                            devices_ids: ids.clone(),
                        }],
                    })
                    .await;
                drop(flight);
                self.inner.timed(resource, Call::Allocate, since);
                let response = response?.into_inner();
                let answer = response
                    .container_responses
                    .into_iter()
                    .next()
                    .ok_or_else(|| Status::internal("allocate answered no container"))?;
                self.inner
                    .books()
                    .allocated
                    .entry(pod.uid.clone())
                    .or_default()
                    .entry(container.name.clone())
                    .or_default()
                    .insert(resource.clone(), ids);
                admission
                    .entry(container.name.clone())
                    .or_default()
                    .insert(resource.clone(), answer);
            }
        }
        Ok(admission)
    }

    async fn pick(
        &self,
        resource: &str,
        plugin: &mut Plugin,
        count: usize,
    ) -> Result<Vec<String>, Status> {
        let taken = self.taken(resource);
        let mut available: Vec<String> = plugin
            .devices
            .borrow()
            .iter()
            .filter(|d| d.health == "Healthy" && !taken.contains(&d.id))
            .map(|d| d.id.clone())
            .collect();
        if let Some(state) = self
            .inner
            .shuffle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            shuffle(&mut available, state);
        }
        if available.len() < count {
            return Err(Status::resource_exhausted(format!(
                "insufficient {resource}: {count} requested, {} healthy and free",
                available.len()
            )));
        }
        let mut ids = Vec::with_capacity(count);
        if plugin.options.get_preferred_allocation_available {
            let request = dp::PreferredAllocationRequest {
                container_requests: vec![dp::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available.clone(),
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: count as i32,
                }],
            };
            let since = Instant::now();
            let flight = self.inner.in_flight();
            let preferred = plugin.client.get_preferred_allocation(request).await;
            drop(flight);
            self.inner
                .timed(resource, Call::GetPreferredAllocation, since);
            let preferred = preferred?.into_inner();
            for id in preferred
                .container_responses
                .into_iter()
                .flat_map(|r| r.device_i_ds)
            {
                if available.contains(&id) && !ids.contains(&id) && ids.len() < count {
                    ids.push(id);
                }
            }
        }
        for id in available {
            if ids.len() >= count {
                break;
            }
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// The calls timed while admitting Pods since the last take, oldest first.
    pub fn take_timings(&self) -> Vec<CallTiming> {
        std::mem::take(
            &mut *self
                .inner
                .timings
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Calls Allocate directly, as a retrying kubelet would.
    pub async fn allocate_raw(
        &self,
        resource: &str,
        ids: Vec<String>,
    ) -> Result<dp::AllocateResponse, Status> {
        let plugin = self.inner.books().plugins.get(resource).cloned();
        let Some(mut plugin) = plugin else {
            return Err(Status::not_found(format!("{resource} is not registered")));
        };
        Ok(plugin
            .client
            .allocate(dp::AllocateRequest {
                container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids }],
            })
            .await?
            .into_inner())
    }

    /// Calls GetPreferredAllocation directly.
    pub async fn preferred_raw(
        &self,
        resource: &str,
        available: Vec<String>,
        size: i32,
    ) -> Result<Vec<String>, Status> {
        let plugin = self.inner.books().plugins.get(resource).cloned();
        let Some(mut plugin) = plugin else {
            return Err(Status::not_found(format!("{resource} is not registered")));
        };
        let answer = plugin
            .client
            .get_preferred_allocation(dp::PreferredAllocationRequest {
                container_requests: vec![dp::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: size,
                }],
            })
            .await?
            .into_inner();
        Ok(answer
            .container_responses
            .into_iter()
            .flat_map(|r| r.device_i_ds)
            .collect())
    }

    /// The device IDs a container holds of a resource.
    pub fn held(&self, uid: &str, container: &str, resource: &str) -> Vec<String> {
        self.inner
            .books()
            .allocated
            .get(uid)
            .and_then(|c| c.get(container))
            .and_then(|r| r.get(resource))
            .cloned()
            .unwrap_or_default()
    }

    /// The Pod ran to completion: the kubelet takes its devices back.
    pub fn finish(&self, uid: &str) {
        {
            let mut books = self.inner.books();
            books.active.remove(uid);
            books.allocated.remove(uid);
        }
        self.inner.pods.set_phase(uid, Phase::Succeeded);
    }

    /// The Pod is deleted.
    pub fn delete(&self, uid: &str) {
        {
            let mut books = self.inner.books();
            books.active.remove(uid);
            books.allocated.remove(uid);
        }
        self.inner.pods.remove(uid);
    }
}

struct RegistrationService {
    inner: Arc<Inner>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        let request = request.into_inner();
        if request.version != "v1beta1" {
            return Err(Status::invalid_argument(format!(
                "unsupported version {}",
                request.version
            )));
        }
        let path = self
            .inner
            .dir
            .join("device-plugins")
            .join(&request.endpoint);
        let inner = self.inner.clone();
        // Like the kubelet, dial the plugin after answering the registration.
        tokio::spawn(async move {
            let Ok(channel) = socket::connect(path.clone()).await else {
                return;
            };
            let mut client = DevicePluginClient::new(channel);
            let Ok(options) = client.get_device_plugin_options(dp::Empty {}).await else {
                return;
            };
            let Ok(stream) = client.list_and_watch(dp::Empty {}).await else {
                return;
            };
            let mut stream = stream.into_inner();
            let (tx, rx) = watch::channel(Vec::new());
            let (listed_tx, listed) = watch::channel(false);
            let open = Arc::new(AtomicBool::new(true));
            inner.books().plugins.insert(
                request.resource_name.clone(),
                Plugin {
                    client,
                    options: options.into_inner(),
                    devices: rx,
                    listed,
                    open: open.clone(),
                    socket: path,
                },
            );
            while let Ok(Some(list)) = stream.message().await {
                let _ = tx.send(list.devices);
                listed_tx.send_replace(true);
                inner.registrations.send_modify(|n| *n += 1);
            }
            open.store(false, Ordering::SeqCst);
            inner.registrations.send_modify(|n| *n += 1);
        });
        Ok(Response::new(dp::Empty {}))
    }
}

struct PodResourcesService {
    inner: Arc<Inner>,
}

#[tonic::async_trait]
impl PodResourcesLister for PodResourcesService {
    async fn list(
        &self,
        _: Request<pr::ListPodResourcesRequest>,
    ) -> Result<Response<pr::ListPodResourcesResponse>, Status> {
        if self.inner.lists_fail.load(Ordering::SeqCst) {
            return Err(Status::unavailable(
                "the emulated kubelet refuses pod-resources List",
            ));
        }
        self.inner.lists.send_modify(|n| *n += 1);
        if self
            .inner
            .calls_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
        {
            self.inner
                .lists_in_calls
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let pods = self.inner.pods.pods().unwrap_or_default();
        let books = self.inner.books();
        let pod_resources = pods
            .iter()
            .filter(|p| books.active.contains(&p.uid))
            .map(|p| pr::PodResources {
                name: p.name.clone(),
                namespace: p.namespace.clone(),
                containers: p
                    .containers
                    .iter()
                    .map(|c| pr::ContainerResources {
                        name: c.name.clone(),
                        devices: books
                            .allocated
                            .get(&p.uid)
                            .and_then(|a| a.get(&c.name))
                            .map(|by_resource| {
                                by_resource
                                    .iter()
                                    .map(|(resource, ids)| pr::ContainerDevices {
                                        resource_name: resource.clone(),
                                        device_ids: ids.clone(),
                                        topology: None,
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(pr::ListPodResourcesResponse {
            pod_resources,
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<pr::AllocatableResourcesRequest>,
    ) -> Result<Response<pr::AllocatableResourcesResponse>, Status> {
        Ok(Response::new(pr::AllocatableResourcesResponse::default()))
    }

    async fn get(
        &self,
        _: Request<pr::GetPodResourcesRequest>,
    ) -> Result<Response<pr::GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("the emulator answers List only"))
    }
}

/// The plugin's watch of the emulated API server's Pods. It shows every Pod of the API server
/// except those held back ([`PodWatch::hold`]) until they are delivered ([`PodWatch::deliver`]):
/// a watch that lags the kubelet's, which adds and admits a Pod as soon as its own watch sees it.
/// A direct read ([`PodSource::lookup`]) sees the API server as it stands, held Pods included,
/// as a GET does, unless direct reads are made to fail. It counts what the plugin asks of it,
/// so a test can wait for the plugin to be waiting on the watch, and can show that the common
/// path reads nothing directly.
#[derive(Clone)]
pub struct PodWatch {
    api: MemoryPods,
    state: Arc<WatchState>,
}

struct WatchState {
    /// UIDs of Pods the watch has not delivered.
    held: Mutex<BTreeSet<String>>,
    /// Direct reads fail (the API server cannot be reached).
    lookups_fail: AtomicBool,
    /// Direct reads asked for, answered or not.
    lookups: watch::Sender<usize>,
    /// Subscriptions to the watch's changes (the plugin's start, then each wait for a Pod).
    subscriptions: watch::Sender<usize>,
}

impl PodWatch {
    /// A watch over `api` that delivers everything at once until told otherwise.
    pub fn over(api: MemoryPods) -> PodWatch {
        PodWatch {
            api,
            state: Arc::new(WatchState {
                held: Mutex::new(BTreeSet::new()),
                lookups_fail: AtomicBool::new(false),
                lookups: watch::channel(0).0,
                subscriptions: watch::channel(0).0,
            }),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.state
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch will not show the Pod `uid` (created or not yet) until [`PodWatch::deliver`].
    pub fn hold(&self, uid: &str) {
        self.held().insert(uid.to_string());
    }

    /// The watch delivers the Pod `uid` now.
    pub fn deliver(&self, uid: &str) {
        self.held().remove(uid);
        self.api.touch();
    }

    /// Makes direct reads fail (`true`) or answer again (`false`).
    pub fn fail_lookups(&self, fail: bool) {
        self.state.lookups_fail.store(fail, Ordering::SeqCst);
    }

    /// How many direct reads the plugin asked for.
    pub fn lookups(&self) -> usize {
        *self.state.lookups.borrow()
    }

    /// How many times the plugin subscribed to the watch's changes.
    pub fn subscriptions(&self) -> usize {
        *self.state.subscriptions.borrow()
    }

    /// Waits until the plugin has subscribed to the watch's changes `count` times in all.
    pub async fn wait_for_subscriptions(&self, count: usize) {
        let mut rx = self.state.subscriptions.subscribe();
        if tokio::time::timeout(WAIT, rx.wait_for(|n| *n >= count))
            .await
            .is_err()
        {
            panic!("the plugin never waited on the Pod watch ({count} subscriptions expected)");
        }
    }

    fn visible(&self, pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
        let held = self.held();
        pods.into_iter()
            .filter(|p| !held.contains(&p.uid))
            .collect()
    }
}

impl PodSource for PodWatch {
    fn pods(&self) -> Option<Vec<Pod>> {
        self.snapshot()
            .map(|pods| pods.iter().map(|p| Pod::clone(p)).collect())
    }

    fn snapshot(&self) -> Option<Vec<Arc<Pod>>> {
        self.api.snapshot().map(|pods| self.visible(pods))
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.state.subscriptions.send_modify(|n| *n += 1);
        self.api.changes()
    }

    fn lookup<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodLookup<'a> {
        self.state.lookups.send_modify(|n| *n += 1);
        let answer = if self.state.lookups_fail.load(Ordering::SeqCst) {
            Err(LookupError::Unavailable {
                namespace: namespace.to_string(),
                name: name.to_string(),
                reason: "the emulated API server refuses direct reads".to_string(),
            })
        } else {
            Ok(self.api.get(namespace, name))
        };
        Box::pin(std::future::ready(answer))
    }
}

/// One program run through a [`CommandLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its argv joined by spaces (`nvidia-smi -q -x -i 0`).
    pub argv: String,
    /// Whether it ran and exited 0.
    pub success: bool,
}

impl Run {
    /// Whether its argv holds `words` in a row (`run.has("-q -x -i 0")`).
    pub fn has(&self, words: &str) -> bool {
        format!(" {} ", self.argv).contains(&format!(" {words} "))
    }
}

/// The node's programs as a test sees them run: every call is passed on to the wrapped
/// [`Commands`] and recorded, so a test waits until the plugin has looked (a reclaim pass's
/// process listing, a destroy the driver refused, an unowned-instance pass's listing) instead
/// of sleeping for as long as that usually takes.
pub struct CommandLog {
    inner: Arc<dyn Commands>,
    runs: watch::Sender<Vec<Run>>,
}

impl CommandLog {
    /// Records every call made through it to `inner`.
    pub fn over(inner: Arc<dyn Commands>) -> Arc<CommandLog> {
        Arc::new(CommandLog {
            inner,
            runs: watch::channel(Vec::new()).0,
        })
    }

    /// How many runs so far `matching` holds for.
    pub fn count(&self, matching: impl Fn(&Run) -> bool) -> usize {
        self.runs.borrow().iter().filter(|r| matching(r)).count()
    }

    /// Waits until `matching` holds for `count` runs in all; after [`WAIT`] fails naming
    /// `what` (the look that never came) and the last runs.
    pub async fn wait_runs(&self, what: &str, matching: impl Fn(&Run) -> bool, count: usize) {
        let mut rx = self.runs.subscribe();
        let seen = tokio::time::timeout(
            WAIT,
            rx.wait_for(|runs| runs.iter().filter(|r| matching(r)).count() >= count),
        )
        .await;
        if seen.is_err() {
            let runs = self.runs.borrow();
            let last: Vec<&str> = runs.iter().rev().take(8).map(|r| r.argv.as_str()).collect();
            panic!("{what}: not within {WAIT:?} (last runs, newest first: {last:?})");
        }
    }
}

impl Commands for CommandLog {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        let answer = self.inner.run(argv, deadline);
        let run = Run {
            argv: argv.join(" "),
            success: answer.as_ref().is_ok_and(CommandOutput::success),
        };
        self.runs.send_modify(|runs| runs.push(run));
        answer
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }

    fn search_note(&self, program: &str) -> Option<String> {
        self.inner.search_note(program)
    }
}
