//! Answering an exclusive or shared Allocate from the Pod watch, and the kubelet's word on it
//! right after (issue 10: "answer as fast as NVIDIA's plugin").
//!
//! An exclusive or shared grant's answer does not depend on its container (the device list, in
//! the environment or as CDI names) unless the injection strategy is `auto`, which reads the
//! Pod. When the watch shows exactly one pending container that can be the one
//! ([`identify::sole_pending`]), Allocate grants to it at once, without asking the kubelet first:
//! the pod-resources round trip cost each Allocate 0.3–1.5 ms on a real kubelet, as much as
//! NVIDIA's whole Allocate. Seed 000 has the kubelet's answer outrank the plugin's own matching;
//! here it still does, a few milliseconds later: once the kubelet has recorded the devices, its
//! pod-resources List names the container holding exactly these device IDs, and a grant the
//! watch attributed to another container is moved to that one (ledger and journal). Until then
//! the grant is "unverified": its Pod's departure or finish does not release it, so a wrong
//! guess can never free an accelerator a running container holds.
//!
//! Where the watch shows none or several candidates, or the answer depends on the container,
//! Allocate asks the kubelet first, as before ([`super::identity`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use accel_core::ledger::{Family, Grant, GrantKey};
use tokio::time::Instant;

use super::identity::{holds, with_direct};
use super::{Granted, Shared, State};
use crate::identify::{self, WatchAnswer};
use crate::journal::Entry;
use crate::metrics::{Attribution, Stage, StageTimes};
use crate::pods::{Phase, Pod};
use crate::pools::Pool;

/// How long a grant answered before its container was named waits, at most, for the kubelet to
/// record who holds its devices before it is released as nobody's (the Pod's admission failed
/// after our answer). Longer than a watch-attributed grant's wait: there is no Pod to follow.
pub const UNNAMED_GRACE: Duration = Duration::from_secs(1);

/// How long after a grant made from the watch the kubelet is asked who holds its devices: the
/// kubelet records them right after our answer arrives.
pub const VERIFY_AFTER: Duration = Duration::from_millis(5);

/// Between two asks while some grant's devices are not recorded by the kubelet yet.
pub const VERIFY_RETRY: Duration = Duration::from_millis(100);

/// How long a grant stays unverified at most. Past it, nobody holds its devices in the kubelet's
/// record (the Pod's admission failed after our answer, or the Pod is gone): the grant is left to
/// the Pod reconciler like any other.
pub const VERIFY_GIVE_UP: Duration = Duration::from_secs(30);

/// A grant made from the watch's answer alone, until the kubelet confirms or corrects it.
#[derive(Debug, Clone)]
pub(super) struct Unverified {
    pub(super) key: GrantKey,
    pub(super) resource: String,
    /// Sorted, as the grant records them.
    pub(super) device_ids: Vec<String>,
    pub(super) since: Instant,
}

impl Unverified {
    fn new(key: GrantKey, resource: &str, device_ids: &[String], since: Instant) -> Unverified {
        let mut device_ids = device_ids.to_vec();
        device_ids.sort();
        Unverified {
            key,
            resource: resource.to_string(),
            device_ids,
            since,
        }
    }
}

impl Shared {
    /// Whether `pool`'s answers are the same whatever container they serve, so a grant may be
    /// made before the kubelet confirms the container.
    pub(super) fn answers_alike(&self, pool: &Pool) -> bool {
        matches!(pool.family(), Some(Family::Exclusive | Family::Shared))
            && self.config.settings.identify_by_kubelet
            && self.config.responder.answers_alike()
    }

