//! `device-manager serve`: the node daemon. Detects one manufacturer's accelerators
//! (`--manufacturer`, this boot's faults applied), serves them to the kubelet (one device plugin
//! per resource) on one ledger with its journal in `--data-dir` once they have answered, watches
//! their health (`crate::daemon`: the kernel log, the detection cadence, what a pass means) and
//! answers the admin socket, until SIGTERM or Ctrl-C. A node that does not answer never ends
//! the process: it keeps detecting every period. With `--metrics-listen` it serves `/metrics`
//! (`crate::metrics`) from one registry the plugins, the daemon and the publisher record into.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use accel_backend::Backend;
use accel_backend::Deadlines;
use accel_backend::respond::{EngineSource, InjectionStrategy, ResponderSetup};
use accel_backend::slicing::{self, SliceOffer};
use accel_core::Manufacturer;
use accel_core::inventory::ManufacturerInventory;
use accel_kube::publish::kube::KubeApi;
use accel_kube::publish::{ClusterApi, PublishMetrics, Publisher, PublisherConfig};
use accel_plugin::pods::{MemoryPods, PodSource};
use accel_plugin::rdma::{RdmaConfig, RdmaPlugin};
use accel_plugin::service::Offer;
use accel_plugin::{Config, PluginMetrics};
use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::admin::server::AdminServer;
use crate::daemon::loops::Loops;
use crate::daemon::metrics::{DaemonMetrics, GpuUsageMetrics, LedgerMetrics};
use crate::daemon::{self, Daemon, DaemonOptions};
use crate::datadir::{self, DataDirLock};
use crate::network::Network;
use crate::node::{self, Node};
use crate::settings::Settings;
use crate::{backends, metrics, publish};

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// This node's name (the Pods it serves are those bound to it).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The node's root, or a recorded host folder (one carrying recorded-host.json).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The kubelet's directory (device-plugins/ and pod-resources/ sockets).
    #[arg(long, env = "KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// The kubelet's registration socket (`<dir>/device-plugins/kubelet.sock`); the plugins'
    /// sockets go beside it and pod-resources is `<dir>/pod-resources/kubelet.sock`. Given, it
    /// replaces `--kubelet-dir` (the described system's flag).
    #[arg(long, env = "KUBE_SOCKET", value_name = "PATH")]
    pub kube_socket: Option<PathBuf>,
    /// Node-local state: the ledger journal, the passthrough memory, Pod working directories
    /// (default `<GPUSTACK_DATA_DIR>/operator/device-manager` for NVIDIA,
    /// `<GPUSTACK_DATA_DIR>/operator/device-manager/<manufacturer>` for the others). One daemon
    /// a directory: a second one pointed at it refuses to start.
    #[arg(long, env = "DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The host directory the preload (slicing) libraries are staged in, one `cuda-<major>/`
    /// each: looked for under the host root, and handed to the kubelet as a host path (default
    /// `<GPUSTACK_DATA_DIR>/operator/lib`).
    #[arg(long, env = "LIBRARY_DIR")]
    pub library_dir: Option<PathBuf>,
    /// The kernel log watched for XIDs (default: `<host-root>/dev/kmsg`). The DaemonSet mounts
    /// the host's at `/dev/kmsg` apart from the host root, which may be a read-only recording.
    #[arg(long, env = "KMSG_PATH")]
    pub kmsg_path: Option<PathBuf>,
    /// PCI class prefixes the bus scan reads (comma-separated hex).
    #[arg(long, env = node::PCI_CLASS_PREFIXES_ENV)]
    pub pci_class_prefixes: Option<String>,
    /// Seconds between full inventory collections (XID bursts, a changed PCI device set and
    /// `refresh` collect in between).
    #[arg(long, env = "INVENTORY_INTERVAL", default_value_t = daemon::INVENTORY_INTERVAL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub inventory_interval: u64,
    /// The manufacturer this daemon detects and serves (the Helm chart runs one DaemonSet per
    /// manufacturer and passes it).
    #[arg(long, env = "MANUFACTURER", default_value = "nvidia")]
    pub manufacturer: Manufacturer,
    /// Publish the empty first result instead of holding it back: by default, before any
    /// accelerator has answered, nothing is published and the round repeats every period.
    #[arg(long, env = "NO_FAST_FAILED")]
    pub no_fast_failed: bool,
    /// Do not serve the shared family (`<base>.shared`).
    #[arg(long, env = "NO_SHARED")]
    pub no_shared: bool,
    /// Do not serve logical slices (`<base>.sliced`, and no sliced capacity is published).
    #[arg(long, env = "NO_SLICED")]
    pub no_sliced: bool,
    /// Do not serve hardware partitions (`<base>.partitioned`, registered only where a GPU is in
    /// MIG mode).
    #[arg(long, env = "NO_PARTITIONED")]
    pub no_partitioned: bool,
    /// Detect without first looking for the manufacturer's PCI vendor id on the bus (a host
    /// whose accelerators the bus scan cannot see: WSL 2, some virtual machines).
    #[arg(long, env = "NO_PCI_CHECK")]
    pub no_pci_check: bool,
    /// The namespace the daemon runs in, where its NodeFeature is written (the DaemonSet passes
    /// its own through the downward API); the cluster configuration's default when unset.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 0.0.0.0:9402); off when unset.
    #[arg(long, env = "METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// How often the GPUs' live usage is sampled for the metrics (with --metrics-listen):
    /// seconds, or with a unit (`15s`, `2m`); the samples `device-manager monitor` prints.
    #[arg(long, env = "MONITOR_PERIOD", default_value = "15s", value_parser = crate::cmd::monitor::parse_period)]
    pub monitor_period: Duration,
    /// How long a hardware partition no grant accounts for (a MIG instance carved by hand) must
    /// stay unowned and idle — no compute process on it — before it is destroyed: seconds, or
    /// with a unit (`300s`, `5m`). Until then it is reused first. The live instances are
    /// listed every fifth of it (at most every minute).
    #[arg(long, env = "PARTITION_ORPHAN_DEBOUNCE", default_value = "5m", value_parser = crate::cmd::monitor::parse_period)]
    pub partition_orphan_debounce: Duration,
    /// Serve the accelerators through Dynamic Resource Allocation too: a DRA kubelet plugin
    /// (driver `<manufacturer>.gpustack.ai`) beside the device plugins, on their one ledger,
    /// publishing the node's ResourceSlice (needs a cluster serving `resource.k8s.io/v1`).
    #[arg(long, env = "DRA")]
    pub dra: bool,
    /// Where the DRA driver writes one CDI spec per prepared claim: the container runtime's
    /// CDI directory as the daemon sees it.
    #[arg(long, env = "CDI_DIR", default_value = accel_dra::cdi::DEFAULT_CDI_DIR)]
    pub cdi_dir: PathBuf,
    /// With --dra: whole cards are served through DRA only, as the extended resource of the
    /// manufacturer's DeviceClass (the chart's `dra.extendedResource`): the device plugin does
    /// not register `<base>`, so a Pod asking `<base>: N` is given N devices by the scheduler
    /// through a claim it makes (Kubernetes 1.36, DRAExtendedResource).
    #[arg(long, env = "DRA_EXTENDED_RESOURCE", requires = "dra")]
    pub dra_extended_resource: bool,
}

