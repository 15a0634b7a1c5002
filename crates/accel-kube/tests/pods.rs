//! The node's Pod watch against a recorded API server (tower_test::mock::pair +
//! kube::Client::new): it lists only this node's Pods (field selector), reports synced after the
//! first listing, and follows ADDED / MODIFIED / DELETED watch events with a tick each.

use std::time::Duration;

use accel_kube::NodePods;
use accel_plugin::pods::{Phase, PodSource};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

fn pod(uid: &str, name: &str, phase: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"uid": uid, "name": name, "namespace": "team-a", "resourceVersion": rv,
            "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main",
            "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}]},
        "status": {"phase": phase}})
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, body: Vec<u8>) {
    send.send_response(Response::builder().body(Body::from(body)).unwrap());
}

#[tokio::test]
async fn lists_this_nodes_pods_syncs_and_follows_the_watch() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (source, run) = NodePods::new(client, "node-1");
    assert_eq!(source.pods(), None, "unsynced before the first listing");
    let mut changes = source.changes();
    let driver = tokio::spawn(run);

    let deadline = Duration::from_secs(20);
    // 1. The listing: only Pods bound to this node.
    let (request, send) = tokio::time::timeout(deadline, handle.next_request())
        .await
        .expect("the watch never listed")
        .expect("the watch stopped asking");
    assert_eq!(request.method(), http::Method::GET, "the watch only reads");
    assert_eq!(request.uri().path(), "/api/v1/pods");
    let query = request.uri().query().unwrap_or("").to_string();
    assert!(
        query.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "lists only this node's Pods: {query}"
    );
    assert!(!query.contains("watch=true"), "a list first: {query}");
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "100"},
        "items": [pod("u1", "a", "Pending", "10"), pod("u2", "b", "Running", "11")]});
    respond(send, serde_json::to_vec(&list).unwrap());

    tokio::time::timeout(deadline, changes.changed())
        .await
        .expect("no tick after the listing")
        .unwrap();
    let pods = source.pods().expect("synced after the listing");
    let uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, ["u1", "u2"]);
    assert_eq!(
        pods[0].containers[0].count("nvidia.com/gpu.shared"),
        Some(2)
    );
    // Allocate's snapshot hands out the held Pods themselves, never copies.
    let first = source.snapshot().expect("synced");
    let second = source.snapshot().expect("synced");
    assert_eq!(
        first.iter().map(|p| (**p).clone()).collect::<Vec<_>>(),
        pods
    );
    assert!(
        first
            .iter()
            .zip(&second)
            .all(|(a, b)| std::sync::Arc::ptr_eq(a, b)),
        "each snapshot shares the same Pods"
    );

    // 2. The watch: one Pod runs, another is deleted, a third is bound here.
    let (request, send) = tokio::time::timeout(deadline, handle.next_request())
        .await
        .expect("the watch never watched")
        .expect("the watch stopped asking");
    let query = request.uri().query().unwrap_or("").to_string();
    assert!(query.contains("watch=true"), "a watch next: {query}");
    assert!(
        query.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "watches only this node's Pods: {query}"
    );
    assert!(query.contains("resourceVersion=100"), "{query}");
    let mut events = Vec::new();
    for (kind, object) in [
        ("MODIFIED", pod("u1", "a", "Running", "12")),
        ("DELETED", pod("u2", "b", "Succeeded", "13")),
        ("ADDED", pod("u3", "c", "Pending", "14")),
    ] {
        events.extend(serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap());
        events.push(b'\n');
    }
    respond(send, events);

    tokio::time::timeout(deadline, async {
        loop {
            let pods = source.pods().unwrap();
            let seen: Vec<(&str, Phase)> = pods.iter().map(|p| (p.uid.as_str(), p.phase)).collect();
            if seen == [("u1", Phase::Running), ("u3", Phase::Pending)] {
                break;
            }
            changes.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the watch events never landed: {:?}", source.pods()));

    driver.abort();
}

/// The plugin reads one Pod the kubelet admits before the watch delivers it: a GET of exactly
/// that Pod, and only a Pod bound to this node counts.
#[tokio::test]
async fn looks_up_one_pod_of_this_node_by_namespace_and_name() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    // The watch is never driven: the read goes straight to the API server.
    let (source, _run) = NodePods::new(client, "node-1");
    let deadline = Duration::from_secs(20);

    let answers = [
        (Some(pod("u9", "a", "Pending", "20")), Some("u9")),
        (
            Some({
                let mut elsewhere = pod("u8", "a", "Pending", "21");
                elsewhere["spec"]["nodeName"] = json!("node-2");
                elsewhere
            }),
            None,
        ),
        (None, None),
    ];
    for (answer, expected) in answers {
        let lookup = source.lookup("team-a", "a");
        let server = async {
            let (request, send) = tokio::time::timeout(deadline, handle.next_request())
                .await
                .expect("the lookup never asked")
                .expect("the lookup stopped asking");
            assert_eq!(request.method(), http::Method::GET);
            assert_eq!(request.uri().path(), "/api/v1/namespaces/team-a/pods/a");
            match answer {
                Some(body) => respond(send, serde_json::to_vec(&body).unwrap()),
                None => send.send_response(
                    Response::builder()
                        .status(404)
                        .body(Body::from(
                            serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "NotFound", "code": 404,
                                "message": "pods \"a\" not found"}))
                            .unwrap(),
                        ))
                        .unwrap(),
                ),
            }
        };
        let (found, ()) = tokio::join!(lookup, server);
        let found = found.expect("the read succeeded");
        assert_eq!(found.as_ref().map(|p| p.uid.as_str()), expected);
    }
}

/// An API server that never answers: the read gives up within its bound and says why.
#[tokio::test(start_paused = true)]
async fn a_lookup_the_api_server_never_answers_gives_up_within_its_bound() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let (source, _run) = NodePods::new(client, "node-1");
    let started = tokio::time::Instant::now();
    let lookup = source.lookup("team-a", "a");
    let server = async {
        // Take the request and hold on to it without answering.
        let pending = handle.next_request().await;
        std::future::pending::<()>().await;
        drop(pending);
    };
    let answer = tokio::select! {
        answer = lookup => answer,
        () = server => unreachable!("the silent API server never returns"),
    };
    let err = answer.expect_err("a read that got no answer fails");
    assert!(
        err.to_string()
            .starts_with("cannot read Pod team-a/a from the API server: no answer within"),
        "{err}"
    );
    assert_eq!(started.elapsed(), accel_kube::pods::POD_GET_TIMEOUT);
}
