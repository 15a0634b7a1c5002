//! Partition geometry as the ledger counts it (seed 000 "The partitioned family: fungible
//! tokens"; spec §1.2, §1.10, §1.11): pure interval arithmetic over memory slices, no driver.
//!
//! An accelerator in a hardware partitioning mode offers profiles ([`PartitionShape`]: a size in
//! memory slices and the legal starts). An instance occupies `[start, start + size)`; a profile
//! fits at a legal start that overlaps no occupied interval. From that:
//! - a profile's *placeable* count beside what is occupied is the number placed greedily from
//!   the lowest start ([`free_count`]);
//! - the partitioned pool's healthy tokens on one accelerator are its allocated instances plus
//!   its largest per-profile placeable count ([`room`]); the stable token set per accelerator is
//!   its largest per-profile total ([`token_ceiling`]);
//! - a profile's node capacity key is Σ over partitioned accelerators of (allocated of that
//!   profile + placeable), every offered profile listed ([`node_profiles`]).
//!
//! The occupied intervals are those of the partition grants that charge the accelerator (an
//! instance being reclaimed keeps its grant, so it stays occupied until it is destroyed), plus
//! the live instances no grant accounts for that the ledger was told of ([`Outside`]: carved by
//! hand, left by a lost record, or subdivided). An outside instance a new grant could be handed
//! ([`Outside::claimable`]) also counts as room for its profile: one more token, and one more of
//! its profile's capacity; one that overlaps a grant is the grant's own instance seen before
//! the book caught up, and is not counted twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Family, GrantKey, Ledger, Seat};
use crate::devices::PartitionOccupancy;
use crate::inventory::{Accelerator, Grantable};

/// One profile an accelerator offers: its name as the vendor spells it, its VRAM, its size in
/// memory slices and its legal starts (ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionShape {
    /// The vendor's profile id (what a create names).
    pub id: u32,
    pub name: String,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub size: u32,
    pub starts: Vec<u32>,
}

/// Where one partition grant sits, and what makes it (the durable record's instance facts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionPlacement {
    /// The profile as the vendor spells it (`3g.40gb`).
    pub profile: String,
    pub start: u32,
    pub size: u32,
    /// The instance made for it, once made: GPU instance id, compute instance id and the
    /// device UUID (`MIG-…`). `None` while it is only reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<PartitionInstance>,
}

/// The instance behind a partition grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionInstance {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub uuid: String,
}

/// A live instance on an accelerator that no partition grant accounts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    /// The profile as the vendor spells it.
    pub profile: String,
    pub start: u32,
    pub size: u32,
    /// Whether a new grant of its profile can be handed it (one compute instance with a device,
    /// not being destroyed, its accelerator not stopped by a subdivided instance).
    pub claimable: bool,
}

/// The accelerator and start a new `profile` instance takes: among the healthy partitioned
/// accelerators offering it with a free start, the most occupied (most memory slices taken,
/// outside instances included: packed, not spread, so a sibling stays whole for a large
/// profile), ties by index; there, the lowest free start. `Err` says, per accelerator, why none
/// fits.
pub fn choose(ledger: &Ledger, profile: &str) -> Result<(u32, PartitionShape, u32), String> {
    let mut best: Option<(u32, u32, PartitionShape, u32)> = None;
    let mut why = Vec::new();
    for seat in ledger.seats() {
        if seat.grantable != Grantable::PartitionsOnly {
            continue;
        }
        let name = ledger.describe(seat.index);
        let Some(shape) = seat.partitions.iter().find(|p| p.name == profile) else {
            why.push(format!("GPU {name} does not offer it"));
            continue;
        };
        if !seat.healthy {
            why.push(format!("GPU {name} is unhealthy"));
            continue;
        }
        let taken = taken(ledger, seat.index);
        let Some(start) = free_starts(shape.size, &shape.starts, &taken)
            .first()
            .copied()
        else {
            why.push(format!(
                "GPU {name} has no free start among {:?} (taken {taken:?})",
                shape.starts
            ));
            continue;
        };
        let used: u32 = taken.iter().map(|(_, size)| size).sum();
        if best.as_ref().is_none_or(|(u, _, _, _)| used > *u) {
            best = Some((used, seat.index, shape.clone(), start));
        }
    }
    match best {
        Some((_, index, shape, start)) => Ok((index, shape, start)),
        None if why.is_empty() => Err("no GPU on this node is in MIG mode".to_string()),
        None => Err(why.join("; ")),
    }
}

