//! The daemon against the kubelet emulator over real unix sockets, on temp-dir copies of the
//! recorded 8-GPU host with a boot id, the kernel log fed through `ChannelKernelLog`: XIDs turn
//! tokens Unhealthy within a second, application XIDs only raise a condition, faults survive a
//! restart in the same boot and not a new boot, a reset recovers a GPU and is refused on a
//! granted one, an overrun is survived, and the detection cadence (bursts, PCI changes,
//! period, refresh, health changes). What a pass means: a failed one keeps the last detection,
//! an empty one undetects and drops, a node that never answered publishes nothing (or the empty
//! result with `--no-fast-failed`), the plugins start when accelerators appear and follow them
//! when one vanishes. The host's programs go through [`Switch`], so a test can take nvidia-smi
//! away mid-run. Waits are bounded and say what did not happen.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accel_core::Manufacturer;
use accel_host::{CommandError, CommandOutput, Commands, KernelLogEntry, RecordedCommands};
use accel_nvidia::detector::Deadlines;
use accel_nvidia::reset::{ResetError, reset_argv};
use accel_nvidia::responder::{EngineFacts, HOST_LIBRARY_DIR, NvidiaResponder};
use accel_nvidia::xid::XidClasses;
use accel_plugin::Config;
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::settings::InjectionStrategy;
use accel_plugin::testing::{self, Kubelet};

use accel_plugin::metrics::exposition::Samples;

use super::loops::Loops;
use super::metrics::DaemonMetrics;
use super::test_support::{self, SETTLE, copy_host, data_dir, faults_file, scrape, set_boot};
use super::*;
use crate::admin::AdminHandler;

const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const BOOT: &str = "6f0c2a8e-3b1d-4f5e-9a7c-2d4e6f8a0b1c";
/// GPU 0 and 1 of the recorded host, and their buses.
const GPU0: &str = "GPU-63d1e50a-b952-d15c-0740-12bc14859142";
const GPU1: &str = "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda";
const HARDWARE_XID_GPU0: &str =
    "NVRM: Xid (PCI:0000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.";
const HARDWARE_XID_GPU1: &str =
    "NVRM: Xid (PCI:0000:2a:00): 48, pid=2231, name=python3, An uncorrectable double bit error";
const APPLICATION_XID_GPU0: &str =
    "NVRM: Xid (PCI:0000:18:00): 13, pid=2231, name=python3, Graphics SM Warp Exception";

/// A copy of the recorded 8-GPU host with a boot id.
fn host() -> tempfile::TempDir {
    copy_host("hgx-h100-8gpu", BOOT)
}

