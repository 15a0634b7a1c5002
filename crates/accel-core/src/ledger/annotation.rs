//! The durable Pod annotation `device.gpustack.ai/accelerator.allocated`: the cluster-side copy
//! of a Pod's grants (DESIGN.md, "Restart"). Its value is a JSON object keyed by container name,
//! each entry the container's [`Grant`] exactly as the node-local journal stores it, so two
//! containers of one Pod each holding a claim are both recorded.
//!
//! This module owns the shape only: rendering a Pod's grants and reading an annotation back.
//! An annotation of an unreadable shape is an error naming what was wrong, never guessed at;
//! who publishes it (accel-kube) and who rebuilds from it (accel-plugin) live elsewhere.

use std::collections::BTreeMap;

use super::{Grant, GrantKey};

/// The annotation's key on the Pod.
pub const ALLOCATED_ANNOTATION: &str = "device.gpustack.ai/accelerator.allocated";

/// One Pod's grants, by container name.
pub type Allocated = BTreeMap<String, Grant>;

/// An annotation value that is not a map of container name to grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {ALLOCATED_ANNOTATION}: {reason}")]
pub struct AnnotationError {
    pub reason: String,
}

/// The grants `grants` holds for the Pod `pod_uid`, by container name.
pub fn for_pod<'a>(
    pod_uid: &str,
    grants: impl IntoIterator<Item = (&'a GrantKey, &'a Grant)>,
) -> Allocated {
    grants
        .into_iter()
        .filter(|(key, _)| key.pod_uid == pod_uid)
        .map(|(key, grant)| (key.container.clone(), grant.clone()))
        .collect()
}

/// The annotation's value for `allocated` (keys sorted, so equal grants render equal text and a
/// publisher can compare before writing).
pub fn render(allocated: &Allocated) -> String {
    // A map of plain serde structs with string keys always encodes; the fallback keeps the
    // production path free of panics all the same.
    serde_json::to_string(allocated).unwrap_or_else(|_| String::from("{}"))
}

/// Reads an annotation value back.
pub fn parse(value: &str) -> Result<Allocated, AnnotationError> {
    serde_json::from_str(value).map_err(|e| AnnotationError {
        reason: format!("not a map of container name to grant: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Family;

    fn grant(accelerators: Vec<u32>) -> Grant {
        Grant {
            family: Family::Sliced,
            resource: "nvidia.com/gpu.sliced".into(),
            device_ids: vec!["sliced-0-3".into()],
            accelerators,
            units: 400_000,
            cores_percentage: Some(50),
            partition: None,
            finished: false,
        }
    }

    #[test]
    fn renders_one_pods_grants_by_container_and_reads_them_back() {
        let mut all = BTreeMap::new();
        all.insert(GrantKey::new("pod-a", "main"), grant(vec![0]));
        all.insert(GrantKey::new("pod-a", "worker"), grant(vec![1]));
        all.insert(GrantKey::new("pod-b", "main"), grant(vec![2]));
        let allocated = for_pod("pod-a", &all);
        assert_eq!(
            allocated.keys().map(String::as_str).collect::<Vec<_>>(),
            ["main", "worker"]
        );
        let text = render(&allocated);
        assert!(text.starts_with(r#"{"main":{"family":"sliced""#), "{text}");
        assert_eq!(parse(&text).unwrap(), allocated);
    }

    #[test]
    fn an_unreadable_annotation_is_an_error_naming_the_key() {
        for bad in ["", "[]", r#"{"main":{"family":"nope"}}"#, r#"{"main":3}"#] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("annotation device.gpustack.ai/accelerator.allocated: "),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
