//! A live root is read as a live root (issue: "On a real node nothing is detected"): a folder
//! without the recording mark is never taken for a recording, whatever it holds — every Linux
//! `/` holds `/root` — and its programs are the host's own, found under the root in the
//! manufacturer's places and run inside it, never the test machine's.
//!
//! Most tests here enter a live-looking root with `chroot`, as the daemon in its image does:
//! they need root (CI runs as root) and say SKIPPED elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use accel_testkit::live_root::skip_unless_chroot;

mod support;
use support::{IMAGE_PATH, hosts, live_host};

/// A fresh work folder holding a live-looking root made from `recorded` with nvidia-smi a
/// stand-in at `/usr/bin/nvidia-smi` inside it.
fn live_with_stand_in(recorded: &Path) -> (tempfile::TempDir, PathBuf) {
    live_host(recorded, &[("nvidia-smi", "/usr/bin/nvidia-smi")])
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn device_manager(args: &[&str], path: &str) -> Run {
    device_manager_with(args, &[("PATH", path)])
}

/// The binary with only `env` in its environment: nothing of the test's own.
fn device_manager_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("device-manager runs");
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_of(args: &[&str], run: Run) -> serde_json::Value {
    assert_eq!(run.status, 0, "{args:?}: {}", run.stderr);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", run.stdout))
}

/// The JSON of a run on this machine's own `/`: exit 1 (a manufacturer other than the one under
/// test not measured) is this machine's business, not the test's — a rig script's leftover
/// device node under `/dev` is such a finding — and the inventory is still printed.
fn json_of_this_machine(args: &[&str], run: Run) -> serde_json::Value {
    assert!(
        run.status == 0 || run.status == 1,
        "{args:?} exited {}: {}",
        run.status,
        run.stderr
    );
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", run.stdout))
}

/// The NVIDIA section's accelerators.
fn nvidia_gpus(json: &serde_json::Value) -> Vec<serde_json::Value> {
    json["manufacturers"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "nvidia"))
        .and_then(|m| m["accelerators"].as_array())
        .cloned()
        .unwrap_or_default()
}

fn detect_json(args: &[&str], path: &str) -> serde_json::Value {
    json_of(args, device_manager(args, path))
}

