//! The DRA driver's API-server side against a recorded API server (tower_test::mock::pair +
//! kube::Client::new): a small scripted server stores what it is sent and answers as the API
//! server does (404 for a missing object, 409 for a stale resourceVersion), and records every
//! request, so the tests assert each request: ResourceSlice publishing (created with the Node as
//! owner, replaced with the generation bumped when the devices change, nothing written when
//! nothing changed) and the claim resolver (the allocation of this driver mapped back to
//! accelerators and granted to the claim for the Pod it is reserved for; another driver's claim,
//! a uid mismatch, an unreserved claim and an unknown device refused; the live claims listed).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use accel_backend::respond::Injection;
use accel_core::inventory::{Accelerator, ManufacturerInventory};
use accel_core::labels::GroupNaming;
use accel_core::manufacturer::Manufacturer;
use accel_dra::claims::{ApiClaimResolver, ClaimLedger, ConsumedShare, ReservedPod};
use accel_dra::plugin::{AllocatedDevice, ClaimRef, ClaimResolver, ResolveError};
use accel_dra::publish::{PublishError, Published, SlicePublisher};
use accel_dra::slices;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

const NODE_PATH: &str = "/api/v1/nodes/node-1";
const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";
const SLICE_PATH: &str = "/apis/resource.k8s.io/v1/resourceslices/node-1-nvidia.gpustack.ai";
const CLAIM_PATH: &str = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/train";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/resourceclaims";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

fn status(code: StatusCode, reason: &str, message: String) -> (StatusCode, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

/// The scripted API server: objects by path, every request recorded.
#[derive(Default)]
struct Server {
    objects: BTreeMap<String, Value>,
    seen: Vec<Seen>,
    version: u64,
    /// A path whose object another writer changes right after each read of it.
    changed_after_read: Option<String>,
}

impl Server {
    fn answer(&mut self, seen: &Seen) -> (StatusCode, Value) {
        self.version += 1;
        let path = seen.path.clone();
        match seen.method.as_str() {
            "GET" if path == CLAIMS => {
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(p, _)| p.contains("/resourceclaims/"))
                    .map(|(_, o)| o.clone())
                    .collect();
                (
                    StatusCode::OK,
                    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimList",
                        "metadata": {"resourceVersion": self.version.to_string()}, "items": items}),
                )
            }
            "GET" => match self.objects.get_mut(&path) {
                Some(o) => {
                    let answer = o.clone();
                    if self.changed_after_read.as_ref() == Some(&path) {
                        o["metadata"]["resourceVersion"] = json!(format!("{}-other", self.version));
                    }
                    (StatusCode::OK, answer)
                }
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("{path} not found"),
                ),
            },
            "POST" => {
                let mut object = seen.body.clone();
                let name = object["metadata"]["name"].as_str().unwrap().to_string();
                let path = format!("{path}/{name}");
                if self.objects.contains_key(&path) {
                    return status(StatusCode::CONFLICT, "AlreadyExists", path);
                }
                object["metadata"]["resourceVersion"] = json!(self.version.to_string());
                object["metadata"]["uid"] = json!(format!("uid-{}", self.version));
                self.objects.insert(path, object.clone());
                (StatusCode::CREATED, object)
            }
            "PUT" => {
                let stored = self
                    .objects
                    .get(&path)
                    .map(|o| &o["metadata"]["resourceVersion"]);
                if stored != Some(&seen.body["metadata"]["resourceVersion"]) {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "the object has been modified".into(),
                    );
                }
                let mut object = seen.body.clone();
                object["metadata"]["resourceVersion"] = json!(self.version.to_string());
                self.objects.insert(path, object.clone());
                (StatusCode::OK, object)
            }
            "DELETE" => match self.objects.remove(&path) {
                Some(object) => (StatusCode::OK, object),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("{path} not found"),
                ),
            },
            _ => (StatusCode::METHOD_NOT_ALLOWED, json!({})),
        }
    }

    fn writes(&self) -> Vec<&Seen> {
        self.seen.iter().filter(|s| s.method != "GET").collect()
    }
}

