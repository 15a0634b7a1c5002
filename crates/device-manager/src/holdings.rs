//! Who holds which accelerator, read from the ledger: one [`Holding`] per grant and accelerator
//! it charges, named by the Pod it was made for, with the slice's budget or the partition's
//! profile; and each accelerator's [`Occupied`] share as the ledger counts it. The daemon's
//! `ledger_*` gauges export them (`daemon::metrics::LedgerMetrics`) and `monitor` prints the
//! holdings beside each accelerator's usage.
//!
//! Pure: the grants, the accelerators and a way to name a grant's Pod come in, rows go out.
//! Where a Pod's name comes from (the daemon's Pod watch, the kubelet's pod-resources answer) is
//! the caller's; a grant whose Pod cannot be named keeps its Pod UID. Nothing here decides
//! anything about a grant.

use std::collections::BTreeMap;

use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::units::{UNITS_PER_ACCELERATOR, mib_for_units};
use accel_core::ledger::{Family, Grant, GrantKey, Ledger, Occupancy, Seat};
use accel_plugin::api::podresources::ListPodResourcesResponse;

/// The container a grant was made for, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.pod, self.container)
    }
}

/// What the ledger knows of one accelerator besides its index: its identity and its VRAM
/// (which turns a slice's units back into MiB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Card {
    pub uuid: Option<String>,
    pub memory_mib: Option<u64>,
}

/// The cards of the ledger's seats, by index.
pub fn cards_of_seats<'a>(seats: impl IntoIterator<Item = &'a Seat>) -> BTreeMap<u32, Card> {
    seats
        .into_iter()
        .map(|s| {
            let card = Card {
                uuid: s.uuid.clone(),
                memory_mib: s.memory_mib,
            };
            (s.index, card)
        })
        .collect()
}

/// The cards of a detected section, by index (the index the ledger's grants name).
pub fn cards_of_inventory(accelerators: &[Accelerator]) -> BTreeMap<u32, Card> {
    accelerators
        .iter()
        .map(|a| {
            let card = Card {
                uuid: a.uuid.clone(),
                memory_mib: a.memory_mib,
            };
            (a.index, card)
        })
        .collect()
}

/// One grant's hold on one accelerator.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub manufacturer: Manufacturer,
    pub index: u32,
    pub uuid: Option<String>,
    /// The Pod's UID; empty for a grant answered before its container was named.
    pub pod_uid: String,
    /// The container as the grant's key names it; `None` before it was named.
    pub container: Option<String>,
    /// The container by name, where the Pod could be named.
    pub holder: Option<Holder>,
    pub family: Family,
    /// The Kubernetes resource the grant was served under.
    pub resource: String,
    /// A slice's memory budget, or a partition's profile VRAM, in MiB, on this accelerator
    /// (its units turned back into MiB with the accelerator's VRAM); `None` for exclusive and
    /// shared grants and where the VRAM is unknown.
    pub memory_mib: Option<u64>,
    /// A slice's compute cap, in percent.
    pub cores_percentage: Option<u32>,
    /// A partition's profile as the vendor spells it (`3g.40gb`).
    pub profile: Option<String>,
}

impl Holding {
    /// Who holds it, for a person: `namespace/pod/container`, else `pod <uid> container <c>`,
    /// else that the container is not named yet.
    pub fn who(&self) -> String {
        match (&self.holder, &self.container) {
            (Some(holder), _) => holder.to_string(),
            (None, Some(container)) => format!("pod {} container {container}", self.pod_uid),
            (None, None) => "(container not named yet)".to_string(),
        }
    }
}

/// Every grant of `grants` on every accelerator it charges, in grant order then accelerator
/// order. `cards` gives each index its identity and VRAM; `name` names a grant's container.
pub fn holdings(
    manufacturer: Manufacturer,
    grants: &BTreeMap<GrantKey, Grant>,
    cards: &BTreeMap<u32, Card>,
    name: impl Fn(&GrantKey, &Grant) -> Option<Holder>,
) -> Vec<Holding> {
    let mut rows = Vec::new();
    for (key, grant) in grants {
        let holder = name(key, grant);
        let budgeted = matches!(grant.family, Family::Sliced | Family::Partitioned);
        for index in &grant.accelerators {
            let card = cards.get(index);
            rows.push(Holding {
                manufacturer,
                index: *index,
                uuid: card.and_then(|c| c.uuid.clone()),
                pod_uid: key.claim_pod().unwrap_or(&key.pod_uid).to_string(),
                container: (!key.is_unattributed()).then(|| container_of(key)),
                holder: holder.clone(),
                family: grant.family,
                resource: grant.resource.clone(),
                memory_mib: card
                    .and_then(|c| c.memory_mib)
                    .filter(|_| budgeted)
                    .map(|vram| mib_for_units(grant.units, vram)),
                cores_percentage: grant
                    .cores_percentage
                    .filter(|_| grant.family == Family::Sliced),
                profile: grant.partition.as_ref().map(|p| p.profile.clone()),
            });
        }
    }
    rows
}

