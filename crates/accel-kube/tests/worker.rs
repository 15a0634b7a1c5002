//! The worker's controllers against a recorded API server (tower_test::mock::pair +
//! kube::Client::new): each request they make, checked for method, path, query, content type and
//! body — the NodeFeatureRule apply, the label patches on Devices, the uncached Node read before a
//! Devices delete (and no delete while the Node exists) — plus the loop on the in-memory cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_kube::nfr;
use accel_kube::worker::{
    self, CPU_KEY_LABEL, Call, KubeCluster, LoopConfig, MANAGED_LABEL, MemoryCluster, NodeMeta,
    Outcome,
};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

type Mock = Handle<Request<Body>, Response<Body>>;

fn mock() -> (KubeCluster, Mock) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (
        KubeCluster::new(kube::Client::new(service, "default")),
        handle,
    )
}

async fn next(handle: &mut Mock, what: &str) -> (Request<Body>, SendResponse<Response<Body>>) {
    tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request: expected {what}"))
        .unwrap_or_else(|| panic!("the client went away: expected {what}"))
}

async fn no_more(handle: &mut Mock) {
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await
    {
        panic!("unexpected request {} {}", request.method(), request.uri());
    }
}

async fn body(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

fn content_type(request: &Request<Body>) -> String {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

fn not_found(kind: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound",
        "code": 404, "message": format!("{kind} \"{name}\" not found"),
        "details": {"name": name, "kind": kind}, "metadata": {}})
}

fn devices_meta(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "resourceVersion": "7", "labels": labels}})
}

fn epyc_node() -> NodeMeta {
    NodeMeta {
        labels: BTreeMap::from([
            (MANAGED_LABEL.to_string(), "true".to_string()),
            (
                "feature.node.kubernetes.io/cpu-model.vendor_id".to_string(),
                "AMD".to_string(),
            ),
        ]),
        annotations: BTreeMap::from([(
            "feature.gpustack.ai/cpu-name".to_string(),
            "AMD EPYC 7763 64-Core Processor".to_string(),
        )]),
    }
}

#[tokio::test]
async fn the_cpu_info_rule_is_applied_server_side() {
    let (api, mut handle) = mock();
    let call = tokio::spawn(async move {
        worker::apply_rule_until_done(&api, Duration::from_millis(10)).await;
    });

    // A first failure is retried, then the same apply lands.
    for attempt in 0..2 {
        let (request, send) = next(&mut handle, "the NodeFeatureRule apply").await;
        assert_eq!(request.method(), http::Method::PATCH);
        assert_eq!(
            request.uri().path(),
            "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info"
        );
        let query = request.uri().query().unwrap_or("").to_string();
        assert!(
            query.contains("fieldManager=gpustack-device-manager-worker"),
            "{query}"
        );
        assert!(query.contains("force=true"), "{query}");
        assert_eq!(content_type(&request), "application/apply-patch+yaml");
        let sent = body(request).await;
        assert_eq!(sent, nfr::cpu_info_rule());
        assert_eq!(sent["kind"], "NodeFeatureRule");
        if attempt == 0 {
            respond(
                send,
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                    "code": 500, "message": "etcd is sad", "metadata": {}}),
            );
        } else {
            respond(send, StatusCode::OK, &sent);
        }
    }
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the apply never finished")
        .unwrap();
    no_more(&mut handle).await;
}

