//! The AdmissionReview v1 envelope: reading a review from the wire and writing the response.
//!
//! This module owns what counts as a review and how a verdict travels back (`allowed`,
//! `status.message`, a base64 JSON Patch, `warnings`). It is pure: bytes and what the caches know
//! in, bytes out, every unreadable input an error naming what was wrong. It never panics on any
//! input.

use accel_core::admission::{self, Phase, Rule, RuntimeClasses};
use accel_core::resources::KeyGrammar;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::metrics::Outcome;
use crate::pool::PoolSource;

/// The only review version this webhook speaks.
pub const API_VERSION: &str = "admission.k8s.io/v1";

/// Why a body is not a review this webhook can answer (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The body is not UTF-8 text.
    #[error("the body is not UTF-8 text (invalid byte at offset {0})")]
    NotUtf8(usize),
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The JSON is not an AdmissionReview.
    #[error("the body is not an AdmissionReview: {0}")]
    NotAReview(String),
    /// An AdmissionReview of another version.
    #[error(
        "unsupported AdmissionReview version {0:?}: this webhook serves admission.k8s.io/v1 only (set admissionReviewVersions: [v1])"
    )]
    Version(String),
    /// A review without a request.
    #[error("the AdmissionReview has no request")]
    NoRequest,
    /// A request without a uid to answer to.
    #[error("the AdmissionReview request has no uid")]
    NoUid,
}

/// The answer to one review.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The AdmissionReview response body.
    pub body: Value,
    pub outcome: Outcome,
    /// The rules the Pod broke, for metrics.
    pub rules: Vec<Rule>,
}

