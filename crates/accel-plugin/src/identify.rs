//! Container identification: which (Pod, container) an Allocate call serves.
//!
//! The kubelet is asked first (pod-resources List): it adds a Pod before admitting it and admits
//! one at a time, so the container this call serves is the one it holds without a device of the
//! resource yet. That answer outranks our own matching, because creation timestamps keep whole
//! seconds only. When it names none or several, the node's pending Pods are matched here: drop
//! candidates the call could not serve, skip those already holding a reservation, take the oldest
//! (seed 000, "Container identification").
//!
//! The kubelet adds and admits a Pod as soon as its own watch sees it, often before the
//! plugin's watch has delivered it. When the kubelet names none of the Pods we know but lists
//! Pods we do not, those are reported ([`IdentifyError::NotDelivered`]) rather than matched
//! around: the caller reads them and asks again, because taking the oldest pending Pod we know
//! instead would charge the grant to the wrong Pod. Pure: the caller fetches every answer and
//! does the waiting (`service/identity.rs`).

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
    /// A retried call's container belongs to a Pod that is no longer on this node.
    #[error("{key}: the Pod is no longer on this node")]
    PodGone { key: GrantKey },
    /// The kubelet names none of the Pods we know, and lists these (namespace, name) that the
    /// Pod watch has not delivered: the container is probably one of theirs.
    #[error(
        "the kubelet admits {} which the node's Pod watch has not delivered; cannot tell which container asks for {count} {resource}",
        names(pods)
    )]
    NotDelivered {
        resource: String,
        count: usize,
        pods: Vec<(String, String)>,
    },
}

fn names(pods: &[(String, String)]) -> String {
    let names: Vec<String> = pods
        .iter()
        .map(|(ns, name)| format!("{ns}/{name}"))
        .collect();
    names.join(", ")
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

/// The containers that could be the one an Allocate of `count` tokens of `resource` serves, as
/// (Pod, position, container): the Pod is not finished, the container asks for exactly `count`
/// and holds no grant of it (`holds`). `keep` narrows the Pods first (cheap tests before the
/// grant lookup).
fn eligible<'a, P: Borrow<Pod>>(
    pods: &'a [P],
    holds: &dyn Fn(&GrantKey) -> bool,
    resource: &str,
    count: usize,
    keep: &dyn Fn(&Pod, &str) -> bool,
) -> Vec<(&'a Pod, usize, &'a str)> {
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
}

/// Names the container an Allocate of `count` tokens of `resource` serves.
///
/// `kubelet` is the pod-resources answer when it could be asked. A container counts only when
/// its Pod asks for exactly `count` of the resource and `holds` says it has no grant of it yet.
/// `looked_up` says which (namespace, name) the caller has already tried to read directly:
/// those are not reported as undelivered again.
pub fn identify<P: Borrow<Pod>>(
    pods: Option<&[P]>,
    kubelet: Option<&ListPodResourcesResponse>,
    holds: &dyn Fn(&GrantKey) -> bool,
    resource: &str,
    count: usize,
    looked_up: &dyn Fn(&str, &str) -> bool,
) -> Result<(GrantKey, Source), IdentifyError> {
    let Some(pods) = pods else {
        return Err(IdentifyError::PodsUnknown {
            resource: resource.to_string(),
        });
    };
    let eligible = |keep: &dyn Fn(&Pod, &str) -> bool| eligible(pods, holds, resource, count, keep);
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
        // None of ours: the kubelet may be admitting a Pod the watch has not delivered. Only
        // now (off the common path) are its Pods compared with ours.
        let known: BTreeSet<(&str, &str)> = pods
            .iter()
            .map(Borrow::borrow)
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        let mut missing: Vec<(String, String)> = Vec::new();
        for (namespace, name, _) in &named {
            let new = missing
                .last()
                .is_none_or(|(n, m)| (n.as_str(), m.as_str()) != (*namespace, *name));
            if new && !known.contains(&(*namespace, *name)) && !looked_up(namespace, name) {
                missing.push((namespace.to_string(), name.to_string()));
            }
        }
        if !missing.is_empty() {
            return Err(IdentifyError::NotDelivered {
                resource: resource.to_string(),
                count,
                pods: missing,
            });
        }
    }
    let pending = eligible(&|pod, _| pod.phase == Phase::Pending);
    oldest(&pending, resource, count)
}

