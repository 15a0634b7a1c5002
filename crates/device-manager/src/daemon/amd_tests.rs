//! The daemon on an AMD node, against the kubelet emulator over real unix sockets: a copy of the
//! recorded 8× MI300X host with a boot id, the kernel log fed through `ChannelKernelLog`, the
//! faults read by AMD's classifier behind the seam. An uncorrectable RAS line or a GPU reset
//! turns the board's tokens Unhealthy; a page fault (the workload's) raises only a condition;
//! both land in the same `faults.json` under the same boot rule, are counted by manufacturer and
//! condition, reach the published `Devices` faults as AMD's; the admin socket's reset is refused
//! with the reason.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use accel_amd::responder::AmdResponder;
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::devices::FaultClass;
use accel_plugin::Config;

use super::metrics::DaemonMetrics;
use super::test_support::{
    Rig, SETTLE, copy_host, data_dir, faults_file, plugin_config, scrape, set_boot,
};
use super::*;

const GPU: &str = "amd.com/gpu";
const SHARED: &str = "amd.com/gpu.shared";
const BOOT: &str = "0b5e7d2c-8a41-4f36-b1c9-3e2d7a9f6c10";
/// Boards 0, 1 and 2 of the recorded host (bus 1b, 3d, 4e).
const GPU0: &str = "GPU-28246ce5673b4aa0";
const GPU1: &str = "GPU-a1c623d04774b0c2";
const GPU2: &str = "GPU-e2b4766321837ea7";
/// The lines as `/dev/kmsg` gives them (no timestamp), from the captures in
/// `../shared/fixtures/amd/kmsg/` with the recorded host's buses.
const RAS_GPU0: &str =
    "amdgpu 0000:1b:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!";
const PAGE_FAULT_GPU1: &str = "amdgpu 0000:3d:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)";
const PAGE_FAULT_PROCESS_GPU1: &str = "amdgpu 0000:3d:00.0: amdgpu:  for process pt_main_thread pid 12924 thread pt_main_thread pid 12924)";
const RING_TIMEOUT_GPU2: &str =
    "amdgpu 0000:4e:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=57638, emitted seq=57641";
const RESET_GPU2: &str = "amdgpu 0000:4e:00.0: amdgpu: GPU reset begin!. Source:  1";
/// An ACA dump's STATUS line as the MI300X capture has it (VAL|EN|MISCV|Poison: deferred), and
/// the same with UC (bit 61) set.
const ACA_DEFERRED_GPU1: &str =
    "amdgpu 0000:3d:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x98000800003e0000";
const ACA_UNCORRECTED_GPU2: &str =
    "amdgpu 0000:4e:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0xb8000800003e0000";

/// A copy of the recorded 8× MI300X host with a boot id.
fn host() -> tempfile::TempDir {
    copy_host("amd-8x-mi300x", BOOT)
}

fn options(data_dir: &Path) -> DaemonOptions {
    super::test_support::options(Manufacturer::Amd, data_dir)
}

/// The plugins' configuration as `serve` builds it on the AMD node (no slices).
fn amd_plugin_config(kubelet_dir: &Path, data: &Path, section: &ManufacturerInventory) -> Config {
    let responder = Arc::new(AmdResponder::from_setup(ResponderSetup {
        scratch: None,
        strategy: InjectionStrategy::Envvar,
        runtime_major: Some(7),
        pod_dir_root: data.join("pods"),
        preload_dir: data.join("preload"),
        library_dir: "/var/lib/gpustack/operator/lib".into(),
        engine: Arc::new(EngineFacts::default()),
        accelerators: section.accelerators.clone(),
        host: None,
        commands: None,
        runtime_class: None,
        writes: None,
    }));
    plugin_config(kubelet_dir, data, section, responder)
}

/// The daemon as `serve` runs it on the AMD node, with a fed kernel log.
async fn start(host: &Path, options: DaemonOptions) -> Rig {
    let data = options.data_dir.clone();
    let node = Node::open(host).unwrap();
    let daemon = Arc::new(Daemon::prepare(node, options).unwrap());
    Rig::start(daemon, &data, amd_plugin_config, &[GPU, SHARED]).await
}

