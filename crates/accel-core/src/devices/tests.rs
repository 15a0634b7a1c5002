use serde_json::json;

use super::*;
use crate::BusId;
use crate::inventory::{MigMode, PartitionPlacement, PartitionProfile as InventoryProfile, Source};
use crate::ledger::units::NVIDIA_SLICES_PER_ACCELERATOR;
use crate::ledger::{Claim, GrantKey, Policy, Seat};

fn gpu(index: u32, product: Option<&str>, memory: Option<u64>) -> Accelerator {
    let mut a = Accelerator::new(index, Source::Driver);
    a.uuid = Some(format!("GPU-{index}"));
    a.product = product.map(str::to_string);
    a.memory_mib = memory;
    a
}

fn h100(index: u32) -> Accelerator {
    let mut a = gpu(index, Some("NVIDIA H100 80GB HBM3"), Some(81559));
    a.bus_id = Some(
        format!("00000000:{:02X}:00.0", 0x18 + index)
            .parse::<BusId>()
            .unwrap(),
    );
    a.numa_node = Some(index / 4);
    a.architecture = Some("Hopper".into());
    a.compute_capability = Some("9.0".into());
    a
}

fn node() -> Inventory {
    let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
    section.driver_version = Some("590.48.01".into());
    section.runtime_version = Some("13.0".into());
    let mut mig = h100(1);
    mig.memory_mib = Some(81_000);
    mig.mig_mode = Some(MigMode::Enabled);
    mig.classify_grantable();
    mig.partition_profiles = vec![InventoryProfile {
        name: "1g.10gb".into(),
        id: 19,
        memory_mib: Some(9984),
        instances_total: Some(7),
        instances_free: Some(7),
        multiprocessors: Some(16),
        placements: vec![PartitionPlacement { start: 0, size: 1 }],
    }];
    let mut passed = h100(2);
    passed.source = Source::Passthrough;
    passed.classify_grantable();
    let mut sick = h100(3);
    sick.healthy = false;
    sick.health_reasons = vec!["xid 79".into()];
    let mut t4 = gpu(4, Some("Tesla T4"), Some(15360));
    t4.cores = Some(2560);
    let unknown = gpu(5, None, None);
    section.accelerators = vec![unknown, t4, h100(0), mig, passed, sick];
    Inventory {
        manufacturers: vec![section],
    }
}

