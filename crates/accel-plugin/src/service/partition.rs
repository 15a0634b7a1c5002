//! Allocate for the partitioned family (seed 000 "Partitioned", "The partitioned family:
//! fungible tokens"; spec §1.4–§1.6, §1.9).
//!
//! The kubelet's device IDs are a quantity: the allocator identifies the container as for every
//! family, reads its profile from its `<base>.partitioned.<kind>-<profile>` limit, and picks the
//! accelerator and the start itself against the ledger's partition geometry
//! (`accel_core::ledger::partitions::choose`: packed, ties by index, lowest free start). Under
//! the ledger lock it records that choice as the grant (the in-process reservation, charging the
//! profile's VRAM folded by `accel_core::units::fold`, the webhook's function), so a concurrent
//! call sees it. Then, with no lock held, the backend's partitioner makes the instance (one GI
//! at that start, one CI over it; bounded, one call at a time per accelerator); the durable
//! ownership record ([`crate::ownership`]) and the journal entry are written; and the answer
//! names the instance (`NVIDIA_VISIBLE_DEVICES=MIG-…`, whatever the injection strategy).
//!
//! A retried call for a container that already holds a partition reuses it. A profile the node
//! cannot place, or a create that fails, is refused `FailedPrecondition` naming the GPU, the
//! profile and why; the reservation is given back and nothing is left half-made (the
//! partitioner destroys what a failed create made; a record or journal that cannot be written
//! destroys the instance it was for).
//!
//! Reclaim: when a partition's Pod is gone its grant stays in the ledger — its placement still
//! occupied, so a same-profile replacement can never be handed the outgoing instance — while a
//! task destroys the CI, then the GI, with no lock held. The instance is destroyed only while it
//! is the one recorded (the GI still carries the recorded MIG UUID: GI ids are reused); `In use`
//! is retried [`RECLAIM_ATTEMPTS`] times, doubling from [`RECLAIM_FIRST_RETRY`], and a straggler
//! is tried again [`RECLAIM_REPASS`] later; other GPUs never wait for it. An instance a compute
//! process runs on (the vendor's process listing, [`accel_backend::Partitioner::busy`]) is not
//! destroyed that pass (spec/thead.md §6.5). A partition blocked pass after pass is logged once,
//! at the [`RECLAIM_LOG_AFTER`]th, not every pass. Then the grant is released, journalled, and the
//! ownership record removed.
//!
//! Restart: after the journal is read, every partition grant's instance is looked up live; one
//! whose GI is gone or carries another MIG UUID is marked stale and never acted on: its
//! container's next Allocate is refused, nothing is re-created, and when its Pod goes the grant
//! and the record go without a destroy.

use std::sync::Arc;
use std::time::Duration;

use accel_backend::partition::{PartitionErrorKind, PartitionGpu};
use accel_core::ledger::partitions::{self, PartitionInstance, PartitionPlacement};
use accel_core::ledger::{Claim, Family, Grant, GrantKey, Receipt, Seat};
use accel_core::units::{MemoryBudget, fold};
use tokio::time::Instant;
use tonic::Status;

use super::{Shared, State, container_response, refusal_status, refused};
use crate::api::deviceplugin as dp;
use crate::identify::IdentifyError;
use crate::journal::Entry;
use crate::metrics::{Attribution, RefusalReason, Refuse};
use crate::ownership::{self, OwnershipRecord};
use crate::pods::{Container, Pod};
use crate::pools::Pool;
use accel_backend::respond::{Answer, Injection, ResponderError};

use super::claims::{ClaimGrant, ClaimPartition, ClaimRefusal};

/// How many times a reclaim tries a destroy refused `In use` before leaving it for later.
pub const RECLAIM_ATTEMPTS: u32 = 5;
/// The first pause after an `In use` refusal (then doubled each time).
pub const RECLAIM_FIRST_RETRY: Duration = Duration::from_millis(100);
/// When a reclaim that gave up is tried again.
pub const RECLAIM_REPASS: Duration = Duration::from_secs(5);
/// After how many blocked reclaim passes in a row a gone Pod's partition is logged (once, at
/// warn; the passes before and after it at debug), as the described system's
/// `reclaimMaxDestroyMisses` (spec/thead.md §6.5).
pub const RECLAIM_LOG_AFTER: u32 = 8;

/// Why a reservation got no instance ([`Shared::instance_for`]); the reservation is given back.
enum InstanceError {
    /// None could be adopted or made.
    Made(Status),
    /// The one made could not be made durable (and was destroyed).
    Durable(Status),
}

/// What one reclaim attempt found.
enum Reclaim {
    /// A GPU instance on the accelerator is subdivided: nothing on it is destroyed.
    Subdivided(Vec<(u32, u32, u32)>),
    /// The recorded instance is no longer live (or carries another MIG UUID).
    Gone,
    /// A compute process runs on the instance: left alone this pass.
    Busy,
    /// The CI, then the GI, destroyed.
    Destroyed,
}

/// Whether a grant is a partition whose instance was made.
/// A gone Pod that holds a partition instance: its instances are queued on `reclaim` (they stay
/// in the ledger, occupying their placement, until destroyed), its other grants are released,
/// and a stale record's grant goes with its record, nothing destroyed. `None` when the Pod holds
/// no instance (the ordinary release applies); else whether the ledger changed.
pub(super) fn pod_gone(
    state: &mut State,
    uid: &str,
    records: &ownership::Store,
    reclaim: &mut Vec<(GrantKey, Grant)>,
) -> Option<bool> {
    let stale: Vec<GrantKey> = state
        .stale
        .keys()
        .filter(|k| k.pod_uid == uid)
        .cloned()
        .collect();
    let of_pod: Vec<(GrantKey, Grant)> = state
        .ledger
        .grants()
        .iter()
        .filter(|(k, _)| k.pod_uid == uid)
        .map(|(k, g)| (k.clone(), g.clone()))
        .collect();
    if stale.is_empty() && !of_pod.iter().any(|(_, g)| has_instance(g)) {
        return None;
    }
    let mut changed = false;
    for key in &stale {
        // A record whose instance is gone is never acted on: the grant and the record go,
        // nothing is destroyed.
        state.stale.remove(key);
        state.reclaim_blocked.remove(key);
        let _ = records.remove(&key.pod_uid, &key.container);
        changed |= release_journalled(state, key.clone());
    }
    for (key, grant) in of_pod {
        if stale.contains(&key) {
            continue;
        }
        if has_instance(&grant) {
            if state.reclaiming.insert(key.clone()) {
                reclaim.push((key, grant));
            }
        } else {
            changed |= release_journalled(state, key);
        }
    }
    Some(changed)
}

/// Releases `key` from the ledger and journals the release; whether it was held.
fn release_journalled(state: &mut State, key: GrantKey) -> bool {
    if state.ledger.release(&key).is_none() {
        return false;
    }
    if let Err(e) = state.journal.append(&Entry::Release { key }) {
        tracing::error!("ledger journal: {e}");
    }
    true
}

