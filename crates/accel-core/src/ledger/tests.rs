use proptest::prelude::*;

use super::placement::{Request, prefer};
use super::units::*;
use super::*;

fn seat(index: u32, numa: u32) -> Seat {
    Seat {
        index,
        uuid: Some(format!("GPU-{index}")),
        numa_node: Some(numa),
        peers: BTreeMap::new(),
        memory_mib: Some(81_559),
        grantable: Grantable::Whole,
        healthy: true,
        slice_capacity: NVIDIA_SLICES_PER_ACCELERATOR,
        partitions: Vec::new(),
    }
}

fn ledger(n: u32) -> Ledger {
    Ledger::new((0..n).map(|i| seat(i, i / 4)), Policy::default())
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
fn exclusive_tenant_blocks_slices_and_shares() {
    let mut l = ledger(2);
    l.allocate(claim("a", Family::Exclusive, &[0], 0)).unwrap();
    let err = l
        .allocate(claim("b", Family::Sliced, &[0], 400_000))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "accelerator 0 (GPU-0) is held exclusive; a sliced grant cannot use it"
    );
    assert!(matches!(
        l.allocate(claim("c", Family::Shared, &[0], 0)),
        Err(Refusal::OtherMode { .. })
    ));
    assert!(matches!(
        l.allocate(claim("d", Family::Exclusive, &[0], 0)),
        Err(Refusal::ExclusivelyHeld { .. })
    ));
    assert!(!l.token_healthy(0, Family::Sliced));
    assert!(l.token_healthy(0, Family::Exclusive));
    assert!(l.token_healthy(1, Family::Sliced));
    l.verify().unwrap();
}

#[test]
fn shared_grant_needs_distinct_accelerators() {
    let mut l = ledger(1);
    let err = l
        .allocate(claim("a", Family::Shared, &[0, 0], 0))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "accelerator 0 (GPU-0) was assigned twice: a shared grant of N is N distinct accelerators"
    );
    for n in 0..SHARES_PER_ACCELERATOR {
        l.allocate(claim(&format!("p{n}"), Family::Shared, &[0], 0))
            .unwrap();
    }
    assert!(matches!(
        l.allocate(claim("x", Family::Shared, &[0], 0)),
        Err(Refusal::NoShare { used: 10, .. })
    ));
    assert_eq!(l.occupancy(0).unwrap().remaining_units(), 0);
}

#[test]
fn slice_gate_refuses_without_slot_or_room() {
    let mut l = Ledger::new(
        [Seat {
            slice_capacity: HYGON_SLICES_PER_ACCELERATOR,
            partitions: Vec::new(),
            ..seat(0, 0)
        }],
        Policy::default(),
    );
    l.allocate(claim("a", Family::Sliced, &[0], 1_000_000))
        .unwrap();
    let err = l
        .allocate(claim("b", Family::Sliced, &[0], 700_000))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "accelerator 0 (GPU-0) has 600000 units left; the slice needs 700000"
    );
    for n in 0..3 {
        l.allocate(claim(&format!("s{n}"), Family::Sliced, &[0], 1))
            .unwrap();
    }
    assert!(matches!(
        l.allocate(claim("t", Family::Sliced, &[0], 1)),
        Err(Refusal::NoSlot {
            used: 4,
            capacity: 4,
            ..
        })
    ));
    // With the gate off the slot and room checks go, the cross-mode check stays.
    let mut open = Ledger::new(
        [Seat {
            slice_capacity: 1,
            partitions: Vec::new(),
            ..seat(0, 0)
        }],
        Policy {
            slice_gate: false,
            ..Policy::default()
        },
    );
    open.allocate(claim("a", Family::Sliced, &[0], 1_600_000))
        .unwrap();
    open.allocate(claim("b", Family::Sliced, &[0], 1_600_000))
        .unwrap();
    assert!(
        open.allocate(claim("c", Family::Exclusive, &[0], 0))
            .is_err()
    );
    assert_eq!(open.occupancy(0).unwrap().used_units, 3_200_000);
}

#[test]
fn retried_call_is_not_charged_twice() {
    let mut l = ledger(1);
    let first = l
        .allocate(claim("a", Family::Sliced, &[0], 400_000))
        .unwrap();
    assert!(first.fresh);
    let retry = l
        .allocate(claim("a", Family::Sliced, &[0], 400_000))
        .unwrap();
    assert!(!retry.fresh);
    assert_eq!(l.occupancy(0).unwrap().slices, 1);
    assert_eq!(l.occupancy(0).unwrap().used_units, 400_000);
    // Giving back a retry's receipt keeps the first call's grant.
    l.give_back(&retry);
    assert_eq!(l.grants().len(), 1);
    assert_eq!(
        l.find_by_devices("nvidia.com/gpu.sliced", &["a-0".to_string()]),
        Some(&GrantKey::new("a", "main"))
    );
}

#[test]
fn give_back_restores_the_claim_held_before() {
    let mut l = ledger(2);
    l.allocate(claim("a", Family::Exclusive, &[0], 0)).unwrap();
    let replacing = l.allocate(claim("a", Family::Exclusive, &[1], 0)).unwrap();
    assert_eq!(replacing.previous.as_ref().unwrap().accelerators, vec![0]);
    assert_eq!(l.occupancy(0).unwrap().mode, Mode::Free);
    l.give_back(&replacing);
    assert_eq!(
        l.grant(&GrantKey::new("a", "main")).unwrap().accelerators,
        vec![0]
    );
    assert_eq!(l.occupancy(1).unwrap().mode, Mode::Free);
    l.verify().unwrap();
    // A fresh claim given back leaves nothing.
    let fresh = l.allocate(claim("b", Family::Shared, &[1], 0)).unwrap();
    l.give_back(&fresh);
    assert_eq!(l.occupancy(1).unwrap(), &Occupancy::FREE);
}

