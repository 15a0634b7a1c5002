//! Instances no grant accounts for (issue 13 item 6; spec §1.7 "Orphans", §1.2 on subdivided
//! GPU instances).
//!
//! A pass every [`Orphans::period`] lists the live instances of every partitioned accelerator
//! (with no lock held; one accelerator at a time) and compares them with the ledger. An instance
//! whose placement no partition grant overlaps — carved by hand, or left by a create whose
//! record was lost — is *unowned*:
//! - it is **reused first** unless busy: a container asking for its profile is placed on it (the reservation
//!   takes its accelerator and start, and Allocate claims it) before any instance is made, on
//!   whichever accelerator it sits; and until then its slices count as taken when a new instance
//!   is placed, so a create never runs into it. One the last process listing found a compute
//!   process on is somebody's running work and is never handed to a container (the described
//!   system reuses it regardless);
//! - it is **destroyed** (CI, then GI) once it has been seen unowned and idle for
//!   [`Orphans::debounce`] — idle meaning no compute process runs on it by the vendor's process
//!   listing ([`accel_backend::Partitioner::busy`], read each pass on an accelerator that holds
//!   an unowned instance, and only there). A busy one is left alone, and its clock starts again
//!   each pass it is seen busy.
//!
//! A GPU instance subdivided into several compute instances is never claimed, placed over or
//! destroyed. While one exists, nothing on its accelerator is destroyed — neither unowned
//! instances nor a gone Pod's partition (it stays occupied and is tried again) — and the other
//! accelerators carry on (the described system stops reclaim node-wide). It is logged once when
//! it appears and once when it is gone, and `doctor`'s `mig-layout` row names it.
//!
//! What the book holds is told to the ledger after every change ([`State::sync_outside`],
//! as `accel_core::ledger::partitions::Outside`), so the partitioned pool's healthy tokens, the
//! node's capacity keys and `Devices.status` count live occupancy, not the grants alone: an
//! unowned instance's slices are taken, and a claimable one is room for its profile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::partition::{Instance, PartitionGpu, overlaps};
use accel_core::inventory::Grantable;
use accel_core::ledger::Ledger;
use accel_core::ledger::partitions::{self, Outside};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Shared, State};

/// How long an unowned instance stays before it is destroyed, when nothing says otherwise.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(300);
/// The longest pause between two passes.
const LONGEST_PERIOD: Duration = Duration::from_secs(60);

/// When instances no grant accounts for are looked at and destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orphans {
    /// How long an instance must be seen unowned and idle before it is destroyed.
    pub debounce: Duration,
    /// How often the live instances are listed.
    pub period: Duration,
}

impl Orphans {
    /// A pass every fifth of the debounce, at least every second and at most every minute.
    pub fn with_debounce(debounce: Duration) -> Orphans {
        Orphans {
            debounce,
            period: (debounce / 5).clamp(Duration::from_secs(1), LONGEST_PERIOD),
        }
    }
}

impl Default for Orphans {
    fn default() -> Self {
        Orphans::with_debounce(DEFAULT_DEBOUNCE)
    }
}

/// An unowned instance seen live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Orphan {
    pub profile: String,
    pub start: u32,
    pub size: u32,
    pub compute_instances: Vec<u32>,
    pub uuid: Option<String>,
    /// Since when it has been seen unowned and not found busy.
    pub since: Instant,
    /// Whether the last process listing that could be read put a compute process on it: a busy
    /// instance runs somebody's work and is never handed to a container.
    pub busy: bool,
}

/// What the passes know of the node's instances that no grant accounts for.
#[derive(Debug, Default)]
pub(super) struct OrphanBook {
    /// Unowned instances by (accelerator, GPU instance).
    pub seen: BTreeMap<(u32, u32), Orphan>,
    /// Accelerators holding a GPU instance subdivided into several compute instances:
    /// (GPU instance, start, size) of each.
    pub subdivided: BTreeMap<u32, Vec<(u32, u32, u32)>>,
    /// Unowned instances being destroyed now: never claimed.
    pub destroying: BTreeSet<(u32, u32)>,
}

