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

/// One HTTP/1.1 request on a fresh connection: the status line, the headers and the body.
fn http_get(addr: std::net::SocketAddr, method: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[tokio::test]
async fn serve_answers_prometheus_metrics_on_its_listen_address() {
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/hgx-h100-8gpu"
    );
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
    // A port free now (the daemon binds it a moment later).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["serve", "--node-name", "node-a", "--host-root", host])
        .arg("--kubelet-dir")
        .arg(dir.path().join("kubelet"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("METRICS_LISTEN", addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The plugins register once the first detection has answered; the listener is up before.
    kubelet.wait_for(&["nvidia.com/gpu"]).await;
    let metrics = http_get(addr, "GET", "/metrics");
    let head = http_get(addr, "HEAD", "/metrics");
    let missing = http_get(addr, "GET", "/");
    let _ = child.kill();
    let _ = child.wait();
    let metrics = metrics.expect("serve answers on --metrics-listen");
    let (headers, body) = metrics.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(headers.starts_with("HTTP/1.1 200 OK"), "{headers}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    let samples = accel_plugin::metrics::exposition::Samples::parse(body)
        .unwrap_or_else(|e| panic!("{e}\n{body}"));
    // Each crate's metrics are in the one registry, under the one prefix.
    assert_eq!(
        samples.get(
            "device_manager_detection_passes_total",
            &[("outcome", "measured")]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(samples.all("device_manager_accelerator_healthy").len(), 8);
    assert_eq!(
        samples.get(
            "device_manager_allocate_duration_seconds_count",
            &[("resource", "nvidia.com/gpu")]
        ),
        Some(0.0)
    );
    assert_eq!(
        samples.get("device_manager_grants_total", &[("family", "exclusive")]),
        Some(0.0)
    );
    assert_eq!(
        samples.kind("device_manager_publish_backlog"),
        Some("gauge")
    );
    assert!(head.unwrap().starts_with("HTTP/1.1 200 OK"));
    assert!(missing.unwrap().starts_with("HTTP/1.1 404"));
}