/// The shapes of an inventory accelerator's partition profiles (those with a placement).
pub fn shapes_of(accelerator: &Accelerator) -> Vec<PartitionShape> {
    accelerator
        .partition_profiles
        .iter()
        .filter_map(|p| {
            let size = p.placements.first()?.size;
            let mut starts: Vec<u32> = p
                .placements
                .iter()
                .filter(|pl| pl.size == size)
                .map(|pl| pl.start)
                .collect();
            starts.sort_unstable();
            starts.dedup();
            Some(PartitionShape {
                id: p.id,
                name: p.name.clone(),
                memory_mib: p.memory_mib,
                size,
                starts,
            })
        })
        .collect()
}

/// Whether two `(start, size)` intervals overlap.
pub fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// The legal starts of a `size`-slice profile at which it overlaps none of `occupied`.
pub fn free_starts(size: u32, starts: &[u32], occupied: &[(u32, u32)]) -> Vec<u32> {
    starts
        .iter()
        .copied()
        .filter(|s| occupied.iter().all(|o| !overlaps((*s, size), *o)))
        .collect()
}

/// How many instances of a profile still fit beside `occupied`, placed from the lowest start.
pub fn free_count(size: u32, starts: &[u32], occupied: &[(u32, u32)]) -> u32 {
    let mut taken = occupied.to_vec();
    let mut count = 0;
    for start in starts {
        if taken.iter().all(|o| !overlaps((*start, size), *o)) {
            taken.push((*start, size));
            count += 1;
        }
    }
    count
}

/// The stable number of partition tokens an accelerator advertises: its largest per-profile
/// instance count on an empty accelerator (7 on an H100).
pub fn token_ceiling(seat: &Seat) -> u32 {
    seat.partitions
        .iter()
        .map(|p| free_count(p.size, &p.starts, &[]))
        .max()
        .unwrap_or(0)
}

/// The partition grants charging accelerator `index`, with their placements.
pub fn placed(ledger: &Ledger, index: u32) -> Vec<&PartitionPlacement> {
    placed_where(ledger, index, |_| true)
}

/// The partition grants of containers (not of ResourceClaims) charging accelerator `index`:
/// what the partitioned pool's tokens and its profiles' node capacity count as allocated. A
/// claim's partition occupies its slices all the same ([`occupied`]), but the kubelet never
/// granted it, so it is no token of the device plugin's.
pub fn placed_by_containers(ledger: &Ledger, index: u32) -> Vec<&PartitionPlacement> {
    placed_where(ledger, index, |key| key.claim_uid().is_none())
}

/// The placements of the charging partition grants on `index` whose key `keep` takes.
fn placed_where(
    ledger: &Ledger,
    index: u32,
    keep: impl Fn(&GrantKey) -> bool,
) -> Vec<&PartitionPlacement> {
    ledger
        .grants()
        .iter()
        .filter(|(key, g)| keep(key) && g.family == Family::Partitioned && ledger.charges(g))
        .filter(|(_, g)| g.accelerators.contains(&index))
        .filter_map(|(_, g)| g.partition.as_ref())
        .collect()
}

/// The intervals accelerator `index`'s charging partition grants occupy.
pub fn occupied(ledger: &Ledger, index: u32) -> Vec<(u32, u32)> {
    placed(ledger, index)
        .into_iter()
        .map(|p| (p.start, p.size))
        .collect()
}

/// The outside instances of accelerator `index` that no charging grant overlaps.
pub fn outside(ledger: &Ledger, index: u32) -> Vec<&Outside> {
    let granted = occupied(ledger, index);
    ledger
        .outside(index)
        .iter()
        .filter(|o| !granted.iter().any(|g| overlaps(*g, (o.start, o.size))))
        .collect()
}

