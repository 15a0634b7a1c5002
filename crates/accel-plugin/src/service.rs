//! The device plugin of one node: shared state (ledger + journal + pools), the Allocate
//! pipeline, ListAndWatch, GetPreferredAllocation, and the per-pool servers that register with
//! the kubelet and register again when it restarts.
//!
//! Allocate: map the device IDs to accelerators, recognise a retry, identify the container
//! (pod-resources, then pending Pods; a Pod the watch has not delivered is read from the API
//! server or waited for, bounded: [`identity`]), let the ledger decide, answer with the
//! responder, give the grant back if the responder refuses, journal it, answer once the entry is
//! durable (the lock released meanwhile: [`Shared::durable`]), and tell every ListAndWatch
//! stream once the kubelet's calls go quiet ([`announce`]). Every refusal is logged at warn
//! naming the Pod, the container and the reason ([`refused`]). Errors become `tonic::Status`
//! here and nowhere else; each refusal's `Status` is marked with its reason, and the handlers
//! time every call and count the refusals ([`crate::metrics`]).
//!
//! GetPreferredAllocation for a slice identifies its container the same way and offers only
//! accelerators its own budget fits ([`Shared::preferred_slice`]); other families' hints read
//! the ledger alone.
//!
//! Pieces apart from the hot path live in child modules: [`identity`] waits for a Pod the watch
//! lags on, [`reseat`] replaces the accelerators served when a detection finds them changed, and
//! [`rebuild`] settles the ledger after the journal against the Pods' annotations and the
//! kubelet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use accel_core::ledger::placement::{self, Request};
use accel_core::ledger::{Claim, Family, Grant, GrantKey, Ledger, Policy, Receipt, Refusal, Seat};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::{Code, Status};

use crate::api::deviceplugin as dp;
use crate::api::deviceplugin::device_plugin_server::DevicePlugin;
use crate::api::deviceplugin::registration_client::RegistrationClient;
use crate::api::podresources::ListPodResourcesResponse;
use crate::api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::budget::{slice_budget, slice_cores};
use crate::identify::IdentifyError;
use crate::journal::{Entry, Journal, JournalError, Ticket};
use crate::metrics::{
    Attribution, PluginMetrics, RefusalReason, Refuse, ResourceMetrics, Stage, StageTimes,
};
use crate::pods::{Pod, PodSource};
use crate::pools::{Pool, PoolKind, PoolView};
use crate::settings::Settings;
use crate::socket;
use accel_backend::respond::{Answer, Injection, Responder};

mod announce;
mod claims;
mod identity;
mod orphans;
mod partition;
mod rebuild;
mod reseat;
mod verify;

pub use claims::{ClaimGrant, ClaimPartition, ClaimRefusal, ClaimSlice};
pub use identity::{DIRECT_GRACE, IDENTIFY_WAIT};
pub use orphans::{DEFAULT_DEBOUNCE as DEFAULT_ORPHAN_DEBOUNCE, Orphans};
pub use reseat::DroppedGrant;

/// The API version the plugins register with.
pub const API_VERSION: &str = "v1beta1";
/// How long the pod-resources lookup may take before identification falls back.
const KUBELET_LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);

/// What the plugin serves and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// `<kubelet-dir>`: sockets are `device-plugins/…` and `pod-resources/kubelet.sock`.
    pub kubelet_dir: PathBuf,
    /// `--data-dir`: the journal.
    pub data_dir: PathBuf,
    pub settings: Settings,
    /// What the manufacturer's backend offers: resource names and families.
    pub offer: Offer,
    pub seats: Vec<Seat>,
    /// The manufacturer's backend answering each grant with its injection.
    pub responder: Arc<dyn Responder>,
    /// How often the servers look for a kubelet restart.
    pub poll_interval: Duration,
    /// Where Allocate's latency, refusals and grants are counted.
    pub metrics: PluginMetrics,
    /// The backend's partitioner and the programs it runs (`None`: no partition is made here).
    pub partitions: Option<Partitions>,
}

/// What makes and takes back hardware partitions on this node.
#[derive(Clone)]
pub struct Partitions {
    pub partitioner: Arc<dyn accel_backend::Partitioner>,
    /// The node's programs (live, or the recorded host's replay).
    pub commands: Arc<dyn accel_host::Commands>,
    /// When instances no grant accounts for are destroyed ([`orphans`]).
    pub orphans: Orphans,
}

impl Partitions {
    /// Runs `call` with the partitioner and the node's programs on `gpu`, on the blocking pool
    /// (the vendor calls are bounded by the partitioner, and never made under a lock).
    pub(crate) async fn call<T: Send + 'static>(
        &self,
        gpu: &accel_backend::partition::PartitionGpu,
        call: impl FnOnce(
            &dyn accel_backend::Partitioner,
            &dyn accel_host::Commands,
            &accel_backend::partition::PartitionGpu,
        ) -> T
        + Send
        + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let (partitioner, commands, gpu) =
            (self.partitioner.clone(), self.commands.clone(), gpu.clone());
        tokio::task::spawn_blocking(move || call(partitioner.as_ref(), commands.as_ref(), &gpu))
            .await
    }

    /// The live instances on `gpu` ([`Partitions::call`]).
    pub(crate) async fn live(
        &self,
        gpu: &accel_backend::partition::PartitionGpu,
    ) -> Result<
        Result<Vec<accel_backend::partition::Instance>, accel_backend::partition::PartitionError>,
        tokio::task::JoinError,
    > {
        self.call(gpu, |p, c, gpu| p.instances(c, gpu)).await
    }
}

impl std::fmt::Debug for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitions").finish_non_exhaustive()
    }
}

/// What one manufacturer's accelerators are offered as: the facts the plugin takes from the
/// backend and the settings, never the manufacturer's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// `<base>` of every family's resource (`nvidia.com/gpu`, or the deployment's
    /// `GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`).
    pub resource_base: String,
    /// The SSH sidecar's resource (`device.gpustack.ai/<manufacturer>.visibility`).
    pub visibility_resource: String,
    /// The `<base>` pool (whole cards) is served through the device plugin: off where whole
    /// cards go through DRA only, as a DeviceClass's extended resource
    /// (`serve --dra --dra-extended-resource`), so the kubelet advertises none and the
    /// scheduler serves a Pod's `<base>` request by DRA.
    pub exclusive: bool,
    /// The `<base>.shared` pool is served (`serve --no-shared` turns it off).
    pub shared: bool,
    /// The `<base>.sliced` pool is served: the backend slices, its library for the node's
    /// runtime is staged, and `serve --no-sliced` is not given.
    pub sliced: bool,
    /// The `<base>.partitioned` pool is served: the backend has a partitioner and
    /// `serve --no-partitioned` is not given. It is registered only where an accelerator is in
    /// a partitioning mode with a profile it can place.
    pub partitioned: bool,
    /// `<kind>` of `<base>.partitioned.<kind>-<profile>` (`GPUSTACK_<MANUFACTURER>_PARTITION_KIND`,
    /// `mig` for NVIDIA); `None`: the manufacturer has no partitioned family.
    pub partition_kind: Option<String>,
    /// The slices on one accelerator may ask for more than 100 cores percent together (the
    /// manufacturers table's `cores_percentage_overcommit`); false: the ledger counts each
    /// slice's cores percentage on its accelerator ([`Policy::cores_overcommit`]).
    pub cores_percentage_overcommit: bool,
}

