//! The `gpustack-cpu-info` NodeFeatureRule (seed 000, "The `gpustack-cpu-info` NodeFeatureRule"),
//! which the worker applies at start-up in every installation mode. It does two of NFD's jobs:
//!
//! - **Job 2, CPU identity**: the `feature.gpustack.ai/cpu-*` annotations, each an `@cpu.model.*`
//!   reference NFD fills from its `cpu.model` feature. A reference NFD cannot resolve stays
//!   verbatim, which is why a value leading with `@` counts as unreported (accel-core's `cpukey`).
//! - **Job 3, the non-accelerated marker**: `feature.gpustack.ai/acceleratable: "false"` on a node
//!   with no PCI display/accelerator-class device (classes `02`, `03`, `0b`, `12`) of a configured
//!   vendor id (the manufacturers table in force, `GPUSTACK_<MANUFACTURER>_PCI_VENDOR_ID`
//!   applied). NFD rules cannot say "no device matches", so a first rule sets a variable when
//!   one does, and the marker rule matches the variable's absence through NFD's `rule.matched`
//!   backreference.
//!
//! **Why the daemon's `true` wins.** nfd-master builds a node's labels from its NodeFeature
//! objects first and then runs the NodeFeatureRules over the merged features, a rule's labels
//! overwriting what the objects asked for (NFD's documented order: NodeFeature labels, then
//! rule labels). A marker rule that fired on a node whose daemon publishes
//! `acceleratable: "true"` (a card NFD's PCI scan missed, a vendor id configured after NFD
//! labelled) would therefore win. So the daemon's NodeFeature also carries a raw feature,
//! [`crate::crd::DEVICE_MANAGER_FEATURE`] `{acceleratable: "true"}`, which NFD merges into the
//! node's features, and the presence rule matches it as well as the PCI devices (`matchAny`):
//! the marker never fires where a daemon found accelerators.
//!
//! This module only builds the object, from the manufacturers table (the one place vendor ids
//! live); applying it is [`crate::worker`]'s.

use accel_core::cpukey::ANNOTATION_PREFIX;
use accel_core::labels::ACCELERATABLE;
use accel_core::manufacturer::ManufacturerTable;
use kube::api::ApiResource;
use serde_json::{Value, json};

use crate::crd::{ACCELERATABLE_ELEMENT, DEVICE_MANAGER_FEATURE};

/// The rule object's name.
pub const NAME: &str = "gpustack-cpu-info";

/// NFD's API group and version for NodeFeatureRule.
pub const NFD_API: (&str, &str) = ("nfd.k8s-sigs.io", "v1alpha1");

/// The variable the first rule sets when a known manufacturer's accelerator is present.
const ACCELERATED_VAR: &str = "gpustack-accelerated";

/// The PCI classes NFD's `deviceClassWhitelist` keeps and the device manager's own scan reads
/// (seed 000, "Job 1"): network, display, processor, processing accelerator.
const PCI_CLASS_PATTERN: &str = "^(02|03|0b|12)";

/// Each CPU-detail annotation's name suffix (after `feature.gpustack.ai/cpu-`) and the `cpu.model`
/// attribute NFD fills it from, in seed 000's order.
pub const CPU_ANNOTATIONS: [(&str, &str); 13] = [
    ("name", "name"),
    ("family", "family"),
    ("physical-cores", "physical_cores"),
    ("threads-per-core", "threads_per_core"),
    ("logical-cores", "logical_cores"),
    ("stepping", "stepping"),
    ("cache-line", "cache_line"),
    ("hz", "hz"),
    ("boost-freq", "boost_freq"),
    ("cache-l1i", "cache_l1i"),
    ("cache-l1d", "cache_l1d"),
    ("cache-l2", "cache_l2"),
    ("cache-l3", "cache_l3"),
];

/// The NodeFeatureRule resource (cluster-scoped).
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: NFD_API.0.to_string(),
        version: NFD_API.1.to_string(),
        api_version: format!("{}/{}", NFD_API.0, NFD_API.1),
        kind: "NodeFeatureRule".to_string(),
        plural: "nodefeaturerules".to_string(),
    }
}

/// The default PCI vendor ids of the nine manufacturers, lower-case hex as NFD reports them,
/// sorted.
pub fn known_vendor_ids() -> Vec<String> {
    ManufacturerTable::default().vendor_ids_hex()
}

