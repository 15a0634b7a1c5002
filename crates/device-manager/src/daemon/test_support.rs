//! What the daemon's scenario tests share, whichever manufacturer's recorded host they run on
//! (`tests.rs` the 8×H100, `amd_tests.rs` the 8× MI300X; the admin socket's tests copy hosts
//! with it too): a temp-dir copy of a recorded host with
//! a boot id, the daemon's options and the plugins' configuration as `serve` builds them, and
//! [`Rig`], the daemon with its plugins registered with the kubelet emulator over real unix
//! sockets and its kernel log fed through `ChannelKernelLog`. Waits are bounded and say what did
//! not happen.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::respond::Responder;
use accel_core::Manufacturer;
use accel_core::ledger::Seat;
use accel_host::{ChannelKernelLog, KernelLogEntry, KmsgRecord};
use accel_plugin::metrics::exposition::Samples;
use accel_plugin::pods::MemoryPods;
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::Kubelet;
use accel_plugin::{Config, DevicePlugins};

use super::loops::Loops;
use super::metrics::DaemonMetrics;
use super::*;

/// How long the tests that are not about latency wait for health to settle: generous, so a
/// loaded machine does not fail them (the one-second bound has its own test).
pub(super) const SETTLE: Duration = Duration::from_secs(5);

/// A copy of the recorded host `testdata/hosts/<name>` with `boot` as its boot id.
pub(super) fn copy_host(name: &str, boot: &str) -> tempfile::TempDir {
    let dir = copy_recorded(name);
    set_boot(dir.path(), boot);
    dir
}

/// A copy of the recorded host `testdata/hosts/<name>`, as recorded.
pub(crate) fn copy_recorded(name: &str) -> tempfile::TempDir {
    accel_testkit::copy_recorded(name)
}

/// Writes the recorded host's boot id.
pub(super) fn set_boot(host: &Path, boot: &str) {
    let path = host.join("root").join(faults::BOOT_ID_PATH);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{boot}\n")).unwrap();
}

/// The daemon's options as `serve` sets them by default, for `manufacturer`'s node.
pub(super) fn options(manufacturer: Manufacturer, data_dir: &Path) -> DaemonOptions {
    DaemonOptions {
        manufacturer,
        fast_failed: true,
        data_dir: data_dir.to_path_buf(),
        prefixes: PciClassPrefixes::default(),
        deadlines: Deadlines {
            per_query: Duration::from_secs(5),
            snapshot: Duration::from_secs(10),
        },
        inventory_interval: INVENTORY_INTERVAL,
        pci_poll_interval: PCI_POLL_INTERVAL,
        reset_deadline: Duration::from_secs(5),
        reset: crate::backends::backend(manufacturer)
            .map(|b| b.reset)
            .unwrap_or_else(|e| accel_backend::reset::Reset::Refused(e.to_string())),
        sampler: crate::backends::backend(manufacturer)
            .ok()
            .and_then(|b| b.sampler),
        faults: crate::settings::Settings::default().fault_classifier(manufacturer),
        metrics: DaemonMetrics::default(),
    }
}

/// The plugins' configuration as `serve` builds it for the section first detected (no slices,
/// no partitions), answering with `responder`.
pub(super) fn plugin_config(
    kubelet_dir: &Path,
    data: &Path,
    section: &ManufacturerInventory,
    responder: Arc<dyn Responder>,
) -> Config {
    Config {
        kubelet_dir: kubelet_dir.to_path_buf(),
        data_dir: data.to_path_buf(),
        settings: Settings::default(),
        offer: Offer {
            sliced: false,
            ..Offer::of(section.name)
        },
        seats: section
            .accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 128))
            .collect(),
        responder,
        poll_interval: Duration::from_millis(50),
        partitions: None,
        metrics: Default::default(),
    }
}