/// What a grant's holder is called in its Pod: its container, or for a DRA claim's grant
/// (held by the claim, for the Pod it was prepared for) the claim key's own first part,
/// `resourceclaim:<uid>`.
fn container_of(key: &GrantKey) -> String {
    match key.claim_pod() {
        Some(_) => key.pod_uid.clone(),
        None => key.container.clone(),
    }
}

/// Names a grant's container by its Pod UID among `pods` (the daemon's Pod watch).
pub fn name_by_uid<'a>(
    pods: impl IntoIterator<Item = &'a accel_plugin::pods::Pod>,
) -> impl Fn(&GrantKey, &Grant) -> Option<Holder> {
    let names: BTreeMap<String, (String, String)> = pods
        .into_iter()
        .map(|p| (p.uid.clone(), (p.namespace.clone(), p.name.clone())))
        .collect();
    move |key: &GrantKey, _: &Grant| {
        if key.is_unattributed() {
            return None;
        }
        names
            .get(key.claim_pod().unwrap_or(&key.pod_uid))
            .map(|(namespace, pod)| Holder {
                namespace: namespace.clone(),
                pod: pod.clone(),
                container: container_of(key),
            })
    }
}

/// Names a grant's container by the kubelet's pod-resources answer: the container the kubelet
/// gave exactly the grant's device IDs of the grant's resource (the kubelet names no Pod UID).
pub fn name_by_kubelet(
    answer: &ListPodResourcesResponse,
) -> impl Fn(&GrantKey, &Grant) -> Option<Holder> + use<> {
    let mut held: BTreeMap<(String, Vec<String>), Holder> = BTreeMap::new();
    for pod in &answer.pod_resources {
        for container in &pod.containers {
            for devices in &container.devices {
                let mut ids = devices.device_ids.clone();
                ids.sort();
                let holder = Holder {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: container.name.clone(),
                };
                held.insert((devices.resource_name.clone(), ids), holder);
            }
        }
    }
    move |_: &GrantKey, grant: &Grant| {
        held.get(&(grant.resource.clone(), grant.device_ids.clone()))
            .cloned()
    }
}

/// One accelerator's occupancy in the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Occupied {
    pub manufacturer: Manufacturer,
    pub index: u32,
    pub uuid: Option<String>,
    /// The units charged, as a percent of the accelerator (above 100 only when the slice gate
    /// is off).
    pub used_percent: f64,
    /// Ownership shares taken (of 10).
    pub shares: u32,
    /// Logical slices taken.
    pub slices: u32,
    /// Grants that charge it.
    pub holders: u32,
}

