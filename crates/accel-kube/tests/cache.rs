//! The pool cache against a recorded API server (tower_test::mock::pair + kube::Client::new): it
//! looks for Kueue in the group list, lists exactly the six resources it is allowed to read,
//! syncs, and answers a queue's pool and the RuntimeClasses that exist from memory, following
//! the RuntimeClass watch. Without Kueue it says so once, is ready, names Kueue on `/readyz` and in
//! every queue's unknown pool, and watches Kueue once it appears.

use std::time::Duration;

use accel_core::admission::RuntimeClasses;
use accel_kube::PoolCache;
use accel_webhook::{PoolSource, Readiness};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "100"}, "items": items})
}

/// The API server's group list (`/apis`), with Kueue's group or without.
fn groups(with_kueue: bool) -> Value {
    let group = |name: &str, version: &str| {
        json!({"name": name, "versions": [{"groupVersion": format!("{name}/{version}"), "version": version}],
            "preferredVersion": {"groupVersion": format!("{name}/{version}"), "version": version}})
    };
    let mut list = vec![
        group("apps", "v1"),
        group("gpustack.ai", "v1"),
        group("coordination.k8s.io", "v1"),
    ];
    if with_kueue {
        list.push(group("kueue.x-k8s.io", "v1beta1"));
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
}

/// A RuntimeClass as a metadata-only read shows it.
fn runtime_class(name: &str, version: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "resourceVersion": version}})
}