impl Offer {
    /// A manufacturer's default resource names, every family served.
    pub fn of(manufacturer: accel_core::Manufacturer) -> Offer {
        Offer::with_base(manufacturer, manufacturer.default_resource_base())
    }

    /// A manufacturer's resources under `resource_base`, every family served.
    pub fn with_base(manufacturer: accel_core::Manufacturer, resource_base: &str) -> Offer {
        Offer {
            resource_base: resource_base.to_string(),
            visibility_resource: format!(
                "{}/{}.visibility",
                accel_core::resources::INTERNAL_DOMAIN,
                manufacturer.name()
            ),
            exclusive: true,
            shared: true,
            sliced: true,
            partitioned: true,
            partition_kind: accel_core::resources::partition_kind(manufacturer).map(str::to_string),
            cores_percentage_overcommit: manufacturer.cores_percentage_overcommit(),
        }
    }
}

impl Config {
    pub fn device_plugin_dir(&self) -> PathBuf {
        self.kubelet_dir.join("device-plugins")
    }

    pub fn pod_resources_socket(&self) -> PathBuf {
        self.kubelet_dir.join("pod-resources").join("kubelet.sock")
    }
}

/// Why the plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("ledger journal: {0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Preload(#[from] accel_backend::respond::PrepareError),
}

/// An answer built under the ledger lock and not given yet: it goes out once `ticket` is durable
/// ([`Shared::durable`]).
pub(crate) struct Granted {
    response: dp::ContainerAllocateResponse,
    /// The grant this call made, given back if it cannot be made durable (none for a retry, a
    /// sidecar or a partition, whose own path waits for its entry).
    fresh: Option<Receipt>,
    /// Covers this grant's journal entry and every entry before it.
    ticket: Ticket,
}

struct State {
    ledger: Ledger,
    journal: Journal,
    /// Visibility sidecars served, by container, with the device IDs they were given.
    visibility: BTreeMap<GrantKey, Vec<String>>,
    /// Pods read directly from the API server that hold a grant, by UID, until the watch
    /// delivers them ([`identity`]).
    direct: BTreeMap<String, identity::Direct>,
    /// Grants made from the Pod watch's answer alone, until the kubelet confirms their
    /// container ([`verify`]).
    unverified: Vec<verify::Unverified>,
    /// Partition grants whose Pod is gone and whose instance is being destroyed: they stay in
    /// the ledger, occupying their placement, until it is ([`partition`]).
    reclaiming: BTreeSet<GrantKey>,
    /// How many reclaim passes in a row found each gone Pod's partition busy or refused
    /// ([`partition`]: logged once, at [`partition::RECLAIM_LOG_AFTER`]).
    reclaim_blocked: BTreeMap<GrantKey, u32>,
    /// Partition grants whose instance was not found live after a restart: never acted on,
    /// their container's next Allocate is refused ([`partition`]).
    stale: BTreeMap<GrantKey, String>,
    /// Live instances no grant accounts for, and subdivided ones ([`orphans`]).
    orphans: orphans::OrphanBook,
}

/// The UIDs of the Pods that exist: the watch's `pods`, and those read directly that it has
/// not delivered yet (a driver object's reclaimer must not take theirs).
fn live_uids(pods: &[Arc<Pod>], state: &State) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.uid.clone())
        .chain(state.direct.keys().cloned())
        .collect()
}

struct Shared {
    config: Config,
    /// The pools, one per resource, fixed at start; their tokens follow the seats
    /// ([`reseat`]). Read through [`Shared::pools`], which never holds the lock.
    pools: RwLock<Arc<[Pool]>>,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// When a grant is announced: once the kubelet's calls go quiet ([`announce`]).
    announce: Arc<announce::Announce>,
    /// Wakes the verifier after a grant made from the watch ([`verify`]).
    verify_wake: tokio::sync::Notify,
    pods: Arc<dyn PodSource>,
    pod_resources: PodResourcesListerClient<tonic::transport::Channel>,
    /// What the ledger's rebuild found worth saying (each names the Pod), for the log and tests.
    rebuild_notes: Mutex<Vec<String>>,
    /// Each pool's metric handles, by pool index (a pool's resource never changes).
    resource_metrics: Vec<ResourceMetrics>,
}

