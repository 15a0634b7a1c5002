//! The one seam through which the webhook learns from the cluster: a queue's pool (DESIGN.md,
//! "The webhook's pool") and which RuntimeClasses exist (the manufacturer's is attached only when
//! it does). The kube-rs implementation (accel-kube) answers from watch caches, so a review never
//! waits on an API round trip; [`StaticPool`] answers the same pool for every queue and knows of
//! no RuntimeClass.

use accel_core::admission::RuntimeClasses;
use accel_core::pool::Pool;

/// What the cluster says about the pool behind a queue.
pub trait PoolSource: Send + Sync + 'static {
    /// The pool behind `namespace/queue`, as far as the caches know it. Never blocks: a fact the
    /// caches do not hold is absent, with [`Pool::unknown_reason`] saying why.
    fn pool(&self, namespace: &str, queue: &str) -> Pool;

    /// The RuntimeClasses that exist in the cluster, as far as the caches know. Never blocks; by
    /// default none is known, and the mutating webhook then attaches none (as before it could
    /// tell).
    fn runtime_classes(&self) -> RuntimeClasses {
        RuntimeClasses::none()
    }

    /// Whether the caches have completed their first listing.
    fn synced(&self) -> bool {
        true
    }

    /// What `/readyz` answers; by default ready once [`PoolSource::synced`].
    fn readiness(&self) -> Readiness {
        if self.synced() {
            Readiness::Ready(None)
        } else {
            Readiness::NotReady("the pool caches have not synced yet".to_string())
        }
    }
}

/// Whether the webhook should receive reviews, and why (the `/readyz` body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Ready; the note, when there is one, says what works less well (e.g. Kueue is missing).
    Ready(Option<String>),
    /// Not ready, and why.
    NotReady(String),
}

/// The same pool for every queue: `admit --pool`, tests and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct StaticPool(pub Pool);

impl PoolSource for StaticPool {
    fn pool(&self, _namespace: &str, _queue: &str) -> Pool {
        self.0.clone()
    }
}
