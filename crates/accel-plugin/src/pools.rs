//! Token pools: which device IDs each resource advertises, which accelerator each names, and
//! their health as the ledger sees it.
//!
//! `<base>` has one token per accelerator, `<base>.shared` ten, `<base>.sliced` the slice count
//! (only where slicing is possible), `device.gpustack.ai/<manufacturer>.visibility` 512. Only
//! accelerators that can be granted whole feed them. IDs are `<uuid>` and `<uuid>::<n>`.
//!
//! `<base>.partitioned` (registered only where an accelerator is in a partitioning mode) is the
//! exception: its tokens are a fungible count over a stable ID set, each partitioned
//! accelerator's largest per-profile instance count (7 on an H100). Which accelerator a
//! partition lands on is the allocator's choice, so its health is node-level: as many IDs are
//! Healthy as the node has room (Σ per accelerator of allocated + claimable unowned instances +
//! largest placeable count, `accel_core::ledger::partitions::room`), every ID a live grant holds
//! among them, the rest
//! Unhealthy; the tokens carry no NUMA node.

use std::collections::{BTreeMap, BTreeSet};

use accel_core::Manufacturer;
use accel_core::inventory::Grantable;
use accel_core::ledger::units::{SHARES_PER_ACCELERATOR, VISIBILITY_TOKENS_PER_ACCELERATOR};
use accel_core::ledger::{Family, Ledger, Seat, partitions};

use crate::service::Offer;

/// What a pool serves: one family, or the sidecar's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolKind {
    Family(Family),
    Visibility,
}

/// One resource's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub resource: String,
    pub kind: PoolKind,
    /// Token ID → accelerator index, in advertised order.
    pub tokens: BTreeMap<String, u32>,
    /// The distinct accelerators the tokens name, ascending.
    pub accelerators: Vec<u32>,
    /// Per accelerator name (the part of a token ID before `::`), sorted: its index and how
    /// many tokens it has, so a token ID is looked up by parsing it rather than searching
    /// thousands of long IDs (GetPreferredAllocation maps every available ID).
    names: Vec<(String, u32, u32)>,
}

/// What every token of one accelerator shares: its state in this pool and its NUMA node. A
/// pool's token list is a function of these, so ListAndWatch compares them (a few entries)
/// instead of rebuilding thousands of tokens on every grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceleratorState {
    pub index: u32,
    pub healthy: bool,
    pub numa_node: Option<u32>,
}

/// What a pool's ListAndWatch list is a function of: its accelerators' states, or (for the
/// partitioned pool, whose health is node-level) every token's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolView {
    Accelerators(Vec<AcceleratorState>),
    Tokens(Vec<TokenState>),
}

/// One advertised token with its health and NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenState {
    pub id: String,
    pub healthy: bool,
    pub numa_node: Option<u32>,
}

impl Pool {
    /// The pools of one manufacturer's accelerators. `slices` is false when the preload
    /// library for the node's runtime major is missing: then no sliced pool at all. Every other
    /// pool is built even when no accelerator feeds it (all in MIG mode, or passed through), so
    /// the set of resources stays fixed while the accelerators change under it: an empty pool
    /// advertises no token.
    pub fn build(manufacturer: Manufacturer, seats: &[Seat], slices: bool) -> Vec<Pool> {
        Pool::build_offer(
            &Offer {
                sliced: slices,
                ..Offer::of(manufacturer)
            },
            seats,
        )
    }