    /// Grants `device_ids` without asking the kubelet first: to the watch's sole candidate, or,
    /// when the watch shows nobody yet or several (the kubelet admits a Pod as soon as its own
    /// watch sees it, ours is often a few milliseconds behind), under an unattributed key that
    /// the verifier renames once the kubelet names the container. `None`: the Pods are not
    /// synced yet, or the grant was refused; the caller asks the kubelet (and a refusal it
    /// logs names the container the kubelet names).
    pub(super) fn grant_from_watch(
        &self,
        pool: &Pool,
        device_ids: &[String],
        accelerators: &[u32],
        times: &mut StageTimes,
    ) -> Option<Granted> {
        let started = std::time::Instant::now();
        let watched = self.pods.snapshot();
        let asked = times.lap(Stage::Identify, started);
        let watched = watched?;
        let mut state = self.lock();
        let identifying = times.lap(Stage::Lock, asked);
        let pods = with_direct(watched, &state, &[]);
        let candidate = identify::sole_pending(
            &pods,
            &|key| holds(&state, pool, key),
            &pool.resource,
            device_ids.len(),
        );
        // While a grant of this resource waits for its container's name, a Pod it may belong
        // to still looks like a candidate: the watch's one candidate is not trusted then.
        let unnamed_waiting = state
            .unverified
            .iter()
            .any(|u| u.key.is_unattributed() && u.resource == pool.resource);
        let named = match candidate {
            WatchAnswer::One(_) if unnamed_waiting => None,
            WatchAnswer::One(key) => pods
                .iter()
                .find(|p| p.uid == key.pod_uid)
                .map(|pod| (key, pod.clone())),
            WatchAnswer::Nobody | WatchAnswer::Several => None,
        };
        let (key, pod, by) = match named {
            Some((key, pod)) => (key, pod, Attribution::Watch),
            None => (
                GrantKey::unattributed(&pool.resource, device_ids),
                Arc::new(unnamed_pod()),
                Attribution::Unnamed,
            ),
        };
        times.lap(Stage::Identify, identifying);
        let answer = self.grant(
            &mut state,
            pool,
            &pod,
            key.clone(),
            (device_ids.to_vec(), accelerators.to_vec()),
            by,
            times,
        );
        // Refused: asked again through the kubelet, so the refusal names the right Pod.
        let granted = answer.ok()?;
        if granted.fresh.is_some() {
            state.unverified.push(Unverified::new(
                key,
                &pool.resource,
                device_ids,
                Instant::now(),
            ));
            drop(state);
            self.verify_wake.notify_one();
        }
        Some(granted)
    }

    /// A retried Allocate of a grant still unattributed: the same answer again (the grant is
    /// not charged twice).
    pub(super) fn regrant_unattributed(
        &self,
        pool: &Pool,
        key: GrantKey,
        device_ids: &[String],
        accelerators: &[u32],
        times: &mut StageTimes,
    ) -> Result<Granted, tonic::Status> {
        let asked = std::time::Instant::now();
        let mut state = self.lock();
        times.lap(Stage::Lock, asked);
        self.grant(
            &mut state,
            pool,
            &unnamed_pod(),
            key,
            (device_ids.to_vec(), accelerators.to_vec()),
            Attribution::Unnamed,
            times,
        )
    }

    /// Puts the unattributed grants the journal held at start in the verifier's hands, as if
    /// made long enough ago that the kubelet's record is final: the first look names their
    /// containers, or releases those nobody holds.
    pub(super) fn adopt_unattributed(&self) {
        let mut state = self.lock();
        let keys: Vec<(GrantKey, Grant)> = state
            .ledger
            .grants()
            .iter()
            .filter(|(k, _)| k.is_unattributed())
            .map(|(k, g)| (k.clone(), g.clone()))
            .collect();
        let long_ago = Instant::now()
            .checked_sub(UNNAMED_GRACE)
            .unwrap_or_else(Instant::now);
        for (key, grant) in keys {
            let waiting = Unverified::new(key, &grant.resource, &grant.device_ids, long_ago);
            state.unverified.push(waiting);
        }
    }

    /// The Pod UIDs with a grant still unverified (the reconciler leaves them alone).
    pub(super) fn unverified_pods(state: &State) -> BTreeSet<String> {
        state
            .unverified
            .iter()
            .map(|u| u.key.pod_uid.clone())
            .collect()
    }

