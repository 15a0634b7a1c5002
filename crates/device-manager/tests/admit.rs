//! `device-manager admit` as a user runs it: exit 0 allowed, 1 denied, 2 unreadable; text and
//! JSON output; the message exactly the webhook's; the pool from `--pool`; the RuntimeClasses that
//! exist from `--runtime-class`.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const POOL: &str = r#"{"group":"nvidia-h100-80gb-hbm3","manufacturer":"nvidia","memoryMiB":81559,
"count":8,"profiles":{"1g.10gb":9984,"3g.40gb":40320}}"#;

fn pod(limits: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    kueue.x-k8s.io/queue-name: h100\nspec:\n  containers:\n    - name: main\n      image: busybox\n      resources:\n        limits:\n{limits}"
    )
}

fn admit(args: &[&str], stdin: &str) -> Output {
    admit_with(args, stdin, &[])
}

/// `admit` with settings in its environment.
fn admit_with(args: &[&str], stdin: &str, envs: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool.json");
    std::fs::write(&pool, POOL).unwrap();
    let mut full: Vec<String> = vec!["admit".into()];
    for a in args {
        full.push(a.replace("POOL", pool.to_str().unwrap()));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(&full)
        .env_remove("ADMIT_POOL")
        .env_remove("ADMIT_PHASE")
        .env_remove("ADMIT_OUTPUT")
        .env_remove("ADMIT_RUNTIME_CLASS")
        .env_remove("GPUSTACK_ILUVATAR_ACCELERATABLE_RUNTIME_NAME")
        .env_remove("GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME")
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that fails before reading its input closes the pipe: not the test's concern.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn allowed_prints_the_patch_and_exits_0() {
    let o = admit(
        &["--pool", "POOL", "-o", "json", "-"],
        &pod(
            "          nvidia.com/gpu.sliced: \"1\"\n          nvidia.com/gpu.sliced.memory-mib: \"40320\"\n",
        ),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["allowed"], true);
    assert_eq!(v["message"], Value::Null);
    assert_eq!(
        v["pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"],
        "790985"
    );
    assert_eq!(
        v["pod"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu.sliced.cores-percentage"],
        "100"
    );
    assert_eq!(
        v["patch"][0],
        json!({"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.cores-percentage", "value": "100"})
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["allowed", "message", "patch", "pod"]);
}

#[test]
fn denied_prints_the_webhooks_message_and_exits_1() {
    let o = admit(
        &["-"],
        &pod(
            "          nvidia.com/gpu.sliced: \"2\"\n          nvidia.com/gpu.sliced.memory-percentage: \"50\"\n",
        ),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o).lines().next(),
        Some(
            "denied: spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet"
        )
    );
}

#[test]
fn without_a_pool_only_requests_that_need_one_are_denied() {
    let o = admit(
        &["--phase", "mutate", "-"],
        &pod("          nvidia.com/gpu.shared: \"2\"\n"),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("could not be read (no --pool was given); a retry may succeed"),
        "{}",
        stdout(&o)
    );
    let o = admit(&["-"], &pod("          nvidia.com/gpu: \"2\"\n"));
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "allowed\n")
    );
}

#[test]
fn validate_phase_does_not_mutate() {
    let o = admit(
        &["--phase", "validate", "-o", "json", "--pool", "POOL", "-"],
        &pod("          nvidia.com/gpu.shared: \"2\"\n"),
    );
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["patch"], json!([]));
}

#[test]
fn a_pod_without_the_queue_label_is_not_checked() {
    let o = admit(
        &["-"],
        "kind: Pod\nspec:\n  containers:\n    - resources:\n        limits:\n          nvidia.com/gpu.sliced: \"9\"\n",
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "allowed (not checked: the Pod carries no kueue.x-k8s.io/queue-name label)\n"
    );
}

