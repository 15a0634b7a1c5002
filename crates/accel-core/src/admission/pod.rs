//! A read-only view of a Pod's accelerator claims, grouped by container lifetime (seed 003, "The
//! request rules"): the init group (init containers without `restartPolicy: Always`), the running
//! group (`spec.containers`) and native sidecars (init containers with `restartPolicy: Always`),
//! which belong to neither.
//!
//! This module owns reading the Pod JSON into that view and the field paths of what it read. It
//! reads only what the rules need, tolerates every field it does not read, and refuses a shape it
//! cannot read with a one-line error naming the field; it never panics on any JSON.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::manufacturer::Manufacturer;
use crate::pool::QUEUE_LABEL;
use crate::resources::{AcceleratorKey, Family, KeyGrammar, ResourceKey};

/// Why a Pod could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// The object is not a Pod at all.
    #[error("the object is a {0}, not a Pod")]
    NotAPod(String),
    /// A field the rules read has a shape no Pod has.
    #[error("{path}: {what}")]
    Malformed { path: String, what: String },
}

fn malformed(path: &str, what: &str) -> PodError {
    PodError::Malformed {
        path: path.to_string(),
        what: what.to_string(),
    }
}

/// A container's lifetime group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// `spec.initContainers` without `restartPolicy: Always`.
    Init,
    /// `spec.containers`.
    Running,
    /// `spec.initContainers` with `restartPolicy: Always`: neither group.
    NativeSidecar,
}

/// Where a claim was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Limits,
    Requests,
}

impl Section {
    pub fn name(self) -> &'static str {
        match self {
            Section::Limits => "limits",
            Section::Requests => "requests",
        }
    }
}

/// One recognised resource key in one container, with the quantity text it asks for. A key in
/// both limits and requests is read from limits, as the seed's paths name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub name: String,
    pub key: ResourceKey,
    pub value: String,
    pub section: Section,
}

/// A request for a family its manufacturer does not have: a `.partitioned*` name under the base of
/// a manufacturer with no hardware partitioning (`amd.com/gpu.partitioned`). It is no key of this
/// system, so no family rule counts it, but no node can ever serve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unservable {
    pub name: String,
    pub manufacturer: Manufacturer,
    pub section: Section,
}

/// One container's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub group: Group,
    /// `spec.containers` or `spec.initContainers`.
    pub field: &'static str,
    pub index: usize,
    pub claims: Vec<Claim>,
    /// Names that look like accelerator requests no node can serve (see [`Unservable`]).
    pub unservable: Vec<Unservable>,
}

impl ContainerView {
    /// `spec.containers[0].resources.limits`
    pub fn section_path(&self, section: Section) -> String {
        format!(
            "{}[{}].resources.{}",
            self.field,
            self.index,
            section.name()
        )
    }

    /// `spec.containers[0].resources.limits[nvidia.com/gpu.sliced]`
    pub fn claim_path(&self, claim: &Claim) -> String {
        format!("{}[{}]", self.section_path(claim.section), claim.name)
    }

    /// The claims of one accelerator family.
    pub fn family_claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.iter().filter(|c| c.key.family().is_some())
    }

    /// The families this container claims.
    pub fn families(&self) -> Vec<Family> {
        let mut families: Vec<Family> = self
            .family_claims()
            .filter_map(|c| c.key.family())
            .collect();
        families.sort();
        families.dedup();
        families
    }

    /// The claim of an exact accelerator key, if present.
    pub fn find(&self, want: impl Fn(&AcceleratorKey) -> bool) -> Option<&Claim> {
        self.claims
            .iter()
            .find(|c| matches!(&c.key, ResourceKey::Accelerator { key, .. } if want(key)))
    }
}

/// The claims of a whole Pod, containers in spec order (init containers first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub namespace: Option<String>,
    pub queue: Option<String>,
    pub containers: Vec<ContainerView>,
}

