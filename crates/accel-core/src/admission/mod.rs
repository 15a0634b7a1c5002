//! Admission of Pods: the verdict the worker's webhooks give and `device-manager admit` prints
//! (seed 003, "The request rules"; DESIGN.md's `admit` contract).
//!
//! This module owns the order of the two halves (mutate, then validate the mutated Pod) and the
//! scope (only Pods carrying `kueue.x-k8s.io/queue-name` are checked). It is pure: the pool is
//! passed in, the Pod is JSON in and JSON out.

pub mod field;
pub mod mutate;
pub mod patch;
pub mod pod;
pub mod rules;

use serde::Serialize;
use serde_json::Value;

use crate::pool::Pool;
use crate::resources::KeyGrammar;

pub use field::{FieldError, FieldErrorKind, Rule, aggregate};
pub use pod::{PodError, PodView, queue_name};

/// Which half of the webhook to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `/mutate-pods`: units, the cores default, the shared pin.
    Mutate,
    /// `/validate-pods`: rules 1–7 and the budgets.
    Validate,
    /// What the API server does: mutate, then validate the mutated Pod.
    Both,
}

/// The verdict on one Pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub allowed: bool,
    /// The message the API server shows, exactly (`None` when allowed).
    pub message: Option<String>,
    /// RFC 6902 operations from the submitted Pod to `pod`.
    pub patch: Vec<Value>,
    /// The Pod after mutation.
    pub pod: Value,
    /// The violations behind `message`, for metrics.
    #[serde(skip)]
    pub violations: Vec<FieldError>,
    /// Whether the Pod was in scope (carried the queue label).
    #[serde(skip)]
    pub checked: bool,
}

impl Verdict {
    fn pass(pod: &Value, checked: bool) -> Verdict {
        Verdict {
            allowed: true,
            message: None,
            patch: Vec::new(),
            pod: pod.clone(),
            violations: Vec::new(),
            checked,
        }
    }

    fn deny(pod: Value, patch: Vec<Value>, violations: Vec<FieldError>) -> Verdict {
        Verdict {
            allowed: false,
            message: aggregate(&violations),
            patch,
            pod,
            violations,
            checked: true,
        }
    }
}

/// The webhook's verdict on a Pod for `phase`, given what is known of its queue's pool. A Pod
/// without the queue label passes untouched; one that cannot be read is an error.
pub fn admit(
    pod: &Value,
    pool: &Pool,
    grammar: &KeyGrammar,
    phase: Phase,
) -> Result<Verdict, PodError> {
    let view = pod::read(pod, grammar)?;
    if view.queue.is_none() {
        return Ok(Verdict::pass(pod, false));
    }
    let (mutated, patch) = match phase {
        Phase::Validate => (pod.clone(), Vec::new()),
        Phase::Mutate | Phase::Both => match mutate::mutate(pod, &view, pool, grammar) {
            Ok(mutated) => {
                let patch = patch::diff(pod, &mutated);
                (mutated, patch)
            }
            Err(violations) => return Ok(Verdict::deny(pod.clone(), Vec::new(), violations)),
        },
    };
    if phase == Phase::Mutate {
        return Ok(Verdict {
            patch,
            pod: mutated,
            ..Verdict::pass(pod, true)
        });
    }
    let view = pod::read(&mutated, grammar)?;
    let violations = rules::validate(&view, pool, grammar);
    if violations.is_empty() {
        Ok(Verdict {
            patch,
            pod: mutated,
            ..Verdict::pass(pod, true)
        })
    } else {
        Ok(Verdict::deny(mutated, patch, violations))
    }
}