/// The whole `gpustack-cpu-info` object of the default manufacturers table.
pub fn cpu_info_rule() -> Value {
    cpu_info_rule_for(&ManufacturerTable::default())
}

/// The whole `gpustack-cpu-info` object, ready to apply, matching the configured vendor ids.
pub fn cpu_info_rule_for(table: &ManufacturerTable) -> Value {
    let annotations: serde_json::Map<String, Value> = CPU_ANNOTATIONS
        .iter()
        .map(|(suffix, attribute)| {
            (
                format!("{ANNOTATION_PREFIX}{suffix}"),
                Value::String(format!("@cpu.model.{attribute}")),
            )
        })
        .collect();
    json!({
        "apiVersion": format!("{}/{}", NFD_API.0, NFD_API.1),
        "kind": "NodeFeatureRule",
        "metadata": {
            "name": NAME,
            "labels": {"app.kubernetes.io/managed-by": "gpustack-device-manager"},
        },
        "spec": {
            "rules": [
                {
                    "name": "gpustack cpu identity",
                    "annotations": annotations,
                    "matchFeatures": [
                        {"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}
                    ],
                },
                {
                    "name": "gpustack known accelerator present",
                    "vars": {ACCELERATED_VAR: "true"},
                    "matchAny": [
                        {
                            "matchFeatures": [
                                {
                                    "feature": "pci.device",
                                    "matchExpressions": {
                                        "vendor": {"op": "In", "value": table.vendor_ids_hex()},
                                        "class": {"op": "InRegexp", "value": [PCI_CLASS_PATTERN]},
                                    },
                                }
                            ]
                        },
                        {
                            "matchFeatures": [
                                {
                                    "feature": DEVICE_MANAGER_FEATURE,
                                    "matchExpressions": {
                                        ACCELERATABLE_ELEMENT: {"op": "IsTrue"},
                                    },
                                }
                            ]
                        },
                    ],
                },
                {
                    "name": "gpustack not acceleratable",
                    "labels": {ACCELERATABLE: "false"},
                    "matchFeatures": [
                        {
                            "feature": "rule.matched",
                            "matchExpressions": {ACCELERATED_VAR: {"op": "DoesNotExist"}},
                        }
                    ],
                },
            ]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_manufacturer_vendor_is_matched() {
        assert_eq!(
            known_vendor_ids(),
            [
                "1002", "10de", "19e5", "1d94", "1ded", "1e3e", "1ed5", "9999", "cabc"
            ]
        );
        let rule = cpu_info_rule();
        let vendors = &rule["spec"]["rules"][1]["matchAny"][0]["matchFeatures"][0]["matchExpressions"]
            ["vendor"];
        assert_eq!(vendors["op"], "In");
        assert_eq!(vendors["value"].as_array().map(Vec::len), Some(9));
    }

    #[test]
    fn the_seeds_annotations_and_marker() {
        let rule = cpu_info_rule();
        let annotations = rule["spec"]["rules"][0]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for key in [
            "feature.gpustack.ai/cpu-name",
            "feature.gpustack.ai/cpu-family",
            "feature.gpustack.ai/cpu-physical-cores",
            "feature.gpustack.ai/cpu-threads-per-core",
            "feature.gpustack.ai/cpu-logical-cores",
            "feature.gpustack.ai/cpu-stepping",
            "feature.gpustack.ai/cpu-cache-line",
            "feature.gpustack.ai/cpu-hz",
            "feature.gpustack.ai/cpu-boost-freq",
            "feature.gpustack.ai/cpu-cache-l1i",
            "feature.gpustack.ai/cpu-cache-l1d",
            "feature.gpustack.ai/cpu-cache-l2",
            "feature.gpustack.ai/cpu-cache-l3",
        ] {
            let value = annotations[key].as_str().unwrap_or_default();
            assert!(value.starts_with("@cpu.model."), "{key}: {value}");
        }
        assert_eq!(annotations.len(), 13);
        let marker = &rule["spec"]["rules"][2];
        assert_eq!(
            marker["labels"]["feature.gpustack.ai/acceleratable"],
            "false"
        );
        assert_eq!(marker["matchFeatures"][0]["feature"], "rule.matched");
        assert_eq!(
            marker["matchFeatures"][0]["matchExpressions"][ACCELERATED_VAR]["op"],
            "DoesNotExist"
        );
        assert_eq!(
            rule["spec"]["rules"][1]["vars"][ACCELERATED_VAR], "true",
            "the marker's condition is the variable the vendor rule sets"
        );
    }
}