impl OrphanBook {
    /// What the ledger is told of accelerator `index`'s instances that no grant accounts for:
    /// each unowned one (claimable unless it is being destroyed, holds other than one compute
    /// instance or has no device, or its accelerator is stopped by a subdivided instance), and
    /// each subdivided one (never claimable).
    pub fn outside_of(&self, index: u32) -> Vec<Outside> {
        let stopped = self.subdivided.contains_key(&index);
        let mut out: Vec<Outside> = self
            .seen
            .range((index, 0)..=(index, u32::MAX))
            .map(|(key, o)| Outside {
                profile: o.profile.clone(),
                start: o.start,
                size: o.size,
                claimable: !stopped
                    && !o.busy
                    && o.compute_instances.len() == 1
                    && o.uuid.is_some()
                    && !self.destroying.contains(key),
            })
            .collect();
        // A subdivided GPU instance's profile is not kept: it is never claimed.
        out.extend(
            self.subdivided
                .get(&index)
                .into_iter()
                .flatten()
                .map(|(_, start, size)| Outside {
                    profile: String::new(),
                    start: *start,
                    size: *size,
                    claimable: false,
                }),
        );
        out
    }

    /// An unowned instance of `profile` a new grant can take: one compute instance and a device
    /// UUID, not being destroyed, on a healthy partitioned accelerator offering it there, its
    /// slices free in the ledger; the lowest (accelerator, start).
    pub fn reusable(&self, ledger: &Ledger, profile: &str) -> Option<(u32, u32)> {
        self.seen
            .iter()
            .filter(|(key, o)| {
                o.profile == profile
                    && !o.busy
                    && o.compute_instances.len() == 1
                    && o.uuid.is_some()
                    && !self.destroying.contains(key)
                    && !self.subdivided.contains_key(&key.0)
            })
            .filter(|((index, _), o)| {
                ledger.seat(*index).is_some_and(|seat| {
                    seat.grantable == Grantable::PartitionsOnly
                        && seat.healthy
                        && seat
                            .partitions
                            .iter()
                            .any(|s| s.name == o.profile && s.size == o.size)
                        && partitions::free_starts(
                            o.size,
                            &[o.start],
                            &partitions::occupied(ledger, *index),
                        ) == [o.start]
                })
            })
            .map(|((index, _), o)| (*index, o.start))
            .min()
    }
}

/// The subdivided GPU instances of a listing: (GPU instance, start, size).
pub(super) fn subdivided(live: &[Instance]) -> Vec<(u32, u32, u32)> {
    live.iter()
        .filter(|i| i.is_subdivided())
        .map(|i| (i.gpu_instance, i.start, i.size))
        .collect()
}

impl State {
    /// Tells the ledger what the book knows of accelerator `index`'s instances no grant
    /// accounts for; whether that changed what the ledger counts.
    pub(super) fn sync_outside(&mut self, index: u32) -> bool {
        let outside = self.orphans.outside_of(index);
        self.ledger.set_outside(index, outside)
    }
}

impl Shared {
    /// Tells the ledger what the book now knows of accelerator `index` ([`State::sync_outside`])
    /// and, when that changed what it counts, releases the lock and wakes ListAndWatch and the
    /// publisher.
    fn synced(&self, mut state: std::sync::MutexGuard<'_, State>, index: u32) {
        if state.sync_outside(index) {
            drop(state);
            self.notify();
        }
    }

