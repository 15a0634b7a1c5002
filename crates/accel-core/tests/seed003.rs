//! Every example of seed 003 ("Accelerator Requests"), accepted or rejected, with its exact
//! message. The manifests are the seed's own YAML; a `resources:` fragment is placed on one app
//! container, and every Pod carries the queue label the webhooks select on.

use accel_core::admission::{Phase, RuntimeClasses, Verdict, admit};
use accel_core::pool::Pool;
use accel_core::resources::KeyGrammar;
use serde_json::{Value, json};

const QUEUE: &str = "kueue.x-k8s.io/queue-name";

/// The H100 pool of DESIGN.md's `admit --pool` example.
fn h100() -> Pool {
    serde_json::from_value(
        json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia", "memoryMiB": 81559,
        "count": 8, "profiles": {"1g.10gb": 9984, "3g.40gb": 40320}}),
    )
    .unwrap()
}

/// A Pod from a seed fragment: `spec:` as written, or `resources:` on one container `main`.
fn pod(yaml: &str) -> Value {
    let fragment: Value = serde_yaml::from_str(yaml).unwrap();
    let spec = match fragment.get("spec") {
        Some(spec) => spec.clone(),
        None => {
            json!({"containers": [{"name": "main", "image": "busybox", "resources": fragment["resources"].clone()}]})
        }
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {QUEUE: "h100"}}, "spec": spec})
}

fn verdict(yaml: &str, pool: &Pool) -> Verdict {
    admit(
        &pod(yaml),
        pool,
        &RuntimeClasses::none(),
        &KeyGrammar::default(),
        Phase::Both,
    )
    .unwrap()
}

fn accepted(yaml: &str) -> Verdict {
    let v = verdict(yaml, &h100());
    assert!(
        v.allowed,
        "expected acceptance of\n{yaml}\ngot {:?}",
        v.message
    );
    // Validating alone accepts the submitted Pod too, and mutation is idempotent.
    let again = admit(
        &v.pod,
        &h100(),
        &RuntimeClasses::none(),
        &KeyGrammar::default(),
        Phase::Both,
    )
    .unwrap();
    assert!(again.allowed && again.patch.is_empty(), "{:?}", again.patch);
    v
}

fn rejected(yaml: &str, message: &str) {
    let v = verdict(yaml, &h100());
    assert!(!v.allowed, "expected rejection of\n{yaml}");
    assert_eq!(v.message.as_deref(), Some(message), "for\n{yaml}");
    let validated = admit(
        &pod(yaml),
        &h100(),
        &RuntimeClasses::none(),
        &KeyGrammar::default(),
        Phase::Validate,
    )
    .unwrap();
    assert_eq!(
        validated.message.as_deref(),
        Some(message),
        "validate alone, for\n{yaml}"
    );
}

fn limits(v: &Verdict, container: usize) -> &Value {
    &v.pod["spec"]["containers"][container]["resources"]["limits"]
}

// --- Worked example per family -------------------------------------------------------------

#[test]
fn exclusive_two_whole_accelerators() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu: "2"
"#,
    );
    assert!(
        v.patch.is_empty(),
        "an exclusive request is not mutated: {:?}",
        v.patch
    );
}

#[test]
fn shared_two_accelerators_is_pinned_to_nodes_with_two() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.shared: "2"
"#,
    );
    assert_eq!(
        v.pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count", "operator": "Gt", "values": ["1"]}]}]})
    );
    assert_eq!(
        v.patch,
        vec![json!({"op": "add", "path": "/spec/affinity", "value": v.pod["spec"]["affinity"]})]
    );
}

#[test]
fn shared_pin_joins_every_existing_required_term() {
    let v = accepted(
        r#"
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {key: zone, operator: In, values: [a]}
          - matchFields:
              - {key: metadata.name, operator: In, values: [n1]}
  containers:
    - name: a
      resources:
        limits:
          nvidia.com/gpu.shared: "3"
    - name: b
      resources:
        limits:
          nvidia.com/gpu.shared: "1"
"#,
    );
    let terms = &v.pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let pin = json!({"key": "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count", "operator": "Gt", "values": ["2"]});
    assert_eq!(
        terms[0]["matchExpressions"],
        json!([{"key": "zone", "operator": "In", "values": ["a"]}, pin])
    );
    assert_eq!(terms[1]["matchExpressions"], json!([pin]));
    assert_eq!(terms[1]["matchFields"][0]["key"], "metadata.name");
}