    /// The pools of what a backend offers: exclusive (unless whole cards go through DRA only),
    /// shared and sliced when offered, visibility always, in that order (the kubelet registers
    /// them one by one).
    pub fn build_offer(offer: &Offer, seats: &[Seat]) -> Vec<Pool> {
        let base = offer.resource_base.as_str();
        let whole: Vec<&Seat> = seats
            .iter()
            .filter(|s| s.grantable == Grantable::Whole)
            .collect();
        let mut pools = Vec::new();
        let pool = |resource: String, kind, per: u32| {
            let seats = || {
                whole
                    .iter()
                    .filter(|s| kind != PoolKind::Family(Family::Sliced) || s.slice_capacity > 0)
            };
            let per_of = |s: &Seat| {
                if kind == PoolKind::Family(Family::Sliced) {
                    s.slice_capacity
                } else {
                    per
                }
            };
            build(resource, kind, seats().copied(), per_of)
        };
        if offer.exclusive {
            pools.push(pool(
                base.to_string(),
                PoolKind::Family(Family::Exclusive),
                1,
            ));
        }
        if offer.shared {
            pools.push(pool(
                format!("{base}.shared"),
                PoolKind::Family(Family::Shared),
                SHARES_PER_ACCELERATOR,
            ));
        }
        if offer.sliced {
            pools.push(pool(
                format!("{base}.sliced"),
                PoolKind::Family(Family::Sliced),
                0,
            ));
        }
        // The SSH sidecar sees its owner's accelerator or partition: every accelerator that
        // feeds a family has visibility tokens, one in a partitioning mode too.
        pools.push(build(
            offer.visibility_resource.clone(),
            PoolKind::Visibility,
            seats.iter().filter(|s| s.grantable.feeds_any()),
            |_| VISIBILITY_TOKENS_PER_ACCELERATOR,
        ));
        let partitioned: Vec<&Seat> = seats
            .iter()
            .filter(|s| {
                s.grantable == Grantable::PartitionsOnly && partitions::token_ceiling(s) > 0
            })
            .collect();
        if offer.partitioned && !partitioned.is_empty() {
            pools.push(build(
                format!("{base}.partitioned"),
                PoolKind::Family(Family::Partitioned),
                partitioned.into_iter(),
                partitions::token_ceiling,
            ));
        }
        pools
    }

    /// What this pool's token list is a function of now (compared by ListAndWatch).
    pub fn view(&self, ledger: &Ledger) -> PoolView {
        if self.kind == PoolKind::Family(Family::Partitioned) {
            PoolView::Tokens(self.partition_states(ledger))
        } else {
            PoolView::Accelerators(self.accelerator_states(ledger))
        }
    }

    /// The tokens of a view.
    pub fn tokens_of(&self, view: &PoolView) -> Vec<TokenState> {
        match view {
            PoolView::Accelerators(states) => self.states_from(states),
            PoolView::Tokens(tokens) => tokens.clone(),
        }
    }

    /// The partitioned pool's tokens: the IDs live grants hold, then as many more (in ID order)
    /// as the node has room, Healthy; the rest Unhealthy; no NUMA node.
    pub fn partition_states(&self, ledger: &Ledger) -> Vec<TokenState> {
        let held: BTreeSet<&str> = ledger
            .grants()
            .values()
            .filter(|g| g.family == Family::Partitioned && g.resource == self.resource)
            .flat_map(|g| g.device_ids.iter().map(String::as_str))
            .collect();
        let room: u32 = self
            .accelerators
            .iter()
            .filter_map(|i| ledger.seat(*i))
            .map(|s| partitions::room(s, ledger))
            .sum();
        let held_here = self
            .tokens
            .keys()
            .filter(|id| held.contains(id.as_str()))
            .count();
        let mut spare = usize::try_from(room)
            .unwrap_or(usize::MAX)
            .saturating_sub(held_here);
        self.tokens
            .keys()
            .map(|id| {
                let healthy = if held.contains(id.as_str()) {
                    true
                } else if spare > 0 {
                    spare -= 1;
                    true
                } else {
                    false
                };
                TokenState {
                    id: id.clone(),
                    healthy,
                    numa_node: None,
                }
            })
            .collect()
    }

