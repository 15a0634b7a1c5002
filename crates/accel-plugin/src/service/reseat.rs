//! Replacing the accelerators the plugins serve when a detection finds them changed (a GPU
//! appeared or vanished, entered MIG mode, was passed through to a VM, or the manufacturer was
//! undetected): every pool's tokens are rebuilt from the new seats and ListAndWatch sends the new
//! lists; grants follow their accelerators by UUID, and a grant whose accelerator is gone or no
//! longer grantable whole is dropped, journalled as released and logged naming the Pod.
//!
//! The daemon decides when (`device_manager::daemon`); this module only swaps the seats. It
//! stays off the Allocate path: Allocate reads the pools through one snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_core::inventory::Grantable;
use accel_core::ledger::{Grant, GrantKey, Ledger, Seat};

use super::{PluginHandle, Shared};
use crate::journal::Entry;
use crate::pools::{Pool, PoolKind};

/// A grant a seat replacement dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedGrant {
    pub key: GrantKey,
    /// The Pod as `namespace/name`, when the node's Pods know it.
    pub pod: Option<String>,
    pub grant: Grant,
    /// Why (`accelerator 0 (GPU-…) is gone`).
    pub reason: String,
}

impl PluginHandle {
    /// The accelerators served now, as the ledger holds them (health included).
    pub fn seats(&self) -> Vec<Seat> {
        self.shared.lock().ledger.seats().cloned().collect()
    }

    /// Serves `seats` from now on (health comes with them). Each pool's tokens are rebuilt and
    /// every ListAndWatch stream sends its new list; grants are carried over to their
    /// accelerators by UUID; those on an accelerator that is gone or no longer grantable whole
    /// are dropped, journalled as released, logged naming the Pod, and returned.
    pub fn replace_seats(&self, seats: Vec<Seat>) -> Vec<DroppedGrant> {
        self.shared.replace_seats(seats)
    }
}

impl Shared {
    fn replace_seats(&self, seats: Vec<Seat>) -> Vec<DroppedGrant> {
        let pools: Arc<[Pool]> = Pool::build_offer(&self.config.offer, &seats).into();
        let pods = self.pods.pods().unwrap_or_default();
        let pod_name = |uid: &str| {
            pods.iter()
                .find(|p| p.uid == uid)
                .map(|p| format!("{}/{}", p.namespace, p.name))
        };
        let mut dropped = Vec::new();
        {
            let mut state = self.lock();
            let mut ledger = Ledger::new(seats.clone(), state.ledger.policy());
            let old = &state.ledger;
            let by_uuid: BTreeMap<&str, &Seat> = seats
                .iter()
                .filter_map(|s| s.uuid.as_deref().map(|u| (u, s)))
                .collect();
            // Charging grants first, then finished ones, as a restore from the journal does.
            let (charging, finished): (Vec<_>, Vec<_>) =
                old.grants().iter().partition(|(_, g)| !g.finished);
            for (key, grant) in charging.into_iter().chain(finished) {
                let mut moved = Vec::with_capacity(grant.accelerators.len());
                let mut lost = None;
                for index in &grant.accelerators {
                    let uuid = old.seat(*index).and_then(|s| s.uuid.as_deref());
                    let now = match uuid {
                        Some(uuid) => by_uuid.get(uuid).copied(),
                        None => seats.iter().find(|s| s.index == *index && s.uuid.is_none()),
                    };
                    let name = format!("accelerator {index} ({})", uuid.unwrap_or("no UUID"));
                    match now {
                        Some(seat) if seat.grantable == Grantable::Whole => moved.push(seat.index),
                        Some(seat) => {
                            lost = Some(format!(
                                "{name} can no longer be granted whole ({:?})",
                                seat.grantable
                            ));
                        }
                        None => lost = Some(format!("{name} is gone")),
                    }
                }
                let reason = match lost {
                    Some(reason) => reason,
                    None => {
                        let mut carried = grant.clone();
                        moved.sort_unstable();
                        moved.dedup();
                        carried.accelerators = moved;
                        match ledger.restore(key.clone(), carried) {
                            Ok(()) => continue,
                            Err(refusal) => format!("it no longer fits: {refusal}"),
                        }
                    }
                };
                dropped.push(DroppedGrant {
                    key: key.clone(),
                    pod: pod_name(&key.pod_uid),
                    grant: grant.clone(),
                    reason,
                });
            }
            for d in &dropped {
                if let Err(e) = state.journal.append(&Entry::Release { key: d.key.clone() }) {
                    tracing::error!("ledger journal: {e}");
                }
            }
            state.ledger = ledger;
            // A sidecar keeps its record while its tokens are still advertised.
            let visible = pools.iter().find(|p| p.kind == PoolKind::Visibility);
            state.visibility.retain(|_, ids| {
                visible.is_some_and(|p| ids.iter().all(|id| p.tokens.contains_key(id)))
            });
            // Swapped while the ledger is locked, so no Allocate sees new tokens with the old
            // ledger's grants.
            *self
                .pools
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = pools;
        }
        for d in &dropped {
            tracing::warn!(
                "{} container {}: its grant of {} {:?} is dropped: {}",
                d.pod
                    .as_deref()
                    .map_or_else(|| format!("pod {}", d.key.pod_uid), |p| format!("pod {p}")),
                d.key.container,
                d.grant.resource,
                d.grant.device_ids,
                d.reason
            );
        }
        self.notify();
        dropped
    }
}