#[tokio::test]
async fn the_managed_mark_and_cpu_key_are_merge_patched_onto_devices() {
    let (api, mut handle) = mock();
    let node = epyc_node();
    let call = tokio::spawn(async move {
        worker::reconcile(&api, "gpu-1", &BTreeMap::new(), Some(&node)).await
    });
    let (request, send) = next(&mut handle, "the Devices label patch").await;
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(request.uri().path(), "/apis/gpustack.ai/v1/devices/gpu-1");
    assert_eq!(content_type(&request), "application/merge-patch+json");
    let sent = body(request).await;
    assert_eq!(
        sent,
        json!({"metadata": {"labels": {
            "feature.gpustack.ai/cpu-key": "amd-epyc-7763",
            "gpustack.ai/managed": "true"}}}),
        "metadata only: the patch never touches spec or status"
    );
    respond(
        send,
        StatusCode::OK,
        &devices_meta("gpu-1", sent["metadata"]["labels"].clone()),
    );
    let outcome = call.await.unwrap().unwrap();
    assert!(matches!(outcome, Outcome::Patched(_)), "{outcome:?}");
    no_more(&mut handle).await;
}

#[tokio::test]
async fn a_mark_the_node_dropped_is_removed_and_an_unchanged_devices_is_left_alone() {
    let (api, mut handle) = mock();
    let mut node = epyc_node();
    node.labels.remove(MANAGED_LABEL);
    let current = BTreeMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (CPU_KEY_LABEL.to_string(), "amd-epyc-7763".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
    ]);
    let (api2, node2, current2) = (api.clone(), node.clone(), current.clone());
    let call =
        tokio::spawn(
            async move { worker::reconcile(&api2, "gpu-1", &current2, Some(&node2)).await },
        );
    let (request, send) = next(&mut handle, "the mark's removal").await;
    assert_eq!(request.method(), http::Method::PATCH);
    let sent = body(request).await;
    assert_eq!(
        sent,
        json!({"metadata": {"labels": {"gpustack.ai/managed": null}}}),
        "only what differs, and null removes"
    );
    respond(send, StatusCode::OK, &devices_meta("gpu-1", json!({})));
    call.await.unwrap().unwrap();

    // Already in line: no request at all.
    let mut synced = current;
    synced.remove(MANAGED_LABEL);
    let outcome = worker::reconcile(&api, "gpu-1", &synced, Some(&node))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unchanged);
    no_more(&mut handle).await;
}

#[tokio::test]
async fn a_devices_whose_node_is_gone_is_deleted_after_an_uncached_read() {
    let (api, mut handle) = mock();
    let call =
        tokio::spawn(
            async move { worker::reconcile(&api, "gone-1", &BTreeMap::new(), None).await },
        );
    let (request, send) = next(&mut handle, "the uncached Node read").await;
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/nodes/gone-1");
    let query = request.uri().query().unwrap_or("");
    assert!(
        !query.contains("watch"),
        "a direct read, not a watch: {query}"
    );
    assert!(
        !query.contains("resourceVersion=0"),
        "resourceVersion=0 would let the API server answer from its cache: {query}"
    );
    respond(send, StatusCode::NOT_FOUND, &not_found("nodes", "gone-1"));

    let (request, send) = next(&mut handle, "the Devices delete").await;
    assert_eq!(request.method(), http::Method::DELETE);
    assert_eq!(request.uri().path(), "/apis/gpustack.ai/v1/devices/gone-1");
    respond(
        send,
        StatusCode::OK,
        &json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {},
            "details": {"name": "gone-1", "group": "gpustack.ai", "kind": "devices"}}),
    );
    assert_eq!(call.await.unwrap().unwrap(), Outcome::Deleted);
    no_more(&mut handle).await;
}

#[tokio::test]
async fn a_node_the_cache_has_not_seen_yet_is_not_deleted() {
    let (api, mut handle) = mock();
    let call =
        tokio::spawn(async move { worker::reconcile(&api, "new-1", &BTreeMap::new(), None).await });
    let (request, send) = next(&mut handle, "the uncached Node read").await;
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/nodes/new-1");
    respond(
        send,
        StatusCode::OK,
        &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "new-1", "resourceVersion": "3",
                "labels": {"gpustack.ai/managed": "false"}}}),
    );
    let (request, send) = next(&mut handle, "the label patch, not a delete").await;
    assert_eq!(
        request.method(),
        http::Method::PATCH,
        "the Node exists: no delete"
    );
    assert_eq!(request.uri().path(), "/apis/gpustack.ai/v1/devices/new-1");
    let sent = body(request).await;
    assert_eq!(
        sent,
        json!({"metadata": {"labels": {
            "feature.gpustack.ai/cpu-key": "generic",
            "gpustack.ai/managed": "false"}}})
    );
    respond(send, StatusCode::OK, &devices_meta("new-1", json!({})));
    assert!(matches!(call.await.unwrap().unwrap(), Outcome::Patched(_)));
    no_more(&mut handle).await;
}

