//! The publisher over kube-rs against a recorded API server (tower_test::mock::pair +
//! kube::Client::new): a small scripted server stores what it is sent and answers as the API
//! server does (404 for a missing object, merge patches applied), and every request is recorded,
//! so the test asserts each request the daemon makes: the paths, the verbs, the merge-patch
//! content type and the bodies (owner references, labels, the UID-guarded annotation, the
//! capacity keys and their removal), and that an unchanged NodeFeature is never written.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_core::devices::{
    AcceleratorGroup, DevicesAccelerator, DevicesSpec, DevicesStatus, Grantability,
};
use accel_core::ledger::annotation::ALLOCATED_ANNOTATION;
use accel_core::manufacturer::Manufacturer;
use accel_kube::publish::kube::KubeApi;
use accel_kube::publish::{Desired, PodRef, Publisher, PublisherConfig, PublisherHandle};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::watch;

const NODE_PATH: &str = "/api/v1/nodes/node-1";
const NF_COLLECTION: &str =
    "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpustack-system/nodefeatures";
const NF_PATH: &str = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpustack-system/nodefeatures/node-1-gpustack-device-manager";
const DEVICES_COLLECTION: &str = "/apis/gpustack.ai/v1/devices";
const DEVICES_PATH: &str = "/apis/gpustack.ai/v1/devices/node-1";
const POD_PATH: &str = "/api/v1/namespaces/team-a/pods/p1";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    content_type: Option<String>,
    body: Value,
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => {
            if patch.is_object() {
                *target = json!({});
                merge(target, patch);
            } else {
                *target = patch.clone();
            }
        }
    }
}

fn not_found(path: &str) -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
    )
}

/// The scripted API server: objects by path, every request recorded.
#[derive(Default)]
struct Server {
    objects: BTreeMap<String, Value>,
    seen: Vec<Seen>,
    version: u64,
}

impl Server {
    fn answer(&mut self, seen: &Seen) -> (StatusCode, Value) {
        self.version += 1;
        let path = seen
            .path
            .strip_suffix("/status")
            .unwrap_or(&seen.path)
            .to_string();
        match seen.method.as_str() {
            "GET" => match self.objects.get(&path) {
                Some(o) => (StatusCode::OK, o.clone()),
                None => not_found(&path),
            },
            "POST" => {
                let mut object = seen.body.clone();
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                object["metadata"]["resourceVersion"] = json!(self.version.to_string());
                object.as_object_mut().unwrap().remove("status");
                self.objects
                    .insert(format!("{path}/{name}"), object.clone());
                (StatusCode::CREATED, object)
            }
            "PUT" => {
                let mut object = seen.body.clone();
                object["metadata"]["resourceVersion"] = json!(self.version.to_string());
                self.objects.insert(path, object.clone());
                (StatusCode::OK, object)
            }
            "PATCH" => match self.objects.get_mut(&path) {
                Some(o) => {
                    if let Some(uid) = seen.body["metadata"]["uid"].as_str()
                        && o["metadata"]["uid"] != json!(uid)
                    {
                        return (
                            StatusCode::CONFLICT,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "Precondition failed: UID in precondition", "reason": "Conflict", "code": 409}),
                        );
                    }
                    merge(o, &seen.body);
                    (StatusCode::OK, o.clone())
                }
                None => not_found(&path),
            },
            _ => (StatusCode::METHOD_NOT_ALLOWED, json!({})),
        }
    }
}

fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    server: Arc<Mutex<Server>>,
) {
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let content_type = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            let seen = Seen {
                method,
                path,
                content_type,
                body,
            };
            let (status, answer) = {
                let mut s = server.lock().unwrap();
                let answer = s.answer(&seen);
                s.seen.push(seen);
                answer
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
}

fn cluster() -> Arc<Mutex<Server>> {
    let mut server = Server::default();
    server.objects.insert(
        NODE_PATH.into(),
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-1", "uid": "node-uid-1",
                "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64", "zone": "a"}},
            "status": {
                "capacity": {"cpu": "8", "nvidia.com/gpu": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "7"},
                "allocatable": {"cpu": "8", "nvidia.com/gpu": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "7"}}}),
    );
    server.objects.insert(
        POD_PATH.into(),
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "team-a", "uid": "pod-uid-1"}}),
    );
    Arc::new(Mutex::new(server))
}

