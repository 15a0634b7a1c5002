//! The node daemon's publisher: what the node is and holds, made true in the API server
//! asynchronously, so an API-server outage never blocks the daemon and loses nothing.
//!
//! The daemon sends the whole desired state ([`Desired`]) over a `tokio::sync::watch` channel
//! whenever it changes (a detection, an allocation, a release, a health change); sending never
//! blocks and a newer state replaces an older one not yet published. The [`Publisher`] task
//! reconciles the cluster towards the latest state, each part on its own:
//! - the NodeFeature `${NODE_NAME}-gpustack-device-manager`, written only when its labels differ
//!   from what the API server holds;
//! - the `Devices` object (spec, its group and os/arch labels, owned by the Node) and its status;
//! - each Pod's `device.gpustack.ai/accelerator.allocated` annotation, retried until it lands or
//!   the Pod is gone (deleted, or another Pod under the same name);
//! - the Node's capacity keys ([`accel_core::capacity`]), re-read periodically and re-patched
//!   when they drifted (a kubelet restart rewrites the Node's status), ours removed when they go;
//! - Events about the Node (one per new hardware-class fault), each created once.
//!
//! A part that fails is retried with capped exponential backoff; the others carry on. The
//! [`PublisherHandle`] tells when everything desired has landed; [`PublishMetrics`] counts what
//! is still waiting or retrying after each round.
//!
//! This module owns the reconciliation and its timing; the calls are [`ClusterApi`]'s, the
//! shapes accel-core's.

pub mod api;
pub mod kube;
pub mod memory;
pub mod metrics;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use accel_core::capacity::capacity_key_manufacturer;
use accel_core::devices::{DevicesSpec, DevicesStatus};
use accel_core::interfaces::adopt_first_seen;
use accel_core::ledger::annotation::{self, ALLOCATED_ANNOTATION};
use accel_core::ledger::{Grant, GrantKey};
use accel_core::manufacturer::Manufacturer;
use accel_core::pool::FEATURE_LABEL_PREFIX;
use accel_core::quantity::parse_count;
use accel_core::resources::KeyGrammar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use tokio::sync::watch;
use tokio::time::Instant;

pub use api::{
    ApiError, CapacityPatch, ClusterApi, NODE_EVENT_NAMESPACE, NodeEvent, NodeFacts, PodRef,
};
pub use metrics::PublishMetrics;

use metrics::Part as BacklogPart;

use crate::crd::{
    Devices, DevicesBody, NFD_NODE_NAME_LABEL, NodeFeature, NodeFeatureFeatures, NodeFeatureSpec,
    node_feature_name,
};

/// The Node labels copied onto the Devices object, so a pool's queue can select it as it
/// selects nodes.
pub const COPIED_NODE_LABELS: [&str; 2] = ["kubernetes.io/os", "kubernetes.io/arch"];

/// Everything the node daemon wants the cluster to show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// The NodeFeature's `spec.labels` (what `device-manager labels` prints).
    pub node_feature_labels: BTreeMap<String, String>,
    pub devices_spec: DevicesSpec,
    pub devices_status: DevicesStatus,
    /// The node capacity keys this daemon owns, with their values
    /// ([`accel_core::capacity::node_capacity`]).
    pub capacity: BTreeMap<String, u64>,
    /// Each Pod's `device.gpustack.ai/accelerator.allocated` value
    /// ([`accel_core::ledger::annotation::render`]); `None` removes the annotation. A Pod left
    /// out is not touched (its grants are gone with it).
    pub annotations: BTreeMap<PodRef, Option<String>>,
    /// Events about the Node, by name: each is created once (one per new hardware-class fault).
    /// One that leaves the map is forgotten, never deleted (Events expire on their own).
    pub node_events: BTreeMap<String, NodeEvent>,
}

