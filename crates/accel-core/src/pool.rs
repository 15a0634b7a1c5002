//! What the webhook learns about a queue's pool (DESIGN.md, "The webhook's pool" and `admit
//! --pool`): its group, manufacturer, the accelerator's exact VRAM, the accelerator count and the
//! partition profiles with their VRAM.
//!
//! Every fact is optional: an absent one is what the cluster could not tell, and only a request
//! that needs it is rejected. This module owns the plain shape and how `Devices` specs and node
//! counts fold into it; it never reads the cluster.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::devices::DevicesSpec;
use crate::manufacturer::Manufacturer;

/// The node label prefix of the accelerator feature labels.
pub const FEATURE_LABEL_PREFIX: &str = "acceleratable.feature.gpustack.ai/";

/// The queue label that selects Pods for the webhooks (seed 003).
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// A queue's pool, as far as it is known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// The accelerator group (`nvidia-h100-80gb-hbm3`) the queue's flavors select.
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub manufacturer: Option<Manufacturer>,
    /// The accelerator's VRAM in MiB as the driver reports it.
    #[serde(rename = "memoryMiB", default)]
    pub memory_mib: Option<u64>,
    /// The largest accelerator count of one node in the pool (`<group>.count`).
    #[serde(default)]
    pub count: Option<u64>,
    /// Partition profile → its VRAM in MiB.
    #[serde(default)]
    pub profiles: Option<BTreeMap<String, u64>>,
    /// Why facts are missing, for the messages of the requests that need them (not serialized).
    #[serde(skip)]
    pub unknown_reason: Option<String>,
}

impl Pool {
    /// A pool the cluster could say nothing about, and why.
    pub fn unknown(reason: impl Into<String>) -> Pool {
        Pool {
            unknown_reason: Some(reason.into()),
            ..Pool::default()
        }
    }

    /// The reason given when a needed fact is absent.
    pub fn reason(&self) -> &str {
        self.unknown_reason
            .as_deref()
            .unwrap_or("the pool does not state it")
    }

    /// The node label pinning a shared request: `acceleratable.feature.gpustack.ai/<group>.count`.
    pub fn count_label(group: &str) -> String {
        format!("{FEATURE_LABEL_PREFIX}{group}.count")
    }

    /// Fold a group's `Devices` specs and its nodes' `.count` labels into a pool. The VRAM is the
    /// smallest any accelerator of the group reports (a budget must fit on every one of them),
    /// and a profile's VRAM the smallest reported for it.
    pub fn from_devices<'a>(
        group: &str,
        specs: impl IntoIterator<Item = &'a DevicesSpec>,
        node_counts: impl IntoIterator<Item = u64>,
    ) -> Pool {
        let mut manufacturer = None;
        let mut memory_mib: Option<u64> = None;
        let mut profiles: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = false;
        for spec in specs {
            for g in spec.groups.iter().filter(|g| g.key == group) {
                manufacturer.get_or_insert(g.manufacturer);
                let readings = g
                    .memory_mib
                    .into_iter()
                    .chain(g.accelerators.iter().filter_map(|a| a.memory_mib));
                for m in readings {
                    memory_mib = Some(memory_mib.map_or(m, |cur| cur.min(m)));
                }
                for acc in &g.accelerators {
                    seen = true;
                    for (name, profile) in &acc.partition_profiles {
                        let Some(mib) = profile.memory_mib else {
                            continue;
                        };
                        profiles
                            .entry(name.clone())
                            .and_modify(|cur| *cur = (*cur).min(mib))
                            .or_insert(mib);
                    }
                }
            }
        }
        Pool {
            group: Some(group.to_string()),
            manufacturer,
            memory_mib,
            count: node_counts.into_iter().max(),
            profiles: seen.then_some(profiles),
            unknown_reason: (!seen)
                .then(|| format!("no Devices object lists an accelerator of group {group}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{AcceleratorGroup, DevicesAccelerator, Grantability, PartitionProfile};

    #[test]
    fn admit_pool_shape_reads_as_documented() {
        let pool: Pool = serde_json::from_str(
            r#"{"group":"nvidia-h100-80gb-hbm3","manufacturer":"nvidia","memoryMiB":81559,
                "count":8,"profiles":{"1g.10gb":9984,"3g.40gb":40320}}"#,
        )
        .unwrap();
        assert_eq!(pool.group.as_deref(), Some("nvidia-h100-80gb-hbm3"));
        assert_eq!(pool.manufacturer, Some(Manufacturer::Nvidia));
        assert_eq!(pool.memory_mib, Some(81559));
        assert_eq!(pool.count, Some(8));
        assert_eq!(
            pool.profiles.as_ref().and_then(|p| p.get("3g.40gb")),
            Some(&40320)
        );
        let empty: Pool = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Pool::default());
    }

    #[test]
    fn devices_fold_into_the_smallest_vram_and_the_largest_node() {
        let acc = |memory: u64, profile: Option<u64>| DevicesAccelerator {
            index: 0,
            uuid: None,
            bus_id: None,
            numa_node: None,
            memory_mib: Some(memory),
            healthy: true,
            health_reasons: vec![],
            grantable: Grantability::PartitionsOnly,
            logical_sliced: None,
            super_pod: None,
            partition_profiles: [(
                "1g.10gb".to_string(),
                PartitionProfile {
                    memory_mib: profile,
                    ..PartitionProfile::default()
                },
            )]
            .into(),
        };
        let group = |key: &str, accelerators: Vec<DevicesAccelerator>| AcceleratorGroup {
            manufacturer: Manufacturer::Nvidia,
            key: key.into(),
            product: None,
            memory_mib: accelerators.iter().filter_map(|a| a.memory_mib).min(),
            cores: None,
            driver_version: None,
            runtime_version: None,
            family: None,
            compute_capability: None,
            accelerators,
        };
        let a = DevicesSpec {
            interfaces: None,
            groups: vec![
                group("nvidia-h100-80gb-hbm3", vec![acc(81559, Some(9984))]),
                group("nvidia-tesla-t4", vec![acc(15360, Some(1))]),
            ],
        };
        let b = DevicesSpec {
            interfaces: None,
            groups: vec![group(
                "nvidia-h100-80gb-hbm3",
                vec![acc(81550, Some(9980)), acc(81559, None)],
            )],
        };
        let pool = Pool::from_devices("nvidia-h100-80gb-hbm3", [&a, &b], [8, 4]);
        assert_eq!(pool.manufacturer, Some(Manufacturer::Nvidia));
        assert_eq!(pool.memory_mib, Some(81550));
        assert_eq!(pool.count, Some(8));
        assert_eq!(pool.profiles, Some([("1g.10gb".to_string(), 9980)].into()));
        assert_eq!(pool.unknown_reason, None);
        let none = Pool::from_devices("amd-mi300x", [&a], []);
        assert_eq!(none.memory_mib, None);
        assert!(none.reason().contains("amd-mi300x"));
    }
}
