//! Grants made through DRA ResourceClaims (issue 46), on the device plugin's one ledger: a claim
//! (whole cards, a logical slice of one by its consumed capacity, or one hardware partition at
//! the placement the scheduler allocated) is charged, journalled and answered by the
//! manufacturer's responder exactly as a container's grant is, under its own key
//! ([`GrantKey::claim`]). A claim's card is then nobody else's: the ledger refuses a
//! container's grant on it, and its tokens read Unhealthy in ListAndWatch, so the kubelet stops
//! counting it; a claim's partition occupies its memory slices as a container's does, and is
//! not counted among the partitioned pool's tokens. A partition's instance is made at prepare
//! by the node's partitioner ([`super::partition`]) and destroyed at release. A claim's grant
//! ends when the DRA driver releases it (unprepare, or its claim gone from the API server),
//! never on a Pod's word.

use accel_backend::respond::{Answer, Injection};
use accel_core::ledger::{Claim, Family, GrantKey, Seat};

use super::PluginHandle;
use crate::journal::Entry;
use crate::pods::Pod;

/// What a prepared claim asks for: whole accelerators.
#[derive(Debug, Clone)]
pub struct ClaimGrant {
    /// The ResourceClaim's UID.
    pub claim_uid: String,
    /// A Pod the claim is reserved for: what the responder reads (its runtime class).
    pub pod: Pod,
    /// The DRA driver the devices were allocated from (`nvidia.gpustack.ai`): the grant's
    /// resource, which no device plugin resource can be.
    pub driver: String,
    /// The allocated device names, one per accelerator.
    pub devices: Vec<String>,
    /// The accelerators, by index.
    pub accelerators: Vec<u32>,
    /// The logical slice the claim consumes of its one accelerator; `None`: whole cards.
    pub slice: Option<ClaimSlice>,
    /// The hardware partition the claim holds on its one accelerator; `None`: none.
    pub partition: Option<ClaimPartition>,
}

/// A hardware partition asked through a claim: a profile at the placement the scheduler
/// allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPartition {
    /// The profile as the vendor spells it (`3g.40gb`).
    pub profile: String,
    /// Its first memory slice.
    pub start: u32,
}

/// A logical slice asked through a claim's consumed capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimSlice {
    /// The memory it consumes, MiB.
    pub memory_mib: u64,
    /// Its compute cap; `None`: none.
    pub cores_percentage: Option<u32>,
}

/// Why a claim was not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRefusal {
    /// The ledger refused it (the card is held, unhealthy, or not this node's).
    #[error("the ledger refused ResourceClaim {claim}: {reason}")]
    Ledger { claim: String, reason: String },
    /// The manufacturer's responder could not answer for the cards.
    #[error("the responder refused ResourceClaim {claim}: {reason}")]
    Responder { claim: String, reason: String },
    /// The grant could not be made durable; nothing was granted.
    #[error("ResourceClaim {claim}: the grant could not be made durable: {reason}")]
    Journal { claim: String, reason: String },
}