/// Records a successful `nvidia-smi --gpu-reset -i <uuid>` on the host.
fn record_reset(host: &Path, uuid: &str) {
    let folder = host.join("commands").join(format!("gpu-reset-{uuid}"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("argv"), reset_argv(uuid).join("\n") + "\n").unwrap();
    std::fs::write(folder.join("stdout"), format!("GPU {uuid} was reset.\n")).unwrap();
}

fn options(data_dir: &Path) -> DaemonOptions {
    super::test_support::options(Manufacturer::Nvidia, data_dir)
}

/// The host's programs, switchable mid-run: the recorded ones, or none installed (nvidia-smi
/// gone with its driver).
#[derive(Clone)]
struct Switch {
    now: Arc<Mutex<Arc<dyn Commands>>>,
    recorded: Arc<dyn Commands>,
}

impl Switch {
    fn new(recorded: Box<dyn Commands>) -> Switch {
        let recorded: Arc<dyn Commands> = Arc::from(recorded);
        Switch {
            now: Arc::new(Mutex::new(recorded.clone())),
            recorded,
        }
    }

    fn current(&self) -> Arc<dyn Commands> {
        self.now.lock().unwrap().clone()
    }

    /// nvidia-smi is not installed any more.
    fn none(&self) {
        *self.now.lock().unwrap() = Arc::new(RecordedCommands::empty());
    }

    /// The recorded programs answer again.
    fn recorded(&self) {
        *self.now.lock().unwrap() = self.recorded.clone();
    }
}

impl Commands for Switch {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.current().run(argv, deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.current().is_installed(program)
    }
}

/// The daemon over a recorded host whose programs go through a [`Switch`].
fn prepare(host: &Path, options: DaemonOptions) -> (Arc<Daemon>, Switch) {
    let mut node = Node::open(host).unwrap();
    let commands = Switch::new(std::mem::replace(
        &mut node.commands,
        Box::new(RecordedCommands::empty()),
    ));
    node.commands = Box::new(commands.clone());
    (Arc::new(Daemon::prepare(node, options).unwrap()), commands)
}

/// The plugins' configuration as `serve` builds it, for the section first detected.
fn plugin_config(kubelet_dir: &Path, data: &Path, section: &ManufacturerInventory) -> Config {
    let responder = Arc::new(NvidiaResponder {
        strategy: InjectionStrategy::Envvar,
        cuda_major: Some(13),
        pod_dir_root: data.join("pods"),
        preload_dir: data.join("preload"),
        library_dir: accel_nvidia::responder::HOST_LIBRARY_DIR.into(),
        engine: std::sync::Arc::new(EngineFacts::default()),
    });
    test_support::plugin_config(kubelet_dir, data, section, responder)
}

/// The driver is gone: no `/proc/driver/nvidia`, no nvidia-smi (a pass finds nothing).
fn remove_driver(host: &Path, commands: &Switch) {
    let driver = host.join("root/proc/driver/nvidia");
    std::fs::rename(&driver, host.join("root/proc/driver/nvidia.away")).unwrap();
    commands.none();
}

/// The driver is back with its programs.
fn restore_driver(host: &Path, commands: &Switch) {
    let driver = host.join("root/proc/driver/nvidia");
    std::fs::rename(host.join("root/proc/driver/nvidia.away"), &driver).unwrap();
    commands.recorded();
}

/// The driver is there but answers nothing: its GPU listing cannot be read and nvidia-smi is
/// gone (a pass that cannot measure).
fn wedge_driver(host: &Path, commands: &Switch) {
    let gpus = host.join("root/proc/driver/nvidia/gpus");
    std::fs::rename(&gpus, host.join("root/proc/driver/nvidia/gpus.away")).unwrap();
    std::fs::write(&gpus, "").unwrap();
    commands.none();
}

/// Runs one detection as `refresh` does.
async fn refresh(daemon: &Arc<Daemon>) -> Refreshed {
    let daemon = daemon.clone();
    tokio::task::spawn_blocking(move || daemon.refresh())
        .await
        .unwrap()
        .unwrap()
}

fn pod_with(uid: &str, resource: &str, count: &str) -> Pod {
    Pod {
        name: format!("trainer-{uid}"),
        ..testing::pod(uid, 1_700_000_000, &[("main", &[(resource, count)])])
    }
}

/// The daemon as `serve` runs it, with a fed kernel log and its own emulated kubelet, its
/// host's programs behind a [`Switch`].
struct Rig {
    rig: test_support::Rig,
    commands: Switch,
}

impl std::ops::Deref for Rig {
    type Target = test_support::Rig;

    fn deref(&self) -> &test_support::Rig {
        &self.rig
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut test_support::Rig {
        &mut self.rig
    }
}

impl Rig {
    async fn start(host: &Path, data: &Path) -> Rig {
        Rig::start_with(host, options(data)).await
    }

    async fn start_with(host: &Path, options: DaemonOptions) -> Rig {
        let data = options.data_dir.clone();
        let (daemon, commands) = prepare(host, options);
        let rig = test_support::Rig::start(daemon, &data, plugin_config, &[GPU, SHARED]).await;
        Rig { rig, commands }
    }

    async fn stop(self) {
        self.rig.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hardware_xid_turns_the_gpus_tokens_unhealthy_within_a_second() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    let sent = Instant::now();
    rig.line(HARDWARE_XID_GPU0);
    rig.wait_health(GPU0, "Unhealthy", Duration::from_secs(1))
        .await;
    let took = sent.elapsed();
    // Printed so the end-to-end figure can be read off repeated runs (BENCHMARKS.md).
    eprintln!("kernel line -> Unhealthy in ListAndWatch: {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // Only that GPU: the other seven keep serving, and its ten shares went with it.
    assert_eq!(rig.count(GPU, "Healthy"), 7);
    rig.wait_count(SHARED, "Unhealthy", 10).await;
    let inventory = rig.daemon.inventory();
    let gpu0 = &inventory.manufacturers[0].accelerators[0];
    assert!(!gpu0.healthy);
    assert!(
        gpu0.health_reasons[0].starts_with("Xid 79"),
        "{:?}",
        gpu0.health_reasons
    );
    assert!(faults_file(&data_dir(&data)).contains("Xid79"));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_xid_raises_only_a_condition() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    rig.line(APPLICATION_XID_GPU0);
    // Entries are taken in order: once GPU 1's hardware XID shows, GPU 0's was handled.
    rig.line(HARDWARE_XID_GPU1);
    rig.wait_health(GPU1, "Unhealthy", SETTLE).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    assert!(
        rig.daemon
            .conditions()
            .contains(&(GPU0.to_string(), "Xid13".to_string())),
        "{:?}",
        rig.daemon.conditions()
    );
    let inventory = rig.daemon.inventory();
    assert!(inventory.manufacturers[0].accelerators[0].healthy);
    // Only GPU 1's ten shares go (each pool's stream updates on its own).
    rig.wait_count(SHARED, "Unhealthy", 10).await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_same_boot_keeps_the_fault_and_a_new_boot_drops_it() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    rig.line(HARDWARE_XID_GPU0);
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    rig.stop().await;

    // Same boot: the fault is applied before the plugins start, so the first list says so.
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    assert_eq!(rig.health(GPU0), "Unhealthy");
    assert_eq!(rig.health(GPU1), "Healthy");
    rig.stop().await;

    // A new boot: the record is dropped.
    set_boot(host.path(), "0d9e8c7b-6a5f-4e3d-2c1b-0a9f8e7d6c5b");
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    assert!(rig.daemon.conditions().is_empty());
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_that_leaves_the_gpu_healthy_recovers_it() {
    let host = host();
    record_reset(host.path(), GPU0);
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    rig.line(HARDWARE_XID_GPU0);
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    let daemon = rig.daemon.clone();
    let report = tokio::task::spawn_blocking(move || daemon.reset(&[GPU0.to_string()]))
        .await
        .unwrap()
        .unwrap();
    assert!(report.all_healthy(), "{report:?}");
    rig.wait_health(GPU0, "Healthy", SETTLE).await;
    assert!(rig.daemon.conditions().is_empty());
    assert!(!faults_file(&data_dir(&data)).contains("Xid79"));
    assert!(rig.daemon.inventory().manufacturers[0].accelerators[0].healthy);
    rig.stop().await;
}

/// A Pod asking for one `nvidia.com/gpu`.
fn one_gpu_pod(uid: &str) -> Pod {
    testing::pod(uid, 1_700_000_000, &[("main", &[(GPU, "1")])])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_withdraws_its_gpu_and_the_others_are_granted_while_it_runs() {
    let host = host();
    record_reset(host.path(), GPU0);
    // nvidia-smi takes its time over the reset (the daemon's deadline is 5 s).
    let folder = host
        .path()
        .join("commands")
        .join(format!("gpu-reset-{GPU0}"));
    std::fs::write(folder.join("delay-ms"), "3000\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    assert_eq!(rig.health(GPU0), "Healthy");
    let daemon = rig.daemon.clone();
    let started = Instant::now();
    let reset = tokio::task::spawn_blocking(move || daemon.reset(&[GPU0.to_string()]));
    // GPU 0 leaves service as the reset starts, on the kubelet's stream too.
    rig.wait_health(GPU0, "Unhealthy", SETTLE).await;
    // Allocate carries on for the other GPUs meanwhile, and never hands out GPU 0.
    for uid in ["uid-a", "uid-b"] {
        rig.kubelet.create(one_gpu_pod(uid));
        rig.kubelet.admit(uid).await.unwrap();
        let held = rig.kubelet.held(uid, "main", GPU);
        assert_eq!(held.len(), 1);
        assert_ne!(held[0], GPU0, "a GPU being reset was granted");
    }
    assert!(
        !reset.is_finished(),
        "the grants waited for the reset ({:?} after it started)",
        started.elapsed()
    );
    let report = reset.await.unwrap().unwrap();
    assert!(report.all_healthy(), "{report:?}");
    assert!(started.elapsed() >= Duration::from_secs(3));
    // Back in service when the reset ends.
    rig.wait_health(GPU0, "Healthy", SETTLE).await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_that_fails_leaves_its_gpu_as_the_rule_says() {
    let host = host();
    // No reset recorded: nvidia-smi answers nothing for it and the reset fails.
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    let daemon = rig.daemon.clone();
    let report = tokio::task::spawn_blocking(move || daemon.reset(&[GPU0.to_string()]))
        .await
        .unwrap()
        .unwrap();
    assert!(!report.all_healthy(), "{report:?}");
    // Withdrawn for the reset, given back as the (healthy) inventory says.
    rig.wait_health(GPU0, "Healthy", SETTLE).await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_of_a_granted_gpu_is_refused_gpu_busy() {
    let host = host();
    record_reset(host.path(), GPU0);
    record_reset(host.path(), GPU1);
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    rig.kubelet.create(Pod {
        name: "trainer-0".into(),
        ..pod_with("uid-a", GPU, "1")
    });
    rig.kubelet.admit("uid-a").await.unwrap();
    let held = rig.kubelet.held("uid-a", "main", GPU);
    assert_eq!(held.len(), 1);
    let granted = held[0].clone();
    let daemon = rig.daemon.clone();
    let asked = vec![GPU0.to_string(), GPU1.to_string()];
    let refused = tokio::task::spawn_blocking(move || daemon.reset(&asked))
        .await
        .unwrap()
        .unwrap_err();
    match &refused {
        ResetError::Busy(busy) => {
            assert_eq!(busy.len(), 1);
            assert_eq!(busy[0].uuid, granted);
            assert!(
                busy[0].reasons[0].contains("granted to pod uid-a container main"),
                "{busy:?}"
            );
        }
        other => panic!("expected gpu-busy, got {other}"),
    }
    assert!(refused.to_string().starts_with("gpu-busy"));
    // A finished Pod not yet released still holds it.
    rig.kubelet.finish("uid-a");
    let daemon = rig.daemon.clone();
    let granted_again = vec![granted.clone()];
    let still = tokio::task::spawn_blocking(move || daemon.reset(&granted_again))
        .await
        .unwrap();
    assert!(matches!(still, Err(ResetError::Busy(_))), "{still:?}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrun_is_survived_and_asks_for_a_collection() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    let before = *rig.daemon.passes().borrow();
    rig.feed(KernelLogEntry::Overrun { lost: Some(12) });
    rig.line(HARDWARE_XID_GPU1);
    rig.wait_health(GPU1, "Unhealthy", SETTLE).await;
    // The burst's collection, about two seconds after the overrun.
    rig.wait_passes(before, 1, Duration::from_secs(5), "after an overrun")
        .await;
    // The collection keeps the fault: counters are clean, the XID is this boot's.
    assert_eq!(rig.health(GPU1), "Unhealthy");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_is_collected_on_a_period_on_demand_and_on_a_pci_change() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut fast_pci = options(&data_dir(&data));
    fast_pci.pci_poll_interval = Duration::from_millis(100);
    let rig = Rig::start_with(host.path(), fast_pci).await;

    let before = *rig.daemon.passes().borrow();
    let daemon = rig.daemon.clone();
    let refreshed = tokio::task::spawn_blocking(move || daemon.refresh())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refreshed.gpus.len(), 8);
    assert!(refreshed.gpus.iter().all(|g| g.healthy));
    assert_eq!(*rig.daemon.passes().borrow(), before + 1);

    // A card leaves the bus: its function vanishes from sysfs.
    let before = *rig.daemon.passes().borrow();
    let devices = host.path().join("root/sys/bus/pci/devices");
    let gone = std::fs::read_dir(&devices)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("0000:18:00.0"))
        .expect("GPU 0's PCI function in the recorded host");
    std::fs::remove_file(&gone).unwrap();
    rig.wait_passes(before, 1, Duration::from_secs(5), "after a PCI change")
        .await;
    rig.stop().await;

    let mut fast_period = options(&data_dir(&data));
    fast_period.inventory_interval = Duration::from_millis(200);
    let rig = Rig::start_with(host.path(), fast_period).await;
    let before = *rig.daemon.passes().borrow();
    rig.wait_passes(before, 2, Duration::from_secs(5), "on the period")
        .await;
    rig.stop().await;
}

/// The exclusive token a Pod's container holds, with its accelerator's UUID.
async fn admit_one(rig: &Rig, uid: &str) -> String {
    rig.kubelet.create(pod_with(uid, GPU, "1"));
    rig.kubelet.admit(uid).await.unwrap();
    let held = rig.kubelet.held(uid, "main", GPU);
    assert_eq!(held.len(), 1);
    held[0].clone()
}

fn published(daemon: &Daemon) -> Option<Published> {
    daemon.published().borrow().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_keeps_the_last_detection_and_its_tokens() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    let first = published(&rig.daemon).expect("published after the first detection");
    assert_eq!(first.failure, None);
    assert_eq!(first.inventory.manufacturers[0].accelerators.len(), 8);
    admit_one(&rig, "uid-a").await;

    wedge_driver(host.path(), &rig.commands);
    let refreshed = refresh(&rig.daemon).await;
    assert_eq!(refreshed.gpus.len(), 8, "the last detection is reported");
    assert!(
        refreshed.notes[0].starts_with("kept the last detection: nvidia: driver present but"),
        "{:?}",
        refreshed.notes
    );
    let kept = published(&rig.daemon).unwrap();
    assert_eq!(kept.inventory, first.inventory);
    assert_eq!(kept.detected_at, first.detected_at);
    assert!(
        kept.failure
            .as_deref()
            .unwrap()
            .starts_with("nvidia: driver present but")
    );
    // The plugins keep serving: every token, and the grant.
    assert_eq!(rig.kubelet.devices(GPU).len(), 8);
    assert_eq!(rig.plugins.as_ref().unwrap().ledger().grants().len(), 1);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_finds_nothing_drops_the_tokens_and_the_grants() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    admit_one(&rig, "uid-a").await;

    remove_driver(host.path(), &rig.commands);
    let refreshed = refresh(&rig.daemon).await;
    assert!(refreshed.gpus.is_empty());
    rig.kubelet.wait_devices(GPU, <[_]>::is_empty).await;
    rig.kubelet.wait_devices(SHARED, <[_]>::is_empty).await;
    assert!(rig.plugins.as_ref().unwrap().ledger().grants().is_empty());
    let undetected = published(&rig.daemon).unwrap();
    assert!(undetected.inventory.manufacturers.is_empty());
    assert_eq!(undetected.failure, None);

    // A later failure cannot resurrect the cards that were pulled.
    restore_driver(host.path(), &rig.commands);
    wedge_driver(host.path(), &rig.commands);
    refresh(&rig.daemon).await;
    let failed = published(&rig.daemon).unwrap();
    assert!(failed.inventory.manufacturers.is_empty());
    assert!(failed.failure.is_some());
    assert!(rig.kubelet.devices(GPU).is_empty());
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manufacturer_that_never_answered_publishes_nothing_and_the_round_repeats() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut fast = options(&data_dir(&data));
    fast.inventory_interval = Duration::from_millis(100);
    // The first pass cannot measure, then the driver answers with no accelerator.
    let (daemon, commands) = {
        let probe = Switch::new(Box::new(RecordedCommands::empty()));
        wedge_driver(host.path(), &probe);
        let mut node = Node::open(host.path()).unwrap();
        node.commands = Box::new(probe.clone());
        (Arc::new(Daemon::prepare(node, fast).unwrap()), probe)
    };
    assert_eq!(published(&daemon), None);
    let loops = Loops::start(daemon.clone(), None);
    let mut passes = daemon.passes();
    let wait = passes.wait_for(|p| *p >= 2);
    tokio::time::timeout(SETTLE, wait)
        .await
        .expect("the round repeats every period")
        .unwrap();
    assert_eq!(published(&daemon), None);
    let refreshed = refresh(&daemon).await;
    assert!(
        refreshed.notes[0].starts_with(
            "nvidia: the first detection could not measure; nothing is published, detecting again in 0s: "
        ),
        "{:?}",
        refreshed.notes
    );
    std::fs::remove_file(host.path().join("root/proc/driver/nvidia/gpus")).unwrap();
    remove_driver(host.path(), &commands);
    let refreshed = refresh(&daemon).await;
    assert_eq!(
        refreshed.notes,
        ["nvidia: no accelerator has answered yet; nothing is published, detecting again in 0s"]
    );
    assert_eq!(published(&daemon), None);
    assert!(daemon.reasons().contains(&Reason::Periodic));
    loops.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fast_failed_publishes_the_empty_first_result() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let probe = Switch::new(Box::new(RecordedCommands::empty()));
    remove_driver(host.path(), &probe);
    let mut node = Node::open(host.path()).unwrap();
    node.commands = Box::new(probe);
    let mut publish_empty = options(&data_dir(&data));
    publish_empty.fast_failed = false;
    let daemon = Daemon::prepare(node, publish_empty).unwrap();
    let first = published(&daemon).expect("the empty first result is published");
    assert!(first.inventory.manufacturers.is_empty());
    assert_eq!(first.failure, None);
    assert_eq!(first.manufacturer, Manufacturer::Nvidia);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_node_without_gpus_keeps_running_and_serves_them_when_they_appear() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let data = data_dir(&data);
    let kubelet_dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(kubelet_dir.path(), MemoryPods::new()).await;
    let mut fast = options(&data);
    fast.inventory_interval = Duration::from_millis(100);
    let probe = Switch::new(Box::new(RecordedCommands::load(host.path()).unwrap()));
    remove_driver(host.path(), &probe);
    let mut node = Node::open(host.path()).unwrap();
    node.commands = Box::new(probe.clone());
    let daemon = Arc::new(Daemon::prepare(node, fast).unwrap());
    let loops = Loops::start(daemon.clone(), None);
    let pods: Arc<dyn accel_plugin::pods::PodSource> = Arc::new(kubelet.pods().clone());
    let starting = {
        let daemon = daemon.clone();
        let kubelet_dir = kubelet_dir.path().to_path_buf();
        tokio::spawn(async move {
            daemon
                .start_plugins(|s| plugin_config(&kubelet_dir, &data, s), pods)
                .await
        })
    };
    let mut passes = daemon.passes();
    tokio::time::timeout(SETTLE, passes.wait_for(|p| *p >= 3))
        .await
        .expect("it keeps detecting")
        .unwrap();
    assert!(
        !starting.is_finished(),
        "no plugin before an accelerator answers"
    );
    assert!(kubelet.devices(GPU).is_empty());

    restore_driver(host.path(), &probe);
    let plugins = tokio::time::timeout(SETTLE, starting)
        .await
        .expect("the plugins start once the GPUs answer")
        .unwrap()
        .unwrap();
    kubelet.wait_for(&[GPU, SHARED]).await;
    assert_eq!(kubelet.devices(GPU).len(), 8);
    loops.stop().await;
    plugins.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_change_triggers_a_detection() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    let before = *rig.daemon.passes().borrow();
    rig.line(HARDWARE_XID_GPU0);
    rig.wait_passes(before, 1, SETTLE, "after a health change")
        .await;
    assert_eq!(rig.daemon.reasons().first(), Some(&Reason::HealthChange));
    // What is published carries the health.
    let now = published(&rig.daemon).unwrap();
    assert!(!now.inventory.manufacturers[0].accelerators[0].healthy);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_vanishing_between_passes_drops_its_tokens_and_its_grant() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    let a = admit_one(&rig, "uid-a").await;
    let b = admit_one(&rig, "uid-b").await;
    // a's card leaves: gone from procfs and the bus, and nvidia-smi no longer answers, so the
    // pass enumerates from procfs alone (its indices move up).
    let bus = rig.daemon.inventory().manufacturers[0]
        .accelerators
        .iter()
        .find(|g| g.uuid.as_deref() == Some(a.as_str()))
        .unwrap()
        .bus_id
        .unwrap();
    let short = bus.sysfs();
    let gpus = host.path().join("root/proc/driver/nvidia/gpus");
    std::fs::remove_dir_all(gpus.join(&short)).unwrap();
    let _ = std::fs::remove_file(host.path().join("root/sys/bus/pci/devices").join(&short));
    rig.commands.none();
    let refreshed = refresh(&rig.daemon).await;
    assert_eq!(refreshed.gpus.len(), 7, "{refreshed:?}");
    rig.kubelet
        .wait_devices(GPU, |d| d.len() == 7 && d.iter().all(|t| t.id != a))
        .await;
    let ledger = rig.plugins.as_ref().unwrap().ledger();
    assert_eq!(ledger.grants().len(), 1);
    let (key, grant) = ledger.grants().iter().next().unwrap();
    assert_eq!(key.pod_uid, "uid-b");
    // b's grant followed its GPU to its new index.
    let seat = ledger.seat(grant.accelerators[0]).unwrap();
    assert_eq!(seat.uuid.as_deref(), Some(b.as_str()));
    rig.stop().await;
}

#[test]
fn a_seat_is_healthy_when_its_gpu_is_listed_and_passes() {
    let host = host();
    let node = Node::open(host.path()).unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = Daemon::prepare(node, options(&data_dir(&data))).unwrap();
    let mut inventory = daemon.inventory();
    inventory.manufacturers[0].accelerators[1].healthy = false;
    let seats = vec![
        (0, Some(GPU0.to_string())),
        (1, Some(GPU1.to_string())),
        (2, Some("GPU-not-listed-any-more".to_string())),
        (3, None),
    ];
    assert_eq!(
        seat_health(&seats, &inventory),
        vec![(0, true), (1, false), (2, false), (3, true)]
    );
}

/// The API server is down while Pods are allocated: every Allocate answers and nothing lands;
/// once it is back the NodeFeature, the Devices object and its status, each Pod's
/// `accelerator.allocated` annotation and the node's capacity keys all land (issue 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_answers_through_an_api_outage_and_everything_lands_once_it_is_back() {
    use accel_core::devices::AllocationMode;
    use accel_core::ledger::annotation::{self, ALLOCATED_ANNOTATION};
    use accel_core::resources::KeyGrammar;
    use accel_kube::publish::memory::MemoryApi;
    use accel_kube::publish::{NodeFacts, PodRef, Publisher, PublisherConfig};
    use tokio::sync::watch;

    use crate::publish::Feed;

    const NODE: &str = "gpu-node-7";
    const NAMESPACE: &str = "gpustack-system";
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let rig = Rig::start(host.path(), &data_dir(&data)).await;
    let api = Arc::new(MemoryApi::new());
    api.put_node(
        NODE,
        NodeFacts {
            uid: "node-uid-7".into(),
            labels: BTreeMap::from([
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            ]),
            ..NodeFacts::default()
        },
    );
    api.set_reachable(false);

    let (_plugins_tx, plugins_rx) = watch::channel(Some(rig.plugins.as_ref().unwrap().handle()));
    let feed = Feed {
        grammar: KeyGrammar::default(),
        slices: Arc::new(|_| true),
        pods: Arc::new(rig.kubelet.pods().clone()),
        detected: rig.daemon.published(),
        plugins: plugins_rx,
        out: watch::channel(None).0,
        network: None,
    };
    let mut config = PublisherConfig::new(NODE, NAMESPACE, [Manufacturer::Nvidia]);
    config.backoff_initial = Duration::from_millis(20);
    config.backoff_max = Duration::from_millis(100);
    let (publisher, mut handle) = Publisher::new(api.clone(), config, feed.out.subscribe());
    let desired = feed.out.subscribe();
    let publisher = tokio::spawn(publisher.run());
    let feeder = tokio::spawn(feed.run());

    // Down: three Pods are allocated, each Allocate answers.
    let mut held = BTreeMap::new();
    for uid in ["uid-a", "uid-b", "uid-c"] {
        api.put_pod(&PodRef {
            namespace: "ns".into(),
            name: format!("trainer-{uid}"),
            uid: uid.into(),
        });
        held.insert(uid, admit_one(&rig, uid).await);
    }
    // The feed follows the ledger a moment after each answer: once it has handed the publisher
    // the three Pods' annotations, the publisher tries (and tries again after its backoff), and
    // is refused.
    testing::wait_until(
        "the three Pods' annotations handed to the publisher",
        || {
            desired.borrow().as_ref().is_some_and(|want| {
                held.keys().all(|uid| {
                    want.annotations
                        .iter()
                        .any(|(pod, value)| pod.uid == *uid && value.is_some())
                })
            })
        },
    )
    .await;
    api.clear_calls();
    testing::wait_until(
        "the publisher tried the API server while it was down",
        || api.calls().len() >= 2,
    )
    .await;
    assert!(
        !handle.is_caught_up(),
        "nothing can land while the API is down"
    );
    assert!(api.devices_object(NODE).is_none());
    assert!(
        api.node_feature_object(NAMESPACE, &format!("{NODE}-gpustack-device-manager"))
            .is_none()
    );
    assert_eq!(
        api.pod_annotation("ns", "trainer-uid-a", ALLOCATED_ANNOTATION),
        None
    );

    // Back: everything lands.
    api.set_reachable(true);
    tokio::time::timeout(Duration::from_secs(20), handle.caught_up())
        .await
        .expect("everything lands once the API server is back");
    let feature = api
        .node_feature_object(NAMESPACE, &format!("{NODE}-gpustack-device-manager"))
        .expect("the NodeFeature");
    assert_eq!(
        feature.spec.labels,
        accel_core::labels::labels(&rig.daemon.inventory())
    );
    for (uid, token) in &held {
        let value = api
            .pod_annotation("ns", &format!("trainer-{uid}"), ALLOCATED_ANNOTATION)
            .unwrap_or_else(|| panic!("{uid}'s annotation landed"));
        let allocated = annotation::parse(&value).unwrap();
        assert_eq!(allocated["main"].device_ids, vec![token.clone()], "{uid}");
    }
    let devices = api.devices_object(NODE).expect("the Devices object");
    let status = devices.status.expect("its status");
    let exclusive = status
        .accelerators
        .iter()
        .filter(|a| a.mode == AllocationMode::Exclusive)
        .count();
    assert_eq!(exclusive, 3, "{:?}", status.accelerators);
    assert!(
        status.conditions.iter().any(|c| c.type_ == "Detected"),
        "{:?}",
        status.conditions
    );
    let node = api.node_facts(NODE).unwrap();
    assert_eq!(
        node.capacity
            .get("nvidia.com/gpu.sliced.units")
            .map(String::as_str),
        Some("12800000"),
        "{:?}",
        node.capacity
    );

    feeder.abort();
    publisher.abort();
    rig.stop().await;
}

/// Issue 12, item 4: the XID conditions reach the cluster. Each GPU's faults (code, class, the
/// driver's text, when first seen) are in `Devices.status.faults`, and each new hardware-class
/// fault is one Warning Event on the Node; an application-class fault makes no Event, and a
/// repeated XID no second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_conditions_reach_the_devices_status_and_hardware_faults_the_node_events() {
    use accel_core::devices::FaultClass;
    use accel_core::resources::KeyGrammar;
    use accel_kube::publish::memory::MemoryApi;
    use accel_kube::publish::{NodeFacts, Publisher, PublisherConfig};
    use tokio::sync::watch;

    use crate::publish::Feed;

    const NODE: &str = "gpu-node-4";
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(host.path(), &data_dir(&data)).await;
    let api = Arc::new(MemoryApi::new());
    api.put_node(
        NODE,
        NodeFacts {
            uid: "node-uid-4".into(),
            ..NodeFacts::default()
        },
    );
    let (_plugins_tx, plugins_rx) = watch::channel(Some(rig.plugins.as_ref().unwrap().handle()));
    let feed = Feed {
        grammar: KeyGrammar::default(),
        slices: Arc::new(|_| true),
        pods: Arc::new(rig.kubelet.pods().clone()),
        detected: rig.daemon.published(),
        plugins: plugins_rx,
        out: watch::channel(None).0,
        network: None,
    };
    let config = PublisherConfig::new(NODE, "gpustack-system", [Manufacturer::Nvidia]);
    let (publisher, mut handle) = Publisher::new(api.clone(), config, feed.out.subscribe());
    let publisher = tokio::spawn(publisher.run());
    let feeder = tokio::spawn(feed.run());

    rig.line(APPLICATION_XID_GPU0);
    rig.line(HARDWARE_XID_GPU1);
    rig.line(HARDWARE_XID_GPU1);
    rig.wait_health(GPU1, "Unhealthy", SETTLE).await;
    let landed = async {
        loop {
            handle.caught_up().await;
            let faults = api
                .devices_object(NODE)
                .and_then(|d| d.status)
                .map(|s| s.faults.len());
            if faults == Some(2) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(SETTLE, landed)
        .await
        .expect("both faults reach Devices.status");

    let status = api.devices_object(NODE).unwrap().status.unwrap();
    let gpu0 = status.faults.iter().find(|f| f.uuid == GPU0).unwrap();
    assert_eq!(
        (gpu0.index, gpu0.type_.as_str(), gpu0.xid, gpu0.class),
        (Some(0), "Xid13", Some(13), FaultClass::Application)
    );
    assert_eq!(gpu0.message, "Graphics SM Warp Exception");
    let gpu1 = status.faults.iter().find(|f| f.uuid == GPU1).unwrap();
    assert_eq!(
        (gpu1.index, gpu1.type_.as_str(), gpu1.xid, gpu1.class),
        (Some(1), "Xid48", Some(48), FaultClass::Hardware)
    );
    assert_eq!(gpu1.message, "An uncorrectable double bit error");
    let time = gpu1.time.as_deref().expect("when it was first seen");
    assert!(
        time.len() == 20 && time.ends_with('Z'),
        "RFC 3339 to the second: {time}"
    );

    // One Event, for the hardware fault only, about the Node by name and UID.
    let events = api.node_events(NODE);
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(
        (event.type_.as_str(), event.reason.as_str()),
        ("Warning", "Xid48")
    );
    assert!(
        event.message.contains(GPU1) && event.message.contains("An uncorrectable double bit error"),
        "{}",
        event.message
    );
    assert!(
        api.calls()
            .iter()
            .filter(|c| c.starts_with("create_node_event"))
            .count()
            == 1,
        "one create: {:?}",
        api.calls()
    );

    feeder.abort();
    publisher.abort();
    rig.stop().await;
}

/// Log lines written while `f` runs on this thread, as plain text.
/// The process-wide subscriber of the unit tests: it records nothing, and tells every callsite
/// to ask again each time (`Interest::sometimes`). Without one, a callsite first reached on
/// another test's thread, where no subscriber is set, is cached as never enabled, and a
/// thread's own subscriber (`logged`) then misses its events — the flake this removes.
struct AskEveryTime;

impl tracing::Subscriber for AskEveryTime {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(AskEveryTime);
    });
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

#[test]
fn the_first_detection_is_logged_as_what_was_found_not_as_a_change() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let ((daemon, _commands), log) = logged(|| prepare(host.path(), options(data.path())));
    let found: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("first detection"))
        .collect();
    assert_eq!(found.len(), 1, "{log}");
    assert!(found[0].contains(" INFO "), "{log}");
    assert!(
        found[0].contains("first detection: 8 accelerators"),
        "{log}"
    );
    assert!(found[0].contains(GPU0), "{log}");
    assert!(
        !log.contains("changed"),
        "a first start is no change: {log}"
    );
    assert!(!log.contains("WARN"), "{log}");

    // A later pass that finds the same accelerators says nothing; one that finds others warns.
    let inventory = daemon.inventory();
    assert_eq!(
        InventoryNote::of(false, &inventory, &inventory),
        None,
        "an unchanged pass"
    );
    let mut fewer = inventory.clone();
    fewer.manufacturers[0].accelerators.truncate(6);
    let note = InventoryNote::of(false, &inventory, &fewer).unwrap();
    assert!(matches!(note, InventoryNote::Changed { before: 8, .. }));
    assert!(note.to_string().contains("changed (8 → 6)"), "{note}");
    let ((), log) = logged(|| log_inventory(false, &inventory, &fewer));
    assert!(
        log.contains(" WARN ") && log.contains("changed (8 → 6)"),
        "{log}"
    );
    // The empty first result (--no-fast-failed on a node without accelerators).
    assert_eq!(
        InventoryNote::of(true, &Inventory::default(), &Inventory::default())
            .unwrap()
            .to_string(),
        "first detection: no accelerator"
    );
}

#[test]
fn the_kernel_log_is_read_where_kmsg_path_says_not_only_under_the_host_root() {
    use std::io::Write as _;
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let (daemon, _commands) = prepare(host.path(), options(data.path()));
    // The recording holds no dev/kmsg: without a path, XIDs are not watched.
    assert!(daemon.open_kernel_log(None).is_none());
    assert!(
        daemon
            .open_kernel_log(Some(&data.path().join("no-such-kmsg")))
            .is_none()
    );
    // The DaemonSet's own mount of the host's kernel log, beside a read-only host root.
    let kmsg = data.path().join("kmsg");
    std::fs::write(&kmsg, "6,1,100,-;an old record\n").unwrap();
    let mut log = daemon
        .open_kernel_log(Some(&kmsg))
        .expect("the kernel log at --kmsg-path opens");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&kmsg)
        .unwrap()
        .write_all(format!("3,2,200,-;{HARDWARE_XID_GPU0}\n").as_bytes())
        .unwrap();
    match log.next_entry().unwrap() {
        Some(KernelLogEntry::Record(record)) => assert_eq!(record.message, HARDWARE_XID_GPU0),
        other => panic!("expected the record written after opening, got {other:?}"),
    }
}

/// The recorded 8-GPU host's files as a live-looking root (no recording mark, no `commands/`),
/// with decoys under its `root/` — where a live root misread as a recording would look — that
/// contradict every fact the test reads at the top. The programs stay the recorded ones: which
/// programs a live root runs is the binary tests' business (`tests/live_root.rs`).
const LIVE_BOOT: &str = "1ae0b07c-5c8f-4d55-9e51-7c3a0c1f2e4d";
const DECOY_BOOT: &str = "dec0dec0-0000-4000-8000-000000000000";

fn live_host() -> tempfile::TempDir {
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu");
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/root/.", recorded.display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        accel_nvidia::faults::BOOT_ID_PATH,
        &format!("{LIVE_BOOT}\n"),
    );
    write("dev/kmsg", "");
    write(
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\"]\n",
    );
    write(
        "etc/cdi/nvidia.yaml",
        &format!(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: {GPU0}\n    containerEdits: {{}}\n"
        ),
    );
    write(
        &NvidiaResponder::library_path(Path::new(HOST_LIBRARY_DIR), 13),
        "stand-in",
    );
    // The decoys: another boot, NVIDIA's runtime as the default, no CDI.
    write(
        &format!("root/{}", accel_nvidia::faults::BOOT_ID_PATH),
        &format!("{DECOY_BOOT}\n"),
    );
    write(
        "root/etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n",
    );
    write(
        &format!(
            "root{}",
            NvidiaResponder::library_path(Path::new(HOST_LIBRARY_DIR), 12)
        ),
        "decoy",
    );
    assert!(!dir.path().join(accel_host::MARK_FILE).exists());
    dir
}

/// The live root opened as `serve` opens it, with the recorded host's programs.
fn open_live(root: &Path) -> Node {
    let mut node = Node::open(root).unwrap();
    assert!(!node.is_recorded(), "no mark: a live root");
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu");
    node.commands = Box::new(RecordedCommands::load(&recorded).unwrap());
    node
}

#[test]
fn a_live_roots_boot_id_engine_and_cdi_are_read_at_its_top() {
    let live = live_host();
    let node = open_live(live.path());
    assert_eq!(
        accel_nvidia::faults::read_boot_id(node.host.as_ref()).unwrap(),
        LIVE_BOOT
    );
    let engine = accel_nvidia::engine::engine_facts(node.host.as_ref());
    assert!(engine.readable, "{engine:?}");
    assert!(engine.cdi_enabled, "{engine:?}");
    assert!(
        !engine.default_runtime_is_vendor,
        "the decoy's runtime: {engine:?}"
    );
    assert_eq!(
        engine.cdi_devices.iter().collect::<Vec<_>>(),
        vec![&format!("nvidia.com/gpu={GPU0}")],
        "{engine:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_on_a_live_root_reads_its_faults_kernel_log_and_library_there() {
    let live = live_host();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data_dir(&data);
    // This boot's fault on GPU 0, recorded by an earlier daemon: it applies only when the boot id
    // is read at the top of the root.
    let mut record = accel_nvidia::faults::FaultRecord::new(LIVE_BOOT);
    let node = open_live(live.path());
    let (inventory, _) = node
        .collect(
            None,
            &PciClassPrefixes::default(),
            options(&data_dir).deadlines,
        )
        .unwrap();
    let event = accel_nvidia::xid::parse_message(HARDWARE_XID_GPU0).expect("an XID line");
    record.record(&XidClasses::default().fault(&event), &inventory);
    record
        .save(&data_dir.join(accel_nvidia::faults::FILE_NAME))
        .unwrap();

    let daemon = Daemon::prepare(node, options(&data_dir)).unwrap();
    let gpu0 = daemon
        .inventory()
        .manufacturers
        .first()
        .and_then(|m| {
            m.accelerators
                .iter()
                .find(|a| a.uuid.as_deref() == Some(GPU0))
        })
        .cloned()
        .expect("GPU 0 detected on the live root");
    assert!(!gpu0.healthy, "this boot's fault applies: {gpu0:?}");

    // The kernel log is <root>/dev/kmsg: a record written there after it was opened is read.
    let mut log = daemon
        .open_kernel_log(None)
        .expect("the live root's dev/kmsg opens");
    let kmsg = live.path().join("dev/kmsg");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&kmsg)
        .unwrap();
    std::io::Write::write_all(
        &mut file,
        format!("3,4242,1000000,-;{APPLICATION_XID_GPU0}\n").as_bytes(),
    )
    .unwrap();
    match log.next_entry().unwrap() {
        Some(KernelLogEntry::Record(record)) => {
            assert_eq!(record.sequence, 4242);
            assert_eq!(record.message, APPLICATION_XID_GPU0);
        }
        other => panic!(
            "expected the record written to {}: {other:?}",
            kmsg.display()
        ),
    }

    // The preload library for the node's CUDA major (13.1) is looked for under the root's own
    // /var/lib/gpustack/operator/lib.
    let library = NvidiaResponder::library_path(Path::new(HOST_LIBRARY_DIR), 13);
    assert!(daemon.host_exists(&library));
    assert!(!daemon.host_exists(&format!("root{library}")));
}

/// The daemon with its metrics registered as `serve` registers them.
async fn metered(host: &Path, data: &Path) -> (Rig, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::with_prefix("device_manager");
    let mut options = options(data);
    options.metrics = DaemonMetrics::register(&mut registry);
    let rig = Rig::start_with(host, options).await;
    registry.register_collector(Box::new(rig.daemon.accelerator_metrics(Default::default())));
    (rig, registry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_passes_are_counted_by_outcome_and_timed() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let (rig, registry) = metered(host.path(), &data_dir(&data)).await;
    let passes = |samples: &Samples, outcome: &str| {
        samples
            .get(
                "device_manager_detection_passes_total",
                &[("outcome", outcome)],
            )
            .unwrap_or_else(|| panic!("no detection_passes_total{{outcome={outcome}}}"))
    };
    let count = |samples: &Samples| {
        samples
            .get("device_manager_detection_duration_seconds_count", &[])
            .expect("the duration histogram")
    };
    // The first pass ran at start, before any scrape; every accelerator is healthy.
    let samples = scrape(&registry);
    assert_eq!(
        [
            passes(&samples, "measured"),
            passes(&samples, "empty"),
            passes(&samples, "failed")
        ],
        [1.0, 0.0, 0.0]
    );
    assert_eq!(count(&samples), 1.0);
    let healthy = samples.all("device_manager_accelerator_healthy");
    assert_eq!(healthy.len(), 8, "{healthy:?}");
    assert!(healthy.iter().all(|(_, v)| *v == 1.0));
    assert_eq!(
        samples.get(
            "device_manager_accelerator_healthy",
            &[("manufacturer", "nvidia"), ("index", "1"), ("uuid", GPU1)]
        ),
        Some(1.0)
    );

    refresh(&rig.daemon).await;
    wedge_driver(host.path(), &rig.commands);
    refresh(&rig.daemon).await;
    let samples = scrape(&registry);
    assert_eq!(
        [passes(&samples, "measured"), passes(&samples, "failed")],
        [2.0, 1.0]
    );
    // A pass that could not measure keeps the last inventory, and so its health.
    assert_eq!(samples.all("device_manager_accelerator_healthy").len(), 8);

    remove_driver(host.path(), &rig.commands);
    refresh(&rig.daemon).await;
    let samples = scrape(&registry);
    assert_eq!(passes(&samples, "empty"), 1.0);
    assert_eq!(count(&samples), 4.0, "every pass is timed");
    assert!(
        samples.all("device_manager_accelerator_healthy").is_empty(),
        "an undetected manufacturer has no accelerator to report"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xids_are_counted_by_code_and_class_and_health_follows() {
    let host = host();
    let data = tempfile::tempdir().unwrap();
    let (mut rig, registry) = metered(host.path(), &data_dir(&data)).await;
    rig.line(APPLICATION_XID_GPU0);
    rig.line(APPLICATION_XID_GPU0);
    rig.line("an unrelated kernel line");
    // Entries are taken in order: once GPU 1 is unhealthy, the lines before were counted.
    rig.line(HARDWARE_XID_GPU1);
    rig.wait_health(GPU1, "Unhealthy", SETTLE).await;
    let samples = scrape(&registry);
    assert_eq!(
        samples.all("device_manager_xids_total"),
        vec![
            (
                BTreeMap::from([
                    ("class".to_string(), "application".to_string()),
                    ("code".to_string(), "13".to_string())
                ]),
                2.0
            ),
            (
                BTreeMap::from([
                    ("class".to_string(), "hardware".to_string()),
                    ("code".to_string(), "48".to_string())
                ]),
                1.0
            ),
        ]
    );
    assert_eq!(samples.kind("device_manager_xids_total"), Some("counter"));
    let health = |index: &str, uuid: &str| {
        samples.get(
            "device_manager_accelerator_healthy",
            &[("manufacturer", "nvidia"), ("index", index), ("uuid", uuid)],
        )
    };
    assert_eq!(health("1", GPU1), Some(0.0), "a hardware XID");
    assert_eq!(
        health("0", GPU0),
        Some(1.0),
        "an application XID leaves it in service"
    );
    rig.stop().await;
}

/// A copy of the recorded 8×H100 host in MIG mode (no instances), its MIG state included.
fn mig_host() -> tempfile::TempDir {
    copy_host("hgx-h100-8gpu-mig", BOOT)
}

/// Issue 13: the worked 8×H100 example through `serve`'s published state. Eight empty H100s in
/// MIG mode advertise 56 Healthy partition tokens and publish every profile's capacity; after
/// one `3g.40gb` (admitted through the emulator: GPU 0, slices 0-3) the tokens are 53 and the
/// keys 52, 30, 22, 16, 7, 7; the `Devices` status shows GPU 0 partitioned with its allocated and
/// still-placeable profiles; `+me` profiles reach no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_mig_example_reaches_the_published_tokens_capacity_and_devices_status() {
    use accel_core::devices::AllocationMode;
    use accel_core::resources::KeyGrammar;
    use tokio::sync::watch;

    use crate::publish::Feed;

    const PARTITIONED: &str = "nvidia.com/gpu.partitioned";
    let host = mig_host();
    let parent = tempfile::tempdir().unwrap();
    let data = data_dir(&parent);
    let kubelet_dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(kubelet_dir.path(), MemoryPods::new()).await;
    let (daemon, _commands) = prepare(host.path(), options(&data));
    // The partitioner's own handle on the host's programs, as `serve` opens it.
    let partition_commands: Arc<dyn Commands> =
        Arc::from(Node::open(host.path()).unwrap().commands);
    let pods = Arc::new(kubelet.pods().clone());
    let start = daemon.start_plugins(
        |s| Config {
            partitions: Some(accel_plugin::Partitions {
                partitioner: Arc::new(accel_nvidia::partitioner::SmiPartitioner::default()),
                commands: partition_commands.clone(),
                orphans: accel_plugin::service::Orphans::default(),
            }),
            ..plugin_config(kubelet_dir.path(), &data, s)
        },
        pods,
    );
    let plugins = tokio::time::timeout(SETTLE, start)
        .await
        .expect("the MIG host's GPUs were detected at start")
        .unwrap();
    kubelet.wait_for(&[PARTITIONED]).await;
    let healthy = |n: usize| {
        kubelet.wait_devices(PARTITIONED, move |devices| {
            devices.iter().filter(|d| d.health == "Healthy").count() == n
        })
    };
    tokio::time::timeout(SETTLE, healthy(56))
        .await
        .expect("56 Healthy tokens");
    assert_eq!(kubelet.devices(PARTITIONED).len(), 56);
    assert!(
        kubelet.devices(GPU).is_empty(),
        "no whole-GPU token on a MIG GPU"
    );

    let (_plugins_tx, plugins_rx) = watch::channel(Some(plugins.handle()));
    let feed = Feed {
        grammar: KeyGrammar::default(),
        slices: Arc::new(|_| false),
        pods: Arc::new(kubelet.pods().clone()),
        detected: daemon.published(),
        plugins: plugins_rx,
        out: watch::channel(None).0,
        network: None,
    };
    let keys = |feed: &Feed| -> BTreeMap<String, u64> {
        feed.update();
        feed.out
            .borrow()
            .as_ref()
            .unwrap()
            .capacity
            .iter()
            .filter(|(k, _)| k.starts_with("nvidia.com/gpu.partitioned."))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let expect = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs
            .iter()
            .map(|(k, v)| (format!("nvidia.com/gpu.partitioned.{k}"), *v))
            .collect()
    };
    assert_eq!(
        keys(&feed),
        expect(&[
            ("units", 12_800_000),
            ("mig-1g.10gb", 56),
            ("mig-1g.20gb", 32),
            ("mig-2g.20gb", 24),
            ("mig-3g.40gb", 16),
            ("mig-4g.40gb", 8),
            ("mig-7g.80gb", 8),
        ])
    );

    let profile = format!("{PARTITIONED}.mig-3g.40gb");
    kubelet.create(Pod {
        name: "trainer-uid-a".into(),
        ..testing::pod(
            "uid-a",
            1_700_000_000,
            &[("main", &[(PARTITIONED, "1"), (profile.as_str(), "1")])],
        )
    });
    let admission = kubelet.admit("uid-a").await.unwrap();
    let visible = &admission["main"][PARTITIONED].envs["NVIDIA_VISIBLE_DEVICES"];
    assert!(visible.starts_with("MIG-"), "{visible}");
    tokio::time::timeout(SETTLE, healthy(53))
        .await
        .expect("53 Healthy tokens");
    assert_eq!(
        keys(&feed),
        expect(&[
            ("units", 12_800_000),
            ("mig-1g.10gb", 52),
            ("mig-1g.20gb", 30),
            ("mig-2g.20gb", 22),
            ("mig-3g.40gb", 16),
            ("mig-4g.40gb", 7),
            ("mig-7g.80gb", 7),
        ])
    );
    let desired = feed.out.borrow().clone().unwrap();
    let gpu0 = &desired.devices_status.accelerators[0];
    assert_eq!(gpu0.mode, AllocationMode::Partitioned);
    assert!(gpu0.remaining < 1_600_000 && gpu0.remaining > 0, "{gpu0:?}");
    let allocated = gpu0.allocated_profiles.as_ref().unwrap();
    let placeable = gpu0.placeable_profiles.as_ref().unwrap();
    assert_eq!((allocated["3g.40gb"], allocated["4g.40gb"]), (1, 0));
    assert_eq!((placeable["3g.40gb"], placeable["4g.40gb"]), (1, 0));
    assert!(!allocated.keys().any(|k| k.contains('+')), "{allocated:?}");
    let gpu1 = &desired.devices_status.accelerators[1];
    assert_eq!(gpu1.mode, AllocationMode::Free);
    assert_eq!(gpu1.placeable_profiles.as_ref().unwrap()["1g.10gb"], 7);

    // `detect` on the same folder afterwards shows the instance `serve` made.
    let node = Node::open(host.path()).unwrap();
    let (inventory, _) = node
        .detect(None, &PciClassPrefixes::default(), Deadlines::default())
        .unwrap();
    let gpus = &inventory.manufacturers[0].accelerators;
    assert_eq!(gpus[0].mig_devices.len(), 1);
    assert_eq!(
        gpus[0].mig_devices[0].uuid.as_deref(),
        Some(visible.as_str())
    );
    plugins.stop().await;
}
