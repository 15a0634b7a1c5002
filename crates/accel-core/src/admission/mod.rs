//! Admission of Pods: the verdict the worker's webhooks give and `device-manager admit` prints
//! (seed 003, "The request rules"; DESIGN.md's `admit` contract).
//!
//! This module owns the order of the two halves (mutate, then validate the mutated Pod) and the
//! scope (only Pods carrying `kueue.x-k8s.io/queue-name` are checked). It is pure: the pool and the
//! RuntimeClasses that exist are passed in, the Pod is JSON in and JSON out.

pub mod field;
pub mod mutate;
pub mod patch;
pub mod pod;
pub mod rules;
pub mod runtime_class;

use serde::Serialize;
use serde_json::Value;

use crate::pool::Pool;
use crate::resources::KeyGrammar;

pub use field::{FieldError, FieldErrorKind, Rule, aggregate};
pub use pod::{PodError, PodView, queue_name};
pub use runtime_class::RuntimeClasses;

/// Which half of the webhook to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `/mutate-pods`: units, the cores default, the shared pin, the RuntimeClass.
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
    /// What the API server passes on to the client without refusing the Pod (kubectl prints
    /// them): a RuntimeClass mutation could not choose. Absent from the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
            warnings: Vec::new(),
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
            warnings: Vec::new(),
            violations,
            checked: true,
        }
    }
}