/// The `annotations` of a [`Desired`], from the ledger's grants and this node's live Pods: a Pod
/// holding grants gets them rendered ([`accel_core::ledger::annotation::render`]); a Pod that
/// had an annotation in `previous` and holds nothing now (its grants given back while it lives)
/// gets `None`, so the annotation is removed rather than left claiming a grant; a Pod no longer
/// live is left out (it is gone, and its annotation with it).
pub fn pod_annotations<'a>(
    pods: impl IntoIterator<Item = &'a accel_plugin::pods::Pod>,
    grants: &BTreeMap<GrantKey, Grant>,
    previous: &BTreeMap<PodRef, Option<String>>,
) -> BTreeMap<PodRef, Option<String>> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let key = PodRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let allocated = annotation::for_pod(&pod.uid, grants);
        if !allocated.is_empty() {
            out.insert(key, Some(annotation::render(&allocated)));
        } else if previous.contains_key(&key) {
            out.insert(key, None);
        }
    }
    out
}

/// How the publisher addresses and paces its work.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// This node's name (`NODE_NAME`).
    pub node: String,
    /// The daemon's namespace, where its NodeFeature lives.
    pub namespace: String,
    /// The resource-key grammar in force (bases may be overridden).
    pub grammar: KeyGrammar,
    /// The manufacturers this daemon serves: their capacity keys are ours to set and remove.
    pub manufacturers: BTreeSet<Manufacturer>,
    /// The first retry delay after a failure; doubled on each further failure.
    pub backoff_initial: Duration,
    /// The longest retry delay.
    pub backoff_max: Duration,
    /// How often the Node's capacity is read back and re-patched if it drifted.
    pub capacity_check: Duration,
    /// How often the NodeFeature and Devices are read back and repaired if they drifted.
    pub resync: Duration,
}

impl PublisherConfig {
    /// The defaults: retries from 500 ms up to 1 minute, capacity checked every 30 s, a full
    /// read-back every 10 minutes.
    pub fn new(
        node: impl Into<String>,
        namespace: impl Into<String>,
        manufacturers: impl IntoIterator<Item = Manufacturer>,
    ) -> PublisherConfig {
        PublisherConfig {
            node: node.into(),
            namespace: namespace.into(),
            grammar: KeyGrammar::default(),
            manufacturers: manufacturers.into_iter().collect(),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(60),
            capacity_check: Duration::from_secs(30),
            resync: Duration::from_secs(600),
        }
    }
}

/// Where the publisher stands.
#[derive(Debug, Clone, PartialEq)]
enum Progress {
    /// Work is pending (or the publisher has not looked yet).
    Working,
    /// Everything of this desired state has landed (Pods gone excepted).
    /// (Boxed: a desired state with the node's interfaces is large beside `Working`.)
    CaughtUp(Option<Box<Desired>>),
}

/// Lets a caller (a test, a readiness probe) wait until the publisher has caught up.
pub struct PublisherHandle {
    desired: watch::Receiver<Option<Desired>>,
    progress: watch::Receiver<Progress>,
    stale_crd: watch::Receiver<Option<String>>,
}

impl PublisherHandle {
    /// Why the cluster's `Devices` CRD is older than what the daemon writes, once a read back
    /// showed it: the API server silently drops `spec.interfaces` when its schema lacks them.
    pub fn stale_crd(&self) -> Option<String> {
        self.stale_crd.borrow().clone()
    }

    /// Whether everything of the latest desired state has landed.
    pub fn is_caught_up(&self) -> bool {
        let want = self.desired.borrow().clone();
        *self.progress.borrow() == Progress::CaughtUp(want.map(Box::new))
    }

    /// Waits until everything of the latest desired state has landed (a Pod found gone counts
    /// as done). Returns early only if the publisher stopped.
    pub async fn caught_up(&mut self) {
        loop {
            if self.is_caught_up() {
                return;
            }
            if self.progress.changed().await.is_err() {
                return;
            }
        }
    }
}

/// A retry schedule for one part.
#[derive(Debug, Clone, Copy)]
struct Retry {
    due: Instant,
    delay: Duration,
}

/// One part's state: what landed, and when to try again after a failure.
#[derive(Debug)]
struct Part<T> {
    landed: Option<T>,
    retry: Option<Retry>,
}