#[test]
fn shared_one_accelerator_is_not_pinned() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.shared: "1"
"#,
    );
    assert!(v.patch.is_empty());
}

#[test]
fn shared_pin_is_refused_when_the_group_cannot_be_read() {
    let v = verdict(
        r#"
resources:
  limits:
    nvidia.com/gpu.shared: "2"
"#,
        &Pool::unknown("LocalQueue team-a/h100 is not in the cache"),
    );
    assert!(!v.allowed);
    assert_eq!(
        v.message.as_deref(),
        Some(
            "spec.containers[0].resources.limits[nvidia.com/gpu.shared]: Forbidden: a request of 2 shared accelerators is pinned to nodes with at least 2 accelerators, but the queue's accelerator group could not be read (LocalQueue team-a/h100 is not in the cache); a retry may succeed"
        )
    );
}

#[test]
fn logical_slice_half_the_vram_forty_percent_compute() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"                       # always exactly 1 accelerator
    nvidia.com/gpu.sliced.memory-percentage: "50"    # per accelerator; or .sliced.memory-mib, never both
    nvidia.com/gpu.sliced.cores-percentage: "40"     # per accelerator; defaults to 100 when omitted
    # nvidia.com/gpu.sliced.units is folded by the webhook — do not set it
"#,
    );
    let expected = json!({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50",
        "nvidia.com/gpu.sliced.cores-percentage": "40", "nvidia.com/gpu.sliced.units": "800000"});
    assert_eq!(limits(&v, 0), &expected);
    let requests = &v.pod["spec"]["containers"][0]["resources"]["requests"];
    assert_eq!(requests["nvidia.com/gpu.sliced.units"], "800000");
    assert_eq!(requests["nvidia.com/gpu.sliced.cores-percentage"], "40");
}

#[test]
fn slice_cores_default_to_100_written_explicitly_and_units_overwrite_the_client() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"
    nvidia.com/gpu.sliced.memory-mib: "40320"
    nvidia.com/gpu.sliced.units: "1"
"#,
    );
    assert_eq!(
        limits(&v, 0)["nvidia.com/gpu.sliced.cores-percentage"],
        "100"
    );
    assert_eq!(limits(&v, 0)["nvidia.com/gpu.sliced.units"], "790985");
    assert!(v.patch.contains(&json!({"op": "replace", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units", "value": "790985"})));
}

#[test]
fn physical_partition_one_mig_3g_40gb() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"                  # always exactly 1 accelerator
    nvidia.com/gpu.partitioned.mig-3g.40gb: "1"      # always exactly 1 instance
    # nvidia.com/gpu.partitioned.units is folded by the webhook — do not set it
"#,
    );
    // The same VRAM costs the same units as a 40320 MiB slice; no cores key on partitions.
    assert_eq!(
        limits(&v, 0),
        &json!({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1", "nvidia.com/gpu.partitioned.units": "790985"})
    );
}

#[test]
fn ssh_sidecar_visibility_sits_outside_the_families() {
    let v = accepted(
        r#"
resources:
  limits:
    device.gpustack.ai/nvidia.visibility: "1"
"#,
    );
    assert!(v.patch.is_empty());
}

// --- Rule 1 ---------------------------------------------------------------------------------

#[test]
fn rule1_accepted_both_app_containers_claim_the_same_family() {
    accepted(
        r#"
spec:
  containers:
    - name: trainer
      resources:
        limits:
          nvidia.com/gpu: "1"
    - name: sidecar-metrics
      resources:
        limits:
          nvidia.com/gpu: "1"
"#,
    );
}

#[test]
fn rule1_rejected_two_families_in_one_pod() {
    rejected(
        r#"
spec:
  containers:
    - name: a
      resources:
        limits:
          nvidia.com/gpu: "1"
    - name: b
      resources:
        limits:
          nvidia.com/gpu.sliced: "1"
          nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
        "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive sliced]",
    );
}

#[test]
fn rule1_rejected_the_same_family_in_both_container_groups() {
    rejected(
        r#"
spec:
  initContainers:
    - name: warmup
      resources:
        limits:
          nvidia.com/gpu: "1"
  containers:
    - name: main
      resources:
        limits:
          nvidia.com/gpu: "1"
"#,
        "spec.initContainers: Forbidden: a Pod's accelerator requests must all sit in one container group; spec.initContainers must give up its request, because its devices are held for the Pod's whole life while the scheduler charges the Pod only once",
    );
}

#[test]
fn rule1_claims_only_in_the_init_group_are_one_group() {
    accepted(
        r#"
spec:
  initContainers:
    - name: warmup
      resources:
        limits:
          nvidia.com/gpu: "1"
  containers:
    - name: main
"#,
    );
}

// --- Rule 2 ---------------------------------------------------------------------------------

#[test]
fn rule2_accepted_sliced_one() {
    accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"
    nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
    );
}

#[test]
fn rule2_rejected_sliced_two() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "2"
    nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet",
    );
}

