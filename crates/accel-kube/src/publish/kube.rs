//! [`ClusterApi`] over kube-rs: one request per call, nothing decided here.
//!
//! Writes are JSON merge patches where a partial write is meant (the Node's status, a Pod's
//! annotation, Devices labels, spec and status), a create or a replace carrying the
//! resourceVersion read for the NodeFeature. The daemon needs: `get` and `patch` on
//! `nodes/status` (and `get` on nodes); `get`, `create`, `update` on `nodefeatures` in its own
//! namespace; `get`, `create`, `patch` on `devices` and `devices/status`; `patch` on `pods`;
//! `create` on core `events` in the `default` namespace (the Node's Events).

use accel_core::devices::DevicesStatus;
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::chrono::{DateTime, Utc};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

use super::api::{
    ApiError, CapacityPatch, ClusterApi, NODE_EVENT_NAMESPACE, NodeEvent, NodeFacts, PodRef,
};

/// The component named in the Events the daemon writes.
pub const EVENT_COMPONENT: &str = "gpustack-device-manager";

/// A core v1 Event about Node `node`, as `kubectl describe node` finds it (involved object the
/// Node by kind, name and UID; first, last and event times set; count 1).
pub fn node_event_object(node: &str, node_uid: &str, event: &NodeEvent) -> Event {
    let time = DateTime::parse_from_rfc3339(&event.time)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|_| Utc::now());
    Event {
        metadata: ObjectMeta {
            name: Some(event.name.clone()),
            namespace: Some(NODE_EVENT_NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            uid: Some(node_uid.to_string()),
            ..ObjectReference::default()
        },
        type_: Some(event.type_.clone()),
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        source: Some(EventSource {
            component: Some(EVENT_COMPONENT.to_string()),
            host: Some(node.to_string()),
        }),
        reporting_component: Some(EVENT_COMPONENT.to_string()),
        reporting_instance: Some(node.to_string()),
        first_timestamp: Some(Time(time)),
        last_timestamp: Some(Time(time)),
        event_time: Some(MicroTime(time)),
        action: Some("Detected".to_string()),
        count: Some(1),
        ..Event::default()
    }
}
use crate::crd::{Devices, NodeFeature};

/// The kube-rs implementation.
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
}

impl KubeApi {
    pub fn new(client: Client) -> KubeApi {
        KubeApi { client }
    }
}

fn map_error(what: &str, e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(response) => match response.code {
            404 => ApiError::NotFound(what.to_string()),
            409 => ApiError::Conflict {
                what: what.to_string(),
                message: response.message,
            },
            422 => ApiError::Invalid {
                what: what.to_string(),
                message: response.message,
            },
            code => ApiError::Unavailable {
                what: what.to_string(),
                message: format!("HTTP {code}: {}", response.message),
            },
        },
        other => ApiError::Unavailable {
            what: what.to_string(),
            message: other.to_string(),
        },
    }
}

