//! `detect -o json` and `labels` on every recorded host in `testdata/hosts/`, through the real
//! binary, snapshotted with insta; plus the hosts' special cases (a hanging nvidia-smi, a host
//! root that does not exist, passthrough with and without the daemon's memory).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::{copy_tree, hosts as hosts_dir};

fn host(name: &str) -> PathBuf {
    let dir = hosts_dir().join(name);
    assert!(dir.is_dir(), "recorded host {} is missing", dir.display());
    dir
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn device_manager(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(args)
        .env_remove("GPUSTACK_PCI_CLASS_PREFIXES")
        .env_remove("HOST_ROOT")
        .env_remove("DATA_DIR")
        .output()
        .expect("device-manager runs");
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Hosts whose driver is there and does not answer: `detect` and `labels` print what they
/// measured (nothing of that manufacturer) and exit 1, naming the manufacturer whose pass could
/// not measure, so a daemon keeps its last detection.
const NOT_MEASURED: &[(&str, &str)] = &[
    (
        "hygon-driver-silent",
        "hygon: driver present but no accelerator could be enumerated: 4 DCU(s) on the bus, but the KFD topology shows no Hygon node",
    ),
    (
        "ascend-driver-not-initialised",
        "ascend: driver present but no accelerator could be enumerated: npu-smi info: the driver did not initialise",
    ),
    (
        "iluvatar-driver-not-answering",
        "iluvatar: driver present but no accelerator could be enumerated: ixsmi: ixsmi: exited with status 255: Failed to initialize IXML: Unknown Error",
    ),
    (
        "mthreads-driver-not-answering",
        "mthreads: driver present but no accelerator could be enumerated: mthreads-gmi: mthreads-gmi: exited with status 255: mtgpu_device_initialize: mtgpu_query_dev_info failed (-22)",
    ),
];

/// The exit status a recorded host's `detect` and `labels` end with, checking the error line of
/// a host that cannot be measured.
fn assert_status(name: &str, run: &Run) {
    match NOT_MEASURED.iter().find(|(host, _)| *host == name) {
        Some((_, line)) => {
            assert_eq!(run.status, 1, "{name}: {}", run.stderr);
            assert!(run.stderr.contains(line), "{name}: {}", run.stderr);
        }
        None => assert_eq!(run.status, 0, "{name}: failed: {}", run.stderr),
    }
}

fn all_hosts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(hosts_dir())
        .expect("testdata/hosts exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert!(
        names.len() >= 6,
        "expected at least six recorded hosts, found {names:?}"
    );
    names
}

/// Hosts whose nvidia-smi hangs are snapshotted with a short deadline so the test stays fast.
fn detect_args(name: &str, dir: &str) -> Vec<String> {
    let mut args = vec![
        "detect".into(),
        "--host-root".into(),
        dir.into(),
        "-o".into(),
        "json".into(),
    ];
    if name.contains("hang") {
        args.extend(["--nvidia-smi-timeout".into(), "1".into()]);
    }
    args
}

/// A copy of a recorded host's daemon data (`<host>/data/`) when it holds the daemon's fault
/// record: `detect --data-dir` reads it (and writes beside it, so never the recording itself).
fn data_dir_of(name: &str) -> Option<tempfile::TempDir> {
    let data = host(name).join("data");
    if !data.join("faults.json").is_file() {
        return None;
    }
    let copy = tempfile::tempdir().unwrap();
    copy_tree(&data, copy.path());
    Some(copy)
}

#[test]
fn detect_json_of_every_recorded_host() {
    for name in all_hosts() {
        let dir = host(&name);
        let dir = dir.to_string_lossy().into_owned();
        let mut args = detect_args(&name, &dir);
        let data = data_dir_of(&name);
        if let Some(data) = &data {
            args.extend(["--data-dir".into(), data.path().to_string_lossy().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = device_manager(&args);
        assert_status(&name, &run);
        let json: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{name}: detect -o json is not JSON: {e}\n{}", run.stdout));
        insta::assert_json_snapshot!(format!("detect-{name}"), json);
    }
}

#[test]
fn labels_of_every_recorded_host() {
    for name in all_hosts() {
        let dir = host(&name);
        let dir = dir.to_string_lossy().into_owned();
        let mut args = vec!["labels", "--host-root", dir.as_str()];
        if name.contains("hang") {
            args.extend(["--nvidia-smi-timeout", "1"]);
        }
        let run = device_manager(&args);
        assert_status(&name, &run);
        let json: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{name}: labels is not JSON: {e}\n{}", run.stdout));
        insta::assert_json_snapshot!(format!("labels-{name}"), json);
    }
}

/// `labels` prints the `rdma.*` labels the daemon publishes for the node's network (the HGX
/// host's eight InfiniBand NICs, each on its GPU's root port: the values the daemon's own
/// publishing test reads back from the NodeFeature), and none for a host whose recording holds
/// no network tree, saying nothing about it on stderr.
#[test]
fn labels_carry_the_rdma_labels_the_daemon_publishes() {
    let rdma = |name: &str| {
        let dir = host(name);
        let run = device_manager(&["labels", "--host-root", dir.to_str().unwrap()]);
        assert_eq!(run.status, 0, "{name}: {}", run.stderr);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let labels: Vec<(String, String)> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("feature.gpustack.ai/rdma."))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        (labels, run.stderr)
    };
    let (labels, _) = rdma("hgx-h100-8gpu");
    let want = [
        ("feature.gpustack.ai/rdma.capable", "true"),
        ("feature.gpustack.ai/rdma.distance", "PXB"),
        ("feature.gpustack.ai/rdma.numa", "0_1"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    assert_eq!(labels, want);
    let (labels, stderr) = rdma("dual-rtx-a5000");
    assert!(labels.is_empty(), "{labels:?}");
    assert!(!stderr.contains("network"), "{stderr}");
}

#[test]
fn a_hanging_nvidia_smi_is_cut_and_procfs_still_answers() {
    let dir = host("smi-hangs");
    let started = Instant::now();
    let run = device_manager(&[
        "detect",
        "--host-root",
        dir.to_str().unwrap(),
        "-o",
        "json",
        "--nvidia-smi-timeout",
        "1",
    ]);
    let took = started.elapsed();
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(
        took < Duration::from_secs(20),
        "the hang was not cut: {took:?}"
    );
    assert!(
        run.stderr.contains("no answer within"),
        "stderr: {}",
        run.stderr
    );
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let gpus = json["manufacturers"][0]["accelerators"].as_array().unwrap();
    assert!(!gpus.is_empty(), "procfs GPUs must still be listed");
    assert!(gpus[0]["uuid"].as_str().unwrap().starts_with("GPU-"));
}

#[test]
fn an_ascend_driver_that_will_not_initialise_is_a_failed_pass_not_zero_npus() {
    let dir = host("ascend-driver-not-initialised");
    let run = device_manager(&["detect", "--host-root", dir.to_str().unwrap(), "-o", "json"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "ascend: driver present but no accelerator could be enumerated: npu-smi info: the driver did not initialise: dcmi model initialized failed, because the device is used. ret is -8020"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_host_with_no_driver_has_no_accelerators_and_exits_zero() {
    let dir = host("no-driver");
    let run = device_manager(&["detect", "--host-root", dir.to_str().unwrap(), "-o", "json"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json["manufacturers"], serde_json::json!([]));
    assert!(
        run.stderr.contains("nvidia-smi not found"),
        "{}",
        run.stderr
    );
}

#[test]
fn passthrough_gpus_are_listed_only_with_the_data_dir() {
    let dir = host("passthrough-l4");
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.join("data/gpus-seen.json"),
        data.path().join("gpus-seen.json"),
    )
    .unwrap();
    let without = device_manager(&["detect", "--host-root", dir.to_str().unwrap(), "-o", "json"]);
    let with = device_manager(&[
        "detect",
        "--host-root",
        dir.to_str().unwrap(),
        "--data-dir",
        data.path().to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(with.status, 0, "{}", with.stderr);
    let count = |run: &Run| {
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        json["manufacturers"][0]["accelerators"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(count(&with), count(&without) + 1);
    let json: serde_json::Value = serde_json::from_str(&with.stdout).unwrap();
    let last = json["manufacturers"][0]["accelerators"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["source"], "passthrough");
    assert_eq!(last["grantable"], "nothing");
    // The memory file is rewritten 0600.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data.path().join("gpus-seen.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn bad_input_is_one_clear_line() {
    let run = device_manager(&["detect", "--host-root", "/nonexistent/host"]);
    assert_eq!(run.status, 2);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("/nonexistent/host"), "{}", run.stderr);

    let run = device_manager(&["detect", "--pci-class-prefixes", "zz", "--host-root", "/"]);
    assert_eq!(run.status, 2);
    assert!(
        run.stderr.contains("GPUSTACK_PCI_CLASS_PREFIXES"),
        "{}",
        run.stderr
    );
}

#[test]
fn xml_that_is_not_xml_never_makes_up_an_accelerator() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = dir.path().join("commands/q-x");
    std::fs::create_dir_all(&cmd).unwrap();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("recorded-host.json"), "{\"format\": 1}").unwrap();
    std::fs::write(cmd.join("argv"), "nvidia-smi\n-q\n-x\n").unwrap();
    std::fs::write(cmd.join("stdout"), "this is not xml <<<").unwrap();
    let run = device_manager(&[
        "detect",
        "--host-root",
        dir.path().to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        json["manufacturers"],
        serde_json::json!([]),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("not XML"), "{}", run.stderr);
}

#[test]
fn detect_with_the_data_dir_shows_the_faults_of_this_boot() {
    // A copy of a recorded host with a boot id, and a data dir holding the daemon's faults.
    let work = tempfile::tempdir().unwrap();
    let node = work.path().join("node");
    copy_tree(&host("dual-rtx-a5000"), &node);
    let boot = node.join("root/proc/sys/kernel/random");
    std::fs::create_dir_all(&boot).unwrap();
    std::fs::write(
        boot.join("boot_id"),
        "b0070000-0000-4000-8000-000000000001\n",
    )
    .unwrap();
    let data = work.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let faults = |boot: &str| {
        serde_json::json!({
            "bootId": boot,
            "faults": [
                {"type": "Xid79", "status": true, "deviceId": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                 "message": "GPU has fallen off the bus.", "xid": 79, "busId": "00000000:81:00.0",
                 "class": "hardware", "count": 1},
                {"type": "Xid13", "status": true, "deviceId": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
                 "message": "Graphics Exception", "xid": 13, "busId": "00000000:C1:00.0",
                 "class": "application", "count": 3}
            ]
        })
        .to_string()
    };
    let detect = || {
        let run = device_manager(&[
            "detect",
            "--host-root",
            node.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "-o",
            "json",
        ]);
        assert_eq!(run.status, 0, "{}", run.stderr);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let gpus = json["manufacturers"][0]["accelerators"].clone();
        (
            gpus[0]["healthy"].clone(),
            gpus[0]["healthReasons"].clone(),
            gpus[1]["healthy"].clone(),
        )
    };
    std::fs::write(
        data.join("faults.json"),
        faults("b0070000-0000-4000-8000-000000000001"),
    )
    .unwrap();
    let (healthy0, reasons0, healthy1) = detect();
    assert_eq!(healthy0, false);
    assert_eq!(
        reasons0,
        serde_json::json!(["Xid 79: GPU has fallen off the bus."])
    );
    assert_eq!(healthy1, true, "an application XID is a condition only");

    std::fs::write(data.join("faults.json"), faults("an-earlier-boot")).unwrap();
    assert_eq!(detect().0, true, "faults of another boot are dropped");
}

/// Issue 43, item 3: on each manufacturer's recorded host with one sick accelerator, `detect`
/// marks exactly that one, with the health rule's reasons, and the others healthy — NVIDIA's
/// counters (a pending row remap and an uncorrectable DRAM error on GPU 3), AMD's kernel-log
/// fault of this boot in the daemon's record (`--data-dir`), MetaX's DRAM uncorrectable count
/// (`mx-smi --count-ecc`).
#[test]
fn a_sick_accelerator_is_marked_and_no_other() {
    let cases: [(&str, u32, &[&str]); 3] = [
        (
            "hgx-h100-8gpu-gpu3-remap-pending",
            3,
            &[
                "row remap pending (reset the GPU)",
                "1 uncorrectable volatile ECC errors",
            ],
        ),
        (
            "amd-8x-mi300x-gpu2-ras-uncorrectable",
            2,
            &[
                "AmdRasUncorrectable: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
            ],
        ),
        (
            "metax-8x-c500-gpu1-dram-ue",
            1,
            &["2 uncorrectable volatile ECC errors"],
        ),
    ];
    for (name, sick, reasons) in cases {
        let dir = host(name);
        let mut args = vec!["detect", "--host-root", dir.to_str().unwrap(), "-o", "json"];
        let data = data_dir_of(name);
        if let Some(data) = &data {
            args.extend(["--data-dir", data.path().to_str().unwrap()]);
        }
        let run = device_manager(&args);
        assert_eq!(run.status, 0, "{name}: {}", run.stderr);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let sections = json["manufacturers"].as_array().unwrap();
        assert_eq!(sections.len(), 1, "{name}");
        let gpus = sections[0]["accelerators"].as_array().unwrap();
        assert!(gpus.len() > 1, "{name}");
        let unhealthy: Vec<(u64, serde_json::Value)> = gpus
            .iter()
            .filter(|g| g["healthy"] == false)
            .map(|g| (g["index"].as_u64().unwrap(), g["healthReasons"].clone()))
            .collect();
        assert_eq!(
            unhealthy,
            [(u64::from(sick), serde_json::json!(reasons))],
            "{name}"
        );
    }
}

/// The AMD sick host's fault record is what the daemon's classifier reads from the recorded
/// kernel-log line (the real MI300X capture's, moved to this host's GPU 2), and it stands only
/// in its own boot: with another boot id, every board is healthy again.
#[test]
fn the_amd_fault_record_is_its_kernel_log_line_and_a_reboot_clears_it() {
    let name = "amd-8x-mi300x-gpu2-ras-uncorrectable";
    let dir = host(name);
    let run = device_manager(&[
        "xids",
        "-o",
        "json",
        dir.join("data/kmsg").to_str().unwrap(),
    ]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let read: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("data/faults.json")).unwrap())
            .unwrap();
    let boot = std::fs::read_to_string(dir.join("root/proc/sys/kernel/random/boot_id")).unwrap();
    assert_eq!(record["bootId"], boot.trim());
    let faults = record["faults"].as_array().unwrap();
    let read = read.as_array().unwrap();
    assert_eq!((faults.len(), read.len()), (1, 1));
    for key in ["busId", "message", "class"] {
        assert_eq!(faults[0][key], read[0][key], "{key}");
    }
    assert_eq!(faults[0]["type"], read[0]["condition"]);

    let data = data_dir_of(name).unwrap();
    let file = data.path().join("faults.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(boot.trim(), "an-earlier-boot")).unwrap();
    let run = device_manager(&[
        "detect",
        "--host-root",
        dir.to_str().unwrap(),
        "--data-dir",
        data.path().to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let gpus = json["manufacturers"][0]["accelerators"].as_array().unwrap();
    assert!(gpus.iter().all(|g| g["healthy"] == true), "{gpus:?}");
}
