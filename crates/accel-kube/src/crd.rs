//! The cluster objects the node daemon writes, as kube types: the `Devices` custom resource
//! (`gpustack.ai/v1`, cluster-scoped, named after its node, with a status subresource), whose
//! body is accel-core's plain [`DevicesSpec`] and [`DevicesStatus`], and NFD's `NodeFeature`
//! (`nfd.k8s-sigs.io/v1alpha1`, namespaced), of which only `spec.labels` is ours.
//!
//! This module owns the wrappers and the generated CRD document ([`devices_crd_yaml`]); the shape
//! of the body is accel-core's. The schema is schemars' derived one with one rewrite
//! ([`ApiServerIntegers`]): the Rust widths (`uint32`, `uint64`, `uint8` …) become the integer
//! formats the API server knows (`int32`, `int64`), unsigned ones keeping `minimum: 0`, so
//! `kubectl apply` and `helm install` print no `unrecognized format` warning. It makes no API
//! call.

use std::borrow::Cow;
use std::collections::BTreeMap;

use accel_core::devices::{DevicesSpec, DevicesStatus};
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// The body of `Devices.spec`: what the node has, per accelerator group (accel-core's
/// `DevicesSpec`, unchanged on the wire).
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gpustack.ai",
    version = "v1",
    kind = "Devices",
    plural = "devices",
    singular = "devices",
    doc = "One node's accelerators: what it has (spec) and the ledger of who holds them (status). Named after its node and owned by it.",
    status = "DevicesStatus",
    schema = "manual",
    printcolumn = r#"{"name":"Groups","type":"string","jsonPath":".spec.groups[*].key"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct DevicesBody(pub DevicesSpec);

/// The shape of the `Devices` object the schema describes (what kube's derive would describe:
/// `metadata`, `apiVersion` and `kind` are the API server's), before [`ApiServerIntegers`].
#[derive(JsonSchema)]
#[schemars(
    rename = "Devices",
    description = "One node's accelerators: what it has (spec) and the ledger of who holds them (status). Named after its node and owned by it."
)]
#[allow(dead_code)]
struct DevicesShape {
    spec: DevicesBody,
    status: Option<DevicesStatus>,
}

impl JsonSchema for Devices {
    fn schema_name() -> Cow<'static, str> {
        DevicesShape::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = DevicesShape::json_schema(generator);
        RecursiveTransform(ApiServerIntegers).transform(&mut schema);
        schema
    }
}

/// Rewrites schemars' integer formats to the two the API server knows: the widths up to 32 bits
/// (`int8`, `uint16`, `uint32` …) to `int32`, wider ones (`uint64`, `int128`, `uint` …) to
/// `int64`; an unsigned one keeps (or gains) `minimum: 0`. Other formats are left alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiServerIntegers;

impl Transform for ApiServerIntegers {
    fn transform(&mut self, schema: &mut Schema) {
        let Some(format) = schema.get("format").and_then(|f| f.as_str()) else {
            return;
        };
        let (known, unsigned) = match format {
            "int8" | "int16" => ("int32", false),
            "uint8" | "uint16" | "uint32" => ("int32", true),
            "int" | "int128" => ("int64", false),
            "uint" | "uint64" | "uint128" => ("int64", true),
            _ => return,
        };
        schema.insert("format".into(), known.into());
        if unsigned && schema.get("minimum").is_none() {
            schema.insert("minimum".into(), 0.into());
        }
    }
}

/// The label NFD reads to know which node a NodeFeature describes.
pub const NFD_NODE_NAME_LABEL: &str = "nfd.node.kubernetes.io/node-name";

/// The suffix of the daemon's NodeFeature name (`${NODE_NAME}-gpustack-device-manager`).
pub const NODE_FEATURE_SUFFIX: &str = "-gpustack-device-manager";

/// The raw feature the daemon's NodeFeature carries where it found accelerators, for the
/// `gpustack-cpu-info` rule to match (see [`crate::nfr`]: why the daemon's `true` wins).
pub const DEVICE_MANAGER_FEATURE: &str = "gpustack.device-manager";
/// The element of [`DEVICE_MANAGER_FEATURE`]: `"true"` when accelerators were found.
pub const ACCELERATABLE_ELEMENT: &str = "acceleratable";

/// NFD's raw features of a NodeFeature (`spec.features`), as far as we write them: attribute
/// feature sets (name → elements).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFeatureFeatures {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, AttributeFeatureSet>,
}

impl NodeFeatureFeatures {
    pub fn is_empty(&self) -> bool {
        self.attributes.is_empty()
    }

    /// The features a node publishing `labels` carries: [`DEVICE_MANAGER_FEATURE`] when the
    /// labels say the node is acceleratable, else none.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        let acceleratable = labels
            .get(accel_core::labels::ACCELERATABLE)
            .is_some_and(|v| v == "true");
        let mut features = NodeFeatureFeatures::default();
        if acceleratable {
            features.attributes.insert(
                DEVICE_MANAGER_FEATURE.to_string(),
                AttributeFeatureSet {
                    elements: BTreeMap::from([(
                        ACCELERATABLE_ELEMENT.to_string(),
                        "true".to_string(),
                    )]),
                },
            );
        }
        features
    }
}

/// One attribute feature set: element name → value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttributeFeatureSet {
    #[serde(default)]
    pub elements: BTreeMap<String, String>,
}

/// NFD's `NodeFeature.spec`, as far as we write it: the labels NFD puts on the node, and the raw
/// features the `gpustack-cpu-info` rule reads.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "nfd.k8s-sigs.io",
    version = "v1alpha1",
    kind = "NodeFeature",
    plural = "nodefeatures",
    namespaced,
    schema = "disabled"
)]
pub struct NodeFeatureSpec {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "NodeFeatureFeatures::is_empty")]
    pub features: NodeFeatureFeatures,
}

/// The name of a node's NodeFeature.
pub fn node_feature_name(node: &str) -> String {
    format!("{node}{NODE_FEATURE_SUFFIX}")
}

/// The header of the generated CRD file.
const GENERATED_HEADER: &str = "# Generated from accel-kube's Devices type (crates/accel-kube/src/crd.rs); do not edit.\n\
# Regenerate: ACCEL_KUBE_REGENERATE=1 cargo test -p accel-kube --test crd\n";

/// The `Devices` CustomResourceDefinition as YAML, as committed in the Helm chart's `crds/`.
pub fn devices_crd_yaml() -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(&Devices::crd())?;
    Ok(format!("{GENERATED_HEADER}{body}"))
}