pub(super) fn has_instance(grant: &Grant) -> bool {
    grant.family == Family::Partitioned
        && grant
            .partition
            .as_ref()
            .is_some_and(|p| p.instance.is_some())
}

/// What the decision under the lock left to do.
struct Reserved {
    key: GrantKey,
    who: String,
    pod: Arc<Pod>,
    seat: Seat,
    profile_id: u32,
    placement: PartitionPlacement,
    /// The grant this call recorded (`None`: a retry of one already made).
    receipt: Option<Receipt>,
    /// Where a partition the ledger lacked was found (its ownership record, its Pod's
    /// annotation): its instance is checked live before it is answered, never destroyed here.
    recovered: Option<&'static str>,
}

impl Shared {
    pub(super) async fn allocate_partition(
        &self,
        pool: &Pool,
        device_ids: Vec<String>,
        started: Instant,
    ) -> Result<dp::ContainerAllocateResponse, Status> {
        let Some(parts) = self.config.partitions.clone() else {
            return Err(refused(
                &pool.resource,
                "a container",
                Status::failed_precondition(format!(
                    "{}: this device manager makes no partitions (no partitioner)",
                    pool.resource
                ))
                .refused(RefusalReason::NotGrantable),
            ));
        };
        // A retry is a live container's: a gone Pod's partition being reclaimed still holds its
        // device IDs, which the kubelet may already have handed to another Pod.
        let retry = {
            let state = self.lock();
            state
                .ledger
                .find_by_devices(&pool.resource, &device_ids)
                .filter(|k| !state.reclaiming.contains(*k))
                .cloned()
        };
        let retry = retry.filter(|k| {
            self.pods
                .snapshot()
                .is_none_or(|pods| pods.iter().any(|p| p.uid == k.pod_uid))
        });
        let kubelet = if retry.is_none() && self.config.settings.identify_by_kubelet {
            self.list_pod_resources().await
        } else {
            None
        };
        let decided = self
            .identified(
                pool,
                device_ids.len(),
                retry,
                kubelet.as_ref(),
                started,
                |state, pod, key| {
                    let reserved = self.reserve(state, pool, pod, key, &device_ids);
                    let granted = reserved.is_ok();
                    (reserved, granted)
                },
            )
            .await;
        let mut reserved = match decided {
            Ok(Ok(reserved)) => reserved,
            Ok(Err(status)) => return Err(status),
            Err(e) => {
                let status = match e {
                    IdentifyError::PodsUnknown { .. } => Status::unavailable(e.to_string()),
                    _ => Status::failed_precondition(e.to_string()),
                }
                .refused((&e).into());
                return Err(refused(&pool.resource, "an unidentified container", status));
            }
        };
        let gpu = PartitionGpu {
            index: reserved.seat.index,
            uuid: reserved.seat.uuid.clone(),
        };
        if let Some(source) = reserved.recovered
            && let Err(status) = self.confirm_live(&parts, &gpu, &reserved, source).await
        {
            self.give_back(&reserved);
            return Err(refused(&pool.resource, &reserved.who, status));
        }
        let (instance, made_here) =
            match self.instance_for(&parts, &gpu, &mut reserved, false).await {
                Ok(got) => got,
                Err(InstanceError::Made(status) | InstanceError::Durable(status)) => {
                    return Err(refused(&pool.resource, &reserved.who, status));
                }
            };
        let fresh = reserved.receipt.as_ref().is_some_and(|r| r.fresh);
        let container = reserved.pod.container(&reserved.key.container);
        let answer = self
            .respond_partition(&reserved, &instance, container)
            .map(container_response)
            .map_err(|e| {
                Status::failed_precondition(format!("{}: {e}", reserved.who))
                    .refused(RefusalReason::Responder)
            });
        match answer {
            Ok(response) => {
                if fresh {
                    self.config.metrics.granted(Some(Family::Partitioned));
                    self.config.metrics.attributed(Attribution::Kubelet);
                    self.notify_after_answer();
                }
                Ok(response)
            }
            Err(status) => {
                if fresh && reserved.recovered.is_none() {
                    let undone = self
                        .undo(&parts, &gpu, &reserved, &instance, made_here)
                        .await;
                    tracing::warn!("{}: responder refused; {undone}", reserved.who);
                }
                Err(refused(&pool.resource, &reserved.who, status))
            }
        }
    }

    /// A ResourceClaim's partition (issue 46): the placement the scheduler allocated (profile
    /// and start, from the device's name) is reserved in the ledger under the claim's key, its
    /// instance made there (or an unowned instance exactly there adopted), made durable (the
    /// ownership record and the journal) and answered by the responder as a container's
    /// partition is. A retried prepare of a made partition is answered again; nothing is ever
    /// placed elsewhere than allocated.
    pub(super) async fn grant_claim_partition(
        &self,
        ask: &ClaimGrant,
        part: &ClaimPartition,
    ) -> Result<Injection, ClaimRefusal> {
        let claim = || ask.claim_uid.clone();
        let refuse = |reason: String| ClaimRefusal::Ledger {
            claim: claim(),
            reason,
        };
        let Some(parts) = self.config.partitions.clone() else {
            return Err(refuse(
                "this device manager makes no partitions (no partitioner)".into(),
            ));
        };
        let [index] = ask.accelerators.as_slice() else {
            return Err(refuse(format!(
                "a partition is on one accelerator, not {:?}",
                ask.accelerators
            )));
        };
        let mut reserved = self.reserve_claim_partition(ask, part, *index)?;
        let gpu = PartitionGpu {
            index: reserved.seat.index,
            uuid: reserved.seat.uuid.clone(),
        };
        let (instance, made_here) = match self.instance_for(&parts, &gpu, &mut reserved, true).await
        {
            Ok(got) => got,
            Err(InstanceError::Made(status)) => return Err(refuse(status.message().to_string())),
            Err(InstanceError::Durable(status)) => {
                return Err(ClaimRefusal::Journal {
                    claim: claim(),
                    reason: status.message().to_string(),
                });
            }
        };
        let fresh = reserved.receipt.as_ref().is_some_and(|r| r.fresh);
        let answered = self.respond_partition(&reserved, &instance, None);
        match answered {
            Ok(injection) => {
                if fresh {
                    self.config.metrics.granted(Some(Family::Partitioned));
                    tracing::info!(
                        "granted a {} partition ({}, GPU instance {}) at memory slice {} of {gpu} to ResourceClaim {} through {}",
                        reserved.placement.profile,
                        instance.uuid,
                        instance.gpu_instance,
                        reserved.placement.start,
                        ask.claim_uid,
                        ask.driver
                    );
                    self.notify();
                }
                Ok(injection)
            }
            Err(e) => {
                if fresh {
                    let undone = self
                        .undo(&parts, &gpu, &reserved, &instance, made_here)
                        .await;
                    tracing::warn!("{}: responder refused; {undone}", reserved.who);
                }
                Err(ClaimRefusal::Responder {
                    claim: claim(),
                    reason: e.to_string(),
                })
            }
        }
    }

