//! The worker's cluster-level controllers, run by the elected replica only ([`crate::lease`]):
//!
//! - the `gpustack-cpu-info` NodeFeatureRule ([`crate::nfr`]) applied at start-up;
//! - the `gpustack.ai/managed` mark synced from each Node onto its same-named `Devices`, so the
//!   per-node device manager never asserts a node-management decision it does not own;
//! - the general (CPU) node key (accel-core's `cpukey`) published as the [`CPU_KEY_LABEL`] label
//!   on the Node's `Devices`;
//! - a `Devices` whose Node is gone deleted at once. "Gone" is decided by an uncached read (a
//!   direct GET of the Node answering 404), never by the watch cache alone, which may simply not
//!   have seen a new Node yet; the garbage collector would get there too, but only after its
//!   backoff, and a departed node's ledger would go on counting its accelerators meanwhile.
//!
//! Every API call sits behind [`ClusterApi`]: [`KubeCluster`] is the thin kube-rs edge (merge
//! patches of `metadata.labels` only, so nothing here depends on the typed Devices CRD),
//! [`MemoryCluster`] the in-memory one. What to change is decided by pure functions
//! ([`desired_labels`], [`label_changes`]) and one [`reconcile`] step; [`run_loop`] drives it from
//! watch triggers, a periodic resync and retries with backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_core::cpukey;
use accel_core::manufacturer::ManufacturerTable;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams,
};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cache::DEVICES_API;
use crate::nfr;

/// The node-management mark, read from the Node and copied onto its `Devices`.
pub const MANAGED_LABEL: &str = "gpustack.ai/managed";
/// The label carrying the node's general (CPU) node key on its `Devices`. Seed 000 names no key
/// for it; it lives beside the other node features under `feature.gpustack.ai/`.
pub const CPU_KEY_LABEL: &str = "feature.gpustack.ai/cpu-key";
/// The field manager of the worker's server-side apply.
pub const FIELD_MANAGER: &str = "gpustack-device-manager-worker";

/// What went wrong with one API call.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The API server refused the call or could not be reached.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The in-memory API was told to fail.
    #[error("{0}: the api server is unreachable")]
    Unreachable(String),
}

/// What the controllers read of a Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The `Devices` resource (cluster-scoped, `gpustack.ai/v1`, named after its node).
pub fn devices_resource() -> ApiResource {
    ApiResource {
        group: DEVICES_API.0.to_string(),
        version: DEVICES_API.1.to_string(),
        api_version: format!("{}/{}", DEVICES_API.0, DEVICES_API.1),
        kind: "Devices".to_string(),
        plural: "devices".to_string(),
    }
}

/// The API calls the controllers make.
pub trait ClusterApi: Send + Sync {
    /// Apply (server-side, forced) a cluster-scoped NodeFeatureRule object.
    fn apply_node_feature_rule(
        &self,
        rule: &Value,
    ) -> impl Future<Output = Result<(), WorkerError>> + Send;
    /// Read a Node straight from the API server (no cache); `None` when it does not exist.
    fn get_node(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<NodeMeta>, WorkerError>> + Send;
    /// Merge-patch `metadata.labels` of the `Devices` `name`: `Some` sets, `None` removes.
    /// A `Devices` that is gone is not an error.
    fn patch_devices_labels(
        &self,
        name: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> impl Future<Output = Result<(), WorkerError>> + Send;
    /// Delete the `Devices` `name`; one already gone is not an error.
    fn delete_devices(&self, name: &str) -> impl Future<Output = Result<(), WorkerError>> + Send;
}

/// The labels the worker owns on a node's `Devices`: the managed mark as the Node has it (`None`:
/// absent, so removed) and the CPU node key.
pub fn desired_labels(node: &NodeMeta) -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        (
            MANAGED_LABEL.to_string(),
            node.labels.get(MANAGED_LABEL).cloned(),
        ),
        (
            CPU_KEY_LABEL.to_string(),
            Some(cpukey::cpu_node_key(&node.labels, &node.annotations)),
        ),
    ])
}

