//! An in-memory API server for the publisher's tests and for wiring tests of the daemon: Nodes,
//! NodeFeatures, Devices, Pods and the Node's Events in maps, every call recorded, and a switch that makes every
//! call fail as an unreachable API server does ([`MemoryApi::set_reachable`]).
//!
//! It follows the semantics the publisher relies on (404 for a missing object, a UID-guarded Pod
//! patch, merge patches that remove `null` keys), nothing more.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use accel_core::devices::DevicesStatus;

use super::api::{ApiError, CapacityPatch, ClusterApi, NodeEvent, NodeFacts, PodRef};
use crate::crd::{Devices, NodeFeature};

#[derive(Debug, Clone, Default)]
struct MemoryPod {
    uid: String,
    annotations: BTreeMap<String, String>,
}

#[derive(Default)]
struct State {
    reachable: bool,
    version: u64,
    nodes: BTreeMap<String, NodeFacts>,
    node_features: BTreeMap<(String, String), NodeFeature>,
    devices: BTreeMap<String, Devices>,
    pods: BTreeMap<(String, String), MemoryPod>,
    /// Events by name, with the Node (name, UID) each is about.
    events: BTreeMap<String, (String, String, NodeEvent)>,
    calls: Vec<String>,
    /// An old `Devices` CRD: the API server drops `spec.interfaces`, which its schema lacks.
    prunes_interfaces: bool,
}

/// The in-memory API server.
pub struct MemoryApi {
    state: Mutex<State>,
}

impl Default for MemoryApi {
    fn default() -> Self {
        MemoryApi::new()
    }
}