fn reasons(daemon: &Daemon, uuid: &str) -> Vec<String> {
    daemon
        .inventory()
        .manufacturers
        .iter()
        .flat_map(|s| s.accelerators.iter())
        .find(|a| a.uuid.as_deref() == Some(uuid))
        .map(|a| a.health_reasons.clone())
        .unwrap_or_else(|| panic!("{uuid} is not in the inventory"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amdgpu_ras_line_turns_the_boards_tokens_unhealthy() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let data = data_dir(&data);
    let mut rig = start(host.path(), options(&data)).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    let sent = Instant::now();
    rig.line(RAS_GPU0);
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    eprintln!(
        "amdgpu RAS line -> Unhealthy in ListAndWatch: {:?}",
        sent.elapsed()
    );
    // Only that board: the other seven keep serving, and its ten shares went with it.
    assert_eq!(rig.count(GPU, "Healthy"), 7);
    rig.wait_count(SHARED, "Unhealthy", 10).await;
    let why = reasons(&rig.daemon, GPU0);
    assert!(
        why[0].starts_with("AmdRasUncorrectable: uncorrectable hardware error"),
        "{why:?}"
    );
    // The same faults file as NVIDIA's, and the Devices status names the fault as AMD's.
    let file = faults_file(&data);
    assert!(
        file.contains("AmdRasUncorrectable") && file.contains(BOOT),
        "{file}"
    );
    let published = rig.daemon.published().borrow().clone().unwrap();
    let fault = &published.faults[0];
    assert_eq!(
        (
            fault.manufacturer,
            fault.uuid.as_str(),
            fault.type_.as_str(),
            fault.class,
            fault.index
        ),
        (
            Manufacturer::Amd,
            GPU0,
            "AmdRasUncorrectable",
            FaultClass::Hardware,
            Some(0)
        )
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_fault_raises_only_a_condition_and_a_gpu_reset_takes_the_board_out() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = start(host.path(), options(&data_dir(&data))).await;
    rig.line(PAGE_FAULT_GPU1);
    rig.line(PAGE_FAULT_PROCESS_GPU1);
    // A ring timeout alone is the workload's; the GPU reset that follows it is the board's.
    rig.line(RING_TIMEOUT_GPU2);
    rig.line(RESET_GPU2);
    // Entries are taken in order: once board 2 is unhealthy, the lines before were handled.
    rig.wait_health(GPU2, "Unhealthy", SETTLE).await;
    assert_eq!(
        rig.health(GPU1),
        "Healthy",
        "a page fault is the workload's"
    );
    let conditions = rig.daemon.conditions();
    for expected in [
        (GPU1, "AmdPageFault"),
        (GPU2, "AmdRingTimeout"),
        (GPU2, "AmdGpuReset"),
    ] {
        assert!(
            conditions.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not in {conditions:?}"
        );
    }
    assert!(reasons(&rig.daemon, GPU1).is_empty());
    assert_eq!(
        reasons(&rig.daemon, GPU2),
        vec!["AmdGpuReset: GPU reset begin!. Source:  1"]
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aca_entry_takes_the_board_out_only_when_its_status_says_uncorrected() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = start(host.path(), options(&data_dir(&data))).await;
    rig.line(ACA_DEFERRED_GPU1);
    // A STATUS that is no number is no fault (and no panic).
    rig.line("amdgpu 0000:4e:00.0: {1}[Hardware Error]: aca entry[01].STATUS=0xnothex");
    rig.line(ACA_UNCORRECTED_GPU2);
    // Entries are taken in order: once board 2 is unhealthy, the lines before were handled.
    rig.wait_health(GPU2, "Unhealthy", SETTLE).await;
    assert_eq!(
        rig.health(GPU1),
        "Healthy",
        "a deferred entry is a condition"
    );
    let conditions = rig.daemon.conditions();
    for expected in [(GPU1, "AmdAcaDeferred"), (GPU2, "AmdRasUncorrectable")] {
        assert!(
            conditions.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not in {conditions:?}"
        );
    }
    assert_eq!(
        conditions.iter().filter(|(gpu, _)| gpu == GPU2).count(),
        1,
        "the unreadable STATUS raised nothing: {conditions:?}"
    );
    assert!(reasons(&rig.daemon, GPU1).is_empty());
    assert_eq!(
        reasons(&rig.daemon, GPU2),
        vec!["AmdRasUncorrectable: [Hardware Error]: aca entry[00].STATUS=0xb8000800003e0000"]
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd_faults_keep_the_boot_rule_and_a_reset_is_refused_with_the_reason() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let data = data_dir(&data);
    let mut rig = start(host.path(), options(&data)).await;
    rig.line(RAS_GPU0);
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    // The admin socket's reset: refused whole, naming why; the board stays out.
    let daemon = rig.daemon.clone();
    let refused = tokio::task::spawn_blocking(move || daemon.reset(&[GPU0.to_string()]))
        .await
        .unwrap()
        .unwrap_err();
    let said = refused.to_string();
    assert!(
        said.starts_with("AMD accelerators are not reset by the device manager")
            && said.contains("XGMI hive"),
        "{said}"
    );
    assert_eq!(rig.health(GPU0), "Unhealthy");
    rig.stop().await;

    // A restart in the same boot: the board starts Unhealthy.
    let rig = start(host.path(), options(&data)).await;
    assert_eq!(rig.health(GPU0), "Unhealthy");
    assert_eq!(rig.health(GPU1), "Healthy");
    rig.stop().await;

    // A new boot drops the record: the board is back.
    set_boot(host.path(), "a-new-boot");
    let rig = start(host.path(), options(&data)).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    assert!(rig.daemon.conditions().is_empty());
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd_faults_and_health_are_in_the_metrics() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut registry = prometheus_client::registry::Registry::with_prefix("device_manager");
    let mut options = options(&data_dir(&data));
    options.metrics = DaemonMetrics::register(&mut registry);
    let mut rig = start(host.path(), options).await;
    registry.register_collector(Box::new(rig.daemon.accelerator_metrics(Default::default())));
    rig.line(PAGE_FAULT_GPU1);
    rig.line(PAGE_FAULT_GPU1);
    rig.line(RAS_GPU0);
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    let samples = scrape(&registry);
    // Each fault carries the board at its bus address, the uuid the info series joins on.
    let labels = |condition: &str, class: &str, uuid: &str| {
        BTreeMap::from([
            ("class".to_string(), class.to_string()),
            ("condition".to_string(), condition.to_string()),
            ("manufacturer".to_string(), "amd".to_string()),
            ("uuid".to_string(), uuid.to_string()),
        ])
    };
    assert_eq!(
        samples.all("device_manager_accelerator_faults_total"),
        vec![
            (labels("AmdPageFault", "application", GPU1), 2.0),
            (labels("AmdRasUncorrectable", "hardware", GPU0), 1.0),
        ]
    );
    assert!(
        samples.all("device_manager_xids_total").is_empty(),
        "AMD faults are no XIDs"
    );
    let health = |index: &str, uuid: &str| {
        samples.get(
            "device_manager_accelerator_healthy",
            &[("manufacturer", "amd"), ("index", index), ("uuid", uuid)],
        )
    };
    assert_eq!(samples.all("device_manager_accelerator_healthy").len(), 8);
    assert_eq!(health("0", GPU0), Some(0.0));
    assert_eq!(health("1", GPU1), Some(1.0));
    rig.stop().await;
}

/// The `device_manager_gpu_*` gauges on an AMD node: AMD's sampler (amd-smi `metric --json`
/// joined with `static` by amd-smi's index) fills them under the board's own identity, the one
/// the inventory and the health gauge use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd_usage_is_in_the_gauges() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let rig = start(host.path(), options(&data_dir(&data))).await;
    let daemon = rig.daemon.clone();
    let sample = tokio::task::spawn_blocking(move || daemon.sample_usage())
        .await
        .unwrap()
        .expect("amd-smi metric answers on the recorded host");
    let mut registry = prometheus_client::registry::Registry::with_prefix("device_manager");
    let (_usage, usage) = tokio::sync::watch::channel(Some(sample));
    registry.register_collector(Box::new(super::metrics::GpuUsageMetrics { usage }));
    let samples = scrape(&registry);
    let gauge = |name: &str| samples.get(name, &[("manufacturer", "amd"), ("uuid", GPU0)]);
    assert_eq!(gauge("device_manager_gpu_utilization_percent"), Some(0.0));
    assert_eq!(gauge("device_manager_gpu_memory_total_mib"), Some(46064.0));
    assert_eq!(gauge("device_manager_gpu_memory_used_mib"), Some(1758.0));
    assert!(
        samples
            .all("device_manager_gpu_compute_processes")
            .is_empty(),
        "amd-smi metric lists no processes: no series, never a 0 that reads as a fact"
    );
    rig.stop().await;
}