#[test]
fn finished_pod_frees_its_slice_unless_switched_off() {
    let mut l = ledger(1);
    l.allocate(claim("a", Family::Sliced, &[0], 1_600_000))
        .unwrap();
    assert!(l.allocate(claim("b", Family::Sliced, &[0], 1)).is_err());
    assert_eq!(l.pod_finished("a"), BTreeSet::from([0]));
    l.allocate(claim("b", Family::Sliced, &[0], 1)).unwrap();
    assert_eq!(l.pod_gone("a").len(), 1);
    l.verify().unwrap();

    let mut kept = Ledger::new(
        [seat(0, 0)],
        Policy {
            release_terminated_pods: false,
            ..Policy::default()
        },
    );
    kept.allocate(claim("a", Family::Exclusive, &[0], 0))
        .unwrap();
    assert!(kept.pod_finished("a").is_empty());
    assert!(
        kept.allocate(claim("b", Family::Exclusive, &[0], 0))
            .is_err()
    );
}

#[test]
fn mig_and_passthrough_accelerators_are_refused() {
    let mut l = Ledger::new(
        [
            Seat {
                grantable: Grantable::PartitionsOnly,
                ..seat(0, 0)
            },
            Seat {
                grantable: Grantable::Nothing,
                ..seat(1, 0)
            },
        ],
        Policy::default(),
    );
    assert_eq!(
        l.allocate(claim("a", Family::Exclusive, &[0], 0))
            .unwrap_err()
            .to_string(),
        "accelerator 0 (GPU-0) cannot be granted as exclusive: it is in MIG mode and feeds only partitions"
    );
    assert!(matches!(
        l.allocate(claim("a", Family::Shared, &[1], 0)),
        Err(Refusal::NotGrantable { .. })
    ));
    assert!(matches!(
        l.allocate(claim("a", Family::Exclusive, &[7], 0)),
        Err(Refusal::UnknownAccelerator { index: 7 })
    ));
    assert!(matches!(
        l.allocate(claim("a", Family::Partitioned, &[0], 0)),
        Err(Refusal::PartitionShape { .. })
    ));
}

#[test]
fn unhealthy_accelerator_refuses_new_grants_but_restores_old() {
    let mut l = ledger(1);
    assert!(l.set_health(0, false));
    assert!(!l.token_healthy(0, Family::Exclusive));
    assert!(matches!(
        l.allocate(claim("a", Family::Exclusive, &[0], 0)),
        Err(Refusal::Unhealthy { .. })
    ));
    let c = claim("a", Family::Exclusive, &[0], 0);
    l.restore(
        c.key.clone(),
        Grant {
            family: c.family,
            resource: c.resource,
            device_ids: c.device_ids,
            accelerators: c.accelerators,
            units: UNITS_PER_ACCELERATOR,
            cores_percentage: None,
            partition: None,
            finished: false,
        },
    )
    .unwrap();
    assert_eq!(l.occupancy(0).unwrap().mode, Mode::Held(Family::Exclusive));
}

#[test]
fn slices_pack_onto_the_most_occupied_accelerator_that_fits() {
    let mut l = ledger(4);
    l.allocate(claim("a", Family::Sliced, &[2], 800_000))
        .unwrap();
    l.allocate(claim("b", Family::Sliced, &[3], 1_500_000))
        .unwrap();
    let request = |units| Request {
        family: Family::Sliced,
        candidates: &[0, 1, 2, 3],
        must_include: &[],
        size: 1,
        slice_units: units,
        cores_percentage: None,
    };
    // 3 is fuller but cannot take 400,000 more; 2 can.
    assert_eq!(prefer(&l, &request(400_000)), vec![2]);
    assert_eq!(prefer(&l, &request(100_000)), vec![3]);
    // Pristine ones tie and go by position.
    assert_eq!(prefer(&l, &request(1_000_000)), vec![0]);
    // Identical state, identical answer.
    assert_eq!(prefer(&l.clone(), &request(1_000_000)), vec![0]);
}

#[test]
fn a_slice_is_offered_only_where_its_own_units_fit_on_each_accelerator() {
    use super::placement::prefer_by;
    // 0 holds 60 % (640,000 left); 1 is pristine. A 50 % slice (800,000) fits only on 1.
    let mut l = ledger(2);
    l.allocate(claim("a", Family::Sliced, &[0], 960_000))
        .unwrap();
    let request = Request {
        family: Family::Sliced,
        candidates: &[0, 1],
        must_include: &[],
        size: 1,
        slice_units: 1,
        cores_percentage: None,
    };
    assert_eq!(
        prefer(&l, &request),
        vec![0],
        "ranked with 1 unit, 0 looks best"
    );
    assert_eq!(prefer_by(&l, &request, &|_| 800_000), vec![1]);
    // Per accelerator: the same MiB budget is 500,000 units on 0 and 1,000,000 on 1 (half the
    // VRAM), so 0 — fuller, and with room for it — is offered.
    let units_on = |i: u32| if i == 0 { 500_000 } else { 1_000_000 };
    assert_eq!(prefer_by(&l, &request, &units_on), vec![0]);
    // Nowhere fits: nothing is offered (the kubelet picks; Allocate refuses).
    assert_eq!(prefer_by(&l, &request, &|_| 1_600_001), Vec::<u32>::new());
}

#[test]
fn a_slice_of_unknown_size_is_offered_the_most_room_first() {
    use super::placement::roomiest;
    let mut l = ledger(3);
    l.allocate(claim("a", Family::Sliced, &[0], 960_000))
        .unwrap();
    l.allocate(claim("b", Family::Sliced, &[2], 1_600_000))
        .unwrap();
    let request = |size| Request {
        family: Family::Sliced,
        candidates: &[0, 1, 2],
        must_include: &[],
        size,
        slice_units: 0,
        cores_percentage: None,
    };
    assert_eq!(roomiest(&l, &request(1)), vec![1]);
    // 2 is full: never offered.
    assert_eq!(roomiest(&l, &request(3)), vec![1, 0]);
}