impl PluginHandle {
    /// Charges `ask`'s accelerators to its claim, journals the grant (durable before this
    /// returns) and answers the responder's injection for them. A retried prepare of a granted
    /// claim is answered again without charging twice.
    pub async fn grant_claim(&self, ask: &ClaimGrant) -> Result<Injection, ClaimRefusal> {
        if let Some(part) = &ask.partition {
            return self.shared.grant_claim_partition(ask, part).await;
        }
        let claim_uid = || ask.claim_uid.clone();
        let (injection, ticket, fresh, granted) = {
            let mut guard = self.shared.lock();
            let state = &mut *guard;
            // A retried prepare keeps the key its claim was first granted under, whichever of
            // the claim's Pods asks now.
            let key = state
                .ledger
                .claim_key(&ask.claim_uid)
                .cloned()
                .unwrap_or_else(|| GrantKey::claim(&ask.claim_uid, &ask.pod.uid));
            let mut device_ids = ask.devices.clone();
            device_ids.sort();
            let mut accelerators = ask.accelerators.clone();
            accelerators.sort_unstable();
            accelerators.dedup();
            // A slice of less than the card's memory is a sliced grant; one of all of it (a
            // claim that asked none consumes all) is the whole card.
            let vram = accelerators
                .iter()
                .filter_map(|i| state.ledger.seat(*i).and_then(|s| s.memory_mib))
                .min();
            let (family, slice_units, cores_percentage) = match (ask.slice, vram) {
                (Some(slice), Some(vram))
                    if slice.memory_mib < vram
                        || slice.cores_percentage.is_some_and(|c| c < 100) =>
                {
                    let units = accel_core::units::fold(
                        accel_core::units::MemoryBudget::Mib(slice.memory_mib),
                        Some(vram),
                    )
                    .map_err(|e| ClaimRefusal::Ledger {
                        claim: claim_uid(),
                        reason: format!("its slice of {} MiB: {e}", slice.memory_mib),
                    })?;
                    (Family::Sliced, units, slice.cores_percentage)
                }
                _ => (Family::Exclusive, 0, None),
            };
            let receipt = state
                .ledger
                .allocate(Claim {
                    key: key.clone(),
                    family,
                    resource: ask.driver.clone(),
                    device_ids,
                    accelerators,
                    slice_units,
                    cores_percentage,
                    partition: None,
                })
                .map_err(|r| ClaimRefusal::Ledger {
                    claim: claim_uid(),
                    reason: r.to_string(),
                })?;
            let Some(grant) = state.ledger.grant(&key).cloned() else {
                return Err(ClaimRefusal::Ledger {
                    claim: claim_uid(),
                    reason: "the grant vanished while it was recorded".into(),
                });
            };
            let seats: Vec<&Seat> = grant
                .accelerators
                .iter()
                .filter_map(|i| state.ledger.seat(*i))
                .collect();
            let answered = self.shared.config.responder.respond(&Answer {
                family: Some(grant.family),
                seats: &seats,
                slice_units: grant.units,
                cores_percentage: grant.cores_percentage,
                partition: None,
                pod: &ask.pod,
                container: None,
            });
            let injection = match answered {
                Ok(injection) => injection,
                Err(e) => {
                    state.ledger.give_back(&receipt);
                    return Err(ClaimRefusal::Responder {
                        claim: claim_uid(),
                        reason: e.to_string(),
                    });
                }
            };
            if receipt.fresh
                && let Err(e) = state.journal.append(&Entry::Grant {
                    key: key.clone(),
                    grant,
                })
            {
                state.ledger.give_back(&receipt);
                return Err(ClaimRefusal::Journal {
                    claim: claim_uid(),
                    reason: e.to_string(),
                });
            }
            let granted = match family {
                Family::Sliced => format!(
                    "a slice of {} MiB, cores {}",
                    accel_core::ledger::units::mib_for_units(slice_units, vram.unwrap_or(0)),
                    cores_percentage.map_or("uncapped".to_string(), |c| format!("{c} %"))
                ),
                _ => "whole".to_string(),
            };
            (
                injection,
                state.journal.ticket(),
                receipt.fresh.then_some(receipt),
                granted,
            )
        };
        let fresh: Vec<_> = fresh.into_iter().collect();
        self.shared
            .durable(ticket, &fresh)
            .await
            .map_err(|status| ClaimRefusal::Journal {
                claim: claim_uid(),
                reason: status.message().to_string(),
            })?;
        if !fresh.is_empty() {
            tracing::info!(
                "granted {:?} to ResourceClaim {} through {} ({granted})",
                ask.accelerators,
                ask.claim_uid,
                ask.driver,
            );
            self.shared.notify();
        }
        Ok(injection)
    }

    /// Releases the claim's grant (journalled; a partition's instance destroyed first, see
    /// [`super::partition`]); `false` when it held none (unprepare is retried, and a claim
    /// refused at prepare holds nothing).
    pub async fn release_claim(&self, claim_uid: &str) -> bool {
        let partition = {
            let state = self.shared.lock();
            state.ledger.claim_key(claim_uid).cloned().filter(|key| {
                state
                    .ledger
                    .grant(key)
                    .is_some_and(|g| g.family == Family::Partitioned)
            })
        };
        if let Some(key) = partition {
            return self.shared.release_claim_partition(key).await;
        }
        let released = {
            let mut state = self.shared.lock();
            let key = state.ledger.claim_key(claim_uid).cloned();
            let released = key.and_then(|key| state.ledger.release(&key).map(|g| (key, g)));
            if let Some((key, _)) = &released
                && let Err(e) = state.journal.append(&Entry::Release { key: key.clone() })
            {
                tracing::error!("ledger journal: {e}");
            }
            // The working directory the responder made for the claim's Pod (a slice's shared
            // cache) goes with the last grant that names that Pod, a container's or a claim's.
            let pod = released.as_ref().and_then(|(key, _)| {
                let pod = key.claim_pod()?;
                let named = state
                    .ledger
                    .grants()
                    .keys()
                    .any(|k| k.pod_uid == pod || k.claim_pod() == Some(pod));
                (!named).then(|| pod.to_string())
            });
            released.map(|released| (released, pod))
        };
        match released {
            Some(((key, grant), pod)) => {
                if let Some(pod) = pod {
                    self.shared.config.responder.reclaim(&pod);
                }
                tracing::info!(
                    "released {key} ({:?} through {})",
                    grant.accelerators,
                    grant.resource
                );
                self.shared.notify();
                true
            }
            None => false,
        }
    }

    /// The claims that hold grants, by UID.
    pub fn claim_uids(&self) -> std::collections::BTreeSet<String> {
        self.shared.lock().ledger.claim_uids()
    }
}
