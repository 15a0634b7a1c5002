//! The committed `Devices` CRD in the Helm chart is exactly what the Rust types generate; with
//! `ACCEL_KUBE_REGENERATE=1` this test rewrites it instead. And the generated CRD has the shape
//! the cluster relies on: cluster-scoped, `gpustack.ai/v1`, a status subresource, a structural
//! schema (no `$ref`), the body's camelCase fields, and only formats the API server knows.

use accel_kube::crd::{ApiServerIntegers, devices_crd_yaml};
use schemars::Schema;
use schemars::transform::Transform;
use serde_json::{Value, json};

/// The formats the API server's OpenAPI validation knows (apiextensions' supported formats, and
/// OpenAPI's numeric ones); any other makes `kubectl apply` warn `unrecognized format`.
const KNOWN_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "binary",
    "date",
    "date-time",
    "datetime",
    "duration",
    "password",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "bsonobjectid",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
];

/// Every `format` in a schema, with the JSON path of its schema.
fn formats(value: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            if map.contains_key("format") {
                out.push((at.to_string(), value.clone()));
            }
            for (k, v) in map {
                formats(v, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(list) => {
            for (n, v) in list.iter().enumerate() {
                formats(v, &format!("{at}[{n}]"), out);
            }
        }
        _ => {}
    }
}

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
    // The specs' `logicalSliced = {count, coresPercentageOvercommit}`.
    let sliced = &accelerator["logicalSliced"]["properties"];
    assert_eq!(sliced["count"]["type"], "integer");
    assert_eq!(sliced["coresPercentageOvercommit"]["type"], "boolean");
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

#[test]
fn the_schema_has_no_format_the_api_server_does_not_know() {
    let crd: Value = serde_yaml::from_str(&devices_crd_yaml().unwrap()).unwrap();
    let mut found = Vec::new();
    formats(&crd["spec"]["versions"][0]["schema"], "schema", &mut found);
    assert!(!found.is_empty(), "the body has integers");
    for (at, schema) in &found {
        let format = schema["format"].as_str().unwrap_or_default();
        assert!(
            KNOWN_FORMATS.contains(&format),
            "{at}: format {format:?} is unknown to the API server"
        );
        if at.ends_with(".mtu") {
            // The one signed integer: an interface's MTU (spec/rdma.md §3, int32).
            assert_eq!(format, "int32", "{at}");
            assert_eq!(schema.get("minimum"), None, "{at}: minimum");
        } else if matches!(format, "int32" | "int64") {
            // Every other integer of the body is unsigned: it keeps its lower bound.
            assert_eq!(schema["minimum"].as_f64(), Some(0.0), "{at}: minimum");
        }
    }
    let index = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["groups"]["items"]["properties"]["accelerators"]["items"]["properties"]["index"];
    assert_eq!(index["format"], "int32");
    let memory = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["groups"]["items"]["properties"]["memoryMiB"];
    assert_eq!(memory["format"], "int64");
}

#[test]
fn rust_integer_widths_become_int32_or_int64_unsigned_ones_bounded_at_zero() {
    let rewrite = |schema: Value| {
        let mut schema = Schema::try_from(schema).unwrap();
        ApiServerIntegers.transform(&mut schema);
        schema.to_value()
    };
    for (from, to) in [
        ("uint8", "int32"),
        ("uint16", "int32"),
        ("uint32", "int32"),
        ("uint", "int64"),
        ("uint64", "int64"),
        ("uint128", "int64"),
    ] {
        assert_eq!(
            rewrite(json!({"type": "integer", "format": from})),
            json!({"type": "integer", "format": to, "minimum": 0}),
            "{from}"
        );
    }
    for (from, to) in [
        ("int8", "int32"),
        ("int16", "int32"),
        ("int", "int64"),
        ("int128", "int64"),
    ] {
        assert_eq!(
            rewrite(json!({"type": "integer", "format": from})),
            json!({"type": "integer", "format": to}),
            "{from}"
        );
    }
    // A bound already there stays; known formats and schemas without one are left alone.
    assert_eq!(
        rewrite(json!({"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255})),
        json!({"type": "integer", "format": "int32", "minimum": 0, "maximum": 255})
    );
    for unchanged in [
        json!({"type": "integer", "format": "int64"}),
        json!({"type": "number", "format": "double"}),
        json!({"type": "string", "format": "date-time"}),
        json!({"type": "string"}),
    ] {
        assert_eq!(rewrite(unchanged.clone()), unchanged);
    }
}
