//! The manufacturer's RuntimeClass through the real HTTPS handler: `/mutate-pods` adds
//! `/spec/runtimeClassName` (RFC 6902) to a Pod asking for a manufacturer's accelerators when the
//! pool source says a RuntimeClass of that name exists, and only then; a Pod naming its own keeps
//! it; a Pod whose manufacturers' classes differ gets none, is admitted, and the response warns.

mod common;

use std::sync::Arc;
use std::time::Duration;

use accel_core::admission::RuntimeClasses;
use accel_core::admission::patch;
use accel_core::pool::Pool;
use accel_webhook::{PoolSource, ServerConfig};
use base64::Engine as _;
use common::*;
use serde_json::{Value, json};

/// An in-memory cluster: no pool, and the RuntimeClasses it is given.
struct Cluster(RuntimeClasses);

impl PoolSource for Cluster {
    fn pool(&self, _: &str, _: &str) -> Pool {
        Pool::unknown("no pool in this test")
    }

    fn runtime_classes(&self) -> RuntimeClasses {
        self.0.clone()
    }
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a",
        "labels": {"kueue.x-k8s.io/queue-name": "corex"}}, "spec": spec})
}

/// seed 000's sliced Iluvatar Pod, without `runtimeClassName`.
fn sliced_iluvatar() -> Value {
    pod(
        json!({"containers": [{"name": "main", "image": "corex", "resources": {"limits": {
        "iluvatar.com/gpu.sliced": "1", "iluvatar.com/gpu.sliced.memory-percentage": "50"}}}]}),
    )
}

fn review(uid: &str, pod: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "namespace": "team-a", "object": pod}})
}

fn patch_of(response: &Value) -> Vec<Value> {
    match response["response"]["patch"].as_str() {
        None => Vec::new(),
        Some(text) => serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap(),
        )
        .unwrap(),
    }
}

fn class_ops(patch: &[Value]) -> Vec<&Value> {
    patch
        .iter()
        .filter(|op| op["path"] == "/spec/runtimeClassName")
        .collect()
}

async fn webhook(classes: &[&str]) -> (Webhook, Client) {
    let cert = cert();
    let source = Arc::new(Cluster(classes.iter().copied().collect()));
    let hook = start(
        &cert,
        source,
        ServerConfig::default(),
        Duration::from_secs(60),
    )
    .await;
    let client = connect(hook.addr, &[&cert.der]).await;
    (hook, client)
}

#[tokio::test]
async fn a_sliced_iluvatar_pod_is_given_its_runtime_class_when_it_exists_then_admitted() {
    within("attach", async {
        let (_hook, mut client) = webhook(&["iluvatar", "nvidia"]).await;
        let submitted = sliced_iluvatar();
        let mutated = client
            .review("/mutate-pods", &review("m-1", &submitted))
            .await;
        assert_eq!(mutated["response"]["allowed"], true);
        assert_eq!(mutated["response"]["patchType"], "JSONPatch");
        assert!(mutated["response"].get("warnings").is_none());
        let ops = patch_of(&mutated);
        assert_eq!(
            class_ops(&ops),
            [&json!({"op": "add", "path": "/spec/runtimeClassName", "value": "iluvatar"})]
        );
        // The API server applies the patch, then asks the validating webhook.
        let created = patch::apply(&submitted, &ops).unwrap();
        assert_eq!(created["spec"]["runtimeClassName"], "iluvatar");
        let validated = client
            .review("/validate-pods", &review("v-1", &created))
            .await;
        assert_eq!(
            validated["response"],
            json!({"uid": "v-1", "allowed": true})
        );
        // A reinvocation changes nothing.
        let again = client
            .review("/mutate-pods", &review("m-2", &created))
            .await;
        assert_eq!(again["response"], json!({"uid": "m-2", "allowed": true}));
    })
    .await;
}

#[tokio::test]
async fn without_the_runtime_class_the_patch_is_as_before() {
    within("absent", async {
        for classes in [&[][..], &["nvidia", "iluvatar-legacy"][..]] {
            let (_hook, mut client) = webhook(classes).await;
            let mutated = client
                .review("/mutate-pods", &review("m-1", &sliced_iluvatar()))
                .await;
            assert_eq!(mutated["response"]["allowed"], true);
            let ops = patch_of(&mutated);
            assert!(class_ops(&ops).is_empty(), "{classes:?}: {ops:?}");
            assert!(
                ops.iter().any(|op| op["path"]
                    == "/spec/containers/0/resources/limits/iluvatar.com~1gpu.sliced.units"),
                "the units are still folded: {ops:?}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_pod_naming_its_own_class_keeps_it_and_validation_never_patches() {
    within("own", async {
        let (_hook, mut client) = webhook(&["iluvatar"]).await;
        let mut own = sliced_iluvatar();
        own["spec"]["runtimeClassName"] = json!("corex-debug");
        let mutated = client.review("/mutate-pods", &review("m-1", &own)).await;
        assert!(class_ops(&patch_of(&mutated)).is_empty());
        let validated = client
            .review("/validate-pods", &review("v-1", &sliced_iluvatar()))
            .await;
        assert_eq!(
            validated["response"],
            json!({"uid": "v-1", "allowed": true})
        );
    })
    .await;
}

#[tokio::test]
async fn two_manufacturers_whose_classes_differ_get_none_and_a_warning() {
    within("ambiguous", async {
        let (_hook, mut client) = webhook(&["iluvatar", "nvidia"]).await;
        let mixed = pod(json!({"containers": [
            {"name": "main", "image": "corex", "resources": {"limits": {"iluvatar.com/gpu": "1"}}},
            {"name": "aux", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]}));
        let mutated = client.review("/mutate-pods", &review("m-1", &mixed)).await;
        assert_eq!(
            mutated["response"],
            json!({"uid": "m-1", "allowed": true, "warnings": [
                "no runtimeClassName was attached: the Pod asks for accelerators of nvidia (RuntimeClass nvidia) and iluvatar (RuntimeClass iluvatar); set spec.runtimeClassName to the one its containers need"
            ]})
        );
    })
    .await;
}
