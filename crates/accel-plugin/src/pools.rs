//! Token pools: which device IDs each resource advertises, which accelerator each names, and
//! their health as the ledger sees it.
//!
//! `<base>` has one token per accelerator, `<base>.shared` ten, `<base>.sliced` the slice count
//! (only where slicing is possible), `device.gpustack.ai/<manufacturer>.visibility` 512. Only
//! accelerators that can be granted whole feed them. IDs are `<uuid>` and `<uuid>::<n>`.

use std::collections::BTreeMap;

use accel_core::Manufacturer;
use accel_core::inventory::Grantable;
use accel_core::ledger::units::{SHARES_PER_ACCELERATOR, VISIBILITY_TOKENS_PER_ACCELERATOR};
use accel_core::ledger::{Family, Ledger, Seat};

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

    /// The pools of what a backend offers: exclusive and visibility always, shared and sliced
    /// when offered, in that order (the kubelet registers them one by one).
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
            let mut names: Vec<(String, u32, u32)> = seats()
                .map(|s| (seat_name(s), s.index, per_of(s)))
                .collect();
            names.sort();
            let tokens: BTreeMap<String, u32> = seats()
                .flat_map(|s| {
                    let per = if kind == PoolKind::Family(Family::Sliced) {
                        s.slice_capacity
                    } else {
                        per
                    };
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
        };
        pools.push(pool(
            base.to_string(),
            PoolKind::Family(Family::Exclusive),
            1,
        ));
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
        pools.push(pool(
            offer.visibility_resource.clone(),
            PoolKind::Visibility,
            VISIBILITY_TOKENS_PER_ACCELERATOR,
        ));
        pools
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
        }
    }

    #[test]
    fn pools_count_tokens_per_family_and_skip_mig_and_passthrough() {
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
                ("device.gpustack.ai/nvidia.visibility", 1024),
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
        assert!(none.iter().all(|p| p.tokens.is_empty()));
        assert_eq!(
            pools[1].socket_name(),
            "gpustack-nvidia.com_gpu.shared.sock"
        );
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
