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

/// `GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME` renames every resource `serve` registers (the
/// visibility resource is the system's own), and `--no-shared` drops the shared pool.
#[tokio::test]
async fn the_resource_name_setting_renames_what_serve_registers() {
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/hgx-h100-8gpu"
    );
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args([
            "serve",
            "--node-name",
            "node-a",
            "--host-root",
            host,
            "--no-shared",
        ])
        .arg("--kube-socket")
        .arg(dir.path().join("kubelet/device-plugins/kubelet.sock"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
            "example.com/gpu",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kubelet
        .wait_for(&["example.com/gpu", "device.gpustack.ai/nvidia.visibility"])
        .await;
    let gpus = kubelet.devices("example.com/gpu");
    let shared = kubelet.devices("example.com/gpu.shared");
    let default = kubelet.devices("nvidia.com/gpu");
    let sockets = dir.path().join("kubelet/device-plugins");
    let served = |name: &str| sockets.join(format!("gpustack-{name}.sock")).exists();
    let (exclusive_served, shared_served) =
        (served("example.com_gpu"), served("example.com_gpu.shared"));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(gpus.len(), 8);
    assert!(exclusive_served);
    assert!(
        shared.is_empty() && !shared_served,
        "--no-shared still serves {shared:?}"
    );
    assert!(default.is_empty());
}

#[test]
fn an_unknown_manufacturer_is_a_one_line_error() {
    // Every manufacturer of the table has a backend now; a name outside the table, by flag or
    // by environment, is refused on the first line.
    let dir = tempfile::tempdir().unwrap();
    for (flag, env, expected) in [
        (Some("nokia"), None, "unknown manufacturer \"nokia\""),
        (None, Some("acme"), "unknown manufacturer \"acme\""),
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

/// A copy of a recorded host (links kept), to add files to.
fn copy_host(name: &str, to: &std::path::Path) {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/hosts")
        .join(name);
    assert!(from.is_dir(), "missing {}", from.display());
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn slicing_follows_the_library_directory_the_daemon_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir_all(&host).unwrap();
    copy_host("hgx-h100-8gpu", &host);
    // Staged somewhere else than the default (the recorded host reports CUDA 13.1).
    let staged = host.join("root/opt/gpustack/staged/cuda-13");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("libvgpu.so"), "").unwrap();

    for (library_dir, sliced) in [(None, false), (Some("/opt/gpustack/staged"), true)] {
        let run = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&run.path().join("kubelet"), MemoryPods::new()).await;
        let mut command = Command::new(env!("CARGO_BIN_EXE_device-manager"));
        command
            .args(["serve", "--node-name", "node-a", "--host-root"])
            .arg(&host)
            .arg("--kubelet-dir")
            .arg(run.path().join("kubelet"))
            .arg("--data-dir")
            .arg(run.path().join("data"))
            .env_remove("LIBRARY_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(library_dir) = library_dir {
            // As the DaemonSet passes it.
            command.env("LIBRARY_DIR", library_dir);
        }
        let mut child = command.spawn().unwrap();
        let mut wanted = vec!["nvidia.com/gpu", "device.gpustack.ai/nvidia.visibility"];
        if sliced {
            wanted.push("nvidia.com/gpu.sliced");
        }
        kubelet.wait_for(&wanted).await;
        let slices = kubelet.devices("nvidia.com/gpu.sliced").len();
        let _ = child.kill();
        let _ = child.wait();
        if sliced {
            assert_eq!(slices, 8 * 128, "LIBRARY_DIR={library_dir:?}");
        } else {
            assert_eq!(slices, 0, "the default directory holds no library here");
        }
    }

    // A relative directory cannot be handed to the kubelet: refused in one line.
    let out = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["serve", "--node-name", "node-a", "--host-root"])
        .arg(&host)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--library-dir", "opt/staged"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--library-dir opt/staged: not an absolute path"),
        "{stderr}"
    );
}