/// Answer one AdmissionReview body for `phase` (`Mutate` or `Validate`).
pub fn answer(
    body: &[u8],
    phase: Phase,
    pools: &dyn PoolSource,
    grammar: &KeyGrammar,
) -> Result<Answer, ReviewError> {
    let text = std::str::from_utf8(body).map_err(|e| ReviewError::NotUtf8(e.valid_up_to()))?;
    let review: Value =
        serde_json::from_str(text).map_err(|e| ReviewError::NotJson(e.to_string()))?;
    let object = review
        .as_object()
        .ok_or_else(|| ReviewError::NotAReview("the JSON is not an object".into()))?;
    match object.get("kind").and_then(Value::as_str) {
        Some("AdmissionReview") => {}
        Some(other) => return Err(ReviewError::NotAReview(format!("kind is {other:?}"))),
        None => return Err(ReviewError::NotAReview("kind is missing".into())),
    }
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => return Err(ReviewError::Version(other.to_string())),
        None => return Err(ReviewError::Version(String::new())),
    }
    let request = match object.get("request") {
        Some(Value::Object(r)) => r,
        _ => return Err(ReviewError::NoRequest),
    };
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .ok_or(ReviewError::NoUid)?;

    let is_pod = request
        .get("kind")
        .map(|k| {
            k.get("kind").and_then(Value::as_str) == Some("Pod")
                && k.get("group")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
        })
        .unwrap_or(false);
    let operation = request
        .get("operation")
        .and_then(Value::as_str)
        .unwrap_or("CREATE");
    let pod = request.get("object");
    let (Some(pod), true, "CREATE") = (pod, is_pod, operation) else {
        return Ok(Answer {
            body: response(uid, true, None, &[]),
            outcome: Outcome::Skipped,
            rules: Vec::new(),
        });
    };
    let Some(queue) = admission::queue_name(pod) else {
        return Ok(Answer {
            body: response(uid, true, None, &[]),
            outcome: Outcome::Skipped,
            rules: Vec::new(),
        });
    };
    let namespace = request
        .get("namespace")
        .and_then(Value::as_str)
        .or_else(|| pod.pointer("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or("default");
    let pool = pools.pool(namespace, queue);
    let runtime_classes = match phase {
        // Only mutation attaches a RuntimeClass.
        Phase::Validate => RuntimeClasses::none(),
        Phase::Mutate | Phase::Both => pools.runtime_classes(),
    };
    match admission::admit(pod, &pool, &runtime_classes, grammar, phase) {
        Ok(verdict) => {
            let rules: Vec<Rule> = verdict.violations.iter().map(|v| v.rule).collect();
            let outcome = if verdict.allowed {
                Outcome::Allowed
            } else {
                Outcome::Denied
            };
            let patch = if verdict.allowed {
                verdict.patch.as_slice()
            } else {
                &[]
            };
            let mut body = response(uid, verdict.allowed, verdict.message.as_deref(), patch);
            if !verdict.warnings.is_empty() {
                body["response"]["warnings"] = json!(verdict.warnings);
            }
            Ok(Answer {
                body,
                outcome,
                rules,
            })
        }
        // A Pod of a shape no Pod has: refused, with the field named.
        Err(e) => Ok(Answer {
            body: response(uid, false, Some(&e.to_string()), &[]),
            outcome: Outcome::Denied,
            rules: vec![Rule::Shape],
        }),
    }
}

/// An AdmissionReview v1 response.
pub fn response(uid: &str, allowed: bool, message: Option<&str>, patch: &[Value]) -> Value {
    let mut response = json!({"uid": uid, "allowed": allowed});
    if let Some(message) = message {
        response["status"] = json!({"code": 403, "reason": "Forbidden", "message": message});
    }
    if !patch.is_empty() {
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::StaticPool;
    use proptest::prelude::*;

    fn review(object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
            "namespace": "team-a", "object": object}}))
        .unwrap()
    }

    fn run(body: &[u8], phase: Phase) -> Result<Answer, ReviewError> {
        answer(body, phase, &StaticPool::default(), &KeyGrammar::default())
    }

    #[test]
    fn bad_bodies_are_named() {
        assert_eq!(
            run(b"\xff\xfe", Phase::Validate),
            Err(ReviewError::NotUtf8(0))
        );
        assert!(matches!(
            run(b"not json", Phase::Validate),
            Err(ReviewError::NotJson(_))
        ));
        assert!(matches!(
            run(b"[1]", Phase::Validate),
            Err(ReviewError::NotAReview(_))
        ));
        assert!(matches!(
            run(br#"{"kind":"Pod"}"#, Phase::Validate),
            Err(ReviewError::NotAReview(_))
        ));
        assert_eq!(
            run(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{}}"#, Phase::Validate),
            Err(ReviewError::Version("admission.k8s.io/v1beta1".into()))
        );
        assert_eq!(
            run(
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#,
                Phase::Validate
            ),
            Err(ReviewError::NoRequest)
        );
        assert_eq!(
            run(
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}"#,
                Phase::Validate
            ),
            Err(ReviewError::NoUid)
        );
    }

    #[test]
    fn objects_out_of_scope_pass_untouched() {
        let body = serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": {
            "uid": "u-2", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "object": {"kind": "Deployment"}}}))
        .unwrap();
        let a = run(&body, Phase::Validate).unwrap();
        assert_eq!(a.outcome, Outcome::Skipped);
        assert_eq!(a.body["response"], json!({"uid": "u-2", "allowed": true}));
        let unlabelled = run(&review(json!({"kind": "Pod", "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu.sliced": "2"}}}]}})), Phase::Validate).unwrap();
        assert_eq!(unlabelled.outcome, Outcome::Skipped);
    }

    #[test]
    fn a_denial_carries_the_exact_message_and_a_mutation_its_patch() {
        let pod = json!({"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": {"containers": [
            {"resources": {"limits": {"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "50"}}}]}});
        let a = run(&review(pod.clone()), Phase::Validate).unwrap();
        assert_eq!(a.outcome, Outcome::Denied);
        assert_eq!(a.rules, vec![Rule::SlicedIsOne]);
        assert_eq!(
            a.body["response"]["status"]["message"],
            "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet"
        );
        let m = run(&review(pod), Phase::Mutate).unwrap();
        assert_eq!(m.outcome, Outcome::Allowed);
        assert_eq!(m.body["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(m.body["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: Vec<Value> = serde_json::from_slice(&patch).unwrap();
        assert!(
            patch.iter().any(|op| op["path"]
                == "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units")
        );
    }

    #[test]
    fn an_unreadable_pod_is_refused_naming_the_field() {
        let pod = json!({"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": {"containers": "x"}});
        let a = run(&review(pod), Phase::Validate).unwrap();
        assert_eq!(a.body["response"]["allowed"], false);
        assert_eq!(
            a.body["response"]["status"]["message"],
            "spec.containers: must be a list"
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = run(&body, Phase::Mutate);
        }

        #[test]
        fn never_panics_on_review_shaped_json(limits in prop::collection::btree_map(
            "(nvidia\\.com/gpu(\\.shared|\\.sliced(\\.memory-percentage|\\.memory-mib|\\.cores-percentage|\\.units)?|\\.partitioned(\\.mig-1g\\.10gb|\\.units)?)?|cpu)",
            "[-+0-9.eEmKi]{0,8}", 0..6)) {
            let pod = json!({"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": {"containers": [{"resources": {"limits": limits}}]}});
            let _ = run(&review(pod.clone()), Phase::Mutate);
            let _ = run(&review(pod), Phase::Validate);
        }
    }
}
