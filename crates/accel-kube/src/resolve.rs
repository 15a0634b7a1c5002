//! From a queue to its pool, over the objects the caches hold (pure; no API calls).
//!
//! This module owns the reading of Kueue's LocalQueue (`spec.clusterQueue`), ClusterQueue
//! (`spec.resourceGroups[].flavors[].name`) and ResourceFlavor (`spec.nodeLabels`) shapes, the
//! recognition of an accelerator-group label among a flavor's node labels, and the fold of the
//! group's `Devices` specs and node counts into a [`Pool`]. A queue whose flavors name exactly one
//! group has that pool; none or several, the pool is unknown, with the reason.

use std::collections::BTreeSet;

use accel_core::devices::DevicesSpec;
use accel_core::manufacturer::Manufacturer;
use accel_core::pool::{FEATURE_LABEL_PREFIX, Pool};
use serde_json::Value;

/// The attribute suffixes of the per-model feature labels (seed 000, "Detection and the
/// accelerator feature labels"): a key ending in one is an attribute, not the group marker.
const ATTRIBUTE_SUFFIXES: [&str; 8] = [
    ".product",
    ".memory",
    ".cores",
    ".count",
    ".family",
    ".comcap",
    ".driver-version",
    ".runtime-version",
];

/// The accelerator group a node label marks, if it is a group marker
/// (`acceleratable.feature.gpustack.ai/<manufacturer>-<id>: "true"`).
pub fn group_of_label(key: &str, value: &str) -> Option<String> {
    let name = key.strip_prefix(FEATURE_LABEL_PREFIX)?;
    if value != "true" || ATTRIBUTE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return None;
    }
    let (manufacturer, id) = name.split_once('-')?;
    manufacturer.parse::<Manufacturer>().ok()?;
    (!id.is_empty()).then(|| name.to_string())
}

/// The manufacturer a group key starts with.
fn manufacturer_of_group(group: &str) -> Option<Manufacturer> {
    group.split_once('-')?.0.parse().ok()
}

/// The objects the lookup reads, as the caches hold them (each the object's full JSON).
pub trait Objects {
    /// `spec` of LocalQueue `namespace/name`.
    fn local_queue(&self, namespace: &str, name: &str) -> Option<Value>;
    /// `spec` of ClusterQueue `name`.
    fn cluster_queue(&self, name: &str) -> Option<Value>;
    /// `spec` of ResourceFlavor `name`.
    fn resource_flavor(&self, name: &str) -> Option<Value>;
    /// The `spec` of every Devices object labelled with the group's feature key.
    fn devices_of_group(&self, group: &str) -> Vec<Value>;
    /// The value of every node's `<group>.count` label.
    fn node_counts(&self, group: &str) -> Vec<String>;
}