    /// Asks the kubelet who holds the unverified grants' devices and confirms or moves each.
    /// Returns whether some are still waiting.
    pub(super) async fn verify_once(&self) -> bool {
        if self.lock().unverified.is_empty() {
            return false;
        }
        let Some(answer) = self.list_pod_resources().await else {
            return true;
        };
        let pending: Vec<Unverified> = self.lock().unverified.clone();
        // Who holds each grant's devices, by the kubelet's record.
        let holders: Vec<Option<(String, String, String)>> = pending
            .iter()
            .map(|u| {
                identify::holder(&answer, &u.resource, &u.device_ids)
                    .map(|(ns, pod, c)| (ns.to_string(), pod.to_string(), c.to_string()))
            })
            .collect();
        // The holders' Pods, from the watch, or read directly when it has not delivered them.
        let mut known: BTreeMap<(String, String), Arc<Pod>> = BTreeMap::new();
        if let Some(watched) = self.pods.snapshot() {
            let pods = with_direct(watched, &self.lock(), &[]);
            for pod in pods {
                known.insert((pod.namespace.clone(), pod.name.clone()), pod);
            }
        }
        let mut read: Vec<Arc<Pod>> = Vec::new();
        let deadline = Instant::now() + super::identity::IDENTIFY_WAIT;
        for (ns, name, _) in holders.iter().flatten() {
            let id = (ns.clone(), name.clone());
            if known.contains_key(&id) {
                continue;
            }
            if let Ok(Some(pod)) = self.read_pod(ns, name, deadline).await {
                let pod = Arc::new(pod);
                read.push(pod.clone());
                known.insert(id, pod);
            }
        }

        let mut state = self.lock();
        // The guessed Pods still live by the watch (a Pod gone or finished holds nothing).
        let live: BTreeSet<String> = known
            .values()
            .filter(|p| !p.phase.finished())
            .map(|p| p.uid.clone())
            .collect();
        let mut moves: Vec<(GrantKey, GrantKey)> = Vec::new();
        let mut settled: BTreeSet<GrantKey> = BTreeSet::new();
        for (u, holder) in pending.iter().zip(&holders) {
            let current = state.ledger.grant(&u.key);
            if current.is_none_or(|g| g.device_ids != u.device_ids) {
                // Released (or replaced) meanwhile: nothing left to verify.
                settled.insert(u.key.clone());
                continue;
            }
            let Some((ns, name, container)) = holder else {
                let recorded_by_now = u.since.elapsed()
                    >= if u.key.is_unattributed() {
                        UNNAMED_GRACE
                    } else {
                        VERIFY_AFTER
                    };
                if recorded_by_now && !live.contains(&u.key.pod_uid) {
                    // Nobody holds the devices and the Pod is gone or finished: the grant
                    // follows its Pod (the reconciler releases it).
                    settled.insert(u.key.clone());
                } else if u.since.elapsed() >= VERIFY_GIVE_UP {
                    tracing::warn!(
                        "{}: the kubelet records no container holding {:?} of {} after {VERIFY_GIVE_UP:?}; the grant stays with {} and follows its Pod",
                        u.key,
                        u.device_ids,
                        u.resource,
                        u.key
                    );
                    settled.insert(u.key.clone());
                }
                continue;
            };
            let Some(pod) = known.get(&(ns.clone(), name.clone())) else {
                // The holder's Pod could not be read yet: ask again.
                continue;
            };
            let actual = GrantKey::new(pod.uid.clone(), container.clone());
            if actual != u.key {
                moves.push((u.key.clone(), actual));
            }
            settled.insert(u.key.clone());
        }
        let moved = !moves.is_empty();
        // A move that could not be made (its container holds another grant that a later look
        // moves away) stays unverified: it is tried again, and never released on a Pod's word.
        for failed in self.move_grants(&mut state, &moves, &read) {
            settled.remove(&failed);
        }
        state.unverified.retain(|u| !settled.contains(&u.key));
        let more = !state.unverified.is_empty();
        drop(state);
        if moved {
            self.notify();
        }
        more
    }