#[test]
fn exclusive_sets_prefer_one_numa_node_and_nvlink() {
    // 0-3 on NUMA 0, 4-7 on NUMA 1; 1 is taken, so NUMA 1 holds a whole set of three.
    let mut l = ledger(8);
    l.allocate(claim("a", Family::Exclusive, &[1], 0)).unwrap();
    let all = [0, 1, 2, 3, 4, 5, 6, 7];
    let request = |size| Request {
        family: Family::Exclusive,
        candidates: &all,
        must_include: &[],
        size,
        slice_units: 0,
        cores_percentage: None,
    };
    assert_eq!(prefer(&l, &request(3)), vec![0, 2, 3]);
    assert_eq!(prefer(&l, &request(4)), vec![4, 5, 6, 7]);
    // One accelerator goes where it leaves the other NUMA node whole.
    assert_eq!(prefer(&l, &request(1)), vec![0]);

    // NVLink pairs 4-6 and 5-7: a pair request takes a linked pair.
    let mut seats: Vec<Seat> = (0..8).map(|i| seat(i, 0)).collect();
    for (a, b) in [(4, 6), (5, 7)] {
        seats[a as usize].peers.insert(b, "NV18".into());
        seats[b as usize].peers.insert(a, "NV18".into());
    }
    let linked = Ledger::new(seats, Policy::default());
    assert_eq!(prefer(&linked, &request(2)), vec![4, 6]);
}

#[test]
fn shared_preference_offers_distinct_accelerators_with_a_share_left() {
    let mut l = ledger(3);
    for n in 0..SHARES_PER_ACCELERATOR {
        l.allocate(claim(&format!("p{n}"), Family::Shared, &[0], 0))
            .unwrap();
    }
    l.allocate(claim("q", Family::Shared, &[2], 0)).unwrap();
    let request = Request {
        family: Family::Shared,
        candidates: &[0, 0, 1, 1, 2, 2],
        must_include: &[],
        size: 2,
        slice_units: 0,
        cores_percentage: None,
    };
    assert_eq!(prefer(&l, &request), vec![2, 1]);
}

// ---- cores where compute is not over-committed (Hygon, Cambricon, MetaX, Moore Threads) ----

/// A ledger of `n` four-slot accelerators whose manufacturer does not over-commit compute.
fn counting_cores(n: u32, policy: Policy) -> Ledger {
    Ledger::new(
        (0..n).map(|i| Seat {
            slice_capacity: HYGON_SLICES_PER_ACCELERATOR,
            ..seat(i, 0)
        }),
        Policy {
            cores_overcommit: false,
            ..policy
        },
    )
}

/// A slice of `units` and `cores` percent on `accelerator`.
fn slice(pod: &str, accelerator: u32, units: u64, cores: Option<u32>) -> Claim {
    Claim {
        cores_percentage: cores,
        ..claim(pod, Family::Sliced, &[accelerator], units)
    }
}

#[test]
fn a_slice_that_would_take_its_accelerator_past_100_cores_percent_is_refused() {
    let mut l = counting_cores(2, Policy::default());
    l.allocate(slice("a", 0, 400_000, Some(60))).unwrap();
    let err = l.allocate(slice("b", 0, 400_000, Some(50))).unwrap_err();
    assert_eq!(
        err,
        Refusal::NoCompute {
            accelerator: "0 (GPU-0)".into(),
            used: 60,
            needed: 50
        }
    );
    assert_eq!(
        err.to_string(),
        "accelerator 0 (GPU-0) has 60 of its 100 cores percent taken; the slice needs 50"
    );
    // Exactly 100 fits, and then not one percent more, whatever room the units leave.
    l.allocate(slice("c", 0, 400_000, Some(40))).unwrap();
    assert_eq!(l.occupancy(0).unwrap().cores_percentage, 100);
    assert!(matches!(
        l.allocate(slice("d", 0, 1, Some(1))),
        Err(Refusal::NoCompute {
            used: 100,
            needed: 1,
            ..
        })
    ));
    // A slice naming no cores percentage counts 100: nothing else fits beside it.
    l.allocate(slice("e", 1, 1, None)).unwrap();
    assert_eq!(l.occupancy(1).unwrap().cores_percentage, 100);
    assert!(matches!(
        l.allocate(slice("f", 1, 1, Some(1))),
        Err(Refusal::NoCompute {
            used: 100,
            needed: 1,
            ..
        })
    ));
    // The refused claims left nothing behind.
    assert_eq!(l.grants().len(), 3);
    l.verify().unwrap();
    // Released, its cores are free again.
    l.pod_gone("a");
    assert_eq!(l.occupancy(0).unwrap().cores_percentage, 40);
    l.allocate(slice("b", 0, 400_000, Some(50))).unwrap();
    l.verify().unwrap();
}

#[test]
fn a_finished_pods_slice_gives_its_cores_back_when_it_stops_charging() {
    let mut l = counting_cores(1, Policy::default());
    l.allocate(slice("a", 0, 400_000, Some(100))).unwrap();
    assert!(l.allocate(slice("b", 0, 400_000, Some(10))).is_err());
    l.pod_finished("a");
    assert_eq!(l.occupancy(0).unwrap().cores_percentage, 0);
    l.allocate(slice("b", 0, 400_000, Some(10))).unwrap();
    // MetaX: the slice charges until the Pod is gone, its cores with it.
    let mut held = counting_cores(
        1,
        Policy {
            slices_held_until_gone: true,
            ..Policy::default()
        },
    );
    held.allocate(slice("a", 0, 400_000, Some(100))).unwrap();
    held.pod_finished("a");
    assert_eq!(held.occupancy(0).unwrap().cores_percentage, 100);
    assert!(held.allocate(slice("b", 0, 400_000, Some(10))).is_err());
}

#[test]
fn placement_skips_an_accelerator_whose_compute_is_taken() {
    // Issue 44 item 3: 0 holds a slice of 50 % VRAM and 100 % cores; a 25 % / 50 % slice fits 0
    // by units (0 is the fuller) but only 1 by cores.
    let mut l = counting_cores(2, Policy::default());
    l.allocate(slice("a", 0, 800_000, Some(100))).unwrap();
    let request = |cores| Request {
        family: Family::Sliced,
        candidates: &[0, 1],
        must_include: &[],
        size: 1,
        slice_units: 400_000,
        cores_percentage: cores,
    };
    assert_eq!(prefer(&l, &request(Some(50))), vec![1]);
    assert_eq!(prefer(&l, &request(None)), vec![1], "no percentage is 100");
    // The units still pack where the cores allow: 1 now holds 50, 0 none left.
    l.allocate(slice("b", 1, 400_000, Some(50))).unwrap();
    assert_eq!(prefer(&l, &request(Some(50))), vec![1]);
    assert_eq!(prefer(&l, &request(Some(51))), Vec::<u32>::new());
    // A slice of unknown size is not offered an accelerator without a cores percent left.
    use super::placement::roomiest;
    assert_eq!(roomiest(&l, &request(None)), vec![1]);
    // And the allocation refuses what the hint leaves out.
    assert!(matches!(
        l.allocate(slice("c", 0, 1, Some(1))),
        Err(Refusal::NoCompute { .. })
    ));
}