/// The pool behind `namespace/queue`.
pub fn pool(objects: &dyn Objects, namespace: &str, queue: &str) -> Pool {
    let Some(local) = objects.local_queue(namespace, queue) else {
        return Pool::unknown(format!(
            "LocalQueue {namespace}/{queue} is not in the watch cache"
        ));
    };
    let Some(cluster_queue) = local.get("clusterQueue").and_then(Value::as_str) else {
        return Pool::unknown(format!(
            "LocalQueue {namespace}/{queue} names no spec.clusterQueue"
        ));
    };
    let Some(cq) = objects.cluster_queue(cluster_queue) else {
        return Pool::unknown(format!(
            "ClusterQueue {cluster_queue} is not in the watch cache"
        ));
    };
    let flavors: BTreeSet<&str> = cq
        .get("resourceGroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("flavors").and_then(Value::as_array))
        .flatten()
        .filter_map(|f| f.get("name").and_then(Value::as_str))
        .collect();
    let mut groups: BTreeSet<String> = BTreeSet::new();
    for flavor in &flavors {
        let Some(rf) = objects.resource_flavor(flavor) else {
            return Pool::unknown(format!(
                "ResourceFlavor {flavor} of ClusterQueue {cluster_queue} is not in the watch cache"
            ));
        };
        for (key, value) in rf
            .get("nodeLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(group) = value.as_str().and_then(|v| group_of_label(key, v)) {
                groups.insert(group);
            }
        }
    }
    let group = match groups.len() {
        1 => groups.into_iter().next().unwrap_or_default(),
        0 => {
            return Pool::unknown(format!(
                "the flavors of ClusterQueue {cluster_queue} name no accelerator group"
            ));
        }
        _ => {
            let names: Vec<String> = groups.into_iter().collect();
            return Pool::unknown(format!(
                "the flavors of ClusterQueue {cluster_queue} name several accelerator groups [{}]",
                names.join(" ")
            ));
        }
    };
    let specs: Vec<DevicesSpec> = objects
        .devices_of_group(&group)
        .into_iter()
        .filter_map(|spec| serde_json::from_value(spec).ok())
        .collect();
    let counts: Vec<u64> = objects
        .node_counts(&group)
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect();
    let mut pool = Pool::from_devices(&group, specs.iter(), counts);
    if pool.manufacturer.is_none() {
        pool.manufacturer = manufacturer_of_group(&group);
    }
    pool
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fake {
        local: BTreeMap<(String, String), Value>,
        cluster: BTreeMap<String, Value>,
        flavors: BTreeMap<String, Value>,
        devices: Vec<(String, Value)>,
        nodes: Vec<(String, String)>,
    }

    impl Objects for Fake {
        fn local_queue(&self, namespace: &str, name: &str) -> Option<Value> {
            self.local.get(&(namespace.into(), name.into())).cloned()
        }
        fn cluster_queue(&self, name: &str) -> Option<Value> {
            self.cluster.get(name).cloned()
        }
        fn resource_flavor(&self, name: &str) -> Option<Value> {
            self.flavors.get(name).cloned()
        }
        fn devices_of_group(&self, group: &str) -> Vec<Value> {
            self.devices
                .iter()
                .filter(|(g, _)| g == group)
                .map(|(_, s)| s.clone())
                .collect()
        }
        fn node_counts(&self, group: &str) -> Vec<String> {
            self.nodes
                .iter()
                .filter(|(g, _)| g == group)
                .map(|(_, c)| c.clone())
                .collect()
        }
    }

    fn h100_cluster() -> Fake {
        let mut f = Fake::default();
        f.local.insert(
            ("team-a".into(), "h100".into()),
            json!({"clusterQueue": "cq-h100"}),
        );
        f.cluster.insert("cq-h100".into(), json!({"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": "rf-h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}));
        f.flavors.insert(
            "rf-h100".into(),
            json!({"nodeLabels": {
            "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3": "true",
            "acceleratable.feature.gpustack.ai/nvidia": "true",
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}),
        );
        let acc = |index: u32, mem: u64| {
            json!({"index": index, "memoryMiB": mem, "healthy": true, "grantable": "partitionsOnly",
            "partitionProfiles": {"1g.10gb": {"memoryMiB": 9984}, "3g.40gb": {"memoryMiB": 40320}}})
        };
        f.devices.push((
            "nvidia-h100-80gb-hbm3".into(),
            json!({"groups": [{"manufacturer": "nvidia", "key": "nvidia-h100-80gb-hbm3",
                "memoryMiB": 81559, "accelerators": [acc(0, 81559), acc(1, 81559)]}]}),
        ));
        f.nodes.push(("nvidia-h100-80gb-hbm3".into(), "8".into()));
        f.nodes.push(("nvidia-h100-80gb-hbm3".into(), "2".into()));
        f
    }

    #[test]
    fn a_queue_with_one_group_has_its_pool() {
        let pool = pool(&h100_cluster(), "team-a", "h100");
        let expected: Pool = serde_json::from_value(
            json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia",
            "memoryMiB": 81559, "count": 8, "profiles": {"1g.10gb": 9984, "3g.40gb": 40320}}),
        )
        .unwrap();
        assert_eq!(pool, expected);
    }

    #[test]
    fn group_markers_are_told_from_attributes() {
        assert_eq!(
            group_of_label("acceleratable.feature.gpustack.ai/nvidia-tesla-t4", "true").as_deref(),
            Some("nvidia-tesla-t4")
        );
        assert_eq!(
            group_of_label(
                "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count",
                "true"
            ),
            None
        );
        assert_eq!(
            group_of_label("acceleratable.feature.gpustack.ai/nvidia", "true"),
            None
        );
        assert_eq!(
            group_of_label(
                "acceleratable.feature.gpustack.ai/nvidia.driver-version",
                "true"
            ),
            None
        );
        assert_eq!(
            group_of_label("acceleratable.feature.gpustack.ai/nvidia-tesla-t4", "false"),
            None
        );
        assert_eq!(
            group_of_label("feature.gpustack.ai/nvidia-tesla-t4", "true"),
            None
        );
        assert_eq!(
            group_of_label("acceleratable.feature.gpustack.ai/intel-arc", "true"),
            None
        );
    }

    #[test]
    fn unknown_pools_say_why() {
        let f = h100_cluster();
        assert_eq!(
            pool(&f, "team-b", "h100").reason(),
            "LocalQueue team-b/h100 is not in the watch cache"
        );
        let mut g = h100_cluster();
        g.local.insert(
            ("team-a".into(), "h100".into()),
            json!({"clusterQueue": "cq-x"}),
        );
        assert_eq!(
            pool(&g, "team-a", "h100").reason(),
            "ClusterQueue cq-x is not in the watch cache"
        );
        let mut two = h100_cluster();
        two.flavors.insert(
            "rf-t4".into(),
            json!({"nodeLabels": {"acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true"}}),
        );
        two.cluster.insert(
            "cq-h100".into(),
            json!({"resourceGroups": [{"flavors": [{"name": "rf-h100"}, {"name": "rf-t4"}]}]}),
        );
        let p = pool(&two, "team-a", "h100");
        assert_eq!(p.group, None);
        assert_eq!(
            p.reason(),
            "the flavors of ClusterQueue cq-h100 name several accelerator groups [nvidia-h100-80gb-hbm3 nvidia-tesla-t4]"
        );
        let mut cpu = h100_cluster();
        cpu.flavors.insert(
            "rf-h100".into(),
            json!({"nodeLabels": {"kubernetes.io/os": "linux"}}),
        );
        assert_eq!(
            pool(&cpu, "team-a", "h100").reason(),
            "the flavors of ClusterQueue cq-h100 name no accelerator group"
        );
    }

    #[test]
    fn a_group_without_devices_keeps_its_group_for_the_pin() {
        let mut f = h100_cluster();
        f.devices.clear();
        let p = pool(&f, "team-a", "h100");
        assert_eq!(p.group.as_deref(), Some("nvidia-h100-80gb-hbm3"));
        assert_eq!(p.manufacturer, Some(Manufacturer::Nvidia));
        assert_eq!(p.memory_mib, None);
        assert_eq!(
            p.reason(),
            "no Devices object lists an accelerator of group nvidia-h100-80gb-hbm3"
        );
    }
}
