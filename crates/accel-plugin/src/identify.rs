//! Container identification: which (Pod, container) an Allocate call serves.
//!
//! The kubelet is asked first (pod-resources List): it adds a Pod before admitting it and admits
//! one at a time, so the container this call serves is the one it holds without a device of the
//! resource yet. That answer outranks our own matching, because creation timestamps keep whole
//! seconds only. When it names none or several, the node's pending Pods are matched here: drop
//! candidates the call could not serve, skip those already holding a reservation, take the oldest
//! (seed 000, "Container identification"). Pure: the caller fetches both answers.

use std::borrow::Borrow;
use std::collections::BTreeSet;

use accel_core::ledger::GrantKey;

use crate::api::podresources::ListPodResourcesResponse;
use crate::pods::{Phase, Pod};

/// How a container was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A retried call: the ledger already holds these device IDs for it.
    Retry,
    /// The kubelet named exactly one.
    Kubelet,
    /// Our own matching of pending Pods.
    PendingPods,
}

/// Why no container could be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// The Pod source has not synced yet.
    #[error("the node's Pods are not known yet; cannot tell which container asks for {resource}")]
    PodsUnknown { resource: String },
    /// No pending container asks for this many.
    #[error("no pending container on this node asks for {count} {resource} without a grant")]
    NoCandidate { resource: String, count: usize },
}

/// The containers of the kubelet's answer that hold no device of `resource`, as (namespace,
/// Pod, container), borrowed from the answer (no copies: this runs on every Allocate, over every
/// Pod of the node).
fn kubelet_names<'a>(
    answer: &'a ListPodResourcesResponse,
    resource: &str,
) -> BTreeSet<(&'a str, &'a str, &'a str)> {
    let mut out = BTreeSet::new();
    for pod in &answer.pod_resources {
        for container in &pod.containers {
            let holds = container
                .devices
                .iter()
                .any(|d| d.resource_name == resource && !d.device_ids.is_empty());
            if !holds {
                out.insert((
                    pod.namespace.as_str(),
                    pod.name.as_str(),
                    container.name.as_str(),
                ));
            }
        }
    }
    out
}

/// Names the container an Allocate of `count` tokens of `resource` serves.
///
/// `kubelet` is the pod-resources answer when it could be asked. A container counts only when
/// its Pod asks for exactly `count` of the resource and `holds` says it has no grant of it yet.
pub fn identify<P: Borrow<Pod>>(
    pods: Option<&[P]>,
    kubelet: Option<&ListPodResourcesResponse>,
    holds: &dyn Fn(&GrantKey) -> bool,
    resource: &str,
    count: usize,
) -> Result<(GrantKey, Source), IdentifyError> {
    let Some(pods) = pods else {
        return Err(IdentifyError::PodsUnknown {
            resource: resource.to_string(),
        });
    };
    // A container that could be the one: its Pod is not finished, it asks for exactly
    // `count`, it holds no grant of it. `keep` narrows the Pods first (cheap tests before the
    // grant lookup).
    let eligible = |keep: &dyn Fn(&Pod, &str) -> bool| -> Vec<(&Pod, usize, &str)> {
        let mut out = Vec::new();
        for pod in pods.iter().map(Borrow::borrow) {
            if pod.phase.finished() {
                continue;
            }
            for (position, container) in pod.containers.iter().enumerate() {
                if keep(pod, &container.name)
                    && container.count(resource) == Some(count as u64)
                    && !holds(&GrantKey::new(pod.uid.clone(), container.name.clone()))
                {
                    out.push((pod, position, container.name.as_str()));
                }
            }
        }
        out
    };
    if let Some(answer) = kubelet {
        let named = kubelet_names(answer, resource);
        let matched = eligible(&|pod, container| {
            named.contains(&(pod.namespace.as_str(), pod.name.as_str(), container))
        });
        if let [(pod, _, container)] = matched.as_slice() {
            return Ok((GrantKey::new(pod.uid.clone(), *container), Source::Kubelet));
        }
        if matched.len() > 1 {
            // Several: the kubelet narrowed it down; our matching orders what it named.
            return oldest(&matched, resource, count);
        }
    }
    let pending = eligible(&|pod, _| pod.phase == Phase::Pending);
    oldest(&pending, resource, count)
}

fn oldest(
    candidates: &[(&Pod, usize, &str)],
    resource: &str,
    count: usize,
) -> Result<(GrantKey, Source), IdentifyError> {
    candidates
        .iter()
        .min_by_key(|(pod, position, _)| (pod.created, &pod.namespace, &pod.name, *position))
        .map(|(pod, _, container)| {
            (
                GrantKey::new(pod.uid.clone(), *container),
                Source::PendingPods,
            )
        })
        .ok_or_else(|| IdentifyError::NoCandidate {
            resource: resource.to_string(),
            count,
        })
}
