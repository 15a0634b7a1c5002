//! The pool cache against a recorded API server (tower_test::mock::pair + kube::Client::new): it
//! lists exactly the five resources it is allowed to read, syncs, and answers a queue's pool from
//! memory.

use std::time::Duration;

use accel_kube::PoolCache;
use accel_webhook::PoolSource;
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "100"}, "items": items})
}

/// The list each watcher asks for first, as the API server would answer it.
fn answer(path: &str) -> Option<Value> {
    let kueue = "kueue.x-k8s.io/v1beta1";
    Some(match path {
        "/apis/kueue.x-k8s.io/v1beta1/localqueues" => list(
            kueue,
            "LocalQueueList",
            vec![json!({
            "apiVersion": kueue, "kind": "LocalQueue",
            "metadata": {"name": "h100", "namespace": "team-a", "resourceVersion": "10"},
            "spec": {"clusterQueue": "cq-h100"}})],
        ),
        "/apis/kueue.x-k8s.io/v1beta1/clusterqueues" => list(
            kueue,
            "ClusterQueueList",
            vec![json!({
            "apiVersion": kueue, "kind": "ClusterQueue", "metadata": {"name": "cq-h100", "resourceVersion": "11"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/gpu.shared"],
                "flavors": [{"name": "rf-h100-linux-amd64", "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": 8}, {"name": "nvidia.com/gpu.shared", "nominalQuota": 80}]}]}]}})],
        ),
        "/apis/kueue.x-k8s.io/v1beta1/resourceflavors" => list(
            kueue,
            "ResourceFlavorList",
            vec![json!({
            "apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": "rf-h100-linux-amd64", "resourceVersion": "12"},
            "spec": {"nodeLabels": {"acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3": "true",
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}})],
        ),
        "/apis/gpustack.ai/v1/devices" => list(
            "gpustack.ai/v1",
            "DevicesList",
            vec![json!({
            "apiVersion": "gpustack.ai/v1", "kind": "Devices",
            "metadata": {"name": "node-1", "resourceVersion": "13", "labels": {
                "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3": "true", "kubernetes.io/os": "linux"}},
            "spec": {"groups": [{"manufacturer": "nvidia", "key": "nvidia-h100-80gb-hbm3", "memoryMiB": 81559,
                "accelerators": [{"index": 0, "uuid": "GPU-1", "memoryMiB": 81559, "healthy": true,
                "grantable": "partitionsOnly",
                "partitionProfiles": {"1g.10gb": {"memoryMiB": 9984}, "3g.40gb": {"memoryMiB": 40320}}}]}]}})],
        ),
        "/api/v1/nodes" => list(
            "meta.k8s.io/v1",
            "PartialObjectMetadataList",
            vec![
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": "node-1", "resourceVersion": "14",
                "labels": {"acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count": "8"}}}),
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": "node-2", "resourceVersion": "15",
                "labels": {"kubernetes.io/os": "linux"}}}),
            ],
        ),
        _ => return None,
    })
}

#[tokio::test]
async fn lists_what_it_may_read_syncs_and_answers_from_memory() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (cache, run) = PoolCache::new(client);
    assert!(!cache.synced());
    assert_eq!(
        cache.pool("team-a", "h100").reason(),
        "the pool caches have not synced yet"
    );
    let driver = tokio::spawn(run);

    let mut listed = Vec::new();
    let mut watches = Vec::new();
    let served = tokio::time::timeout(Duration::from_secs(20), async {
        while listed.len() < 5 {
            let (request, send) = handle
                .next_request()
                .await
                .expect("the cache stopped asking");
            assert_eq!(request.method(), http::Method::GET, "the cache only reads");
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or("").to_string();
            if query.contains("watch=true") {
                // Hold the watch open: nothing changes in this test.
                watches.push(send);
                continue;
            }
            let body = answer(&path).unwrap_or_else(|| panic!("unexpected request {path}?{query}"));
            if path == "/api/v1/nodes" {
                let accept = request
                    .headers()
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                assert!(
                    accept.contains("as=PartialObjectMetadataList"),
                    "nodes are read as metadata only: {accept}"
                );
            }
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
            listed.push(path);
        }
    })
    .await;
    assert!(
        served.is_ok(),
        "timed out serving the initial lists, got {listed:?}"
    );
    listed.sort();
    assert_eq!(
        listed,
        vec![
            "/api/v1/nodes",
            "/apis/gpustack.ai/v1/devices",
            "/apis/kueue.x-k8s.io/v1beta1/clusterqueues",
            "/apis/kueue.x-k8s.io/v1beta1/localqueues",
            "/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
        ]
    );

    tokio::time::timeout(Duration::from_secs(10), async {
        while !cache.synced() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cache never reported synced");

    let pool = cache.pool("team-a", "h100");
    let expected: accel_core::pool::Pool = serde_json::from_value(
        json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia",
        "memoryMiB": 81559, "count": 8, "profiles": {"1g.10gb": 9984, "3g.40gb": 40320}}),
    )
    .unwrap();
    assert_eq!(pool, expected);
    assert_eq!(
        cache.pool("team-b", "h100").reason(),
        "LocalQueue team-b/h100 is not in the watch cache"
    );
    driver.abort();
}
