//! The node capacity keys the device plugins do not serve (DESIGN.md, "Node capacity"): the
//! budget keys a sliced or partitioned request carries beside its token, which the scheduler
//! must find on the Node to place the Pod at all.
//!
//! `.sliced.units` and `.partitioned.units` are Σ 1,600,000 per accelerator;
//! `.sliced.memory-percentage` Σ 100; `.sliced.memory-mib` Σ VRAM MiB;
//! `.sliced.cores-percentage` Σ slice count × 100 where the manufacturer over-commits compute
//! across slices (the slot count is what binds), and Σ 100 where it does not
//! ([`Manufacturer::cores_percentage_overcommit`]: one card's cores percentages sum to at most
//! 100, so the scheduler never admits compute that Allocate refuses); each partition profile key
//! Σ (allocated + remaining).
//!
//! Pure: it reads the ledger's seats and the partition counts the caller gives, and says which
//! keys are ours so a publisher can remove the ones that went. It never touches the Node.

use std::collections::BTreeMap;

use crate::inventory::Grantable;
use crate::ledger::Seat;
use crate::manufacturer::Manufacturer;
use crate::resources::{AcceleratorKey, KeyGrammar, ResourceKey};
use crate::units::{UNITS_PER_ACCELERATOR, UNITS_PER_PERCENT};

/// A whole accelerator as a percentage.
const WHOLE_PERCENT: u64 = UNITS_PER_ACCELERATOR / UNITS_PER_PERCENT;

/// The capacity keys of one manufacturer's accelerators, by resource name.
///
/// Sliced keys count the unpartitioned accelerators offered sliced (a seat with slice capacity);
/// `.partitioned.units` counts those in a hardware partitioning mode. `profiles` holds, per
/// partition profile, its instances allocated plus still placeable over the node. A
/// passed-through accelerator counts nowhere. A key with nothing behind it is absent, not 0, so a
/// node without that family never advertises it. `.sliced.memory-mib` sums the VRAM the driver
/// reported; an accelerator whose VRAM is unknown adds nothing (an understated capacity schedules
/// less, it never over-commits). `.sliced.cores-percentage` is 100 per slot where the
/// manufacturer over-commits compute across slices, else 100 per accelerator.
pub fn node_capacity<'a>(
    grammar: &KeyGrammar,
    manufacturer: Manufacturer,
    seats: impl IntoIterator<Item = &'a Seat>,
    profiles: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let mut sliced = 0u64;
    let mut slots = 0u64;
    let mut vram: Option<u64> = None;
    let mut partitioned = 0u64;
    for seat in seats {
        match seat.grantable {
            Grantable::Whole if seat.slice_capacity > 0 => {
                sliced += 1;
                slots += u64::from(seat.slice_capacity);
                if let Some(mib) = seat.memory_mib {
                    vram = Some(vram.unwrap_or(0).saturating_add(mib));
                }
            }
            Grantable::PartitionsOnly => partitioned += 1,
            Grantable::Whole | Grantable::Nothing | Grantable::Unidentified => {}
        }
    }
    let key = |k: AcceleratorKey| grammar.accelerator_key(manufacturer, k);
    let mut out = BTreeMap::new();
    if sliced > 0 {
        out.insert(
            key(AcceleratorKey::SlicedUnits),
            sliced * UNITS_PER_ACCELERATOR,
        );
        out.insert(
            key(AcceleratorKey::SlicedMemoryPercentage),
            sliced * WHOLE_PERCENT,
        );
        let cores = if manufacturer.cores_percentage_overcommit() {
            slots
        } else {
            sliced
        };
        out.insert(
            key(AcceleratorKey::SlicedCoresPercentage),
            cores * WHOLE_PERCENT,
        );
        if let Some(mib) = vram {
            out.insert(key(AcceleratorKey::SlicedMemoryMib), mib);
        }
    }
    if let Some(kind) = grammar.partition_kind(manufacturer) {
        if partitioned > 0 {
            out.insert(
                key(AcceleratorKey::PartitionedUnits),
                partitioned * UNITS_PER_ACCELERATOR,
            );
        }
        for (profile, count) in profiles.iter().filter(|(_, c)| **c > 0) {
            out.insert(
                key(AcceleratorKey::PartitionedProfile {
                    kind: kind.to_string(),
                    profile: profile.clone(),
                }),
                *count,
            );
        }
    }
    out
}

