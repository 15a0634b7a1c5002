//! The `gpustack-cpu-info` NodeFeatureRule as the worker applies it, rendered as YAML for review
//! (an insta snapshot: a change to the rule shows in the diff).

#[test]
fn the_cpu_info_rule() {
    insta::assert_yaml_snapshot!(accel_kube::nfr::cpu_info_rule());
}

// --- The rule's outcome under NFD's documented merge order -------------------------------------
//
// nfd-master builds a node's labels from its NodeFeature objects, then evaluates the
// NodeFeatureRules in order over the merged features (the objects' raw features with the
// node's own, e.g. `pci.device`), and a rule's labels overwrite what the objects asked for.
// `nfd_labels` models exactly that much of NFD for the rule we write: instance and attribute
// feature sets, `rule.matched`, `matchFeatures` (all terms) and `matchAny` (any element), the
// operators In, InRegexp (an anchored alternation), IsTrue, Exists and DoesNotExist.

use std::collections::BTreeMap;

use accel_core::manufacturer::ManufacturerTable;
use accel_kube::crd::{NodeFeatureFeatures, NodeFeatureSpec};
use serde_json::Value;

/// A PCI function as NFD's `pci.device` feature lists it.
struct Pci {
    vendor: &'static str,
    class: &'static str,
}

fn expression_holds(op: &str, values: &[String], value: Option<&str>) -> bool {
    match op {
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "IsTrue" => value == Some("true"),
        "InRegexp" => value.is_some_and(|v| {
            values.iter().any(|pattern| {
                let body = pattern
                    .trim_start_matches('^')
                    .trim_start_matches('(')
                    .trim_end_matches(')');
                body.split('|').any(|prefix| v.starts_with(prefix))
            })
        }),
        other => panic!("operator {other} is not modelled"),
    }
}

fn expressions_hold(expressions: &Value, element: &dyn Fn(&str) -> Option<String>) -> bool {
    expressions
        .as_object()
        .expect("matchExpressions is a map")
        .iter()
        .all(|(key, expression)| {
            let values: Vec<String> = expression["value"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let op = expression["op"].as_str().expect("an op");
            expression_holds(op, &values, element(key).as_deref())
        })
}

struct Features<'a> {
    pci: &'a [Pci],
    attributes: BTreeMap<String, BTreeMap<String, String>>,
    matched: BTreeMap<String, String>,
}

fn term_matches(term: &Value, features: &Features<'_>) -> bool {
    let expressions = &term["matchExpressions"];
    match term["feature"].as_str().expect("a feature name") {
        "pci.device" => features.pci.iter().any(|device| {
            expressions_hold(expressions, &|key| match key {
                "vendor" => Some(device.vendor.to_string()),
                "class" => Some(device.class.to_string()),
                _ => None,
            })
        }),
        "rule.matched" => expressions_hold(expressions, &|key| features.matched.get(key).cloned()),
        "cpu.model" => true,
        name => match features.attributes.get(name) {
            Some(elements) => expressions_hold(expressions, &|key| elements.get(key).cloned()),
            None => false,
        },
    }
}

fn all_terms(terms: &Value, features: &Features<'_>) -> bool {
    terms
        .as_array()
        .is_none_or(|terms| terms.iter().all(|t| term_matches(t, features)))
}

