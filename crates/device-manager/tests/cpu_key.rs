//! `device-manager cpu-key --node NODE.json` through the real binary: the key for a Node given as
//! JSON, as YAML and on standard input, and bad input (one clear line, exit 2).

use std::io::Write as _;
use std::process::{Command, Stdio};

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn cpu_key(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("cpu-key")
        .args(args)
        .env_remove("CPU_KEY_NODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("device-manager runs");
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let output = child.wait_with_output().unwrap();
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const EPYC_JSON: &str = r#"{
  "apiVersion": "v1",
  "kind": "Node",
  "metadata": {
    "name": "gpu-1",
    "labels": {
      "kubernetes.io/arch": "amd64",
      "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
      "feature.node.kubernetes.io/cpu-model.family": "25",
      "feature.node.kubernetes.io/cpu-model.id": "1"
    },
    "annotations": {
      "feature.gpustack.ai/cpu-name": "AMD EPYC 7763 64-Core Processor",
      "feature.gpustack.ai/cpu-physical-cores": "64"
    }
  },
  "status": {}
}"#;

const XEON_YAML: &str = r#"apiVersion: v1
kind: Node
metadata:
  name: cpu-1
  labels:
    feature.node.kubernetes.io/cpu-model.vendor_id: Intel
    feature.node.kubernetes.io/cpu-model.family: "6"
    feature.node.kubernetes.io/cpu-model.id: "85"
  annotations:
    feature.gpustack.ai/cpu-name: "@cpu.model.name"
"#;

#[test]
fn json_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.json");
    std::fs::write(&path, EPYC_JSON).unwrap();
    let run = cpu_key(&["--node", path.to_str().unwrap()], "");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "amd-epyc-7763\n");
}

#[test]
fn yaml_on_standard_input_falls_back_to_family_and_id() {
    let run = cpu_key(&["--node", "-"], XEON_YAML);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "intel-6-85\n");
}

#[test]
fn a_node_nfd_tells_nothing_about_is_generic() {
    let run = cpu_key(&["--node", "-"], "kind: Node\nmetadata:\n  name: bare\n");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "generic\n");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let cases: [(&str, &str); 6] = [
        ("", "is empty"),
        ("{not json", "is not YAML or JSON"),
        ("[1, 2]", "is not an object"),
        ("kind: Pod\nmetadata: {}\n", "is a Pod, not a Node"),
        ("metadata: {}\n", "has no kind"),
        (
            "kind: Node\nmetadata:\n  labels:\n    a: [1]\n",
            "metadata.labels.\"a\" is not a string",
        ),
    ];
    for (input, want) in cases {
        let run = cpu_key(&["--node", "-"], input);
        assert_eq!(run.status, 2, "{input:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{input:?}: {}", run.stdout);
        assert_eq!(run.stderr.lines().count(), 1, "{input:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{input:?}: {}", run.stderr);
        assert!(run.stderr.contains("standard input"), "{}", run.stderr);
    }
    let run = cpu_key(&["--node", "/nonexistent/node.json"], "");
    assert_eq!(run.status, 2);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("/nonexistent/node.json"),
        "{}",
        run.stderr
    );
}