#[test]
fn unreadable_input_exits_2_naming_what() {
    for (input, message) in [
        ("{: [", "the Pod - is not YAML or JSON"),
        (
            "kind: Service\n",
            "cannot read the Pod -: the object is a Service, not a Pod",
        ),
        (
            "kind: Pod\nspec:\n  containers: 3\n",
            "cannot read the Pod -: spec.containers: must be a list",
        ),
        (
            "kind: Pod\n---\nkind: Pod\n",
            "the Pod - holds several YAML documents; give one Pod",
        ),
    ] {
        let o = admit(&["-"], input);
        assert_eq!(o.status.code(), Some(2), "{input}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.starts_with(&format!("device-manager: {message}")),
            "{stderr}"
        );
    }
    let o = admit(&["/nonexistent/pod.yaml"], "");
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn resource_bases_can_be_overridden() {
    let limits = "          example.com/cuda.sliced: \"2\"\n          example.com/cuda.sliced.memory-percentage: \"50\"\n";
    let o = admit(&["-"], &pod(limits));
    assert_eq!(
        o.status.code(),
        Some(0),
        "not an accelerator key under the default bases"
    );
    let o = admit_with(
        &["-"],
        &pod(limits),
        &[(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
            "example.com/cuda",
        )],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).starts_with("denied: spec.containers[0].resources.limits[example.com/cuda.sliced]: Invalid value: \"2\""), "{}", stdout(&o));
    let o = admit_with(
        &["-"],
        &pod(limits),
        &[("GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME", "nvidia")],
    );
    assert_eq!(o.status.code(), Some(2));
    // One line naming the variable.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.starts_with(
            "device-manager: GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME=\"nvidia\": "
        ) && stderr.trim_end().lines().count() == 1,
        "{stderr}"
    );
    // The default base is no longer an accelerator key once renamed.
    let o = admit_with(
        &["-"],
        &pod("          nvidia.com/gpu.sliced: \"2\"\n"),
        &[(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
            "example.com/cuda",
        )],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

/// seed 000's sliced Iluvatar Pod, without `runtimeClassName` (the slice needs `iluvatar`).
fn sliced_iluvatar() -> String {
    pod(
        "          iluvatar.com/gpu.sliced: \"1\"\n          iluvatar.com/gpu.sliced.memory-percentage: \"50\"\n",
    )
}

fn runtime_class_ops(v: &Value) -> Vec<Value> {
    v["patch"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["path"] == "/spec/runtimeClassName")
        .cloned()
        .collect()
}

#[test]
fn the_runtime_class_is_attached_only_when_runtime_class_names_it() {
    let o = admit(
        &[
            "-o",
            "json",
            "--runtime-class",
            "nvidia",
            "--runtime-class",
            "iluvatar",
            "-",
        ],
        &sliced_iluvatar(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["allowed"], true);
    assert_eq!(
        runtime_class_ops(&v),
        [json!({"op": "add", "path": "/spec/runtimeClassName", "value": "iluvatar"})]
    );
    assert_eq!(v["pod"]["spec"]["runtimeClassName"], "iluvatar");

    // Absent: the verdict of before, and nothing attached.
    for args in [
        &["-o", "json", "-"][..],
        &["-o", "json", "--runtime-class", "nvidia", "-"],
    ] {
        let o = admit(args, &sliced_iluvatar());
        assert_eq!(o.status.code(), Some(0));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(runtime_class_ops(&v).is_empty(), "{args:?}: {}", v["patch"]);
        assert!(v["pod"]["spec"].get("runtimeClassName").is_none());
    }

    // Text, the list comma-separated in the environment, as the flag's variable.
    let o = admit_with(
        &["-"],
        &sliced_iluvatar(),
        &[("ADMIT_RUNTIME_CLASS", "nvidia,iluvatar")],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("  add /spec/runtimeClassName \"iluvatar\"\n"),
        "{}",
        stdout(&o)
    );

    // An overridden runtime name is the one looked for.
    let o = admit_with(
        &[
            "-o",
            "json",
            "--runtime-class",
            "iluvatar",
            "--runtime-class",
            "corex",
            "-",
        ],
        &sliced_iluvatar(),
        &[("GPUSTACK_ILUVATAR_ACCELERATABLE_RUNTIME_NAME", "corex")],
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["pod"]["spec"]["runtimeClassName"], "corex");
}

#[test]
fn a_pods_own_runtime_class_is_kept_and_differing_classes_only_warn() {
    let own = sliced_iluvatar().replace("spec:\n", "spec:\n  runtimeClassName: corex-debug\n");
    let o = admit(&["-o", "json", "--runtime-class", "iluvatar", "-"], &own);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(runtime_class_ops(&v).is_empty(), "{}", v["patch"]);
    assert_eq!(v["pod"]["spec"]["runtimeClassName"], "corex-debug");

    let mixed = pod("          iluvatar.com/gpu: \"1\"\n          nvidia.com/gpu: \"1\"\n");
    let warning = "no runtimeClassName was attached: the Pod asks for accelerators of nvidia (RuntimeClass nvidia) and iluvatar (RuntimeClass iluvatar); set spec.runtimeClassName to the one its containers need";
    let o = admit(
        &["-o", "json", "--runtime-class", "iluvatar,nvidia", "-"],
        &mixed,
    );
    assert_eq!(o.status.code(), Some(0), "not refused");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["patch"], json!([]));
    assert_eq!(v["warnings"], json!([warning]));
    let o = admit(&["--runtime-class", "iluvatar,nvidia", "-"], &mixed);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "allowed\n")
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("Warning: {warning}\n")
    );
}