/// The part of `desired` that `current` does not already say; empty when nothing is to do.
pub fn label_changes(
    current: &BTreeMap<String, String>,
    desired: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, Option<String>> {
    desired
        .iter()
        .filter(|(key, want)| current.get(*key) != want.as_ref())
        .map(|(key, want)| (key.clone(), want.clone()))
        .collect()
}

/// What one reconcile did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The `Devices` already said what its Node says.
    Unchanged,
    /// These labels were patched.
    Patched(BTreeMap<String, Option<String>>),
    /// The Node is gone: the `Devices` was deleted.
    Deleted,
}

/// Bring the `Devices` `name` (whose labels are `devices_labels`) in line with its Node.
/// `cached_node` is the watch cache's view; when the cache has no such Node, the API server is
/// asked directly before anything is deleted.
pub async fn reconcile<A: ClusterApi>(
    api: &A,
    name: &str,
    devices_labels: &BTreeMap<String, String>,
    cached_node: Option<&NodeMeta>,
) -> Result<Outcome, WorkerError> {
    let fetched;
    let node = match cached_node {
        Some(node) => node,
        None => match api.get_node(name).await? {
            Some(node) => {
                fetched = node;
                &fetched
            }
            None => {
                api.delete_devices(name).await?;
                tracing::info!(devices = name, "the node is gone: deleted its Devices");
                return Ok(Outcome::Deleted);
            }
        },
    };
    let changes = label_changes(devices_labels, &desired_labels(node));
    if changes.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    api.patch_devices_labels(name, &changes).await?;
    Ok(Outcome::Patched(changes))
}

/// Apply the `gpustack-cpu-info` rule, retrying with backoff (up to `max_backoff` between tries)
/// until it lands.
pub async fn apply_rule_until_done<A: ClusterApi>(api: &A, max_backoff: Duration) {
    apply_this_rule_until_done(api, &nfr::cpu_info_rule(), max_backoff).await;
}

/// Apply `rule` (the `gpustack-cpu-info` rule of the manufacturers table in force) as
/// [`apply_rule_until_done`] does.
pub async fn apply_this_rule_until_done<A: ClusterApi>(
    api: &A,
    rule: &Value,
    max_backoff: Duration,
) {
    let mut backoff = Duration::from_millis(500).min(max_backoff);
    loop {
        match api.apply_node_feature_rule(rule).await {
            Ok(()) => {
                tracing::info!(rule = nfr::NAME, "applied the NodeFeatureRule");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot apply the NodeFeatureRule; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(max_backoff);
            }
        }
    }
}

/// What the loop reads from the watch caches.
pub trait Caches: Send + Sync {
    /// Whether the first listings are in.
    fn ready(&self) -> impl Future<Output = ()> + Send;
    /// The cached Node `name`.
    fn node(&self, name: &str) -> Option<NodeMeta>;
    /// The cached `Devices` `name`'s labels; `None` when there is no such `Devices`.
    fn devices_labels(&self, name: &str) -> Option<BTreeMap<String, String>>;
    /// Every cached `Devices`' name.
    fn devices_names(&self) -> Vec<String>;
}

/// The loop's timing.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// How often every `Devices` is looked at again, events or not (a Node deleted while the
    /// watch was down produces no event).
    pub resync: Duration,
    /// The first retry delay after a failed reconcile; doubled per failure.
    pub retry_min: Duration,
    /// The longest retry delay.
    pub retry_max: Duration,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            resync: Duration::from_secs(300),
            retry_min: Duration::from_millis(500),
            retry_max: Duration::from_secs(60),
        }
    }
}

