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
        let base = manufacturer.default_resource_base();
        let whole: Vec<&Seat> = seats
            .iter()
            .filter(|s| s.grantable == Grantable::Whole)
            .collect();
        let mut pools = Vec::new();
        let pool = |resource: String, kind, per: u32| Pool {
            resource,
            kind,
            tokens: whole
                .iter()
                .filter(|s| kind != PoolKind::Family(Family::Sliced) || s.slice_capacity > 0)
                .flat_map(|s| {
                    let per = if kind == PoolKind::Family(Family::Sliced) {
                        s.slice_capacity
                    } else {
                        per
                    };
                    (0..per).map(move |n| (token_id(s, n, per), s.index))
                })
                .collect(),
        };
        pools.push(pool(
            base.to_string(),
            PoolKind::Family(Family::Exclusive),
            1,
        ));
        pools.push(pool(
            format!("{base}.shared"),
            PoolKind::Family(Family::Shared),
            SHARES_PER_ACCELERATOR,
        ));
        if slices {
            pools.push(pool(
                format!("{base}.sliced"),
                PoolKind::Family(Family::Sliced),
                0,
            ));
        }
        pools.push(pool(
            format!("device.gpustack.ai/{}.visibility", manufacturer.name()),
            PoolKind::Visibility,
            VISIBILITY_TOKENS_PER_ACCELERATOR,
        ));
        pools
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
        self.tokens
            .iter()
            .map(|(id, index)| {
                let healthy = match self.kind {
                    PoolKind::Family(family) => ledger.token_healthy(*index, family),
                    PoolKind::Visibility => ledger.seat(*index).is_some_and(|s| s.healthy),
                };
                TokenState {
                    id: id.clone(),
                    healthy,
                    numa_node: ledger.seat(*index).and_then(|s| s.numa_node),
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

fn token_id(seat: &Seat, n: u32, per: u32) -> String {
    let name = seat
        .uuid
        .clone()
        .unwrap_or_else(|| format!("accelerator-{}", seat.index));
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
        ledger.set_health(0, false);
        assert!(!pools[0].states(&ledger)[0].healthy);
        assert!(!pools[3].states(&ledger)[0].healthy);
    }
}
