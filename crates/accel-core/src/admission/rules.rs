//! The validating half: rules 1–7 of seed 003, the memory budgets and the cores percentage, and
//! the pool facts a request needs (DESIGN.md, "The webhook's pool").
//!
//! This module owns which violations a Pod has and their exact messages; the seed's messages and
//! field paths are reproduced word for word where it quotes them, and the same form is used where
//! it does not. It never changes the Pod.

use std::collections::BTreeSet;

use crate::admission::field::{FieldError, Rule};
use crate::admission::pod::{Claim, ContainerView, Group, PodView};
use crate::manufacturer::Manufacturer;
use crate::pool::Pool;
use crate::quantity::{QuantityError, parse_count};
use crate::resources::{AcceleratorKey, Family, KeyGrammar, ResourceKey};
use crate::units::{MemoryBudget, fold};

/// Every violation of the Pod, container-level ones first (in container order), then the
/// Pod-wide rules.
pub fn validate(view: &PodView, pool: &Pool, grammar: &KeyGrammar) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for container in &view.containers {
        for manufacturer in manufacturers(container) {
            container_errors(container, manufacturer, pool, grammar, &mut errors);
        }
        for key in &container.unservable {
            let base = grammar.base(key.manufacturer);
            errors.push(FieldError::forbidden(
                format!("{}[{}]", container.section_path(key.section), key.name),
                format!(
                    "{} has no hardware partitioning, so no node can serve {}; request {base}, {base}.shared or {base}.sliced instead",
                    key.manufacturer, key.name
                ),
                Rule::Shape,
            ));
        }
    }
    errors.extend(missing_pool_facts(view, pool));
    errors.extend(pod_errors(view));
    errors
}

/// The manufacturers a container names through family keys, in order.
pub(crate) fn manufacturers(container: &ContainerView) -> BTreeSet<Manufacturer> {
    container
        .family_claims()
        .filter_map(|c| c.key.manufacturer())
        .collect()
}

/// The claim of `want` under `manufacturer` in a container.
pub(crate) fn find<'c>(
    container: &'c ContainerView,
    manufacturer: Manufacturer,
    want: &AcceleratorKey,
) -> Option<&'c Claim> {
    container.claims.iter().find(|c| {
        matches!(&c.key, ResourceKey::Accelerator { manufacturer: m, key } if *m == manufacturer && key == want)
    })
}

/// The profile claims under `manufacturer` in a container, with their profile names.
pub(crate) fn profiles(
    container: &ContainerView,
    manufacturer: Manufacturer,
) -> Vec<(&Claim, &str)> {
    container
        .claims
        .iter()
        .filter_map(|c| match &c.key {
            ResourceKey::Accelerator {
                manufacturer: m,
                key: AcceleratorKey::PartitionedProfile { profile, .. },
            } if *m == manufacturer => Some((c, profile.as_str())),
            _ => None,
        })
        .collect()
}

/// A whole percentage from 1 to 100, if the claim is one.
pub(crate) fn percentage(claim: &Claim) -> Option<u64> {
    parse_count(&claim.value)
        .ok()
        .filter(|p| (1..=100).contains(p))
}

fn count_error(container: &ContainerView, claim: &Claim, error: &QuantityError) -> FieldError {
    FieldError::invalid(
        container.claim_path(claim),
        &claim.value,
        error.to_string(),
        Rule::Quantity,
    )
}

/// A count key that must be exactly 1: the rule's own message for a whole number other than 1,
/// the quantity's message for anything that is not a whole number.
fn exactly_one(
    container: &ContainerView,
    claim: &Claim,
    detail: &str,
    rule: Rule,
    errors: &mut Vec<FieldError>,
) {
    match parse_count(&claim.value) {
        Ok(1) => {}
        Ok(_) => errors.push(FieldError::invalid(
            container.claim_path(claim),
            &claim.value,
            detail,
            rule,
        )),
        Err(e) => errors.push(count_error(container, claim, &e)),
    }
}