impl<T> Default for Part<T> {
    fn default() -> Self {
        Part {
            landed: None,
            retry: None,
        }
    }
}

impl<T: PartialEq> Part<T> {
    fn is(&self, want: &T) -> bool {
        self.landed.as_ref() == Some(want)
    }

    fn may_try(&self, now: Instant) -> bool {
        self.retry.is_none_or(|r| now >= r.due)
    }

    fn failed(&mut self, now: Instant, config: &PublisherConfig) {
        let delay = self.retry.map_or(config.backoff_initial, |r| {
            (r.delay * 2).min(config.backoff_max)
        });
        self.retry = Some(Retry {
            due: now + delay,
            delay,
        });
    }

    fn landed(&mut self, value: T) {
        self.landed = Some(value);
        self.retry = None;
    }
}

/// One Pod's annotation.
#[derive(Debug, Default)]
struct PodPart {
    part: Part<Option<String>>,
    gone: bool,
}

/// The Devices object's spec-side as we write it: spec and our labels.
type DevicesShape = (DevicesSpec, BTreeMap<String, String>);

/// The publisher task.
pub struct Publisher<A> {
    api: Arc<A>,
    config: PublisherConfig,
    desired: watch::Receiver<Option<Desired>>,
    progress: watch::Sender<Progress>,
    node: Part<NodeFacts>,
    node_feature: Part<BTreeMap<String, String>>,
    devices: Part<DevicesShape>,
    status: Part<DevicesStatus>,
    capacity: Part<BTreeMap<String, u64>>,
    pods: BTreeMap<PodRef, PodPart>,
    events: BTreeMap<String, Part<()>>,
    next_capacity_check: Instant,
    next_resync: Instant,
    metrics: PublishMetrics,
    /// Whether a write of ours carried `spec.interfaces` (so a read without them is a CRD that
    /// prunes them).
    wrote_interfaces: bool,
    stale_crd: watch::Sender<Option<String>>,
}

impl<A: ClusterApi> Publisher<A> {
    /// The publisher over `api`, fed by `desired`. Spawn [`Publisher::run`]; the handle waits for
    /// it to catch up. The daemon keeps the `watch::Sender` and calls `send_replace(Some(…))`
    /// with the whole desired state after every change; `None` (the initial value) publishes
    /// nothing, as before the first detection.
    pub fn new(
        api: Arc<A>,
        config: PublisherConfig,
        desired: watch::Receiver<Option<Desired>>,
    ) -> (Publisher<A>, PublisherHandle) {
        let (progress, progress_rx) = watch::channel(Progress::Working);
        let (stale_crd, stale_rx) = watch::channel(None);
        let now = Instant::now();
        let handle = PublisherHandle {
            desired: desired.clone(),
            progress: progress_rx,
            stale_crd: stale_rx,
        };
        let publisher = Publisher {
            api,
            next_capacity_check: now + config.capacity_check,
            next_resync: now + config.resync,
            config,
            desired,
            progress,
            node: Part::default(),
            node_feature: Part::default(),
            devices: Part::default(),
            status: Part::default(),
            capacity: Part::default(),
            pods: BTreeMap::new(),
            events: BTreeMap::new(),
            metrics: PublishMetrics::default(),
            wrote_interfaces: false,
            stale_crd,
        };
        (publisher, handle)
    }

    /// Records the backlog into `metrics` (the daemon's registry) after every round.
    pub fn with_metrics(mut self, metrics: PublishMetrics) -> Publisher<A> {
        self.metrics = metrics;
        self
    }