/// Every interval of accelerator `index` a new instance must avoid: its grants' and its
/// outside instances'.
pub fn taken(ledger: &Ledger, index: u32) -> Vec<(u32, u32)> {
    let mut taken = occupied(ledger, index);
    taken.extend(outside(ledger, index).iter().map(|o| (o.start, o.size)));
    taken
}

/// Allocated and still-placeable instances per offered profile (every profile listed, at 0
/// too). An allocation counts under the profile actually built; a claimable outside instance
/// counts as placeable for its profile.
pub fn occupancy(seat: &Seat, ledger: &Ledger) -> PartitionOccupancy {
    let free = free_counts(seat, ledger);
    let mut allocated: BTreeMap<String, u32> = seat
        .partitions
        .iter()
        .map(|p| (p.name.clone(), 0))
        .collect();
    for p in placed_by_containers(ledger, seat.index) {
        *allocated.entry(p.profile.clone()).or_default() += 1;
    }
    let mut placeable = free;
    for o in outside(ledger, seat.index) {
        if o.claimable
            && let Some(n) = placeable.get_mut(&o.profile)
        {
            *n += 1;
        }
    }
    PartitionOccupancy {
        allocated,
        placeable,
    }
}

/// How many instances of each offered profile fit in the slices nothing takes.
fn free_counts(seat: &Seat, ledger: &Ledger) -> BTreeMap<String, u32> {
    let taken = taken(ledger, seat.index);
    seat.partitions
        .iter()
        .map(|p| (p.name.clone(), free_count(p.size, &p.starts, &taken)))
        .collect()
}

/// The healthy partition tokens of one accelerator: its containers' allocated instances (a
/// ResourceClaim's is no token, though its slices are taken), plus its
/// claimable outside instances (each can be handed to a container), plus its largest
/// per-profile count of instances that fit in the slices nothing takes; only the allocated
/// ones when it is unhealthy, 0 when it is not in a partitioning mode.
pub fn room(seat: &Seat, ledger: &Ledger) -> u32 {
    if seat.grantable != Grantable::PartitionsOnly {
        return 0;
    }
    let allocated =
        u32::try_from(placed_by_containers(ledger, seat.index).len()).unwrap_or(u32::MAX);
    if !seat.healthy {
        return allocated;
    }
    let claimable = outside(ledger, seat.index)
        .iter()
        .filter(|o| o.claimable && seat.partitions.iter().any(|p| p.name == o.profile))
        .count();
    let largest = free_counts(seat, ledger).into_values().max().unwrap_or(0);
    allocated
        .saturating_add(u32::try_from(claimable).unwrap_or(u32::MAX))
        .saturating_add(largest)
}

/// Every partitioned accelerator's allocated and placeable profiles, by index.
pub fn occupancies(ledger: &Ledger) -> BTreeMap<u32, PartitionOccupancy> {
    ledger
        .seats()
        .filter(|s| s.grantable == Grantable::PartitionsOnly)
        .map(|s| (s.index, occupancy(s, ledger)))
        .collect()
}