#[tokio::test]
async fn a_devices_already_gone_is_not_an_error() {
    let (api, mut handle) = mock();
    let call =
        tokio::spawn(
            async move { worker::reconcile(&api, "gone-2", &BTreeMap::new(), None).await },
        );
    let (_, send) = next(&mut handle, "the uncached Node read").await;
    respond(send, StatusCode::NOT_FOUND, &not_found("nodes", "gone-2"));
    let (request, send) = next(&mut handle, "the Devices delete").await;
    assert_eq!(request.method(), http::Method::DELETE);
    respond(
        send,
        StatusCode::NOT_FOUND,
        &not_found("devices.gpustack.ai", "gone-2"),
    );
    assert_eq!(call.await.unwrap().unwrap(), Outcome::Deleted);
}

fn node_with(managed: Option<&str>) -> NodeMeta {
    let mut node = epyc_node();
    match managed {
        Some(v) => node.labels.insert(MANAGED_LABEL.to_string(), v.to_string()),
        None => node.labels.remove(MANAGED_LABEL),
    };
    node
}

#[tokio::test(start_paused = true)]
async fn the_loop_syncs_marks_deletes_orphans_and_retries() {
    let cluster = MemoryCluster::default();
    cluster.put_node("gpu-1", node_with(Some("true")), true);
    cluster.put_devices("gpu-1", BTreeMap::new());
    // A Devices whose Node the cache has not seen yet, and one whose Node is gone.
    cluster.put_node("gpu-2", node_with(None), false);
    cluster.put_devices("gpu-2", BTreeMap::new());
    cluster.put_devices("gone", BTreeMap::new());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = LoopConfig {
        resync: Duration::from_secs(30),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
    };
    let (api, caches) = (cluster.clone(), cluster.clone());
    let run = tokio::spawn(async move { worker::run_loop(&api, &caches, rx, config).await });
    tokio::time::sleep(Duration::from_millis(10)).await;

    assert_eq!(
        cluster.devices("gpu-1"),
        Some(BTreeMap::from([
            (CPU_KEY_LABEL.to_string(), "amd-epyc-7763".to_string()),
            (MANAGED_LABEL.to_string(), "true".to_string()),
        ]))
    );
    assert_eq!(
        cluster.devices("gpu-2"),
        Some(BTreeMap::from([(
            CPU_KEY_LABEL.to_string(),
            "amd-epyc-7763".to_string()
        )])),
        "its Node exists (read uncached): kept, and no mark to copy"
    );
    assert_eq!(cluster.devices("gone"), None, "its Node is gone: deleted");
    let calls = cluster.calls();
    let get = calls
        .iter()
        .position(|c| *c == Call::GetNode("gone".into()));
    let delete = calls
        .iter()
        .position(|c| *c == Call::DeleteDevices("gone".into()));
    assert!(
        get.is_some() && get < delete,
        "read before delete: {calls:?}"
    );
    assert!(
        !calls.contains(&Call::DeleteDevices("gpu-2".into())),
        "{calls:?}"
    );
    assert!(
        !calls.contains(&Call::GetNode("gpu-1".into())),
        "cached: no read {calls:?}"
    );

    // The mark changes on the Node: the trigger brings it over.
    cluster.put_node("gpu-1", node_with(Some("false")), true);
    tx.send("gpu-1".to_string()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        cluster
            .devices("gpu-1")
            .and_then(|l| l.get(MANAGED_LABEL).cloned()),
        Some("false".to_string())
    );

    // The API server fails for a while: the change lands once it is back, by retry alone.
    cluster.set_unreachable(true);
    cluster.put_node("gpu-1", node_with(None), true);
    tx.send("gpu-1".to_string()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        cluster
            .devices("gpu-1")
            .is_some_and(|l| l.contains_key(MANAGED_LABEL))
    );
    cluster.set_unreachable(false);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cluster
            .devices("gpu-1")
            .is_some_and(|l| !l.contains_key(MANAGED_LABEL)),
        "retried after the outage"
    );

    // A Node deleted while no event came: the resync finds it.
    cluster.remove_node("gpu-2");
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(cluster.devices("gpu-2"), None);

    drop(tx);
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("the loop ends when its triggers close")
        .unwrap();
}