fn container_errors(
    container: &ContainerView,
    m: Manufacturer,
    pool: &Pool,
    grammar: &KeyGrammar,
    errors: &mut Vec<FieldError>,
) {
    let key = |k: AcceleratorKey| grammar.accelerator_key(m, k);
    for plain in [AcceleratorKey::Exclusive, AcceleratorKey::Shared] {
        if let Some(claim) = find(container, m, &plain)
            && let Err(e) = parse_count(&claim.value)
        {
            errors.push(count_error(container, claim, &e));
        }
    }

    // Logical slices (rule 2 and the budgets).
    let sliced = find(container, m, &AcceleratorKey::Sliced);
    let pct = find(container, m, &AcceleratorKey::SlicedMemoryPercentage);
    let mib = find(container, m, &AcceleratorKey::SlicedMemoryMib);
    let cores = find(container, m, &AcceleratorKey::SlicedCoresPercentage);
    let units = find(container, m, &AcceleratorKey::SlicedUnits);
    match sliced {
        None => {
            if let Some(orphan) = [pct, mib, cores, units].into_iter().flatten().next() {
                errors.push(FieldError::required(
                    container.section_path(orphan.section),
                    format!(
                        "a {} request must come with {}: \"1\"",
                        orphan.name,
                        key(AcceleratorKey::Sliced)
                    ),
                    Rule::Shape,
                ));
            }
        }
        Some(sliced) => {
            exactly_one(
                container,
                sliced,
                "a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet",
                Rule::SlicedIsOne,
                errors,
            );
            let pct_key = key(AcceleratorKey::SlicedMemoryPercentage);
            let mib_key = key(AcceleratorKey::SlicedMemoryMib);
            match (pct, mib) {
                (None, None) => errors.push(FieldError::required(
                    container.section_path(sliced.section),
                    format!("a {} request must set {pct_key} or {mib_key}", sliced.name),
                    Rule::SlicedIsOne,
                )),
                (Some(p), Some(_)) => errors.push(FieldError::forbidden(
                    container.section_path(p.section),
                    format!("cannot set both {pct_key} and {mib_key}"),
                    Rule::SlicedIsOne,
                )),
                (Some(p), None) => {
                    if percentage(p).is_none() {
                        errors.push(FieldError::invalid(
                            container.claim_path(p),
                            &p.value,
                            "must be a whole percentage of the accelerator's VRAM from 1 to 100",
                            Rule::Budget,
                        ));
                    }
                }
                (None, Some(b)) => match parse_count(&b.value) {
                    Ok(0) | Err(QuantityError::Negative) => errors.push(FieldError::invalid(
                        container.claim_path(b),
                        &b.value,
                        "must be a positive whole number of MiB",
                        Rule::Budget,
                    )),
                    Err(e) => errors.push(count_error(container, b, &e)),
                    Ok(budget) => {
                        if let Some(vram) = pool.memory_mib
                            && budget > vram
                        {
                            errors.push(FieldError::invalid(
                                container.claim_path(b),
                                &b.value,
                                format!("must be from 1 to the accelerator's VRAM of {vram} MiB"),
                                Rule::Budget,
                            ));
                        }
                    }
                },
            }
            if let Some(c) = cores
                && percentage(c).is_none()
            {
                errors.push(FieldError::invalid(
                    container.claim_path(c),
                    &c.value,
                    "must be a whole percentage of the accelerator's compute from 1 to 100",
                    Rule::Cores,
                ));
            }
        }
    }

    // Hardware partitions (rules 3 and 5; rule 4 is Pod-wide).
    let partitioned = find(container, m, &AcceleratorKey::Partitioned);
    let named = profiles(container, m);
    let part_units = find(container, m, &AcceleratorKey::PartitionedUnits);
    let part_key = key(AcceleratorKey::Partitioned);
    match partitioned {
        None => {
            if let Some(orphan) = named.iter().map(|(c, _)| *c).chain(part_units).next() {
                errors.push(FieldError::required(
                    container.section_path(orphan.section),
                    format!("a {} request must come with {part_key}: \"1\"", orphan.name),
                    Rule::Shape,
                ));
            }
        }
        Some(partitioned) => {
            exactly_one(
                container,
                partitioned,
                "a partition request is always a single accelerator; request one Pod per instance",
                Rule::PartitionedIsOne,
                errors,
            );
            if named.is_empty() {
                errors.push(FieldError::required(
                    container.section_path(partitioned.section),
                    format!(
                        "a {part_key} request must name a profile, e.g. {part_key}.<kind>-<profile>"
                    ),
                    Rule::PartitionedIsOne,
                ));
            }
        }
    }
    for (claim, profile) in &named {
        exactly_one(
            container,
            claim,
            "a partition profile request must be exactly 1 instance",
            Rule::ProfileIsOne,
            errors,
        );
        if let Some(offered) = &pool.profiles
            && !offered.contains_key(*profile)
        {
            errors.push(FieldError::not_supported(
                container.claim_path(claim),
                *profile,
                offered.keys().cloned().collect(),
                Rule::Shape,
            ));
        }
    }
}

