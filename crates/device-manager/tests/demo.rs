//! `device-manager demo` through the real binary: the scripted scenario end to end (`-o json`,
//! every step's outcome), the table form without colour off a terminal and with nothing on
//! stderr, `--pods FILE` (a good file, a bad one's one-line error), `--host-root` on another
//! recorded host, on one of another manufacturer with its own Pods, and on one made by
//! `record`, and `--cluster mixed` (a node per manufacturer family, one Pod each).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod support;
use support::{IMAGE_PATH, hosts, live_host};

/// The GPUs of `hgx-h100-8gpu`, by index.
const GPU0: &str = "GPU-63d1e50a-b952-d15c-0740-12bc14859142";
const GPU1: &str = "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda";
/// Seed 003's message for `nvidia.com/gpu.sliced: "2"`, word for word.
const SLICED_IS_ONE: &str = "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet";

fn demo(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("demo")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("HOST_ROOT")
        .env_remove("DATA_DIR")
        .env_remove("LIBRARY_DIR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_demo(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (status, stdout, stderr) = demo(&all);
    assert_eq!(status, 0, "demo failed: {stderr}\n{stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn step<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {report:#}"))
}

/// The only Pod of a step, or the named one.
fn pod<'a>(step: &'a Value, name: &str) -> &'a Value {
    step["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == name)
        .unwrap_or_else(|| panic!("no pod {name}: {step:#}"))
}

fn grant<'a>(pod: &'a Value, container: &str) -> &'a Value {
    pod["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["container"] == container)
        .unwrap_or_else(|| panic!("no grant for {container}: {pod:#}"))
}

