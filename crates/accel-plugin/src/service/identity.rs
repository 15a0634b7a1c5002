//! Which container a call serves, when the Pod watch lags the kubelet (issue 10).
//!
//! The kubelet adds a Pod to its pod manager and admits it as soon as its own watch of the API
//! server sees it (`HandlePodAdditions`), and pod-resources List already names it then; the
//! plugin's own watch of the node's Pods often delivers it a little later. A valid Pod must never
//! be refused for that, so identification here:
//!
//! 1. names the container from what it has (the kubelet's answer, the watch's Pods, and the Pods
//!    it read directly for grants the watch has not confirmed yet) — the common path: no read
//!    of the API server, one pod-resources List;
//! 2. when the kubelet lists Pods the watch has not delivered and names none of ours, reads
//!    those Pods from the API server ([`PodSource::lookup`]) and asks again;
//! 3. when that cannot settle it (the kubelet could not be asked, a direct read failed, the
//!    Pods are not synced yet), waits for the watch to change and asks again,
//!
//! all within [`IDENTIFY_WAIT`] of the call's start. A grant made for a Pod read directly is
//! kept with that Pod until the watch delivers it, so the Pod reconciler does not take the
//! fresh grant for one whose Pod is gone ([`DIRECT_GRACE`]).
//!
//! This module waits and reads; `crate::identify` decides, the ledger grants.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use accel_core::ledger::GrantKey;
use tokio::time::Instant;

use super::{Shared, State};
use crate::api::podresources::ListPodResourcesResponse;
use crate::identify::{self, IdentifyError};
use crate::pods::Pod;
use crate::pools::Pool;

/// The longest one call (GetPreferredAllocation or Allocate) waits for its container's Pod to
/// reach the plugin, from the call's start. The kubelet allocates inside its pod admission loop,
/// which serves every Pod of the node one at a time, and gives Allocate no deadline of its own
/// (devicemanager's `allocateContainerResources` passes `context.TODO()`): a longer wait would
/// stall the whole node's admissions. The watch usually delivers within milliseconds, so this
/// bound is reached only when the API server cannot be read and the watch is stuck. A sliced
/// container goes through the hint and Allocate, so its admission waits at most twice this.
pub const IDENTIFY_WAIT: Duration = Duration::from_secs(2);

/// How long a grant made for a Pod read directly from the API server is kept while the watch has
/// not delivered that Pod. Past it, the Pod reconciler treats the Pod as gone (it was deleted
/// before the watch caught up) and releases the grant. Generous: releasing a live container's
/// grant would let the ledger charge its room twice, while keeping a deleted Pod's a little
/// longer only delays that room's return.
pub const DIRECT_GRACE: Duration = Duration::from_secs(300);

/// A Pod read directly from the API server for a grant, until the watch delivers it.
pub(super) struct Direct {
    pub(super) pod: Arc<Pod>,
    pub(super) since: Instant,
}

/// Whether `key` already holds what `pool` grants (a container holding it is not a candidate).
pub(super) fn holds(state: &State, pool: &Pool, key: &GrantKey) -> bool {
    match pool.family() {
        Some(_) => state
            .ledger
            .grant(key)
            .is_some_and(|g| g.resource == pool.resource),
        None => state.visibility.contains_key(key),
    }
}