/// The queue a Pod is submitted on, if it carries the label.
pub fn queue_name(pod: &Value) -> Option<&str> {
    pod.get("metadata")?
        .get("labels")?
        .get(QUEUE_LABEL)?
        .as_str()
}

/// Read a Pod's claims.
pub fn read(pod: &Value, grammar: &KeyGrammar) -> Result<PodView, PodError> {
    let object = pod
        .as_object()
        .ok_or_else(|| malformed("<root>", "the object is not a JSON object"))?;
    if let Some(kind) = object.get("kind") {
        match kind.as_str() {
            Some("Pod") => {}
            Some(other) => return Err(PodError::NotAPod(other.to_string())),
            None => return Err(malformed("kind", "must be a string")),
        }
    }
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(malformed("metadata", "must be an object")),
    };
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let queue = queue_name(pod).map(str::to_string);
    let spec = match object.get("spec") {
        None | Some(Value::Null) => None,
        Some(Value::Object(s)) => Some(s),
        Some(_) => return Err(malformed("spec", "must be an object")),
    };
    let mut containers = Vec::new();
    for field in ["spec.initContainers", "spec.containers"] {
        let name = field.trim_start_matches("spec.");
        let list = match spec.and_then(|s| s.get(name)) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(list)) => list,
            Some(_) => return Err(malformed(field, "must be a list")),
        };
        for (index, container) in list.iter().enumerate() {
            let path = format!("{field}[{index}]");
            let container = container
                .as_object()
                .ok_or_else(|| malformed(&path, "must be an object"))?;
            let group = if field == "spec.containers" {
                Group::Running
            } else {
                match container.get("restartPolicy") {
                    Some(Value::String(p)) if p == "Always" => Group::NativeSidecar,
                    None | Some(Value::Null) | Some(Value::String(_)) => Group::Init,
                    Some(_) => {
                        return Err(malformed(
                            &format!("{path}.restartPolicy"),
                            "must be a string",
                        ));
                    }
                }
            };
            let (claims, unservable) = read_claims(container.get("resources"), &path, grammar)?;
            containers.push(ContainerView {
                group,
                field: if field == "spec.containers" {
                    "spec.containers"
                } else {
                    "spec.initContainers"
                },
                index,
                claims,
                unservable,
            });
        }
    }
    Ok(PodView {
        namespace,
        queue,
        containers,
    })
}

fn read_claims(
    resources: Option<&Value>,
    path: &str,
    grammar: &KeyGrammar,
) -> Result<(Vec<Claim>, Vec<Unservable>), PodError> {
    let resources = match resources {
        None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
        Some(Value::Object(r)) => r,
        Some(_) => return Err(malformed(&format!("{path}.resources"), "must be an object")),
    };
    let mut claims: BTreeMap<String, Claim> = BTreeMap::new();
    let mut unservable: BTreeMap<String, Unservable> = BTreeMap::new();
    for section in [Section::Limits, Section::Requests] {
        let section_path = format!("{path}.resources.{}", section.name());
        let map = match resources.get(section.name()) {
            None | Some(Value::Null) => continue,
            Some(Value::Object(m)) => m,
            Some(_) => return Err(malformed(&section_path, "must be an object")),
        };
        for (name, value) in map {
            let Some(key) = grammar.parse(name) else {
                if let Some(manufacturer) = grammar.unpartitioned_key(name) {
                    unservable.entry(name.clone()).or_insert(Unservable {
                        name: name.clone(),
                        manufacturer,
                        section,
                    });
                }
                continue;
            };
            let value = quantity_text(value).ok_or_else(|| {
                malformed(
                    &format!("{section_path}[{name}]"),
                    "a quantity must be a string or a number",
                )
            })?;
            claims.entry(name.clone()).or_insert(Claim {
                name: name.clone(),
                key,
                value,
                section,
            });
        }
    }
    Ok((
        claims.into_values().collect(),
        unservable.into_values().collect(),
    ))
}