    /// Under the ledger lock: the claim's partition as it stands (a retried prepare), or a new
    /// reservation at exactly the allocated placement.
    fn reserve_claim_partition(
        &self,
        ask: &ClaimGrant,
        part: &ClaimPartition,
        index: u32,
    ) -> Result<Reserved, ClaimRefusal> {
        let refuse = |reason: String| ClaimRefusal::Ledger {
            claim: ask.claim_uid.clone(),
            reason,
        };
        let mut state = self.lock();
        let key = state
            .ledger
            .claim_key(&ask.claim_uid)
            .cloned()
            .unwrap_or_else(|| GrantKey::claim(&ask.claim_uid, &ask.pod.uid));
        let who = format!("ResourceClaim {}", ask.claim_uid);
        if let Some(why) = state.stale.get(&key) {
            return Err(refuse(format!(
                "its partition is not live any more ({why}); it is not re-created"
            )));
        }
        let seat = state
            .ledger
            .seat(index)
            .cloned()
            .ok_or_else(|| refuse(format!("accelerator {index} is not served here")))?;
        let pod = Arc::new(ask.pod.clone());
        if let Some(grant) = state.ledger.grant(&key) {
            return match grant.partition.clone() {
                Some(placement)
                    if placement.instance.is_some()
                        && placement.profile == part.profile
                        && placement.start == part.start
                        && grant.accelerators == [index] =>
                {
                    Ok(Reserved {
                        key,
                        who,
                        pod,
                        profile_id: profile_id(&seat, &placement.profile),
                        seat,
                        placement,
                        receipt: None,
                        recovered: None,
                    })
                }
                Some(placement) if placement.instance.is_none() => Err(refuse(
                    "its partition is still being made; retry".to_string(),
                )),
                _ => Err(refuse(format!(
                    "it already holds {:?} on {:?}, not the {} at memory slice {} of accelerator {index} asked now",
                    grant.partition.as_ref().map(|p| &p.profile),
                    grant.accelerators,
                    part.profile,
                    part.start
                ))),
            };
        }
        let describe = state.ledger.describe(index);
        let shape = seat
            .partitions
            .iter()
            .find(|p| p.name == part.profile)
            .cloned()
            .ok_or_else(|| refuse(format!("GPU {describe} does not offer {}", part.profile)))?;
        if !shape.starts.contains(&part.start) {
            return Err(refuse(format!(
                "GPU {describe}: {} cannot start at memory slice {} (starts {:?})",
                part.profile, part.start, shape.starts
            )));
        }
        // A live instance no grant holds that overlaps the placement is somebody's: only one of
        // exactly this profile and start, free to hand over, is adopted.
        let blocking = partitions::outside(&state.ledger, index)
            .into_iter()
            .find(|o| {
                partitions::overlaps((o.start, o.size), (part.start, shape.size))
                    && !(o.claimable && o.profile == part.profile && o.start == part.start)
            })
            .map(|o| format!("a live {} instance at memory slice {}", o.profile, o.start));
        if let Some(blocking) = blocking {
            return Err(refuse(format!(
                "GPU {describe}: the {} at memory slice {} overlaps {blocking} that no grant holds",
                part.profile, part.start
            )));
        }
        let units = shape
            .memory_mib
            .ok_or_else(|| format!("the driver reports no memory for {}", part.profile))
            .and_then(|mib| {
                fold(MemoryBudget::Profile(mib), seat.memory_mib).map_err(|e| e.to_string())
            })
            .map_err(|e| {
                refuse(format!(
                    "GPU {describe}: {} cannot be charged: {e}",
                    part.profile
                ))
            })?;
        let placement = PartitionPlacement {
            profile: part.profile.clone(),
            start: part.start,
            size: shape.size,
            instance: None,
        };
        let mut device_ids = ask.devices.clone();
        device_ids.sort();
        let receipt = state
            .ledger
            .allocate(Claim {
                key: key.clone(),
                family: Family::Partitioned,
                resource: ask.driver.clone(),
                device_ids,
                accelerators: vec![index],
                slice_units: units,
                cores_percentage: None,
                partition: Some(placement.clone()),
            })
            .map_err(|r| refuse(r.to_string()))?;
        Ok(Reserved {
            key,
            who,
            pod,
            seat,
            profile_id: shape.id,
            placement,
            receipt: Some(receipt),
            recovered: None,
        })
    }

