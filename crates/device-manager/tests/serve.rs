//! `device-manager serve` on the recorded 8-GPU host registers its plugins with a kubelet
//! (the emulator, over real unix sockets), advertises the recorded accelerators, and answers
//! `refresh` on its admin socket.

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