    /// Records what a listing of accelerator `index` showed of subdivided GPU instances, logging
    /// only a change (so a pass every period does not repeat it).
    pub(super) fn note_subdivided(&self, gpu: &PartitionGpu, split: Vec<(u32, u32, u32)>) {
        let mut state = self.lock();
        let before = state.orphans.subdivided.get(&gpu.index).cloned();
        if before.as_ref() == Some(&split) || (before.is_none() && split.is_empty()) {
            return;
        }
        if split.is_empty() {
            state.orphans.subdivided.remove(&gpu.index);
            tracing::info!(
                "{gpu}: no GPU instance is subdivided any more; its partitions are reclaimed again"
            );
        } else {
            let gis: Vec<String> = split.iter().map(|(gi, _, _)| gi.to_string()).collect();
            tracing::warn!(
                "{gpu}: GPU instance(s) {} are subdivided into several compute instances: never used or destroyed here, and nothing on this GPU is reclaimed until each holds one compute instance (nvidia-smi mig -dci); other GPUs are not affected",
                gis.join(", ")
            );
            state.orphans.subdivided.insert(gpu.index, split);
        }
        self.synced(state, gpu.index);
    }

    /// Runs a pass every period until `stop`.
    pub(super) async fn orphan_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(parts) = self.config.partitions.clone() else {
            return;
        };
        loop {
            self.orphan_pass().await;
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(parts.orphans.period) => {}
            }
        }
    }

    /// One pass over every partitioned accelerator (see the module).
    pub(super) async fn orphan_pass(&self) {
        let Some(parts) = self.config.partitions.clone() else {
            return;
        };
        let gpus: Vec<PartitionGpu> = self
            .lock()
            .ledger
            .seats()
            .filter(|s| s.grantable == Grantable::PartitionsOnly && !s.partitions.is_empty())
            .map(|s| PartitionGpu {
                index: s.index,
                uuid: s.uuid.clone(),
            })
            .collect();
        for gpu in gpus {
            let live = match parts.live(&gpu).await {
                Ok(Ok(live)) => live,
                Ok(Err(e)) => {
                    tracing::debug!("unowned MIG instances: {e}");
                    continue;
                }
                Err(_) => continue,
            };
            let split = subdivided(&live);
            let stopped = !split.is_empty();
            self.note_subdivided(&gpu, split);
            // The process listing only when something here is unowned.
            let busy = if self.unowned(&gpu, &live).is_empty() {
                Some(Vec::new())
            } else {
                match parts.call(&gpu, |p, c, gpu| p.busy(c, gpu)).await {
                    Ok(Ok(busy)) => Some(busy),
                    Ok(Err(e)) => {
                        tracing::debug!("unowned MIG instances are kept: {e}");
                        None
                    }
                    Err(_) => None,
                }
            };
            let due = self.book_unowned(&gpu, &live, busy.as_deref(), parts.orphans.debounce);
            if stopped || due.is_empty() {
                continue;
            }
            self.destroy_due(&parts, &gpu, due).await;
        }
    }

    /// The instances of a listing of `gpu` that no grant's placement overlaps (subdivided ones
    /// apart).
    fn unowned<'a>(&self, gpu: &PartitionGpu, live: &'a [Instance]) -> Vec<&'a Instance> {
        let state = self.lock();
        let taken = partitions::occupied(&state.ledger, gpu.index);
        live.iter()
            .filter(|i| !i.is_subdivided())
            .filter(|i| !taken.iter().any(|t| overlaps(*t, (i.start, i.size))))
            .collect()
    }

    /// Updates the book with accelerator `gpu`'s unowned instances: an instance's clock starts
    /// when it is first seen and again whenever a compute process is seen on it (`busy`; `None`:
    /// not known this pass, so none is due). Answers those unowned and idle for `debounce`.
    fn book_unowned(
        &self,
        gpu: &PartitionGpu,
        live: &[Instance],
        busy: Option<&[u32]>,
        debounce: Duration,
    ) -> Vec<u32> {
        let now = Instant::now();
        let unowned = self.unowned(gpu, live);
        let mut state = self.lock();
        let book = &mut state.orphans;
        let before: BTreeMap<(u32, u32), Orphan> = book
            .seen
            .range((gpu.index, 0)..=(gpu.index, u32::MAX))
            .map(|(k, o)| (*k, o.clone()))
            .collect();
        for key in before.keys() {
            book.seen.remove(key);
        }
        let mut due = Vec::new();
        for instance in unowned {
            let key = (gpu.index, instance.gpu_instance);
            let mut since = match before.get(&key) {
                // The same instance (a GI id made again carries another UUID).
                Some(o) if o.uuid == instance.uuid && o.start == instance.start => o.since,
                _ => {
                    tracing::info!(
                        "{gpu}: MIG {} instance at slice {} (GPU instance {}, {}) is owned by no partition: it is reused first, and destroyed once idle for {debounce:?}",
                        instance.profile,
                        instance.start,
                        instance.gpu_instance,
                        instance.uuid.as_deref().unwrap_or("no MIG device")
                    );
                    now
                }
            };
            let seen_busy = match busy {
                Some(busy) => busy.contains(&instance.gpu_instance),
                // Not known this pass: as last seen (a new one as idle).
                None => before.get(&key).is_some_and(|o| o.busy),
            };
            match busy {
                Some(busy) if busy.contains(&instance.gpu_instance) => since = now,
                Some(_) if now.duration_since(since) >= debounce => {
                    due.push(instance.gpu_instance);
                }
                _ => {}
            }
            book.seen.insert(
                key,
                Orphan {
                    profile: instance.profile.clone(),
                    start: instance.start,
                    size: instance.size,
                    compute_instances: instance.compute_instances.clone(),
                    uuid: instance.uuid.clone(),
                    since,
                    busy: seen_busy,
                },
            );
        }
        self.synced(state, gpu.index);
        due
    }

    /// Destroys the due unowned instances of `gpu` (idle by this pass's process listing).
    async fn destroy_due(&self, parts: &super::Partitions, gpu: &PartitionGpu, due: Vec<u32>) {
        for gi in due {
            let key = (gpu.index, gi);
            let orphan = {
                let mut state = self.lock();
                let Some(orphan) = state.orphans.seen.get(&key).cloned() else {
                    continue;
                };
                let taken = partitions::occupied(&state.ledger, gpu.index);
                if taken
                    .iter()
                    .any(|t| overlaps(*t, (orphan.start, orphan.size)))
                {
                    // A grant took it (claimed) since the listing.
                    state.orphans.seen.remove(&key);
                    self.synced(state, gpu.index);
                    continue;
                }
                state.orphans.destroying.insert(key);
                self.synced(state, gpu.index);
                orphan
            };
            let made = orphan.clone();
            let outcome = parts
                .call(gpu, move |partitioner, commands, target| {
                    // Only the instance seen: a GI id made again since carries another UUID.
                    let live = partitioner.instances(commands, target)?;
                    let same = live.iter().any(|i| {
                        i.gpu_instance == gi
                            && i.uuid == made.uuid
                            && i.start == made.start
                            && i.compute_instances == made.compute_instances
                    });
                    if !same {
                        return Ok(false);
                    }
                    partitioner
                        .destroy(
                            commands,
                            target,
                            gi,
                            made.compute_instances.first().copied(),
                        )
                        .map(|()| true)
                })
                .await;
            let mut state = self.lock();
            state.orphans.destroying.remove(&key);
            match outcome {
                Ok(Ok(destroyed)) => {
                    state.orphans.seen.remove(&key);
                    if destroyed {
                        tracing::info!(
                            "{gpu}: destroyed the unowned MIG {} instance at slice {} (GPU instance {gi}, {}): owned by no partition and idle",
                            orphan.profile,
                            orphan.start,
                            orphan.uuid.as_deref().unwrap_or("no MIG device")
                        );
                    }
                }
                Ok(Err(e)) => {
                    if let Some(o) = state.orphans.seen.get_mut(&key) {
                        o.since = Instant::now();
                    }
                    tracing::warn!("{gpu}: the unowned GPU instance {gi} is kept for now: {e}");
                }
                Err(_) => {}
            }
            self.synced(state, gpu.index);
        }
    }
}