fn desired() -> Desired {
    let accelerator = DevicesAccelerator {
        index: 0,
        uuid: Some("GPU-0".into()),
        bus_id: Some("00000000:18:00.0".into()),
        numa_node: Some(0),
        memory_mib: Some(15360),
        healthy: true,
        health_reasons: vec![],
        grantable: Grantability::Whole,
        logical_sliced: None,
        partition_profiles: BTreeMap::new(),
        super_pod: None,
    };
    Desired {
        node_feature_labels: BTreeMap::from([
            ("feature.gpustack.ai/acceleratable".into(), "true".into()),
            (
                "acceleratable.feature.gpustack.ai/nvidia-tesla-t4".into(),
                "true".into(),
            ),
        ]),
        devices_spec: DevicesSpec {
            interfaces: None,
            groups: vec![AcceleratorGroup {
                manufacturer: Manufacturer::Nvidia,
                key: "nvidia-tesla-t4".into(),
                product: Some("Tesla T4".into()),
                memory_mib: Some(15360),
                cores: Some(2560),
                driver_version: None,
                runtime_version: None,
                family: None,
                compute_capability: None,
                accelerators: vec![accelerator],
            }],
        },
        devices_status: DevicesStatus::default(),
        capacity: BTreeMap::from([("nvidia.com/gpu.sliced.units".into(), 1_600_000)]),
        annotations: BTreeMap::from([(
            PodRef {
                namespace: "team-a".into(),
                name: "p1".into(),
                uid: "pod-uid-1".into(),
            },
            Some(r#"{"main":{"family":"sliced"}}"#.to_string()),
        )]),
        node_events: BTreeMap::new(),
    }
}

fn start() -> (
    Arc<Mutex<Server>>,
    watch::Sender<Option<Desired>>,
    PublisherHandle,
) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = cluster();
    serve(handle, server.clone());
    let client = kube::Client::new(service, "default");
    let mut config = PublisherConfig::new("node-1", "gpustack-system", [Manufacturer::Nvidia]);
    config.capacity_check = Duration::from_secs(3600);
    let (tx, rx) = watch::channel(None);
    let (publisher, handle) = Publisher::new(Arc::new(KubeApi::new(client)), config, rx);
    tokio::spawn(publisher.run());
    (server, tx, handle)
}

async fn caught_up(handle: &mut PublisherHandle, what: &str) {
    tokio::time::timeout(Duration::from_secs(20), handle.caught_up())
        .await
        .unwrap_or_else(|_| panic!("the publisher never caught up: {what}"));
}

/// The writes since the last call, as (method, path); the requests are kept for inspection.
fn take_writes(server: &Arc<Mutex<Server>>) -> Vec<Seen> {
    let mut s = server.lock().unwrap();
    let seen = std::mem::take(&mut s.seen);
    seen.into_iter().filter(|r| r.method != "GET").collect()
}

fn verbs(writes: &[Seen]) -> Vec<(String, String)> {
    writes
        .iter()
        .map(|w| (w.method.clone(), w.path.clone()))
        .collect()
}