    /// The accelerator a token ID of this pool names, `None` for an ID the pool does not
    /// advertise: the same answer as `tokens.get(id)`, without searching every token.
    pub fn accelerator_of(&self, id: &str) -> Option<u32> {
        // A byte scan, not `rsplit_once("::")`: a substring searcher costs more to set up than
        // the whole lookup, and GetPreferredAllocation runs this for every available ID.
        let bytes = id.as_bytes();
        let (name, suffix) = match bytes.iter().rposition(|&b| b == b':') {
            Some(at) if at > 0 && bytes[at - 1] == b':' => (&id[..at - 1], Some(&bytes[at + 1..])),
            _ => (id, None),
        };
        let at = self
            .names
            .binary_search_by(|(known, _, _)| known.as_str().cmp(name))
            .ok()?;
        let (_, index, per) = self.names[at];
        match suffix {
            None => (per == 1).then_some(index),
            Some(digits) => {
                // Only the canonical decimal form `token_id` writes.
                if per == 1 || digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
                    return None;
                }
                let n = digits.iter().try_fold(0u32, |n, &b| {
                    if b.is_ascii_digit() {
                        n.checked_mul(10)?.checked_add(u32::from(b - b'0'))
                    } else {
                        None
                    }
                })?;
                (n < per).then_some(index)
            }
        }
    }

    /// The family this pool's grants take in the ledger (none for visibility).
    pub fn family(&self) -> Option<Family> {
        match self.kind {
            PoolKind::Family(f) => Some(f),
            PoolKind::Visibility => None,
        }
    }

    /// Every token with its health now: Unhealthy when the accelerator fails the health rule
    /// or another mode holds it. Visibility tokens follow health only: the sidecar may see its
    /// workload's accelerator whatever mode the workload holds.
    pub fn states(&self, ledger: &Ledger) -> Vec<TokenState> {
        self.states_from(&self.accelerator_states(ledger))
    }

    /// The state of each accelerator the pool names, ascending by index: Unhealthy when it
    /// fails the health rule or another mode holds it (visibility follows health only).
    pub fn accelerator_states(&self, ledger: &Ledger) -> Vec<AcceleratorState> {
        self.accelerators
            .iter()
            .map(|&index| AcceleratorState {
                index,
                healthy: match self.kind {
                    PoolKind::Family(family) => ledger.token_healthy(index, family),
                    PoolKind::Visibility => ledger.seat(index).is_some_and(|s| s.healthy),
                },
                numa_node: ledger.seat(index).and_then(|s| s.numa_node),
            })
            .collect()
    }

    /// Every token with the state of its accelerator in `states` (from
    /// [`Pool::accelerator_states`]); a token whose accelerator is missing there is Unhealthy.
    pub fn states_from(&self, states: &[AcceleratorState]) -> Vec<TokenState> {
        self.tokens
            .iter()
            .map(|(id, index)| {
                let state = states
                    .binary_search_by_key(index, |s| s.index)
                    .ok()
                    .map(|at| states[at]);
                TokenState {
                    id: id.clone(),
                    healthy: state.is_some_and(|s| s.healthy),
                    numa_node: state.and_then(|s| s.numa_node),
                }
            })
            .collect()
    }

    /// The socket file name this pool's plugin listens on, in the device-plugins directory.
    pub fn socket_name(&self) -> String {
        let safe: String = self
            .resource
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("gpustack-{safe}.sock")
    }
}

/// A pool of `per_of(seat)` tokens on each of `seats`.
fn build<'s>(
    resource: String,
    kind: PoolKind,
    seats: impl Iterator<Item = &'s Seat> + Clone,
    per_of: impl Fn(&Seat) -> u32,
) -> Pool {
    let mut names: Vec<(String, u32, u32)> = seats
        .clone()
        .map(|s| (seat_name(s), s.index, per_of(s)))
        .collect();
    names.sort();
    let tokens: BTreeMap<String, u32> = seats
        .flat_map(|s| {
            let per = per_of(s);
            (0..per).map(move |n| (token_id(s, n, per), s.index))
        })
        .collect();
    let mut accelerators: Vec<u32> = tokens.values().copied().collect();
    accelerators.sort_unstable();
    accelerators.dedup();
    Pool {
        resource,
        kind,
        tokens,
        accelerators,
        names,
    }
}