#[test]
fn rule2_sliced_one_thousand_milli_is_one_and_one_milli_is_not() {
    accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1000m"
    nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
    );
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1m"
    nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"1m\": must be a whole number",
    );
}

#[test]
fn rule2_a_slice_names_exactly_one_memory_budget() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"
"#,
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.sliced request must set nvidia.com/gpu.sliced.memory-percentage or nvidia.com/gpu.sliced.memory-mib",
    );
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"
    nvidia.com/gpu.sliced.memory-percentage: "50"
    nvidia.com/gpu.sliced.memory-mib: "1024"
"#,
        "spec.containers[0].resources.limits: Forbidden: cannot set both nvidia.com/gpu.sliced.memory-percentage and nvidia.com/gpu.sliced.memory-mib",
    );
}

#[test]
fn rule2_budgets_out_of_range_name_key_value_and_range() {
    let pct = |value: &str| {
        format!(
            "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-percentage: \"{value}\"\n"
        )
    };
    for value in ["0", "101", "150"] {
        rejected(
            &pct(value),
            &format!(
                "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-percentage]: Invalid value: \"{value}\": must be a whole percentage of the accelerator's VRAM from 1 to 100"
            ),
        );
    }
    accepted(&pct("100"));
    let mib = |value: &str| {
        format!(
            "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-mib: \"{value}\"\n"
        )
    };
    for value in ["0", "-1"] {
        rejected(
            &mib(value),
            &format!(
                "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-mib]: Invalid value: \"{value}\": must be a positive whole number of MiB"
            ),
        );
    }
    rejected(
        &mib("81560"),
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-mib]: Invalid value: \"81560\": must be from 1 to the accelerator's VRAM of 81559 MiB",
    );
    let v = accepted(&mib("81559"));
    assert_eq!(limits(&v, 0)["nvidia.com/gpu.sliced.units"], "1600000");
}

#[test]
fn rule2_cores_percentage_is_a_whole_number_from_1_to_100() {
    rejected(
        "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-percentage: \"10\"\n    nvidia.com/gpu.sliced.cores-percentage: \"0\"\n",
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.cores-percentage]: Invalid value: \"0\": must be a whole percentage of the accelerator's compute from 1 to 100",
    );
}

// --- Rule 3 ---------------------------------------------------------------------------------

#[test]
fn rule3_accepted_partitioned_one() {
    accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"
    nvidia.com/gpu.partitioned.mig-1g.10gb: "1"
"#,
    );
}

#[test]
fn rule3_rejected_partitioned_two() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "2"
    nvidia.com/gpu.partitioned.mig-1g.10gb: "1"
"#,
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: \"2\": a partition request is always a single accelerator; request one Pod per instance",
    );
}

#[test]
fn rule3_rejected_a_bare_key_with_no_profile() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"
"#,
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.partitioned request must name a profile, e.g. nvidia.com/gpu.partitioned.<kind>-<profile>",
    );
}