/// The whole controller as the worker runs it, against the recorded API server: it applies the
/// rule, lists Node and Devices metadata, and from those listings alone deletes the orphan (after
/// its uncached read) and patches the other's labels. Watches are left hanging, as a quiet
/// cluster's would be.
#[tokio::test]
async fn the_controllers_from_their_watch_caches() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let run = tokio::spawn(worker::run(client, LoopConfig::default()));
    let mut hanging = Vec::new();
    let (mut applied, mut deleted, mut patched, mut read_gone) = (false, false, None, false);
    while !(applied && deleted && patched.is_some()) {
        let (request, send) = next(&mut handle, "the controllers' next request").await;
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        match (method.as_str(), path.as_str()) {
            (_, _) if query.contains("watch=true") => hanging.push(send),
            ("PATCH", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info") => {
                let sent = body(request).await;
                respond(send, StatusCode::OK, &sent);
                applied = true;
            }
            ("GET", "/api/v1/nodes") => respond(
                send,
                StatusCode::OK,
                &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                    "metadata": {"resourceVersion": "10"},
                    "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                        "metadata": {"name": "gpu-1", "resourceVersion": "5",
                            "labels": {"gpustack.ai/managed": "true",
                                "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
                                "feature.node.kubernetes.io/cpu-model.family": "6",
                                "feature.node.kubernetes.io/cpu-model.id": "143"}}}]}),
            ),
            ("GET", "/apis/gpustack.ai/v1/devices") => respond(
                send,
                StatusCode::OK,
                &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                    "metadata": {"resourceVersion": "20"},
                    "items": [
                        {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                            "metadata": {"name": "gpu-1", "resourceVersion": "6"}},
                        {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                            "metadata": {"name": "gone-1", "resourceVersion": "7"}}]}),
            ),
            ("GET", "/api/v1/nodes/gone-1") => {
                read_gone = true;
                respond(send, StatusCode::NOT_FOUND, &not_found("nodes", "gone-1"));
            }
            ("DELETE", "/apis/gpustack.ai/v1/devices/gone-1") => {
                assert!(read_gone, "deleted without the uncached read");
                respond(
                    send,
                    StatusCode::OK,
                    &json!({"apiVersion": "v1", "kind": "Status", "status": "Success",
                        "metadata": {}}),
                );
                deleted = true;
            }
            ("PATCH", "/apis/gpustack.ai/v1/devices/gpu-1") => {
                let sent = body(request).await;
                respond(
                    send,
                    StatusCode::OK,
                    &devices_meta("gpu-1", sent["metadata"]["labels"].clone()),
                );
                patched = Some(sent);
            }
            _ => panic!("unexpected request {method} {path}?{query}"),
        }
    }
    assert_eq!(
        patched,
        Some(json!({"metadata": {"labels": {
            "feature.gpustack.ai/cpu-key": "intel-6-143",
            "gpustack.ai/managed": "true"}}}))
    );
    run.abort();
}