/// The running plugin: a handle to its state and tasks.
pub struct DevicePlugins {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl DevicePlugins {
    /// Opens the journal, rebuilds the ledger, and starts one server per pool plus the Pod
    /// watcher. Must be called inside a tokio runtime.
    pub async fn start(
        config: Config,
        pods: Arc<dyn PodSource>,
    ) -> Result<DevicePlugins, StartError> {
        if config.offer.sliced {
            config.responder.prepare_slicing()?;
        }
        let pools: Arc<[Pool]> = Pool::build_offer(&config.offer, &config.seats).into();
        let policy = Policy {
            release_terminated_pods: config.settings.release_terminated_pods,
            slice_gate: config.settings.sliced_allocate_gate,
            slices_held_until_gone: config.responder.holds_slices_until_pod_gone(),
            cores_overcommit: config.offer.cores_percentage_overcommit,
        };
        let (journal, replay) = Journal::open_measured(&config.data_dir, config.metrics.journal())?;
        let pod_resources =
            PodResourcesListerClient::new(socket::lazy_channel(config.pod_resources_socket()));
        let resource_metrics = pools
            .iter()
            .map(|p| config.metrics.for_resource(&p.resource))
            .collect();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ledger: Ledger::new(config.seats.clone(), policy),
                journal,
                visibility: BTreeMap::new(),
                direct: BTreeMap::new(),
                unverified: Vec::new(),
                reclaiming: BTreeSet::new(),
                reclaim_blocked: BTreeMap::new(),
                stale: BTreeMap::new(),
                orphans: orphans::OrphanBook::default(),
            }),
            changed: watch::channel(0).0,
            announce: Arc::new(announce::Announce::new()),
            verify_wake: tokio::sync::Notify::new(),
            pools: RwLock::new(pools),
            pods,
            pod_resources,
            rebuild_notes: Mutex::new(Vec::new()),
            resource_metrics,
            config,
        });
        if replay.torn_tail {
            tracing::warn!("ledger journal: dropped a torn last entry (a crash mid-append)");
        }
        let grants = match &replay.corrupt {
            Some((aside, reason)) => {
                tracing::error!(
                    "LEDGER JOURNAL CORRUPT ({reason}): kept aside at {}; rebuilding the ledger from the Pods' annotations, the kubelet and the Pods",
                    aside.display()
                );
                BTreeMap::new()
            }
            None => replay.grants,
        };
        shared.restore(grants);
        shared.restore_partition_records();
        shared.check_partitions(None).await;
        shared.adopt_unattributed();
        // The journal first; then what the cluster recorded, once the Pods are known (else
        // the Pod watcher settles at its first sync: Allocate cannot identify a container
        // before then, so nothing is granted in between).
        // Subscribed before looking, so a sync in between still wakes the watcher.
        let pod_changes = shared.pods.changes();
        let settled = shared.pods.pods().is_some();
        if settled {
            shared.settle().await;
        }
        shared.reconcile_pods();
        let (shutdown, _) = watch::channel(false);
        let mut tasks = Vec::new();
        for index in 0..shared.pools().len() {
            let shared = shared.clone();
            let stop = shutdown.subscribe();
            tasks.push(tokio::spawn(async move {
                serve_pool(shared, index, stop).await
            }));
        }
        {
            let shared = shared.clone();
            let mut stop = shutdown.subscribe();
            let mut changes = pod_changes;
            let mut settled = settled;
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.changed() => break,
                        changed = changes.changed() => {
                            if changed.is_err() { break; }
                            if !settled && shared.pods.pods().is_some() {
                                shared.settle().await;
                                settled = true;
                            }
                            if !shared.lock().unverified.is_empty() {
                                // A Pod that left may hold a grant the watch attributed: let
                                // the kubelet say whose it is before the Pod's word counts.
                                shared.verify_once().await;
                            }
                            shared.reconcile_pods();
                        }
                    }
                }
            }));
        }
        tasks.push(tokio::spawn(
            shared.clone().verify_loop(shutdown.subscribe()),
        ));
        if shared.config.partitions.is_some() {
            tasks.push(tokio::spawn(
                shared.clone().orphan_loop(shutdown.subscribe()),
            ));
        }
        if let Some(every) = shared.config.responder.reclaim_interval() {
            tasks.push(tokio::spawn(
                shared
                    .clone()
                    .driver_reclaim_loop(every, shutdown.subscribe()),
            ));
        }
        Ok(DevicePlugins {
            shared,
            shutdown,
            tasks,
        })
    }

    /// Stops every server and task, removing the plugin sockets.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// The resources served, in registration order.
    pub fn resources(&self) -> Vec<String> {
        self.shared
            .pools()
            .iter()
            .map(|p| p.resource.clone())
            .collect()
    }

    /// What the ledger's rebuild at start logged (grants adopted from the Pods' annotations or
    /// the kubelet, disagreements, unreadable annotations), each naming the Pod.
    pub fn rebuild_notes(&self) -> Vec<String> {
        self.shared
            .rebuild_notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks an accelerator healthy or not (issue 6's health rule calls this); its tokens flip
    /// on every ListAndWatch stream at once.
    pub fn set_accelerator_health(&self, index: u32, healthy: bool) {
        self.handle().set_accelerator_health(index, healthy);
    }

    /// A copy of the ledger as it stands (for publishing and tests).
    pub fn ledger(&self) -> Ledger {
        self.shared.lock().ledger.clone()
    }

    /// Settles the ledger against the Pods now (the watcher does it on every change).
    pub fn reconcile_pods(&self) {
        self.shared.reconcile_pods();
    }

    /// Asks the kubelet about every grant made from the Pod watch's answer alone until each is
    /// confirmed or moved to the container the kubelet names (the verifier does it by itself a
    /// few milliseconds after each such grant; until then the grant does not follow its Pod).
    pub async fn verify_grants(&self) {
        self.shared.verify_all().await;
    }

    /// A handle on the running plugins' health and ledger, for the daemon's health and
    /// detection loops and its admin socket; it stays valid (and harmless) after [`stop`].
    ///
    /// [`stop`]: DevicePlugins::stop
    pub fn handle(&self) -> PluginHandle {
        PluginHandle {
            shared: self.shared.clone(),
        }
    }
}

/// A cloneable handle on the plugins' shared state: token health and the ledger, nothing that
/// grants.
#[derive(Clone)]
pub struct PluginHandle {
    shared: Arc<Shared>,
}

impl PluginHandle {
    /// Marks an accelerator healthy or not; its tokens flip on every ListAndWatch stream at
    /// once. Returns whether its health changed.
    pub fn set_accelerator_health(&self, index: u32, healthy: bool) -> bool {
        let changed = self.shared.lock().ledger.set_health(index, healthy);
        if changed {
            self.shared.notify();
        }
        changed
    }

    /// A copy of the ledger as it stands.
    pub fn ledger(&self) -> Ledger {
        self.shared.lock().ledger.clone()
    }

    /// Ticks on every grant, release and health change (what moves ListAndWatch), so a
    /// publisher can follow the ledger without polling it.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    /// Runs `f` with the ledger locked, so no Allocate can grant while it runs. `f` must not
    /// call back into the plugins.
    pub fn with_ledger<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        let state = self.shared.lock();
        f(&state.ledger)
    }

    /// Runs `f` with the ledger locked and marks the accelerators it answers Unhealthy before
    /// the lock is released: from then on nothing is granted on them, while Allocate and
    /// ListAndWatch carry on for the others. A GPU reset takes its GPUs out of service this
    /// way, deciding and withdrawing in one step, and brings them back with
    /// [`set_accelerator_health`](Self::set_accelerator_health). `f` must not call back into
    /// the plugins.
    pub fn withdraw<E>(
        &self,
        f: impl FnOnce(&Ledger) -> Result<Vec<u32>, E>,
    ) -> Result<Vec<u32>, E> {
        let mut state = self.shared.lock();
        let indexes = f(&state.ledger)?;
        let mut changed = false;
        for &index in &indexes {
            changed |= state.ledger.set_health(index, false);
        }
        drop(state);
        if changed {
            self.shared.notify();
        }
        Ok(indexes)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pools as they stand (a snapshot: a seat replacement swaps in new ones).
    fn pools(&self) -> Arc<[Pool]> {
        self.pools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Tells the ListAndWatch streams and the publisher about a grant once the kubelet's calls
    /// have gone quiet ([`announce`]), every grant of that burst in one wake-up.
    fn notify_after_answer(&self) {
        if !self.announce.claim() {
            return;
        }
        let granted = Instant::now();
        let changed = self.changed.clone();
        let announce = self.announce.clone();
        tokio::spawn(async move {
            announce.until_due(granted).await;
            changed.send_modify(|n| *n = n.wrapping_add(1));
        });
    }

    fn restore(&self, grants: BTreeMap<GrantKey, Grant>) {
        let mut state = self.lock();
        let (charging, released): (Vec<_>, Vec<_>) =
            grants.into_iter().partition(|(_, g)| !g.finished);
        for (key, grant) in charging.into_iter().chain(released) {
            if let Err(refusal) = state.ledger.restore(key.clone(), grant) {
                tracing::error!("ledger rebuild: {key}: dropped, it conflicts: {refusal}");
            }
        }
        let grants = state.ledger.grants().clone();
        if let Err(e) = state.journal.compact(&grants) {
            tracing::error!("ledger journal: cannot compact: {e}");
        }
    }

    /// Rebuilds grants from the kubelet's pod-resources answer and the Pods' requests.
    async fn rebuild_from_kubelet(&self) -> BTreeMap<GrantKey, Grant> {
        let mut grants = BTreeMap::new();
        let Some(answer) = self.list_pod_resources().await else {
            tracing::warn!("ledger rebuild: the kubelet's pod-resources could not be read");
            return grants;
        };
        let Some(pods) = self.pods.pods() else {
            tracing::warn!("ledger rebuild: the node's Pods are not known");
            return grants;
        };
        let pools = self.pools();
        let seats: Vec<Seat> = self.lock().ledger.seats().cloned().collect();
        for entry in &answer.pod_resources {
            let Some(pod) = pods
                .iter()
                .find(|p| p.namespace == entry.namespace && p.name == entry.name)
            else {
                continue;
            };
            for container in &entry.containers {
                for devices in &container.devices {
                    let Some(pool) = pools.iter().find(|p| p.resource == devices.resource_name)
                    else {
                        continue;
                    };
                    let Some(family) = pool.family() else {
                        continue;
                    };
                    let accelerators: Vec<u32> = devices
                        .device_ids
                        .iter()
                        .filter_map(|id| pool.tokens.get(id).copied())
                        .collect();
                    let mut device_ids = devices.device_ids.clone();
                    device_ids.sort();
                    let (units, cores) = budget(
                        family,
                        pod,
                        &container.name,
                        pool,
                        |i| {
                            seats
                                .iter()
                                .find(|s| s.index == i)
                                .and_then(|s| s.memory_mib)
                        },
                        &accelerators,
                    );
                    let mut distinct = accelerators.clone();
                    distinct.sort();
                    distinct.dedup();
                    if distinct.is_empty() {
                        // Every device it names is gone from the pools: nothing to charge.
                        continue;
                    }
                    grants.insert(
                        GrantKey::new(pod.uid.clone(), container.name.clone()),
                        Grant {
                            family,
                            resource: pool.resource.clone(),
                            device_ids,
                            accelerators: distinct,
                            units,
                            cores_percentage: cores,
                            partition: None,
                            finished: pod.phase.finished(),
                        },
                    );
                }
            }
        }
        grants
    }

    /// [`live_uids`] now; `None` before the watch's first sync (nothing can be called gone).
    fn live_pod_uids(&self) -> Option<BTreeSet<String>> {
        let state = self.lock();
        let pods = self.pods.snapshot()?;
        Some(live_uids(&pods, &state))
    }

    /// The responder's pass over its driver objects (MetaX's sGPU subdevices), run after
    /// every reconcile and every `every` besides, idle until the watch's first sync.
    async fn driver_reclaim_loop(
        self: Arc<Self>,
        every: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(every) => {}
            }
            let Some(live) = self.live_pod_uids() else {
                continue;
            };
            let responder = self.config.responder.clone();
            let _ = tokio::task::spawn_blocking(move || responder.reclaim_pass(&live)).await;
        }
    }

    /// Releases the grants of Pods that are gone and stops charging finished ones. A partition
    /// whose Pod is gone stays in the ledger while its instance is destroyed ([`partition`]).
    fn reconcile_pods(self: &Arc<Self>) {
        let mut changed = false;
        let mut gone = Vec::new();
        let mut reclaim = Vec::new();
        let mut live: Option<BTreeSet<String>> = None;
        let records = self.records();
        {
            // The Pods are read under the ledger lock: a snapshot taken before it could miss a
            // Pod whose Allocate granted in between, and release that fresh grant as "gone".
            let mut guard = self.lock();
            let state = &mut *guard;
            let Some(pods) = self.pods.snapshot() else {
                return;
            };
            let by_uid: BTreeMap<&str, &Pod> =
                pods.iter().map(|p| (p.uid.as_str(), &**p)).collect();
            if self.config.responder.reclaim_interval().is_some() {
                live = Some(live_uids(&pods, state));
            }
            // A Pod read directly for a grant is confirmed once the watch delivers it; until
            // then, for DIRECT_GRACE, its absence from the watch does not mean it is gone.
            let now = Instant::now();
            state.direct.retain(|uid, direct| {
                !by_uid.contains_key(uid.as_str())
                    && now.duration_since(direct.since) < DIRECT_GRACE
            });
            // A grant the watch attributed is not released on its Pod's word until the kubelet
            // confirmed whose it is ([`verify`]).
            let unverified = Self::unverified_pods(state);
            // A stale partition may hold no grant (refused at its retry): its Pod's end still
            // drops its record.
            let mut uids = state.ledger.pod_uids();
            uids.extend(state.stale.keys().map(|k| k.pod_uid.clone()));
            for uid in uids {
                if unverified.contains(&uid) {
                    continue;
                }
                match by_uid.get(uid.as_str()) {
                    None if state.direct.contains_key(&uid) => {}
                    None => {
                        if let Some(released) =
                            partition::pod_gone(state, &uid, &records, &mut reclaim)
                        {
                            changed |= released;
                            continue;
                        }
                        for (key, grant) in state.ledger.pod_gone(&uid) {
                            tracing::info!(
                                "released {key}: its Pod is gone ({:?})",
                                grant.accelerators
                            );
                            if let Err(e) = state.journal.append(&Entry::Release { key }) {
                                tracing::error!("ledger journal: {e}");
                            }
                        }
                        gone.push(uid);
                        changed = true;
                    }
                    Some(pod) if pod.phase.finished() => {
                        let already = state
                            .ledger
                            .grants()
                            .iter()
                            .filter(|(k, _)| k.pod_uid == uid)
                            .all(|(_, g)| g.finished);
                        if !already {
                            state.ledger.pod_finished(&uid);
                            if let Err(e) = state.journal.append(&Entry::Finish {
                                pod_uid: uid.clone(),
                            }) {
                                tracing::error!("ledger journal: {e}");
                            }
                            changed = true;
                        }
                    }
                    Some(_) => {}
                }
            }
            let direct = &state.direct;
            state.visibility.retain(|k, _| {
                by_uid.contains_key(k.pod_uid.as_str()) || direct.contains_key(&k.pod_uid)
            });
        }
        for uid in gone {
            self.config.responder.reclaim(&uid);
        }
        // Outside the ledger's lock: the pass writes the driver's files.
        if let Some(live) = live {
            self.config.responder.reclaim_pass(&live);
        }
        for (key, grant) in reclaim {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(self.clone().reclaim_partition(key, grant));
                }
                Err(_) => {
                    self.lock().reclaiming.remove(&key);
                }
            }
        }
        if changed {
            self.notify();
        }
    }

    async fn list_pod_resources(&self) -> Option<ListPodResourcesResponse> {
        let mut client = self.pod_resources.clone();
        let call = client.list(crate::api::podresources::ListPodResourcesRequest {});
        match tokio::time::timeout(KUBELET_LOOKUP_TIMEOUT, call).await {
            Ok(Ok(answer)) => Some(answer.into_inner()),
            Ok(Err(status)) => {
                tracing::debug!("pod-resources List failed: {}", status.message());
                None
            }
            Err(_) => {
                tracing::debug!("pod-resources List timed out");
                None
            }
        }
    }

    /// The state every token of `pool` derives from, read under the lock (a few entries; every
    /// token of the partitioned pool, whose health is node-level).
    fn pool_view(&self, pool: &Pool) -> PoolView {
        pool.view(&self.lock().ledger)
    }

    async fn preferred(
        &self,
        pool: &Pool,
        request: &dp::ContainerPreferredAllocationRequest,
    ) -> Vec<String> {
        let size = usize::try_from(request.allocation_size).unwrap_or(0);
        let family = pool.family().filter(|f| *f != Family::Partitioned);
        let Some(family) = family else {
            // Visibility and partition tokens are a fungible count: any will do.
            let mut ids: Vec<String> = request.must_include_device_i_ds.clone();
            for id in &request.available_device_i_ds {
                if ids.len() >= size {
                    break;
                }
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            return ids;
        };
        let index_of = |id: &String| pool.accelerator_of(id);
        let candidates: Vec<u32> = request
            .available_device_i_ds
            .iter()
            .filter_map(index_of)
            .collect();
        let must: Vec<u32> = request
            .must_include_device_i_ds
            .iter()
            .filter_map(index_of)
            .collect();
        let placing = Request {
            family,
            candidates: &candidates,
            must_include: &must,
            size,
            // Only a slice's fit depends on its container; it is read per accelerator below.
            slice_units: 0,
            cores_percentage: None,
        };
        let accelerators = if family == Family::Sliced {
            self.preferred_slice(pool, &placing).await
        } else {
            placement::prefer(&self.lock().ledger, &placing)
        };
        // One token per chosen accelerator: the must-include one where given, else the first
        // available one.
        let mut ids = Vec::with_capacity(size);
        let mut taken = BTreeSet::new();
        for accelerator in accelerators {
            let pick = request
                .must_include_device_i_ds
                .iter()
                .chain(request.available_device_i_ds.iter())
                .find(|id| index_of(id) == Some(accelerator) && !taken.contains(*id));
            if let Some(id) = pick {
                taken.insert(id.clone());
                ids.push(id.clone());
            }
        }
        ids
    }

    /// The hint for a slice reads the container's real request: the container is identified as
    /// Allocate identifies it (the kubelet calls the hint for the same container just before
    /// Allocate), its budget is folded against each candidate's VRAM by [`budget`], the function
    /// Allocate charges with, and only accelerators where that budget fits the room
    /// `Ledger::fits` reads are offered (seed 000, "Placement preference"). A hint that cannot
    /// name the container still answers, the call being advisory: the accelerators with a free
    /// slot and any room, the most room first, where an unknown slice is likeliest to fit.
    async fn preferred_slice(&self, pool: &Pool, placing: &Request<'_>) -> Vec<u32> {
        let started = Instant::now();
        let kubelet = if self.config.settings.identify_by_kubelet {
            self.list_pod_resources().await
        } else {
            None
        };
        let chosen = self
            .identified(
                pool,
                placing.size,
                None,
                kubelet.as_ref(),
                started,
                |state, pod, key| {
                    let memory_mib = |i: u32| state.ledger.seat(i).and_then(|s| s.memory_mib);
                    let units_on = |index: u32| {
                        budget(
                            Family::Sliced,
                            pod,
                            &key.container,
                            pool,
                            memory_mib,
                            &[index],
                        )
                        .0
                    };
                    // The cores percentage is the container's own on every accelerator (only
                    // the units fold against each one's VRAM), as Allocate charges it.
                    let placing = Request {
                        cores_percentage: Some(slice_cores(
                            pod.container(&key.container),
                            &pool.resource,
                        )),
                        ..placing.clone()
                    };
                    (
                        placement::prefer_by(&state.ledger, &placing, &units_on),
                        false,
                    )
                },
            )
            .await;
        match chosen {
            Ok(accelerators) => accelerators,
            Err(e) => {
                tracing::info!(
                    "{}: preference without the container's budget ({e}); offering the accelerators with the most room",
                    pool.resource
                );
                placement::roomiest(&self.lock().ledger, placing)
            }
        }
    }

    /// One container's grant: identified, decided, journalled, its answer built. Not answered
    /// yet: the caller waits for the journal ([`Shared::durable`]). `times` gets each stage.
    async fn allocate(
        &self,
        pool: &Pool,
        device_ids: Vec<String>,
        times: &mut StageTimes,
    ) -> Result<Granted, Status> {
        let started = Instant::now();
        if pool.family() == Some(Family::Partitioned) && !device_ids.is_empty() {
            let response = self.allocate_partition(pool, device_ids, started).await?;
            // A fresh partition waited for its own entry; a retry waits for whatever its
            // first answer's entry may still wait for.
            return Ok(Granted {
                response,
                fresh: None,
                ticket: self.lock().journal.ticket(),
            });
        }
        if device_ids.is_empty() {
            return Err(refused(
                &pool.resource,
                "a container",
                Status::invalid_argument(format!(
                    "allocate for {} names no device IDs",
                    pool.resource
                )),
            ));
        }
        let mut accelerators = Vec::with_capacity(device_ids.len());
        for id in &device_ids {
            match pool.accelerator_of(id) {
                Some(index) => accelerators.push(index),
                None => {
                    return Err(refused(
                        &pool.resource,
                        "a container",
                        Status::invalid_argument(format!(
                            "unknown device ID {id:?} for {}",
                            pool.resource
                        )),
                    ));
                }
            }
        }
        let retry = {
            let asked = std::time::Instant::now();
            let state = self.lock();
            times.lap(Stage::Lock, asked);
            match pool.family() {
                Some(_) => state
                    .ledger
                    .find_by_devices(&pool.resource, &device_ids)
                    .cloned(),
                None => {
                    let mut sorted = device_ids.clone();
                    sorted.sort();
                    state
                        .visibility
                        .iter()
                        .find(|(_, ids)| **ids == sorted)
                        .map(|(k, _)| k.clone())
                }
            }
        };
        if let Some(key) = retry.clone().filter(GrantKey::is_unattributed) {
            return self.regrant_unattributed(pool, key, &device_ids, &accelerators, times);
        }
        if retry.is_none()
            && self.answers_alike(pool)
            && let Some(granted) = self.grant_from_watch(pool, &device_ids, &accelerators, times)
        {
            return Ok(granted);
        }
        if pool.family().is_none() && !self.lock().unverified.is_empty() {
            // A sidecar finds its owner's grant by Pod: settle the grants the watch attributed.
            self.verify_once().await;
        }
        let kubelet = if retry.is_none() && self.config.settings.identify_by_kubelet {
            self.list_pod_resources().await
        } else {
            None
        };
        let count = device_ids.len();
        let answer = self
            .identified(
                pool,
                count,
                retry,
                kubelet.as_ref(),
                started,
                |state, pod, key| {
                    // Everything up to here named the container (the List, the lock, any wait).
                    times.add(Stage::Identify, started.elapsed());
                    let answer = self.grant(
                        state,
                        pool,
                        pod,
                        key,
                        (device_ids, accelerators),
                        Attribution::Kubelet,
                        times,
                    );
                    let granted = answer.is_ok();
                    (answer, granted)
                },
            )
            .await;
        match answer {
            Ok(Ok(granted)) => Ok(granted),
            Ok(Err(status)) => Err(status),
            Err(e) => {
                let status = match e {
                    IdentifyError::PodsUnknown { .. } => Status::unavailable(e.to_string()),
                    _ => Status::failed_precondition(e.to_string()),
                }
                .refused((&e).into());
                Err(refused(&pool.resource, "an unidentified container", status))
            }
        }
    }

    /// Grants the tokens (device IDs and their accelerators) to the identified container under
    /// the ledger lock: the ledger
    /// decides, the responder answers (the grant is given back if it refuses), and the grant is
    /// journalled. Returns the answer, to give once its [`Ticket`] is durable, and the receipt
    /// when the grant is new. `by` says who named the container; a refusal is logged unless it
    /// is the watch alone (such a grant is retried through the kubelet, which names the right
    /// container in the log). `times` gets the ledger, responder and journal stages.
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        state: &mut State,
        pool: &Pool,
        pod: &Pod,
        key: GrantKey,
        (device_ids, accelerators): (Vec<String>, Vec<u32>),
        by: Attribution,
        times: &mut StageTimes,
    ) -> Result<Granted, Status> {
        let records = self.records();
        let who = format!("{}/{} container {}", pod.namespace, pod.name, key.container);
        let refuse = |status: Status| {
            if by == Attribution::Kubelet {
                refused(&pool.resource, &who, status)
            } else {
                status
            }
        };
        // The accelerators may have been replaced since the IDs were mapped (`reseat` swaps the
        // pools under this lock): an index read from the old pools may name another one now.
        if !self.pools().iter().any(|p| std::ptr::eq(p, pool)) {
            return Err(refuse(
                Status::unavailable(format!(
                    "the accelerators behind {} changed during the call; retry",
                    pool.resource
                ))
                .refused(RefusalReason::SeatsChanged),
            ));
        }
        let container = pod.container(&key.container);
        let Some(family) = pool.family() else {
            // The sidecar sees exactly its owner's accelerators; it takes no ledger capacity. A
            // partition owner's sidecar sees the partition, never the parent accelerator.
            let owner_grant = state
                .ledger
                .grants()
                .iter()
                .filter(|(k, _)| k.pod_uid == key.pod_uid && k.container != key.container)
                .min_by_key(|(k, g)| (g.accelerators.len() != device_ids.len(), (*k).clone()))
                .map(|(k, g)| (k.clone(), g.clone()));
            let (accelerators, partition) = match owner_grant
                .as_ref()
                .filter(|(_, g)| g.family == Family::Partitioned)
            {
                Some((owner_key, owner)) => {
                    let uuid =
                        partition::sidecar_partition(state, &records, owner_key, owner)
                            .map_err(|why| {
                                refuse(
                                    Status::failed_precondition(format!(
                                        "{who}: the partition of {owner_key} cannot be made visible, and the parent GPU never is: {why}"
                                    ))
                                    .refused(RefusalReason::NoOwner),
                                )
                            })?;
                    (owner.accelerators.clone(), Some(uuid))
                }
                None => {
                    let owner = owner_grant.map(|(_, g)| g.accelerators).ok_or_else(|| {
                        refuse(
                            Status::failed_precondition(format!(
                                "{who}: no other container of the Pod holds accelerators to make visible"
                            ))
                            .refused(RefusalReason::NoOwner),
                        )
                    })?;
                    (owner, None)
                }
            };
            let seats: Vec<&Seat> = accelerators
                .iter()
                .filter_map(|i| state.ledger.seat(*i))
                .collect();
            let responding = std::time::Instant::now();
            let response = self
                .config
                .responder
                .respond(&Answer {
                    family: None,
                    seats: &seats,
                    slice_units: 0,
                    cores_percentage: None,
                    partition: partition.as_ref(),
                    pod,
                    container,
                })
                .map(container_response)
                .map_err(|e| {
                    refuse(
                        Status::failed_precondition(format!("{who}: {e}"))
                            .refused(RefusalReason::Responder),
                    )
                })?;
            times.lap(Stage::Respond, responding);
            let mut sorted = device_ids;
            sorted.sort();
            if state.visibility.insert(key, sorted).is_none() {
                self.config.metrics.granted(None);
            }
            // Not journalled; the owner's grant it shows was answered (and made durable) first.
            return Ok(Granted {
                response,
                fresh: None,
                ticket: state.journal.ticket(),
            });
        };
        let (units, cores) = budget(
            family,
            pod,
            &key.container,
            pool,
            |i| state.ledger.seat(i).and_then(|s| s.memory_mib),
            &accelerators,
        );
        let claim = Claim {
            key: key.clone(),
            family,
            resource: pool.resource.clone(),
            device_ids,
            accelerators,
            slice_units: units,
            cores_percentage: cores,
            partition: None,
        };
        let deciding = std::time::Instant::now();
        let receipt = state
            .ledger
            .allocate(claim)
            .map_err(|r| refuse(refusal_status(pod, &key, &r)));
        let responding = times.lap(Stage::Ledger, deciding);
        let receipt = receipt?;
        let grant = state.ledger.grant(&key).cloned();
        let Some(grant) = grant else {
            return Err(Status::internal(format!(
                "{key}: the grant vanished while it was recorded"
            )));
        };
        let seats: Vec<&Seat> = grant
            .accelerators
            .iter()
            .filter_map(|i| state.ledger.seat(*i))
            .collect();
        let answered = self.config.responder.respond(&Answer {
            family: Some(family),
            seats: &seats,
            slice_units: grant.units,
            cores_percentage: grant.cores_percentage,
            partition: None,
            pod,
            container,
        });
        let writing = times.lap(Stage::Respond, responding);
        let response = match answered {
            Ok(injection) => container_response(injection),
            Err(e) => {
                state.ledger.give_back(&receipt);
                tracing::warn!("{who}: responder refused, grant given back");
                return Err(refuse(
                    Status::failed_precondition(format!("{who}: {e}"))
                        .refused(RefusalReason::Responder),
                ));
            }
        };
        let written = if receipt.fresh {
            let written = state.journal.append(&Entry::Grant {
                key: key.clone(),
                grant,
            });
            times.lap(Stage::JournalWrite, writing);
            written
        } else {
            Ok(())
        };
        if let Err(e) = written {
            state.ledger.give_back(&receipt);
            tracing::error!("ledger journal: {e}; grant of {key} given back");
            return Err(refuse(
                Status::unavailable(format!("the grant could not be made durable: {e}"))
                    .refused(RefusalReason::Journal),
            ));
        }
        if receipt.fresh {
            self.config.metrics.granted(Some(family));
            self.config.metrics.attributed(by);
        }
        Ok(Granted {
            response,
            ticket: state.journal.ticket(),
            fresh: receipt.fresh.then_some(receipt),
        })
    }

    /// Waits, with no lock held, until `ticket` is durable: no grant is answered before its
    /// journal entry is on disk. When a sync failed, the journal is rewritten from the ledger
    /// (every grant it holds, these included, synced by the atomic write) and the answer stands
    /// if that worked; if not, `fresh` (this call's new grants) are given back and the call is
    /// refused, so the kubelet retries.
    async fn durable(&self, ticket: Ticket, fresh: &[Receipt]) -> Result<(), Status> {
        if ticket.is_durable() {
            return Ok(());
        }
        let Err(failed) = ticket.durable().await else {
            return Ok(());
        };
        let mut state = self.lock();
        let grants = state.ledger.grants().clone();
        let rewritten = state.journal.compact(&grants);
        let Err(e) = rewritten else {
            tracing::warn!("{failed}; the journal was rewritten from the ledger, the grant stands");
            return Ok(());
        };
        for receipt in fresh {
            state.ledger.give_back(receipt);
            let entry = match &receipt.previous {
                Some(previous) => Entry::Grant {
                    key: receipt.key.clone(),
                    grant: previous.clone(),
                },
                None => Entry::Release {
                    key: receipt.key.clone(),
                },
            };
            let _ = state.journal.append(&entry);
        }
        drop(state);
        self.notify();
        tracing::error!(
            "{failed}; rewriting the journal failed too ({e}): the call is refused, its new grants given back"
        );
        Err(
            Status::unavailable(format!("{failed}; rewriting the journal failed too: {e}"))
                .refused(RefusalReason::Journal),
        )
    }
}

