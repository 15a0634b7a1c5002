//! `device-manager doctor` through the real binary: a snapshot of its table and JSON on every
//! recorded host in `testdata/hosts/` (the hanging nvidia-smi with a 1 s deadline), plus hosts
//! built here from a recorded one to reach the other branches: nvidia-smi failing with a known
//! error, a node with the kubelet, /dev/kmsg, the preload library and CDI specs (current,
//! stale, unreadable), and `--gpus` with an unknown UUID.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{copy_tree, hosts as hosts_dir};

fn cdi_fixture() -> PathBuf {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/cdi/salilkadam-infrastructure__nvidia-575.64.03.yaml"
    ));
    assert!(path.is_file(), "fixture {} is missing", path.display());
    path
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn doctor(host: &Path, extra: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("doctor")
        .arg("--host-root")
        .arg(host)
        .args(["--nvidia-smi-timeout", "1"])
        .args(extra)
        .env_remove("HOST_ROOT")
        .env_remove("KUBELET_DIR")
        .env_remove("LIBRARY_DIR")
        .env_remove("KMSG_PATH")
        .env_remove("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY")
        .output()
        .expect("device-manager runs");
    Run {
        status: output.status.code().unwrap_or(-1),
        // The one figure that changes between runs.
        stdout: redact(&String::from_utf8_lossy(&output.stdout)),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn redact(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("answered in ") {
        let start = at + "answered in ".len();
        out.push_str(&rest[..start]);
        let digits = rest[start..].bytes().take_while(u8::is_ascii_digit).count();
        out.push_str("[N]");
        rest = &rest[start + digits..];
    }
    out.push_str(rest);
    out
}

fn all_hosts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(hosts_dir())
        .expect("testdata/hosts exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert!(
        names.len() >= 6,
        "expected the recorded hosts, found {names:?}"
    );
    names
}

/// Hosts where a check fails: doctor exits 1 there, 0 elsewhere. The K80 (its 430 driver
/// answers "Not Found"), the L4 and the WSL 2 host (no CUDA version was captured) report no CUDA
/// version, which fails the driver check (seed 002: without it NVML does not initialise).
/// AMD's host without a driver fails its `amdgpu-driver` and `kfd` checks; Ascend's whose driver
/// will not initialise its `npu-smi` check; Hygon's silent driver its `hygon-driver` and `hy-smi`
/// checks; the two hosts whose Iluvatar or Moore Threads driver does not answer their tool check;
/// Cambricon's and MetaX's hosts without a driver theirs (`cambricon-driver`, `metax-driver`);
/// T-Head's without its driver loaded `alixpu-driver` and `ppu-smi`.
const FAILING: &[&str] = &[
    "amd-no-driver",
    "ascend-driver-not-initialised",
    "azure-4x-k80",
    "cambricon-no-driver",
    "hygon-4x-k100ai-registry-unreadable",
    "hygon-driver-silent",
    "iluvatar-driver-not-answering",
    "metax-no-driver",
    "mthreads-driver-not-answering",
    "no-driver",
    "passthrough-l4",
    "smi-hangs",
    "thead-driver-not-loaded",
    "wsl2-rtx2080super",
];

/// Hosts where a GPU fails its per-GPU `health` check (seed 002): only the table run, which
/// passes `--gpus`, exits 1; the node's own checks warn.
const GPU_FAILING: &[&str] = &["hgx-h100-8gpu-gpu3-remap-pending"];

#[test]
fn doctor_on_every_recorded_host() {
    for name in all_hosts() {
        let dir = hosts_dir().join(&name);
        let table = doctor(&dir, &["--gpus"]);
        let want = if FAILING.contains(&name.as_str()) {
            1
        } else {
            0
        };
        let table_want = if GPU_FAILING.contains(&name.as_str()) {
            1
        } else {
            want
        };
        assert_eq!(
            table.status, table_want,
            "{name}: {}{}",
            table.stdout, table.stderr
        );
        insta::assert_snapshot!(format!("doctor-table-{name}"), table.stdout);

        let json = doctor(&dir, &["-o", "json"]);
        assert_eq!(json.status, want, "{name}: {}", json.stderr);
        let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(value["passed"], want == 0, "{name}");
        insta::assert_json_snapshot!(format!("doctor-json-{name}"), value);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn nvidia_smi_failing_gets_the_hint_for_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path();
    copy_tree(&hosts_dir().join("dual-rtx-a5000"), host);
    std::fs::remove_dir_all(host.join("commands")).unwrap();
    write(&host.join("commands/q-x/argv"), "nvidia-smi\n-q\n-x\n");
    write(
        &host.join("commands/q-x/stdout"),
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
    );
    write(&host.join("commands/q-x/status"), "9\n");
    let run = doctor(
        host,
        &["--gpus", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"],
    );
    assert_eq!(run.status, 1, "{}", run.stderr);
    insta::assert_snapshot!("doctor-table-smi-cannot-reach-driver", run.stdout);
}

#[test]
fn a_kubernetes_node_with_everything_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path();
    copy_tree(&hosts_dir().join("dual-rtx-a5000"), host);
    let root = host.join("root");
    write(&root.join("dev/kmsg"), "");
    write(
        &root.join("var/lib/kubelet/device-plugins/kubelet.sock"),
        "",
    );
    write(&root.join("var/lib/kubelet/pod-resources/kubelet.sock"), "");
    write(
        &root.join("var/lib/gpustack/operator/lib/cuda-13/libgpustack-preload.so"),
        "",
    );
    // A JSON vendor spec naming both GPUs, our own spec (skipped), another kind (skipped).
    write(
        &root.join("var/run/cdi/nvidia.json"),
        r#"{"cdiVersion":"0.7.0","kind":"nvidia.com/gpu","devices":[
            {"name":"0","containerEdits":{}},
            {"name":"GPU-12345678-aaaa-bbbb-cccc-0123456789ab","containerEdits":{}},
            {"name":"GPU-12345678-aaaa-bbbb-cccc-0123456789cd","containerEdits":{}},
            {"name":"all","containerEdits":{}}]}"#,
    );
    write(
        &root.join("var/run/cdi/gpustack-hold.json"),
        "not even JSON",
    );
    write(
        &root.join("etc/cdi/rdma.yaml"),
        "cdiVersion: 0.5.0\nkind: example.com/rdma\ndevices: []\n",
    );
    // containerd with NVIDIA's runtime as the default: the envvar strategy works here.
    write(
        &root.join("etc/containerd/config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n",
    );
    let run = doctor(host, &["--gpus"]);
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    insta::assert_snapshot!("doctor-table-kubernetes-node", run.stdout);

    // NVIDIA's generated YAML names another GPU: the spec is stale for this node; a torn
    // spec is named as unreadable; an unknown UUID fails the per-GPU diagnosis.
    std::fs::remove_file(root.join("var/run/cdi/nvidia.json")).unwrap();
    std::fs::copy(cdi_fixture(), root.join("etc/cdi/nvidia.yaml")).unwrap();
    write(
        &root.join("etc/cdi/torn.json"),
        "{\"kind\":\"nvidia.com/gpu\",\"devi",
    );
    let run = doctor(
        host,
        &["--gpus", "GPU-00000000-dead-beef-0000-000000000000"],
    );
    assert_eq!(run.status, 1, "{}", run.stderr);
    insta::assert_snapshot!("doctor-table-stale-cdi-unknown-gpu", run.stdout);
}

#[test]
fn a_forced_strategy_the_engine_cannot_carry_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path();
    copy_tree(&hosts_dir().join("dual-rtx-a5000"), host);
    // containerd with runc as the default and CDI off: neither channel can carry a grant.
    write(
        &host.join("root/etc/containerd/config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["doctor", "--host-root", host.to_str().unwrap()])
        .env(
            "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY",
            "cdi-annotations",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("injection"))
        .unwrap_or_else(|| panic!("no injection check in:\n{stdout}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(line.contains("does not resolve CDI"), "{line}");
}

#[test]
fn a_host_root_that_does_not_exist_is_one_clear_line() {
    let run = doctor(Path::new("/nonexistent/host"), &[]);
    assert_eq!(run.status, 2);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("/nonexistent/host"), "{}", run.stderr);
}

#[test]
fn doctor_looks_for_the_library_and_the_kernel_log_where_serve_does() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    copy_tree(&hosts_dir().join("dual-rtx-a5000"), &host);
    write(&host.join("root/opt/staged/cuda-13/libvgpu.so"), "");
    let kmsg = dir.path().join("kmsg");
    write(&kmsg, "");
    let check = |run: &Run, name: &str| -> serde_json::Value {
        let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        value["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check: {value}"))
    };
    // The defaults: neither is under the recorded root.
    let run = doctor(&host, &["-o", "json"]);
    assert_eq!(check(&run, "preload")["status"], "warn");
    assert_eq!(check(&run, "kmsg")["status"], "warn");
    // The DaemonSet's environment (LIBRARY_DIR, KMSG_PATH), as flags.
    let run = doctor(
        &host,
        &[
            "-o",
            "json",
            "--library-dir",
            "/opt/staged",
            "--kmsg-path",
            kmsg.to_str().unwrap(),
        ],
    );
    let preload = check(&run, "preload");
    assert_eq!(preload["status"], "ok", "{preload}");
    assert!(
        preload["reason"]
            .as_str()
            .unwrap()
            .contains("/opt/staged/cuda-13 holds libvgpu.so"),
        "{preload}"
    );
    let kernel_log = check(&run, "kmsg");
    assert_eq!(kernel_log["status"], "ok", "{kernel_log}");
    assert!(
        kernel_log["reason"]
            .as_str()
            .unwrap()
            .starts_with(kmsg.to_str().unwrap()),
        "{kernel_log}"
    );
}

#[test]
fn amd_doctor_names_a_missing_render_node_and_sees_the_staged_shim() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    copy_tree(&hosts_dir().join("amd-rocm-smi-only-rx7800xt"), &host);
    write(
        &host.join("root/var/lib/gpustack/operator/lib/amd/libvrocm.so"),
        "",
    );
    let run = doctor(&host, &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "ok    slicing-library  /var/lib/gpustack/operator/lib/amd/libvrocm.so is staged"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "warn  amd-smi          amd-smi is not installed; rocm-smi answers in its place"
        ),
        "{}",
        run.stdout
    );
    std::fs::remove_file(host.join("root/dev/dri/renderD128")).unwrap();
    let run = doctor(&host, &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("fail  device-nodes     missing on the host: /dev/dri/renderD128"),
        "{}",
        run.stdout
    );
}