/// The shared pin's N: the largest container's `.shared` count (seed 003, "Shared").
pub(crate) fn shared_pin(view: &PodView) -> Option<(u64, &ContainerView, &Claim)> {
    view.containers
        .iter()
        .flat_map(|c| {
            c.claims.iter().filter_map(move |claim| match &claim.key {
                ResourceKey::Accelerator {
                    key: AcceleratorKey::Shared,
                    ..
                } => parse_count(&claim.value).ok().map(|n| (n, c, claim)),
                _ => None,
            })
        })
        .max_by_key(|(n, _, _)| *n)
}

fn retry(reason: &str) -> String {
    format!("({reason}); a retry may succeed")
}

/// The facts about the pool a request needs and the cluster could not tell: the group for the
/// shared pin, the VRAM for a MiB budget, the profile's and the accelerator's VRAM for a
/// partition. A Pod that needs none of them is never refused for an unknown pool.
pub fn missing_pool_facts(view: &PodView, pool: &Pool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some((n, container, claim)) = shared_pin(view)
        && n >= 2
        && pool.group.is_none()
    {
        errors.push(FieldError::forbidden(
                container.claim_path(claim),
                format!(
                    "a request of {n} shared accelerators is pinned to nodes with at least {n} accelerators, but the queue's accelerator group could not be read {}",
                    retry(pool.reason())
                ),
                Rule::Pool,
            ));
    }
    for container in &view.containers {
        for m in manufacturers(container) {
            if let Some(b) = find(container, m, &AcceleratorKey::SlicedMemoryMib)
                && matches!(parse_count(&b.value), Ok(n) if n > 0)
                && pool.memory_mib.is_none()
            {
                errors.push(FieldError::forbidden(
                        container.claim_path(b),
                        format!("a MiB budget needs the pool's accelerator VRAM, which could not be read {}", retry(pool.reason())),
                        Rule::Pool,
                    ));
            }
            for (claim, profile) in profiles(container, m) {
                if pool.memory_mib.is_none() || pool.profiles.is_none() {
                    errors.push(FieldError::forbidden(
                        container.claim_path(claim),
                        format!(
                            "a partition needs the VRAM of profile {profile} and of the pool's accelerator, which could not be read {}",
                            retry(pool.reason())
                        ),
                        Rule::Pool,
                    ));
                } else if let (Some(vram), Some(profile_mib)) = (
                    pool.memory_mib,
                    pool.profiles.as_ref().and_then(|p| p.get(profile)),
                ) {
                    // Pool facts that cannot be folded (a profile larger than its accelerator, a
                    // VRAM of 0) are a reading gone wrong, not the request's fault.
                    if let Err(e) = fold(MemoryBudget::Profile(*profile_mib), Some(vram)) {
                        errors.push(FieldError::forbidden(
                            container.claim_path(claim),
                            format!(
                                "the pool's VRAM of profile {profile} cannot be folded into units: {e} {}",
                                retry("the pool's readings are inconsistent")
                            ),
                            Rule::Pool,
                        ));
                    }
                }
            }
        }
    }
    errors
}

