//! The committed `Devices` CRD in the Helm chart is exactly what the Rust types generate; with
//! `ACCEL_KUBE_REGENERATE=1` this test rewrites it instead. And the generated CRD has the shape
//! the cluster relies on: cluster-scoped, `gpustack.ai/v1`, a status subresource, a structural
//! schema (no `$ref`), the body's camelCase fields.

use accel_kube::crd::devices_crd_yaml;
use serde_json::Value;

const CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/helm/device-manager/crds/devices.gpustack.ai.yaml"
);

#[test]
fn committed_crd_matches_the_types() {
    let fresh = devices_crd_yaml().expect("the CRD renders");
    if std::env::var_os("ACCEL_KUBE_REGENERATE").is_some() {
        let path = std::path::Path::new(CRD_FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(CRD_FILE).unwrap_or_default();
    assert!(
        committed == fresh,
        "deploy/helm/device-manager/crds/devices.gpustack.ai.yaml is stale; run ACCEL_KUBE_REGENERATE=1 cargo test -p accel-kube --test crd"
    );
}

#[test]
fn the_crd_is_cluster_scoped_with_a_status_subresource_and_a_structural_schema() {
    let crd: Value = serde_yaml::from_str(&devices_crd_yaml().unwrap()).unwrap();
    assert_eq!(crd["metadata"]["name"], "devices.gpustack.ai");
    assert_eq!(crd["spec"]["group"], "gpustack.ai");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["names"]["kind"], "Devices");
    assert_eq!(crd["spec"]["names"]["plural"], "devices");
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1");
    assert_eq!(version["served"], true);
    assert_eq!(version["storage"], true);
    assert!(version["subresources"]["status"].is_object());
    let text = serde_json::to_string(&version["schema"]).unwrap();
    assert!(!text.contains("$ref"), "a CRD schema must be structural");
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    let group = &schema["spec"]["properties"]["groups"]["items"]["properties"];
    for field in [
        "manufacturer",
        "key",
        "memoryMiB",
        "cores",
        "driverVersion",
        "accelerators",
    ] {
        assert!(group.get(field).is_some(), "spec.groups[].{field}");
    }
    let accelerator = &group["accelerators"]["items"]["properties"];
    for field in [
        "index",
        "uuid",
        "busId",
        "numaNode",
        "healthy",
        "logicalSliced",
        "partitionProfiles",
    ] {
        assert!(
            accelerator.get(field).is_some(),
            "spec.groups[].accelerators[].{field}"
        );
    }
    let allocation = &schema["status"]["properties"]["accelerators"]["items"]["properties"];
    for field in [
        "mode",
        "remaining",
        "allocatedSlices",
        "allocatedProfiles",
        "placeableProfiles",
    ] {
        assert!(
            allocation.get(field).is_some(),
            "status.accelerators[].{field}"
        );
    }
    let condition = &schema["status"]["properties"]["conditions"]["items"]["properties"];
    for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
        assert!(
            condition.get(field).is_some(),
            "status.conditions[].{field}"
        );
    }
}
