//! Settling the ledger at start, after the journal (DESIGN.md, "Restart"): the journal is
//! authoritative; the Pods' `device.gpustack.ai/accelerator.allocated` annotations are its
//! cluster-side copy and the fallback when it is lost; the kubelet's pod-resources answer and the
//! live Pods settle the rest. A grant the journal lacks is adopted from the first source that
//! records it; one the journal holds differently keeps the journal's. Every adoption and
//! disagreement is logged naming the Pod and kept as a rebuild note; an annotation of an
//! unreadable shape is logged loudly and never guessed at.
//!
//! This module reads and compares; the ledger's rules decide whether an adopted grant fits.

use std::collections::BTreeMap;

use accel_core::ledger::annotation;
use accel_core::ledger::{Family, Grant, GrantKey};

use super::Shared;
use crate::journal::Entry;
use crate::pods::Pod;

/// Where an adopted grant came from (for the log).
#[derive(Debug, Clone, Copy)]
enum Source {
    Annotation,
    Kubelet,
}

impl Source {
    fn describe(self) -> &'static str {
        match self {
            Source::Annotation => "its accelerator.allocated annotation",
            Source::Kubelet => "the kubelet's pod-resources",
        }
    }
}

fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// Whether two records of one container's grant say the same thing (a finished flag that has
/// not reached the cluster yet is not a disagreement, nor the units of a whole accelerator or a
/// share, which the ledger computes itself).
fn same_grant(a: &Grant, b: &Grant) -> bool {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    // A partition's tokens are fungible counts that name no GPU: a source that knows only the
    // tokens (the kubelet's record) cannot say which GPU the partition is on, so only a source
    // naming the instance is compared on it.
    let unnamed = |g: &Grant| {
        g.family == Family::Partitioned && g.partition.as_ref().is_none_or(|p| p.instance.is_none())
    };
    a.family == b.family
        && a.resource == b.resource
        && sorted(&a.device_ids) == sorted(&b.device_ids)
        && (unnamed(a) || unnamed(b) || a.accelerators == b.accelerators)
        // Only a slice's units are its own; the ledger computes the others.
        && (a.family != Family::Sliced || a.units == b.units)
        && a.cores_percentage == b.cores_percentage
}

fn describe(grant: &Grant) -> String {
    format!(
        "{} {:?} on {:?}",
        grant.resource, grant.device_ids, grant.accelerators
    )
}

impl Shared {
    pub(super) fn note(&self, note: String) {
        self.rebuild_notes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(note);
    }

    /// Settles the ledger after the journal against the Pods' annotations, then the kubelet.
    /// Called once, when the node's Pods are first known.
    pub(super) async fn settle(&self) {
        let Some(pods) = self.pods.pods() else {
            return;
        };
        // Grants the journal holds unattributed get their containers' names first, so the
        // kubelet's record below is not taken for grants the ledger lacks.
        if !self.lock().unverified.is_empty() {
            self.verify_once().await;
        }
        let from_annotations = self.annotation_grants(&pods);
        let adopted = self.adopt(from_annotations, Source::Annotation);
        // A partition adopted from an annotation is checked live like the journal's.
        if !adopted.is_empty() {
            self.check_partitions(Some(&adopted)).await;
        }
        let names: BTreeMap<&str, String> =
            pods.iter().map(|p| (p.uid.as_str(), pod_name(p))).collect();
        let from_kubelet = self
            .rebuild_from_kubelet()
            .await
            .into_iter()
            .map(|(key, grant)| {
                let name = names
                    .get(key.pod_uid.as_str())
                    .cloned()
                    .unwrap_or_else(|| key.pod_uid.clone());
                (key, (name, grant))
            })
            .collect();
        let _ = self.adopt(from_kubelet, Source::Kubelet);
    }

    /// The grants the Pods' annotations record, by container, with the Pod's name. Device IDs
    /// are mapped to today's accelerators through the pools (an index may have moved since the
    /// annotation was written); an annotation that does not read, or names what this node does
    /// not serve, is logged and not used.
    fn annotation_grants(&self, pods: &[Pod]) -> BTreeMap<GrantKey, (String, Grant)> {
        let pools = self.pools();
        let mut grants = BTreeMap::new();
        for pod in pods {
            let Some(text) = &pod.allocated else {
                continue;
            };
            let name = pod_name(pod);
            let allocated = match annotation::parse(text) {
                Ok(allocated) => allocated,
                Err(e) => {
                    let note = format!(
                        "pod {name}: UNREADABLE ANNOTATION, not used to rebuild the ledger: {e}"
                    );
                    tracing::error!("ledger rebuild: {note}");
                    self.note(note);
                    continue;
                }
            };
            for (container, mut grant) in allocated {
                let mapped: Option<Vec<u32>> = pools
                    .iter()
                    .find(|p| p.resource == grant.resource)
                    .and_then(|pool| {
                        grant
                            .device_ids
                            .iter()
                            .map(|id| pool.tokens.get(id).copied())
                            .collect()
                    });
                let Some(mut accelerators) = mapped else {
                    let note = format!(
                        "pod {name} container {container}: its annotation names {} this node does not serve; not restored",
                        describe(&grant)
                    );
                    tracing::warn!("ledger rebuild: {note}");
                    self.note(note);
                    continue;
                };
                accelerators.sort_unstable();
                accelerators.dedup();
                // A partition token is a count, not a GPU: the partition's GPU is the one the
                // annotation records (where its instance was made), not the token's.
                if grant.family != Family::Partitioned {
                    grant.accelerators = accelerators;
                }
                grant.finished = grant.finished || pod.phase.finished();
                grants.insert(
                    GrantKey::new(pod.uid.clone(), container),
                    (name.clone(), grant),
                );
            }
        }
        grants
    }