impl MemoryApi {
    /// An empty, reachable API server.
    pub fn new() -> MemoryApi {
        MemoryApi {
            state: Mutex::new(State {
                reachable: true,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes every call fail (`false`) or answer again (`true`).
    pub fn set_reachable(&self, reachable: bool) {
        self.lock().reachable = reachable;
    }

    /// Behaves as an API server whose `Devices` CRD predates `spec.interfaces`: the field is
    /// silently dropped from what is written (the structural schema prunes unknown fields).
    pub fn set_prunes_interfaces(&self, prunes: bool) {
        self.lock().prunes_interfaces = prunes;
    }

    /// Adds or replaces a Node.
    pub fn put_node(&self, name: &str, node: NodeFacts) {
        self.lock().nodes.insert(name.to_string(), node);
    }

    /// The Node as stored.
    pub fn node_facts(&self, name: &str) -> Option<NodeFacts> {
        self.lock().nodes.get(name).cloned()
    }

    /// What a kubelet restart does to the Node's status: capacity and allocatable rewritten
    /// with only what the kubelet itself knows.
    pub fn reset_node_status(&self, name: &str, capacity: BTreeMap<String, String>) {
        if let Some(node) = self.lock().nodes.get_mut(name) {
            node.allocatable = capacity.clone();
            node.capacity = capacity;
        }
    }

    /// Adds a Pod.
    pub fn put_pod(&self, pod: &PodRef) {
        self.lock().pods.insert(
            (pod.namespace.clone(), pod.name.clone()),
            MemoryPod {
                uid: pod.uid.clone(),
                annotations: BTreeMap::new(),
            },
        );
    }

    /// Deletes a Pod.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.lock()
            .pods
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// One annotation of a Pod, if the Pod and the annotation exist.
    pub fn pod_annotation(&self, namespace: &str, name: &str, key: &str) -> Option<String> {
        self.lock()
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .and_then(|p| p.annotations.get(key).cloned())
    }

    /// A NodeFeature as stored.
    pub fn node_feature_object(&self, namespace: &str, name: &str) -> Option<NodeFeature> {
        self.lock()
            .node_features
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The Events about Node `node`, in the order of their names.
    pub fn node_events(&self, node: &str) -> Vec<NodeEvent> {
        self.lock()
            .events
            .values()
            .filter(|(name, _, _)| name == node)
            .map(|(_, _, event)| event.clone())
            .collect()
    }

    /// A Devices object as stored.
    pub fn devices_object(&self, name: &str) -> Option<Devices> {
        self.lock().devices.get(name).cloned()
    }

    /// Deletes a Devices object (as the worker does when the Node is gone).
    pub fn delete_devices(&self, name: &str) {
        self.lock().devices.remove(name);
    }

    /// Every call made so far, one line each (`create_node_feature ns/name`, …), failed ones
    /// included.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Records a call and answers whether the server is reachable.
    fn enter(&self, call: String) -> Result<MutexGuard<'_, State>, ApiError> {
        let mut state = self.lock();
        state.calls.push(call.clone());
        if state.reachable {
            state.version += 1;
            Ok(state)
        } else {
            Err(ApiError::Unavailable {
                what: call,
                message: "connection refused".to_string(),
            })
        }
    }
}

fn apply_patch(map: &mut BTreeMap<String, String>, patch: &CapacityPatch) {
    for (key, value) in patch {
        match value {
            Some(v) => map.insert(key.clone(), v.clone()),
            None => map.remove(key),
        };
    }
}

impl ClusterApi for MemoryApi {
    async fn node(&self, name: &str) -> Result<NodeFacts, ApiError> {
        let state = self.enter(format!("node {name}"))?;
        state
            .nodes
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("node {name}")))
    }

    async fn patch_node_capacity(&self, name: &str, patch: &CapacityPatch) -> Result<(), ApiError> {
        let mut state = self.enter(format!("patch_node_capacity {name}"))?;
        let node = state
            .nodes
            .get_mut(name)
            .ok_or_else(|| ApiError::NotFound(format!("node {name}")))?;
        apply_patch(&mut node.capacity, patch);
        apply_patch(&mut node.allocatable, patch);
        Ok(())
    }

    async fn node_feature(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NodeFeature>, ApiError> {
        let state = self.enter(format!("node_feature {namespace}/{name}"))?;
        Ok(state
            .node_features
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    async fn create_node_feature(&self, object: &NodeFeature) -> Result<(), ApiError> {
        let key = (
            object.metadata.namespace.clone().unwrap_or_default(),
            object.metadata.name.clone().unwrap_or_default(),
        );
        let mut state = self.enter(format!("create_node_feature {}/{}", key.0, key.1))?;
        if state.node_features.contains_key(&key) {
            return Err(ApiError::Conflict {
                what: format!("nodefeature {}/{}", key.0, key.1),
                message: "already exists".to_string(),
            });
        }
        let mut object = object.clone();
        object.metadata.resource_version = Some(state.version.to_string());
        state.node_features.insert(key, object);
        Ok(())
    }

    async fn replace_node_feature(&self, object: &NodeFeature) -> Result<(), ApiError> {
        let key = (
            object.metadata.namespace.clone().unwrap_or_default(),
            object.metadata.name.clone().unwrap_or_default(),
        );
        let mut state = self.enter(format!("replace_node_feature {}/{}", key.0, key.1))?;
        let what = format!("nodefeature {}/{}", key.0, key.1);
        let stored = state
            .node_features
            .get(&key)
            .ok_or_else(|| ApiError::NotFound(what.clone()))?;
        if stored.metadata.resource_version != object.metadata.resource_version {
            return Err(ApiError::Conflict {
                what,
                message: "the object has been modified".to_string(),
            });
        }
        let mut object = object.clone();
        object.metadata.resource_version = Some(state.version.to_string());
        state.node_features.insert(key, object);
        Ok(())
    }

    async fn devices(&self, name: &str) -> Result<Option<Devices>, ApiError> {
        let state = self.enter(format!("devices {name}"))?;
        Ok(state.devices.get(name).cloned())
    }

    async fn create_devices(&self, object: &Devices) -> Result<(), ApiError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let mut state = self.enter(format!("create_devices {name}"))?;
        if state.devices.contains_key(&name) {
            return Err(ApiError::Conflict {
                what: format!("devices {name}"),
                message: "already exists".to_string(),
            });
        }
        let mut object = object.clone();
        // The status subresource: a create does not write the status.
        object.status = None;
        if state.prunes_interfaces {
            object.spec.0.interfaces = None;
        }
        state.devices.insert(name, object);
        Ok(())
    }

    async fn patch_devices(
        &self,
        object: &Devices,
        label_removals: &[String],
    ) -> Result<(), ApiError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let mut state = self.enter(format!("patch_devices {name}"))?;
        let prunes = state.prunes_interfaces;
        let stored = state
            .devices
            .get_mut(&name)
            .ok_or_else(|| ApiError::NotFound(format!("devices {name}")))?;
        let labels = stored.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in object.metadata.labels.iter().flatten() {
            labels.insert(k.clone(), v.clone());
        }
        for key in label_removals {
            labels.remove(key);
        }
        stored.metadata.owner_references = object.metadata.owner_references.clone();
        // A merge patch: a key left out (no interfaces to say) keeps what is stored.
        let interfaces = match &object.spec.0.interfaces {
            Some(_) if prunes => None,
            Some(list) => Some(list.clone()),
            None => stored.spec.0.interfaces.take(),
        };
        stored.spec = object.spec.clone();
        stored.spec.0.interfaces = interfaces;
        Ok(())
    }

    async fn patch_devices_status(
        &self,
        name: &str,
        status: &DevicesStatus,
    ) -> Result<(), ApiError> {
        let mut state = self.enter(format!("patch_devices_status {name}"))?;
        let stored = state
            .devices
            .get_mut(name)
            .ok_or_else(|| ApiError::NotFound(format!("devices {name}")))?;
        stored.status = Some(status.clone());
        Ok(())
    }

    async fn create_node_event(
        &self,
        node: &str,
        node_uid: &str,
        event: &NodeEvent,
    ) -> Result<(), ApiError> {
        let mut state = self.enter(format!("create_node_event {}", event.name))?;
        if state.events.contains_key(&event.name) {
            return Err(ApiError::Conflict {
                what: format!("event {}", event.name),
                message: "already exists".to_string(),
            });
        }
        state.events.insert(
            event.name.clone(),
            (node.to_string(), node_uid.to_string(), event.clone()),
        );
        Ok(())
    }

    async fn annotate_pod(
        &self,
        pod: &PodRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut state = self.enter(format!("annotate_pod {}/{}", pod.namespace, pod.name))?;
        let what = format!("pod {pod}");
        let stored = state
            .pods
            .get_mut(&(pod.namespace.clone(), pod.name.clone()))
            .ok_or_else(|| ApiError::NotFound(what.clone()))?;
        if stored.uid != pod.uid {
            return Err(ApiError::Conflict {
                what,
                message: format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    pod.uid, stored.uid
                ),
            });
        }
        match value {
            Some(v) => stored.annotations.insert(key.to_string(), v.to_string()),
            None => stored.annotations.remove(key),
        };
        Ok(())
    }
}