/// Samples the accelerators' live usage every `period` on the blocking pool (the vendor's tool
/// may take its deadline) for the usage gauges; a failed sample clears them (a sample is worth what its time
/// claims) and is logged once until one succeeds again.
async fn sample_usage(
    daemon: Arc<Daemon>,
    period: Duration,
    usage: watch::Sender<Option<accel_backend::usage::UsageSample>>,
) {
    let mut failing = false;
    loop {
        let daemon_now = daemon.clone();
        match tokio::task::spawn_blocking(move || daemon_now.sample_usage()).await {
            Ok(Ok(sample)) => {
                failing = false;
                usage.send_replace(Some(sample));
            }
            Ok(Err(e)) => {
                if !failing {
                    tracing::warn!(
                        "usage sample: {e}; the GPU usage metrics are empty until a sample succeeds"
                    );
                }
                failing = true;
                usage.send_replace(None);
            }
            Err(_) => return,
        }
        tokio::time::sleep(period).await;
    }
}

/// Where `serve` keeps and finds things, resolved from its flags and the settings.
#[derive(Debug, Clone)]
struct Paths {
    kubelet_dir: PathBuf,
    data_dir: PathBuf,
    library_dir: PathBuf,
}

impl Paths {
    fn resolve(args: &Args, settings: &Settings) -> anyhow::Result<Paths> {
        let kubelet_dir = match &args.kube_socket {
            None => args.kubelet_dir.clone(),
            Some(socket) => kubelet_dir_of(socket)?,
        };
        let library_dir = args
            .library_dir
            .clone()
            .unwrap_or_else(|| settings.library_dir());
        if !library_dir.is_absolute() {
            anyhow::bail!(
                "--library-dir {}: not an absolute path (it is a host path the kubelet mounts from)",
                library_dir.display()
            );
        }
        Ok(Paths {
            kubelet_dir,
            data_dir: args
                .data_dir
                .clone()
                .unwrap_or_else(|| datadir::state_dir(&settings.daemon_dir(), args.manufacturer)),
            library_dir,
        })
    }
}

