//! The RuntimeClass the mutating webhook attaches: `GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RUNTIME_NAME`
//! is "the RuntimeClass attached when it exists" (spec/partitions-preflight-settings.md §3; each
//! manufacturer's spec: "attached only if a RuntimeClass of that name exists").
//!
//! This module owns which class a Pod is given. A Pod that asks for a manufacturer's accelerators
//! (any key under its resource base, or its `.visibility` key, in any container) and names no
//! `spec.runtimeClassName` of its own gets that manufacturer's runtime name, when a RuntimeClass
//! of that name exists; otherwise it is left as it is. A Pod that names a class keeps it, whatever
//! it is. A Pod whose manufacturers' existing classes differ gets none and a warning: the webhook
//! cannot tell which runtime its containers need, and refusing it would stop a Pod the cluster may
//! well run (one runtime can be the engine's default). Manufacturers without a runtime name, or
//! whose class does not exist, take no part in that choice. It is pure: which classes exist is
//! handed in, and no manufacturer is named here (the table's runtime names come through the
//! [`KeyGrammar`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::admission::pod::PodView;
use crate::manufacturer::Manufacturer;
use crate::resources::KeyGrammar;

/// The field the class is written to.
pub const FIELD: &str = "runtimeClassName";

/// The RuntimeClasses (node.k8s.io/v1, cluster-scoped) that exist in the cluster, by name, as far
/// as the webhook knows. Empty: none is known, and none is attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeClasses(BTreeSet<String>);

impl RuntimeClasses {
    /// No RuntimeClass known to exist: mutation attaches none.
    pub fn none() -> RuntimeClasses {
        RuntimeClasses::default()
    }

    /// Whether a RuntimeClass of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl<S: Into<String>> FromIterator<S> for RuntimeClasses {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        RuntimeClasses(names.into_iter().map(Into::into).collect())
    }
}

/// What mutation does about a Pod's `spec.runtimeClassName`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// Nothing: the Pod names its own class, or none of the manufacturers it asks for has a
    /// runtime name whose RuntimeClass exists.
    Nothing,
    /// `spec.runtimeClassName` is set to this class.
    Attach(String),
    /// The Pod asks for manufacturers whose existing classes differ (each manufacturer with its
    /// class): none is attached, and [`Attachment::warning`] says so.
    Ambiguous(BTreeMap<Manufacturer, String>),
}

impl Attachment {
    /// The warning the API server passes to the client (kubectl prints it), when there is one.
    pub fn warning(&self) -> Option<String> {
        let Attachment::Ambiguous(classes) = self else {
            return None;
        };
        let named: Vec<String> = classes
            .iter()
            .map(|(m, class)| format!("{m} (RuntimeClass {class})"))
            .collect();
        let listed = match named.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        Some(format!(
            "no runtimeClassName was attached: the Pod asks for accelerators of {listed}; set spec.runtimeClassName to the one its containers need"
        ))
    }
}

/// Whether the Pod names a class of its own: any value but an absent or null field (a value the
/// API server would refuse, such as an empty name, is left for it to refuse).
pub fn names_its_own(pod: &Value) -> bool {
    !matches!(
        pod.get("spec").and_then(|s| s.get(FIELD)),
        None | Some(Value::Null)
    )
}

/// What the webhook does about the class of the Pod `view` was read from.
pub fn attachment(
    pod: &Value,
    view: &PodView,
    classes: &RuntimeClasses,
    grammar: &KeyGrammar,
) -> Attachment {
    if names_its_own(pod) {
        return Attachment::Nothing;
    }
    let wanted: BTreeMap<Manufacturer, &str> = view
        .containers
        .iter()
        .flat_map(|c| &c.claims)
        .filter_map(|claim| claim.key.manufacturer())
        .filter_map(|m| {
            grammar
                .runtime_class(m)
                .filter(|class| classes.contains(class))
                .map(|class| (m, class))
        })
        .collect();
    let distinct: BTreeSet<&str> = wanted.values().copied().collect();
    match distinct.into_iter().collect::<Vec<_>>().as_slice() {
        [] => Attachment::Nothing,
        [class] => Attachment::Attach((*class).to_string()),
        _ => Attachment::Ambiguous(
            wanted
                .into_iter()
                .map(|(m, class)| (m, class.to_string()))
                .collect(),
        ),
    }
}