#[test]
fn over_committing_manufacturers_count_no_cores() {
    // NVIDIA, AMD, Ascend, Iluvatar, T-Head: the cores percentages on one card may pass 100.
    let mut l = ledger(2);
    assert!(
        l.policy().cores_overcommit,
        "the default policy over-commits"
    );
    for pod in ["a", "b", "c"] {
        l.allocate(slice(pod, 0, 300_000, Some(100))).unwrap();
    }
    l.allocate(slice("d", 0, 1, None)).unwrap();
    assert_eq!(l.occupancy(0).unwrap().cores_percentage, 0);
    let request = Request {
        family: Family::Sliced,
        candidates: &[0, 1],
        must_include: &[],
        size: 1,
        slice_units: 400_000,
        cores_percentage: Some(100),
    };
    assert_eq!(prefer(&l, &request), vec![0], "slices still pack");
    l.verify().unwrap();
}

#[test]
fn the_slice_gate_off_lifts_the_cores_check_too() {
    // GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=false: a slice is allocated anyway; the cores
    // are still counted, past 100, and undone exactly.
    let mut open = counting_cores(
        1,
        Policy {
            slice_gate: false,
            ..Policy::default()
        },
    );
    open.allocate(slice("a", 0, 400_000, Some(100))).unwrap();
    open.allocate(slice("b", 0, 400_000, Some(100))).unwrap();
    assert_eq!(open.occupancy(0).unwrap().cores_percentage, 200);
    open.verify().unwrap();
    open.pod_gone("a");
    assert_eq!(open.occupancy(0).unwrap().cores_percentage, 100);
}

#[test]
fn a_restart_counts_the_same_cores() {
    let mut l = counting_cores(2, Policy::default());
    l.allocate(slice("a", 0, 400_000, Some(70))).unwrap();
    l.allocate(slice("b", 0, 400_000, Some(30))).unwrap();
    l.allocate(slice("c", 1, 400_000, None)).unwrap();
    let restarted = restart(&l);
    assert_eq!(restarted.occupancies(), l.occupancies());
    assert_eq!(restarted.occupancy(0).unwrap().cores_percentage, 100);
    assert_eq!(restarted.occupancy(1).unwrap().cores_percentage, 100);
    // A journalled slice the card's compute cannot hold is refused on restore, like one short of
    // units.
    let mut over = grant(Family::Sliced, &[0], 1);
    over.cores_percentage = Some(1);
    let mut fresh = restart(&l);
    assert!(matches!(
        fresh.restore(GrantKey::new("d", "main"), over),
        Err(Refusal::NoCompute { .. })
    ));
}

#[test]
fn verify_bounds_cores_where_compute_is_not_over_committed() {
    let slices = |cores: &[u32]| {
        cores
            .iter()
            .map(|c| Grant {
                cores_percentage: Some(*c),
                ..grant(Family::Sliced, &[0], 1)
            })
            .collect::<Vec<_>>()
    };
    let counting = Policy {
        cores_overcommit: false,
        ..Policy::default()
    };
    forced([seat(0, 0)], counting, slices(&[60, 40]))
        .verify()
        .unwrap();
    let err = forced([seat(0, 0)], counting, slices(&[60, 41]))
        .verify()
        .unwrap_err();
    assert_eq!(err, "accelerator 0 has 101 cores percent taken");
    // Over-committed compute, or the gate off: no bound.
    forced([seat(0, 0)], Policy::default(), slices(&[60, 41]))
        .verify()
        .unwrap();
    let open = Policy {
        slice_gate: false,
        ..counting
    };
    forced([seat(0, 0)], open, slices(&[60, 41]))
        .verify()
        .unwrap();
}

// ---- property test: random histories never over-commit, lose a grant or drift ----

#[derive(Debug, Clone)]
enum Op {
    Allocate {
        pod: u8,
        container: u8,
        family: u8,
        accelerators: Vec<u32>,
        units: u64,
        cores: Option<u32>,
    },
    Retry,
    GiveBackLast,
    Finish(u8),
    Delete(u8),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            0u8..6,
            0u8..2,
            0u8..3,
            prop::collection::vec(0u32..4, 1..3),
            1u64..1_700_000,
            prop::option::weighted(0.8, 0u32..=100),
        )
            .prop_map(|(pod, container, family, accelerators, units, cores)| Op::Allocate {
                pod, container, family, accelerators, units, cores,
            }),
        1 => Just(Op::Retry),
        1 => Just(Op::GiveBackLast),
        1 => (0u8..6).prop_map(Op::Finish),
        1 => (0u8..6).prop_map(Op::Delete),
        1 => Just(Op::Restart),
    ]
}

/// The journal's round trip: every grant restored into a fresh ledger.
fn restart(l: &Ledger) -> Ledger {
    let mut fresh = Ledger::new(l.seats().cloned(), l.policy());
    // Charging grants first, then the released ones, as the journal replays them.
    let (charging, released): (Vec<_>, Vec<_>) = l.grants().iter().partition(|(_, g)| l.charges(g));
    for (key, grant) in charging.into_iter().chain(released) {
        fresh
            .restore(key.clone(), grant.clone())
            .unwrap_or_else(|e| panic!("restoring {key}: {e}"));
    }
    fresh
}