/// The kubelet directory of a registration socket `<dir>/device-plugins/kubelet.sock`.
fn kubelet_dir_of(socket: &std::path::Path) -> anyhow::Result<PathBuf> {
    let named = socket.file_name().is_some_and(|n| n == "kubelet.sock");
    let plugins = socket.parent().filter(|p| p.ends_with("device-plugins"));
    match (named, plugins.and_then(std::path::Path::parent)) {
        (true, Some(dir)) => Ok(dir.to_path_buf()),
        _ => anyhow::bail!(
            "--kube-socket {}: expected <kubelet dir>/device-plugins/kubelet.sock",
            socket.display()
        ),
    }
}

/// What `serve` has opened and prepared before anything runs: the daemon with its first
/// detection, the backend, the paths, and the handles the plugins' configuration needs. `serve`
/// and `demo` both start from here, so the demo runs the daemon exactly as a node does.
pub(crate) struct Prepared {
    pub daemon: Arc<Daemon>,
    backend: Backend,
    paths: Paths,
    settings: Settings,
    engine: Arc<dyn EngineSource>,
    node_files: Arc<dyn accel_host::Host>,
    node_writes: Arc<dyn accel_host::HostWrites>,
    partition_commands: Arc<dyn accel_host::Commands>,
    /// The data directory held for this daemon until it is dropped.
    _lock: DataDirLock,
}

/// The API server the node publishes to, and the namespace of its NodeFeature.
pub(crate) struct Cluster<A> {
    pub api: Arc<A>,
    pub namespace: String,
}

/// What runs beside the plugins once [`Prepared::begin`] started it: the kernel-log and
/// detection loops, and (with a cluster) the feed and the publisher.
pub(crate) struct Begun {
    loops: Loops,
    plugins: watch::Sender<Option<accel_plugin::PluginHandle>>,
    /// Whether the publisher caught up; the demo waits on it, `serve` does not.
    #[cfg_attr(
        not(feature = "demo"),
        allow(dead_code, reason = "only the demo waits for the publisher")
    )]
    pub publisher: Option<accel_kube::PublisherHandle>,
    /// The node's RDMA keys, served while this daemon holds the node's RDMA lock.
    rdma: RdmaPlugin,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Begun {
    /// The plugins serve: the feed and the daemon's health follow them from now on.
    pub fn serving(&self, plugins: &accel_plugin::DevicePlugins) {
        self.plugins.send_replace(Some(plugins.handle()));
    }

    /// Stops the loops, the feed and the publisher.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.rdma.stop().await;
        self.loops.stop().await;
    }
}