/// The list each watcher asks for first, as the API server would answer it.
fn answer(path: &str) -> Option<Value> {
    let kueue = "kueue.x-k8s.io/v1beta1";
    Some(match path {
        "/apis" => groups(true),
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
        "/apis/node.k8s.io/v1/runtimeclasses" => list(
            "meta.k8s.io/v1",
            "PartialObjectMetadataList",
            vec![
                runtime_class("nvidia", "16"),
                runtime_class("iluvatar", "17"),
            ],
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
        while listed.len() < 7 {
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
            if path == "/api/v1/nodes" || path.ends_with("/runtimeclasses") {
                let accept = request
                    .headers()
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                assert!(
                    accept.contains("as=PartialObjectMetadataList"),
                    "{path} is read as metadata only: {accept}"
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
            "/apis",
            "/apis/gpustack.ai/v1/devices",
            "/apis/kueue.x-k8s.io/v1beta1/clusterqueues",
            "/apis/kueue.x-k8s.io/v1beta1/localqueues",
            "/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
            "/apis/node.k8s.io/v1/runtimeclasses",
        ]
    );

    tokio::time::timeout(Duration::from_secs(10), async {
        while !cache.synced() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cache never reported synced");
    assert_eq!(cache.readiness(), Readiness::Ready(None));

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
    assert_eq!(
        cache.runtime_classes(),
        RuntimeClasses::from_iter(["iluvatar", "nvidia"])
    );
    driver.abort();
}

#[tokio::test]
async fn runtime_classes_are_known_from_the_sync_on_and_follow_their_watch() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (cache, run) = PoolCache::new(client);
    assert_eq!(cache.runtime_classes(), RuntimeClasses::none());
    let driver = tokio::spawn(run);
    let reply = |body: String| {
        Response::builder()
            .body(Body::from(body.into_bytes()))
            .unwrap()
    };

    // Every list answered, every watch held; the RuntimeClass watch is kept to answer later.
    let mut held = Vec::new();
    let class_watch = tokio::time::timeout(Duration::from_secs(20), async {
        let mut lists = 0;
        let mut class_watch = None;
        while lists < 7 || class_watch.is_none() {
            let (request, send) = handle
                .next_request()
                .await
                .expect("the cache stopped asking");
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or("").to_string();
            if query.contains("watch=true") {
                if path == "/apis/node.k8s.io/v1/runtimeclasses" {
                    assert!(
                        query.contains("resourceVersion=100"),
                        "the watch goes on from the list: {query}"
                    );
                    class_watch = Some(send);
                } else {
                    held.push(send);
                }
                continue;
            }
            let body = answer(&path).unwrap_or_else(|| panic!("unexpected request {path}?{query}"));
            send.send_response(reply(body.to_string()));
            lists += 1;
        }
        class_watch.unwrap()
    })
    .await
    .expect("timed out serving the lists");
    tokio::time::timeout(Duration::from_secs(10), async {
        while !cache.synced() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cache never reported synced");
    assert_eq!(
        cache.runtime_classes(),
        RuntimeClasses::from_iter(["iluvatar", "nvidia"])
    );

    // A class created and one deleted: seen without another listing.
    let events = [
        json!({"type": "ADDED", "object": runtime_class("mthreads", "21")}),
        json!({"type": "DELETED", "object": runtime_class("nvidia", "22")}),
    ]
    .iter()
    .map(|e| format!("{e}\n"))
    .collect::<String>();
    class_watch.send_response(reply(events));
    let expected = RuntimeClasses::from_iter(["iluvatar", "mthreads"]);
    tokio::time::timeout(Duration::from_secs(10), async {
        while cache.runtime_classes() != expected {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the watch's events never reached the store: {:?}",
            cache.runtime_classes()
        )
    });
    driver.abort();
}

/// WARN and ERROR lines logged on this thread while `f` runs.
async fn warnings_while<T>(f: impl std::future::Future<Output = T>) -> (T, Vec<String>) {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let out = f.await;
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    (out, text.lines().map(str::to_string).collect())
}

#[tokio::test]
async fn without_kueue_it_says_so_once_is_ready_and_watches_kueue_once_it_appears() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (cache, run) = PoolCache::with_kueue_recheck(client, Duration::from_millis(20));
    // Everything on this thread (the default test runtime), so the log is captured.
    let ((), warnings) = warnings_while(async {
        let driver = tokio::spawn(run);
        let mut listed = Vec::new();
        let mut group_lists = 0;
        let mut watches = Vec::new();
        let mut kueue_served = false;
        let served = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let (request, send) = handle
                    .next_request()
                    .await
                    .expect("the cache stopped asking");
                let path = request.uri().path().to_string();
                let query = request.uri().query().unwrap_or("").to_string();
                if query.contains("watch=true") {
                    watches.push(send);
                    continue;
                }
                assert!(
                    kueue_served || !path.contains("kueue"),
                    "Kueue's objects asked for while it is not served: {path}"
                );
                let body = if path == "/apis" {
                    group_lists += 1;
                    // Kueue is installed after the fourth look.
                    kueue_served = group_lists > 4;
                    if !kueue_served && group_lists == 4 {
                        // By now the cache has synced without Kueue and says why.
                        assert!(cache.synced(), "ready without Kueue");
                        let Readiness::Ready(Some(note)) = cache.readiness() else {
                            panic!("ready with a note naming Kueue: {:?}", cache.readiness());
                        };
                        assert!(note.starts_with("Kueue is not installed"), "{note}");
                        assert!(note.contains("kueue.x-k8s.io/v1beta1"), "{note}");
                        assert!(
                            note.contains("a shared pin, a MiB budget, a partition"),
                            "{note}"
                        );
                        let pool = cache.pool("team-a", "h100");
                        assert!(
                            pool.reason()
                                .starts_with("queue team-a/h100: Kueue is not installed"),
                            "{}",
                            pool.reason()
                        );
                    }
                    groups(kueue_served)
                } else {
                    answer(&path).unwrap_or_else(|| panic!("unexpected request {path}?{query}"))
                };
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
                if path != "/apis" {
                    listed.push(path);
                }
                if listed.len() == 6 {
                    break;
                }
            }
        })
        .await;
        assert!(
            served.is_ok(),
            "timed out, got {listed:?} after {group_lists} group lists"
        );
        assert_eq!(
            group_lists, 5,
            "the group list read until Kueue is served, then no more"
        );
        tokio::time::timeout(Duration::from_secs(10), async {
            while cache.readiness() != Readiness::Ready(None) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("Kueue's watches never synced");
        let pool = cache.pool("team-a", "h100");
        assert_eq!(
            pool.group.as_deref(),
            Some("nvidia-h100-80gb-hbm3"),
            "{}",
            pool.reason()
        );
        driver.abort();
    })
    .await;
    assert_eq!(
        warnings.len(),
        1,
        "one warning, not one per look: {warnings:#?}"
    );
    assert!(
        warnings[0].contains("Kueue is not installed"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn before_the_sync_readyz_names_each_store_it_waits_for_and_its_last_error() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (cache, run) = PoolCache::new(client);
    let driver = tokio::spawn(run);
    let Readiness::NotReady(why) = cache.readiness() else {
        panic!("ready before any listing");
    };
    assert!(
        why.starts_with("the pool caches have not synced yet: waiting for devices, nodes"),
        "{why}"
    );
    // Devices are forbidden; Nodes, RuntimeClasses and the group list answer.
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        let mut answered = 0;
        while answered < 4 {
            let (request, send) = handle
                .next_request()
                .await
                .expect("the cache stopped asking");
            let path = request.uri().path().to_string();
            if request.uri().query().unwrap_or("").contains("watch=true") {
                std::mem::forget(send);
                continue;
            }
            let (status, body) = match path.as_str() {
                "/apis/gpustack.ai/v1/devices" => (
                    403,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": "Forbidden", "code": 403,
                        "message": "devices.gpustack.ai is forbidden"}),
                ),
                "/apis" => (200, groups(false)),
                other => (
                    200,
                    answer(other).unwrap_or_else(|| panic!("unexpected {other}")),
                ),
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
            answered += 1;
        }
    })
    .await;
    assert!(
        refused.is_ok(),
        "the cache did not ask for devices, nodes, runtimeclasses and the group list"
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Readiness::NotReady(why) = cache.readiness()
                && why.contains("devices (last error:")
                && !why.contains("nodes")
                && !why.contains("runtimeclasses")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "readiness never named the failing store: {:?}",
            cache.readiness()
        )
    });
    let Readiness::NotReady(why) = cache.readiness() else {
        unreachable!()
    };
    assert!(why.contains("forbidden"), "{why}");
    assert!(!cache.synced());
    driver.abort();
}