/// The webhook's verdict on a Pod for `phase`, given what is known of its queue's pool and which
/// RuntimeClasses exist. A Pod without the queue label passes untouched; one that cannot be read
/// is an error.
pub fn admit(
    pod: &Value,
    pool: &Pool,
    runtime_classes: &RuntimeClasses,
    grammar: &KeyGrammar,
    phase: Phase,
) -> Result<Verdict, PodError> {
    let view = pod::read(pod, grammar)?;
    if view.queue.is_none() {
        return Ok(Verdict::pass(pod, false));
    }
    let (mutated, patch, warnings) = match phase {
        Phase::Validate => (pod.clone(), Vec::new(), Vec::new()),
        Phase::Mutate | Phase::Both => {
            match mutate::mutate(pod, &view, pool, runtime_classes, grammar) {
                Ok(mutation) => {
                    let patch = patch::diff(pod, &mutation.pod);
                    (mutation.pod, patch, mutation.warnings)
                }
                Err(violations) => return Ok(Verdict::deny(pod.clone(), Vec::new(), violations)),
            }
        }
    };
    if phase == Phase::Mutate {
        return Ok(Verdict {
            patch,
            pod: mutated,
            warnings,
            ..Verdict::pass(pod, true)
        });
    }
    let view = pod::read(&mutated, grammar)?;
    let violations = rules::validate(&view, pool, grammar);
    if violations.is_empty() {
        Ok(Verdict {
            patch,
            pod: mutated,
            warnings,
            ..Verdict::pass(pod, true)
        })
    } else {
        Ok(Verdict {
            warnings,
            ..Verdict::deny(mutated, patch, violations)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manufacturer::ManufacturerTable;
    use serde_json::json;

    const ILUVATAR_CLASS: &str = "iluvatar";

    fn queued(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a", "labels": {crate::pool::QUEUE_LABEL: "q"}},
            "spec": spec})
    }

    /// seed 000's sliced Iluvatar Pod, as a user writes it: no `runtimeClassName`.
    fn sliced_iluvatar() -> Value {
        queued(
            json!({"containers": [{"name": "main", "image": "corex", "resources": {"limits": {
            "iluvatar.com/gpu.sliced": "1", "iluvatar.com/gpu.sliced.memory-percentage": "50"}}}]}),
        )
    }

    fn class_ops(verdict: &Verdict) -> Vec<&Value> {
        verdict
            .patch
            .iter()
            .filter(|op| op["path"] == "/spec/runtimeClassName")
            .collect()
    }

    fn both(pod: &Value, classes: &RuntimeClasses) -> Verdict {
        admit(
            pod,
            &Pool::unknown("no pool in this test"),
            classes,
            &KeyGrammar::default(),
            Phase::Both,
        )
        .unwrap()
    }

    #[test]
    fn a_sliced_iluvatar_pod_is_given_its_runtime_class_when_it_exists_and_admitted() {
        let pod = sliced_iluvatar();
        let v = both(&pod, &RuntimeClasses::from_iter([ILUVATAR_CLASS, "nvidia"]));
        assert!(v.allowed, "{:?}", v.message);
        assert_eq!(
            class_ops(&v),
            [&json!({"op": "add", "path": "/spec/runtimeClassName", "value": "iluvatar"})]
        );
        assert_eq!(v.pod["spec"]["runtimeClassName"], "iluvatar");
        assert!(v.warnings.is_empty());
        assert_eq!(patch::apply(&pod, &v.patch), Some(v.pod.clone()));
        // Mutating the mutated Pod changes nothing.
        let again = both(&v.pod, &RuntimeClasses::from_iter([ILUVATAR_CLASS]));
        assert!(again.allowed && again.patch.is_empty(), "{:?}", again.patch);
    }

    #[test]
    fn without_the_runtime_class_the_pod_is_admitted_as_before() {
        let pod = sliced_iluvatar();
        for classes in [
            RuntimeClasses::none(),
            RuntimeClasses::from_iter(["nvidia", "iluvatar-legacy"]),
        ] {
            let v = both(&pod, &classes);
            assert!(v.allowed, "{:?}", v.message);
            assert!(class_ops(&v).is_empty(), "{:?}", v.patch);
            assert!(v.pod["spec"].get("runtimeClassName").is_none());
            assert!(v.warnings.is_empty());
        }
    }

    #[test]
    fn a_pod_naming_its_own_runtime_class_keeps_it() {
        let mut pod = sliced_iluvatar();
        pod["spec"]["runtimeClassName"] = json!("corex-debug");
        let v = both(
            &pod,
            &RuntimeClasses::from_iter([ILUVATAR_CLASS, "corex-debug"]),
        );
        assert!(v.allowed);
        assert!(class_ops(&v).is_empty(), "{:?}", v.patch);
        assert_eq!(v.pod["spec"]["runtimeClassName"], "corex-debug");
    }

    #[test]
    fn two_manufacturers_whose_classes_differ_get_none_a_warning_and_no_refusal() {
        let pod = queued(json!({"containers": [
            {"name": "main", "resources": {"limits": {"iluvatar.com/gpu": "1"}}},
            {"name": "aux", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]}));
        let v = both(&pod, &RuntimeClasses::from_iter(["iluvatar", "nvidia"]));
        assert!(v.allowed, "{:?}", v.message);
        assert!(v.patch.is_empty(), "{:?}", v.patch);
        assert_eq!(
            v.warnings,
            [
                "no runtimeClassName was attached: the Pod asks for accelerators of nvidia (RuntimeClass nvidia) and iluvatar (RuntimeClass iluvatar); set spec.runtimeClassName to the one its containers need"
            ]
        );
        // The JSON `admit` prints carries them only when there are some.
        let printed = serde_json::to_value(&v).unwrap();
        assert_eq!(printed["warnings"], json!(v.warnings));
        let quiet =
            serde_json::to_value(both(&sliced_iluvatar(), &RuntimeClasses::none())).unwrap();
        assert!(quiet.get("warnings").is_none(), "{quiet}");
    }

    #[test]
    fn every_manufacturer_with_a_runtime_name_is_given_it_through_admit() {
        let table = ManufacturerTable::default();
        let every: RuntimeClasses = table
            .rows()
            .filter_map(|(_, row)| row.runtime_class.clone())
            .collect();
        for (m, row) in table.rows() {
            let pod = queued(
                json!({"containers": [{"name": "main", "resources": {"limits": {
                row.resource_base.clone(): "1"}}}]}),
            );
            let v = both(&pod, &every);
            assert!(v.allowed, "{m}: {:?}", v.message);
            let expected: Vec<Value> = row
                .runtime_class
                .iter()
                .map(|class| json!({"op": "add", "path": "/spec/runtimeClassName", "value": class}))
                .collect();
            assert_eq!(v.patch, expected, "{m}");
        }
    }

    #[test]
    fn only_mutation_attaches_and_only_to_queued_pods() {
        let classes = RuntimeClasses::from_iter([ILUVATAR_CLASS]);
        let pool = Pool::unknown("no pool in this test");
        let g = KeyGrammar::default();
        let validated = admit(&sliced_iluvatar(), &pool, &classes, &g, Phase::Validate).unwrap();
        assert!(validated.allowed && validated.patch.is_empty());
        let mutated = admit(&sliced_iluvatar(), &pool, &classes, &g, Phase::Mutate).unwrap();
        assert_eq!(mutated.pod["spec"]["runtimeClassName"], "iluvatar");
        let mut unqueued = sliced_iluvatar();
        unqueued["metadata"]["labels"] = json!({});
        let v = admit(&unqueued, &pool, &classes, &g, Phase::Both).unwrap();
        assert!(!v.checked && v.patch.is_empty());
    }
}