// --- Rule 4 ---------------------------------------------------------------------------------

#[test]
fn rule4_rejected_two_profiles() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"
    nvidia.com/gpu.partitioned.mig-1g.10gb: "1"
    nvidia.com/gpu.partitioned.mig-3g.40gb: "1"
"#,
        "spec: Forbidden: a Pod may request only one partition profile, found [1g.10gb 3g.40gb]",
    );
}

#[test]
fn rule4_is_pod_wide_two_containers_naming_different_profiles() {
    let v = verdict(
        r#"
spec:
  containers:
    - name: a
      resources:
        limits:
          nvidia.com/gpu.partitioned: "1"
          nvidia.com/gpu.partitioned.mig-3g.40gb: "1"
    - name: b
      resources:
        limits:
          nvidia.com/gpu.partitioned: "1"
          nvidia.com/gpu.partitioned.mig-1g.10gb: "1"
"#,
        &h100(),
    );
    assert!(!v.allowed);
    // The same rule-4 message, aggregated with rule 6 (two containers each claim a partition).
    assert_eq!(
        v.message.as_deref(),
        Some(
            "[spec: Forbidden: a Pod may request only one partition profile, found [1g.10gb 3g.40gb], spec: Forbidden: at most one container may request a slicing family, found 2]"
        )
    );
}

#[test]
fn a_profile_the_pool_does_not_offer_lists_the_offered_set() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"
    nvidia.com/gpu.partitioned.mig-2g.20gb: "1"
"#,
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-2g.20gb]: Unsupported value: \"2g.20gb\": supported values: \"1g.10gb\", \"3g.40gb\"",
    );
}

// --- Rule 5 ---------------------------------------------------------------------------------

#[test]
fn rule5_accepted_one_instance() {
    accepted(
        "resources:\n  limits:\n    nvidia.com/gpu.partitioned: \"1\"\n    nvidia.com/gpu.partitioned.mig-3g.40gb: \"1\"\n",
    );
}

#[test]
fn rule5_rejected_two_instances() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.partitioned: "1"
    nvidia.com/gpu.partitioned.mig-3g.40gb: "2"
"#,
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-3g.40gb]: Invalid value: \"2\": a partition profile request must be exactly 1 instance",
    );
}

// --- Rule 6 ---------------------------------------------------------------------------------

#[test]
fn rule6_accepted_a_slice_and_the_ssh_sidecar() {
    accepted(
        r#"
spec:
  containers:
    - name: main
      resources:
        limits:
          nvidia.com/gpu.sliced: "1"
          nvidia.com/gpu.sliced.memory-percentage: "50"
    - name: sshd
      resources: # visibility, not a slicing family
        limits:
          device.gpustack.ai/nvidia.visibility: "1"
"#,
    );
}

#[test]
fn rule6_rejected_two_containers_each_holding_a_slice() {
    rejected(
        r#"
spec:
  containers:
    - name: a
      resources:
        limits:
          nvidia.com/gpu.sliced: "1"
          nvidia.com/gpu.sliced.memory-percentage: "50"
    - name: b
      resources:
        limits:
          nvidia.com/gpu.sliced: "1"
          nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
        "spec: Forbidden: at most one container may request a slicing family, found 2",
    );
}

// --- Rule 7 ---------------------------------------------------------------------------------

const RULE7: &str = r#"
spec:                                                       # accepted
  initContainers:
    - name: log-shipper
      restartPolicy: Always
      resources:
        limits:
          cpu: "100m"
  containers:
    - name: main
      resources:
        limits:
          nvidia.com/gpu: "1"
---
spec:                                                       # rejected
  initContainers:
    - name: log-shipper
      restartPolicy: Always
      resources:
        limits:
          nvidia.com/gpu: "1"
"#;

#[test]
fn rule7_native_sidecar_may_not_claim_an_accelerator() {
    let mut documents = RULE7.split("\n---\n");
    accepted(documents.next().unwrap());
    rejected(
        documents.next().unwrap(),
        "spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a native sidecar) may not request an accelerator; move the request to an app container",
    );
}