    /// Puts into the ledger (and the journal) the grants it lacks; says where the ledger
    /// disagrees, keeping its own. A partition whose instance the source does not name (the
    /// kubelet's record knows only device IDs) is not restored: its container is marked stale,
    /// refused rather than handed a new instance. Answers the keys adopted.
    fn adopt(&self, grants: BTreeMap<GrantKey, (String, Grant)>, source: Source) -> Vec<GrantKey> {
        let mut notes = Vec::new();
        let mut adopted = Vec::new();
        {
            let mut state = self.lock();
            for (key, (pod, grant)) in grants {
                let who = format!("pod {pod} container {}", key.container);
                let unnamed = grant.family == Family::Partitioned
                    && grant
                        .partition
                        .as_ref()
                        .is_none_or(|p| p.instance.is_none());
                if unnamed && state.ledger.grant(&key).is_none() {
                    let why = format!(
                        "{} records a partition but names no instance, and no ownership record does",
                        source.describe()
                    );
                    notes.push((true, format!("{who}: {why}; its next Allocate is refused")));
                    state.stale.entry(key).or_insert(why);
                    continue;
                }
                match state.ledger.grant(&key) {
                    Some(held) if same_grant(held, &grant) => {}
                    Some(held) => notes.push((
                        false,
                        format!(
                            "{who}: {} records {}, the ledger holds {} (from the journal); keeping the ledger's",
                            source.describe(),
                            describe(&grant),
                            describe(held)
                        ),
                    )),
                    None => match state.ledger.restore(key.clone(), grant.clone()) {
                        Ok(()) => {
                            adopted.push(key.clone());
                            let note = format!(
                                "{who}: restored {} from {} (the journal lacked it)",
                                describe(&grant),
                                source.describe()
                            );
                            if let Err(e) = state.journal.append(&Entry::Grant { key, grant }) {
                                tracing::error!("ledger journal: {e}");
                            }
                            notes.push((false, note));
                        }
                        Err(refusal) => notes.push((
                            true,
                            format!(
                                "{who}: {} records {}, which conflicts with the ledger: {refusal}; not restored",
                                source.describe(),
                                describe(&grant)
                            ),
                        )),
                    },
                }
            }
        }
        let changed = !notes.is_empty();
        for (error, note) in notes {
            if error {
                tracing::error!("ledger rebuild: {note}");
            } else {
                tracing::warn!("ledger rebuild: {note}");
            }
            self.note(note);
        }
        if changed {
            self.notify();
        }
        adopted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(accelerators: Vec<u32>, instance: Option<&str>) -> Grant {
        let mut grant = Grant {
            family: Family::Partitioned,
            resource: "nvidia.com/gpu.partitioned".into(),
            device_ids: vec!["GPU-f10582d0-a657-b746-3bed-366c6a014f07::5".into()],
            accelerators,
            units: 0,
            cores_percentage: None,
            finished: false,
            partition: None,
        };
        grant.partition = Some(accel_core::ledger::partitions::PartitionPlacement {
            profile: "3g.40gb".into(),
            start: 0,
            size: 4,
            instance: instance.map(|uuid| accel_core::ledger::partitions::PartitionInstance {
                gpu_instance: 1,
                compute_instance: 0,
                uuid: uuid.into(),
            }),
        });
        grant
    }

    /// Found on the rig's real kubelet: the kubelet handed a token of GPU 6, the partition was
    /// made on GPU 0, and every restart warned that the kubelet's record disagreed with the
    /// ledger, because the token was read as naming its GPU.
    #[test]
    fn a_partition_known_only_by_its_tokens_agrees_with_the_ledger_wherever_it_was_placed() {
        let ledger = partition(vec![0], Some("MIG-1"));
        let kubelet = partition(vec![6], None);
        assert!(same_grant(&kubelet, &ledger));
        assert!(same_grant(&ledger, &kubelet));
        // A source that names the instance is still compared on the GPU.
        assert!(!same_grant(&partition(vec![6], Some("MIG-1")), &ledger));
    }
}