#[test]
fn spec_groups_accelerators_by_model_key() {
    let spec = DevicesSpec::from_inventory(&node(), |_| Some(NVIDIA_SLICES_PER_ACCELERATOR));
    let keys: Vec<&str> = spec.group_keys().collect();
    // An unknown product groups under the manufacturer's name; keys sorted.
    assert_eq!(keys, ["nvidia", "nvidia-h100-80gb-hbm3", "nvidia-tesla-t4"]);
    let h = &spec.groups[1];
    assert_eq!(h.manufacturer, Manufacturer::Nvidia);
    assert_eq!(h.product.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(h.memory_mib, Some(81_000), "the smallest member's VRAM");
    assert_eq!(h.cores, None);
    assert_eq!(h.driver_version.as_deref(), Some("590.48.01"));
    assert_eq!(h.runtime_version.as_deref(), Some("13.0"));
    assert_eq!(h.family.as_deref(), Some("Hopper"));
    assert_eq!(h.compute_capability.as_deref(), Some("9.0"));
    let indexes: Vec<u32> = h.accelerators.iter().map(|a| a.index).collect();
    assert_eq!(
        indexes,
        [0, 1, 2, 3],
        "members by index, the passed-through one listed"
    );
    assert_eq!(spec.groups[2].cores, Some(2560));
    assert_eq!(spec.groups[0].memory_mib, None);
}

#[test]
fn accelerators_carry_their_facts_and_only_real_ones() {
    let spec = DevicesSpec::from_inventory(&node(), |_| Some(NVIDIA_SLICES_PER_ACCELERATOR));
    let json = serde_json::to_value(&spec.groups[1].accelerators).unwrap();
    assert_eq!(
        json,
        json!([
            {"index": 0, "uuid": "GPU-0", "busId": "00000000:18:00.0", "numaNode": 0,
             "memoryMiB": 81559, "healthy": true, "grantable": "whole",
             "logicalSliced": {"count": 128, "coresPercentageOvercommit": true}},
            {"index": 1, "uuid": "GPU-1", "busId": "00000000:19:00.0", "numaNode": 0,
             "memoryMiB": 81000, "healthy": true, "grantable": "partitionsOnly",
             "partitionProfiles": {"1g.10gb": {"id": 19, "memoryMiB": 9984,
                 "placements": [{"start": 0, "size": 1}]}}},
            {"index": 2, "uuid": "GPU-2", "busId": "00000000:1A:00.0", "numaNode": 0,
             "memoryMiB": 81559, "healthy": true, "grantable": "nothing"},
            {"index": 3, "uuid": "GPU-3", "busId": "00000000:1B:00.0", "numaNode": 0,
             "memoryMiB": 81559, "healthy": false, "healthReasons": ["xid 79"],
             "grantable": "whole", "logicalSliced": {"count": 128, "coresPercentageOvercommit": true}},
        ])
    );
    // Unknown facts are absent keys, never zeros or empty strings.
    let unknown = serde_json::to_value(&spec.groups[0]).unwrap();
    assert_eq!(
        unknown,
        json!({"manufacturer": "nvidia", "key": "nvidia", "driverVersion": "590.48.01",
            "runtimeVersion": "13.0", "accelerators": [{"index": 5, "uuid": "GPU-5",
            "healthy": true, "grantable": "whole", "logicalSliced": {"count": 128, "coresPercentageOvercommit": true}}]})
    );
    let back: DevicesSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
    assert_eq!(back, spec);
}

#[test]
fn logical_slicing_says_whether_cores_are_over_committed_as_each_spec_does() {
    // Every manufacturer's section, one card each: `logicalSliced` carries the table's
    // `coresPercentageOvercommit` (false on Hygon, Cambricon, MetaX, Moore Threads).
    let inventory = Inventory {
        manufacturers: Manufacturer::ALL
            .into_iter()
            .map(|m| {
                let mut section = ManufacturerInventory::empty(m);
                section.accelerators = vec![gpu(0, Some("Card"), Some(65536))];
                section
            })
            .collect(),
    };
    let spec = DevicesSpec::from_inventory(&inventory, |_| Some(16));
    let got: Vec<(Manufacturer, serde_json::Value)> = spec
        .groups
        .iter()
        .map(|g| {
            (
                g.manufacturer,
                serde_json::to_value(g.accelerators[0].logical_sliced).unwrap(),
            )
        })
        .collect();
    let flag = |over: bool| json!({"count": 16, "coresPercentageOvercommit": over});
    assert_eq!(
        got,
        [
            (Manufacturer::Nvidia, flag(true)),
            (Manufacturer::Amd, flag(true)),
            (Manufacturer::Ascend, flag(true)),
            (Manufacturer::Cambricon, flag(false)),
            (Manufacturer::Hygon, flag(false)),
            (Manufacturer::Iluvatar, flag(true)),
            (Manufacturer::Metax, flag(false)),
            (Manufacturer::Mthreads, flag(false)),
            (Manufacturer::Thead, flag(true)),
        ]
    );
    // The described system's own shape, `{count: 4}` (false left out), reads back as false.
    let hygon: LogicalSliced = serde_json::from_value(json!({"count": 4})).unwrap();
    assert!(!hygon.cores_percentage_overcommit);
}

#[test]
fn no_slicing_means_no_logical_slice_count() {
    let spec = DevicesSpec::from_inventory(&node(), |_| None);
    assert!(
        spec.groups
            .iter()
            .flat_map(|g| &g.accelerators)
            .all(|a| a.logical_sliced.is_none())
    );
}

#[test]
fn a_slice_count_of_zero_offers_no_logical_slicing() {
    // Only a positive count is an offer: zero slices is the same as not sliced at all.
    let one = LogicalSliced {
        count: 1,
        cores_percentage_overcommit: true,
    };
    for (slices, want) in [(Some(0), None), (Some(1), Some(one))] {
        let spec = DevicesSpec::from_inventory(&node(), |_| slices);
        let whole: Vec<Option<LogicalSliced>> = spec
            .groups
            .iter()
            .flat_map(|g| &g.accelerators)
            .filter(|a| a.grantable == Grantability::Whole)
            .map(|a| a.logical_sliced)
            .collect();
        assert!(!whole.is_empty());
        assert!(whole.iter().all(|s| *s == want), "{slices:?}: {whole:?}");
    }
}

#[test]
fn an_empty_spec_and_status_still_write_their_lists() {
    // A merge patch of {"spec": …} must replace the lists, so they are never omitted.
    assert_eq!(
        serde_json::to_value(DevicesSpec::default()).unwrap(),
        json!({"groups": []})
    );
    assert_eq!(
        serde_json::to_value(DevicesStatus::default()).unwrap(),
        json!({"accelerators": [], "conditions": [], "faults": []})
    );
}

fn seat(index: u32, slice_capacity: u32) -> Seat {
    Seat {
        index,
        uuid: Some(format!("GPU-{index}")),
        numa_node: Some(0),
        peers: BTreeMap::new(),
        memory_mib: Some(81_559),
        grantable: if slice_capacity > 0 {
            Grantable::Whole
        } else {
            Grantable::PartitionsOnly
        },
        healthy: true,
        slice_capacity,
        partitions: Vec::new(),
    }
}

fn claim(pod: &str, family: Family, accelerators: &[u32], units: u64) -> Claim {
    Claim {
        key: GrantKey::new(pod, "main"),
        family,
        resource: format!("nvidia.com/gpu.{family}"),
        device_ids: accelerators.iter().map(|i| format!("{pod}-{i}")).collect(),
        accelerators: accelerators.to_vec(),
        slice_units: units,
        cores_percentage: None,
        partition: None,
    }
}

#[test]
fn status_reads_the_ledger_per_accelerator() {
    let mut ledger = Ledger::new(
        [
            seat(0, 128),
            seat(1, 128),
            seat(2, 128),
            seat(3, 0),
            seat(4, 128),
        ],
        Policy::default(),
    );
    ledger
        .allocate(claim("a", Family::Exclusive, &[0], 0))
        .unwrap();
    ledger
        .allocate(claim("b", Family::Sliced, &[1], 400_000))
        .unwrap();
    ledger
        .allocate(claim("c", Family::Sliced, &[1], 200_000))
        .unwrap();
    ledger
        .allocate(claim("d", Family::Shared, &[2], 0))
        .unwrap();
    let partitions = BTreeMap::from([(
        3,
        PartitionOccupancy {
            allocated: BTreeMap::from([("1g.10gb".to_string(), 2)]),
            placeable: BTreeMap::from([("1g.10gb".to_string(), 5), ("3g.40gb".to_string(), 1)]),
        },
    )]);
    let got = allocations(Manufacturer::Nvidia, &ledger, &partitions);
    let table: Vec<(u32, AllocationMode, u64, Option<u32>)> = got
        .iter()
        .map(|a| (a.index, a.mode, a.remaining, a.allocated_slices))
        .collect();
    assert_eq!(
        table,
        [
            (0, AllocationMode::Exclusive, 0, Some(0)),
            (1, AllocationMode::Sliced, 1_000_000, Some(2)),
            (2, AllocationMode::Shared, 1_440_000, Some(0)),
            (3, AllocationMode::Free, 1_600_000, None),
            (4, AllocationMode::Free, 1_600_000, Some(0)),
        ]
    );
    assert_eq!(
        serde_json::to_value(&got[3]).unwrap(),
        json!({"manufacturer": "nvidia", "index": 3, "uuid": "GPU-3", "mode": "free",
            "remaining": 1_600_000, "allocatedProfiles": {"1g.10gb": 2},
            "placeableProfiles": {"1g.10gb": 5, "3g.40gb": 1}})
    );
    // Without partition facts the profile entries stay absent, not empty.
    let plain = serde_json::to_value(&got[4]).unwrap();
    assert!(plain.get("allocatedProfiles").is_none(), "{plain}");
    assert!(plain.get("placeableProfiles").is_none(), "{plain}");
}

#[test]
fn detection_conditions() {
    let ok = DetectionReport {
        last_detected_at: Some("2026-11-29T10:00:00Z".into()),
        failures: BTreeMap::new(),
    };
    let failed = DetectionReport {
        failures: BTreeMap::from([(Manufacturer::Nvidia, "nvidia-smi hung".to_string())]),
        ..ok.clone()
    };
    let never = DetectionReport {
        last_detected_at: None,
        ..failed.clone()
    };
    let table = [
        (
            &ok,
            ConditionStatus::True,
            "Detected",
            "last detected at 2026-11-29T10:00:00Z",
        ),
        (
            &failed,
            ConditionStatus::False,
            "DetectionFailed",
            "the last pass could not measure (nvidia: nvidia-smi hung); reporting what was last detected at 2026-11-29T10:00:00Z",
        ),
        (
            &never,
            ConditionStatus::False,
            "DetectionFailed",
            "the last pass could not measure (nvidia: nvidia-smi hung); nothing detected yet",
        ),
        (
            &DetectionReport::default(),
            ConditionStatus::Unknown,
            "NotYetDetected",
            "no detection pass has finished yet",
        ),
    ];
    for (report, status, reason, message) in table {
        let c = Condition::detection(report);
        assert_eq!(c.type_, DETECTED);
        assert_eq!(
            (c.status, c.reason.as_str()),
            (status, reason),
            "{report:?}"
        );
        assert_eq!(c.message, message);
    }
}

#[test]
fn health_condition_names_each_faulty_accelerator() {
    let spec = DevicesSpec::from_inventory(&node(), |_| None);
    let c = Condition::health(&spec);
    assert_eq!(
        (c.type_.as_str(), c.status),
        (HEALTHY, ConditionStatus::False)
    );
    assert_eq!(c.reason, "Faults");
    assert_eq!(c.message, "unhealthy: nvidia 3 (GPU-3): xid 79");
    let healthy = DevicesSpec::from_inventory(
        &Inventory {
            manufacturers: vec![ManufacturerInventory {
                accelerators: vec![h100(0)],
                ..ManufacturerInventory::empty(Manufacturer::Nvidia)
            }],
        },
        |_| None,
    );
    assert_eq!(Condition::health(&healthy).status, ConditionStatus::True);
}

#[test]
fn transition_times_move_only_when_the_status_does() {
    let t0 = "2026-11-29T10:00:00Z";
    let t1 = "2026-11-29T10:10:00Z";
    let healthy = || Condition::health(&DevicesSpec::default());
    let ok = DetectionReport {
        last_detected_at: Some(t0.into()),
        failures: BTreeMap::new(),
    };
    let first = settle_conditions(&[], [healthy(), Condition::detection(&ok)], t0);
    assert_eq!(
        first.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        [DETECTED, HEALTHY],
        "sorted by type"
    );
    assert!(first.iter().all(|c| c.last_transition_time == t0));
    let failed = DetectionReport {
        failures: BTreeMap::from([(Manufacturer::Nvidia, "hung".to_string())]),
        ..ok
    };
    let second = settle_conditions(&first, [healthy(), Condition::detection(&failed)], t1);
    assert_eq!(second[0].last_transition_time, t1, "Detected flipped");
    assert_eq!(second[1].last_transition_time, t0, "Healthy unchanged");
}

#[test]
fn a_transition_time_is_kept_only_from_a_condition_of_the_same_type() {
    let t0 = "2026-11-29T10:00:00Z";
    let t1 = "2026-11-29T10:10:00Z";
    let ok = DetectionReport {
        last_detected_at: Some(t0.into()),
        failures: BTreeMap::new(),
    };
    // Healthy was True since t0; Detected is new (also True): it starts now, not at t0.
    let previous = settle_conditions(&[], [Condition::health(&DevicesSpec::default())], t0);
    let settled = settle_conditions(&previous, [Condition::detection(&ok)], t1);
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].type_, DETECTED);
    assert_eq!(settled[0].status, ConditionStatus::True);
    assert_eq!(settled[0].last_transition_time, t1);
}