proptest! {
    /// The hint and the allocation read one room: every accelerator the hint offers a slice of
    /// `units` and `cores` percent is one the allocation grants that slice on, and every one it
    /// leaves out, it refuses — cores counted or not.
    #[test]
    fn an_offered_accelerator_is_always_granted(
        held in prop::collection::vec(
            (0u32..4, 1u64..=1_600_000, prop::option::weighted(0.8, 0u32..=100)),
            0..12,
        ),
        units in 1u64..=1_600_000,
        cores in prop::option::weighted(0.8, 0u32..=100),
        overcommit in any::<bool>(),
    ) {
        use super::placement::prefer_by;
        let policy = Policy { cores_overcommit: overcommit, ..Policy::default() };
        let mut l = Ledger::new((0..4).map(|i| Seat { slice_capacity: 3, ..seat(i, 0) }), policy);
        for (n, (index, u, c)) in held.iter().enumerate() {
            let _ = l.allocate(slice(&format!("held{n}"), *index, *u, *c));
        }
        let request = Request { family: Family::Sliced, candidates: &[0, 1, 2, 3], must_include: &[], size: 4, slice_units: 0, cores_percentage: cores };
        let offered = prefer_by(&l, &request, &|_| units);
        for index in 0..4 {
            let granted = l.clone().allocate(slice("new", index, units, cores)).is_ok();
            prop_assert_eq!(offered.contains(&index), granted, "accelerator {}", index);
        }
    }

    /// No history over-commits an accelerator — shares, slots, units, and cores where compute is
    /// not over-committed (`verify`) —, loses a grant, or counts differently after a restart.
    #[test]
    fn histories_keep_every_invariant(
        ops in prop::collection::vec(op(), 1..60),
        release in any::<bool>(),
        overcommit in any::<bool>(),
    ) {
        let policy = Policy {
            release_terminated_pods: release,
            cores_overcommit: overcommit,
            ..Policy::default()
        };
        let mut l = Ledger::new((0..4).map(|i| Seat { slice_capacity: 3, ..seat(i, i / 2) }), policy);
        let mut expected: BTreeMap<GrantKey, Grant> = BTreeMap::new();
        let mut last: Option<(Claim, Receipt)> = None;
        for op in ops {
            match op {
                Op::Allocate { pod, container, family, accelerators, units, cores } => {
                    let family = [Family::Exclusive, Family::Shared, Family::Sliced][family as usize];
                    let mut c = claim(&format!("pod{pod}"), family, &accelerators, units);
                    c.key.container = format!("c{container}");
                    if family == Family::Sliced {
                        c.cores_percentage = cores;
                    }
                    let before = l.grants().clone();
                    match l.allocate(c.clone()) {
                        Ok(receipt) => {
                            let grant = l.grant(&c.key).cloned().unwrap();
                            prop_assert_eq!(&grant.accelerators, &{
                                let mut a = accelerators.clone(); a.sort(); a.dedup(); a
                            });
                            expected.insert(c.key.clone(), grant);
                            last = Some((c, receipt));
                        }
                        Err(_) => prop_assert_eq!(&before, l.grants()),
                    }
                }
                Op::Retry => {
                    if let Some((c, _)) = &last
                        && l.grant(&c.key).is_some() {
                            let before = l.occupancies().clone();
                            let receipt = l.allocate(c.clone()).unwrap();
                            prop_assert!(!receipt.fresh);
                            prop_assert_eq!(&before, l.occupancies());
                        }
                }
                Op::GiveBackLast => {
                    if let Some((c, receipt)) = last.take()
                        && l.grant(&c.key).is_some() && receipt.fresh {
                            l.give_back(&receipt);
                            match &receipt.previous {
                                Some(p) => { expected.insert(c.key.clone(), p.clone()); }
                                None => { expected.remove(&c.key); }
                            }
                        }
                }
                Op::Finish(pod) => {
                    let uid = format!("pod{pod}");
                    l.pod_finished(&uid);
                    for (k, g) in expected.iter_mut() {
                        if k.pod_uid == uid { g.finished = true; }
                    }
                    last = None;
                }
                Op::Delete(pod) => {
                    let uid = format!("pod{pod}");
                    l.pod_gone(&uid);
                    expected.retain(|k, _| k.pod_uid != uid);
                    last = None;
                }
                Op::Restart => {
                    let before = l.occupancies().clone();
                    l = restart(&l);
                    prop_assert_eq!(&before, l.occupancies());
                    last = None;
                }
            }
            prop_assert_eq!(l.verify(), Ok(()));
            prop_assert_eq!(l.grants(), &expected);
        }
    }
}

#[test]
fn an_unattributed_key_names_no_pod_and_one_set_of_devices() {
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let a = GrantKey::unattributed("nvidia.com/gpu", &ids(&["GPU-b", "GPU-a"]));
    assert!(a.is_unattributed());
    assert_eq!(a.pod_uid, "");
    // The same devices in any order are the same key; other devices or another resource are not.
    assert_eq!(
        a,
        GrantKey::unattributed("nvidia.com/gpu", &ids(&["GPU-a", "GPU-b"]))
    );
    assert_ne!(
        a,
        GrantKey::unattributed("nvidia.com/gpu", &ids(&["GPU-a"]))
    );
    assert_ne!(
        a,
        GrantKey::unattributed("nvidia.com/gpu.shared", &ids(&["GPU-a", "GPU-b"]))
    );
    assert!(!GrantKey::new("uid", "main").is_unattributed());
    assert_eq!(
        a.to_string(),
        "the grant of nvidia.com/gpu=GPU-a,GPU-b (container not named yet)"
    );
    // The ledger holds it like any other grant, and moves it to its container.
    let mut l = ledger(2);
    let mut c = claim("x", Family::Exclusive, &[1], 0);
    c.key = a.clone();
    l.allocate(c).unwrap();
    let grant = l.release(&a).unwrap();
    l.restore(GrantKey::new("pod", "main"), grant).unwrap();
    assert!(l.grant(&a).is_none());
    l.verify().unwrap();
}

fn grant(family: Family, accelerators: &[u32], units: u64) -> Grant {
    Grant {
        family,
        resource: format!("nvidia.com/gpu.{family}"),
        device_ids: accelerators.iter().map(|i| format!("dev-{i}")).collect(),
        accelerators: accelerators.to_vec(),
        units,
        cores_percentage: None,
        partition: None,
        finished: false,
    }
}

