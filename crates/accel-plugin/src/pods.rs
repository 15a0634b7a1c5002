//! The node's Pods as the plugin needs them: who asked for what, when, with which `env:`,
//! whether they are still alive, and the grants the cluster recorded on them (the
//! `accelerator.allocated` annotation). The API server sits behind [`PodSource`]: a watch of
//! this node's Pods (accel-kube's `NodePods`) and a direct read of one Pod
//! ([`PodSource::lookup`]) for a Pod the kubelet admits before the watch delivers it;
//! [`MemoryPods`] feeds tests directly. This module holds no accounting.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

pub use accel_backend::pod::{Container, Phase, Pod};

/// Why one Pod could not be read from the API server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The API server did not answer, or answered with an error.
    #[error("cannot read Pod {namespace}/{name} from the API server: {reason}")]
    Unavailable {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// A direct read of one Pod ([`PodSource::lookup`]): `Ok(None)` when no such Pod is bound to
/// this node.
pub type PodLookup<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Pod>, LookupError>> + Send + 'a>>;

/// Where the plugin learns the node's Pods.
pub trait PodSource: Send + Sync {
    /// Every Pod bound to this node, or `None` while the source has not synced (then nothing
    /// is released on its word).
    fn pods(&self) -> Option<Vec<Pod>>;
    /// The same Pods as shared handles, for Allocate's hot path. The default copies them;
    /// a source that keeps its Pods behind `Arc` hands them out without copying one.
    fn snapshot(&self) -> Option<Vec<Arc<Pod>>> {
        self.pods()
            .map(|pods| pods.into_iter().map(Arc::new).collect())
    }
    /// Ticks whenever the set changes.
    fn changes(&self) -> watch::Receiver<u64>;
    /// Reads one Pod of this node by namespace and name from the API server itself rather than
    /// the watch: the kubelet admits a Pod as soon as its own watch sees it, often before ours
    /// has delivered it. Called only when the kubelet names a Pod the watch lacks; the caller
    /// bounds the wait. The default answers from what the source holds (a source that cannot
    /// read the API server directly).
    fn lookup<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodLookup<'a> {
        let found = self.snapshot().and_then(|pods| {
            pods.iter()
                .find(|p| p.namespace == namespace && p.name == name)
                .map(|p| Pod::clone(p))
        });
        Box::pin(std::future::ready(Ok(found)))
    }
}

/// Pods by UID, each behind `Arc` so a snapshot copies no Pod.
type PodMap = BTreeMap<String, Arc<Pod>>;

/// A hand-fed Pod source: tests and the emulator play the API server with it.
#[derive(Debug, Clone)]
pub struct MemoryPods {
    pods: Arc<Mutex<Option<PodMap>>>,
    tick: Arc<watch::Sender<u64>>,
}

impl Default for MemoryPods {
    fn default() -> Self {
        MemoryPods::new()
    }
}

impl MemoryPods {
    /// A synced, empty source.
    pub fn new() -> MemoryPods {
        MemoryPods {
            pods: Arc::new(Mutex::new(Some(BTreeMap::new()))),
            tick: Arc::new(watch::channel(0).0),
        }
    }

    /// A source that has not synced: `pods()` answers `None`.
    pub fn unsynced() -> MemoryPods {
        MemoryPods {
            pods: Arc::new(Mutex::new(None)),
            tick: Arc::new(watch::channel(0).0),
        }
    }

    fn edit(&self, f: impl FnOnce(&mut PodMap)) {
        {
            let mut guard = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
            f(guard.get_or_insert_with(BTreeMap::new));
        }
        self.tick.send_modify(|n| *n += 1);
    }

    /// Adds or replaces a Pod.
    pub fn upsert(&self, pod: Pod) {
        self.edit(|pods| {
            pods.insert(pod.uid.clone(), Arc::new(pod));
        });
    }

    /// Sets a Pod's phase.
    pub fn set_phase(&self, uid: &str, phase: Phase) {
        self.edit(|pods| {
            if let Some(pod) = pods.get_mut(uid) {
                Arc::make_mut(pod).phase = phase;
            }
        });
    }

    /// Removes a Pod (it is gone from the API server).
    pub fn remove(&self, uid: &str) {
        self.edit(|pods| {
            pods.remove(uid);
        });
    }

    /// Ticks the change signal without changing a Pod (a view over this source, such as the
    /// emulator's lagging watch, changed what it shows).
    pub fn touch(&self) {
        self.tick.send_modify(|n| *n += 1);
    }

    /// The Pod named `namespace/name`, as the API server holds it now.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Pod> {
        let guard = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_ref().and_then(|pods| {
            pods.values()
                .find(|p| p.namespace == namespace && p.name == name)
                .map(|p| Pod::clone(p))
        })
    }
}

impl PodSource for MemoryPods {
    fn pods(&self) -> Option<Vec<Pod>> {
        let guard = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .as_ref()
            .map(|pods| pods.values().map(|p| Pod::clone(p)).collect())
    }

    fn snapshot(&self) -> Option<Vec<Arc<Pod>>> {
        let guard = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_ref().map(|pods| pods.values().cloned().collect())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.tick.subscribe()
    }

    /// Every Pod the source holds is the API server's: a direct read sees the same.
    fn lookup<'a>(&'a self, namespace: &'a str, name: &'a str) -> PodLookup<'a> {
        Box::pin(std::future::ready(Ok(self.get(namespace, name))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_numbers() {
        let count = |q: &str| {
            let c = Container {
                name: "main".into(),
                limits: BTreeMap::from([("r".to_string(), q.to_string())]),
                env: BTreeMap::new(),
            };
            c.count("r")
        };
        assert_eq!(count("2"), Some(2));
        assert_eq!(count("1000m"), Some(1));
        assert_eq!(count("1e3"), Some(1000));
        assert_eq!(count("1m"), None);
        assert_eq!(count("1.5"), None);
        assert_eq!(count("-1"), None);
        assert_eq!(count("x"), None);
    }
}