/// The text of a quantity: the API server sends strings; YAML written by hand may carry numbers.
pub fn quantity_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_follow_lifetime_not_field() {
        let pod = json!({"kind": "Pod", "metadata": {"labels": {QUEUE_LABEL: "q"}}, "spec": {
            "initContainers": [
                {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "shipper", "restartPolicy": "Always", "resources": {"requests": {"nvidia.com/gpu": 1}}}
            ],
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}}]
        }});
        let view = read(&pod, &KeyGrammar::default()).unwrap();
        assert_eq!(view.queue.as_deref(), Some("q"));
        let groups: Vec<Group> = view.containers.iter().map(|c| c.group).collect();
        assert_eq!(
            groups,
            vec![Group::Init, Group::NativeSidecar, Group::Running]
        );
        assert_eq!(view.containers[1].claims[0].section, Section::Requests);
        assert_eq!(view.containers[1].claims[0].value, "1");
        assert_eq!(
            view.containers[2].claims.len(),
            1,
            "cpu is not a key, requests repeat limits"
        );
        assert_eq!(
            view.containers[2].claim_path(&view.containers[2].claims[0]),
            "spec.containers[0].resources.limits[nvidia.com/gpu]"
        );
    }

    #[test]
    fn only_restart_policy_always_makes_an_init_container_a_native_sidecar() {
        let pod = json!({"spec": {"initContainers": [
            {"name": "a", "restartPolicy": "Always"},
            {"name": "b", "restartPolicy": "OnFailure"},
            {"name": "c", "restartPolicy": "Never"},
            {"name": "d", "restartPolicy": null},
            {"name": "e"}
        ]}});
        let view = read(&pod, &KeyGrammar::default()).unwrap();
        let groups: Vec<Group> = view.containers.iter().map(|c| c.group).collect();
        assert_eq!(
            groups,
            [
                Group::NativeSidecar,
                Group::Init,
                Group::Init,
                Group::Init,
                Group::Init
            ]
        );
    }

    #[test]
    fn find_names_the_claim_of_the_key_asked_for() {
        let pod = json!({"spec": {"containers": [{"name": "main", "resources": {"limits": {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.memory-percentage": "50"
        }}}]}});
        let view = read(&pod, &KeyGrammar::default()).unwrap();
        let container = &view.containers[0];
        let sliced = container.find(|k| *k == AcceleratorKey::Sliced).unwrap();
        assert_eq!(sliced.name, "nvidia.com/gpu.sliced");
        assert_eq!(sliced.value, "1");
        let budget = container
            .find(|k| *k == AcceleratorKey::SlicedMemoryPercentage)
            .unwrap();
        assert_eq!(budget.value, "50");
        assert!(
            container
                .find(|k| *k == AcceleratorKey::Exclusive)
                .is_none()
        );
    }

    #[test]
    fn unreadable_shapes_name_the_field() {
        let g = KeyGrammar::default();
        let cases = [
            (json!([]), "<root>: the object is not a JSON object"),
            (
                json!({"kind": "Service"}),
                "the object is a Service, not a Pod",
            ),
            (
                json!({"spec": {"containers": {}}}),
                "spec.containers: must be a list",
            ),
            (
                json!({"spec": {"containers": [1]}}),
                "spec.containers[0]: must be an object",
            ),
            (
                json!({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": true}}}]}}),
                "spec.containers[0].resources.limits[nvidia.com/gpu]: a quantity must be a string or a number",
            ),
            (
                json!({"spec": {"initContainers": [{"restartPolicy": 3}]}}),
                "spec.initContainers[0].restartPolicy: must be a string",
            ),
        ];
        for (pod, message) in cases {
            assert_eq!(read(&pod, &g).unwrap_err().to_string(), message);
        }
        assert!(read(&json!({}), &g).unwrap().containers.is_empty());
    }
}