/// A ledger holding `grants` as written, bypassing the admission rules, with its running count
/// made to agree: the states `verify` exists to catch.
fn forced(seats: impl IntoIterator<Item = Seat>, policy: Policy, grants: Vec<Grant>) -> Ledger {
    let mut l = Ledger::new(seats, policy);
    for (n, g) in grants.into_iter().enumerate() {
        l.grants
            .insert(GrantKey::new(format!("pod-{n}"), "main"), g);
    }
    l.occupancy = l.recount();
    l
}

#[test]
fn a_grant_key_names_its_pod_and_container() {
    assert_eq!(
        GrantKey::new("7f3e", "trainer").to_string(),
        "pod 7f3e container trainer"
    );
}

#[test]
fn the_ledger_keeps_the_policy_it_was_given() {
    for policy in [
        Policy::default(),
        Policy {
            release_terminated_pods: false,
            slice_gate: false,
            ..Policy::default()
        },
        Policy {
            release_terminated_pods: true,
            slice_gate: false,
            ..Policy::default()
        },
    ] {
        assert_eq!(Ledger::new([seat(0, 0)], policy).policy(), policy);
    }
}

#[test]
fn every_seat_has_an_occupancy_free_at_first() {
    let mut l = ledger(3);
    assert_eq!(
        l.occupancies(),
        &BTreeMap::from([
            (0, Occupancy::FREE),
            (1, Occupancy::FREE),
            (2, Occupancy::FREE)
        ])
    );
    l.allocate(claim("a", Family::Exclusive, &[1], 0)).unwrap();
    assert_eq!(l.occupancies().len(), 3);
    assert_eq!(l.occupancies()[&1].mode, Mode::Held(Family::Exclusive));
    assert_eq!(l.occupancies()[&1].holders, 1);
}

#[test]
fn set_health_reports_only_a_change() {
    let mut l = ledger(1);
    assert!(!l.set_health(0, true), "already healthy");
    assert!(l.set_health(0, false));
    assert!(!l.set_health(0, false), "already unhealthy");
    assert!(!l.seat(0).unwrap().healthy);
    assert!(l.set_health(0, true));
    assert!(l.seat(0).unwrap().healthy);
    assert!(!l.set_health(9, false), "no such accelerator");
}

#[test]
fn a_retry_is_found_only_by_the_same_resource_and_the_same_devices() {
    let mut l = ledger(3);
    l.allocate(claim("a", Family::Shared, &[0, 1], 0)).unwrap();
    let key = GrantKey::new("a", "main");
    let resource = "nvidia.com/gpu.shared";
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The kubelet may name the devices in any order.
    assert_eq!(
        l.find_by_devices(resource, &ids(&["a-1", "a-0"])),
        Some(&key)
    );
    assert_eq!(
        l.find_by_devices("nvidia.com/gpu", &ids(&["a-0", "a-1"])),
        None
    );
    assert_eq!(l.find_by_devices(resource, &ids(&["a-0"])), None);
    assert_eq!(l.find_by_devices(resource, &ids(&["a-0", "a-2"])), None);
    // A finished Pod's tokens are back with the kubelet: a call naming them is a new one.
    l.pod_finished("a");
    assert_eq!(l.find_by_devices(resource, &ids(&["a-0", "a-1"])), None);
}

#[test]
fn a_slice_budget_is_1_to_the_units_of_one_accelerator() {
    let mut l = ledger(2);
    for units in [0, UNITS_PER_ACCELERATOR + 1] {
        assert_eq!(
            l.allocate(claim("a", Family::Sliced, &[0], units)),
            Err(Refusal::BadBudget {
                key: GrantKey::new("a", "main"),
                units
            })
        );
    }
    l.allocate(claim("a", Family::Sliced, &[0], 1)).unwrap();
    l.allocate(claim("b", Family::Sliced, &[1], UNITS_PER_ACCELERATOR))
        .unwrap();
    l.verify().unwrap();
}

#[test]
fn only_a_slice_needs_a_sliceable_accelerator() {
    let mut l = Ledger::new(
        [
            Seat {
                slice_capacity: 0,
                partitions: Vec::new(),
                ..seat(0, 0)
            },
            Seat {
                slice_capacity: 0,
                partitions: Vec::new(),
                ..seat(1, 0)
            },
        ],
        Policy::default(),
    );
    assert!(matches!(
        l.allocate(claim("s", Family::Sliced, &[0], 1)),
        Err(Refusal::NotGrantable {
            why: "it is not logically sliceable on this node",
            ..
        })
    ));
    l.allocate(claim("e", Family::Exclusive, &[0], 0)).unwrap();
    l.allocate(claim("h", Family::Shared, &[1], 0)).unwrap();
    l.verify().unwrap();
}

#[test]
fn a_released_grant_is_returned_and_frees_its_accelerators() {
    let mut l = ledger(2);
    l.allocate(claim("a", Family::Exclusive, &[0, 1], 0))
        .unwrap();
    let key = GrantKey::new("a", "main");
    let released = l.release(&key).unwrap();
    assert_eq!(released.accelerators, vec![0, 1]);
    assert_eq!(released.family, Family::Exclusive);
    assert!(l.grant(&key).is_none());
    assert_eq!(l.occupancy(0), Some(&Occupancy::FREE));
    assert_eq!(l.occupancy(1), Some(&Occupancy::FREE));
    assert_eq!(l.release(&key), None, "released once");
}

#[test]
fn pod_uids_are_the_pods_holding_grants() {
    let mut l = ledger(3);
    assert!(l.pod_uids().is_empty());
    l.allocate(claim("a", Family::Shared, &[0], 0)).unwrap();
    l.allocate(claim("b", Family::Shared, &[0], 0)).unwrap();
    let mut second = claim("a", Family::Shared, &[1], 0);
    second.key = GrantKey::new("a", "sidecar");
    l.allocate(second).unwrap();
    assert_eq!(
        l.pod_uids(),
        BTreeSet::from(["a".to_string(), "b".to_string()])
    );
    l.pod_gone("a");
    assert_eq!(l.pod_uids(), BTreeSet::from(["b".to_string()]));
}