// --- RDMA, pre-release breaks, scope --------------------------------------------------------

#[test]
fn rdma_beside_a_shared_accelerator_in_one_container() {
    let v = accepted(
        r#"
resources:
  limits:
    nvidia.com/gpu.shared: "1"
    device.gpustack.ai/rdma.shared: "1"     # one concurrent use of one RDMA interface
"#,
    );
    assert!(v.patch.is_empty());
    accepted(
        "resources:\n  limits:\n    nvidia.com/gpu: \"1\"\n    device.gpustack.ai/rdma: \"2\"\n    device.gpustack.ai/rdma.partitioned: \"1\"\n",
    );
}

#[test]
fn the_old_mig_key_is_recognised_by_nothing_and_meets_rule2() {
    rejected(
        r#"
resources:
  limits:
    nvidia.com/gpu.sliced: "1"
    nvidia.com/gpu.sliced.mig-1g.10gb: "1"
"#,
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.sliced request must set nvidia.com/gpu.sliced.memory-percentage or nvidia.com/gpu.sliced.memory-mib",
    );
}

#[test]
fn a_partition_key_of_a_manufacturer_without_partitioning_is_refused_by_name() {
    // Seed 003, "Two families": a manufacturer with no hardware partitioning has no
    // .partitioned* keys at all, so no node will ever serve one (issue 12, item 8).
    rejected(
        r#"
resources:
  limits:
    amd.com/gpu.partitioned: "1"
"#,
        "spec.containers[0].resources.limits[amd.com/gpu.partitioned]: Forbidden: amd has no hardware partitioning, so no node can serve amd.com/gpu.partitioned; request amd.com/gpu, amd.com/gpu.shared or amd.com/gpu.sliced instead",
    );
    rejected(
        r#"
resources:
  requests:
    huawei.com/npu.partitioned.mig-1g.10gb: "1"
"#,
        "spec.containers[0].resources.requests[huawei.com/npu.partitioned.mig-1g.10gb]: Forbidden: ascend has no hardware partitioning, so no node can serve huawei.com/npu.partitioned.mig-1g.10gb; request huawei.com/npu, huawei.com/npu.shared or huawei.com/npu.sliced instead",
    );
    // A manufacturer that partitions keeps its keys.
    accepted(
        "resources:\n  limits:\n    nvidia.com/gpu.partitioned: \"1\"\n    nvidia.com/gpu.partitioned.mig-1g.10gb: \"1\"\n",
    );
}

#[test]
fn a_pod_without_the_queue_label_is_not_checked() {
    let mut p = pod("resources:\n  limits:\n    nvidia.com/gpu.sliced: \"2\"\n");
    p["metadata"]["labels"] = json!({});
    let v = admit(
        &p,
        &h100(),
        &RuntimeClasses::none(),
        &KeyGrammar::default(),
        Phase::Both,
    )
    .unwrap();
    assert!(v.allowed && v.patch.is_empty() && !v.checked);
}

#[test]
fn several_violations_are_all_reported_in_the_aggregate_form() {
    let v = verdict(
        r#"
spec:
  initContainers:
    - name: shipper
      restartPolicy: Always
      resources:
        limits:
          nvidia.com/gpu.shared: "1"
  containers:
    - name: a
      resources:
        limits:
          nvidia.com/gpu.sliced: "2"
          nvidia.com/gpu.sliced.memory-percentage: "50"
"#,
        &h100(),
    );
    assert_eq!(
        v.message.as_deref(),
        Some(
            "[spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet, spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a native sidecar) may not request an accelerator; move the request to an app container, spec: Forbidden: a Pod may request only one accelerator family, found [shared sliced]]"
        )
    );
    let rules: Vec<&str> = v.violations.iter().map(|e| e.rule.label()).collect();
    assert_eq!(rules, vec!["rule2", "rule7", "rule1"]);
}