/// Every seat of `ledger` with its occupancy (a seat nobody holds is free: all zeros).
pub fn occupancy(manufacturer: Manufacturer, ledger: &Ledger) -> Vec<Occupied> {
    ledger
        .seats()
        .map(|seat| {
            let o = ledger.occupancy(seat.index).unwrap_or(&Occupancy::FREE);
            Occupied {
                manufacturer,
                index: seat.index,
                uuid: seat.uuid.clone(),
                used_percent: o.used_units as f64 * 100.0 / UNITS_PER_ACCELERATOR as f64,
                shares: o.shares,
                slices: o.slices,
                holders: o.holders,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::ledger::partitions::PartitionPlacement;
    use accel_plugin::api::podresources as pr;

    fn grant(family: Family, resource: &str, ids: &[&str], on: &[u32], units: u64) -> Grant {
        Grant {
            family,
            resource: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            accelerators: on.to_vec(),
            units,
            cores_percentage: None,
            finished: false,
            partition: None,
        }
    }

    fn cards() -> BTreeMap<u32, Card> {
        (0..2)
            .map(|i| {
                let card = Card {
                    uuid: Some(format!("GPU-{i}")),
                    memory_mib: Some(81_559),
                };
                (i, card)
            })
            .collect()
    }

    #[test]
    fn each_accelerator_of_a_grant_is_a_holding_with_the_slices_budget_or_the_profile() {
        let mut grants = BTreeMap::new();
        grants.insert(
            GrantKey::new("uid-a", "main"),
            grant(
                Family::Exclusive,
                "nvidia.com/gpu",
                &["GPU-0", "GPU-1"],
                &[0, 1],
                0,
            ),
        );
        let mut slice = grant(
            Family::Sliced,
            "nvidia.com/gpu.sliced",
            &["s-1"],
            &[1],
            400_000,
        );
        slice.cores_percentage = Some(50);
        grants.insert(GrantKey::new("uid-b", "infer"), slice);
        let mut part = grant(
            Family::Partitioned,
            "nvidia.com/gpu.partitioned",
            &["p"],
            &[0],
            0,
        );
        part.units = 800_000;
        part.partition = Some(PartitionPlacement {
            profile: "3g.40gb".into(),
            start: 0,
            size: 4,
            instance: None,
        });
        grants.insert(GrantKey::new("uid-c", "train"), part);
        // A DRA claim's card, named by the Pod it was prepared for.
        grants.insert(
            GrantKey::claim("claim-9", "uid-a"),
            grant(Family::Exclusive, "nvidia.gpustack.ai", &["gpu-1"], &[1], 0),
        );
        let pods = [accel_plugin::testing::pod("uid-a", 1, &[])];
        let rows = holdings(Manufacturer::Nvidia, &grants, &cards(), name_by_uid(&pods));
        let who: Vec<(u32, String, Family)> =
            rows.iter().map(|h| (h.index, h.who(), h.family)).collect();
        assert_eq!(
            who,
            [
                // Claim keys sort first.
                (
                    1,
                    "ns/pod-uid-a/resourceclaim:claim-9".to_string(),
                    Family::Exclusive
                ),
                (0, "ns/pod-uid-a/main".to_string(), Family::Exclusive),
                (1, "ns/pod-uid-a/main".to_string(), Family::Exclusive),
                (1, "pod uid-b container infer".to_string(), Family::Sliced),
                (
                    0,
                    "pod uid-c container train".to_string(),
                    Family::Partitioned
                ),
            ]
        );
        assert_eq!(rows[0].pod_uid, "uid-a");
        let rows = &rows[1..];
        assert_eq!(rows[0].memory_mib, None, "an exclusive grant has no budget");
        assert_eq!(rows[0].uuid.as_deref(), Some("GPU-0"));
        // 25 % of 81,559 MiB, floored, as the preload library is told.
        assert_eq!(
            (rows[2].memory_mib, rows[2].cores_percentage),
            (Some(20_389), Some(50))
        );
        assert_eq!(rows[3].profile.as_deref(), Some("3g.40gb"));
        assert_eq!(rows[3].memory_mib, Some(40_779));
        assert_eq!(rows[3].cores_percentage, None);
    }

    #[test]
    fn the_kubelet_names_a_grant_by_its_resource_and_device_ids_even_before_the_daemon_did() {
        let mut grants = BTreeMap::new();
        let ids = ["GPU-1::3", "GPU-0::1"];
        let mut sorted = ids.map(str::to_string).to_vec();
        sorted.sort();
        grants.insert(
            GrantKey::unattributed("nvidia.com/gpu.shared", &sorted),
            grant(Family::Shared, "nvidia.com/gpu.shared", &[], &[0, 1], 0),
        );
        grants
            .values_mut()
            .for_each(|g| g.device_ids = sorted.clone());
        let answer = pr::ListPodResourcesResponse {
            pod_resources: vec![pr::PodResources {
                name: "web".into(),
                namespace: "team-a".into(),
                containers: vec![pr::ContainerResources {
                    name: "server".into(),
                    devices: vec![pr::ContainerDevices {
                        resource_name: "nvidia.com/gpu.shared".into(),
                        device_ids: ids.map(str::to_string).to_vec(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }],
        };
        let rows = holdings(
            Manufacturer::Nvidia,
            &grants,
            &cards(),
            name_by_kubelet(&answer),
        );
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|h| h.who() == "team-a/web/server"));
        assert!(
            rows.iter()
                .all(|h| h.container.is_none() && h.pod_uid.is_empty())
        );
        let unnamed = holdings(
            Manufacturer::Nvidia,
            &grants,
            &cards(),
            name_by_kubelet(&Default::default()),
        );
        assert_eq!(unnamed[0].who(), "(container not named yet)");
    }
}