fn gpus(json: &serde_json::Value) -> Vec<serde_json::Value> {
    json["manufacturers"]
        .as_array()
        .and_then(|m| m.first())
        .and_then(|m| m["accelerators"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// One recorded host of every manufacturer, and where its tools stand on the live-looking host:
/// a usual host path, off the host's own search path where the vendor installs it there (Ascend's
/// driver tools, HYHAL, CoreX, the MetaX driver, the PPU SDK), so only the manufacturer's row
/// finds it.
/// A manufacturer, its recorded host, and each of its tools with the host path it stands at.
type LiveHost = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const NINE: [LiveHost; 9] = [
    (
        "nvidia",
        "hgx-h100-8gpu",
        &[("nvidia-smi", "/usr/bin/nvidia-smi")],
    ),
    (
        "amd",
        "amd-8x-mi300x",
        &[("amd-smi", "/opt/rocm/bin/amd-smi")],
    ),
    (
        "ascend",
        "ascend-8x-910b2",
        &[("npu-smi", "/usr/local/Ascend/driver/tools/npu-smi")],
    ),
    (
        "cambricon",
        "cambricon-8x-mlu370-cnmon-v5",
        &[("cnmon", "/usr/bin/cnmon")],
    ),
    (
        "hygon",
        "hygon-4x-k100ai",
        &[("hy-smi", "/opt/hyhal/bin/hy-smi")],
    ),
    (
        "iluvatar",
        "iluvatar-16x-bi-v150",
        &[("ixsmi", "/usr/local/corex/bin/ixsmi")],
    ),
    (
        "metax",
        // The MetaX host that records every query the detector runs (`--count-ecc` too).
        "metax-8x-c500-gpu1-dram-ue",
        &[("mx-smi", "/opt/mxdriver/bin/mx-smi")],
    ),
    (
        "mthreads",
        "mthreads-8x-s4000",
        &[("mthreads-gmi", "/usr/bin/mthreads-gmi")],
    ),
    (
        "thead",
        "thead-16x-zw810e",
        &[("ppu-smi", "/usr/local/PPU_SDK/ppu-smi/bin/ppu-smi")],
    ),
];

/// Issue 42 item 2: for every manufacturer, a live-looking root built from one of its recorded
/// hosts, read exactly as the image's DaemonSet reads it (`HOST_ROOT`, the image's `PATH`, no
/// other variable), detects what the recorded host detects: the same accelerators with the same
/// identities, every fact and note alike. The tool runs inside the root; the test machine has
/// none of them.
#[test]
fn every_manufacturer_reads_a_live_root_as_the_image_does() {
    if !skip_unless_chroot("every_manufacturer_reads_a_live_root_as_the_image_does") {
        return;
    }
    for (manufacturer, host, tools) in NINE {
        let recorded = hosts().join(host);
        let (_work, live) = live_host(&recorded, tools);
        let args = ["detect", "-o", "json"];
        let live_text = live.to_str().unwrap();
        let got = json_of(
            &args,
            device_manager_with(&args, &[("HOST_ROOT", live_text), ("PATH", IMAGE_PATH)]),
        );
        let want = detect_json(
            &[
                "detect",
                "--host-root",
                recorded.to_str().unwrap(),
                "-o",
                "json",
            ],
            "/nonexistent",
        );
        let names: Vec<&str> = got["manufacturers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["name"].as_str())
            .collect();
        assert_eq!(names, [manufacturer], "{host}: {got}");
        let listed = gpus(&got);
        assert!(!listed.is_empty(), "{host}: {got}");
        assert!(
            listed.iter().all(|a| a["uuid"].is_string()),
            "{host}: every accelerator has its identity: {got}"
        );
        assert_eq!(
            got, want,
            "{host}: the live read differs from the recording"
        );
    }
}

/// The same live root without the tool at any of its places: the tool is looked for on the
/// host, never on this machine's `PATH` (a stand-in there does not count), and the operator is
/// told which tool is missing. NVIDIA's procfs still lists the GPUs with their UUIDs.
#[test]
fn a_tool_only_this_machine_has_is_not_the_hosts() {
    let recorded = hosts().join("hgx-h100-8gpu");
    let work = tempfile::tempdir().unwrap();
    let live = work.path().join("live");
    accel_testkit::live_root::live_root_from(&recorded, &live);
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    support::stand_in_nvidia_smi(&recorded, &bin);
    let args = [
        "detect",
        "--host-root",
        live.to_str().unwrap(),
        "-o",
        "json",
    ];
    let run = device_manager(&args, &support::path_with(&bin));
    assert_eq!(run.status, 0, "{}", run.stderr);
    let procfs_only: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let listed = gpus(&procfs_only);
    assert_eq!(listed.len(), 8, "{procfs_only}");
    assert!(
        listed.iter().all(|g| g["uuid"].is_string()),
        "{procfs_only}"
    );
    assert!(
        listed.iter().all(|g| g["memoryMiB"].is_null()),
        "nvidia-smi did not run: {procfs_only}"
    );
    assert!(
        run.stderr.contains("nvidia-smi not found"),
        "stderr: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("recorded-host.json"),
        "a folder without commands/ is not noted as an unmarked recording: {}",
        run.stderr
    );
}

#[test]
fn a_recording_without_its_mark_is_read_live_and_says_so() {
    let recorded = hosts().join("dual-rtx-a5000");
    let work = tempfile::tempdir().unwrap();
    let copy = work.path().join("copy");
    support::copy_tree(&recorded, &copy);
    std::fs::remove_file(copy.join("recorded-host.json")).unwrap();
    let run = device_manager(
        &[
            "detect",
            "--host-root",
            copy.to_str().unwrap(),
            "-o",
            "json",
        ],
        "/nonexistent",
    );
    assert_eq!(run.status, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        gpus(&json).is_empty(),
        "read live, copy/ has no proc/driver/nvidia at its top: {json}"
    );
    assert!(
        run.stderr.contains("recorded-host.json") && run.stderr.contains("live host"),
        "the operator is told why: {}",
        run.stderr
    );

    // A mark of another format is refused with one line naming the file, not guessed at.
    std::fs::write(copy.join("recorded-host.json"), "{\"format\": 9}").unwrap();
    let run = device_manager(&["detect", "--host-root", copy.to_str().unwrap()], "/x");
    assert_eq!(run.status, 2, "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("recorded-host.json"), "{}", run.stderr);
}

/// `detect --host-root /` on this machine: the boot id is read from `/proc`, not `/root/proc`
/// (shown through the faults the daemon recorded for this boot), and nvidia-smi is the one in
/// the directory `GPUSTACK_NVIDIA_TOOLS_PATH` names (on the node itself the tool runs directly).
#[test]
fn detect_on_slash_reads_proc_not_root_proc() {
    let boot_path = Path::new("/proc/sys/kernel/random/boot_id");
    let boot_id = std::fs::read_to_string(boot_path).expect("every Linux has a boot id");
    let boot_id = boot_id.trim();
    assert!(
        !Path::new("/root/proc/sys/kernel/random/boot_id").exists(),
        "this test needs a machine whose /root is not a recording"
    );
    let recorded = hosts().join("hgx-h100-8gpu");
    let work = tempfile::tempdir().unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    support::stand_in_nvidia_smi(&recorded, &bin);
    let data = work.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let bin_text = bin.to_str().unwrap();
    let env = [
        ("PATH", IMAGE_PATH),
        ("GPUSTACK_NVIDIA_TOOLS_PATH", bin_text),
    ];

    let args = ["detect", "--host-root", "/", "-o", "json"];
    assert!(
        nvidia_gpus(&json_of_this_machine(
            &args,
            device_manager(&args, IMAGE_PATH)
        ))
        .is_empty(),
        "this machine has no nvidia-smi of its own"
    );
    let plain = json_of_this_machine(&args, device_manager_with(&args, &env));
    let listed = nvidia_gpus(&plain);
    assert_eq!(
        listed.len(),
        8,
        "the stand-in nvidia-smi the setting names ran: {plain}"
    );
    let first = listed[0]["uuid"].as_str().unwrap().to_string();
    let bus = listed[0]["busId"].as_str().unwrap().to_string();

    let faults = serde_json::json!({
        "bootId": boot_id,
        "faults": [{"type": "Xid79", "status": true, "deviceId": first,
                    "message": "GPU has fallen off the bus.", "xid": 79, "busId": bus,
                    "class": "hardware", "count": 1}]
    });
    std::fs::write(data.join("faults.json"), faults.to_string()).unwrap();
    let args = [
        "detect",
        "--host-root",
        "/",
        "--data-dir",
        data.to_str().unwrap(),
        "-o",
        "json",
    ];
    let with_data = json_of_this_machine(&args, device_manager_with(&args, &env));
    let gpu = &nvidia_gpus(&with_data)[0];
    assert_eq!(gpu["uuid"], first.as_str());
    assert_eq!(
        gpu["healthy"], false,
        "this boot's fault applies only when /proc's boot id was read: {with_data}"
    );
}

/// vfio: a GPU passed through to a VM is found in the live root's own sysfs (its function bound
/// to vfio-pci), with the daemon's memory, exactly as on the recording.
#[test]
fn a_passed_through_gpu_is_found_in_a_live_roots_sysfs() {
    if !skip_unless_chroot("a_passed_through_gpu_is_found_in_a_live_roots_sysfs") {
        return;
    }
    let recorded = hosts().join("passthrough-l4");
    let (_work, live) = live_with_stand_in(&recorded);
    let detect = |root: &Path, path: &str| {
        let data = tempfile::tempdir().unwrap();
        std::fs::copy(
            recorded.join("data/gpus-seen.json"),
            data.path().join("gpus-seen.json"),
        )
        .unwrap();
        detect_json(
            &[
                "detect",
                "--host-root",
                root.to_str().unwrap(),
                "--data-dir",
                data.path().to_str().unwrap(),
                "-o",
                "json",
            ],
            path,
        )
    };
    let live_read = detect(&live, IMAGE_PATH);
    let listed = gpus(&live_read);
    let passed = listed
        .iter()
        .find(|g| g["source"] == "passthrough")
        .unwrap_or_else(|| panic!("the vfio-pci GPU is listed: {live_read}"));
    assert_eq!(passed["grantable"], "nothing");
    // The same accelerators as the recording (the notes differ: the stand-in answers an
    // unrecorded query with an error where replay says the program is missing).
    assert_eq!(gpus(&live_read), gpus(&detect(&recorded, "/nonexistent")));
}

/// doctor on a live root: the kernel log, the kubelet's sockets, the CDI specs and the preload
/// library are looked for at the top of the root; copies of them under its `root/` (where a live
/// root read as a recording would look) count for nothing.
#[test]
fn doctor_reads_a_live_roots_kmsg_kubelet_sockets_cdi_and_library() {
    if !skip_unless_chroot("doctor_reads_a_live_roots_kmsg_kubelet_sockets_cdi_and_library") {
        return;
    }
    let recorded = hosts().join("hgx-h100-8gpu");
    let (_work, live) = live_with_stand_in(&recorded);
    let inventory = detect_json(
        &[
            "detect",
            "--host-root",
            live.to_str().unwrap(),
            "-o",
            "json",
        ],
        IMAGE_PATH,
    );
    let uuids: Vec<String> = gpus(&inventory)
        .iter()
        .map(|g| g["uuid"].as_str().unwrap().to_string())
        .collect();
    let major = inventory["manufacturers"][0]["runtimeVersion"]
        .as_str()
        .and_then(|v| v.split('.').next())
        .expect("the recorded host reports a CUDA version")
        .to_string();
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let devices: String = uuids
        .iter()
        .map(|u| format!("  - name: {u}\n    containerEdits: {{}}\n"))
        .collect();
    let spec = format!("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{devices}");
    let place = |under: &Path| {
        write(under.join("dev/kmsg"), "");
        for socket in [
            "var/lib/kubelet/device-plugins/kubelet.sock",
            "var/lib/kubelet/pod-resources/kubelet.sock",
        ] {
            write(under.join(socket), "");
        }
        write(under.join("etc/cdi/nvidia.yaml"), &spec);
        write(
            under.join(format!(
                "var/lib/gpustack/operator/lib/cuda-{major}/libvgpu.so"
            )),
            "stand-in",
        );
    };
    const CHECKS: [&str; 5] = [
        "kmsg",
        "kubelet-device-plugins",
        "kubelet-pod-resources",
        "cdi",
        "preload",
    ];
    let doctor = || {
        let run = device_manager(
            &[
                "doctor",
                "--host-root",
                live.to_str().unwrap(),
                "-o",
                "json",
            ],
            IMAGE_PATH,
        );
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("doctor -o json ({e}): {}{}", run.stdout, run.stderr));
        CHECKS.map(|name| {
            report["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .map(|c| c["status"].as_str().unwrap().to_string())
                .unwrap_or_else(|| panic!("no {name} check: {report}"))
        })
    };
    place(&live.join("root"));
    assert_eq!(
        doctor(),
        ["warn"; 5].map(String::from),
        "what sits under root/ is not the live root's"
    );
    place(&live);
    assert_eq!(doctor(), ["ok"; 5].map(String::from), "{CHECKS:?}");
}