#[test]
fn an_unknown_pool_refuses_only_the_requests_that_need_it() {
    let unknown = Pool::unknown("the queue's flavors name no accelerator group");
    for yaml in [
        "resources:\n  limits:\n    nvidia.com/gpu: \"4\"\n",
        "resources:\n  limits:\n    nvidia.com/gpu.shared: \"1\"\n",
        "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-percentage: \"25\"\n",
    ] {
        assert!(verdict(yaml, &unknown).allowed, "{yaml}");
    }
    let v = verdict(
        "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-mib: \"1024\"\n",
        &unknown,
    );
    assert_eq!(
        v.message.as_deref(),
        Some(
            "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-mib]: Forbidden: a MiB budget needs the pool's accelerator VRAM, which could not be read (the queue's flavors name no accelerator group); a retry may succeed"
        )
    );
    let v = verdict(
        "resources:\n  limits:\n    nvidia.com/gpu.partitioned: \"1\"\n    nvidia.com/gpu.partitioned.mig-1g.10gb: \"1\"\n",
        &unknown,
    );
    assert_eq!(
        v.message.as_deref(),
        Some(
            "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-1g.10gb]: Forbidden: a partition needs the VRAM of profile 1g.10gb and of the pool's accelerator, which could not be read (the queue's flavors name no accelerator group); a retry may succeed"
        )
    );
}

#[test]
fn absurd_quantities_are_refused_with_a_clear_message() {
    for (value, detail) in [
        (
            "1e100",
            "must be a whole number no larger than 18446744073709551615",
        ),
        ("-1", "must be greater than or equal to 0"),
        ("0.5", "must be a whole number"),
    ] {
        rejected(
            &format!("resources:\n  limits:\n    nvidia.com/gpu: \"{value}\"\n"),
            &format!(
                "spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: \"{value}\": {detail}"
            ),
        );
    }
}

#[test]
fn sub_keys_without_their_family_key_are_refused() {
    rejected(
        "resources:\n  limits:\n    nvidia.com/gpu.sliced.memory-percentage: \"50\"\n",
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.sliced.memory-percentage request must come with nvidia.com/gpu.sliced: \"1\"",
    );
    rejected(
        "resources:\n  limits:\n    nvidia.com/gpu.partitioned.mig-1g.10gb: \"1\"\n",
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.partitioned.mig-1g.10gb request must come with nvidia.com/gpu.partitioned: \"1\"",
    );
}

#[test]
fn inconsistent_pool_readings_refuse_a_partition_rather_than_admit_it_without_units() {
    let mut pool = h100();
    pool.profiles = Some([("1g.10gb".to_string(), 90_000)].into());
    let v = verdict(
        "resources:\n  limits:\n    nvidia.com/gpu.partitioned: \"1\"\n    nvidia.com/gpu.partitioned.mig-1g.10gb: \"1\"\n",
        &pool,
    );
    assert_eq!(
        v.message.as_deref(),
        Some(
            "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-1g.10gb]: Forbidden: the pool's VRAM of profile 1g.10gb cannot be folded into units: a memory budget of 90000 MiB exceeds the accelerator's 81559 MiB (the pool's readings are inconsistent); a retry may succeed"
        )
    );
}

/// The four worked examples, as the API server would store them after both webhooks: the whole
/// verdict (patch and Pod) kept as a reviewed snapshot.
#[test]
fn worked_examples_after_admission() {
    let examples = [
        (
            "exclusive",
            "resources:\n  limits:\n    nvidia.com/gpu: \"2\"\n",
        ),
        (
            "shared",
            "resources:\n  limits:\n    nvidia.com/gpu.shared: \"2\"\n",
        ),
        (
            "sliced",
            "resources:\n  limits:\n    nvidia.com/gpu.sliced: \"1\"\n    nvidia.com/gpu.sliced.memory-percentage: \"50\"\n    nvidia.com/gpu.sliced.cores-percentage: \"40\"\n",
        ),
        (
            "partitioned",
            "resources:\n  limits:\n    nvidia.com/gpu.partitioned: \"1\"\n    nvidia.com/gpu.partitioned.mig-3g.40gb: \"1\"\n",
        ),
    ];
    for (name, yaml) in examples {
        insta::assert_json_snapshot!(name, verdict(yaml, &h100()));
    }
}