impl Shared {
    /// Names the container a call for `count` tokens of `pool` serves (or takes `retry`, the
    /// container a retried Allocate already holds these tokens for), then runs `decide` with it
    /// under the ledger lock and returns its answer. `kubelet` is the pod-resources answer when
    /// it was asked; `started` is when the call began ([`IDENTIFY_WAIT`] counts from it).
    /// `decide` also says whether it granted: a Pod read directly is then kept for that grant
    /// until the watch delivers it (the hint grants nothing and keeps nothing).
    pub(super) async fn identified<R>(
        &self,
        pool: &Pool,
        count: usize,
        retry: Option<GrantKey>,
        kubelet: Option<&ListPodResourcesResponse>,
        started: Instant,
        decide: impl FnOnce(&mut State, &Arc<Pod>, GrantKey) -> (R, bool),
    ) -> Result<R, IdentifyError> {
        let deadline = started + IDENTIFY_WAIT;
        // Pods this call read directly, and every (namespace, name) it tried to read.
        let mut read: Vec<Arc<Pod>> = Vec::new();
        let mut looked_up: BTreeSet<(String, String)> = BTreeSet::new();
        // The Pods the kubelet lists whose direct read failed: what a refusal names.
        let mut unreadable: Vec<(String, String)> = Vec::new();
        let mut changes = None;
        loop {
            let snapshot = self.pods.snapshot();
            let found = {
                let mut state = self.lock();
                let pods = snapshot.map(|watched| with_direct(watched, &state, &read));
                let named = match &retry {
                    Some(key) => Ok(key.clone()),
                    None => identify::identify(
                        pods.as_deref(),
                        kubelet,
                        &|key| holds(&state, pool, key),
                        &pool.resource,
                        count,
                        &|ns, name| looked_up.contains(&(ns.to_string(), name.to_string())),
                    )
                    .map(|(key, _)| key),
                };
                match named {
                    Ok(key) => {
                        let pod = pods
                            .as_deref()
                            .and_then(|p| p.iter().find(|p| p.uid == key.pod_uid))
                            .cloned();
                        let Some(pod) = pod else {
                            return Err(IdentifyError::PodGone { key });
                        };
                        let direct = read.iter().any(|r| Arc::ptr_eq(r, &pod));
                        let (answer, granted) = decide(&mut state, &pod, key);
                        if direct && granted {
                            state.direct.insert(
                                pod.uid.clone(),
                                Direct {
                                    pod,
                                    since: Instant::now(),
                                },
                            );
                        }
                        return Ok(answer);
                    }
                    Err(e) => e,
                }
            };
            let refusal = match found {
                IdentifyError::NotDelivered { pods, .. } => {
                    for (namespace, name) in pods {
                        match self.read_pod(&namespace, &name, deadline).await {
                            Ok(Some(pod)) => read.push(Arc::new(pod)),
                            Ok(None) => {}
                            Err(()) => unreadable.push((namespace.clone(), name.clone())),
                        }
                        looked_up.insert((namespace, name));
                    }
                    continue;
                }
                IdentifyError::NoCandidate { .. } if kubelet.is_some() && unreadable.is_empty() => {
                    // The kubelet answered and every Pod it lists was read: waiting for the
                    // watch would not bring another candidate.
                    return Err(found);
                }
                IdentifyError::NoCandidate { resource, count } if !unreadable.is_empty() => {
                    // Name the Pods the kubelet admits that could not be read, not "none".
                    IdentifyError::NotDelivered {
                        resource,
                        count,
                        pods: unreadable.clone(),
                    }
                }
                IdentifyError::NoCandidate { .. } | IdentifyError::PodsUnknown { .. } => found,
                IdentifyError::PodGone { .. } => return Err(found),
            };
            // Wait for the watch: subscribe, then look once more before waiting, so a Pod
            // delivered in between is not missed.
            let Some(receiver) = changes.as_mut() else {
                changes = Some(self.pods.changes());
                continue;
            };
            match tokio::time::timeout_at(deadline, receiver.changed()).await {
                Ok(Ok(())) => {}
                // The watch ended or the bound passed: this is the answer.
                Ok(Err(_)) | Err(_) => return Err(refusal),
            }
        }
    }

    /// Reads one Pod the kubelet lists from the API server, bounded by `deadline`. `Err(())`:
    /// the read failed (logged), so the watch is worth waiting for.
    pub(super) async fn read_pod(
        &self,
        namespace: &str,
        name: &str,
        deadline: Instant,
    ) -> Result<Option<Pod>, ()> {
        match tokio::time::timeout_at(deadline, self.pods.lookup(namespace, name)).await {
            Ok(Ok(pod)) => {
                tracing::debug!(
                    "pod-resources lists {namespace}/{name}, not delivered by the Pod watch yet: read from the API server ({})",
                    if pod.is_some() {
                        "found"
                    } else {
                        "not on this node"
                    }
                );
                Ok(pod)
            }
            Ok(Err(e)) => {
                tracing::warn!("{e}; waiting for the Pod watch instead");
                Err(())
            }
            Err(_) => {
                tracing::warn!(
                    "reading Pod {namespace}/{name} from the API server did not finish within {IDENTIFY_WAIT:?} of the call"
                );
                Err(())
            }
        }
    }
}

/// The watch's Pods, plus the Pods read directly (kept for grants, or by this call) that the
/// watch has not delivered. The watch's own copy wins once it has one. The common path (nothing
/// read directly) hands the watch's snapshot back as it is.
pub(super) fn with_direct(
    mut watched: Vec<Arc<Pod>>,
    state: &State,
    read: &[Arc<Pod>],
) -> Vec<Arc<Pod>> {
    if state.direct.is_empty() && read.is_empty() {
        return watched;
    }
    let delivered: BTreeSet<String> = watched.iter().map(|p| p.uid.clone()).collect();
    let mut added: BTreeSet<String> = BTreeSet::new();
    let extra = state
        .direct
        .values()
        .map(|d| &d.pod)
        .chain(read)
        .filter(|p| !delivered.contains(&p.uid));
    for pod in extra {
        if added.insert(pod.uid.clone()) {
            watched.push(pod.clone());
        }
    }
    watched
}