/// Each offered profile's node capacity: Σ over partitioned accelerators of (allocated +
/// placeable). Before any grant (or without a ledger) it is each profile's static ceiling.
pub fn node_profiles(occupancies: &BTreeMap<u32, PartitionOccupancy>) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for o in occupancies.values() {
        for (profile, placeable) in &o.placeable {
            let allocated = o.allocated.get(profile).copied().unwrap_or(0);
            *out.entry(profile.clone()).or_default() += u64::from(allocated + placeable);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Claim, GrantKey, Policy, Refusal};

    /// The H100 80GB table (spec §1.2).
    pub(crate) fn h100() -> Vec<PartitionShape> {
        let shape = |name: &str, mib, size, starts: &[u32]| PartitionShape {
            id: size,
            name: name.into(),
            memory_mib: Some(mib),
            size,
            starts: starts.to_vec(),
        };
        vec![
            shape("1g.10gb", 9984, 1, &[0, 1, 2, 3, 4, 5, 6]),
            shape("1g.20gb", 20096, 2, &[0, 2, 4, 6]),
            shape("2g.20gb", 20096, 2, &[0, 2, 4]),
            shape("3g.40gb", 40448, 4, &[0, 4]),
            shape("4g.40gb", 40448, 4, &[0]),
            shape("7g.80gb", 80896, 8, &[0]),
        ]
    }

    fn seat(index: u32) -> Seat {
        Seat {
            index,
            uuid: Some(format!("GPU-{index}")),
            numa_node: None,
            peers: BTreeMap::new(),
            memory_mib: Some(81559),
            grantable: Grantable::PartitionsOnly,
            healthy: true,
            slice_capacity: 0,
            partitions: h100(),
        }
    }

    fn claim(pod: &str, index: u32, profile: &str, start: u32, size: u32) -> Claim {
        Claim {
            key: GrantKey::new(pod, "main"),
            family: Family::Partitioned,
            resource: "nvidia.com/gpu.partitioned".into(),
            device_ids: vec![format!("tok-{pod}")],
            accelerators: vec![index],
            slice_units: 790_985,
            cores_percentage: None,
            partition: Some(PartitionPlacement {
                profile: profile.into(),
                start,
                size,
                instance: None,
            }),
        }
    }

    #[test]
    fn the_worked_8xh100_example() {
        let mut ledger = Ledger::new((0..8).map(seat), Policy::default());
        let tokens = |l: &Ledger| l.seats().map(|s| room(s, l)).sum::<u32>();
        assert_eq!(tokens(&ledger), 56);
        assert!(ledger.seats().all(|s| token_ceiling(s) == 7));
        let empty = node_profiles(&occupancies(&ledger));
        assert_eq!(empty["1g.10gb"], 56);
        assert_eq!(empty["7g.80gb"], 8);

        ledger.allocate(claim("a", 0, "3g.40gb", 0, 4)).unwrap();
        assert_eq!(tokens(&ledger), 53, "49 + 1 allocated + 3");
        let keys = node_profiles(&occupancies(&ledger));
        let want: BTreeMap<String, u64> = [
            ("1g.10gb", 52),
            ("1g.20gb", 30),
            ("2g.20gb", 22),
            ("3g.40gb", 16),
            ("4g.40gb", 7),
            ("7g.80gb", 7),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(keys, want);
        let gpu0 = occupancy(ledger.seat(0).unwrap(), &ledger);
        assert_eq!(gpu0.allocated["3g.40gb"], 1);
        assert_eq!(gpu0.allocated["4g.40gb"], 0, "keyed by the profile built");
        assert_eq!(gpu0.placeable["3g.40gb"], 1);
        assert_eq!(gpu0.placeable["4g.40gb"], 0);
        ledger.verify().unwrap();
    }

    #[test]
    fn choose_packs_onto_the_most_occupied_gpu_then_the_lowest_start() {
        let mut ledger = Ledger::new((0..3).map(seat), Policy::default());
        assert_eq!(
            choose(&ledger, "3g.40gb").map(|(i, _, s)| (i, s)),
            Ok((0, 0))
        );
        ledger.allocate(claim("a", 1, "1g.10gb", 0, 1)).unwrap();
        // GPU 1 is the occupied one: the next goes there, beside the 1g.
        assert_eq!(
            choose(&ledger, "3g.40gb").map(|(i, _, s)| (i, s)),
            Ok((1, 4))
        );
        assert_eq!(
            choose(&ledger, "1g.10gb").map(|(i, _, s)| (i, s)),
            Ok((1, 1))
        );
        ledger.allocate(claim("b", 1, "3g.40gb", 4, 4)).unwrap();
        assert_eq!(
            choose(&ledger, "4g.40gb").map(|(i, _, s)| (i, s)),
            Ok((0, 0))
        );
        let none = choose(&ledger, "9g.99gb").unwrap_err();
        assert!(none.contains("GPU 0 (GPU-0) does not offer it"), "{none}");
        let mut full = Ledger::new([seat(0)], Policy::default());
        full.allocate(claim("c", 0, "7g.80gb", 0, 8)).unwrap();
        let why = choose(&full, "1g.10gb").unwrap_err();
        assert!(why.starts_with("GPU 0 (GPU-0) has no free start"), "{why}");
    }

    fn outside(profile: &str, start: u32, size: u32, claimable: bool) -> Outside {
        Outside {
            profile: profile.into(),
            start,
            size,
            claimable,
        }
    }

    #[test]
    fn choose_counts_outside_instances_as_taken() {
        let mut ledger = Ledger::new((0..2).map(seat), Policy::default());
        // A 1g carved by hand on GPU 1 at 0: GPU 1 is the occupied one, and its 0 is taken.
        assert!(ledger.set_outside(1, vec![outside("1g.10gb", 0, 1, true)]));
        assert!(!ledger.set_outside(1, vec![outside("1g.10gb", 0, 1, true)]));
        assert_eq!(
            choose(&ledger, "1g.10gb").map(|(i, _, s)| (i, s)),
            Ok((1, 1))
        );
        assert_eq!(
            choose(&ledger, "3g.40gb").map(|(i, _, s)| (i, s)),
            Ok((1, 4))
        );
        ledger.set_outside(0, vec![outside("7g.80gb", 0, 8, false)]);
        ledger.set_outside(1, vec![outside("7g.80gb", 0, 8, true)]);
        let why = choose(&ledger, "1g.10gb").unwrap_err();
        assert!(why.contains("GPU 1 (GPU-1) has no free start"), "{why}");
        assert!(!ledger.set_outside(9, vec![outside("7g.80gb", 0, 8, true)]));
        assert!(ledger.outside(9).is_empty());
    }

    #[test]
    fn outside_instances_take_room_and_a_claimable_one_is_room_for_its_profile() {
        let mut ledger = Ledger::new((0..2).map(seat), Policy::default());
        let tokens = |l: &Ledger| l.seats().map(|s| room(s, l)).collect::<Vec<_>>();
        // A claimable 3g at 0: one token for it, and 3 1g fit beside it (4, 5, 6).
        ledger.set_outside(0, vec![outside("3g.40gb", 0, 4, true)]);
        assert_eq!(tokens(&ledger), [4, 7]);
        let gpu0 = occupancy(ledger.seat(0).unwrap(), &ledger);
        assert_eq!(gpu0.allocated["3g.40gb"], 0, "not a grant");
        assert_eq!(
            gpu0.placeable["3g.40gb"], 2,
            "the claimable one and the free start 4"
        );
        assert_eq!(gpu0.placeable["1g.10gb"], 3);
        assert_eq!(gpu0.placeable["7g.80gb"], 0);
        let keys = node_profiles(&occupancies(&ledger));
        assert_eq!(keys["3g.40gb"], 4);
        assert_eq!(keys["1g.10gb"], 10);
        // Not claimable (subdivided, or being destroyed): it only takes its slices.
        ledger.set_outside(0, vec![outside("3g.40gb", 0, 4, false)]);
        assert_eq!(tokens(&ledger), [3, 7]);
        assert_eq!(
            occupancy(ledger.seat(0).unwrap(), &ledger).placeable["3g.40gb"],
            1
        );
        // Claimed: the grant overlaps it, and it is counted once, as the grant.
        ledger.set_outside(0, vec![outside("3g.40gb", 0, 4, true)]);
        ledger.allocate(claim("a", 0, "3g.40gb", 0, 4)).unwrap();
        assert_eq!(tokens(&ledger), [4, 7]);
        let gpu0 = occupancy(ledger.seat(0).unwrap(), &ledger);
        assert_eq!(
            (gpu0.allocated["3g.40gb"], gpu0.placeable["3g.40gb"]),
            (1, 1)
        );
        // Gone: the slices are free again.
        ledger.release(&GrantKey::new("a", "main"));
        assert!(ledger.set_outside(0, Vec::new()));
        assert_eq!(tokens(&ledger), [7, 7]);
    }

    #[test]
    fn a_reclaiming_instance_stays_occupied() {
        // The reclaim keeps the grant until the instance is destroyed.
        let mut ledger = Ledger::new([seat(0)], Policy::default());
        ledger.allocate(claim("a", 0, "3g.40gb", 0, 4)).unwrap();
        let s = ledger.seat(0).unwrap();
        assert_eq!(room(s, &ledger), 4);
        assert_eq!(occupancy(s, &ledger).placeable["3g.40gb"], 1);
    }

    #[test]
    fn a_partition_is_offered_only_at_a_start_and_size_of_its_own_profile() {
        // `4g.40gb` sits only at 0; `3g.40gb`, of the same size, also at 4: a 4g at 4 borrows
        // the 3g's start. A 7g at 3 borrows the 1g's; a 7g of size 1 the 1g's size.
        let mut ledger = Ledger::new([seat(0)], Policy::default());
        for (profile, start, size) in [("4g.40gb", 4, 4), ("7g.80gb", 3, 8), ("7g.80gb", 0, 1)] {
            assert_eq!(
                ledger.allocate(claim("a", 0, profile, start, size)),
                Err(Refusal::NotOffered {
                    accelerator: "0 (GPU-0)".into(),
                    profile: profile.into(),
                    start,
                }),
                "{profile} at {start} of size {size}"
            );
        }
        assert!(ledger.grants().is_empty());
        ledger.allocate(claim("a", 0, "4g.40gb", 0, 4)).unwrap();
        ledger.verify().unwrap();
    }

    #[test]
    fn a_moved_partition_grant_takes_its_new_start_unless_another_holds_it() {
        let mut ledger = Ledger::new([seat(0)], Policy::default());
        ledger.allocate(claim("a", 0, "1g.10gb", 0, 1)).unwrap();
        ledger.allocate(claim("b", 0, "1g.10gb", 1, 1)).unwrap();
        let a = GrantKey::new("a", "main");
        let start = |l: &Ledger| {
            l.grant(&a)
                .and_then(|g| g.partition.as_ref())
                .map(|p| p.start)
        };

        ledger.move_partition(&a, 5).unwrap();
        assert_eq!(start(&ledger), Some(5));
        let mut taken = occupied(&ledger, 0);
        taken.sort();
        assert_eq!(taken, vec![(1, 1), (5, 1)]);
        // Onto b's slice: refused, and a stays where it was.
        assert_eq!(
            ledger.move_partition(&a, 1),
            Err(Refusal::PlacementTaken {
                accelerator: "0 (GPU-0)".into(),
                profile: "1g.10gb".into(),
                start: 1,
            })
        );
        assert_eq!(start(&ledger), Some(5));
        // No such grant: refused.
        let nobody = GrantKey::new("nobody", "main");
        assert_eq!(
            ledger.move_partition(&nobody, 2),
            Err(Refusal::PartitionShape { key: nobody })
        );
        ledger.verify().unwrap();
    }

    #[test]
    fn a_partition_instance_is_recorded_only_on_a_partition_grant() {
        let mut ledger = Ledger::new([seat(0)], Policy::default());
        ledger.allocate(claim("a", 0, "1g.10gb", 0, 1)).unwrap();
        let instance = PartitionInstance {
            gpu_instance: 9,
            compute_instance: 0,
            uuid: "MIG-1".into(),
        };
        let a = GrantKey::new("a", "main");
        assert!(ledger.set_partition_instance(&a, instance.clone()));
        assert_eq!(
            ledger
                .grant(&a)
                .and_then(|g| g.partition.as_ref())
                .and_then(|p| p.instance.clone()),
            Some(instance.clone())
        );
        assert!(!ledger.set_partition_instance(&GrantKey::new("nobody", "main"), instance));
    }

    #[test]
    fn an_unhealthy_accelerator_keeps_only_its_allocated_tokens() {
        let mut ledger = Ledger::new([seat(0)], Policy::default());
        ledger.allocate(claim("a", 0, "1g.10gb", 3, 1)).unwrap();
        ledger.set_health(0, false);
        assert_eq!(room(ledger.seat(0).unwrap(), &ledger), 1);
    }
}
