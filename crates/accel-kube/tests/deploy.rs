//! deploy/webhook/ agrees with the code: RBAC grants read-only access to exactly what the pool
//! cache watches, and the webhook configurations select, fail and time out as seed 003 and the
//! issue require.

use std::collections::BTreeSet;

use accel_core::pool::QUEUE_LABEL;
use accel_kube::cache::{DEVICES_API, KUEUE_API};
use serde_json::Value;

fn documents(file: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/webhook/").to_string() + file;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn rbac_is_read_only_on_exactly_what_the_pool_lookup_reads() {
    let role = documents("rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let verbs: BTreeSet<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            verbs,
            BTreeSet::from(["get", "list", "watch"]),
            "read-only: {rule}"
        );
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                granted.insert(format!(
                    "{}/{}",
                    group.as_str().unwrap(),
                    resource.as_str().unwrap()
                ));
            }
        }
    }
    let watched = BTreeSet::from([
        format!("{}/localqueues", KUEUE_API.0),
        format!("{}/clusterqueues", KUEUE_API.0),
        format!("{}/resourceflavors", KUEUE_API.0),
        format!("{}/devices", DEVICES_API.0),
        "/nodes".to_string(),
    ]);
    assert_eq!(granted, watched);
}

#[test]
fn webhooks_select_queued_pods_fail_closed_and_time_out_quickly() {
    let configs = documents("webhooks.yaml");
    let mut paths = Vec::new();
    for config in &configs {
        for hook in config["webhooks"].as_array().unwrap() {
            assert_eq!(hook["failurePolicy"], "Fail");
            assert_eq!(hook["sideEffects"], "None");
            assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]));
            assert!(hook["timeoutSeconds"].as_u64().unwrap() <= 10);
            assert_eq!(
                hook["objectSelector"]["matchExpressions"][0]["key"],
                QUEUE_LABEL
            );
            assert_eq!(
                hook["objectSelector"]["matchExpressions"][0]["operator"],
                "Exists"
            );
            assert_eq!(hook["rules"][0]["resources"], serde_json::json!(["pods"]));
            assert_eq!(
                hook["rules"][0]["operations"],
                serde_json::json!(["CREATE"])
            );
            paths.push(
                hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    assert_eq!(paths, vec!["/mutate-pods", "/validate-pods"]);
    let deployment = documents("deployment.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
}
