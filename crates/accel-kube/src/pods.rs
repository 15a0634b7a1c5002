//! This node's Pods from the API server: a watch of the Pods bound to the node (field selector
//! `spec.nodeName=<node>`), kept in memory as accel-plugin's plain [`Pod`] so the device plugin
//! identifies containers and reads budgets without an API round trip ([`PodSource`]).
//!
//! This module owns the watch, the conversion from the API's Pod (its
//! `device.gpustack.ai/accelerator.allocated` annotation kept raw, for the ledger's rebuild),
//! the synced flag, and the direct read of one Pod ([`PodSource::lookup`], a bounded GET) the
//! plugin makes when the kubelet admits a Pod before the watch has delivered it. It decides
//! nothing about grants; it needs read-only `get`/`list`/`watch` on Pods.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accel_core::ledger::annotation::ALLOCATED_ANNOTATION;
use accel_plugin::pods::{Container, LookupError, Phase, Pod, PodLookup, PodSource};
use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// The longest a direct read of one Pod may take. The plugin bounds its whole wait for a Pod
/// more tightly (`accel_plugin::service::IDENTIFY_WAIT`); this keeps any other caller from
/// hanging on an API server that accepts the connection and never answers.
pub const POD_GET_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the Pod watch could not start.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    /// No in-cluster configuration and no usable kubeconfig.
    #[error("no Kubernetes API configuration (in-cluster or KUBECONFIG): {0}")]
    Config(#[source] kube::Error),
}

/// The Pods the source holds: `None` until the first complete listing. Each Pod sits behind
/// `Arc`, so the snapshot Allocate takes on every call copies no Pod.
#[derive(Default)]
struct State {
    pods: Option<BTreeMap<String, Arc<Pod>>>,
    /// Pods of a listing in progress (a watch restart), swapped in when it completes.
    relisting: BTreeMap<String, Arc<Pod>>,
}

/// The Pods bound to one node, from a watch.
pub struct NodePods {
    node: String,
    /// For direct reads of one Pod.
    client: Client,
    state: Mutex<State>,
    tick: watch::Sender<u64>,
}

impl NodePods {
    /// The source, and the future that fills it (spawn it). `pods()` answers `None` until the
    /// first listing has completed; a watch that fails keeps the last Pods and retries with
    /// back-off.
    pub fn new(
        client: Client,
        node: &str,
    ) -> (Arc<NodePods>, impl Future<Output = ()> + Send + 'static) {
        let source = Arc::new(NodePods {
            node: node.to_string(),
            client: client.clone(),
            state: Mutex::new(State::default()),
            tick: watch::channel(0).0,
        });
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let stream = watcher(Api::<core::Pod>::all(client), config).default_backoff();
        let feed = source.clone();
        let run = stream.for_each(move |event| {
            match event {
                Ok(event) => feed.apply(event),
                Err(e) => {
                    tracing::warn!(node = %feed.node, error = %e, "the Pod watch failed; retrying")
                }
            }
            futures::future::ready(())
        });
        (source, run)
    }

    /// Connects with the in-cluster configuration or `KUBECONFIG` and starts the watch on the
    /// current tokio runtime.
    pub async fn connect(node: &str) -> Result<Arc<NodePods>, PodsError> {
        let client = Client::try_default().await.map_err(PodsError::Config)?;
        let (source, run) = NodePods::new(client, node);
        tokio::spawn(run);
        Ok(source)
    }

    fn apply(&self, event: watcher::Event<core::Pod>) {
        let changed = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                watcher::Event::Init => {
                    state.relisting.clear();
                    false
                }
                watcher::Event::InitApply(pod) => {
                    if let Some(pod) = self.convert(&pod) {
                        state.relisting.insert(pod.uid.clone(), Arc::new(pod));
                    }
                    false
                }
                watcher::Event::InitDone => {
                    let listed = std::mem::take(&mut state.relisting);
                    if state.pods.is_none() {
                        tracing::info!(node = %self.node, pods = listed.len(), "Pod watch synced");
                    }
                    state.pods = Some(listed);
                    true
                }
                watcher::Event::Apply(pod) => match (self.convert(&pod), state.pods.as_mut()) {
                    (Some(pod), Some(pods)) => {
                        let changed = pods.get(&pod.uid).map(Arc::as_ref) != Some(&pod);
                        if changed {
                            pods.insert(pod.uid.clone(), Arc::new(pod));
                        }
                        changed
                    }
                    _ => false,
                },
                watcher::Event::Delete(pod) => {
                    match (pod.metadata.uid.as_deref(), state.pods.as_mut()) {
                        (Some(uid), Some(pods)) => pods.remove(uid).is_some(),
                        _ => false,
                    }
                }
            }
        };
        if changed {
            self.tick.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn convert(&self, pod: &core::Pod) -> Option<Pod> {
        let converted = convert(pod);
        if converted.is_none() {
            tracing::warn!(
                node = %self.node,
                pod = ?pod.metadata.name,
                "a Pod without a UID, name or namespace is ignored"
            );
        }
        converted
    }
}