/// Logs a refusal at warn, naming the resource, who asked (the Pod and container when known)
/// and the reason, and returns it: every refusal the kubelet sees is in the node's log.
fn refused(resource: &str, who: &str, status: Status) -> Status {
    tracing::warn!(
        "{resource}: refused {who} ({:?}): {}",
        status.code(),
        status.message()
    );
    status
}

/// A slice's units and cores for this container (exclusive and shared carry none).
fn budget(
    family: Family,
    pod: &Pod,
    container: &str,
    pool: &Pool,
    memory_mib: impl Fn(u32) -> Option<u64>,
    accelerators: &[u32],
) -> (u64, Option<u32>) {
    if family != Family::Sliced {
        return (0, None);
    }
    // Budgets are per accelerator; the smallest VRAM of the grant is the one a MiB budget must fit.
    let vram = accelerators.iter().filter_map(|i| memory_mib(*i)).min();
    match slice_budget(pod.container(container), &pool.resource, vram) {
        Ok((units, cores)) => (units, Some(cores)),
        Err(e) => {
            tracing::warn!(
                "{}/{} container {container}: {e}; charging 0 units",
                pod.namespace,
                pod.name
            );
            (0, Some(100))
        }
    }
}

fn refusal_status(pod: &Pod, key: &GrantKey, refusal: &Refusal) -> Status {
    Status::new(
        Code::FailedPrecondition,
        format!(
            "{}/{} container {}: {refusal}",
            pod.namespace, pod.name, key.container
        ),
    )
    .refused(refusal.into())
}