fn client(server: Arc<Mutex<Server>>) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            let seen = Seen { method, path, body };
            let (code, answer) = {
                let mut s = server.lock().unwrap();
                let answer = s.answer(&seen);
                s.seen.push(seen);
                answer
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(service, "default")
}

fn cluster() -> Arc<Mutex<Server>> {
    let mut server = Server::default();
    server.objects.insert(
        NODE_PATH.into(),
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-1", "uid": "node-uid-1"}}),
    );
    Arc::new(Mutex::new(server))
}

fn accelerator(index: u32) -> Accelerator {
    serde_json::from_value(json!({
        "index": index, "uuid": format!("GPU-{index}"), "product": "Tesla T4",
        "memoryMiB": 15360, "healthy": true, "grantable": "whole", "source": "driver",
    }))
    .unwrap()
}

fn two_gpus() -> ManufacturerInventory {
    ManufacturerInventory {
        driver_version: Some("590.48.01".into()),
        accelerators: vec![accelerator(0), accelerator(1)],
        ..ManufacturerInventory::empty(Manufacturer::Nvidia)
    }
}

fn nvidia() -> accel_dra::DriverName {
    slices::driver_for(Manufacturer::Nvidia).unwrap()
}

fn publisher(server: &Arc<Mutex<Server>>) -> SlicePublisher {
    SlicePublisher::new(client(server.clone()), "node-1", GroupNaming::default())
}

#[tokio::test]
async fn a_new_slice_is_created_with_the_node_as_owner() {
    let server = cluster();
    let published = publisher(&server).publish(&nvidia(), &two_gpus()).await;
    assert_eq!(published.unwrap(), Published::Created { generation: 1 });
    let s = server.lock().unwrap();
    let requests: Vec<(&str, &str)> = s
        .seen
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        requests,
        [("GET", SLICE_PATH), ("GET", NODE_PATH), ("POST", SLICES)]
    );
    let body = &s.seen[2].body;
    assert_eq!(body["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(body["kind"], "ResourceSlice");
    assert_eq!(body["metadata"]["name"], "node-1-nvidia.gpustack.ai");
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-uid-1"}])
    );
    let expected =
        slices::slice_spec(&nvidia(), "node-1", &two_gpus(), GroupNaming::default(), 1).unwrap();
    assert_eq!(body["spec"], serde_json::to_value(&expected).unwrap());
    assert_eq!(
        body["spec"]["pool"],
        json!({"name": "node-1", "generation": 1, "resourceSliceCount": 1})
    );
    assert_eq!(body["spec"]["nodeName"], "node-1");
    assert_eq!(body["spec"]["driver"], "nvidia.gpustack.ai");
}

#[tokio::test]
async fn unchanged_devices_write_nothing() {
    let server = cluster();
    let publisher = publisher(&server);
    publisher.publish(&nvidia(), &two_gpus()).await.unwrap();
    let writes = server.lock().unwrap().writes().len();
    let again = publisher.publish(&nvidia(), &two_gpus()).await.unwrap();
    assert_eq!(again, Published::Unchanged { generation: 1 });
    let s = server.lock().unwrap();
    assert_eq!(s.writes().len(), writes, "{:?}", s.seen.last());
    assert_eq!(s.seen.last().unwrap().method, "GET");
}

