//! `device-manager serve` on the recorded 8-GPU host registers its plugins with a kubelet
//! (the emulator, over real unix sockets), advertises the recorded accelerators, and answers
//! `refresh` on its admin socket; on a node without accelerators it keeps running; a
//! manufacturer without a detector is refused in one line.

use std::process::{Command, Stdio};

use accel_plugin::pods::MemoryPods;
use accel_plugin::testing::Kubelet;

#[tokio::test]
async fn serve_registers_the_recorded_hosts_accelerators() {
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/hgx-h100-8gpu"
    );
    assert!(std::path::Path::new(host).is_dir(), "missing {host}");
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["serve", "--node-name", "node-a", "--host-root", host])
        .arg("--kubelet-dir")
        .arg(dir.path().join("kubelet"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kubelet
        .wait_for(&[
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "device.gpustack.ai/nvidia.visibility",
        ])
        .await;
    let gpus = kubelet.devices("nvidia.com/gpu");
    // The admin socket is mounted: `refresh` through the real client collects and answers.
    let refresh = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("refresh")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--timeout", "30"])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(gpus.len(), 8);
    assert!(
        gpus.iter()
            .all(|d| d.id.starts_with("GPU-") && d.health == "Healthy")
    );
    assert_eq!(kubelet.devices("nvidia.com/gpu.shared").len(), 80);
    // No preload library in the recorded host: no sliced pool.
    assert!(kubelet.devices("nvidia.com/gpu.sliced").is_empty());
    let said = String::from_utf8_lossy(&refresh.stdout);
    assert!(
        refresh.status.success(),
        "refresh failed: {said}{}",
        String::from_utf8_lossy(&refresh.stderr)
    );
    assert_eq!(said.matches("healthy").count(), 8, "{said}");
    let journal = dir.path().join("data/ledger.journal");
    assert!(journal.exists());
}

#[test]
fn a_manufacturer_without_a_detector_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, env, expected) in [
        (
            Some("amd"),
            None,
            "manufacturer amd: no detector yet (this build detects nvidia)",
        ),
        (None, Some("hygon"), "manufacturer hygon: no detector yet"),
        (Some("nokia"), None, "unknown manufacturer \"nokia\""),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_device-manager"));
        command
            .args(["serve", "--node-name", "node-a", "--host-root"])
            .arg(dir.path())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env_remove("MANUFACTURER");
        if let Some(flag) = flag {
            command.args(["--manufacturer", flag]);
        }
        if let Some(env) = env {
            command.env("MANUFACTURER", env);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        // The reason is on the first line (clap adds a hint under a bad value).
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{stderr}");
    }
}

#[test]
fn serve_on_a_node_without_accelerators_keeps_running() {
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/no-driver"
    );
    assert!(std::path::Path::new(host).is_dir(), "missing {host}");
    for no_fast_failed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
            .args(["serve", "--node-name", "node-a", "--host-root", host])
            .args(["--inventory-interval", "1"])
            .arg("--kubelet-dir")
            .arg(dir.path().join("kubelet"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("NO_FAST_FAILED", no_fast_failed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Several periods: it keeps detecting instead of exiting.
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let exited = child.try_wait().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(exited, None, "serve exited on a node with no accelerator");
    }
}
