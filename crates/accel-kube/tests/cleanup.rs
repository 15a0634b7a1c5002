//! The uninstall cleanup against a recorded API server (tower_test::mock::pair): it waits for the
//! release's Pods, then deletes exactly what the daemons and the worker created (our NodeFeatures
//! and no other, the NodeFeatureRule, the Lease, every Devices) and removes only the accelerator
//! budget keys from the Nodes' capacity; objects already gone and APIs not served are nothing to
//! do, and a refused delete is counted while the other steps still run.

use std::time::Duration;

use accel_core::resources::KeyGrammar;
use accel_kube::cleanup::{CleanupConfig, cleanup, release_pods_selector};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

type Mock = Handle<Request<Body>, Response<Body>>;

const NS: &str = "gpustack-system";

fn config() -> CleanupConfig {
    CleanupConfig {
        namespace: NS.to_string(),
        release: "dm".to_string(),
        lease_name: "gpustack-device-manager-worker".to_string(),
        wait: Duration::from_secs(30),
        poll: Duration::from_millis(10),
        grammar: KeyGrammar::default(),
    }
}

/// The next request: its method, path, query and body.
async fn next(
    handle: &mut Mock,
    what: &str,
) -> (Method, String, String, Value, SendResponse<Response<Body>>) {
    let (request, send) = tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request: expected {what}"))
        .unwrap_or_else(|| panic!("the client went away: expected {what}"));
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, path, query, body, send)
}

fn respond(send: SendResponse<Response<Body>>, status: u16, body: &Value) {
    send.send_response(
        Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": reason,
        "code": code, "message": reason, "metadata": {}})
}

fn success() -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {}})
}

fn metadata_list(names: &[&str]) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "1"},
        "items": names.iter().map(|n| json!({"apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata", "metadata": {"name": n}})).collect::<Vec<_>>()})
}

fn node(name: &str, capacity: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"capacity": capacity, "allocatable": capacity}})
}

/// Expects `method path`, answers `status body`, returns the request's query and body.
async fn expect(
    handle: &mut Mock,
    method: Method,
    path: &str,
    answer: (u16, Value),
) -> (String, Value) {
    let (m, p, query, body, send) = next(handle, &format!("{method} {path}")).await;
    assert_eq!(
        (&m, p.as_str()),
        (&method, path),
        "expected {method} {path}"
    );
    respond(send, answer.0, &answer.1);
    (query, body)
}

#[tokio::test]
async fn waits_for_the_release_then_deletes_what_it_created_and_only_that() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let run = tokio::spawn(async move { cleanup(&client, &config()).await });

    // A daemon Pod is still terminating at first; the next look finds none.
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let (query, _) = expect(
        &mut handle,
        Method::GET,
        &pods,
        (200, metadata_list(&["dm-daemon-x"])),
    )
    .await;
    let selector: String = url_decode(&query);
    assert!(
        selector.contains(&release_pods_selector("dm")),
        "{selector}"
    );
    expect(&mut handle, Method::GET, &pods, (200, metadata_list(&[]))).await;

    // Our NodeFeatures, not NFD's own nor another tool's.
    let features = format!("/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures");
    expect(
        &mut handle,
        Method::GET,
        &features,
        (
            200,
            metadata_list(&[
                "node-a-gpustack-device-manager",
                "node-a",
                "node-b-gpustack-device-manager",
            ]),
        ),
    )
    .await;
    for node in ["node-a", "node-b"] {
        expect(
            &mut handle,
            Method::DELETE,
            &format!("{features}/{node}-gpustack-device-manager"),
            (200, success()),
        )
        .await;
    }
    expect(
        &mut handle,
        Method::DELETE,
        "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info",
        (200, success()),
    )
    .await;
    expect(
        &mut handle,
        Method::DELETE,
        &format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpustack-device-manager-worker"
        ),
        (404, status(404, "NotFound")),
    )
    .await;
    expect(
        &mut handle,
        Method::GET,
        "/apis/gpustack.ai/v1/devices",
        (200, metadata_list(&["node-a", "node-b"])),
    )
    .await;
    expect(
        &mut handle,
        Method::DELETE,
        "/apis/gpustack.ai/v1/devices/node-a",
        (200, success()),
    )
    .await;
    // Refused: counted, and the Nodes are still cleaned.
    expect(
        &mut handle,
        Method::DELETE,
        "/apis/gpustack.ai/v1/devices/node-b",
        (403, status(403, "Forbidden")),
    )
    .await;

    expect(
        &mut handle,
        Method::GET,
        "/api/v1/nodes",
        (200, json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [
            node("node-a", json!({"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "80",
                "nvidia.com/gpu.sliced.units": "12800k", "nvidia.com/gpu.sliced.memory-mib": "652472",
                "nvidia.com/gpu.partitioned.mig-1g.10gb": "56"})),
            node("node-b", json!({"cpu": "8", "memory": "32Gi"})),
        ]})),
    )
    .await;
    let (_, patch) = expect(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/node-a/status",
        (200, node("node-a", json!({}))),
    )
    .await;
    // Only the budget keys the daemons own; the plugins' resources are the kubelet's.
    let removed = json!({"nvidia.com/gpu.partitioned.mig-1g.10gb": null,
        "nvidia.com/gpu.sliced.memory-mib": null, "nvidia.com/gpu.sliced.units": null});
    assert_eq!(
        patch,
        json!({"status": {"capacity": removed, "allocatable": removed}})
    );

    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.failures, 1, "{:#?}", report.lines);
    let text = report.lines.join("\n");
    for line in [
        "NodeFeature gpustack-system/node-a-gpustack-device-manager: deleted",
        "NodeFeatureRule gpustack-cpu-info: deleted",
        "Lease gpustack-system/gpustack-device-manager-worker: already gone",
        "Devices node-a: deleted",
        "Devices node-b: cannot delete",
        "Node node-a: removed the capacity keys nvidia.com/gpu.partitioned.mig-1g.10gb, nvidia.com/gpu.sliced.memory-mib, nvidia.com/gpu.sliced.units",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("node-b: removed"), "{text}");
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await,
            Ok(Some(_))
        ),
        "nothing more is asked"
    );
}