/// Reconcile every name that arrives on `triggers` (a Node or a `Devices` changed), every cached
/// `Devices` each `resync`, and every failed one again after its backoff. Returns when
/// `triggers` closes.
pub async fn run_loop<A: ClusterApi, C: Caches>(
    api: &A,
    caches: &C,
    mut triggers: mpsc::UnboundedReceiver<String>,
    config: LoopConfig,
) {
    caches.ready().await;
    let mut pending: BTreeSet<String> = caches.devices_names().into_iter().collect();
    let mut retries: BTreeMap<String, (Instant, Duration)> = BTreeMap::new();
    let mut next_resync = Instant::now() + config.resync;
    loop {
        for name in std::mem::take(&mut pending) {
            let Some(labels) = caches.devices_labels(&name) else {
                retries.remove(&name);
                continue;
            };
            let node = caches.node(&name);
            match reconcile(api, &name, &labels, node.as_ref()).await {
                Ok(outcome) => {
                    retries.remove(&name);
                    if let Outcome::Patched(changes) = outcome {
                        tracing::debug!(devices = %name, ?changes, "synced the Devices labels");
                    }
                }
                Err(e) => {
                    let delay = retries
                        .get(&name)
                        .map_or(config.retry_min, |(_, d)| (*d * 2).min(config.retry_max));
                    tracing::warn!(devices = %name, error = %e, retry_in = ?delay, "reconcile failed");
                    retries.insert(name, (Instant::now() + delay, delay));
                }
            }
        }
        let next_retry = retries.values().map(|(at, _)| *at).min();
        let wake = next_retry.map_or(next_resync, |at| at.min(next_resync));
        tokio::select! {
            name = triggers.recv() => match name {
                Some(name) => {
                    pending.insert(name);
                    // Take whatever else is queued, so a burst is one pass.
                    while let Ok(name) = triggers.try_recv() {
                        pending.insert(name);
                    }
                }
                None => return,
            },
            () = tokio::time::sleep_until(wake) => {
                let now = Instant::now();
                if now >= next_resync {
                    pending.extend(caches.devices_names());
                    next_resync = now + config.resync;
                }
                pending.extend(
                    retries.iter().filter(|(_, (at, _))| *at <= now).map(|(n, _)| n.clone()),
                );
            }
        }
    }
}

/// The kube-rs edge.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
}

impl KubeCluster {
    pub fn new(client: Client) -> Self {
        KubeCluster { client }
    }

    fn devices(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &devices_resource())
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

fn node_meta(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> NodeMeta {
    NodeMeta {
        labels: labels.clone(),
        annotations: annotations.clone(),
    }
}

impl ClusterApi for KubeCluster {
    async fn apply_node_feature_rule(&self, rule: &Value) -> Result<(), WorkerError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nfr::api_resource());
        let name = rule["metadata"]["name"].as_str().unwrap_or(nfr::NAME);
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(rule),
        )
        .await
        .map(|_| ())
        .map_err(|source| WorkerError::Api {
            what: format!("apply NodeFeatureRule {name}"),
            source: Box::new(source),
        })
    }

    async fn get_node(&self, name: &str) -> Result<Option<NodeMeta>, WorkerError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = api
            .get_metadata_opt(name)
            .await
            .map_err(|source| WorkerError::Api {
                what: format!("get node {name}"),
                source: Box::new(source),
            })?;
        Ok(node.map(|n| node_meta(n.labels(), n.annotations())))
    }

    async fn patch_devices_labels(
        &self,
        name: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), WorkerError> {
        let patch = json!({"metadata": {"labels": labels}});
        match self
            .devices()
            .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(source) => Err(WorkerError::Api {
                what: format!("patch the labels of Devices {name}"),
                source: Box::new(source),
            }),
        }
    }

    async fn delete_devices(&self, name: &str) -> Result<(), WorkerError> {
        match self.devices().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(source) => Err(WorkerError::Api {
                what: format!("delete Devices {name}"),
                source: Box::new(source),
            }),
        }
    }
}