/// The manufacturer whose capacity key `name` is, when it is one this module computes (and so one
/// a publisher may remove); `None` for the keys the device plugins serve and anything else.
pub fn capacity_key_manufacturer(grammar: &KeyGrammar, name: &str) -> Option<Manufacturer> {
    match grammar.parse(name)? {
        ResourceKey::Accelerator {
            manufacturer,
            key:
                AcceleratorKey::SlicedUnits
                | AcceleratorKey::SlicedMemoryPercentage
                | AcceleratorKey::SlicedMemoryMib
                | AcceleratorKey::SlicedCoresPercentage
                | AcceleratorKey::PartitionedUnits
                | AcceleratorKey::PartitionedProfile { .. },
        } => Some(manufacturer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(index: u32, grantable: Grantable, memory: Option<u64>, slices: u32) -> Seat {
        Seat {
            index,
            uuid: None,
            numa_node: None,
            peers: BTreeMap::new(),
            memory_mib: memory,
            grantable,
            healthy: true,
            slice_capacity: slices,
            partitions: Vec::new(),
        }
    }

    fn caps(m: Manufacturer, seats: &[Seat], profiles: &[(&str, u64)]) -> BTreeMap<String, u64> {
        let profiles = profiles.iter().map(|(p, c)| (p.to_string(), *c)).collect();
        node_capacity(&KeyGrammar::default(), m, seats, &profiles)
    }

    fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// name, manufacturer, seats, profile counts, the keys expected.
    type Case = (
        &'static str,
        Manufacturer,
        Vec<Seat>,
        Vec<(&'static str, u64)>,
        BTreeMap<String, u64>,
    );

    #[test]
    fn capacity_table() {
        use Grantable::*;
        let n = Manufacturer::Nvidia;
        let cases: Vec<Case> = vec![
            ("no accelerators", n, vec![], vec![], expect(&[])),
            (
                "two sliced H100s",
                n,
                vec![
                    seat(0, Whole, Some(81559), 128),
                    seat(1, Whole, Some(81559), 128),
                ],
                vec![],
                expect(&[
                    ("nvidia.com/gpu.sliced.units", 3_200_000),
                    ("nvidia.com/gpu.sliced.memory-percentage", 200),
                    ("nvidia.com/gpu.sliced.memory-mib", 163_118),
                    ("nvidia.com/gpu.sliced.cores-percentage", 25_600),
                ]),
            ),
            (
                "no slicing library: no sliced keys",
                n,
                vec![seat(0, Whole, Some(81559), 0)],
                vec![],
                expect(&[]),
            ),
            (
                "unknown VRAM adds nothing to memory-mib, absent when none known",
                n,
                vec![seat(0, Whole, None, 128)],
                vec![],
                expect(&[
                    ("nvidia.com/gpu.sliced.units", 1_600_000),
                    ("nvidia.com/gpu.sliced.memory-percentage", 100),
                    ("nvidia.com/gpu.sliced.cores-percentage", 12_800),
                ]),
            ),
            (
                "MIG and passthrough",
                n,
                vec![
                    seat(0, Whole, Some(15360), 128),
                    seat(1, PartitionsOnly, Some(81559), 0),
                    seat(2, PartitionsOnly, Some(81559), 0),
                    seat(3, Nothing, Some(81559), 128),
                ],
                vec![("1g.10gb", 14), ("7g.80gb", 0), ("3g.40gb", 4)],
                expect(&[
                    ("nvidia.com/gpu.sliced.units", 1_600_000),
                    ("nvidia.com/gpu.sliced.memory-percentage", 100),
                    ("nvidia.com/gpu.sliced.memory-mib", 15360),
                    ("nvidia.com/gpu.sliced.cores-percentage", 12_800),
                    ("nvidia.com/gpu.partitioned.units", 3_200_000),
                    ("nvidia.com/gpu.partitioned.mig-1g.10gb", 14),
                    ("nvidia.com/gpu.partitioned.mig-3g.40gb", 4),
                ]),
            ),
            (
                "Hygon: four slots each, disjoint CU masks: 100 cores a card",
                Manufacturer::Hygon,
                vec![
                    seat(0, Whole, Some(65536), 4),
                    seat(1, Whole, Some(65536), 4),
                ],
                vec![],
                expect(&[
                    ("hygon.com/dcu.sliced.units", 3_200_000),
                    ("hygon.com/dcu.sliced.memory-percentage", 200),
                    ("hygon.com/dcu.sliced.memory-mib", 131_072),
                    ("hygon.com/dcu.sliced.cores-percentage", 200),
                ]),
            ),
            (
                "MetaX: a hard compute quota, 100 cores a card whatever its 16 slots",
                Manufacturer::Metax,
                vec![
                    seat(0, Whole, Some(65536), 16),
                    seat(1, Whole, Some(65536), 16),
                ],
                vec![],
                expect(&[
                    ("metax-tech.com/gpu.sliced.units", 3_200_000),
                    ("metax-tech.com/gpu.sliced.memory-percentage", 200),
                    ("metax-tech.com/gpu.sliced.memory-mib", 131_072),
                    ("metax-tech.com/gpu.sliced.cores-percentage", 200),
                ]),
            ),
            (
                "Moore Threads: a weight that sums to 100 a card",
                Manufacturer::Mthreads,
                vec![seat(0, Whole, Some(49152), 16)],
                vec![],
                expect(&[
                    ("mthreads.com/gpu.sliced.units", 1_600_000),
                    ("mthreads.com/gpu.sliced.memory-percentage", 100),
                    ("mthreads.com/gpu.sliced.memory-mib", 49152),
                    ("mthreads.com/gpu.sliced.cores-percentage", 100),
                ]),
            ),
            (
                "Ascend over-commits: 100 a slot",
                Manufacturer::Ascend,
                vec![seat(0, Whole, Some(65536), 63)],
                vec![],
                expect(&[
                    ("huawei.com/npu.sliced.units", 1_600_000),
                    ("huawei.com/npu.sliced.memory-percentage", 100),
                    ("huawei.com/npu.sliced.memory-mib", 65536),
                    ("huawei.com/npu.sliced.cores-percentage", 6300),
                ]),
            ),
            (
                "a manufacturer without partitioning has no partition keys",
                Manufacturer::Amd,
                vec![seat(0, PartitionsOnly, Some(1), 0)],
                vec![("1g.10gb", 3)],
                expect(&[]),
            ),
        ];
        for (name, m, seats, profiles, want) in cases {
            assert_eq!(caps(m, &seats, &profiles), want, "{name}");
        }
    }

    /// Every manufacturer: the node's cores capacity is what Allocate can honour, 100 a card
    /// where one card's cores percentages sum to at most 100, 100 a slot where they may not.
    #[test]
    fn cores_capacity_follows_each_manufacturers_overcommit() {
        let table = crate::manufacturer::ManufacturerTable::default();
        let grammar = KeyGrammar::default();
        for (m, row) in table.rows() {
            let seats = [
                seat(0, Grantable::Whole, Some(1024), 4),
                seat(1, Grantable::Whole, Some(1024), 4),
                seat(2, Grantable::Whole, Some(1024), 0),
            ];
            let got = node_capacity(&grammar, m, &seats, &BTreeMap::new());
            let cores = got[&grammar.accelerator_key(m, AcceleratorKey::SlicedCoresPercentage)];
            let want = if row.cores_percentage_overcommit {
                800
            } else {
                200
            };
            assert_eq!(cores, want, "{m}");
        }
    }

    #[test]
    fn overridden_bases_name_the_keys() {
        let grammar = KeyGrammar::default().with_base(Manufacturer::Nvidia, "example.com/gpu");
        let got = node_capacity(
            &grammar,
            Manufacturer::Nvidia,
            &[seat(0, Grantable::Whole, Some(100), 1)],
            &BTreeMap::new(),
        );
        assert!(got.contains_key("example.com/gpu.sliced.units"), "{got:?}");
        assert_eq!(
            capacity_key_manufacturer(&grammar, "example.com/gpu.sliced.units"),
            Some(Manufacturer::Nvidia)
        );
    }

    #[test]
    fn only_the_computed_keys_are_ours() {
        let g = KeyGrammar::default();
        for ours in [
            "nvidia.com/gpu.sliced.units",
            "nvidia.com/gpu.sliced.memory-percentage",
            "nvidia.com/gpu.sliced.memory-mib",
            "nvidia.com/gpu.sliced.cores-percentage",
            "nvidia.com/gpu.partitioned.units",
            "nvidia.com/gpu.partitioned.mig-1g.10gb",
        ] {
            assert_eq!(
                capacity_key_manufacturer(&g, ours),
                Some(Manufacturer::Nvidia),
                "{ours}"
            );
        }
        for served in [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/gpu.sliced",
            "nvidia.com/gpu.partitioned",
            "device.gpustack.ai/nvidia.visibility",
            "cpu",
            "example.com/gpu.sliced.units",
        ] {
            assert_eq!(capacity_key_manufacturer(&g, served), None, "{served}");
        }
    }
}
