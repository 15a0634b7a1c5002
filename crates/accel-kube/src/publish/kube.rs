//! [`ClusterApi`] over kube-rs: one request per call, nothing decided here.
//!
//! Writes are JSON merge patches where a partial write is meant (the Node's status, a Pod's
//! annotation, Devices labels, spec and status), a create or a replace carrying the
//! resourceVersion read for the NodeFeature. The daemon needs: `get` and `patch` on
//! `nodes/status` (and `get` on nodes); `get`, `create`, `update` on `nodefeatures` in its own
//! namespace; `get`, `create`, `patch` on `devices` and `devices/status`; `patch` on `pods`.

use accel_core::devices::DevicesStatus;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

use super::api::{ApiError, CapacityPatch, ClusterApi, NodeFacts, PodRef};
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