/// Set `spec.runtimeClassName` (the Pod was read already, so a Pod with claims has a `spec`
/// object; anything else is left alone).
pub fn attach(pod: &mut Value, class: &str) {
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(FIELD.to_string(), Value::String(class.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::pod::read;
    use crate::manufacturer::ManufacturerTable;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": spec})
    }

    fn of(pod: &Value, classes: &RuntimeClasses, grammar: &KeyGrammar) -> Attachment {
        let view = read(pod, grammar).unwrap();
        attachment(pod, &view, classes, grammar)
    }

    fn one(limits: Value) -> Value {
        pod(json!({"containers": [{"name": "main", "resources": {"limits": limits}}]}))
    }

    #[test]
    fn every_manufacturer_with_a_runtime_name_gets_it_from_any_of_its_keys_when_it_exists() {
        let grammar = KeyGrammar::default();
        let table = ManufacturerTable::default();
        let mut with_a_name = 0;
        for (m, row) in table.rows() {
            let base = &row.resource_base;
            let keys = [
                json!({base.clone(): "1"}),
                json!({format!("{base}.shared"): "2"}),
                json!({format!("{base}.sliced"): "1", format!("{base}.sliced.memory-percentage"): "50"}),
                json!({format!("device.gpustack.ai/{m}.visibility"): "1"}),
            ];
            for limits in keys {
                let p = one(limits.clone());
                match &row.runtime_class {
                    Some(class) => {
                        assert_eq!(
                            of(&p, &RuntimeClasses::from_iter([class.as_str()]), &grammar),
                            Attachment::Attach(class.clone()),
                            "{m}: {limits}"
                        );
                        assert_eq!(
                            of(&p, &RuntimeClasses::none(), &grammar),
                            Attachment::Nothing,
                            "{m}: absent, {limits}"
                        );
                    }
                    None => {
                        let every: RuntimeClasses = table
                            .rows()
                            .filter_map(|(_, r)| r.runtime_class.clone())
                            .collect();
                        assert_eq!(of(&p, &every, &grammar), Attachment::Nothing, "{m}");
                    }
                }
            }
            with_a_name += usize::from(row.runtime_class.is_some());
        }
        assert_eq!(
            with_a_name, 7,
            "every manufacturer but AMD and T-Head has one"
        );
    }

    #[test]
    fn a_pod_naming_its_own_class_keeps_it_and_null_names_none() {
        let grammar = KeyGrammar::default();
        let classes = RuntimeClasses::from_iter(["iluvatar"]);
        let limits = json!({"iluvatar.com/gpu": "1"});
        for own in [json!("runc"), json!("iluvatar"), json!("")] {
            let p = pod(
                json!({FIELD: own, "containers": [{"name": "main", "resources": {"limits": limits}}]}),
            );
            assert_eq!(of(&p, &classes, &grammar), Attachment::Nothing, "{own}");
        }
        let null = pod(
            json!({FIELD: null, "containers": [{"name": "main", "resources": {"limits": limits}}]}),
        );
        assert_eq!(
            of(&null, &classes, &grammar),
            Attachment::Attach("iluvatar".into())
        );
    }

    #[test]
    fn a_pod_without_accelerator_keys_or_with_rdma_only_gets_nothing() {
        let grammar = KeyGrammar::default();
        let every: RuntimeClasses = ["nvidia", "iluvatar"].into_iter().collect();
        for limits in [
            json!({"cpu": "1"}),
            json!({"device.gpustack.ai/rdma": "1"}),
            json!({"amd.com/gpu": "1"}),
        ] {
            assert_eq!(
                of(&one(limits.clone()), &every, &grammar),
                Attachment::Nothing,
                "{limits}"
            );
        }
    }

    #[test]
    fn two_manufacturers_whose_existing_classes_differ_get_none_and_a_warning() {
        let grammar = KeyGrammar::default();
        let p = pod(json!({"containers": [
            {"name": "main", "resources": {"limits": {"iluvatar.com/gpu": "1"}}},
            {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]}));
        let both: RuntimeClasses = ["nvidia", "iluvatar"].into_iter().collect();
        let a = of(&p, &both, &grammar);
        assert_eq!(
            a,
            Attachment::Ambiguous(BTreeMap::from([
                (Manufacturer::Nvidia, "nvidia".to_string()),
                (Manufacturer::Iluvatar, "iluvatar".to_string()),
            ]))
        );
        assert_eq!(
            a.warning().as_deref(),
            Some(
                "no runtimeClassName was attached: the Pod asks for accelerators of nvidia (RuntimeClass nvidia) and iluvatar (RuntimeClass iluvatar); set spec.runtimeClassName to the one its containers need"
            )
        );
        // Only one of the two classes exists: the other manufacturer needs none, as alone.
        assert_eq!(
            of(&p, &RuntimeClasses::from_iter(["iluvatar"]), &grammar),
            Attachment::Attach("iluvatar".into())
        );
        // A manufacturer without a runtime name takes no part.
        let amd = pod(
            json!({"containers": [{"name": "main", "resources": {"limits": {
            "amd.com/gpu": "1", "iluvatar.com/gpu": "1"}}}]}),
        );
        assert_eq!(
            of(&amd, &both, &grammar),
            Attachment::Attach("iluvatar".into())
        );
        assert_eq!(Attachment::Attach("x".into()).warning(), None);
    }

    #[test]
    fn two_manufacturers_sharing_one_class_get_it() {
        let table = ManufacturerTable::from_vars(
            &[
                (
                    "GPUSTACK_NVIDIA_ACCELERATABLE_RUNTIME_NAME".to_string(),
                    "vendor".to_string(),
                ),
                (
                    "GPUSTACK_ILUVATAR_ACCELERATABLE_RUNTIME_NAME".to_string(),
                    "vendor".to_string(),
                ),
            ]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let grammar = KeyGrammar::from_table(&table);
        let p = one(json!({"iluvatar.com/gpu": "1", "nvidia.com/gpu": "1"}));
        assert_eq!(
            of(&p, &RuntimeClasses::from_iter(["vendor"]), &grammar),
            Attachment::Attach("vendor".into())
        );
        // An overridden name is looked for, not the default one.
        assert_eq!(
            of(&p, &RuntimeClasses::from_iter(["nvidia"]), &grammar),
            Attachment::Nothing
        );
    }

    #[test]
    fn a_sidecars_visibility_key_or_an_init_containers_request_counts() {
        let grammar = KeyGrammar::default();
        let classes = RuntimeClasses::from_iter(["mthreads"]);
        let p = pod(json!({
            "initContainers": [{"name": "sshd", "restartPolicy": "Always",
                "resources": {"limits": {"device.gpustack.ai/mthreads.visibility": "1"}}}],
            "containers": [{"name": "main"}]
        }));
        assert_eq!(
            of(&p, &classes, &grammar),
            Attachment::Attach("mthreads".into())
        );
        let mut p = p;
        attach(&mut p, "mthreads");
        assert_eq!(p["spec"][FIELD], "mthreads");
        assert_eq!(of(&p, &classes, &grammar), Attachment::Nothing);
    }
}