/// What the watch alone says about which container an Allocate serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchAnswer {
    /// No pending container asks for it (the watch may not have delivered the Pod yet).
    Nobody,
    /// Exactly one pending container asks for it and holds no grant of it.
    One(GrantKey),
    /// Several could be the one: only the kubelet can tell.
    Several,
}

/// Which pending container of the node's Pods asks for exactly `count` of `resource` and holds
/// no grant of it (`holds`). The watch's own answer, for a grant whose response does not depend
/// on its container: the kubelet's word is checked right after ([`crate::service`]).
pub fn sole_pending<P: Borrow<Pod>>(
    pods: &[P],
    holds: &dyn Fn(&GrantKey) -> bool,
    resource: &str,
    count: usize,
) -> WatchAnswer {
    let pending = eligible(pods, holds, resource, count, &|pod, _| {
        pod.phase == Phase::Pending
    });
    match pending.as_slice() {
        [] => WatchAnswer::Nobody,
        [(pod, _, container)] => WatchAnswer::One(GrantKey::new(pod.uid.clone(), *container)),
        _ => WatchAnswer::Several,
    }
}

/// The container the kubelet's answer says holds exactly `device_ids` (sorted) of `resource`,
/// as (namespace, Pod, container).
pub fn holder<'a>(
    answer: &'a ListPodResourcesResponse,
    resource: &str,
    device_ids: &[String],
) -> Option<(&'a str, &'a str, &'a str)> {
    for pod in &answer.pod_resources {
        for container in &pod.containers {
            let mut held: Vec<&str> = container
                .devices
                .iter()
                .filter(|d| d.resource_name == resource)
                .flat_map(|d| d.device_ids.iter().map(String::as_str))
                .collect();
            if held.len() != device_ids.len() {
                continue;
            }
            held.sort_unstable();
            if held.iter().zip(device_ids).all(|(a, b)| *a == b.as_str()) {
                return Some((
                    pod.namespace.as_str(),
                    pod.name.as_str(),
                    container.name.as_str(),
                ));
            }
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::podresources::{ContainerResources, PodResources};
    use crate::pods::Container;

    const GPU: &str = "nvidia.com/gpu";

    fn pod(uid: &str, created: i64, phase: Phase) -> Pod {
        Pod {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("pod-{uid}"),
            created,
            phase,
            runtime_class: None,
            allocated: None,
            containers: vec![Container {
                name: "main".into(),
                limits: BTreeMap::from([(GPU.to_string(), "1".to_string())]),
                env: BTreeMap::new(),
            }],
        }
    }

    /// The kubelet's answer listing these Pods, none of their containers holding a device yet.
    fn kubelet(uids: &[&str]) -> ListPodResourcesResponse {
        ListPodResourcesResponse {
            pod_resources: uids
                .iter()
                .map(|uid| PodResources {
                    name: format!("pod-{uid}"),
                    namespace: "ns".into(),
                    containers: vec![
                        ContainerResources {
                            name: "main".into(),
                            ..Default::default()
                        },
                        ContainerResources {
                            name: "logs".into(),
                            ..Default::default()
                        },
                    ],
                })
                .collect(),
        }
    }

    #[test]
    fn sole_pending_names_only_an_unambiguous_container() {
        let one = [pod("a", 1, Phase::Pending), pod("b", 1, Phase::Running)];
        assert_eq!(
            sole_pending(&one, &|_| false, GPU, 1),
            WatchAnswer::One(GrantKey::new("a", "main"))
        );
        // Two pending candidates: only the kubelet can tell.
        let two = [pod("a", 1, Phase::Pending), pod("b", 2, Phase::Pending)];
        assert_eq!(sole_pending(&two, &|_| false, GPU, 1), WatchAnswer::Several);
        // One of them already holds its grant: the other is the one.
        let holds = |k: &GrantKey| k.pod_uid == "a";
        assert_eq!(
            sole_pending(&two, &holds, GPU, 1),
            WatchAnswer::One(GrantKey::new("b", "main"))
        );
        // Another count, another resource, or nobody pending: nobody.
        assert_eq!(sole_pending(&one, &|_| false, GPU, 2), WatchAnswer::Nobody);
        assert_eq!(
            sole_pending(&one, &|_| false, "nvidia.com/gpu.shared", 1),
            WatchAnswer::Nobody
        );
        assert_eq!(
            sole_pending::<Pod>(&[], &|_| false, GPU, 1),
            WatchAnswer::Nobody
        );
    }

    #[test]
    fn the_holder_is_the_container_holding_exactly_those_ids() {
        use crate::api::podresources::ContainerDevices;
        let mut answer = kubelet(&["x", "y"]);
        let devices = |ids: &[&str]| ContainerDevices {
            resource_name: GPU.into(),
            device_ids: ids.iter().map(|i| i.to_string()).collect(),
            ..Default::default()
        };
        answer.pod_resources[0].containers[0].devices = vec![devices(&["GPU-b", "GPU-a"])];
        answer.pod_resources[1].containers[1].devices = vec![devices(&["GPU-c"])];
        let ids = |v: &[&str]| v.iter().map(|i| i.to_string()).collect::<Vec<_>>();
        assert_eq!(
            holder(&answer, GPU, &ids(&["GPU-a", "GPU-b"])),
            Some(("ns", "pod-x", "main"))
        );
        assert_eq!(
            holder(&answer, GPU, &ids(&["GPU-c"])),
            Some(("ns", "pod-y", "logs"))
        );
        // A subset, a superset, or another resource's IDs are not a match.
        assert_eq!(holder(&answer, GPU, &ids(&["GPU-a"])), None);
        assert_eq!(
            holder(&answer, GPU, &ids(&["GPU-a", "GPU-b", "GPU-c"])),
            None
        );
        assert_eq!(
            holder(&answer, "nvidia.com/gpu.shared", &ids(&["GPU-c"])),
            None
        );
    }

    fn run(
        pods: &[Pod],
        answer: Option<&ListPodResourcesResponse>,
        looked_up: &dyn Fn(&str, &str) -> bool,
    ) -> Result<(GrantKey, Source), IdentifyError> {
        identify(Some(pods), answer, &|_| false, GPU, 1, looked_up)
    }

    #[test]
    fn a_pod_the_kubelet_admits_but_the_watch_lacks_is_reported_not_matched_around() {
        // An older pending Pod we know, which the kubelet has not added: taking it would charge
        // the grant to the wrong Pod.
        let known = [pod("old", 1, Phase::Pending)];
        let answer = kubelet(&["new"]);
        assert_eq!(
            run(&known, Some(&answer), &|_, _| false),
            Err(IdentifyError::NotDelivered {
                resource: GPU.into(),
                count: 1,
                pods: vec![("ns".into(), "pod-new".into())],
            })
        );
        // Once read (found or not), our own matching decides.
        let (key, source) = run(&known, Some(&answer), &|_, _| true).unwrap();
        assert_eq!((key.pod_uid.as_str(), source), ("old", Source::PendingPods));
        // With the Pod read, the kubelet's answer names it.
        let both = [pod("old", 1, Phase::Pending), pod("new", 2, Phase::Pending)];
        let (key, source) = run(&both, Some(&answer), &|_, _| true).unwrap();
        assert_eq!((key.pod_uid.as_str(), source), ("new", Source::Kubelet));
    }

    #[test]
    fn the_common_path_names_the_container_without_reporting_unknown_pods() {
        // The kubelet also lists a Pod the watch no longer has (deleted, still terminating);
        // the container is named all the same.
        let known = [pod("a", 1, Phase::Pending)];
        let answer = kubelet(&["a", "gone"]);
        let (key, source) = run(&known, Some(&answer), &|_, _| false).unwrap();
        assert_eq!((key.pod_uid.as_str(), source), ("a", Source::Kubelet));
    }

    #[test]
    fn the_error_names_every_pod_the_watch_lacks() {
        let e = run(&[], Some(&kubelet(&["x", "y"])), &|_, name| name == "pod-y").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the kubelet admits ns/pod-x which the node's Pod watch has not delivered; cannot tell which container asks for 1 nvidia.com/gpu"
        );
    }
}