impl Prepared {
    /// Opens the node (`--host-root`, a live root or a recording) and runs the daemon's first
    /// detection with this boot's faults applied.
    pub(crate) fn open(
        args: &Args,
        settings: &Settings,
        metrics: DaemonMetrics,
    ) -> anyhow::Result<Prepared> {
        let backend = backends::backend(args.manufacturer)?;
        let paths = Paths::resolve(args, settings)?;
        let settings = settings.clone();
        std::fs::create_dir_all(&paths.data_dir)
            .with_context(|| format!("creating the data directory {}", paths.data_dir.display()))?;
        // Held before any state is read, until this `Prepared` is dropped (serve stops, a demo
        // node goes down).
        let lock = DataDirLock::acquire(&paths.data_dir, args.manufacturer)?;
        tracing::debug!("holding {}", lock.path().display());
        let mut node = Node::open_with(&args.host_root, settings.tool_places())?;
        // The partitioner's own handle on the node's programs: a create never waits for a
        // detection pass holding the collector (a recorded host's MIG state is one file for both).
        let partition_commands: Arc<dyn accel_host::Commands> =
            Arc::from(Node::open_with(&args.host_root, settings.tool_places())?.commands);
        node.table = settings.manufacturers.clone();
        node.pci_gate = !args.no_pci_check;
        if node.is_recorded() {
            tracing::warn!(
                "{}: a recorded host: its files and programs are replayed, not this node's",
                args.host_root.display()
            );
        }
        // The container engine's configuration and the vendor's CDI specs decide what `auto`
        // injects; read now, and again whenever the files they came from change. Only `auto`
        // reads them: under another strategy nothing is read, and nothing about them is logged.
        let reads_engine = settings.injection(args.manufacturer) == Some(InjectionStrategy::Auto);
        let engine: Arc<dyn EngineSource> = match backend.engine.filter(|_| reads_engine) {
            Some(engine) => engine(
                Arc::new(accel_host::FsHost::new(node.host.root())),
                &settings.containerd_config_dir,
            ),
            None => Arc::new(accel_backend::EngineFacts::default()),
        };
        // The host a responder that injects device nodes itself checks them on (AMD).
        let node_files: Arc<dyn accel_host::Host> =
            Arc::new(accel_host::FsHost::new(node.kind.files()));
        // The control files a responder that makes driver objects writes (MetaX's sGPU).
        let node_writes = node.writes.clone();
        let prefixes = node::class_prefixes(args.pci_class_prefixes.as_deref())?;
        let deadlines = Deadlines {
            per_query: Duration::from_secs(30),
            snapshot: Duration::from_secs(60),
        };
        let daemon = Arc::new(Daemon::prepare(
            node,
            DaemonOptions {
                manufacturer: args.manufacturer,
                fast_failed: !args.no_fast_failed,
                data_dir: paths.data_dir.clone(),
                prefixes,
                deadlines,
                inventory_interval: Duration::from_secs(args.inventory_interval),
                pci_poll_interval: daemon::PCI_POLL_INTERVAL,
                reset_deadline: match &backend.reset {
                    accel_backend::reset::Reset::By(resetter) => resetter.deadline(),
                    accel_backend::reset::Reset::Refused(_) => Duration::ZERO,
                },
                reset: backend.reset.clone(),
                sampler: backend.sampler.clone(),
                faults: settings.fault_classifier(args.manufacturer),
                metrics,
            },
        )?);
        Ok(Prepared {
            daemon,
            backend,
            paths,
            settings,
            engine,
            node_files,
            node_writes,
            partition_commands,
            _lock: lock,
        })
    }