#[test]
fn a_finished_pods_partition_stays_charged_until_the_pod_is_gone() {
    // The reclaimer destroys a hardware partition only when its Pod is gone.
    let l = ledger(1);
    let finished = |family| Grant {
        finished: true,
        ..grant(family, &[0], UNITS_PER_ACCELERATOR)
    };
    assert!(l.charges(&finished(Family::Partitioned)));
    for family in [Family::Exclusive, Family::Shared, Family::Sliced] {
        assert!(!l.charges(&finished(family)), "{family}");
    }
    let kept = Ledger::new(
        [seat(0, 0)],
        Policy {
            release_terminated_pods: false,
            ..Policy::default()
        },
    );
    assert!(kept.charges(&finished(Family::Sliced)));
}

#[test]
fn a_finished_pods_slice_stays_charged_where_its_driver_object_waits_for_the_pod() {
    // MetaX: the reclaimer destroys a slice's sGPU subdevice only when its Pod is gone.
    let mut l = Ledger::new(
        [seat(0, 0)],
        Policy {
            slices_held_until_gone: true,
            ..Policy::default()
        },
    );
    l.allocate(claim("a", Family::Sliced, &[0], 1_600_000))
        .unwrap();
    assert!(
        l.pod_finished("a").is_empty(),
        "a finished Pod's slice is not released"
    );
    assert!(l.allocate(claim("b", Family::Sliced, &[0], 1)).is_err());
    let finished = |family| Grant {
        finished: true,
        ..grant(family, &[0], UNITS_PER_ACCELERATOR)
    };
    assert!(l.charges(&finished(Family::Sliced)));
    assert!(!l.charges(&finished(Family::Exclusive)));
    assert_eq!(l.pod_gone("a").len(), 1);
    l.allocate(claim("b", Family::Sliced, &[0], 1)).unwrap();
}

#[test]
fn verify_catches_a_running_count_that_differs_from_the_recount() {
    let mut l = ledger(1);
    l.allocate(claim("a", Family::Shared, &[0], 0)).unwrap();
    l.verify().unwrap();
    l.occupancy.get_mut(&0).unwrap().shares = 2;
    let err = l.verify().unwrap_err();
    assert!(err.contains("differs from the recount"), "{err}");
}

#[test]
fn verify_catches_two_modes_on_one_accelerator() {
    let l = forced(
        [seat(0, 0)],
        Policy::default(),
        vec![
            grant(Family::Shared, &[0], UNITS_PER_SHARE),
            grant(Family::Sliced, &[0], 1),
        ],
    );
    let err = l.verify().unwrap_err();
    assert!(err.contains("hosts modes"), "{err}");
}

#[test]
fn verify_catches_an_exclusive_accelerator_with_two_holders() {
    let exclusive = || grant(Family::Exclusive, &[0], UNITS_PER_ACCELERATOR);
    let l = forced(
        [seat(0, 0)],
        Policy::default(),
        vec![exclusive(), exclusive()],
    );
    let err = l.verify().unwrap_err();
    assert_eq!(err, "accelerator 0 is exclusive with 2 holders");
    forced([seat(0, 0)], Policy::default(), vec![exclusive()])
        .verify()
        .unwrap();
}

#[test]
fn verify_allows_every_share_and_not_one_more() {
    let shares = |n: u32| {
        (0..n)
            .map(|_| grant(Family::Shared, &[0], UNITS_PER_SHARE))
            .collect::<Vec<_>>()
    };
    forced([seat(0, 0)], Policy::default(), shares(1))
        .verify()
        .unwrap();
    forced(
        [seat(0, 0)],
        Policy::default(),
        shares(SHARES_PER_ACCELERATOR),
    )
    .verify()
    .unwrap();
    let err = forced(
        [seat(0, 0)],
        Policy::default(),
        shares(SHARES_PER_ACCELERATOR + 1),
    )
    .verify()
    .unwrap_err();
    assert_eq!(err, "accelerator 0 has 11 shares");
}

#[test]
fn verify_bounds_slots_and_units_only_while_the_slice_gate_is_on() {
    let two_slots = || Seat {
        slice_capacity: 2,
        partitions: Vec::new(),
        ..seat(0, 0)
    };
    let slices = |units: &[u64]| {
        units
            .iter()
            .map(|u| grant(Family::Sliced, &[0], *u))
            .collect::<Vec<_>>()
    };
    let open = Policy {
        slice_gate: false,
        ..Policy::default()
    };
    // Exactly full: both slots, every unit.
    let full = [UNITS_PER_ACCELERATOR / 2, UNITS_PER_ACCELERATOR / 2];
    forced([two_slots()], Policy::default(), slices(&full))
        .verify()
        .unwrap();
    // One slot too many.
    let err = forced([two_slots()], Policy::default(), slices(&[1, 1, 1]))
        .verify()
        .unwrap_err();
    assert_eq!(err, "accelerator 0 hosts 3 slices of 2");
    forced([two_slots()], open, slices(&[1, 1, 1]))
        .verify()
        .unwrap();
    // One unit too many.
    let over = [UNITS_PER_ACCELERATOR / 2, UNITS_PER_ACCELERATOR / 2 + 1];
    let err = forced([two_slots()], Policy::default(), slices(&over))
        .verify()
        .unwrap_err();
    assert_eq!(err, "accelerator 0 is over-committed");
    forced([two_slots()], open, slices(&over)).verify().unwrap();
}

#[test]
fn one_exclusive_accelerator_goes_to_the_numa_node_with_the_fewest_free() {
    // 0-3 on NUMA 0, 4-7 on NUMA 1; 5 is taken, so NUMA 1 has 3 free and NUMA 0 stays whole.
    let mut l = ledger(8);
    l.allocate(claim("a", Family::Exclusive, &[5], 0)).unwrap();
    let request = Request {
        family: Family::Exclusive,
        candidates: &[0, 1, 2, 3, 4, 5, 6, 7],
        must_include: &[],
        size: 1,
        slice_units: 0,
        cores_percentage: None,
    };
    assert_eq!(prefer(&l, &request), vec![4]);
}