/// The DevicePlugin service of one pool.
struct PoolService {
    shared: Arc<Shared>,
    index: usize,
    stop: watch::Receiver<bool>,
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for PoolService {
    async fn get_device_plugin_options(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<dp::DevicePluginOptions>, Status> {
        Ok(tonic::Response::new(options(
            &self.shared.pools()[self.index],
        )))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<DeviceStream>, Status> {
        let shared = self.shared.clone();
        let index = self.index;
        let mut changes = shared.changed.subscribe();
        let mut stop = self.stop.clone();
        let stream = async_stream::stream! {
            // Every grant and release wakes every stream: compare the accelerators' states
            // (a few entries, under the lock) and build the token list only when they moved.
            let mut last = None;
            loop {
                let pools = shared.pools();
                let pool = &pools[index];
                let states = shared.pool_view(pool);
                if last.as_ref() != Some(&states) {
                    let list = device_list(pool, &states);
                    last = Some(states);
                    yield Ok(list);
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = stop.changed() => break,
                }
            }
        };
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: tonic::Request<dp::PreferredAllocationRequest>,
    ) -> Result<tonic::Response<dp::PreferredAllocationResponse>, Status> {
        let received = Instant::now();
        let pools = self.shared.pools();
        let pool = &pools[self.index];
        let requests = request.into_inner().container_requests;
        let mut container_responses = Vec::with_capacity(requests.len());
        for r in &requests {
            container_responses.push(dp::ContainerPreferredAllocationResponse {
                device_i_ds: self.shared.preferred(pool, r).await,
            });
        }
        let answer = dp::PreferredAllocationResponse {
            container_responses,
        };
        self.shared.announce.answered();
        self.metrics().preferred(received.elapsed());
        Ok(tonic::Response::new(answer))
    }

    async fn allocate(
        &self,
        request: tonic::Request<dp::AllocateRequest>,
    ) -> Result<tonic::Response<dp::AllocateResponse>, Status> {
        let received = Instant::now();
        let mut times = StageTimes::default();
        let answer = self.answer_allocate(request.into_inner(), &mut times).await;
        self.shared.announce.answered();
        let metrics = self.metrics();
        metrics.allocated(received.elapsed(), answer.as_ref().err());
        metrics.staged(&times);
        answer.map(tonic::Response::new)
    }

    async fn pre_start_container(
        &self,
        _: tonic::Request<dp::PreStartContainerRequest>,
    ) -> Result<tonic::Response<dp::PreStartContainerResponse>, Status> {
        Ok(tonic::Response::new(dp::PreStartContainerResponse {}))
    }
}

impl PoolService {
    /// This pool's metric handles.
    fn metrics(&self) -> &ResourceMetrics {
        &self.shared.resource_metrics[self.index]
    }

    /// Allocate's answer for every container of the call (timed by the handler), given once
    /// every grant of it is durable.
    async fn answer_allocate(
        &self,
        request: dp::AllocateRequest,
        times: &mut StageTimes,
    ) -> Result<dp::AllocateResponse, Status> {
        let pools = self.shared.pools();
        let pool = &pools[self.index];
        let requests = request.container_requests;
        if requests.is_empty() {
            return Err(Status::invalid_argument(format!(
                "allocate for {} carries no container request",
                pool.resource
            )));
        }
        let mut container_responses = Vec::with_capacity(requests.len());
        let mut fresh = Vec::new();
        let mut ticket: Option<Ticket> = None;
        for r in requests {
            let granted = self.shared.allocate(pool, r.devices_ids, times).await?;
            container_responses.push(granted.response);
            fresh.extend(granted.fresh);
            ticket = Some(match ticket {
                Some(t) => t.max(granted.ticket),
                None => granted.ticket,
            });
        }
        if let Some(ticket) = ticket
            && !(fresh.is_empty() && ticket.is_durable())
        {
            let waiting = std::time::Instant::now();
            let durable = self.shared.durable(ticket, &fresh).await;
            times.lap(Stage::Durable, waiting);
            durable?;
        }
        if !fresh.is_empty() {
            self.shared.notify_after_answer();
        }
        Ok(dp::AllocateResponse {
            container_responses,
        })
    }
}

/// The ListAndWatch message for `pool` in the state `view`, built outside the lock.
fn device_list(pool: &Pool, view: &PoolView) -> dp::ListAndWatchResponse {
    dp::ListAndWatchResponse {
        devices: pool
            .tokens_of(view)
            .into_iter()
            .map(|t| dp::Device {
                id: t.id,
                health: if t.healthy { "Healthy" } else { "Unhealthy" }.to_string(),
                topology: t.numa_node.map(|n| dp::TopologyInfo {
                    nodes: vec![dp::NumaNode { id: i64::from(n) }],
                }),
            })
            .collect(),
    }
}

fn options(pool: &Pool) -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: pool.kind != PoolKind::Visibility,
    }
}

/// The identity of the kubelet's socket: a new one means the kubelet restarted.
fn socket_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Serves one pool: bind, register, and start over whenever the kubelet restarts (its socket is
/// recreated, or ours removed), until `stop`.
async fn serve_pool(shared: Arc<Shared>, index: usize, mut stop: watch::Receiver<bool>) {
    // The resource and socket of a pool never change; its tokens do (read per call).
    let pools = shared.pools();
    let pool = &pools[index];
    let dir = shared.config.device_plugin_dir();
    let socket_path = dir.join(pool.socket_name());
    let kubelet_socket = dir.join("kubelet.sock");
    let interval = shared.config.poll_interval;
    'serve: loop {
        if *stop.borrow() {
            break;
        }
        let _ = std::fs::remove_file(&socket_path);
        let listener = match std::fs::create_dir_all(&dir)
            .and_then(|()| tokio::net::UnixListener::bind(&socket_path))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "{}: cannot listen on {}: {e}",
                    pool.resource,
                    socket_path.display()
                );
                tokio::select! { _ = tokio::time::sleep(interval) => continue, _ = stop.changed() => break }
            }
        };
        let (server_stop_tx, server_stop) = watch::channel(false);
        let service = PoolService {
            shared: shared.clone(),
            index,
            stop: server_stop.clone(),
        };
        let server = socket::serve_plugin(listener, service, server_stop.clone());
        // Register, retrying while the kubelet is away.
        let registered_with = loop {
            let identity = socket_identity(&kubelet_socket);
            if identity.is_some() {
                match register(&kubelet_socket, pool).await {
                    Ok(()) => {
                        tracing::info!("{}: registered with the kubelet", pool.resource);
                        break identity;
                    }
                    Err(e) => tracing::warn!("{}: registration failed: {e}", pool.resource),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => {
                    let _ = server_stop_tx.send(true);
                    let _ = server.await;
                    break 'serve;
                }
            }
            if !socket_path.exists() {
                let _ = server_stop_tx.send(true);
                let _ = server.await;
                continue 'serve;
            }
        };
        // Watch for a kubelet restart.
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => {
                    let _ = server_stop_tx.send(true);
                    let _ = server.await;
                    let _ = std::fs::remove_file(&socket_path);
                    break 'serve;
                }
            }
            let now = socket_identity(&kubelet_socket);
            if !socket_path.exists() || (now.is_some() && now != registered_with) {
                tracing::info!(
                    "{}: the kubelet restarted; registering again",
                    pool.resource
                );
                let _ = server_stop_tx.send(true);
                let _ = server.await;
                continue 'serve;
            }
        }
    }
}