/// The watch caches behind the loop: Node and `Devices` metadata.
#[derive(Clone)]
pub struct KubeCaches {
    nodes: Store<PartialObjectMeta<Node>>,
    devices: Store<PartialObjectMeta<DynamicObject>>,
}

impl KubeCaches {
    /// The caches, the trigger stream's receiver, and the future that fills them (spawn it; it
    /// sends the name of every Node and `Devices` that changes, appears or goes).
    pub fn new(
        client: Client,
    ) -> (
        KubeCaches,
        mpsc::UnboundedReceiver<String>,
        impl Future<Output = ()> + Send + 'static,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let node_writer: Writer<PartialObjectMeta<Node>> = Writer::default();
        let nodes = node_writer.as_reader();
        let devices_writer: Writer<PartialObjectMeta<DynamicObject>> =
            Writer::new(devices_resource());
        let devices = devices_writer.as_reader();
        let node_tx = tx.clone();
        let node_run =
            metadata_watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(node_writer)
                .touched_objects()
                .for_each(move |event| {
                    match event {
                        Ok(node) => {
                            let _ = node_tx.send(node.name_any());
                        }
                        Err(e) => tracing::warn!(error = %e, "node watch failed; retrying"),
                    }
                    futures::future::ready(())
                });
        let devices_api: Api<DynamicObject> = Api::all_with(client, &devices_resource());
        let devices_run = metadata_watcher(devices_api, watcher::Config::default())
            .default_backoff()
            .reflect(devices_writer)
            .touched_objects()
            .for_each(move |event| {
                match event {
                    Ok(devices) => {
                        let _ = tx.send(devices.name_any());
                    }
                    Err(e) => tracing::warn!(error = %e, "devices watch failed; retrying"),
                }
                futures::future::ready(())
            });
        let run = async move {
            futures::join!(node_run, devices_run);
        };
        (KubeCaches { nodes, devices }, rx, run)
    }
}

impl Caches for KubeCaches {
    async fn ready(&self) {
        let _ = futures::join!(
            self.nodes.wait_until_ready(),
            self.devices.wait_until_ready()
        );
    }

    fn node(&self, name: &str) -> Option<NodeMeta> {
        self.nodes
            .get(&ObjectRef::new(name))
            .map(|n| node_meta(n.labels(), n.annotations()))
    }

    fn devices_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.devices
            .get(&ObjectRef::new_with(name, devices_resource()))
            .map(|d| d.labels().clone())
    }

    fn devices_names(&self) -> Vec<String> {
        self.devices.state().iter().map(|d| d.name_any()).collect()
    }
}

/// Run the controllers against the cluster until the task is dropped: apply the rule (retried
/// beside the loop, so a cluster without NFD's CRDs yet still gets its Devices looked after) and
/// reconcile from the watch caches.
pub async fn run(client: Client, config: LoopConfig) {
    run_with(client, config, ManufacturerTable::default()).await;
}

/// [`run`] with the manufacturers table in force (the rule matches its vendor ids).
pub async fn run_with(client: Client, config: LoopConfig, table: ManufacturerTable) {
    let api = KubeCluster::new(client.clone());
    let (caches, triggers, fill) = KubeCaches::new(client);
    let fill = tokio::spawn(fill);
    let rule = nfr::cpu_info_rule_for(&table);
    futures::join!(
        apply_this_rule_until_done(&api, &rule, config.retry_max),
        run_loop(&api, &caches, triggers, config.clone()),
    );
    fill.abort();
}

/// One API call the in-memory cluster saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    ApplyRule(String),
    GetNode(String),
    PatchDevices(String, BTreeMap<String, Option<String>>),
    DeleteDevices(String),
}

#[derive(Default)]
struct MemoryState {
    nodes: BTreeMap<String, NodeMeta>,
    /// What the node watch cache shows (may lag behind `nodes`).
    cached_nodes: BTreeMap<String, NodeMeta>,
    devices: BTreeMap<String, BTreeMap<String, String>>,
    rules: BTreeMap<String, Value>,
    calls: Vec<Call>,
    unreachable: bool,
}