    /// Moves grants the watch attributed to the wrong container to the container the kubelet
    /// says holds their devices: all taken out first, then all put back (two guesses may have
    /// swapped places), each move journalled as a release and a grant.
    fn move_grants(
        &self,
        state: &mut State,
        moves: &[(GrantKey, GrantKey)],
        read: &[Arc<Pod>],
    ) -> Vec<GrantKey> {
        let mut failed = Vec::new();
        let mut taken = Vec::with_capacity(moves.len());
        for (from, to) in moves {
            if let Some(grant) = state.ledger.release(from) {
                taken.push((from.clone(), to.clone(), grant));
            }
        }
        for (from, to, grant) in taken {
            let restored = match state.ledger.restore(to.clone(), grant.clone()) {
                Ok(()) => {
                    if from.is_unattributed() {
                        self.config.metrics.attributed(Attribution::Named);
                        tracing::debug!("{from}: the kubelet says {to} holds it");
                    } else {
                        self.config.metrics.attributed(Attribution::Moved);
                        tracing::warn!(
                            "{}: the Pod watch named {from}, the kubelet says {to} holds {:?}: the grant moves to {to}",
                            grant.resource,
                            grant.device_ids
                        );
                    }
                    true
                }
                Err(refusal) => {
                    tracing::info!(
                        "{}: the kubelet says {to} holds {:?}, but the grant cannot move from {from} yet ({refusal}); asked again",
                        grant.resource,
                        grant.device_ids
                    );
                    if let Err(again) = state.ledger.restore(from.clone(), grant.clone()) {
                        tracing::error!("{from}: the grant could not be put back: {again}");
                    }
                    failed.push(from.clone());
                    false
                }
            };
            if !restored {
                continue;
            }
            for entry in [
                Entry::Release { key: from.clone() },
                Entry::Grant {
                    key: to.clone(),
                    grant,
                },
            ] {
                if let Err(e) = state.journal.append(&entry) {
                    tracing::error!("ledger journal: {e}");
                }
            }
            // A holder read directly is kept for its grant until the watch delivers it.
            if let Some(pod) = read.iter().find(|p| p.uid == to.pod_uid) {
                state.direct.insert(
                    pod.uid.clone(),
                    super::identity::Direct {
                        pod: pod.clone(),
                        since: Instant::now(),
                    },
                );
            }
        }
        failed
    }

    /// The verifier task: after each grant made from the watch, asks the kubelet
    /// ([`VERIFY_AFTER`]), again every [`VERIFY_RETRY`] while some grant waits, each time once
    /// the kubelet's calls have gone quiet ([`super::announce`]); what it settles is then
    /// reconciled with the Pods (a grant whose Pod left meanwhile is released).
    pub(super) async fn verify_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = self.verify_wake.notified() => {}
            }
            let mut pause = VERIFY_AFTER;
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    () = async {
                        tokio::time::sleep(pause).await;
                        self.announce.until_quiet(Instant::now()).await;
                    } => {}
                }
                let more = self.verify_once().await;
                self.reconcile_pods();
                if !more {
                    break;
                }
                pause = VERIFY_RETRY;
            }
        }
    }

    /// Verifies until no grant made from the watch waits (at most [`VERIFY_GIVE_UP`]).
    pub(super) async fn verify_all(&self) {
        let until = Instant::now() + VERIFY_GIVE_UP;
        while self.verify_once().await && Instant::now() < until {
            tokio::time::sleep(VERIFY_RETRY.min(VERIFY_AFTER)).await;
        }
    }
}

/// The Pod an unattributed grant is answered for: nobody's (the answer does not depend on it).
fn unnamed_pod() -> Pod {
    Pod {
        uid: String::new(),
        namespace: String::new(),
        name: String::new(),
        created: 0,
        phase: Phase::Pending,
        runtime_class: None,
        containers: Vec::new(),
        allocated: None,
    }
}