/// The node's labels as NFD would set them from its NodeFeature objects and the rule.
fn nfd_labels(rule: &Value, pci: &[Pci], objects: &[NodeFeatureSpec]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut features = Features {
        pci,
        attributes: BTreeMap::new(),
        matched: BTreeMap::new(),
    };
    for object in objects {
        let object = serde_json::to_value(object).expect("a NodeFeature spec");
        for (k, v) in object["labels"].as_object().into_iter().flatten() {
            labels.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
        for (name, set) in object["features"]["attributes"]
            .as_object()
            .into_iter()
            .flatten()
        {
            let elements = features.attributes.entry(name.clone()).or_default();
            for (k, v) in set["elements"].as_object().into_iter().flatten() {
                elements.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
    }
    let mut from_rules = BTreeMap::new();
    for rule in rule["spec"]["rules"].as_array().expect("rules") {
        let any = rule["matchAny"].as_array().is_none_or(|any| {
            any.iter()
                .any(|a| all_terms(&a["matchFeatures"], &features))
        });
        if !(all_terms(&rule["matchFeatures"], &features) && any) {
            continue;
        }
        for (k, v) in rule["labels"].as_object().into_iter().flatten() {
            let v = v.as_str().unwrap_or_default().to_string();
            from_rules.insert(k.clone(), v.clone());
            features.matched.insert(k.clone(), v);
        }
        for (k, v) in rule["vars"].as_object().into_iter().flatten() {
            features
                .matched
                .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    // Rule labels are applied over the objects' labels.
    labels.extend(from_rules);
    labels
}

const ACCELERATABLE: &str = "feature.gpustack.ai/acceleratable";

/// What the daemon publishes for a node where it found accelerators.
fn daemon_found_accelerators() -> NodeFeatureSpec {
    let labels = BTreeMap::from([(ACCELERATABLE.to_string(), "true".to_string())]);
    NodeFeatureSpec {
        features: NodeFeatureFeatures::from_labels(&labels),
        labels,
    }
}

#[test]
fn a_node_with_a_known_card_is_acceleratable() {
    let rule = accel_kube::nfr::cpu_info_rule();
    let gpu = [Pci {
        vendor: "10de",
        class: "0302",
    }];
    assert_eq!(nfd_labels(&rule, &gpu, &[]).get(ACCELERATABLE), None);
    assert_eq!(
        nfd_labels(&rule, &gpu, &[daemon_found_accelerators()])[ACCELERATABLE],
        "true"
    );
}

#[test]
fn a_cpu_node_is_marked_not_acceleratable() {
    let rule = accel_kube::nfr::cpu_info_rule();
    let nic = [Pci {
        vendor: "8086",
        class: "0200",
    }];
    assert_eq!(nfd_labels(&rule, &nic, &[])[ACCELERATABLE], "false");
}

#[test]
fn the_daemons_true_wins_over_the_marker_on_a_card_nfd_missed() {
    let rule = accel_kube::nfr::cpu_info_rule();
    // NFD's scan shows no known vendor (the card's class is not in NFD's whitelist, or the
    // vendor id is one the rule does not know), while the daemon found accelerators.
    let missed = [Pci {
        vendor: "10de",
        class: "0680",
    }];
    assert_eq!(
        nfd_labels(&rule, &missed, &[daemon_found_accelerators()])[ACCELERATABLE],
        "true"
    );
    // The label alone would lose: the rule's `false` overwrites a NodeFeature's label.
    let label_only = NodeFeatureSpec {
        labels: daemon_found_accelerators().labels,
        features: NodeFeatureFeatures::default(),
    };
    assert_eq!(
        nfd_labels(&rule, &missed, &[label_only])[ACCELERATABLE],
        "false"
    );
}

#[test]
fn the_rule_is_built_from_the_configured_vendor_ids() {
    let vars = BTreeMap::from([(
        "GPUSTACK_NVIDIA_PCI_VENDOR_ID".to_string(),
        "0302_1234".to_string(),
    )]);
    let table = ManufacturerTable::from_vars(&vars).expect("a valid override");
    let rule = accel_kube::nfr::cpu_info_rule_for(&table);
    let card = [Pci {
        vendor: "1234",
        class: "0302",
    }];
    // Before the daemon answers, a card of the configured vendor keeps the marker off.
    assert_eq!(nfd_labels(&rule, &card, &[]).get(ACCELERATABLE), None);
    // The default rule would have marked the node.
    assert_eq!(
        nfd_labels(&accel_kube::nfr::cpu_info_rule(), &card, &[])[ACCELERATABLE],
        "false"
    );
    let ids = &rule["spec"]["rules"][1]["matchAny"][0]["matchFeatures"][0]["matchExpressions"]["vendor"]
        ["value"];
    assert!(
        ids.as_array().is_some_and(
            |ids| ids.iter().any(|id| id == "1234") && !ids.iter().any(|id| id == "10de")
        ),
        "{ids}"
    );
}