#[tokio::test]
async fn nothing_installed_is_nothing_to_do() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let run = tokio::spawn(async move { cleanup(&client, &config()).await });
    expect(
        &mut handle,
        Method::GET,
        &format!("/api/v1/namespaces/{NS}/pods"),
        (200, metadata_list(&[])),
    )
    .await;
    // NFD and the Devices CRD not installed: the API server answers 404 for their resources.
    let not_served = (404, json!("404 page not found"));
    expect(
        &mut handle,
        Method::GET,
        &format!("/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"),
        not_served.clone(),
    )
    .await;
    expect(
        &mut handle,
        Method::DELETE,
        "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info",
        not_served.clone(),
    )
    .await;
    expect(
        &mut handle,
        Method::DELETE,
        &format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpustack-device-manager-worker"
        ),
        (404, status(404, "NotFound")),
    )
    .await;
    expect(
        &mut handle,
        Method::GET,
        "/apis/gpustack.ai/v1/devices",
        not_served,
    )
    .await;
    expect(
        &mut handle,
        Method::GET,
        "/api/v1/nodes",
        (
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [
            node("node-a", json!({"cpu": "8"}))]}),
        ),
    )
    .await;
    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.failures, 0, "{:#?}", report.lines);
    let text = report.lines.join("\n");
    assert!(
        text.contains("NodeFeatures: NFD's API is not served"),
        "{text}"
    );
    assert!(text.contains("Devices: the CRD is not installed"), "{text}");
    assert!(text.contains("Nodes: no accelerator budget key"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn pods_that_never_go_are_waited_for_only_up_to_the_bound() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let run = tokio::spawn(async move {
        let config = CleanupConfig {
            wait: Duration::from_secs(5),
            poll: Duration::from_secs(1),
            ..config()
        };
        cleanup(&client, &config).await
    });
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let mut looks = 0;
    loop {
        let (method, path, _, _, send) = next(&mut handle, "a Pod listing or the next step").await;
        if path == pods {
            assert_eq!(method, Method::GET);
            looks += 1;
            respond(send, 200, &metadata_list(&["dm-worker-stuck"]));
            continue;
        }
        // Gave up waiting: the next step has started.
        assert!(path.ends_with("/nodefeatures"), "{path}");
        respond(send, 200, &metadata_list(&[]));
        break;
    }
    assert!(
        (5..=7).contains(&looks),
        "looked {looks} times in 5 s at 1 s apart"
    );
    run.abort();
}

fn url_decode(query: &str) -> String {
    let mut out = Vec::new();
    let bytes = query.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}
