//! The mutating half: `.units` folded from the memory budget or the profile's VRAM into requests
//! and limits (overwriting any client value), `.sliced.cores-percentage` written explicitly (100
//! when omitted), the shared pin (seed 003, "Shared"; DESIGN.md, "Resource keys and units"), and
//! the manufacturer's RuntimeClass where it exists ([`runtime_class`]).
//!
//! This module owns what the webhook adds to a Pod. It refuses a Pod only when the pool cannot
//! tell it what it needs (the pin's group, a VRAM); a request that breaks a rule is left as it is
//! for the validating half to refuse. Mutating a mutated Pod changes nothing.

use serde_json::{Map, Value};

use crate::admission::field::{FieldError, Rule};
use crate::admission::pod::{ContainerView, PodView};
use crate::admission::rules::{
    find, manufacturers, missing_pool_facts, percentage, profiles, shared_pin,
};
use crate::admission::runtime_class::{self, Attachment, RuntimeClasses};
use crate::pool::Pool;
use crate::quantity::parse_count;
use crate::resources::{AcceleratorKey, KeyGrammar};
use crate::units::{DEFAULT_CORES_PERCENTAGE, MemoryBudget, fold};

/// What mutation made of a Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// The Pod after mutation.
    pub pod: Value,
    /// What the client is told without the Pod being refused (a RuntimeClass not attached).
    pub warnings: Vec<String>,
}

/// The Pod after mutation, or the violations that stopped it. `runtime_classes` are the
/// RuntimeClasses that exist in the cluster.
pub fn mutate(
    pod: &Value,
    view: &PodView,
    pool: &Pool,
    runtime_classes: &RuntimeClasses,
    grammar: &KeyGrammar,
) -> Result<Mutation, Vec<FieldError>> {
    let missing = missing_pool_facts(view, pool);
    if !missing.is_empty() {
        return Err(missing);
    }
    let mut out = pod.clone();
    for container in &view.containers {
        for (key, value) in writes(container, pool, grammar) {
            set_resource(&mut out, container, &key, &value);
        }
    }
    if let Some((n, _, claim)) = shared_pin(view)
        && n >= 2
    {
        // missing_pool_facts has refused an unknown group already.
        if let Some(group) = &pool.group {
            pin(&mut out, &Pool::count_label(group), n - 1).map_err(|what| {
                vec![FieldError::forbidden(
                    "spec.affinity",
                    format!("cannot pin the {} request of {n}: {what}", claim.name),
                    Rule::Shape,
                )]
            })?;
        }
    }
    let mut warnings = Vec::new();
    let attachment = runtime_class::attachment(pod, view, runtime_classes, grammar);
    match &attachment {
        Attachment::Attach(class) => runtime_class::attach(&mut out, class),
        Attachment::Nothing | Attachment::Ambiguous(_) => {}
    }
    warnings.extend(attachment.warning());
    Ok(Mutation { pod: out, warnings })
}

/// The keys a container gets written, with their values.
fn writes(container: &ContainerView, pool: &Pool, grammar: &KeyGrammar) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in manufacturers(container) {
        if find(container, m, &AcceleratorKey::Sliced).is_some() {
            let pct = find(container, m, &AcceleratorKey::SlicedMemoryPercentage);
            let mib = find(container, m, &AcceleratorKey::SlicedMemoryMib);
            let budget = match (pct, mib) {
                (Some(p), None) => percentage(p).map(MemoryBudget::Percentage),
                (None, Some(b)) => parse_count(&b.value).ok().map(MemoryBudget::Mib),
                _ => None,
            };
            if let Some(units) = budget.and_then(|b| fold(b, pool.memory_mib).ok()) {
                out.push((
                    grammar.accelerator_key(m, AcceleratorKey::SlicedUnits),
                    units.to_string(),
                ));
            }
            let cores = match find(container, m, &AcceleratorKey::SlicedCoresPercentage) {
                None => Some(DEFAULT_CORES_PERCENTAGE),
                Some(c) => percentage(c),
            };
            if let Some(cores) = cores {
                out.push((
                    grammar.accelerator_key(m, AcceleratorKey::SlicedCoresPercentage),
                    cores.to_string(),
                ));
            }
        }
        let named = profiles(container, m);
        if let (Some(_), [(_, profile)]) = (
            find(container, m, &AcceleratorKey::Partitioned),
            named.as_slice(),
        ) {
            let profile_mib = pool
                .profiles
                .as_ref()
                .and_then(|p| p.get(*profile))
                .copied();
            if let Some(units) =
                profile_mib.and_then(|p| fold(MemoryBudget::Profile(p), pool.memory_mib).ok())
            {
                out.push((
                    grammar.accelerator_key(m, AcceleratorKey::PartitionedUnits),
                    units.to_string(),
                ));
            }
        }
    }
    out
}