fn seat_name(seat: &Seat) -> String {
    seat.uuid
        .clone()
        .unwrap_or_else(|| format!("accelerator-{}", seat.index))
}

fn token_id(seat: &Seat, n: u32, per: u32) -> String {
    let name = seat_name(seat);
    if per == 1 {
        name
    } else {
        format!("{name}::{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::ledger::Policy;

    fn seat(index: u32, grantable: Grantable) -> Seat {
        Seat {
            index,
            uuid: Some(format!("GPU-{index}")),
            numa_node: Some(index),
            peers: BTreeMap::new(),
            memory_mib: Some(1000),
            grantable,
            healthy: true,
            slice_capacity: 128,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn pools_count_tokens_per_family_and_skip_mig_and_passthrough_in_the_whole_families() {
        let seats = [
            seat(0, Grantable::Whole),
            seat(1, Grantable::PartitionsOnly),
            seat(2, Grantable::Nothing),
            seat(3, Grantable::Whole),
        ];
        let pools = Pool::build(Manufacturer::Nvidia, &seats, true);
        let sizes: Vec<(&str, usize)> = pools
            .iter()
            .map(|p| (p.resource.as_str(), p.tokens.len()))
            .collect();
        assert_eq!(
            sizes,
            [
                ("nvidia.com/gpu", 2),
                ("nvidia.com/gpu.shared", 20),
                ("nvidia.com/gpu.sliced", 256),
                // The MIG GPU's sidecar tokens too (its partitions are made visible); no
                // partitioned pool: its seat offers no profile.
                ("device.gpustack.ai/nvidia.visibility", 1536),
            ]
        );
        assert_eq!(pools[0].tokens.get("GPU-3"), Some(&3));
        assert_eq!(pools[1].accelerators, [0, 3]);
        assert_eq!(pools[1].tokens.get("GPU-0::9"), Some(&0));
        let without = Pool::build(Manufacturer::Nvidia, &seats, false);
        assert!(without.iter().all(|p| !p.resource.ends_with(".sliced")));
        // No accelerator grantable whole: every pool is still there, with no token.
        let none = Pool::build(Manufacturer::Nvidia, &seats[1..3], true);
        assert_eq!(none.len(), 4);
        assert!(
            none.iter()
                .all(|p| p.tokens.is_empty() == (p.kind != PoolKind::Visibility))
        );
        assert_eq!(
            pools[1].socket_name(),
            "gpustack-nvidia.com_gpu.shared.sock"
        );
    }

    #[test]
    fn the_partitioned_pool_is_served_only_where_a_gpu_is_in_mig_mode_and_it_is_offered() {
        use accel_core::ledger::partitions::PartitionShape;
        let mut mig = seat(1, Grantable::PartitionsOnly);
        mig.partitions = vec![PartitionShape {
            id: 19,
            name: "1g.10gb".into(),
            memory_mib: Some(9984),
            size: 1,
            starts: (0..7).collect(),
        }];
        let seats = [seat(0, Grantable::Whole), mig];
        let resource = "nvidia.com/gpu.partitioned";
        let served = Pool::build_offer(&Offer::of(Manufacturer::Nvidia), &seats);
        let pool = served.iter().find(|p| p.resource == resource).unwrap();
        assert_eq!(pool.tokens.len(), 7);
        assert_eq!(pool.accelerators, [1]);
        // `serve --no-partitioned`.
        let off = Offer {
            partitioned: false,
            ..Offer::of(Manufacturer::Nvidia)
        };
        assert!(
            Pool::build_offer(&off, &seats)
                .iter()
                .all(|p| p.resource != resource)
        );
        // No GPU in MIG mode: not registered at all.
        assert!(
            Pool::build_offer(&Offer::of(Manufacturer::Nvidia), &seats[..1])
                .iter()
                .all(|p| p.resource != resource)
        );
        // Every token is Healthy on an empty GPU, and none names a NUMA node.
        let ledger = Ledger::new(seats.to_vec(), Policy::default());
        let states = pool.partition_states(&ledger);
        assert!(states.iter().all(|t| t.healthy && t.numa_node.is_none()));
    }

    #[test]
    fn whole_cards_through_dra_only_register_no_exclusive_pool() {
        let seats = [seat(0, Grantable::Whole), seat(1, Grantable::Whole)];
        let resources = |offer: &Offer| -> Vec<String> {
            Pool::build_offer(offer, &seats)
                .into_iter()
                .map(|p| p.resource)
                .collect()
        };
        let every = resources(&Offer::of(Manufacturer::Nvidia));
        assert_eq!(every[0], "nvidia.com/gpu");
        // `serve --dra --dra-extended-resource`: the kubelet advertises no nvidia.com/gpu, so
        // the scheduler serves it through the DeviceClass; the other families stay.
        let dra = resources(&Offer {
            exclusive: false,
            ..Offer::of(Manufacturer::Nvidia)
        });
        assert!(!dra.iter().any(|r| r == "nvidia.com/gpu"), "{dra:?}");
        assert_eq!(dra, every[1..]);
    }

    #[test]
    fn a_token_id_is_parsed_to_the_accelerator_its_pool_names() {
        let mut seats = vec![
            seat(0, Grantable::Whole),
            seat(1, Grantable::Whole),
            seat(2, Grantable::Whole),
        ];
        seats[1].uuid = None;
        seats[2].slice_capacity = 4;
        let pools = Pool::build(Manufacturer::Nvidia, &seats, true);
        for pool in &pools {
            for (id, index) in &pool.tokens {
                assert_eq!(pool.accelerator_of(id), Some(*index), "{id}");
            }
        }
        let [exclusive, shared, sliced, _] = pools.as_slice() else {
            panic!("four pools");
        };
        for junk in [
            "",
            "::",
            "GPU-0::",
            "GPU-0::01",
            "GPU-0::+1",
            "GPU-0::-1",
            "GPU-9",
            "GPU-0::0::0",
            "gpu-0",
            "GPU-0 ",
            "accelerator-1::x",
        ] {
            for pool in &pools {
                assert_eq!(pool.accelerator_of(junk), None, "{junk:?}");
            }
        }
        // A name with a suffix in a pool of one token each, and out-of-range suffixes.
        assert_eq!(exclusive.accelerator_of("GPU-0::0"), None);
        assert_eq!(shared.accelerator_of("GPU-0"), None);
        assert_eq!(shared.accelerator_of("GPU-0::10"), None);
        assert_eq!(sliced.accelerator_of("GPU-2::3"), Some(2));
        assert_eq!(sliced.accelerator_of("GPU-2::4"), None);
        assert_eq!(sliced.accelerator_of("accelerator-1::127"), Some(1));
        assert_eq!(sliced.accelerator_of("GPU-0::99999999999"), None);
    }

    #[test]
    fn tokens_of_another_mode_are_unhealthy() {
        let seats = [seat(0, Grantable::Whole)];
        let mut ledger = Ledger::new(seats.clone(), Policy::default());
        let pools = Pool::build(Manufacturer::Nvidia, &seats, true);
        ledger
            .allocate(accel_core::ledger::Claim {
                key: accel_core::ledger::GrantKey::new("p", "c"),
                family: Family::Exclusive,
                resource: "nvidia.com/gpu".into(),
                device_ids: vec!["GPU-0".into()],
                accelerators: vec![0],
                slice_units: 0,
                cores_percentage: None,
                partition: None,
            })
            .unwrap();
        assert!(pools[0].states(&ledger)[0].healthy);
        assert!(!pools[1].states(&ledger)[0].healthy);
        assert!(pools[3].states(&ledger)[0].healthy);
        assert_eq!(pools[3].states(&ledger)[511].numa_node, Some(0));
        ledger.set_health(0, false);
        assert!(!pools[0].states(&ledger)[0].healthy);
        assert!(!pools[3].states(&ledger)[0].healthy);
    }
}