async fn register(kubelet_socket: &Path, pool: &Pool) -> Result<(), String> {
    let channel = socket::connect(kubelet_socket.to_path_buf())
        .await
        .map_err(|e| format!("cannot reach {}: {e}", kubelet_socket.display()))?;
    let mut client = RegistrationClient::new(channel);
    client
        .register(dp::RegisterRequest {
            version: API_VERSION.to_string(),
            endpoint: pool.socket_name(),
            resource_name: pool.resource.clone(),
            options: Some(options(pool)),
        })
        .await
        .map_err(|s| format!("the kubelet refused: {}", s.message()))?;
    Ok(())
}

/// The kubelet's form of a backend's injection: the one place the neutral answer becomes the
/// device-plugin message.
fn container_response(injection: Injection) -> dp::ContainerAllocateResponse {
    dp::ContainerAllocateResponse {
        envs: injection.envs,
        mounts: injection
            .mounts
            .into_iter()
            .map(|m| dp::Mount {
                container_path: m.container_path,
                host_path: m.host_path,
                read_only: m.read_only,
            })
            .collect(),
        devices: injection
            .devices
            .into_iter()
            .map(|d| dp::DeviceSpec {
                container_path: d.container_path,
                host_path: d.host_path,
                permissions: d.permissions,
            })
            .collect(),
        annotations: injection.annotations,
        cdi_devices: injection
            .cdi_devices
            .into_iter()
            .map(|name| dp::CdiDevice { name })
            .collect(),
    }
}
