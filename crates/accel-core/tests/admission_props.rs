//! Properties of admission over generated Pods: what the validator accepts, once mutated, is
//! accepted again; mutation is idempotent (the RuntimeClass it attaches included); folded `.units`
//! never exceed one accelerator; no input panics.

use accel_core::admission::{Phase, RuntimeClasses, admit};
use accel_core::pool::Pool;
use accel_core::resources::KeyGrammar;
use accel_core::units::UNITS_PER_ACCELERATOR;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const KEYS: &[&str] = &[
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/gpu.sliced",
    "nvidia.com/gpu.sliced.memory-percentage",
    "nvidia.com/gpu.sliced.memory-mib",
    "nvidia.com/gpu.sliced.cores-percentage",
    "nvidia.com/gpu.sliced.units",
    "nvidia.com/gpu.partitioned",
    "nvidia.com/gpu.partitioned.mig-1g.10gb",
    "nvidia.com/gpu.partitioned.mig-3g.40gb",
    "nvidia.com/gpu.partitioned.units",
    "device.gpustack.ai/nvidia.visibility",
    "device.gpustack.ai/rdma.shared",
    "amd.com/gpu.sliced",
    "iluvatar.com/gpu",
    "cpu",
];

const VALUES: &[&str] = &[
    "0", "1", "1", "1", "2", "3", "50", "100", "101", "1000m", "500m", "0.5", "-1", "1e100", "1e3",
    "40320", "81559", "90000",
];

fn limits() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(
        prop::sample::select(KEYS),
        prop::sample::select(VALUES),
        0..5,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect()
    })
}

/// (is init, restartPolicy Always, limits, put in requests instead)
fn container() -> impl Strategy<Value = (bool, bool, Map<String, Value>, bool)> {
    (
        any::<bool>(),
        any::<bool>(),
        limits(),
        prop::bool::weighted(0.2),
    )
}

fn pod(containers: Vec<(bool, bool, Map<String, Value>, bool)>, affinity: bool) -> Value {
    let mut init = Vec::new();
    let mut app = Vec::new();
    for (i, (is_init, always, limits, in_requests)) in containers.into_iter().enumerate() {
        let section = if in_requests { "requests" } else { "limits" };
        let mut c = json!({"name": format!("c{i}"), "resources": {section: limits}});
        if is_init {
            if always {
                c["restartPolicy"] = json!("Always");
            }
            init.push(c);
        } else {
            app.push(c);
        }
    }
    let mut spec = json!({"containers": app});
    if !init.is_empty() {
        spec["initContainers"] = json!(init);
    }
    if affinity {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}});
    }
    json!({"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": spec})
}

fn pools() -> impl Strategy<Value = Pool> {
    prop_oneof![
        Just(
            serde_json::from_value(json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia", "memoryMiB": 81559,
                "count": 8, "profiles": {"1g.10gb": 9984, "3g.40gb": 40320}}))
            .unwrap()
        ),
        Just(serde_json::from_value(json!({"group": "nvidia-tesla-t4", "memoryMiB": 15360, "profiles": {}})).unwrap()),
        Just(Pool::unknown("not in the cache")),
        // Inconsistent readings: a profile larger than its accelerator.
        Just(serde_json::from_value(json!({"group": "g", "memoryMiB": 9000, "profiles": {"1g.10gb": 9984}})).unwrap()),
    ]
}

/// Which RuntimeClasses exist: none, NVIDIA's, or NVIDIA's and Iluvatar's (a Pod asking for both
/// then gets none).
fn runtime_classes() -> impl Strategy<Value = RuntimeClasses> {
    prop_oneof![
        Just(RuntimeClasses::none()),
        Just(RuntimeClasses::from_iter(["nvidia"])),
        Just(RuntimeClasses::from_iter(["nvidia", "iluvatar"])),
    ]
}

fn units_in(pod: &Value) -> Vec<u64> {
    let mut out = Vec::new();
    for field in ["containers", "initContainers"] {
        for c in pod["spec"][field].as_array().into_iter().flatten() {
            for section in ["limits", "requests"] {
                for (k, v) in c["resources"][section].as_object().into_iter().flatten() {
                    if k.ends_with(".units") {
                        out.push(v.as_str().unwrap().parse().unwrap());
                    }
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn accepted_then_mutated_is_accepted_again_and_mutation_is_idempotent(
        containers in prop::collection::vec(container(), 1..4),
        affinity in any::<bool>(),
        pool in pools(),
        classes in runtime_classes(),
    ) {
        let g = KeyGrammar::default();
        let p = pod(containers, affinity);
        let validated = admit(&p, &pool, &classes, &g, Phase::Validate).unwrap();
        let both = admit(&p, &pool, &classes, &g, Phase::Both).unwrap();
        let mutated = admit(&p, &pool, &classes, &g, Phase::Mutate).unwrap();
        if validated.allowed {
            prop_assert!(mutated.allowed, "validator accepted but mutation refused: {:?}", mutated.message);
            prop_assert!(both.allowed, "accepted Pod refused once mutated: {:?}", both.message);
            let again = admit(&both.pod, &pool, &classes, &g, Phase::Validate).unwrap();
            prop_assert!(again.allowed);
        }
        if mutated.allowed {
            let twice = admit(&mutated.pod, &pool, &classes, &g, Phase::Mutate).unwrap();
            prop_assert!(twice.allowed);
            prop_assert!(twice.patch.is_empty(), "second mutation patched {:?}", twice.patch);
            prop_assert_eq!(accel_core::admission::patch::apply(&p, &mutated.patch), Some(mutated.pod.clone()));
        }
        if both.allowed {
            for units in units_in(&both.pod) {
                prop_assert!(units <= UNITS_PER_ACCELERATOR);
            }
        }
    }

    #[test]
    fn no_json_panics(value in arb_json()) {
        let g = KeyGrammar::default();
        let labelled = json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": value.clone()});
        for pod in [value, labelled] {
            let _ = admit(&pod, &Pool::default(), &RuntimeClasses::from_iter(["nvidia"]), &g, Phase::Both);
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop::sample::select(VALUES).prop_map(|s| json!(s)),
        prop::sample::select(KEYS).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 64, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(
                    &[
                        "containers",
                        "initContainers",
                        "resources",
                        "limits",
                        "requests",
                        "restartPolicy",
                        "affinity",
                        "nodeAffinity",
                        "kind",
                        "nvidia.com/gpu.shared",
                        "nvidia.com/gpu.sliced"
                    ][..]
                ),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}