/// Rules 7, 1, 4 and 6: what only the whole Pod shows.
fn pod_errors(view: &PodView) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for sidecar in view
        .containers
        .iter()
        .filter(|c| c.group == Group::NativeSidecar)
    {
        if let Some(claim) = sidecar.family_claims().next() {
            errors.push(FieldError::forbidden(
                sidecar.section_path(claim.section),
                "a restartable init container (a native sidecar) may not request an accelerator; move the request to an app container",
                Rule::NoSidecarClaim,
            ));
        }
    }

    let families: BTreeSet<Family> = view.containers.iter().flat_map(|c| c.families()).collect();
    if families.len() > 1 {
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        errors.push(FieldError::forbidden(
            "spec",
            format!(
                "a Pod may request only one accelerator family, found [{}]",
                names.join(" ")
            ),
            Rule::OneFamily,
        ));
    }
    let claims_in = |group: Group| {
        view.containers
            .iter()
            .any(|c| c.group == group && c.family_claims().next().is_some())
    };
    if claims_in(Group::Init) && claims_in(Group::Running) {
        errors.push(FieldError::forbidden(
            "spec.initContainers",
            "a Pod's accelerator requests must all sit in one container group; spec.initContainers must give up its request, because its devices are held for the Pod's whole life while the scheduler charges the Pod only once",
            Rule::OneFamily,
        ));
    }

    let named: BTreeSet<&str> = view
        .containers
        .iter()
        .flat_map(|c| {
            manufacturers(c)
                .into_iter()
                .flat_map(move |m| profiles(c, m).into_iter().map(|(_, p)| p))
        })
        .collect();
    if named.len() > 1 {
        let names: Vec<&str> = named.into_iter().collect();
        errors.push(FieldError::forbidden(
            "spec",
            format!(
                "a Pod may request only one partition profile, found [{}]",
                names.join(" ")
            ),
            Rule::OneProfile,
        ));
    }

    let slicing = view
        .containers
        .iter()
        .filter(|c| c.families().into_iter().any(Family::is_slicing))
        .count();
    if slicing > 1 {
        errors.push(FieldError::forbidden(
            "spec",
            format!("at most one container may request a slicing family, found {slicing}"),
            Rule::OneSlicingContainer,
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::pod::read;
    use serde_json::json;

    fn one_container(limits: serde_json::Value) -> PodView {
        let pod =
            json!({"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}});
        read(&pod, &KeyGrammar::default()).unwrap()
    }

    #[test]
    fn a_manufacturers_profiles_are_its_own() {
        let view = one_container(json!({
            "nvidia.com/gpu.partitioned": "1",
            "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
            "hygon.com/dcu.partitioned.mig-2g.15gb": "1"
        }));
        let names = |m| -> Vec<String> {
            profiles(&view.containers[0], m)
                .into_iter()
                .map(|(_, p)| p.to_string())
                .collect()
        };
        assert_eq!(names(Manufacturer::Nvidia), ["1g.10gb"]);
        assert_eq!(names(Manufacturer::Hygon), ["2g.15gb"]);
    }

    #[test]
    fn a_partition_needs_both_the_accelerators_and_the_profiles_vram() {
        let view = one_container(json!({
            "nvidia.com/gpu.partitioned": "1",
            "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"
        }));
        let pool = |facts: serde_json::Value| -> Pool { serde_json::from_value(facts).unwrap() };
        let known = pool(
            json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia",
            "memoryMiB": 81559, "count": 8, "profiles": {"1g.10gb": 9984}}),
        );
        assert!(missing_pool_facts(&view, &known).is_empty());
        for partial in [
            json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia", "memoryMiB": 81559, "count": 8}),
            json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia", "count": 8,
                "profiles": {"1g.10gb": 9984}}),
        ] {
            let errors = missing_pool_facts(&view, &pool(partial.clone()));
            assert_eq!(errors.len(), 1, "{partial}");
            assert!(
                errors[0]
                    .to_string()
                    .contains("a partition needs the VRAM of profile 1g.10gb"),
                "{}",
                errors[0]
            );
        }
    }
}