/// `serve` without a cluster until it has logged `marker`: its stderr up to there.
fn serve_log_until(marker: &str, envs: &[(&str, &str)]) -> String {
    use std::io::BufRead as _;
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/no-driver"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_device-manager"));
    command
        .args(["serve", "--node-name", "node-a", "--host-root", host])
        .arg("--kubelet-dir")
        .arg(dir.path().join("kubelet"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        // No cluster: the daemon says so at once, at ERROR.
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("LOG_FORMAT")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_string();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(&marker) {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(std::time::Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    seen.expect("serve never logged the marker within 30 s")
}

#[test]
fn logs_are_plain_text_off_a_terminal_and_json_on_request() {
    let text = serve_log_until("NOTHING IS PUBLISHED", &[]);
    assert!(text.contains("NOTHING IS PUBLISHED"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log that is not a terminal: {text:?}"
    );
    assert!(text.contains("ERROR"), "{text}");

    let json = serve_log_until("NOTHING IS PUBLISHED", &[("LOG_FORMAT", "json")]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let last = lines.last().expect("a line");
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("NOTHING IS PUBLISHED"),
        "{last}"
    );
    assert!(last["timestamp"].is_string(), "{last}");
    assert!(last["target"].is_string(), "{last}");

    // The flag is global: it reads the same before or after the subcommand; a bad one is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["--log-format", "yaml", "detect"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'yaml'"));
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
    // The live usage is sampled beside detection, and the ledger's occupancy is exported once
    // the plugins hand their ledger over (a moment after they register): wait (bounded by the
    // kit's deadline, not a count of tries) for both; the asserts below say what is missing,
    // once the daemon is stopped.
    let deadline = std::time::Instant::now() + accel_plugin::testing::WAIT;
    let mut metrics = http_get(addr, "GET", "/metrics");
    while !metrics.as_ref().is_ok_and(|m| {
        m.contains("device_manager_gpu_memory_total_mib{")
            && m.contains("device_manager_ledger_used_percent{")
    }) && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        metrics = http_get(addr, "GET", "/metrics");
    }
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
    // Issue 47: the info series to join on, and the ledger's occupancy (no holding: no grant).
    assert_eq!(
        samples.get(
            "device_manager_accelerator_info",
            &[
                ("manufacturer", "nvidia"),
                ("index", "0"),
                ("uuid", "GPU-63d1e50a-b952-d15c-0740-12bc14859142"),
                ("product", "NVIDIA H100 80GB HBM3"),
                ("group", "nvidia-h100-80gb-hbm3"),
                ("bus_id", "00000000:18:00.0"),
                ("numa_node", "0"),
            ]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(samples.all("device_manager_accelerator_info").len(), 8);
    assert_eq!(samples.all("device_manager_ledger_used_percent").len(), 8);
    assert!(samples.all("device_manager_ledger_holding").is_empty());
    assert_eq!(
        samples.get(
            "device_manager_detection_failing",
            &[("manufacturer", "nvidia")]
        ),
        Some(0.0)
    );
    // The samples `monitor` prints, per GPU (issue 12, item 7).
    let gpu0 = [
        ("manufacturer", "nvidia"),
        ("uuid", "GPU-63d1e50a-b952-d15c-0740-12bc14859142"),
    ];
    assert_eq!(
        samples.get("device_manager_gpu_memory_total_mib", &gpu0),
        Some(81559.0),
        "{body}"
    );
    assert_eq!(
        samples.get("device_manager_gpu_power_draw_watts", &gpu0),
        Some(69.85)
    );
    assert_eq!(
        samples.get("device_manager_gpu_temperature_celsius", &gpu0),
        Some(41.0)
    );
    assert_eq!(
        samples.all("device_manager_gpu_utilization_percent").len(),
        8
    );
    assert_eq!(
        samples.kind("device_manager_gpu_compute_processes"),
        Some("gauge")
    );
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

/// Waits until `path` holds `<manufacturer> <pid>` (the daemon took its data directory).
fn wait_for_holder(path: &std::path::Path, manufacturer: &str, pid: u32) {
    let expected = format!("{manufacturer} {pid}\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if std::fs::read_to_string(path).is_ok_and(|text| text == expected) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never named {expected:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A `serve` on the no-driver host (it keeps running) with `data_dir`, or the data root in
/// `GPUSTACK_DATA_DIR` when `data_dir` is `None`.
fn serve_without_accelerators(
    manufacturer: &str,
    work: &std::path::Path,
    data_dir: Option<&std::path::Path>,
    data_root: Option<&std::path::Path>,
) -> Command {
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/no-driver"
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_device-manager"));
    command
        .args(["serve", "--node-name", "node-a", "--host-root", host])
        .args(["--manufacturer", manufacturer])
        .arg("--kubelet-dir")
        .arg(work.join("kubelet"))
        .env("KUBECONFIG", work.join("no-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("DATA_DIR")
        .env_remove("MANUFACTURER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(dir) = data_dir {
        command.arg("--data-dir").arg(dir);
    }
    match data_root {
        Some(root) => command.env("GPUSTACK_DATA_DIR", root),
        None => command.env_remove("GPUSTACK_DATA_DIR"),
    };
    command
}

/// Runs `command` to its end, or kills it after `limit` and answers `None`.
fn exits_within(mut command: Command, limit: std::time::Duration) -> Option<std::process::Output> {
    let mut child = command.spawn().unwrap();
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn a_second_daemon_on_the_same_data_directory_refuses_to_start() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let lock = data.join("daemon.lock");
    let mut first = serve_without_accelerators("nvidia", work.path(), Some(&data), None)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_holder(&lock, "nvidia", first.id());
    // Another manufacturer's daemon, and a second one of the same manufacturer, both stop at
    // once with one line naming the directory and the holder.
    for second in ["amd", "nvidia"] {
        let out = exits_within(
            serve_without_accelerators(second, work.path(), Some(&data), None),
            std::time::Duration::from_secs(20),
        )
        .unwrap_or_else(|| panic!("a second {second} daemon started on a data directory in use"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{second}: {stderr}");
        let expected = format!(
            "data directory {} is in use by the nvidia daemon (pid {}): two daemons never share one; give this one its own --data-dir",
            data.display(),
            first.id()
        );
        assert!(
            stderr.lines().any(|line| line.ends_with(&expected)),
            "{second}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The holder still runs, undisturbed.
    assert_eq!(first.try_wait().unwrap(), None);
    let _ = first.kill();
    let _ = first.wait();
    // Once it is gone, the directory is free again: a restart takes it.
    let mut again = serve_without_accelerators("nvidia", work.path(), Some(&data), None)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_holder(&lock, "nvidia", again.id());
    let _ = again.kill();
    let _ = again.wait();
}

/// Without `--data-dir`, NVIDIA's daemon keeps the state directory every earlier build used
/// (`<GPUSTACK_DATA_DIR>/operator/device-manager`, so an upgraded node finds its journal there)
/// and AMD's has its own below it: the two run side by side on one node.
#[tokio::test]
async fn each_manufacturers_daemon_keeps_its_state_apart_and_nvidias_where_it_was() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("gpustack");
    let nvidia_dir = root.join("operator/device-manager");
    // The directory an earlier build made (and kept its journal in).
    std::fs::create_dir_all(&nvidia_dir).unwrap();
    let kubelet = Kubelet::start(&work.path().join("kubelet"), MemoryPods::new()).await;
    let host = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hosts/hgx-h100-8gpu"
    );
    let mut nvidia = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["serve", "--node-name", "node-a", "--host-root", host])
        .args(["--manufacturer", "nvidia"])
        .arg("--kubelet-dir")
        .arg(work.path().join("kubelet"))
        .env("GPUSTACK_DATA_DIR", &root)
        .env("KUBECONFIG", work.path().join("no-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut amd = serve_without_accelerators("amd", work.path(), None, Some(&root))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kubelet.wait_for(&["nvidia.com/gpu"]).await;
    wait_for_holder(&nvidia_dir.join("daemon.lock"), "nvidia", nvidia.id());
    wait_for_holder(&nvidia_dir.join("amd/daemon.lock"), "amd", amd.id());
    let nvidia_running = nvidia.try_wait().unwrap();
    let amd_running = amd.try_wait().unwrap();
    for child in [&mut nvidia, &mut amd] {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!((nvidia_running, amd_running), (None, None));
    assert!(nvidia_dir.join("ledger.journal").is_file());
    assert!(!nvidia_dir.join("amd/ledger.journal").exists());
}

/// `serve --manufacturer thead` on the mixed 16-PPU host registers `alibabacloud.com/ppu` for
/// the 14 whole cards, the two in MIG mode as `.partitioned` and its profiles (published with
/// the dot T-Head leaves out), and `.sliced` only once the shims are staged in
/// `<library-dir>/thead`.
#[tokio::test]
async fn thead_serves_its_whole_cards_and_slices_only_with_the_shims_staged() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir_all(&host).unwrap();
    copy_host("thead-16x-zw810e-mig2", &host);
    for staged in [false, true] {
        if staged {
            let lib = host.join("root/var/lib/gpustack/operator/lib/thead");
            std::fs::create_dir_all(&lib).unwrap();
            for f in [
                "ld.so.preload",
                "hggc_quota.so",
                "hgml_dlsym_hook.so",
                "ppu-monitor",
            ] {
                std::fs::write(lib.join(f), "").unwrap();
            }
        }
        let run = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&run.path().join("kubelet"), MemoryPods::new()).await;
        let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
            .args(["serve", "--manufacturer", "thead", "--node-name", "node-a"])
            .arg("--host-root")
            .arg(&host)
            .arg("--kubelet-dir")
            .arg(run.path().join("kubelet"))
            .arg("--data-dir")
            .arg(run.path().join("data"))
            .env_remove("LIBRARY_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut wanted = vec![
            "alibabacloud.com/ppu",
            "alibabacloud.com/ppu.shared",
            "device.gpustack.ai/thead.visibility",
            "alibabacloud.com/ppu.partitioned",
        ];
        if staged {
            wanted.push("alibabacloud.com/ppu.sliced");
        }
        kubelet.wait_for(&wanted).await;
        let ppus = kubelet.devices("alibabacloud.com/ppu");
        let shared = kubelet.devices("alibabacloud.com/ppu.shared").len();
        let slices = kubelet.devices("alibabacloud.com/ppu.sliced").len();
        let partitions = kubelet.devices("alibabacloud.com/ppu.partitioned");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(ppus.len(), 14, "staged={staged}");
        assert!(
            ppus.iter()
                .all(|d| d.id.starts_with("GPU-019e2226-") || d.id.starts_with("GPU-01deb21c-"))
        );
        assert_eq!(shared, 140);
        assert_eq!(slices, if staged { 14 * 128 } else { 0 }, "staged={staged}");
        // The two cards in MIG mode, each at most two partitions (two 4g.48gb, or one
        // 8g.96gb); the profile keys are capacity the publisher patches, not plugins.
        let mut cards: Vec<&str> = partitions
            .iter()
            .map(|d| d.id.split("::").next().unwrap())
            .collect();
        cards.dedup();
        assert_eq!((partitions.len(), cards.len()), (4, 2), "{partitions:?}");
    }
}

/// The container engine's configuration is read for the `auto` strategy alone: under the
/// default `envvar` nothing about it is read or logged (the rig showed a misleading "falls back
/// to envvar" warning on every NVIDIA daemon), and under `auto` the fall-back is said.
#[test]
fn the_engine_is_read_and_spoken_of_only_under_auto() {
    let envvar = serve_log_until("NOTHING IS PUBLISHED", &[]);
    assert!(envvar.contains("NOTHING IS PUBLISHED"), "{envvar}");
    assert!(!envvar.contains("injection (auto)"), "{envvar}");
    let auto = serve_log_until(
        "NOTHING IS PUBLISHED",
        &[("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY", "auto")],
    );
    assert!(
        auto.contains("nvidia injection (auto): falls back to envvar"),
        "{auto}"
    );
}