/// The daemon's data directory (serve creates it before anything else).
pub(super) fn data_dir(parent: &tempfile::TempDir) -> PathBuf {
    let dir = parent.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The faults file the daemon keeps in its data directory (empty when there is none).
pub(super) fn faults_file(data: &Path) -> String {
    std::fs::read_to_string(data.join(faults::FILE_NAME)).unwrap_or_default()
}

/// The registry's exposition as Prometheus would scrape it, parsed.
pub(super) fn scrape(registry: &prometheus_client::registry::Registry) -> Samples {
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry).unwrap();
    Samples::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The plugins' configuration for a kubelet directory, a data directory and a detected section.
pub(super) type PluginConfig = fn(&Path, &Path, &ManufacturerInventory) -> Config;

/// The daemon as `serve` runs it, with a fed kernel log and its own emulated kubelet.
pub(super) struct Rig {
    _kubelet_dir: tempfile::TempDir,
    pub kubelet: Kubelet,
    pub daemon: Arc<Daemon>,
    pub plugins: Option<DevicePlugins>,
    loops: Option<Loops>,
    log: Option<Sender<KernelLogEntry>>,
    sequence: u64,
    /// The whole-accelerator resource, whose tokens [`Rig::health`] reads.
    whole: &'static str,
}

impl Rig {
    /// Starts `daemon`'s plugins (configured by `config`) against a fresh emulated kubelet and
    /// its loops over a fed kernel log, and waits until the kubelet lists `resources` (the
    /// whole-accelerator one first).
    pub async fn start(
        daemon: Arc<Daemon>,
        data: &Path,
        config: PluginConfig,
        resources: &[&'static str],
    ) -> Rig {
        let kubelet_dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(kubelet_dir.path(), MemoryPods::new()).await;
        let pods = Arc::new(kubelet.pods().clone());
        let start = daemon.start_plugins(|s| config(kubelet_dir.path(), data, s), pods);
        let plugins = tokio::time::timeout(SETTLE, start)
            .await
            .expect("the recorded host's accelerators were detected at start")
            .unwrap();
        let (log, kernel_log) = ChannelKernelLog::new();
        let loops = Loops::start(daemon.clone(), Some(Box::new(kernel_log)));
        kubelet.wait_for(resources).await;
        Rig {
            _kubelet_dir: kubelet_dir,
            kubelet,
            daemon,
            plugins: Some(plugins),
            loops: Some(loops),
            log: Some(log),
            sequence: 100,
            whole: resources[0],
        }
    }

    /// Hands the daemon's kernel-log reader one entry.
    pub fn feed(&mut self, entry: KernelLogEntry) {
        self.log.as_ref().unwrap().send(entry).unwrap();
    }

    /// Hands the daemon's kernel-log reader one error-priority line, as `/dev/kmsg` gives it.
    pub fn line(&mut self, message: &str) {
        self.sequence += 1;
        let record = KmsgRecord {
            priority: 3,
            sequence: self.sequence,
            timestamp_us: self.sequence * 1000,
            flag: '-',
            message: message.to_string(),
        };
        self.feed(KernelLogEntry::Record(record));
    }

    /// The health of the accelerator's whole token in the emulator's ListAndWatch view.
    pub fn health(&self, uuid: &str) -> String {
        let devices = self.kubelet.devices(self.whole);
        match devices.iter().find(|d| d.id == uuid) {
            Some(d) => d.health.clone(),
            None => panic!("{uuid} is not advertised: {devices:?}"),
        }
    }

    /// Waits (at most `within`) until the accelerator's whole token has `health` in the
    /// emulator's ListAndWatch view.
    pub async fn wait_health(&self, uuid: &str, health: &str, within: Duration) {
        let wait = self.kubelet.wait_devices(self.whole, |devices| {
            devices.iter().any(|d| d.id == uuid && d.health == health)
        });
        if tokio::time::timeout(within, wait).await.is_err() {
            panic!(
                "{uuid} did not turn {health} in ListAndWatch within {within:?} (it is {})",
                self.health(uuid)
            );
        }
    }

    /// How many of `resource`'s tokens have `health` in the emulator's ListAndWatch view.
    pub fn count(&self, resource: &str, health: &str) -> usize {
        let devices = self.kubelet.devices(resource);
        devices.iter().filter(|d| d.health == health).count()
    }

    /// Waits until `n` of `resource`'s tokens have `health` in the emulator's ListAndWatch view.
    pub async fn wait_count(&self, resource: &str, health: &str, n: usize) {
        self.kubelet
            .wait_devices(resource, |d| {
                d.iter().filter(|d| d.health == health).count() == n
            })
            .await;
    }

    /// Waits until the daemon has run `n` more detection passes than `from` had seen.
    pub async fn wait_passes(&self, from: u64, n: u64, within: Duration, what: &str) {
        let mut passes = self.daemon.passes();
        let wait = passes.wait_for(|p| *p >= from + n);
        if tokio::time::timeout(within, wait).await.is_err() {
            panic!("{what}: no detection pass within {within:?}");
        }
    }

    /// Stops the kernel-log feed, the loops and the plugins, as a SIGTERM does.
    pub async fn stop(mut self) {
        drop(self.log.take());
        if let Some(loops) = self.loops.take() {
            loops.stop().await;
        }
        if let Some(plugins) = self.plugins.take() {
            plugins.stop().await;
        }
    }
}

/// The plugins' configuration as `serve` builds it for the section first detected, with the
/// manufacturer's own responder from its backend's factory (no host checks, no slices).
pub(super) fn backend_plugin_config(
    kubelet_dir: &Path,
    data: &Path,
    section: &ManufacturerInventory,
) -> Config {
    let backend = crate::backends::backend(section.name).unwrap();
    let responder = (backend.responder)(accel_backend::respond::ResponderSetup {
        scratch: None,
        strategy: backend
            .injection
            .unwrap_or(accel_backend::respond::InjectionStrategy::Envvar),
        runtime_major: None,
        pod_dir_root: data.join("pods"),
        preload_dir: data.join("preload"),
        library_dir: data.join("lib"),
        engine: Arc::new(accel_backend::respond::EngineFacts::default()),
        accelerators: section.accelerators.clone(),
        host: None,
        commands: None,
        runtime_class: None,
        writes: None,
    });
    plugin_config(kubelet_dir, data, section, responder)
}

/// The manufacturer's whole-accelerator resource (its base), as the kubelet emulator names it.
pub(super) fn whole_resource(manufacturer: Manufacturer) -> &'static str {
    Box::leak(
        accel_core::manufacturer::ManufacturerTable::default()
            .get(manufacturer)
            .resource_base
            .clone()
            .into_boxed_str(),
    )
}

/// A recorded host's programs, loaded again at every run, as a live tool answers what the
/// driver holds now: a test edits the recording to change the next answer.
pub(super) struct Rereading(pub PathBuf);

impl accel_host::Commands for Rereading {
    fn run(
        &self,
        argv: &[&str],
        deadline: Duration,
    ) -> Result<accel_host::CommandOutput, accel_host::CommandError> {
        accel_host::RecordedCommands::load(&self.0)
            .unwrap()
            .run(argv, deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        accel_host::RecordedCommands::load(&self.0)
            .unwrap()
            .is_installed(program)
    }
}

/// Runs one detection as `refresh` does.
pub(super) async fn refresh(daemon: &Arc<Daemon>) -> Refreshed {
    let daemon = daemon.clone();
    tokio::task::spawn_blocking(move || daemon.refresh())
        .await
        .unwrap()
        .unwrap()
}

/// The `Devices` Healthy condition the daemon's inventory gives.
pub(super) fn healthy_condition(daemon: &Daemon) -> accel_core::devices::Condition {
    accel_core::devices::Condition::health(&accel_core::devices::DevicesSpec::from_inventory(
        &daemon.inventory(),
        |_| None,
    ))
}