fn owner() -> Value {
    json!([{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-uid-1", "controller": true}])
}

#[tokio::test]
async fn each_request_the_daemon_makes() {
    let (server, tx, mut handle) = start();
    tx.send_replace(Some(desired()));
    caught_up(&mut handle, "first publication").await;
    let writes = take_writes(&server);
    assert_eq!(
        verbs(&writes),
        [
            ("PATCH".into(), POD_PATH.into()),
            ("PATCH".into(), format!("{NODE_PATH}/status")),
            ("POST".into(), NF_COLLECTION.into()),
            ("POST".into(), DEVICES_COLLECTION.into()),
            ("PATCH".into(), format!("{DEVICES_PATH}/status")),
        ]
    );
    for patch in writes.iter().filter(|w| w.method == "PATCH") {
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/merge-patch+json"),
            "{}",
            patch.path
        );
    }
    // The Pod annotation: guarded by the Pod's UID, the value as the ledger rendered it.
    assert_eq!(
        writes[0].body,
        json!({"metadata": {"uid": "pod-uid-1",
            "annotations": {ALLOCATED_ANNOTATION: r#"{"main":{"family":"sliced"}}"#}}})
    );
    // The Node's capacity and allocatable: ours set, our stale key removed, the rest untouched.
    let keys = json!({"nvidia.com/gpu.partitioned.mig-1g.10gb": null,
        "nvidia.com/gpu.sliced.units": "1600000"});
    assert_eq!(
        writes[1].body,
        json!({"status": {"capacity": keys, "allocatable": keys}})
    );
    // The NodeFeature: named after the node, NFD's node-name label, owned by the Node.
    let nf = &writes[2].body;
    assert_eq!(nf["apiVersion"], "nfd.k8s-sigs.io/v1alpha1");
    assert_eq!(nf["kind"], "NodeFeature");
    assert_eq!(nf["metadata"]["name"], "node-1-gpustack-device-manager");
    assert_eq!(nf["metadata"]["namespace"], "gpustack-system");
    assert_eq!(
        nf["metadata"]["labels"],
        json!({"nfd.node.kubernetes.io/node-name": "node-1"})
    );
    assert_eq!(nf["metadata"]["ownerReferences"], owner());
    assert_eq!(
        nf["spec"]["labels"],
        json!({"feature.gpustack.ai/acceleratable": "true",
            "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true"})
    );
    // The Devices object: named after the node, owned by it, stamped for the pool lookup.
    let devices = &writes[3].body;
    assert_eq!(devices["apiVersion"], "gpustack.ai/v1");
    assert_eq!(devices["kind"], "Devices");
    assert_eq!(devices["metadata"]["name"], "node-1");
    assert!(
        devices["metadata"].get("namespace").is_none(),
        "cluster-scoped"
    );
    assert_eq!(devices["metadata"]["ownerReferences"], owner());
    assert_eq!(
        devices["metadata"]["labels"],
        json!({"acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"})
    );
    assert_eq!(devices["spec"]["groups"][0]["key"], "nvidia-tesla-t4");
    assert_eq!(
        devices["spec"]["groups"][0]["accelerators"][0]["memoryMiB"],
        15360
    );
    assert_eq!(
        writes[4].body,
        json!({"status": {"accelerators": [], "conditions": [], "faults": []}})
    );

    // Only the status changes: one status write, and the NodeFeature is not written.
    let mut next = desired();
    next.devices_status
        .conditions
        .push(accel_core::devices::Condition {
            type_: "Detected".into(),
            status: accel_core::devices::ConditionStatus::True,
            reason: "Detected".into(),
            message: "last detected at 2026-11-29T10:00:00Z".into(),
            last_transition_time: "2026-11-29T10:00:00Z".into(),
        });
    tx.send_replace(Some(next.clone()));
    caught_up(&mut handle, "a status change").await;
    let writes = take_writes(&server);
    assert_eq!(
        verbs(&writes),
        [("PATCH".into(), format!("{DEVICES_PATH}/status"))]
    );
    assert_eq!(
        writes[0].body["status"]["conditions"][0]["type"],
        "Detected"
    );

    // The labels change: the NodeFeature is read and replaced with the version it had.
    let rv = server.lock().unwrap().objects[NF_PATH]["metadata"]["resourceVersion"].clone();
    next.node_feature_labels.insert(
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count".into(),
        "1".into(),
    );
    tx.send_replace(Some(next.clone()));
    caught_up(&mut handle, "a label change").await;
    let writes = take_writes(&server);
    assert_eq!(verbs(&writes), [("PUT".into(), NF_PATH.into())]);
    assert_eq!(writes[0].body["metadata"]["resourceVersion"], rv);
    assert_eq!(
        writes[0].body["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"],
        "1"
    );
    assert_eq!(writes[0].body["metadata"]["ownerReferences"], owner());

    // The accelerators go: our capacity key is removed, the group label dropped from Devices.
    let mut gone = next.clone();
    gone.capacity.clear();
    gone.devices_spec.groups.clear();
    tx.send_replace(Some(gone));
    caught_up(&mut handle, "the accelerators went").await;
    let writes = take_writes(&server);
    assert_eq!(
        verbs(&writes),
        [
            ("PATCH".into(), format!("{NODE_PATH}/status")),
            ("PATCH".into(), DEVICES_PATH.into()),
        ]
    );
    let keys = json!({"nvidia.com/gpu.sliced.units": null});
    assert_eq!(
        writes[0].body,
        json!({"status": {"capacity": keys, "allocatable": keys}})
    );
    assert_eq!(
        writes[1].body["metadata"]["labels"],
        json!({"acceleratable.feature.gpustack.ai/nvidia-tesla-t4": null,
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"})
    );
    assert_eq!(writes[1].body["spec"], json!({"groups": []}));
    let stored = server.lock().unwrap().objects[NODE_PATH].clone();
    assert_eq!(
        stored["status"]["capacity"],
        json!({"cpu": "8", "nvidia.com/gpu": "2"}),
        "keys the plugins serve are left to the kubelet"
    );
}

#[tokio::test]
async fn a_pod_of_another_uid_is_not_annotated_and_not_retried() {
    let (server, tx, mut handle) = start();
    let mut want = desired();
    want.annotations = BTreeMap::from([(
        PodRef {
            namespace: "team-a".into(),
            name: "p1".into(),
            uid: "an-older-pod".into(),
        },
        Some("{}".to_string()),
    )]);
    tx.send_replace(Some(want));
    caught_up(&mut handle, "with the Pod gone").await;
    let pod_patches = |s: &Arc<Mutex<Server>>| {
        s.lock()
            .unwrap()
            .seen
            .iter()
            .filter(|r| r.path == POD_PATH)
            .count()
    };
    assert_eq!(pod_patches(&server), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pod_patches(&server),
        1,
        "no retry once the UID said it is another Pod"
    );
    let stored = server.lock().unwrap().objects[POD_PATH].clone();
    assert!(stored["metadata"].get("annotations").is_none());
}