fn gpus(grant: &Value) -> Vec<u64> {
    grant["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["index"].as_u64().unwrap())
        .collect()
}

fn row(step: &Value, index: u64) -> &Value {
    step["ledger"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["index"] == index)
        .unwrap()
}

#[test]
fn the_scripted_demo_walks_every_step_of_the_real_system() {
    let report = json_demo(&[]);
    let names: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "exclusive",
            "shared",
            "slices-pack",
            "slice-elsewhere",
            "partition",
            "sidecar",
            "rejected",
            "xid",
            "restart"
        ]
    );
    assert!(
        report["hosts"]["node-a"]
            .as_str()
            .unwrap()
            .ends_with("hgx-h100-8gpu")
    );
    assert!(
        report["hosts"]["node-b"]
            .as_str()
            .unwrap()
            .ends_with("hgx-h100-8gpu-mig")
    );

    // Exclusive: two whole GPUs, the first two (one NUMA node), both in NVIDIA_VISIBLE_DEVICES.
    let exclusive = step(&report, "exclusive");
    let trainer = pod(exclusive, "trainer");
    assert_eq!(trainer["allowed"], true);
    assert_eq!(trainer["node"], "node-a");
    let g = grant(trainer, "main");
    assert_eq!(g["family"], "exclusive");
    assert_eq!(gpus(g), [0, 1]);
    assert_eq!(g["env"]["NVIDIA_VISIBLE_DEVICES"], format!("{GPU0},{GPU1}"));
    assert_eq!(row(exclusive, 0)["mode"], "exclusive");
    assert_eq!(row(exclusive, 0)["holders"][0], "demo/trainer:main");

    // Shared: the webhook pins it to nodes with two GPUs; one share on each of two others.
    let shared = step(&report, "shared");
    let notebook = pod(shared, "notebook");
    assert_eq!(notebook["allowed"], true);
    let pinned = notebook["patch"].to_string();
    assert!(
        pinned.contains("acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count"),
        "{pinned}"
    );
    let g = grant(notebook, "main");
    assert_eq!(g["family"], "shared");
    let shared_gpus = gpus(g);
    assert_eq!(shared_gpus.len(), 2);
    assert!(shared_gpus.iter().all(|i| *i > 1), "{shared_gpus:?}");
    for i in &shared_gpus {
        assert_eq!(row(shared, *i)["shares"], 1);
    }

    // Two slices pack onto one GPU; the webhook folded their units (p × 16,000) and cores.
    let pack = step(&report, "slices-pack");
    let a = pod(pack, "slice-a");
    let b = pod(pack, "slice-b");
    assert_eq!(
        a["request"]["main"]["nvidia.com/gpu.sliced.units"],
        "800000"
    );
    assert_eq!(
        b["request"]["main"]["nvidia.com/gpu.sliced.units"],
        "480000"
    );
    assert_eq!(
        b["request"]["main"]["nvidia.com/gpu.sliced.cores-percentage"],
        "100"
    );
    let (ga, gb) = (grant(a, "main"), grant(b, "main"));
    assert_eq!(
        (ga["family"].as_str(), gb["family"].as_str()),
        (Some("sliced"), Some("sliced"))
    );
    let slice_gpu = gpus(ga);
    assert_eq!(slice_gpu.len(), 1);
    assert_eq!(
        gpus(gb),
        slice_gpu,
        "the second slice packs beside the first"
    );
    assert!(!shared_gpus.contains(&slice_gpu[0]) && slice_gpu[0] > 1);
    assert_eq!(ga["env"]["CUDA_DEVICE_SM_LIMIT"], "40");
    assert!(
        ga["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"]
            .as_str()
            .unwrap()
            .ends_with('m')
    );
    assert!(
        ga["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["hostPath"]
                .as_str()
                .unwrap()
                .ends_with("cuda-13/libvgpu.so")),
        "{ga:#}"
    );
    assert_eq!(row(pack, slice_gpu[0])["slices"], 2);
    assert_eq!(row(pack, slice_gpu[0])["usedUnits"], 800_000 + 480_000);

    // 60 % does not fit beside 80 %: another GPU, not one held in another mode.
    let elsewhere = step(&report, "slice-elsewhere");
    let c = grant(pod(elsewhere, "slice-c"), "main");
    assert_eq!(c["family"], "sliced");
    let c_gpu = gpus(c);
    assert_ne!(c_gpu, slice_gpu);
    assert!(c_gpu[0] > 1 && !shared_gpus.contains(&c_gpu[0]));

    // A MIG 3g.40gb on the MIG node (GPU 0), its MIG device injected; then reclaimed.
    let partition = step(&report, "partition");
    let mig = pod(partition, "mig-pod");
    assert_eq!(mig["allowed"], true);
    assert_eq!(mig["node"], "node-b");
    assert!(
        mig["request"]["main"]["nvidia.com/gpu.partitioned.units"]
            .as_str()
            .is_some_and(|u| u.parse::<u64>().unwrap() > 0),
        "{mig:#}"
    );
    let g = grant(mig, "main");
    assert_eq!(g["family"], "partitioned");
    assert_eq!(gpus(g), [0]);
    assert_eq!(g["partition"]["profile"], "3g.40gb", "{g:#}");
    let mig_uuid = g["env"]["NVIDIA_VISIBLE_DEVICES"].as_str().unwrap();
    assert!(mig_uuid.starts_with("MIG-"), "{mig_uuid}");
    let reclaim = &partition["reclaim"];
    assert_eq!(reclaim["released"], true);
    assert_eq!(reclaim["migUuid"], mig_uuid);
    assert_eq!(
        (
            &reclaim["tokensBefore"],
            &reclaim["tokensWhileHeld"],
            &reclaim["tokensAfter"]
        ),
        (&Value::from(56), &Value::from(53), &Value::from(56))
    );

    // The SSH sidecar sees exactly its workload container's GPU and takes nothing.
    let sidecar = step(&report, "sidecar");
    let workload = pod(sidecar, "ssh-workload");
    let (main, sshd) = (grant(workload, "main"), grant(workload, "sshd"));
    assert_eq!(main["family"], "exclusive");
    assert_eq!(sshd["family"], "visibility");
    assert_eq!(sshd["resource"], "device.gpustack.ai/nvidia.visibility");
    assert_eq!(gpus(sshd), gpus(main));
    assert_eq!(
        sshd["env"]["NVIDIA_VISIBLE_DEVICES"],
        main["env"]["NVIDIA_VISIBLE_DEVICES"]
    );
    assert_eq!(sshd["units"], Value::Null);

    // Refused by the webhook with seed 003's message, never reaching a node.
    let rejected = step(&report, "rejected");
    let bad = pod(rejected, "bad-slice");
    assert_eq!(bad["allowed"], false);
    assert_eq!(bad["message"], SLICED_IS_ONE);
    assert_eq!(bad["node"], Value::Null);
    assert!(bad["grants"].as_array().unwrap().is_empty());

    // A hardware XID on the last free GPU: its token Unhealthy, the ledger says so.
    let xid = step(&report, "xid");
    let gpu = xid["xid"]["gpu"]["index"].as_u64().unwrap();
    let uuid = xid["xid"]["gpu"]["uuid"].as_str().unwrap().to_string();
    assert_eq!(gpu, 7, "GPU 7 is the only free one by then");
    assert_eq!(xid["xid"]["health"], "Unhealthy");
    assert!(xid["xid"]["line"].as_str().unwrap().contains(": 79, "));
    assert_eq!(row(xid, gpu)["healthy"], false);
    assert_eq!(row(xid, 0)["healthy"], true);

    // The restart loses nothing: the same ledger, the XID's GPU still out of service.
    let restart = step(&report, "restart");
    assert_eq!(restart["restart"]["equal"], true);
    assert_eq!(restart["restart"]["before"], restart["restart"]["after"]);
    assert_eq!(
        restart["restart"]["before"]["grants"]
            .as_array()
            .unwrap()
            .len(),
        6,
        "trainer, notebook, three slices, the sidecar's workload"
    );
    assert!(
        restart["restart"]["unhealthyAfter"]
            .as_array()
            .unwrap()
            .contains(&Value::from(uuid.clone())),
        "{restart:#}"
    );

    // The Devices objects as published: node-a's status carries the XID fault.
    let devices = &report["devices"]["node-a"];
    assert_eq!(devices["kind"], "Devices");
    let faults = devices["status"]["faults"].as_array().unwrap();
    assert!(
        faults
            .iter()
            .any(|f| f["uuid"] == uuid.as_str() && f["xid"] == 79),
        "{faults:?}"
    );
    assert_eq!(report["devices"]["node-b"]["kind"], "Devices");
}