/// The object at `key` in `map`, created (or replacing a null) when absent.
fn object_at<'v>(map: &'v mut Map<String, Value>, key: &str) -> Option<&'v mut Map<String, Value>> {
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// Write `key: value` into a container's limits and requests. The container's shape was read
/// already, so every step exists or is absent; a step of another type is left alone.
fn set_resource(pod: &mut Value, container: &ContainerView, key: &str, value: &str) {
    let field = container.field.trim_start_matches("spec.");
    let Some(target) = pod
        .get_mut("spec")
        .and_then(|s| s.get_mut(field))
        .and_then(|list| list.get_mut(container.index))
        .and_then(Value::as_object_mut)
        .and_then(|c| object_at(c, "resources"))
    else {
        return;
    };
    for section in ["limits", "requests"] {
        if let Some(map) = object_at(target, section) {
            map.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

/// Add `label Gt floor` to every required node-affinity term, creating the required term when
/// there is none; an expression of ours already there is updated in place.
fn pin(pod: &mut Value, label: &str, floor: u64) -> Result<(), String> {
    let expression =
        serde_json::json!({"key": label, "operator": "Gt", "values": [floor.to_string()]});
    let spec = pod
        .as_object_mut()
        .and_then(|p| object_at(p, "spec"))
        .ok_or("spec is not an object")?;
    let required = object_at(spec, "affinity")
        .and_then(|a| object_at(a, "nodeAffinity"))
        .and_then(|n| object_at(n, "requiredDuringSchedulingIgnoredDuringExecution"))
        .ok_or("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution is not an object")?;
    let terms = required
        .entry("nodeSelectorTerms")
        .or_insert_with(|| Value::Array(Vec::new()));
    if terms.is_null() {
        *terms = Value::Array(Vec::new());
    }
    let terms = terms
        .as_array_mut()
        .ok_or("nodeSelectorTerms is not a list")?;
    if terms.is_empty() {
        terms.push(serde_json::json!({"matchExpressions": []}));
    }
    for term in terms.iter_mut() {
        let term = term
            .as_object_mut()
            .ok_or("a node selector term is not an object")?;
        let expressions = term
            .entry("matchExpressions")
            .or_insert_with(|| Value::Array(Vec::new()));
        if expressions.is_null() {
            *expressions = Value::Array(Vec::new());
        }
        let expressions = expressions
            .as_array_mut()
            .ok_or("matchExpressions is not a list")?;
        let ours = expressions.iter_mut().find(|e| {
            e.get("key").and_then(Value::as_str) == Some(label)
                && e.get("operator").and_then(Value::as_str) == Some("Gt")
        });
        match ours {
            Some(existing) => *existing = expression.clone(),
            None => expressions.push(expression.clone()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const COUNT: &str = "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count";

    #[test]
    fn the_pin_rewrites_only_its_own_expression() {
        // Ours is the count label with `Gt`. The user's expressions on that label with another
        // operator, or with `Gt` on another label, are theirs and stay as written.
        let mut pod = json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": COUNT, "operator": "Exists"},
                    {"key": "example.com/rack", "operator": "Gt", "values": ["4"]},
                    {"key": COUNT, "operator": "Gt", "values": ["0"]}
                ]}
            ]}
        }}}});
        pin(&mut pod, COUNT, 2).unwrap();
        assert_eq!(
            pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"],
            json!([
                {"key": COUNT, "operator": "Exists"},
                {"key": "example.com/rack", "operator": "Gt", "values": ["4"]},
                {"key": COUNT, "operator": "Gt", "values": ["2"]}
            ])
        );
    }
}