impl PodSource for NodePods {
    fn pods(&self) -> Option<Vec<Pod>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .pods
            .as_ref()
            .map(|pods| pods.values().map(|pod| Pod::clone(pod)).collect())
    }

    fn snapshot(&self) -> Option<Vec<Arc<Pod>>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .pods
            .as_ref()
            .map(|pods| pods.values().cloned().collect())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.tick.subscribe()
    }

    /// A GET of `namespaces/<namespace>/pods/<name>`, bounded by [`POD_GET_TIMEOUT`]. A Pod of
    /// that name bound to another node (or to none yet) is not this node's: `None`, as for one
    /// that does not exist.
    fn lookup<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodLookup<'a> {
        Box::pin(async move {
            let unavailable = |reason: String| LookupError::Unavailable {
                namespace: namespace.to_string(),
                name: name.to_string(),
                reason,
            };
            let api = Api::<core::Pod>::namespaced(self.client.clone(), namespace);
            let pod = match tokio::time::timeout(POD_GET_TIMEOUT, api.get_opt(name)).await {
                Ok(Ok(pod)) => pod,
                Ok(Err(e)) => return Err(unavailable(e.to_string())),
                Err(_) => {
                    return Err(unavailable(format!("no answer within {POD_GET_TIMEOUT:?}")));
                }
            };
            let Some(pod) = pod else {
                return Ok(None);
            };
            let bound_here = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| n == self.node);
            Ok(if bound_here { self.convert(&pod) } else { None })
        })
    }
}

/// The plugin's view of an API Pod; `None` when it lacks what names it (UID, namespace, name).
pub fn convert(pod: &core::Pod) -> Option<Pod> {
    let meta = &pod.metadata;
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => Phase::Pending,
        Some("Running") => Phase::Running,
        Some("Succeeded") => Phase::Succeeded,
        Some("Failed") => Phase::Failed,
        // A Pod just created has no status yet: it is pending.
        None => Phase::Pending,
        Some(_) => Phase::Unknown,
    };
    let spec = pod.spec.as_ref();
    // Init containers first (native sidecars among them hold devices too), then the others.
    let containers = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(container)
        .collect();
    Some(Pod {
        uid: meta.uid.clone()?,
        namespace: meta.namespace.clone()?,
        name: meta.name.clone()?,
        created: meta
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.timestamp()),
        phase,
        runtime_class: spec.and_then(|s| s.runtime_class_name.clone()),
        containers,
        // Only our own annotation is kept: the others (a last-applied configuration among them)
        // can be large, and the daemon holds every Pod of the node.
        allocated: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ALLOCATED_ANNOTATION))
            .cloned(),
    })
}

fn container(c: &core::Container) -> Container {
    // A key is read from limits, or from requests when only there (docs/requests.md).
    let mut limits = BTreeMap::new();
    if let Some(resources) = &c.resources {
        for source in [&resources.requests, &resources.limits]
            .into_iter()
            .flatten()
        {
            for (key, quantity) in source {
                limits.insert(key.clone(), quantity.0.clone());
            }
        }
    }
    // Never-overwrite reads the container's own `env:` entries; one set from a `valueFrom`
    // is set all the same, so it is kept with an empty text.
    let env = c
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    Container {
        name: c.name.clone(),
        limits,
        env,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api_pod(value: serde_json::Value) -> core::Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn converts_what_the_plugin_reads() {
        let pod = api_pod(json!({
            "metadata": {"uid": "u1", "namespace": "ns", "name": "p", "creationTimestamp": "2024-05-01T10:00:00Z",
                "annotations": {"device.gpustack.ai/accelerator.allocated": "{\"main\":{}}",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"nodeName": "node-1", "runtimeClassName": "nvidia",
                "initContainers": [{"name": "sidecar", "restartPolicy": "Always",
                    "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": "1"}}}],
                "containers": [{"name": "main",
                    "env": [{"name": "LIBCUDA_LOG_LEVEL", "value": "4"},
                            {"name": "CUDA_DEVICE_ORDER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"requests": {"nvidia.com/gpu.sliced.memory-percentage": "25"},
                                  "limits": {"nvidia.com/gpu.sliced": "1"}}}]},
            "status": {"phase": "Running"}
        }));
        let converted = convert(&pod).unwrap();
        assert_eq!(converted.uid, "u1");
        assert_eq!(converted.created, 1_714_557_600);
        assert_eq!(converted.phase, Phase::Running);
        assert_eq!(converted.runtime_class.as_deref(), Some("nvidia"));
        assert_eq!(converted.allocated.as_deref(), Some(r#"{"main":{}}"#));
        let names: Vec<&str> = converted
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["sidecar", "main"]);
        let main = converted.container("main").unwrap();
        assert_eq!(main.count("nvidia.com/gpu.sliced"), Some(1));
        assert_eq!(
            main.count("nvidia.com/gpu.sliced.memory-percentage"),
            Some(25)
        );
        assert_eq!(
            main.env.get("LIBCUDA_LOG_LEVEL").map(String::as_str),
            Some("4")
        );
        assert!(main.env.contains_key("CUDA_DEVICE_ORDER"));
    }

    #[test]
    fn phases_and_unnamed_pods() {
        let phase = |p: Option<&str>| {
            let mut v = json!({"metadata": {"uid": "u", "namespace": "n", "name": "p"}});
            if let Some(p) = p {
                v["status"] = json!({"phase": p});
            }
            convert(&api_pod(v)).unwrap().phase
        };
        assert_eq!(phase(None), Phase::Pending);
        let bare = api_pod(json!({"metadata": {"uid": "u", "namespace": "n", "name": "p"}}));
        assert_eq!(convert(&bare).unwrap().allocated, None);
        assert_eq!(phase(Some("Succeeded")), Phase::Succeeded);
        assert_eq!(phase(Some("Failed")), Phase::Failed);
        assert_eq!(phase(Some("Weird")), Phase::Unknown);
        assert_eq!(
            convert(&api_pod(
                json!({"metadata": {"name": "p", "namespace": "n"}})
            )),
            None
        );
    }
}