    /// Releases a ResourceClaim's partition: its instance destroyed (as a gone Pod's is, see
    /// "Reclaim"), then its grant and record; a stale record's grant goes with no destroy. When
    /// the destroy is blocked (in use, a compute process on it) the grant stays, occupying its
    /// placement, and a task tries again every [`RECLAIM_REPASS`] until it is done. Whether
    /// the claim held a partition.
    pub(super) async fn release_claim_partition(self: &Arc<Self>, key: GrantKey) -> bool {
        let grant = {
            let mut state = self.lock();
            let Some(grant) = state.ledger.grant(&key).cloned() else {
                return false;
            };
            if state.stale.remove(&key).is_some() || !has_instance(&grant) {
                state.reclaim_blocked.remove(&key);
                let _ = self.records().remove(&key.pod_uid, &key.container);
                release_journalled(&mut state, key.clone());
                drop(state);
                tracing::info!("released {key} (its partition was not live)");
                self.notify();
                return true;
            }
            if !state.reclaiming.insert(key.clone()) {
                // Already being reclaimed (a repeated unprepare).
                return true;
            }
            grant
        };
        if self.reclaim_once(key.clone(), grant.clone()).await {
            return true;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECLAIM_REPASS).await;
                let still = shared.lock().ledger.grant(&key).is_some();
                if !still || !shared.lock().reclaiming.insert(key.clone()) {
                    return;
                }
                if shared.reclaim_once(key.clone(), grant.clone()).await {
                    return;
                }
            }
        });
        true
    }

    /// The responder's answer for a partition's instance, to a container or (`None`) a
    /// ResourceClaim.
    fn respond_partition(
        &self,
        reserved: &Reserved,
        instance: &PartitionInstance,
        container: Option<&Container>,
    ) -> Result<Injection, ResponderError> {
        self.config.responder.respond(&Answer {
            family: Some(Family::Partitioned),
            seats: &[&reserved.seat],
            slice_units: 0,
            cores_percentage: None,
            partition: Some(instance),
            pod: &reserved.pod,
            container,
        })
    }

    /// The reserved partition's instance: its own (a retry), an unowned one adopted (`exact`:
    /// only one at the reserved start), or one made now; a fresh reservation's is then made
    /// durable. On a failure the reservation is given back. Also whether this call made it
    /// (neither the grant's own nor an adopted one): a refused answer destroys it again (spec
    /// §6.3's rollback).
    async fn instance_for(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &mut Reserved,
        exact: bool,
    ) -> Result<(PartitionInstance, bool), InstanceError> {
        let claimed = match reserved.placement.instance {
            Some(_) => None,
            None => self.claim_unowned(parts, gpu, reserved, exact).await,
        };
        let made_here = reserved.placement.instance.is_none() && claimed.is_none();
        let instance = match reserved.placement.instance.clone().or(claimed) {
            Some(instance) => instance,
            None => match self.materialise(parts, gpu, reserved).await {
                Ok(instance) => instance,
                Err(status) => {
                    self.give_back(reserved);
                    return Err(InstanceError::Made(status));
                }
            },
        };
        let fresh = reserved.receipt.as_ref().is_some_and(|r| r.fresh);
        if fresh && let Err(status) = self.make_durable(parts, gpu, reserved, &instance).await {
            self.give_back(reserved);
            return Err(InstanceError::Durable(status));
        }
        Ok((instance, made_here))
    }

    /// Takes back a fresh partition whose answer was refused: its journal entry is released,
    /// its ownership record removed, the instance destroyed when this call made it (an adopted
    /// one is left unowned, as it was), and the reservation given back. A destroy that fails
    /// leaves an unowned instance for the orphan pass. Says what was done.
    async fn undo(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &Reserved,
        instance: &PartitionInstance,
        made_here: bool,
    ) -> String {
        {
            let mut state = self.lock();
            if let Err(e) = state.journal.append(&Entry::Release {
                key: reserved.key.clone(),
            }) {
                tracing::error!(
                    "ledger journal: {e}; the release of {} is not journalled",
                    reserved.key
                );
            }
        }
        let _ = self
            .records()
            .remove(&reserved.key.pod_uid, &reserved.key.container);
        let undone = if made_here {
            let (gi, ci) = (instance.gpu_instance, instance.compute_instance);
            let destroyed = parts
                .call(gpu, move |p, c, gpu| p.destroy(c, gpu, gi, Some(ci)))
                .await
                .map_err(|e| e.to_string())
                .and_then(|done| done.map_err(|e| e.to_string()));
            match destroyed {
                Ok(()) => "the instance it made was destroyed".to_string(),
                Err(e) => {
                    format!("the instance it made could not be destroyed ({e}); it is left unowned")
                }
            }
        } else {
            "the adopted instance is left unowned".to_string()
        };
        self.give_back(reserved);
        undone
    }

    /// Under the ledger lock: the container's partition as it stands (a retry), or a new
    /// reservation at the accelerator and start chosen against the ledger.
    fn reserve(
        &self,
        state: &mut State,
        pool: &Pool,
        pod: &Arc<Pod>,
        key: GrantKey,
        device_ids: &[String],
    ) -> Result<Reserved, Status> {
        let who = format!("{}/{} container {}", pod.namespace, pod.name, key.container);
        let seat_of = |state: &State, index: u32| state.ledger.seat(index).cloned();
        if let Some(why) = state.stale.get(&key) {
            return Err(Status::failed_precondition(format!(
                "{who}: its partition is not live any more ({why}); it is not re-created: recreate the Pod"
            ))
            .refused(RefusalReason::NoRoom));
        }
        if let Some(grant) = state
            .ledger
            .grant(&key)
            .filter(|g| g.family == Family::Partitioned)
        {
            let placement = grant.partition.clone();
            let seat = grant.accelerators.first().and_then(|i| seat_of(state, *i));
            return match (placement, seat) {
                (Some(placement), Some(seat)) if placement.instance.is_some() => {
                    let profile_id = profile_id(&seat, &placement.profile);
                    Ok(Reserved {
                        key,
                        who,
                        pod: pod.clone(),
                        seat,
                        profile_id,
                        placement,
                        receipt: None,
                        recovered: None,
                    })
                }
                _ => Err(Status::unavailable(format!(
                    "{who}: its partition is still being made; retry"
                ))
                .refused(RefusalReason::NoRoom)),
            };
        }
        let kind = self.config.offer.partition_kind.as_deref().unwrap_or("mig");
        let prefix = format!("{}.{kind}-", pool.resource);
        let profiles: Vec<&str> = pod
            .container(&key.container)
            .map(|c| {
                c.limits
                    .keys()
                    .filter_map(|k| k.strip_prefix(prefix.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let [profile] = profiles.as_slice() else {
            return Err(Status::failed_precondition(format!(
                "{who}: a {} request must name exactly one profile ({prefix}<profile>), found {profiles:?}",
                pool.resource
            ))
            .refused(RefusalReason::Empty));
        };
        if let Some(recovered) = self.recover(state, pool, pod, &key, &who, device_ids)? {
            return Ok(recovered);
        }
        // An instance no grant accounts for is reused first, wherever it is; else the packed
        // choice, with such instances' slices counted as taken.
        let reuse = state
            .orphans
            .reusable(&state.ledger, profile)
            .and_then(|(index, start)| {
                let shape = seat_of(state, index)?
                    .partitions
                    .into_iter()
                    .find(|p| p.name == *profile)?;
                Some((index, shape, start))
            });
        let (index, shape, start) = match reuse {
            Some(reused) => reused,
            None => partitions::choose(&state.ledger, profile).map_err(|why| {
                Status::failed_precondition(format!(
                    "{who}: no GPU on this node can place a {profile} instance: {why}"
                ))
                .refused(RefusalReason::NoRoom)
            })?,
        };
        let Some(seat) = seat_of(state, index) else {
            return Err(Status::internal(format!("{who}: GPU {index} vanished")));
        };
        let units = shape
            .memory_mib
            .ok_or_else(|| format!("the driver reports no memory for {profile}"))
            .and_then(|mib| {
                fold(MemoryBudget::Profile(mib), seat.memory_mib).map_err(|e| e.to_string())
            })
            .map_err(|e| {
                Status::failed_precondition(format!(
                    "{who}: GPU {}: {profile} cannot be charged: {e}",
                    state.ledger.describe(index)
                ))
                .refused(RefusalReason::BadBudget)
            })?;
        let placement = PartitionPlacement {
            profile: (*profile).to_string(),
            start,
            size: shape.size,
            instance: None,
        };
        let receipt = state
            .ledger
            .allocate(partition_claim(
                &key, pool, device_ids, index, units, &placement,
            ))
            .map_err(|r| refusal_status(pod, &key, &r))?;
        Ok(Reserved {
            key,
            who,
            pod: pod.clone(),
            seat,
            profile_id: shape.id,
            placement,
            receipt: Some(receipt),
            recovered: None,
        })
    }

    /// An instance of the reserved profile already live on the chosen GPU that no grant owns
    /// (carved by hand) is claimed before a new one is made: the reservation moves to its start
    /// (refused, and nothing claimed, when that overlaps another grant). Only the chosen GPU is
    /// looked at, so a claim costs no more vendor calls than a create. `exact`: only one at the
    /// reserved start (a ResourceClaim's placement is the scheduler's, never moved).
    async fn claim_unowned(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &mut Reserved,
        exact: bool,
    ) -> Option<PartitionInstance> {
        let live = parts.live(gpu).await.ok()?.ok()?;
        let mut state = self.lock();
        let owned: Vec<String> = state
            .ledger
            .grants()
            .values()
            .filter_map(|g| {
                g.partition
                    .as_ref()?
                    .instance
                    .as_ref()
                    .map(|i| i.uuid.clone())
            })
            .collect();
        let destroying = &state.orphans.destroying;
        let busy = |gi: u32| {
            state
                .orphans
                .seen
                .get(&(gpu.index, gi))
                .is_some_and(|o| o.busy)
        };
        let mut candidates: Vec<_> = live
            .into_iter()
            .filter(|i| {
                i.profile == reserved.placement.profile
                    && i.size == reserved.placement.size
                    && i.compute_instances.len() == 1
                    && i.uuid.as_ref().is_some_and(|u| !owned.contains(u))
                    && !destroying.contains(&(gpu.index, i.gpu_instance))
                    && !busy(i.gpu_instance)
                    && (!exact || i.start == reserved.placement.start)
            })
            .collect();
        // The one the reservation was placed on first (an instance the passes found).
        candidates.sort_by_key(|i| (i.start != reserved.placement.start, i.gpu_instance));
        let candidate = candidates.into_iter().next()?;
        if let Err(refusal) = state.ledger.move_partition(&reserved.key, candidate.start) {
            tracing::info!(
                "{}: the unowned {} instance {} on {gpu} is not claimed: {refusal}",
                reserved.who,
                candidate.profile,
                candidate.uuid.as_deref().unwrap_or("")
            );
            return None;
        }
        state
            .orphans
            .seen
            .remove(&(gpu.index, candidate.gpu_instance));
        // The grant now overlaps it, so the ledger counts it once already; no notification.
        state.sync_outside(gpu.index);
        drop(state);
        reserved.placement.start = candidate.start;
        let instance = PartitionInstance {
            gpu_instance: candidate.gpu_instance,
            compute_instance: *candidate.compute_instances.first()?,
            uuid: candidate.uuid?,
        };
        tracing::info!(
            "{}: claims the unowned {} instance {} on {gpu} (GPU instance {})",
            reserved.who,
            reserved.placement.profile,
            instance.uuid,
            instance.gpu_instance
        );
        Some(instance)
    }

    /// Makes the reserved instance, with no lock held.
    async fn materialise(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &Reserved,
    ) -> Result<PartitionInstance, Status> {
        let (id, start) = (reserved.profile_id, reserved.placement.start);
        let made = parts
            .call(gpu, move |p, c, gpu| p.create(c, gpu, id, start))
            .await;
        let profile = &reserved.placement.profile;
        let who = &reserved.who;
        let refuse = |why: String| {
            Status::failed_precondition(format!("{who}: {profile} on {gpu}: {why}"))
                .refused(RefusalReason::NoRoom)
        };
        match made {
            Ok(Ok(instance)) => match (instance.uuid.clone(), instance.compute_instances.first()) {
                (Some(uuid), Some(ci)) => Ok(PartitionInstance {
                    gpu_instance: instance.gpu_instance,
                    compute_instance: *ci,
                    uuid,
                }),
                _ => Err(refuse("the instance made has no MIG UUID".into())),
            },
            Ok(Err(e)) => {
                let why = match e.kind {
                    PartitionErrorKind::TimedOut => format!("timed out: {}", e.reason),
                    _ => e.reason,
                };
                Err(refuse(why))
            }
            Err(join) => Err(refuse(format!("the create did not finish: {join}"))),
        }
    }

    /// Writes the ownership record and the journal entry of a new instance; when either cannot
    /// be written the instance is destroyed.
    async fn make_durable(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &Reserved,
        instance: &PartitionInstance,
    ) -> Result<(), Status> {
        let (vendor, unread) = match parts.partitioner.marker_facts(
            gpu,
            instance.gpu_instance,
            instance.compute_instance,
        ) {
            Ok(facts) => (
                facts.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                None,
            ),
            Err(e) => (Default::default(), Some(format!("ownership record: {e}"))),
        };
        let record = OwnershipRecord {
            vendor,
            gpu_uuid: reserved.seat.uuid.clone(),
            gpu_index: Some(reserved.seat.index),
            profile: reserved.placement.profile.clone(),
            profile_id: Some(reserved.profile_id),
            gpu_instance: instance.gpu_instance,
            compute_instance: instance.compute_instance,
            start: reserved.placement.start,
            size: reserved.placement.size,
            mig_uuid: instance.uuid.clone(),
            pod_uid: reserved.key.pod_uid.clone(),
            container: reserved.key.container.clone(),
            created: ownership::now(),
            device_ids: self
                .lock()
                .ledger
                .grant(&reserved.key)
                .map(|g| g.device_ids.clone())
                .unwrap_or_default(),
        };
        let mut failure = match unread {
            Some(why) => Some(why),
            None => self.records().write(&record).err(),
        };
        if failure.is_none() {
            let ticket = {
                let mut state = self.lock();
                state
                    .ledger
                    .set_partition_instance(&reserved.key, instance.clone());
                let grant = state.ledger.grant(&reserved.key).cloned();
                match grant.map(|grant| {
                    state.journal.append(&Entry::Grant {
                        key: reserved.key.clone(),
                        grant,
                    })
                }) {
                    Some(Err(e)) => {
                        failure = Some(format!("ledger journal: {e}"));
                        None
                    }
                    _ => Some(state.journal.ticket()),
                }
            };
            // Answered only once durable, like every grant; a failed sync rewrites the journal
            // from the ledger ([`Shared::durable`]; nothing is given back there: a failure
            // here destroys the instance and gives the reservation back below).
            if let Some(ticket) = ticket
                && let Err(status) = self.durable(ticket, &[]).await
            {
                let mut state = self.lock();
                let _ = state.journal.append(&Entry::Release {
                    key: reserved.key.clone(),
                });
                failure = Some(status.message().to_string());
            }
        }
        let Some(why) = failure else {
            return Ok(());
        };
        if reserved.recovered.is_some() {
            // Its container may be running on it: it is not ours to take down here.
            tracing::error!("{}: {why}", reserved.who);
            return Err(Status::unavailable(format!(
                "{}: the partition could not be made durable: {why}",
                reserved.who
            ))
            .refused(RefusalReason::Journal));
        }
        let _ = self
            .records()
            .remove(&reserved.key.pod_uid, &reserved.key.container);
        let (gi, ci) = (instance.gpu_instance, instance.compute_instance);
        let destroyed = parts
            .call(gpu, move |p, c, gpu| p.destroy(c, gpu, gi, Some(ci)))
            .await;
        let undone = match destroyed {
            Ok(Ok(())) => "the instance was destroyed".to_string(),
            Ok(Err(e)) => format!("the instance could not be destroyed: {e}"),
            Err(e) => format!("the instance could not be destroyed: {e}"),
        };
        tracing::error!("{}: {why}; {undone}", reserved.who);
        Err(Status::unavailable(format!(
            "{}: the partition could not be made durable: {why}; {undone}",
            reserved.who
        ))
        .refused(RefusalReason::Journal))
    }

    /// Destroys the instance of a partition whose Pod is gone, then releases its grant and
    /// record (see the module's "Reclaim"); one that is blocked is tried again by the Pods'
    /// reconcile after [`RECLAIM_REPASS`].
    pub(super) async fn reclaim_partition(self: Arc<Self>, key: GrantKey, grant: Grant) {
        if !self.reclaim_once(key, grant).await {
            tokio::time::sleep(RECLAIM_REPASS).await;
            self.reconcile_pods();
        }
    }

    /// One reclaim pass of a partition grant (`key` is in `reclaiming` on entry and not on
    /// return): whether the grant is gone (its instance destroyed, or found gone).
    async fn reclaim_once(&self, key: GrantKey, grant: Grant) -> bool {
        let (Some(placement), Some(&index)) =
            (grant.partition.as_ref(), grant.accelerators.first())
        else {
            self.lock().reclaiming.remove(&key);
            return false;
        };
        let Some(instance) = placement.instance.clone() else {
            self.lock().reclaiming.remove(&key);
            return false;
        };
        let gpu = PartitionGpu {
            index,
            uuid: self.lock().ledger.seat(index).and_then(|s| s.uuid.clone()),
        };
        let Some(parts) = self.config.partitions.clone() else {
            tracing::warn!(
                "{key}: no partitioner to destroy {} on {gpu}",
                instance.uuid
            );
            self.lock().reclaiming.remove(&key);
            return false;
        };
        let mut pause = RECLAIM_FIRST_RETRY;
        let mut blocked = None;
        for attempt in 1..=RECLAIM_ATTEMPTS {
            let made = instance.clone();
            let outcome = parts
                .call(&gpu, move |partitioner, commands, target| {
                    let live = partitioner.instances(commands, target)?;
                    let split = super::orphans::subdivided(&live);
                    if !split.is_empty() {
                        return Ok(Reclaim::Subdivided(split));
                    }
                    let ours = live.iter().any(|i| {
                        i.gpu_instance == made.gpu_instance && i.uuid.as_deref() == Some(&made.uuid)
                    });
                    if !ours {
                        return Ok(Reclaim::Gone);
                    }
                    // A compute process on it is somebody's work: left for a later pass.
                    if partitioner
                        .busy(commands, target)?
                        .contains(&made.gpu_instance)
                    {
                        return Ok(Reclaim::Busy);
                    }
                    partitioner
                        .destroy(
                            commands,
                            target,
                            made.gpu_instance,
                            Some(made.compute_instance),
                        )
                        .map(|()| Reclaim::Destroyed)
                })
                .await;
            match outcome {
                // A subdivided GPU instance on this GPU stops its reclaim (logged once).
                Ok(Ok(Reclaim::Subdivided(split))) => {
                    self.note_subdivided(&gpu, split);
                    blocked = Some("a GPU instance on it is subdivided".to_string());
                    break;
                }
                Ok(Ok(Reclaim::Busy)) => {
                    blocked = Some("a compute process runs on it".to_string());
                    break;
                }
                Ok(Ok(done @ (Reclaim::Gone | Reclaim::Destroyed))) => {
                    // The record goes first, so once the grant is released nothing of the
                    // partition is left (a crash in between: the restart finds the instance
                    // gone and drops the grant without a destroy).
                    if let Err(e) = self.records().remove(&key.pod_uid, &key.container) {
                        tracing::error!("{key}: {e}");
                    }
                    let passes = {
                        let mut state = self.lock();
                        state.reclaiming.remove(&key);
                        if state.ledger.release(&key).is_some()
                            && let Err(e) =
                                state.journal.append(&Entry::Release { key: key.clone() })
                        {
                            tracing::error!("ledger journal: {e}");
                        }
                        state.reclaim_blocked.remove(&key).unwrap_or(0)
                    };
                    let after = if passes > 0 {
                        format!(" after {passes} blocked passes")
                    } else {
                        String::new()
                    };
                    tracing::info!(
                        "released {key}: {}; MIG instance {} (GPU instance {}) on {gpu} {}{after}",
                        if key.claim_uid().is_some() {
                            "its claim is unprepared"
                        } else {
                            "its Pod is gone"
                        },
                        instance.uuid,
                        instance.gpu_instance,
                        if matches!(done, Reclaim::Destroyed) {
                            "destroyed"
                        } else {
                            "was already gone"
                        }
                    );
                    self.notify();
                    return true;
                }
                Ok(Err(e)) if e.kind == PartitionErrorKind::InUse && attempt < RECLAIM_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Ok(Err(e)) => {
                    blocked = Some(format!("not destroyed (attempt {attempt}): {e}"));
                    break;
                }
                Err(e) => {
                    blocked = Some(format!("the reclaim did not finish: {e}"));
                    break;
                }
            }
        }
        let passes = {
            let mut state = self.lock();
            state.reclaiming.remove(&key);
            let passes = state.reclaim_blocked.entry(key.clone()).or_insert(0);
            *passes += 1;
            *passes
        };
        let why = blocked.unwrap_or_default();
        if passes == RECLAIM_LOG_AFTER {
            tracing::warn!(
                "{key}: MIG instance {} on {gpu} is still not reclaimed after {passes} passes: {why}; it stays occupied and is tried again every {RECLAIM_REPASS:?}",
                instance.uuid
            );
        } else {
            tracing::debug!(
                "{key}: MIG instance {} on {gpu} not reclaimed (pass {passes}): {why}; tried again in {RECLAIM_REPASS:?}",
                instance.uuid
            );
        }
        false
    }

    /// After a restart (and after grants are adopted from the Pods' annotations: `only`): every
    /// partition grant's instance is looked up live; a grant whose GI is gone or carries another
    /// MIG UUID is marked stale (logged, never acted on).
    pub(super) async fn check_partitions(&self, only: Option<&[GrantKey]>) {
        let Some(parts) = self.config.partitions.clone() else {
            return;
        };
        let grants: Vec<(GrantKey, Grant)> = self
            .lock()
            .ledger
            .grants()
            .iter()
            .filter(|(k, g)| has_instance(g) && only.is_none_or(|keys| keys.contains(k)))
            .map(|(k, g)| (k.clone(), g.clone()))
            .collect();
        for (key, grant) in grants {
            let (Some(placement), Some(&index)) =
                (grant.partition.as_ref(), grant.accelerators.first())
            else {
                continue;
            };
            let Some(instance) = placement.instance.clone() else {
                continue;
            };
            let gpu = PartitionGpu {
                index,
                uuid: self.lock().ledger.seat(index).and_then(|s| s.uuid.clone()),
            };
            let live = parts.live(&gpu).await;
            let why = match live {
                Ok(Ok(live)) => match live
                    .iter()
                    .find(|i| i.gpu_instance == instance.gpu_instance)
                {
                    Some(i) if i.uuid.as_deref() == Some(instance.uuid.as_str()) => None,
                    Some(i) => Some(format!(
                        "GPU instance {} on {gpu} now carries {}, not {}",
                        instance.gpu_instance,
                        i.uuid.as_deref().unwrap_or("no MIG UUID"),
                        instance.uuid
                    )),
                    None => Some(format!(
                        "GPU instance {} ({}) is gone from {gpu}",
                        instance.gpu_instance, instance.uuid
                    )),
                },
                // Not readable now: not proven gone, so it stays as recorded.
                Ok(Err(e)) => {
                    tracing::warn!("{key}: its partition could not be checked: {e}");
                    None
                }
                Err(e) => {
                    tracing::warn!("{key}: its partition could not be checked: {e}");
                    None
                }
            };
            if let Some(why) = why {
                tracing::error!(
                    "{key}: its partition record is not acted on: {why}; its container's next Allocate is refused"
                );
                self.lock().stale.insert(key, why);
            }
        }
    }

    /// A partition the ledger lacks for this container but it held before (a retry after the
    /// ledger lost it): from its ownership record, then from its Pod's annotation. Recorded as
    /// the container's grant under the lock; its instance is checked live before the answer
    /// ([`Shared::confirm_live`]). A record that cannot be read or names a GPU this node does not
    /// serve is refused, never replaced by a new instance.
    fn recover(
        &self,
        state: &mut State,
        pool: &Pool,
        pod: &Arc<Pod>,
        key: &GrantKey,
        who: &str,
        device_ids: &[String],
    ) -> Result<Option<Reserved>, Status> {
        let fail = |why: String| {
            tracing::error!("{who}: {why}; its partition is not re-created");
            Status::failed_precondition(format!(
                "{who}: {why}; it is not re-created: recreate the Pod"
            ))
            .refused(RefusalReason::NoRoom)
        };
        let found = match self.records().read(&key.pod_uid, &key.container) {
            Err(e) => {
                return Err(fail(format!(
                    "its partition ownership record is unreadable: {e}"
                )));
            }
            Ok(Some(record)) => {
                let index = record_seat(&state.ledger, &record).map_err(&fail)?;
                Some(("its ownership record", index, placement_of(&record)))
            }
            Ok(None) => annotated(pod, key).map(|(index, placement)| {
                (
                    "its Pod's accelerator.allocated annotation",
                    index,
                    placement,
                )
            }),
        };
        let Some((source, index, placement)) = found else {
            return Ok(None);
        };
        let Some(seat) = state.ledger.seat(index).cloned() else {
            return Err(fail(format!(
                "{source} names GPU {index}, which this node does not serve"
            )));
        };
        let units =
            units_of(&seat, &placement.profile).map_err(|why| fail(format!("{source}: {why}")))?;
        let receipt = state
            .ledger
            .allocate(partition_claim(
                key, pool, device_ids, index, units, &placement,
            ))
            .map_err(|r| refusal_status(pod, key, &r))?;
        if let Some(instance) = &placement.instance {
            tracing::warn!(
                "{who}: holds a {} partition the ledger lacked, found in {source}: GPU instance {} ({}) on {}",
                placement.profile,
                instance.gpu_instance,
                instance.uuid,
                state.ledger.describe(index)
            );
        }
        Ok(Some(Reserved {
            key: key.clone(),
            who: who.to_string(),
            pod: pod.clone(),
            profile_id: profile_id(&seat, &placement.profile),
            seat,
            placement,
            receipt: Some(receipt),
            recovered: Some(source),
        }))
    }

    /// A recovered partition's instance, looked up live: the GI must still carry the recorded
    /// MIG UUID. One that does not is marked stale (its container refused from now on); one that
    /// cannot be read now is refused for a retry.
    async fn confirm_live(
        &self,
        parts: &crate::service::Partitions,
        gpu: &PartitionGpu,
        reserved: &Reserved,
        source: &str,
    ) -> Result<(), Status> {
        let Some(instance) = reserved.placement.instance.clone() else {
            return Ok(());
        };
        let live = parts.live(gpu).await;
        let who = &reserved.who;
        let live = match live {
            Ok(Ok(live)) => live,
            Ok(Err(e)) => {
                return Err(Status::unavailable(format!(
                    "{who}: its partition could not be checked: {e}; retry"
                ))
                .refused(RefusalReason::NoRoom));
            }
            Err(e) => {
                return Err(Status::unavailable(format!(
                    "{who}: its partition could not be checked: {e}; retry"
                ))
                .refused(RefusalReason::NoRoom));
            }
        };
        let why = match live
            .iter()
            .find(|i| i.gpu_instance == instance.gpu_instance)
        {
            Some(i) if i.uuid.as_deref() == Some(instance.uuid.as_str()) => return Ok(()),
            Some(i) => format!(
                "GPU instance {} on {gpu} now carries {}, not {}",
                instance.gpu_instance,
                i.uuid.as_deref().unwrap_or("no MIG UUID"),
                instance.uuid
            ),
            None => format!(
                "GPU instance {} ({}) is gone from {gpu}",
                instance.gpu_instance, instance.uuid
            ),
        };
        tracing::error!(
            "{who}: its partition, from {source}, is not acted on: {why}; its container's Allocate is refused"
        );
        self.lock().stale.insert(reserved.key.clone(), why.clone());
        Err(Status::failed_precondition(format!(
            "{who}: its partition is not live any more ({why}); it is not re-created: recreate the Pod"
        ))
        .refused(RefusalReason::NoRoom))
    }

    /// At start, after the journal: a partition the journal lacks (lost, or a crash between the
    /// record and the journal entry) is rebuilt from its ownership record — the record's GPU (by
    /// UUID), placement and instance, the device IDs it kept — and journalled; its instance is
    /// then checked live with the others ([`Shared::check_partitions`]). A record that cannot be
    /// restored marks its container stale (refused, never re-created), logged.
    pub(super) fn restore_partition_records(&self) {
        if self.config.partitions.is_none() {
            return;
        }
        let (records, errors) = self.records().read_all();
        for e in errors {
            tracing::error!("partition ownership record not acted on: {e}");
        }
        if records.is_empty() {
            return;
        }
        let resource = self
            .pools()
            .iter()
            .find(|p| p.family() == Some(Family::Partitioned))
            .map(|p| p.resource.clone());
        let mut notes = Vec::new();
        {
            let mut state = self.lock();
            for record in records {
                let key = GrantKey::new(record.pod_uid.clone(), record.container.clone());
                if state.ledger.grant(&key).is_some() {
                    continue;
                }
                let restored = resource
                    .clone()
                    .ok_or_else(|| "no partitioned pool is served here".to_string())
                    .and_then(|resource| {
                        let index = record_seat(&state.ledger, &record)?;
                        let seat = state
                            .ledger
                            .seat(index)
                            .cloned()
                            .ok_or_else(|| format!("GPU {index} is not served"))?;
                        let mut device_ids = record.device_ids.clone();
                        device_ids.sort();
                        let grant = Grant {
                            family: Family::Partitioned,
                            resource,
                            device_ids,
                            accelerators: vec![index],
                            units: units_of(&seat, &record.profile)?,
                            cores_percentage: None,
                            partition: Some(placement_of(&record)),
                            finished: false,
                        };
                        state
                            .ledger
                            .restore(key.clone(), grant.clone())
                            .map_err(|r| r.to_string())?;
                        Ok(grant)
                    });
                match restored {
                    Ok(grant) => {
                        let index = grant
                            .accelerators
                            .first()
                            .map_or_else(|| "?".to_string(), |i| i.to_string());
                        if let Err(e) = state.journal.append(&Entry::Grant {
                            key: key.clone(),
                            grant,
                        }) {
                            tracing::error!("ledger journal: {e}");
                        }
                        notes.push(format!(
                            "{key}: restored its {} partition (GPU instance {}, {}) on GPU {index} from its ownership record (the journal lacked it)",
                            record.profile, record.gpu_instance, record.mig_uuid
                        ));
                    }
                    Err(why) => {
                        tracing::error!(
                            "{key}: its partition ownership record is not acted on: {why}; its container's next Allocate is refused"
                        );
                        state.stale.insert(
                            key,
                            format!("its ownership record cannot be restored: {why}"),
                        );
                    }
                }
            }
        }
        for note in notes {
            tracing::warn!("ledger rebuild: {note}");
            self.note(note);
        }
    }

    /// The ownership records, in the layout of this node's partitioner.
    pub(super) fn records(&self) -> ownership::Store {
        let layout = self
            .config
            .partitions
            .as_ref()
            .map_or(accel_backend::partition::RecordLayout::Partitions, |p| {
                p.partitioner.record_layout()
            });
        ownership::Store::new(&self.config.data_dir, layout)
    }

    /// Takes a reservation back (a failed create or record): the grant goes, the tokens heal.
    fn give_back(&self, reserved: &Reserved) {
        let Some(receipt) = &reserved.receipt else {
            return;
        };
        self.lock().ledger.give_back(receipt);
        self.notify();
    }
}

/// The instance (and so the MIG UUID) a partition owner's SSH sidecar may see, read from the owner's durable
/// ownership record and checked against what the ledger knows live (decision: no vendor call on
/// the Allocate path; liveness was established when the instance was made and again after a
/// restart, and a reclaim in progress means it is going). Fails closed when the record is
/// missing or unreadable, names another GPU or another instance, or the instance is gone or
/// going.
pub(super) fn sidecar_partition(
    state: &State,
    records: &ownership::Store,
    owner_key: &GrantKey,
    owner: &Grant,
) -> Result<PartitionInstance, String> {
    let record = records
        .read(&owner_key.pod_uid, &owner_key.container)?
        .ok_or_else(|| format!("{owner_key} has no partition ownership record"))?;
    let instance = owner
        .partition
        .as_ref()
        .and_then(|p| p.instance.as_ref())
        .ok_or_else(|| format!("the partition of {owner_key} is not made yet"))?;
    let index = owner.accelerators.first().copied();
    let seat_uuid = index
        .and_then(|i| state.ledger.seat(i))
        .and_then(|s| s.uuid.clone());
    let same = match (&record.gpu_uuid, record.gpu_index) {
        (Some(uuid), _) => seat_uuid.as_ref() == Some(uuid),
        (None, at) => at.is_some() && at == index && seat_uuid.is_none(),
    };
    if !same {
        return Err(format!(
            "its record names GPU {} ({}), the grant GPU {} ({})",
            record
                .gpu_index
                .map_or_else(|| "?".to_string(), |i| i.to_string()),
            record.gpu_uuid.as_deref().unwrap_or("no UUID"),
            index.map_or_else(|| "none".to_string(), |i| i.to_string()),
            seat_uuid.as_deref().unwrap_or("no UUID")
        ));
    }
    if record.mig_uuid != instance.uuid || record.gpu_instance != instance.gpu_instance {
        return Err(format!(
            "its record names GPU instance {} {}, the live one is {} {}",
            record.gpu_instance, record.mig_uuid, instance.gpu_instance, instance.uuid
        ));
    }
    if let Some(why) = state.stale.get(owner_key) {
        return Err(format!("its instance is not live: {why}"));
    }
    if state.reclaiming.contains(owner_key) {
        return Err("its instance is being destroyed".to_string());
    }
    Ok(instance.clone())
}

/// The seat a record names: by its GPU UUID (indexes may move), else by index.
fn record_seat(
    ledger: &accel_core::ledger::Ledger,
    record: &OwnershipRecord,
) -> Result<u32, String> {
    let found = match &record.gpu_uuid {
        Some(uuid) => ledger
            .seats()
            .find(|s| s.uuid.as_deref() == Some(uuid.as_str()))
            .map(|s| s.index),
        None => record
            .gpu_index
            .and_then(|i| ledger.seat(i))
            .map(|s| s.index),
    };
    found.ok_or_else(|| {
        format!(
            "its record names GPU {} ({}), which this node does not serve",
            record
                .gpu_index
                .map_or_else(|| "?".to_string(), |i| i.to_string()),
            record.gpu_uuid.as_deref().unwrap_or("no UUID")
        )
    })
}

/// The placement and instance a record names.
fn placement_of(record: &OwnershipRecord) -> PartitionPlacement {
    PartitionPlacement {
        profile: record.profile.clone(),
        start: record.start,
        size: record.size,
        instance: Some(PartitionInstance {
            gpu_instance: record.gpu_instance,
            compute_instance: record.compute_instance,
            uuid: record.mig_uuid.clone(),
        }),
    }
}

/// The container's made partition its Pod's annotation records: (GPU index, placement).
fn annotated(pod: &Pod, key: &GrantKey) -> Option<(u32, PartitionPlacement)> {
    let text = pod.allocated.as_deref()?;
    let grant = accel_core::ledger::annotation::parse(text)
        .ok()?
        .remove(&key.container)?;
    let placement = grant.partition.filter(|p| p.instance.is_some())?;
    match (grant.family, grant.accelerators.as_slice()) {
        (Family::Partitioned, [index]) => Some((*index, placement)),
        _ => None,
    }
}

/// A partition of `profile` on `seat`, in units (the webhook's fold of the profile's VRAM).
fn units_of(seat: &Seat, profile: &str) -> Result<u64, String> {
    let shape = seat
        .partitions
        .iter()
        .find(|p| p.name == profile)
        .ok_or_else(|| format!("GPU {} does not offer {profile}", seat.index))?;
    let mib = shape
        .memory_mib
        .ok_or_else(|| format!("the driver reports no memory for {profile}"))?;
    fold(MemoryBudget::Profile(mib), seat.memory_mib).map_err(|e| e.to_string())
}

/// The vendor's id of `profile` on `seat` (0 when the seat no longer lists it).
fn profile_id(seat: &Seat, profile: &str) -> u32 {
    seat.partitions
        .iter()
        .find(|p| p.name == profile)
        .map_or(0, |p| p.id)
}

/// The ledger claim of one partition: the container's tokens on one GPU, the profile's units and
/// its placement.
fn partition_claim(
    key: &GrantKey,
    pool: &Pool,
    device_ids: &[String],
    index: u32,
    units: u64,
    placement: &PartitionPlacement,
) -> Claim {
    Claim {
        key: key.clone(),
        family: Family::Partitioned,
        resource: pool.resource.clone(),
        device_ids: device_ids.to_vec(),
        accelerators: vec![index],
        slice_units: units,
        cores_percentage: None,
        partition: Some(placement.clone()),
    }
}