/// An in-memory API server and watch caches for the controllers, recording every call.
#[derive(Clone, Default)]
pub struct MemoryCluster {
    state: Arc<Mutex<MemoryState>>,
}

impl MemoryCluster {
    fn with<T>(&self, f: impl FnOnce(&mut MemoryState) -> T) -> Option<T> {
        self.state.lock().ok().map(|mut s| f(&mut s))
    }

    fn call<T>(
        &self,
        what: &str,
        call: Call,
        f: impl FnOnce(&mut MemoryState) -> T,
    ) -> Result<T, WorkerError> {
        self.with(|s| {
            if s.unreachable {
                return Err(WorkerError::Unreachable(what.to_string()));
            }
            s.calls.push(call);
            Ok(f(s))
        })
        .unwrap_or_else(|| Err(WorkerError::Unreachable(what.to_string())))
    }

    /// Put a Node in the API server and, when `cached`, in the watch cache too.
    pub fn put_node(&self, name: &str, node: NodeMeta, cached: bool) {
        self.with(|s| {
            if cached {
                s.cached_nodes.insert(name.to_string(), node.clone());
            }
            s.nodes.insert(name.to_string(), node);
        });
    }

    /// Remove a Node from the API server and the watch cache.
    pub fn remove_node(&self, name: &str) {
        self.with(|s| {
            s.nodes.remove(name);
            s.cached_nodes.remove(name);
        });
    }

    /// Put a `Devices` with these labels.
    pub fn put_devices(&self, name: &str, labels: BTreeMap<String, String>) {
        self.with(|s| s.devices.insert(name.to_string(), labels));
    }

    /// A `Devices`' labels, `None` when it does not exist.
    pub fn devices(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.with(|s| s.devices.get(name).cloned()).flatten()
    }

    /// The applied NodeFeatureRules by name.
    pub fn rules(&self) -> BTreeMap<String, Value> {
        self.with(|s| s.rules.clone()).unwrap_or_default()
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.with(|s| s.calls.clone()).unwrap_or_default()
    }

    /// Make every call fail (or succeed again).
    pub fn set_unreachable(&self, unreachable: bool) {
        self.with(|s| s.unreachable = unreachable);
    }
}

impl ClusterApi for MemoryCluster {
    async fn apply_node_feature_rule(&self, rule: &Value) -> Result<(), WorkerError> {
        let name = rule["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.call("apply rule", Call::ApplyRule(name.clone()), |s| {
            s.rules.insert(name, rule.clone());
        })
    }

    async fn get_node(&self, name: &str) -> Result<Option<NodeMeta>, WorkerError> {
        self.call("get node", Call::GetNode(name.to_string()), |s| {
            s.nodes.get(name).cloned()
        })
    }

    async fn patch_devices_labels(
        &self,
        name: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), WorkerError> {
        self.call(
            "patch devices",
            Call::PatchDevices(name.to_string(), labels.clone()),
            |s| {
                if let Some(current) = s.devices.get_mut(name) {
                    for (key, value) in labels {
                        match value {
                            Some(v) => current.insert(key.clone(), v.clone()),
                            None => current.remove(key),
                        };
                    }
                }
            },
        )
    }

    async fn delete_devices(&self, name: &str) -> Result<(), WorkerError> {
        self.call(
            "delete devices",
            Call::DeleteDevices(name.to_string()),
            |s| {
                s.devices.remove(name);
            },
        )
    }
}

impl Caches for MemoryCluster {
    async fn ready(&self) {}

    fn node(&self, name: &str) -> Option<NodeMeta> {
        self.with(|s| s.cached_nodes.get(name).cloned()).flatten()
    }

    fn devices_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.devices(name)
    }

    fn devices_names(&self) -> Vec<String> {
        self.with(|s| s.devices.keys().cloned().collect())
            .unwrap_or_default()
    }
}