    /// Reconciles until the desired-state sender is dropped.
    pub async fn run(mut self) {
        loop {
            let desired = self.desired.borrow_and_update().clone();
            let now = Instant::now();
            if now >= self.next_capacity_check {
                // Read the Node back: a kubelet restart may have rewritten its status.
                self.capacity.landed = None;
                self.next_capacity_check = now + self.config.capacity_check;
            }
            if now >= self.next_resync {
                self.node.landed = None;
                self.node_feature.landed = None;
                self.devices.landed = None;
                self.next_resync = now + self.config.resync;
            }
            if let Some(want) = &desired {
                self.reconcile(want).await;
            }
            self.record_backlog(desired.as_ref());
            let caught_up = desired.as_ref().is_none_or(|d| self.caught_up(d));
            self.progress.send_replace(if caught_up {
                Progress::CaughtUp(desired.clone().map(Box::new))
            } else {
                Progress::Working
            });
            let wake = self.next_wake(desired.is_some());
            tokio::select! {
                changed = self.desired.changed() => {
                    if changed.is_err() {
                        tracing::info!("the desired state's sender is gone; the publisher stops");
                        return;
                    }
                }
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn next_wake(&self, active: bool) -> Instant {
        let mut wake = self.next_resync.min(self.next_capacity_check);
        if !active {
            return wake;
        }
        let retries = [
            self.node.retry,
            self.node_feature.retry,
            self.devices.retry,
            self.status.retry,
            self.capacity.retry,
        ];
        for retry in retries
            .into_iter()
            .flatten()
            .chain(self.pods.values().filter_map(|p| p.part.retry))
            .chain(self.events.values().filter_map(|e| e.retry))
        {
            wake = wake.min(retry.due);
        }
        wake
    }

    /// Sets the backlog gauges: per part, what has not landed, waiting or retrying.
    fn record_backlog(&self, want: Option<&Desired>) {
        let Some(want) = want else {
            for part in BacklogPart::ALL {
                self.metrics.set(part, 0, 0);
            }
            return;
        };
        let one = |pending: bool, retry: Option<Retry>| match (pending, retry) {
            (false, _) => (0, 0),
            (true, None) => (1, 0),
            (true, Some(_)) => (0, 1),
        };
        let parts = [
            (
                BacklogPart::Node,
                one(self.node.landed.is_none(), self.node.retry),
            ),
            (
                BacklogPart::NodeFeature,
                one(
                    !self.node_feature.is(&want.node_feature_labels),
                    self.node_feature.retry,
                ),
            ),
            (
                BacklogPart::Devices,
                one(
                    !self.devices.is(&self.devices_shape(want)),
                    self.devices.retry,
                ),
            ),
            (
                BacklogPart::DevicesStatus,
                one(!self.status.is(&want.devices_status), self.status.retry),
            ),
            (
                BacklogPart::Capacity,
                one(!self.capacity.is(&want.capacity), self.capacity.retry),
            ),
        ];
        for (part, (waiting, retrying)) in parts {
            self.metrics.set(part, waiting, retrying);
        }
        let (mut waiting, mut retrying) = (0, 0);
        for (pod, value) in &want.annotations {
            let (w, r) = match self.pods.get(pod) {
                None => (1, 0),
                Some(state) => one(!state.gone && !state.part.is(value), state.part.retry),
            };
            waiting += w;
            retrying += r;
        }
        self.metrics
            .set(BacklogPart::PodAnnotation, waiting, retrying);
    }

    fn caught_up(&self, want: &Desired) -> bool {
        self.node_feature.is(&want.node_feature_labels)
            && self.devices.is(&self.devices_shape(want))
            && self.status.is(&want.devices_status)
            && self.capacity.is(&want.capacity)
            && want.annotations.iter().all(|(pod, value)| {
                self.pods
                    .get(pod)
                    .is_some_and(|p| p.gone || p.part.is(value))
            })
            && want
                .node_events
                .keys()
                .all(|name| self.events.get(name).is_some_and(|e| e.is(&())))
    }

    async fn reconcile(&mut self, want: &Desired) {
        let now = Instant::now();
        // Pods first: a grant's durable copy matters most, and needs nothing of the Node.
        self.reconcile_pods(want, now).await;
        if !self.capacity.is(&want.capacity) && self.capacity.may_try(now) {
            self.reconcile_capacity(want, now).await;
        }
        if !self.ensure_node(now).await {
            return;
        }
        self.reconcile_events(want, now).await;
        if !self.node_feature.is(&want.node_feature_labels) && self.node_feature.may_try(now) {
            self.reconcile_node_feature(want, now).await;
        }
        let shape = self.devices_shape(want);
        if !self.devices.is(&shape) && self.devices.may_try(now) {
            self.reconcile_devices(shape, now).await;
        }
        if self.devices.is(&self.devices_shape(want))
            && !self.status.is(&want.devices_status)
            && self.status.may_try(now)
        {
            match self
                .api
                .patch_devices_status(&self.config.node, &want.devices_status)
                .await
            {
                Ok(()) => self.status.landed(want.devices_status.clone()),
                Err(e) => {
                    if matches!(e, ApiError::NotFound(_)) {
                        // Deleted under us: write it again.
                        self.devices.landed = None;
                    }
                    tracing::warn!(error = %e, "devices status not published; retrying");
                    self.status.failed(now, &self.config);
                }
            }
        }
    }

    /// Reads the Node once (its UID owns our objects; its os/arch label the Devices).
    async fn ensure_node(&mut self, now: Instant) -> bool {
        if self.node.landed.is_some() {
            return true;
        }
        if !self.node.may_try(now) {
            return false;
        }
        match self.api.node(&self.config.node).await {
            Ok(facts) => {
                self.node.landed(facts);
                true
            }
            Err(e) => {
                tracing::warn!(node = %self.config.node, error = %e, "cannot read the Node; retrying");
                self.node.failed(now, &self.config);
                false
            }
        }
    }

    fn owner(&self) -> Option<OwnerReference> {
        let node = self.node.landed.as_ref()?;
        Some(OwnerReference {
            api_version: "v1".to_string(),
            kind: "Node".to_string(),
            name: self.config.node.clone(),
            uid: node.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        })
    }

    fn devices_shape(&self, want: &Desired) -> DevicesShape {
        let mut labels: BTreeMap<String, String> = want
            .devices_spec
            .groups
            .iter()
            .filter(|g| {
                g.product.is_some()
                    && g.accelerators
                        .iter()
                        .any(|a| a.grantable != accel_core::devices::Grantability::Nothing)
            })
            .map(|g| {
                (
                    format!("{FEATURE_LABEL_PREFIX}{}", g.key),
                    "true".to_string(),
                )
            })
            .collect();
        if let Some(node) = &self.node.landed {
            for key in COPIED_NODE_LABELS {
                if let Some(value) = node.labels.get(key) {
                    labels.insert(key.to_string(), value.clone());
                }
            }
        }
        (want.devices_spec.clone(), labels)
    }

    async fn reconcile_node_feature(&mut self, want: &Desired, now: Instant) {
        let name = node_feature_name(&self.config.node);
        let namespace = self.config.namespace.clone();
        let owner = self.owner();
        let result = async {
            let existing = self.api.node_feature(&namespace, &name).await?;
            let mut object = NodeFeature::new(
                &name,
                NodeFeatureSpec {
                    labels: want.node_feature_labels.clone(),
                    features: NodeFeatureFeatures::from_labels(&want.node_feature_labels),
                },
            );
            object.metadata = ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                labels: Some(BTreeMap::from([(
                    NFD_NODE_NAME_LABEL.to_string(),
                    self.config.node.clone(),
                )])),
                owner_references: owner.map(|o| vec![o]),
                ..ObjectMeta::default()
            };
            match existing {
                None => self.api.create_node_feature(&object).await,
                Some(found) => {
                    let same = found.spec == object.spec
                        && found.metadata.labels == object.metadata.labels
                        && found.metadata.owner_references == object.metadata.owner_references;
                    if same {
                        return Ok(());
                    }
                    object.metadata.resource_version = found.metadata.resource_version;
                    self.api.replace_node_feature(&object).await
                }
            }
        }
        .await;
        match result {
            Ok(()) => self.node_feature.landed(want.node_feature_labels.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "nodefeature not published; retrying");
                self.node_feature.failed(now, &self.config);
            }
        }
    }

    async fn reconcile_devices(&mut self, shape: DevicesShape, now: Instant) {
        let name = self.config.node.clone();
        let mut object = Devices::new(&name, DevicesBody(shape.0.clone()));
        object.metadata.labels = Some(shape.1.clone());
        object.metadata.owner_references = self.owner().map(|o| vec![o]);
        let result = async {
            match self.api.devices(&name).await? {
                None => {
                    self.api.create_devices(&object).await?;
                    self.wrote_interfaces |= object.spec.0.interfaces.is_some();
                    Ok(None)
                }
                Some(found) => {
                    self.check_interfaces_kept(&found);
                    if object.spec.0.interfaces.is_none() {
                        // Nothing of ours to say (never enumerated): what is there stays.
                        object.spec.0.interfaces = found.spec.0.interfaces.clone();
                    } else if let (Some(ours), Some(stored)) = (
                        object.spec.0.interfaces.as_mut(),
                        found.spec.0.interfaces.as_ref(),
                    ) {
                        // Another daemon of this node, or this one before a restart, saw the
                        // failure first: its time stands.
                        adopt_first_seen(ours, stored);
                    }
                    let labels = found.metadata.labels.clone().unwrap_or_default();
                    let stale: Vec<String> = labels
                        .keys()
                        .filter(|k| {
                            k.starts_with(FEATURE_LABEL_PREFIX) && !shape.1.contains_key(*k)
                        })
                        .cloned()
                        .collect();
                    let ours_present = shape.1.iter().all(|(k, v)| labels.get(k) == Some(v));
                    let same = found.spec == object.spec
                        && stale.is_empty()
                        && ours_present
                        && found.metadata.owner_references == object.metadata.owner_references;
                    if !same {
                        self.api.patch_devices(&object, &stale).await?;
                        self.wrote_interfaces |= object.spec.0.interfaces.is_some();
                    }
                    Ok(found.status)
                }
            }
        }
        .await;
        let result: Result<Option<DevicesStatus>, ApiError> = result;
        match result {
            Ok(status) => {
                // What the API server holds is what the status part compares against.
                self.status.landed = status;
                self.devices.landed(shape);
            }
            Err(e) => {
                tracing::warn!(error = %e, "devices not published; retrying");
                self.devices.failed(now, &self.config);
            }
        }
    }

    /// A `Devices` read back without the interfaces a write of ours carried: the cluster's CRD
    /// predates them and the API server drops them (as `status.faults` once was). Said once,
    /// loudly, with the way out.
    fn check_interfaces_kept(&self, found: &Devices) {
        if !self.wrote_interfaces || found.spec.0.interfaces.is_some() {
            return;
        }
        if self.stale_crd.borrow().is_some() {
            return;
        }
        let why = format!(
            "the Devices CRD in the cluster drops spec.interfaces (it predates them; the API server prunes fields its schema lacks), so {} shows no network interfaces: apply the chart's crds/ (kubectl apply --server-side --force-conflicts -f deploy/helm/device-manager/crds/; deploy/README.md, \"Upgrading\")",
            self.config.node
        );
        tracing::error!("{why}");
        self.stale_crd.send_replace(Some(why));
    }

    async fn reconcile_capacity(&mut self, want: &Desired, now: Instant) {
        let result = async {
            let node = self.api.node(&self.config.node).await?;
            let mut patch = CapacityPatch::new();
            // The API server stores quantities in canonical form (1600000 reads back "1600k"),
            // so the values are compared as numbers.
            let holds = |map: &BTreeMap<String, String>, key: &str, value: u64| {
                map.get(key)
                    .is_some_and(|q| parse_count(q).is_ok_and(|n| n == value))
            };
            for (key, value) in &want.capacity {
                if !holds(&node.capacity, key, *value) || !holds(&node.allocatable, key, *value) {
                    patch.insert(key.clone(), Some(value.to_string()));
                }
            }
            for key in node.capacity.keys().chain(node.allocatable.keys()) {
                let ours = capacity_key_manufacturer(&self.config.grammar, key)
                    .is_some_and(|m| self.config.manufacturers.contains(&m));
                if ours && !want.capacity.contains_key(key) {
                    patch.insert(key.clone(), None);
                }
            }
            if !patch.is_empty() {
                self.api
                    .patch_node_capacity(&self.config.node, &patch)
                    .await?;
            }
            Ok::<_, ApiError>(node)
        }
        .await;
        match result {
            Ok(node) => {
                self.capacity.landed(want.capacity.clone());
                self.node.landed(node);
            }
            Err(e) => {
                tracing::warn!(error = %e, "node capacity not published; retrying");
                self.capacity.failed(now, &self.config);
            }
        }
    }

    /// Creates each wanted Event once; "already exists" (written before a restart) is done.
    async fn reconcile_events(&mut self, want: &Desired, now: Instant) {
        self.events
            .retain(|name, _| want.node_events.contains_key(name));
        let Some(uid) = self.node.landed.as_ref().map(|n| n.uid.clone()) else {
            return;
        };
        for (name, event) in &want.node_events {
            let state = self.events.entry(name.clone()).or_default();
            if state.is(&()) || !state.may_try(now) {
                continue;
            }
            match self
                .api
                .create_node_event(&self.config.node, &uid, event)
                .await
            {
                Ok(()) | Err(ApiError::Conflict { .. }) => state.landed(()),
                Err(e) => {
                    tracing::warn!(event = %name, error = %e, "node event not published; retrying");
                    state.failed(now, &self.config);
                }
            }
        }
    }

    async fn reconcile_pods(&mut self, want: &Desired, now: Instant) {
        self.pods
            .retain(|pod, _| want.annotations.contains_key(pod));
        for (pod, value) in &want.annotations {
            let state = self.pods.entry(pod.clone()).or_default();
            if state.gone || state.part.is(value) || !state.part.may_try(now) {
                continue;
            }
            match self
                .api
                .annotate_pod(pod, ALLOCATED_ANNOTATION, value.as_deref())
                .await
            {
                Ok(()) => state.part.landed(value.clone()),
                Err(e) if e.pod_gone() => {
                    tracing::info!(pod = %pod, error = %e, "the Pod is gone; its annotation is dropped");
                    state.gone = true;
                    state.part.retry = None;
                }
                Err(e) => {
                    tracing::warn!(pod = %pod, error = %e, "allocation annotation not published; retrying");
                    state.part.failed(now, &self.config);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::ledger::Family;
    use accel_plugin::pods::{Phase, Pod};

    fn pod(name: &str, uid: &str) -> Pod {
        Pod {
            uid: uid.into(),
            namespace: "team-a".into(),
            name: name.into(),
            created: 0,
            phase: Phase::Running,
            runtime_class: None,
            containers: vec![],
            allocated: None,
        }
    }

    fn grant() -> Grant {
        Grant {
            family: Family::Exclusive,
            resource: "nvidia.com/gpu".into(),
            device_ids: vec!["GPU-0".into()],
            accelerators: vec![0],
            units: 1_600_000,
            cores_percentage: None,
            partition: None,
            finished: false,
        }
    }

    fn reference(name: &str, uid: &str) -> PodRef {
        PodRef {
            namespace: "team-a".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn annotations_follow_the_grants_of_live_pods() {
        let grants = BTreeMap::from([
            (GrantKey::new("u-a", "main"), grant()),
            (GrantKey::new("u-gone", "main"), grant()),
        ]);
        let previous = BTreeMap::from([
            (reference("b", "u-b"), Some("{}".to_string())),
            (reference("old", "u-old"), Some("{}".to_string())),
        ]);
        let live = [pod("a", "u-a"), pod("b", "u-b"), pod("c", "u-c")];
        let got = pod_annotations(&live, &grants, &previous);
        let rendered = annotation::render(&annotation::for_pod("u-a", &grants));
        assert_eq!(
            got,
            BTreeMap::from([
                (reference("a", "u-a"), Some(rendered)),
                // Its grants were given back while it lives: the annotation is removed.
                (reference("b", "u-b"), None),
            ]),
            "a Pod without grants and never annotated is not touched; a Pod not live is left out"
        );
    }
}