#[tokio::test]
async fn changed_devices_bump_the_pool_generation() {
    let server = cluster();
    let publisher = publisher(&server);
    publisher.publish(&nvidia(), &two_gpus()).await.unwrap();
    let version = server.lock().unwrap().objects[SLICE_PATH]["metadata"]["resourceVersion"].clone();

    let mut sick = two_gpus();
    sick.accelerators[1].healthy = false;
    let published = publisher.publish(&nvidia(), &sick).await.unwrap();
    assert_eq!(published, Published::Updated { generation: 2 });
    {
        let s = server.lock().unwrap();
        let put = s.seen.last().unwrap();
        assert_eq!(
            (put.method.as_str(), put.path.as_str()),
            ("PUT", SLICE_PATH)
        );
        assert_eq!(put.body["metadata"]["resourceVersion"], version);
        assert_eq!(put.body["spec"]["pool"]["generation"], 2);
        // gpu-1 comes first (highest index first).
        assert_eq!(put.body["spec"]["devices"][0]["name"], "gpu-1");
        assert_eq!(
            put.body["spec"]["devices"][0]["attributes"]["gpustack.ai/healthy"],
            json!({"bool": false})
        );
        // The owner set at creation stays.
        assert_eq!(
            put.body["metadata"]["ownerReferences"][0]["uid"],
            "node-uid-1"
        );
    }
    let again = publisher.publish(&nvidia(), &sick).await.unwrap();
    assert_eq!(again, Published::Unchanged { generation: 2 });

    let mut one = sick.clone();
    one.accelerators.pop();
    let published = publisher.publish(&nvidia(), &one).await.unwrap();
    assert_eq!(published, Published::Updated { generation: 3 });
    let s = server.lock().unwrap();
    let stored = &s.objects[SLICE_PATH]["spec"];
    assert_eq!(stored["pool"]["generation"], 3);
    assert_eq!(stored["devices"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_slice_changed_since_it_was_read_is_not_overwritten() {
    let server = cluster();
    let publisher = publisher(&server);
    publisher.publish(&nvidia(), &two_gpus()).await.unwrap();
    server.lock().unwrap().changed_after_read = Some(SLICE_PATH.into());
    let mut one = two_gpus();
    one.accelerators.pop();
    let e = publisher.publish(&nvidia(), &one).await.unwrap_err();
    assert!(matches!(e, PublishError::Write { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "cannot write ResourceSlice node-1-nvidia.gpustack.ai"
    );
    let s = server.lock().unwrap();
    assert_eq!(s.objects[SLICE_PATH]["spec"]["pool"]["generation"], 1);
    assert_eq!(
        s.objects[SLICE_PATH]["spec"]["devices"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn a_node_that_cannot_be_read_is_named() {
    let server = Arc::new(Mutex::new(Server::default()));
    let e = publisher(&server)
        .publish(&nvidia(), &two_gpus())
        .await
        .unwrap_err();
    assert!(matches!(e, PublishError::Node { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "cannot read Node node-1, the owner of its ResourceSlices"
    );
    assert!(server.lock().unwrap().writes().is_empty());
}

/// The ledger the test hands the resolver: records what it was asked to grant and release,
/// and names the accelerators in one variable.
#[derive(Default)]
struct Recording {
    asked: Mutex<Vec<Vec<u32>>>,
    granted: Mutex<Vec<(String, ReservedPod, Vec<String>)>>,
    released: Mutex<Vec<String>>,
    shares: Mutex<Vec<Option<ConsumedShare>>>,
    partitions: Mutex<Vec<Option<slices::PartitionRef>>>,
}

/// The resolver owns its ledger; the test keeps a handle on what it recorded.
struct Ledger(Arc<Recording>);

impl ClaimLedger for Ledger {
    async fn grant(
        &self,
        claim: &ClaimRef,
        pod: &ReservedPod,
        devices: &[String],
        indexes: &[u32],
        share: Option<&ConsumedShare>,
        partition: Option<&slices::PartitionRef>,
    ) -> Result<Injection, String> {
        self.0.shares.lock().unwrap().push(share.cloned());
        self.0.partitions.lock().unwrap().push(partition.cloned());
        self.0.asked.lock().unwrap().push(indexes.to_vec());
        self.0
            .granted
            .lock()
            .unwrap()
            .push((claim.uid.clone(), pod.clone(), devices.to_vec()));
        let names: Vec<String> = indexes.iter().map(|i| format!("GPU-{i}")).collect();
        Ok(Injection {
            envs: BTreeMap::from([("NVIDIA_VISIBLE_DEVICES".into(), names.join(","))]),
            ..Injection::default()
        })
    }

    async fn release(&self, claim_uid: &str) -> bool {
        self.0.released.lock().unwrap().push(claim_uid.to_string());
        true
    }
}

fn claim_object(uid: &str, results: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpus"}]}},
        "status": {"allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-7"}]}})
}

fn result(driver: &str, pool: &str, device: &str) -> Value {
    json!({"request": "gpus", "driver": driver, "pool": pool, "device": device})
}

fn train() -> ClaimRef {
    ClaimRef {
        namespace: "ml".into(),
        name: "train".into(),
        uid: "claim-uid-1".into(),
    }
}

fn resolver(server: &Arc<Mutex<Server>>, recording: &Arc<Recording>) -> ApiClaimResolver<Ledger> {
    let resolver = ApiClaimResolver::new(
        client(server.clone()),
        nvidia(),
        "node-1",
        Ledger(recording.clone()),
    );
    resolver.set_published_section(&two_gpus());
    resolver
}

async fn resolve_with(
    results: Value,
    uid: &str,
) -> (
    Result<accel_dra::plugin::ResolvedClaim, ResolveError>,
    Arc<Recording>,
) {
    let server = cluster();
    server
        .lock()
        .unwrap()
        .objects
        .insert(CLAIM_PATH.into(), claim_object(uid, results));
    let recording = Arc::new(Recording::default());
    let resolved = resolver(&server, &recording).resolve(&train()).await;
    (resolved, recording)
}

#[tokio::test]
async fn a_claim_resolves_to_its_devices_of_this_driver() {
    let results = json!([
        result("nvidia.gpustack.ai", "node-1", "gpu-1"),
        result("nic.example.com", "node-1", "eth0"),
        result("nvidia.gpustack.ai", "node-1", "gpu-0"),
    ]);
    let (resolved, recording) = resolve_with(results, "claim-uid-1").await;
    let resolved = resolved.unwrap();
    let device = |name: &str| AllocatedDevice {
        request_names: vec!["gpus".into()],
        pool_name: "node-1".into(),
        device_name: name.into(),
    };
    assert_eq!(resolved.devices, [device("gpu-1"), device("gpu-0")]);
    assert_eq!(*recording.asked.lock().unwrap(), [vec![0, 1]]);
    // Granted to the claim for the Pod it is reserved for, by the allocation's device names.
    assert_eq!(
        *recording.granted.lock().unwrap(),
        [(
            "claim-uid-1".to_string(),
            ReservedPod {
                namespace: "ml".into(),
                name: "trainer-0".into(),
                uid: "pod-uid-7".into()
            },
            vec!["gpu-1".to_string(), "gpu-0".to_string()]
        )]
    );
    assert_eq!(
        resolved.injection.envs["NVIDIA_VISIBLE_DEVICES"],
        "GPU-0,GPU-1"
    );
}

#[tokio::test]
async fn a_share_of_a_device_is_read_from_its_consumed_capacity() {
    let mut share = result("nvidia.gpustack.ai", "node-1", "gpu-1");
    share["shareID"] = json!("7f3e0b52-share");
    share["consumedCapacity"] =
        json!({"gpustack.ai/memory": "20Gi", "gpustack.ai/coresPercentage": "30"});
    let (resolved, recording) = resolve_with(json!([share]), "claim-uid-1").await;
    resolved.unwrap();
    assert_eq!(
        *recording.shares.lock().unwrap(),
        [Some(ConsumedShare {
            share_id: Some("7f3e0b52-share".into()),
            memory_bytes: Some(20 << 30),
            cores_percentage: Some(30),
        })]
    );
    // A share that consumed no compute carries no cap.
    let mut share = result("nvidia.gpustack.ai", "node-1", "gpu-1");
    share["consumedCapacity"] =
        json!({"gpustack.ai/memory": "1Gi", "gpustack.ai/coresPercentage": "0"});
    let (resolved, recording) = resolve_with(json!([share]), "claim-uid-1").await;
    resolved.unwrap();
    assert_eq!(
        recording.shares.lock().unwrap()[0]
            .as_ref()
            .unwrap()
            .cores_percentage,
        None
    );
    // Whole devices consume nothing.
    let (resolved, recording) = resolve_with(
        json!([result("nvidia.gpustack.ai", "node-1", "gpu-0")]),
        "claim-uid-1",
    )
    .await;
    resolved.unwrap();
    assert_eq!(*recording.shares.lock().unwrap(), [None]);
}

#[tokio::test]
async fn shares_of_several_devices_or_an_unreadable_share_are_refused() {
    let mut a = result("nvidia.gpustack.ai", "node-1", "gpu-0");
    a["consumedCapacity"] = json!({"gpustack.ai/memory": "1Gi"});
    let b = result("nvidia.gpustack.ai", "node-1", "gpu-1");
    let (resolved, recording) = resolve_with(json!([a, b]), "claim-uid-1").await;
    assert_eq!(
        resolved.unwrap_err().to_string(),
        "claim ml/train consumes capacity of several devices; a slice claim asks one device"
    );
    assert!(recording.granted.lock().unwrap().is_empty());
    let mut bad = result("nvidia.gpustack.ai", "node-1", "gpu-0");
    bad["consumedCapacity"] = json!({"gpustack.ai/memory": "1.5"});
    let (resolved, _) = resolve_with(json!([bad]), "claim-uid-1").await;
    assert_eq!(
        resolved.unwrap_err().to_string(),
        "claim ml/train: consumed capacity gpustack.ai/memory=\"1.5\" must be a whole number"
    );
}

#[tokio::test]
async fn a_claim_reserved_for_no_pod_is_refused_before_anything_is_granted() {
    let server = cluster();
    let mut object = claim_object(
        "claim-uid-1",
        json!([result("nvidia.gpustack.ai", "node-1", "gpu-0")]),
    );
    object["status"]["reservedFor"] = json!([]);
    server
        .lock()
        .unwrap()
        .objects
        .insert(CLAIM_PATH.into(), object);
    let recording = Arc::new(Recording::default());
    let e = resolver(&server, &recording)
        .resolve(&train())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "claim ml/train is reserved for no Pod");
    assert!(recording.granted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn live_claims_are_those_allocated_here_and_reserved() {
    let server = cluster();
    let here = json!([result("nvidia.gpustack.ai", "node-1", "gpu-0")]);
    let mut unreserved = claim_object("unreserved", here.clone());
    unreserved["status"]["reservedFor"] = json!([]);
    let mut unallocated = claim_object("unallocated", json!([]));
    unallocated["status"]
        .as_object_mut()
        .unwrap()
        .remove("allocation");
    let claims = [
        ("live", claim_object("live", here.clone())),
        ("unreserved", unreserved),
        ("unallocated", unallocated),
        (
            "elsewhere",
            claim_object(
                "elsewhere",
                json!([result("nvidia.gpustack.ai", "node-2", "gpu-0")]),
            ),
        ),
        (
            "other-driver",
            claim_object(
                "other-driver",
                json!([result("amd.gpustack.ai", "node-1", "gpu-0")]),
            ),
        ),
    ];
    for (name, object) in claims {
        server.lock().unwrap().objects.insert(
            format!("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/{name}"),
            object,
        );
    }
    let live = accel_dra::claims::live_claims(&client(server.clone()), &nvidia(), "node-1")
        .await
        .unwrap();
    assert_eq!(live, ["live".to_string()].into());
}

#[tokio::test]
async fn another_drivers_claim_is_refused() {
    let results = json!([result("gpu.example.com", "node-1", "gpu-0")]);
    let (resolved, recording) = resolve_with(results, "claim-uid-1").await;
    let e = resolved.unwrap_err();
    assert_eq!(
        e.to_string(),
        "claim ml/train is allocated to gpu.example.com, none of it to nvidia.gpustack.ai"
    );
    assert!(recording.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_claim_made_again_under_the_same_name_is_refused() {
    let results = json!([result("nvidia.gpustack.ai", "node-1", "gpu-0")]);
    let (resolved, _) = resolve_with(results, "claim-uid-2").await;
    assert_eq!(
        resolved.unwrap_err().to_string(),
        "ResourceClaim ml/train has uid claim-uid-2, not the claim-uid-1 the kubelet asked to prepare"
    );
}

#[tokio::test]
async fn a_device_this_node_does_not_publish_is_refused() {
    for (pool, device) in [
        ("node-1", "gpu-7"),
        ("node-2", "gpu-0"),
        ("node-1", "npu-0"),
    ] {
        let results = json!([result("nvidia.gpustack.ai", pool, device)]);
        let (resolved, recording) = resolve_with(results, "claim-uid-1").await;
        assert_eq!(
            resolved.unwrap_err().to_string(),
            format!(
                "claim ml/train holds device {pool}/{device} of this driver, which node node-1 does not publish"
            )
        );
        assert!(recording.asked.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn an_unallocated_or_missing_claim_is_refused() {
    let (resolved, _) = resolve_with(json!([]), "claim-uid-1").await;
    assert!(
        matches!(resolved, Err(ResolveError::NotAllocated { .. })),
        "{resolved:?}"
    );
    let server = cluster();
    let recording = Arc::new(Recording::default());
    let e = resolver(&server, &recording)
        .resolve(&train())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "cannot read ResourceClaim ml/train");
    assert!(matches!(e, ResolveError::Read { .. }));
}

#[tokio::test]
async fn the_published_section_names_the_devices_a_claim_may_hold() {
    let server = cluster();
    server.lock().unwrap().objects.insert(
        CLAIM_PATH.into(),
        claim_object(
            "claim-uid-1",
            json!([result("nvidia.gpustack.ai", "node-1", "gpu-1")]),
        ),
    );
    let recording = Arc::new(Recording::default());
    let resolver = resolver(&server, &recording);
    // Card 1 went into MIG mode: it is no whole device, so the section publishes gpu-0 alone.
    let mut section = two_gpus();
    section.accelerators[1].grantable = accel_core::inventory::Grantable::PartitionsOnly;
    resolver.set_published_section(&section);
    assert_eq!(
        resolver.resolve(&train()).await.unwrap_err().to_string(),
        "claim ml/train holds device node-1/gpu-1 of this driver, which node node-1 does not publish"
    );
    resolver.set_published_section(&two_gpus());
    resolver.resolve(&train()).await.unwrap();
    assert_eq!(*recording.asked.lock().unwrap(), [vec![1]]);
}

/// Card 1 in MIG mode, offering 3g.40gb at memory slices 0 and 4.
fn one_partitioned(cards: u32) -> ManufacturerInventory {
    let mut section = two_gpus();
    section.accelerators = (0..cards).map(accelerator).collect();
    for a in section.accelerators.iter_mut().skip(1) {
        a.grantable = accel_core::inventory::Grantable::PartitionsOnly;
        a.partition_profiles = serde_json::from_value(json!([
            {"name": "3g.40gb", "id": 9, "memoryMiB": 40448,
             "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]},
            {"name": "1g.10gb", "id": 19, "memoryMiB": 9984,
             "placements": (0..7).map(|s| json!({"start": s, "size": 1})).collect::<Vec<_>>()},
        ]))
        .unwrap();
    }
    section
}

#[tokio::test]
async fn a_pool_of_several_slices_is_written_together_and_shrinks_by_deleting() {
    let server = cluster();
    let publisher = publisher(&server);
    // Card 0 whole, cards 1–9 partitioned (9 placements each): 82 devices (two slices: 64 a
    // slice where counters are consumed), 9 counter sets (two slices: 8 a slice).
    let big = one_partitioned(10);
    let expected = slices::pool_specs(
        &nvidia(),
        "node-1",
        &big,
        GroupNaming::default(),
        1,
        slices::Sharing::Whole,
    )
    .unwrap();
    assert_eq!(expected.len(), 4);
    let published = publisher.publish(&nvidia(), &big).await.unwrap();
    assert_eq!(published, Published::Created { generation: 1 });
    let name = |k: usize| match k {
        0 => SLICE_PATH.to_string(),
        k => format!("{SLICE_PATH}-{k}"),
    };
    {
        let s = server.lock().unwrap();
        let posts: Vec<&str> = s
            .seen
            .iter()
            .filter(|r| r.method == "POST")
            .map(|r| r.body["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            posts,
            [
                "node-1-nvidia.gpustack.ai",
                "node-1-nvidia.gpustack.ai-1",
                "node-1-nvidia.gpustack.ai-2",
                "node-1-nvidia.gpustack.ai-3"
            ]
        );
        for (k, spec) in expected.iter().enumerate() {
            let stored = &s.objects[&name(k)];
            assert_eq!(
                stored["spec"],
                serde_json::to_value(spec).unwrap(),
                "slice {k}"
            );
            assert_eq!(
                stored["metadata"]["ownerReferences"][0]["uid"],
                "node-uid-1"
            );
        }
        // The counter sets are in the last two slices, alone.
        for (k, sets) in [(2, 8), (3, 1)] {
            let spec = &s.objects[&name(k)]["spec"];
            assert!(spec.get("devices").is_none());
            assert_eq!(spec["sharedCounters"].as_array().unwrap().len(), sets);
        }
    }
    let writes = server.lock().unwrap().writes().len();
    let again = publisher.publish(&nvidia(), &big).await.unwrap();
    assert_eq!(again, Published::Unchanged { generation: 1 });
    assert_eq!(server.lock().unwrap().writes().len(), writes);

    // Down to two cards: one slice of devices and one of counters, both at generation 2;
    // the two slices the pool no longer needs are deleted.
    let small = one_partitioned(2);
    let published = publisher.publish(&nvidia(), &small).await.unwrap();
    assert_eq!(published, Published::Updated { generation: 2 });
    let s = server.lock().unwrap();
    let deleted: Vec<&str> = s
        .seen
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(deleted, [name(2), name(3)]);
    for k in 0..2 {
        let pool = &s.objects[&name(k)]["spec"]["pool"];
        assert_eq!(
            *pool,
            json!({"name": "node-1", "generation": 2, "resourceSliceCount": 2})
        );
    }
    assert!(s.objects[&name(1)]["spec"]["sharedCounters"].is_array());
}

#[tokio::test]
async fn a_partition_device_resolves_to_its_placement_and_is_granted_alone() {
    let server = cluster();
    server.lock().unwrap().objects.insert(
        CLAIM_PATH.into(),
        claim_object(
            "claim-uid-1",
            json!([result("nvidia.gpustack.ai", "node-1", "gpu-1-3g-40gb-4")]),
        ),
    );
    let recording = Arc::new(Recording::default());
    let resolver = resolver(&server, &recording);
    // Not published yet (the resolver was told the whole cards only): refused.
    assert!(matches!(
        resolver.resolve(&train()).await.unwrap_err(),
        ResolveError::UnknownDevice { .. }
    ));
    resolver.set_published_section(&one_partitioned(2));
    resolver.resolve(&train()).await.unwrap();
    assert_eq!(*recording.asked.lock().unwrap(), [vec![1]]);
    assert_eq!(
        *recording.partitions.lock().unwrap(),
        [Some(slices::PartitionRef {
            index: 1,
            profile: "3g.40gb".into(),
            start: 4,
            size: 4
        })]
    );
    // A partition and anything else of this driver in one claim: refused before any grant.
    server.lock().unwrap().objects.insert(
        CLAIM_PATH.into(),
        claim_object(
            "claim-uid-1",
            json!([
                result("nvidia.gpustack.ai", "node-1", "gpu-1-3g-40gb-4"),
                result("nvidia.gpustack.ai", "node-1", "gpu-0"),
            ]),
        ),
    );
    assert_eq!(
        resolver.resolve(&train()).await.unwrap_err().to_string(),
        "claim ml/train holds partition gpu-1-3g-40gb-4 and other devices of this driver; a claim asks one partition alone"
    );
    assert_eq!(recording.asked.lock().unwrap().len(), 1);
}