#[test]
fn the_table_has_no_colour_off_a_terminal_and_ends_with_the_devices_yaml() {
    let (status, stdout, stderr) = demo(&[]);
    assert_eq!(status, 0, "{stderr}");
    assert!(!stdout.contains('\x1b'), "colour codes off a terminal");
    for want in [
        "── 1. an exclusive Pod of two whole GPUs ──",
        "webhook   allowed",
        "webhook   denied",
        SLICED_IS_ONE,
        "ledger of node-a",
        "env NVIDIA_VISIBLE_DEVICES=",
        "ledger unchanged",
        "Devices node-a\napiVersion: gpustack.ai/",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
}

const GOOD_PODS: &str = r#"
- apiVersion: v1
  kind: Pod
  metadata:
    name: two-gpus
    labels: {kueue.x-k8s.io/queue-name: demo}
  spec:
    containers:
      - name: main
        image: busybox
        resources: {limits: {nvidia.com/gpu: "2"}}
- metadata: {name: half, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: demo}}
  spec:
    containers:
      - name: main
        resources:
          limits:
            nvidia.com/gpu.sliced: "1"
            nvidia.com/gpu.sliced.memory-mib: "40000"
- metadata: {name: two-partitions, labels: {kueue.x-k8s.io/queue-name: demo}}
  spec:
    containers:
      - name: main
        resources:
          limits:
            nvidia.com/gpu.partitioned: "2"
            nvidia.com/gpu.partitioned.mig-1g.10gb: "1"