    /// The kubelet's directory (device plugins, pod-resources, DRA plugins and their registry).
    pub fn kubelet_dir(&self) -> &std::path::Path {
        &self.paths.kubelet_dir
    }

    /// The data directory (journal, faults, Pod working directories).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.paths.data_dir
    }

    /// What the slicing gate answers for a detected section (the library's host path for the
    /// node's runtime major, and whether it is there). The demo's; `serve` asks per backend.
    #[cfg(feature = "demo")]
    pub fn slices(&self, section: &ManufacturerInventory) -> SliceOffer {
        slices_offered(
            &self.backend,
            &self.daemon,
            &self.paths.library_dir,
            section,
        )
    }

    /// Starts, on the running runtime, what runs beside the plugins: the kernel-log and
    /// detection loops over `kernel_log`, and with a cluster the feed of what to publish and
    /// the publisher.
    pub(crate) fn begin<A: ClusterApi>(
        &self,
        args: &Args,
        pods: Arc<dyn PodSource>,
        cluster: Option<Cluster<A>>,
        kernel_log: Option<Box<dyn accel_host::KernelLog>>,
        metrics: PublishMetrics,
    ) -> Begun {
        let (plugins_tx, plugins_rx) = watch::channel(None);
        let network = Network::new(self.node_files.clone());
        let rdma = RdmaPlugin::start(RdmaConfig {
            kubelet_dir: self.paths.kubelet_dir.clone(),
            host: self.node_files.clone(),
            interfaces: network.published(),
            shared: !args.no_shared,
            partitioned: !args.no_partitioned,
            pods: pods.clone(),
            near: near_accelerators(self.daemon.clone(), plugins_rx.clone(), network.clone()),
            poll_interval: Duration::from_secs(1),
        });
        let feed = publish::Feed {
            grammar: self.settings.grammar(),
            slices: {
                let daemon = self.daemon.clone();
                let backend = self.backend.clone();
                let library_dir = self.paths.library_dir.clone();
                let no_sliced = args.no_sliced;
                Arc::new(move |section: &ManufacturerInventory| {
                    !no_sliced && slices_offered(&backend, &daemon, &library_dir, section).offered
                })
            },
            pods,
            detected: self.daemon.published(),
            plugins: plugins_rx,
            out: watch::channel(None).0,
            network: Some(network.clone()),
        };
        let mut tasks = vec![tokio::spawn(network.clone().run(args.monitor_period))];
        let mut handle = None;
        match cluster {
            Some(cluster) => {
                let config =
                    PublisherConfig::new(&args.node_name, cluster.namespace, [args.manufacturer]);
                let (publisher, caught_up) =
                    Publisher::new(cluster.api, config, feed.out.subscribe());
                let publisher = publisher.with_metrics(metrics);
                handle = Some(caught_up);
                tasks.push(tokio::spawn(publisher.run()));
                tasks.push(tokio::spawn(feed.run()));
            }
            None => tracing::error!(
                "NOTHING IS PUBLISHED: no cluster configuration, so no NodeFeature, Devices, Pod annotations or capacity"
            ),
        }
        Begun {
            loops: Loops::start(self.daemon.clone(), kernel_log),
            plugins: plugins_tx,
            publisher: handle,
            rdma,
            tasks,
        }
    }

    /// Waits until the manufacturer's accelerators are detected, then starts the device plugins
    /// over them (one per resource, registering with the kubelet in `--kubelet-dir`).
    pub(crate) async fn start_plugins(
        &self,
        args: &Args,
        pods: Arc<dyn PodSource>,
        metrics: PluginMetrics,
    ) -> anyhow::Result<accel_plugin::DevicePlugins> {
        let daemon = self.daemon.clone();
        Ok(daemon
            .start_plugins(
                |section| {
                    plugin_config(
                        args,
                        &self.paths,
                        &self.settings,
                        &self.backend,
                        self.engine.clone(),
                        metrics,
                        &daemon,
                        &self.partition_commands,
                        section,
                        self.node_files.clone(),
                        self.node_writes.clone(),
                    )
                },
                pods,
            )
            .await?)
    }
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    // One registry, each crate registering its own metrics; served only with --metrics-listen.
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    let daemon_metrics = DaemonMetrics::register(&mut registry);
    let plugin_metrics = PluginMetrics::register(&mut registry);
    let publish_metrics = PublishMetrics::register(&mut registry);
    let prepared = Prepared::open(&args, settings, daemon_metrics)?;
    let daemon = prepared.daemon.clone();
    registry.register_collector(Box::new(
        daemon.accelerator_metrics(settings.grammar().group_naming()),
    ));
    let (usage_tx, usage) = watch::channel(None);
    registry.register_collector(Box::new(GpuUsageMetrics { usage }));
    // Bound before the plugins register, so a `refresh` sent as soon as the kubelet sees us
    // waits in the backlog (a second daemon on this data directory already stopped at the
    // directory's lock, in `Prepared::open`).
    let server = AdminServer::bind(prepared.data_dir())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let client = runtime.block_on(cluster_client(&args.node_name));
    let pods: Arc<dyn PodSource> = match &client {
        Some(client) => {
            let (pods, run) = accel_kube::NodePods::new(client.clone(), &args.node_name);
            runtime.spawn(run);
            pods
        }
        None => Arc::new(MemoryPods::unsynced()),
    };
    registry.register_collector(Box::new(LedgerMetrics {
        manufacturer: args.manufacturer,
        plugins: {
            let daemon = daemon.clone();
            Arc::new(move || daemon.plugin_handle())
        },
        pods: pods.clone(),
    }));
    let registry = Arc::new(registry);
    runtime.block_on(async move {
        let (metrics_stop, metrics_stopped) = watch::channel(false);
        let metrics_server = match args.metrics_listen {
            Some(addr) => {
                let listener = metrics::bind(addr).await?;
                tracing::info!("metrics at http://{addr}/metrics");
                Some(tokio::spawn(metrics::serve(
                    listener,
                    registry,
                    metrics_stopped,
                )))
            }
            None => None,
        };
        // Live usage for the metrics, sampled only when someone can scrape it, and only where
        // the manufacturer's backend has a sampler.
        let sampled = prepared.backend.sampler.is_some();
        if args.metrics_listen.is_some() && !sampled {
            tracing::info!(
                "{}: no live usage sampler in this build; health and fault metrics only",
                args.manufacturer
            );
        }
        let sampler = args
            .metrics_listen
            .filter(|_| sampled)
            .map(|_| tokio::spawn(sample_usage(daemon.clone(), args.monitor_period, usage_tx)));
        let cluster = client.as_ref().map(|client| Cluster {
            api: Arc::new(KubeApi::new(client.clone())),
            namespace: args
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
        });
        let begun = prepared.begin(
            &args,
            pods.clone(),
            cluster,
            daemon.open_kernel_log(args.kmsg_path.as_deref()),
            publish_metrics,
        );
        let path = server.path().to_path_buf();
        let admin = server
            .spawn(daemon.clone())
            .with_context(|| format!("serving the admin socket {}", path.display()))?;
        tracing::info!("admin socket at {}", admin.path().display());
        let shutdown = shutdown_signal();
        tokio::pin!(shutdown);
        let kubelet_dir = prepared.kubelet_dir().to_path_buf();
        let dra_pods = pods.clone();
        // The plugins start when the manufacturer's accelerators are first detected.
        let started = {
            let start = prepared.start_plugins(&args, pods, plugin_metrics);
            tokio::select! {
                started = start => Some(started?),
                () = &mut shutdown => None,
            }
        };
        let mut dra = None;
        if let Some(plugins) = &started {
            tracing::info!("serving {:?}", plugins.resources());
            begun.serving(plugins);
            if args.dra {
                match &client {
                    Some(client) => {
                        let sliced = plugins.resources().iter().any(|r| r.ends_with(".sliced"));
                        let options = crate::dra::DraOptions {
                            node: args.node_name.clone(),
                            sharing: if sliced {
                                accel_dra::slices::Sharing::Slices {
                                    cores_overcommit: settings
                                        .manufacturers
                                        .get(args.manufacturer)
                                        .cores_percentage_overcommit,
                                    // The ledger's seats' slice capacity (`daemon::seats_of`).
                                    per_card: accel_core::ledger::units::slices_per_accelerator(
                                        args.manufacturer,
                                    )
                                    .unwrap_or(0),
                                }
                            } else {
                                accel_dra::slices::Sharing::Whole
                            },
                            manufacturer: args.manufacturer,
                            kubelet_dir: kubelet_dir.clone(),
                            cdi_dir: args.cdi_dir.clone(),
                            naming: settings.grammar().group_naming(),
                        };
                        dra = Some(crate::dra::start(
                            options,
                            client.clone(),
                            plugins.handle(),
                            dra_pods.clone(),
                            daemon.published(),
                        )?);
                    }
                    None => tracing::error!(
                        "--dra: no cluster configuration, so no ResourceSlice can be published; the DRA driver is not served"
                    ),
                }
            }
            shutdown.await;
        }
        if let Some(dra) = dra {
            dra.stop().await;
        }
        admin.shutdown();
        if let Some(sampler) = sampler {
            sampler.abort();
        }
        let _ = metrics_stop.send(true);
        if let Some(server) = metrics_server {
            let _ = server.await;
        }
        begun.stop().await;
        if let Some(plugins) = started {
            plugins.stop().await;
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Where the accelerators a container holds sit on the bus: its grants in the plugins' ledger,
/// their accelerators in the published inventory, each walked up the bus (the RDMA hint's
/// "nearest the Pod's accelerators").
fn near_accelerators(
    daemon: Arc<Daemon>,
    plugins: watch::Receiver<Option<accel_plugin::PluginHandle>>,
    network: Arc<Network>,
) -> accel_plugin::rdma::Near {
    Arc::new(move |key| {
        let Some(handle) = plugins.borrow().clone() else {
            return Vec::new();
        };
        let indices: Vec<u32> = handle.with_ledger(|ledger| {
            ledger
                .grants()
                .get(key)
                .map(|g| g.accelerators.clone())
                .unwrap_or_default()
        });
        let Some(published) = daemon.published().borrow().clone() else {
            return Vec::new();
        };
        let mut chosen = published.inventory.clone();
        for section in &mut chosen.manufacturers {
            section
                .accelerators
                .retain(|a| section.name == published.manufacturer && indices.contains(&a.index));
        }
        network.accelerator_places(&chosen)
    })
}

/// The plugins' configuration for the manufacturer's accelerators as first detected: the
/// seats, what is offered (the configured resource base; slices only where the backend's
/// preload library for the node's runtime major is staged), and the backend's responder.
#[allow(clippy::too_many_arguments)]
fn plugin_config(
    args: &Args,
    paths: &Paths,
    settings: &Settings,
    backend: &Backend,
    engine: Arc<dyn EngineSource>,
    metrics: PluginMetrics,
    daemon: &Daemon,
    partition_commands: &Arc<dyn accel_host::Commands>,
    section: &ManufacturerInventory,
    host: Arc<dyn accel_host::Host>,
    writes: Arc<dyn accel_host::HostWrites>,
) -> Config {
    let slicing = slices_offered(backend, daemon, &paths.library_dir, section);
    if !slicing.offered && !args.no_sliced {
        match (&backend.slicing, &slicing.library, slicing.runtime_major) {
            (None, _, _) => {}
            (Some(_), Some(library), Some(major)) => tracing::warn!(
                "logical slices are not advertised: no preload library at {library} under the host root for runtime {major} (--library-dir)"
            ),
            (Some(library), _, _) => tracing::warn!(
                "logical slices are not advertised: the driver reports no {} version",
                library.runtime()
            ),
        }
    }
    let mut inventory = accel_core::inventory::Inventory::default();
    inventory.manufacturers.push(section.clone());
    let row = settings.manufacturers.get(section.name);
    Config {
        kubelet_dir: paths.kubelet_dir.clone(),
        data_dir: paths.data_dir.clone(),
        settings: settings.plugin,
        offer: Offer {
            exclusive: !args.dra_extended_resource,
            shared: !args.no_shared,
            sliced: slicing.offered && !args.no_sliced && row.slice_count.is_some(),
            partitioned: backend.partitioner.is_some()
                && !args.no_partitioned
                && row.partition_kind.is_some(),
            partition_kind: row.partition_kind.clone(),
            ..Offer::with_base(section.name, &row.resource_base)
        },
        seats: daemon::seats_of(&inventory, section.name),
        responder: (backend.responder)(ResponderSetup {
            scratch: None,
            strategy: settings.injection(section.name).unwrap_or_default(),
            runtime_major: slicing.runtime_major,
            pod_dir_root: paths.data_dir.join("pods"),
            preload_dir: paths.data_dir.join("preload"),
            library_dir: paths.library_dir.clone(),
            engine,
            accelerators: section.accelerators.clone(),
            host: Some(host.clone()),
            commands: Some(partition_commands.clone()),
            runtime_class: row.runtime_class.clone(),
            writes: Some(writes),
        }),
        poll_interval: Duration::from_secs(1),
        metrics,
        partitions: backend
            .partitioner
            .clone()
            .map(|partitioner| accel_plugin::Partitions {
                partitioner: partitioner.on_host(host.clone()).unwrap_or(partitioner),
                commands: partition_commands.clone(),
                orphans: accel_plugin::service::Orphans::with_debounce(
                    args.partition_orphan_debounce,
                ),
            }),
    }
}

/// Whether logical slices are offered: the backend slices and its preload library for the
/// node's runtime major is present in the library directory under the host root (DESIGN.md,
/// "Slicing needs its library").
fn slices_offered(
    backend: &Backend,
    daemon: &Daemon,
    library_dir: &std::path::Path,
    section: &ManufacturerInventory,
) -> SliceOffer {
    match &backend.slicing {
        Some(library) => slicing::offer(library.as_ref(), section, library_dir, |path| {
            daemon.host_exists(path)
        }),
        None => SliceOffer {
            runtime_major: None,
            library: None,
            offered: false,
        },
    }
}

/// The API server (in-cluster config or `KUBECONFIG`). Without a cluster configuration the
/// daemon keeps serving with a Pod source that never syncs: Allocate then answers Unavailable
/// (it cannot identify containers), nothing is released on its word, and nothing is published.
async fn cluster_client(node_name: &str) -> Option<kube::Client> {
    match kube::Client::try_default().await {
        Ok(client) => Some(client),
        Err(e) => {
            tracing::error!(
                "node {node_name}: no cluster configuration ({e}); Allocate cannot identify containers until the daemon runs with one"
            );
            None
        }
    }
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    #[derive(Debug, Parser)]
    struct Serve {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn metrics_are_off_unless_an_address_is_given() {
        let parse = |extra: &[&str]| {
            let argv = ["serve", "--node-name", "n"].iter().chain(extra);
            Serve::try_parse_from(argv).map(|s| s.args.metrics_listen)
        };
        if std::env::var_os("METRICS_LISTEN").is_none() {
            assert_eq!(parse(&[]).unwrap(), None);
        }
        assert_eq!(
            parse(&["--metrics-listen", "0.0.0.0:9402"]).unwrap(),
            Some("0.0.0.0:9402".parse().unwrap())
        );
        let bad = parse(&["--metrics-listen", "9402"])
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("invalid value '9402' for '--metrics-listen <ADDR>'"),
            "{bad}"
        );
    }
}