/// 32 accelerators, 0-15 on NUMA 0 and 16-31 on NUMA 1, with 0-3 NVLinked to each other and
/// 16-19 held: 28 candidates.
fn large_node() -> Ledger {
    let mut seats: Vec<Seat> = (0..32).map(|i| seat(i, i / 16)).collect();
    for a in 0..4u32 {
        for b in (0..4u32).filter(|b| *b != a) {
            seats[a as usize].peers.insert(b, "NV18".into());
        }
    }
    let mut l = Ledger::new(seats, Policy::default());
    for i in 16..20 {
        l.allocate(claim(&format!("t{i}"), Family::Exclusive, &[i], 0))
            .unwrap();
    }
    l
}

#[test]
fn past_20000_candidate_sets_the_exclusive_preference_turns_greedy() {
    let l = large_node();
    let all: Vec<u32> = (0..32).collect();
    let request = |size| Request {
        family: Family::Exclusive,
        candidates: &all,
        must_include: &[],
        size,
        slice_units: 0,
        cores_percentage: None,
    };
    // 3 of 28 is 3,276 sets, all scored: the NVLinked ones win.
    assert_eq!(prefer(&l, &request(3)), vec![0, 1, 2]);
    // 4 of 28 is 20,475 sets: greedy, the NUMA node with the fewest free accelerators that holds
    // the request, by position; NVLink is not weighed.
    assert_eq!(prefer(&l, &request(4)), vec![20, 21, 22, 23]);
    // No NUMA node holds 20: positions in order.
    let first_twenty: Vec<u32> = (0..16).chain(20..24).collect();
    assert_eq!(prefer(&l, &request(20)), first_twenty);
}

#[test]
fn exactly_20000_candidate_sets_are_still_scored() {
    // One accelerator to join a required one: as many sets as candidates. 0 (required) and most
    // candidates are on NUMA 0, the last ten on NUMA 1. Scored, the partner shares 0's NUMA node;
    // greedy, it would come from NUMA 1, the node with the fewest free.
    for (candidates, want) in [(20_000u32, 1u32), (20_001, 19_992)] {
        let seats = (0..=candidates).map(|i| seat(i, u32::from(i + 10 > candidates)));
        let l = Ledger::new(seats, Policy::default());
        let all: Vec<u32> = (1..=candidates).collect();
        let request = Request {
            family: Family::Exclusive,
            candidates: &all,
            must_include: &[0],
            size: 2,
            slice_units: 0,
            cores_percentage: None,
        };
        assert_eq!(
            prefer(&l, &request),
            vec![0, want],
            "{candidates} candidates"
        );
    }
}

fn claim_grant(uid: &str, accelerators: &[u32]) -> Claim {
    Claim {
        key: GrantKey::claim(uid, "pod-c"),
        family: Family::Exclusive,
        resource: "nvidia.gpustack.ai".into(),
        device_ids: accelerators.iter().map(|i| format!("gpu-{i}")).collect(),
        accelerators: accelerators.to_vec(),
        slice_units: 0,
        cores_percentage: None,
        partition: None,
    }
}

#[test]
fn a_claims_card_is_no_token_of_the_plugin_and_no_pod_holds_it() {
    let mut l = ledger(4);
    // A Pod whose UID sorts after the claims' keys is still no claim.
    l.allocate(claim("zz-pod", Family::Exclusive, &[3], 0))
        .unwrap();
    assert!(!l.held_by_claim(3) && l.held_by_container(3));
    l.allocate(claim_grant("c-1", &[0])).unwrap();
    l.allocate(claim("pod-a", Family::Exclusive, &[1], 0))
        .unwrap();
    // The claim's card: every family's token is unusable, the exclusive one included (the
    // kubelet never handed it out, so it would count it free).
    for family in [Family::Exclusive, Family::Shared, Family::Sliced] {
        assert!(!l.token_healthy(0, family), "{family}");
    }
    // A container's exclusive card keeps its exclusive token (the kubelet knows it is used).
    assert!(l.token_healthy(1, Family::Exclusive));
    assert!(l.token_healthy(2, Family::Exclusive));
    assert!(l.held_by_claim(0) && !l.held_by_claim(1) && !l.held_by_claim(2));
    assert!(l.held_by_container(1) && !l.held_by_container(0) && !l.held_by_container(2));
    // The one ledger: neither API may take what the other holds.
    assert!(matches!(
        l.allocate(claim("pod-b", Family::Exclusive, &[0], 0)),
        Err(Refusal::ExclusivelyHeld { .. })
    ));
    assert!(matches!(
        l.allocate(claim_grant("c-2", &[1])),
        Err(Refusal::ExclusivelyHeld { .. })
    ));
    // A claim is no Pod: the Pods' reconcile never sees it.
    assert_eq!(
        l.pod_uids(),
        BTreeSet::from(["pod-a".to_string(), "zz-pod".to_string()])
    );
    assert_eq!(l.claim_uids(), BTreeSet::from(["c-1".to_string()]));
    assert_eq!(GrantKey::claim("c-1", "pod-c").claim_uid(), Some("c-1"));
    assert_eq!(GrantKey::claim("c-1", "pod-c").claim_pod(), Some("pod-c"));
    assert_eq!(GrantKey::new("c-1", "dra").claim_uid(), None);
    assert_eq!(GrantKey::new("c-1", "dra").claim_pod(), None);
    assert_eq!(
        GrantKey::claim("c-1", "pod-c").to_string(),
        "ResourceClaim c-1"
    );
    assert_eq!(l.claim_key("c-1"), Some(&GrantKey::claim("c-1", "pod-c")));
    assert_eq!(l.claim_key("c-"), None);
    assert_eq!(l.claim_key("c-2"), None);
    // A retried prepare is answered without charging again.
    assert!(!l.allocate(claim_grant("c-1", &[0])).unwrap().fresh);
    l.release(&GrantKey::claim("c-1", "pod-c")).unwrap();
    assert!(l.token_healthy(0, Family::Exclusive) && !l.held_by_claim(0));
    l.verify().unwrap();
}