"#;

#[test]
fn pods_from_a_file_are_submitted_instead_of_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pods.yaml");
    std::fs::write(&file, GOOD_PODS).unwrap();
    let report = json_demo(&["--pods", file.to_str().unwrap()]);
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "one step per Pod, no script");
    let two = &steps[0]["pods"][0];
    assert_eq!(two["pod"], "two-gpus");
    assert_eq!(gpus(grant(two, "main")), [0, 1]);
    // A MiB budget is folded against the pool's VRAM (floor(m × 1,600,000 / 81559)).
    let half = &steps[1]["pods"][0];
    assert_eq!(half["namespace"], "team-a");
    assert_eq!(
        half["request"]["main"]["nvidia.com/gpu.sliced.units"],
        (40_000u64 * 1_600_000 / 81_559).to_string()
    );
    assert_eq!(grant(half, "main")["family"], "sliced");
    assert_eq!(steps[1]["ledger"]["node"], "node-a");
    let two_partitions = &steps[2]["pods"][0];
    assert_eq!(two_partitions["allowed"], false);
    assert_eq!(
        two_partitions["message"],
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: \"2\": a partition request is always a single accelerator; request one Pod per instance"
    );
}

#[test]
fn a_bad_pods_file_is_refused_in_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "- metadata: {name: ok}\n  spec: {containers: [{name: main}]}\n- metadata: {name: broken}\n  spec: {}\n",
    )
    .unwrap();
    let (status, stdout, stderr) = demo(&["--pods", file.to_str().unwrap()]);
    assert_eq!(status, 2, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr,
        format!(
            "device-manager: --pods {}: item 2 (broken): spec.containers is missing\n",
            file.display()
        )
    );
    let (status, _, stderr) = demo(&["--pods", "/nonexistent/pods.yaml"]);
    assert_eq!(status, 2);
    assert!(
        stderr.starts_with("device-manager: --pods /nonexistent/pods.yaml: cannot read it: ")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// The main node's GPUs in the report, and that every step still answered.
fn main_node_gpus(report: &Value) -> usize {
    step(report, "exclusive")["ledger"]["rows"]
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn another_recorded_host_and_one_made_by_record_run_the_script() {
    // Two RTX A5000s: the script runs on them; what does not fit is refused, not fatal.
    let host = hosts().join("dual-rtx-a5000");
    let report = json_demo(&["--host-root", host.to_str().unwrap()]);
    assert_eq!(report["hosts"]["node-a"], host.to_str().unwrap());
    assert_eq!(main_node_gpus(&report), 2);
    let trainer = pod(step(&report, "exclusive"), "trainer");
    assert_eq!(gpus(grant(trainer, "main")), [0, 1]);
    let notebook = pod(step(&report, "shared"), "notebook");
    assert!(
        notebook["error"]
            .as_str()
            .unwrap()
            .starts_with("Allocate refused")
            || notebook["error"].as_str().unwrap().contains("insufficient"),
        "{notebook:#}"
    );
    assert_eq!(step(&report, "restart")["restart"]["equal"], true);

    // A recording `record` made of that host, live (nvidia-smi a stand-in answering from it at
    // its host path, run inside the root: that needs root, which CI has).
    if !accel_testkit::live_root::skip_unless_chroot(
        "another_recorded_host_and_one_made_by_record_run_the_script (record)",
    ) {
        return;
    }
    let (out, live) = live_host(&host, &[("nvidia-smi", "/usr/bin/nvidia-smi")]);
    let recording = out.path().join("my-node");
    let recorded = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("record")
        .arg(&recording)
        .arg("--host-root")
        .arg(&live)
        .env("PATH", IMAGE_PATH)
        .env_remove("HOST_ROOT")
        .output()
        .unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let report = json_demo(&["--host-root", recording.to_str().unwrap()]);
    assert_eq!(main_node_gpus(&report), 2);
    assert_eq!(
        gpus(grant(pod(step(&report, "exclusive"), "trainer"), "main")),
        [0, 1]
    );
    // The demo wrote nothing into the recording.
    assert!(!recording.join("root/var/lib/gpustack").exists());
    assert!(!Path::new(&host).join("root/var/lib/gpustack").exists());

    // A folder that is no recording is refused in one line.
    let (status, _, stderr) = demo(&["--host-root", out.path().to_str().unwrap()]);
    assert_eq!(status, 2);
    assert!(stderr.contains("not a recorded host"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (status, _, stderr) = demo(&["--mig-host-root", out.path().to_str().unwrap()]);
    assert_eq!(status, 2);
    assert_eq!(
        stderr,
        format!(
            "device-manager: --mig-host-root {}: not a recorded host (no recorded-host.json); make one with `device-manager record DIR`\n",
            out.path().display()
        )
    );
}

/// A newcomer's first run (`cargo run -p device-manager -- demo`) says nothing on stderr: the
/// recorded hosts captured no network tree, which is a note (at `info`, not shown), never an
/// `ERROR … could not enumerate network interfaces`.
#[test]
fn the_first_run_logs_nothing_on_stderr() {
    let (status, stdout, stderr) = demo(&[]);
    assert_eq!(status, 0, "{stderr}");
    assert!(stdout.contains("Devices node-a"), "{stdout}");
    assert_eq!(stderr, "", "the default demo logged");
}

/// The grant of a step's only Pod, asserting the Pod was admitted on `node`.
fn only_grant<'a>(report: &'a Value, step_name: &str, node: &str) -> &'a Value {
    let step = step(report, step_name);
    let pods = step["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{step:#}");
    let pod = &pods[0];
    assert_eq!(pod["allowed"], true, "{pod:#}");
    assert_eq!(pod["error"], Value::Null, "{pod:#}");
    assert_eq!(pod["node"], node, "{pod:#}");
    grant(pod, "main")
}

fn device_paths(grant: &Value) -> Vec<&str> {
    grant["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["hostPath"].as_str().unwrap())
        .collect()
}

/// `--cluster mixed`: a node per manufacturer family (NVIDIA, AMD, Ascend, Cambricon), each
/// serving its own recorded host, and one Pod on each, granted one whole accelerator with that
/// manufacturer's own injection; still a matter of seconds.
#[test]
fn the_mixed_cluster_runs_a_node_per_manufacturer_with_one_pod_each() {
    let started = std::time::Instant::now();
    let report = json_demo(&["--cluster", "mixed"]);
    let took = started.elapsed();
    let manufacturers = &report["manufacturers"];
    for (node, manufacturer, host) in [
        ("node-nvidia", "nvidia", "hgx-h100-8gpu"),
        ("node-amd", "amd", "amd-8x-mi300x"),
        ("node-ascend", "ascend", "ascend-8x-910b2"),
        (
            "node-cambricon",
            "cambricon",
            "cambricon-8x-mlu370-cnmon-v5",
        ),
    ] {
        assert_eq!(manufacturers[node], manufacturer, "{report:#}");
        assert!(
            report["hosts"][node].as_str().unwrap().ends_with(host),
            "{report:#}"
        );
        assert_eq!(report["devices"][node]["kind"], "Devices", "{node}");
    }
    let names: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nvidia", "amd", "ascend", "cambricon"]);

    let nvidia = only_grant(&report, "nvidia", "node-nvidia");
    assert_eq!(
        (nvidia["resource"].as_str(), nvidia["family"].as_str()),
        (Some("nvidia.com/gpu"), Some("exclusive"))
    );
    assert_eq!(nvidia["env"]["NVIDIA_VISIBLE_DEVICES"], GPU0);
    let amd = only_grant(&report, "amd", "node-amd");
    assert_eq!(amd["resource"], "amd.com/gpu");
    assert!(device_paths(amd).contains(&"/dev/kfd"), "{amd:#}");
    let ascend = only_grant(&report, "ascend", "node-ascend");
    assert_eq!(ascend["resource"], "huawei.com/npu");
    assert_eq!(ascend["env"]["ASCEND_VISIBLE_DEVICES"], "0", "{ascend:#}");
    let cambricon = only_grant(&report, "cambricon", "node-cambricon");
    assert_eq!(cambricon["resource"], "cambricon.com/mlu");
    assert_eq!(cambricon["env"]["CAMBRICON_VISIBLE_DEVICES"], "0");
    assert!(
        device_paths(cambricon).contains(&"/dev/cambricon_dev0"),
        "{cambricon:#}"
    );
    assert!(
        took < std::time::Duration::from_secs(30),
        "the mixed cluster took {took:?}"
    );

    // The node flags name one node of the NVIDIA cluster: refused beside --cluster mixed.
    let (status, _, stderr) = demo(&["--cluster", "mixed", "--host-root", "/tmp"]);
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// `--host-root` takes a recorded host of any manufacturer: its daemon serves what the host
/// shows, `--pods` asking for its resources are granted there, and no NVIDIA MIG node is
/// started beside it; without `--pods`, one Pod of one of its accelerators is submitted. A
/// recording with no accelerator at all is refused in one line naming it.
#[test]
fn a_recorded_host_of_any_manufacturer_takes_pods_asking_for_its_resources() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("npus.yaml");
    std::fs::write(
        &file,
        r#"
- metadata: {name: two-npus, labels: {kueue.x-k8s.io/queue-name: demo}}
  spec:
    containers:
      - name: main
        resources: {limits: {huawei.com/npu: "2"}}
- metadata: {name: a-share, labels: {kueue.x-k8s.io/queue-name: demo}}
  spec:
    containers:
      - name: main
        resources: {limits: {huawei.com/npu.shared: "1"}}
"#,
    )
    .unwrap();
    let ascend = hosts().join("ascend-8x-910b2");
    let report = json_demo(&[
        "--host-root",
        ascend.to_str().unwrap(),
        "--pods",
        file.to_str().unwrap(),
    ]);
    assert_eq!(
        report["manufacturers"],
        serde_json::json!({"node-a": "ascend"}),
        "only the Ascend node: {report:#}"
    );
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    let two = grant(&steps[0]["pods"][0], "main");
    assert_eq!(two["family"], "exclusive");
    assert_eq!(gpus(two).len(), 2);
    assert!(
        two["env"]["ASCEND_VISIBLE_DEVICES"]
            .as_str()
            .is_some_and(|v| v.split(',').count() == 2),
        "{two:#}"
    );
    let share = grant(&steps[1]["pods"][0], "main");
    assert_eq!(share["family"], "shared");
    assert_eq!(steps[1]["ledger"]["node"], "node-a");

    // No --pods: one Pod of one of the host's accelerators (a T-Head PPU: its nodes only).
    let thead = hosts().join("thead-16x-zw810e");
    let report = json_demo(&["--host-root", thead.to_str().unwrap()]);
    assert_eq!(report["manufacturers"]["node-a"], "thead");
    let ppu = only_grant(&report, "thead", "node-a");
    assert_eq!(ppu["resource"], "alibabacloud.com/ppu");
    let nodes = device_paths(ppu);
    assert_eq!(nodes[..2], ["/dev/alixpu", "/dev/alixpu_ctl"], "{ppu:#}");
    assert!(ppu["env"].as_object().unwrap().is_empty(), "{ppu:#}");

    // A recording whose bus shows an NVIDIA GPU but whose driver answers nothing.
    let none = hosts().join("no-driver");
    let (status, stdout, stderr) = demo(&["--host-root", none.to_str().unwrap()]);
    assert_eq!(status, 2, "{stdout}");
    assert_eq!(
        stderr.lines().last(),
        Some(
            format!(
                "device-manager: --host-root {}: no NVIDIA accelerator detected on this recorded host",
                none.display()
            )
            .as_str()
        ),
        "{stderr}"
    );
}