fn quantities(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> std::collections::BTreeMap<String, String> {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

impl ClusterApi for KubeApi {
    async fn node(&self, name: &str) -> Result<NodeFacts, ApiError> {
        let what = format!("node {name}");
        let node = Api::<Node>::all(self.client.clone())
            .get(name)
            .await
            .map_err(|e| map_error(&what, e))?;
        let status = node.status.as_ref();
        Ok(NodeFacts {
            uid: node.metadata.uid.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            capacity: quantities(status.and_then(|s| s.capacity.as_ref())),
            allocatable: quantities(status.and_then(|s| s.allocatable.as_ref())),
        })
    }

    async fn patch_node_capacity(&self, name: &str, patch: &CapacityPatch) -> Result<(), ApiError> {
        let what = format!("node {name} status");
        let keys: Map<String, Value> = patch
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |q| json!(q))))
            .collect();
        let body = json!({"status": {"capacity": keys, "allocatable": keys}});
        Api::<Node>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn node_feature(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NodeFeature>, ApiError> {
        let what = format!("nodefeature {namespace}/{name}");
        Api::<NodeFeature>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| map_error(&what, e))
    }

    async fn create_node_feature(&self, object: &NodeFeature) -> Result<(), ApiError> {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let what = format!(
            "nodefeature {namespace}/{}",
            object.metadata.name.as_deref().unwrap_or_default()
        );
        Api::<NodeFeature>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), object)
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn replace_node_feature(&self, object: &NodeFeature) -> Result<(), ApiError> {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let what = format!("nodefeature {namespace}/{name}");
        Api::<NodeFeature>::namespaced(self.client.clone(), &namespace)
            .replace(&name, &PostParams::default(), object)
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn devices(&self, name: &str) -> Result<Option<Devices>, ApiError> {
        let what = format!("devices {name}");
        Api::<Devices>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| map_error(&what, e))
    }

    async fn create_devices(&self, object: &Devices) -> Result<(), ApiError> {
        let what = format!(
            "devices {}",
            object.metadata.name.as_deref().unwrap_or_default()
        );
        Api::<Devices>::all(self.client.clone())
            .create(&PostParams::default(), object)
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn patch_devices(
        &self,
        object: &Devices,
        label_removals: &[String],
    ) -> Result<(), ApiError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let what = format!("devices {name}");
        let mut labels: Map<String, Value> = object
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        for key in label_removals {
            labels.insert(key.clone(), Value::Null);
        }
        let body = json!({
            "metadata": {"labels": labels, "ownerReferences": object.metadata.owner_references},
            "spec": object.spec,
        });
        Api::<Devices>::all(self.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn patch_devices_status(
        &self,
        name: &str,
        status: &DevicesStatus,
    ) -> Result<(), ApiError> {
        let what = format!("devices {name} status");
        let body = json!({"status": status});
        Api::<Devices>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn create_node_event(
        &self,
        node: &str,
        node_uid: &str,
        event: &NodeEvent,
    ) -> Result<(), ApiError> {
        let what = format!("event {}", event.name);
        Api::<Event>::namespaced(self.client.clone(), NODE_EVENT_NAMESPACE)
            .create(
                &PostParams::default(),
                &node_event_object(node, node_uid, event),
            )
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }

    async fn annotate_pod(
        &self,
        pod: &PodRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), ApiError> {
        let what = format!("pod {pod}");
        // The UID in the patch is a precondition: the API server refuses the patch when the Pod
        // of that name is another incarnation, so a grant never lands on a stranger.
        let body = json!({"metadata": {"uid": pod.uid, "annotations": {key: value}}});
        Api::<Pod>::namespaced(self.client.clone(), &pod.namespace)
            .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(drop)
            .map_err(|e| map_error(&what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_event_is_what_kubectl_describe_node_finds() {
        let event = NodeEvent {
            name: "gpu-7e7d.xid48.20261201044500".into(),
            type_: "Warning".into(),
            reason: "Xid48".into(),
            message: "nvidia GPU 1 (GPU-7e7d) is out of service".into(),
            time: "2026-12-01T04:45:00Z".into(),
        };
        let body = serde_json::to_value(node_event_object("node-1", "uid-1", &event)).unwrap();
        assert_eq!(body["metadata"]["namespace"], "default");
        assert_eq!(body["metadata"]["name"], "gpu-7e7d.xid48.20261201044500");
        // kubectl describe node selects on the involved object's kind, name and UID.
        assert_eq!(
            body["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-1"})
        );
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["reason"], "Xid48");
        assert_eq!(body["firstTimestamp"], "2026-12-01T04:45:00Z");
        assert_eq!(body["lastTimestamp"], "2026-12-01T04:45:00Z");
        assert_eq!(body["count"], 1);
        assert_eq!(body["source"]["component"], EVENT_COMPONENT);
    }
}
