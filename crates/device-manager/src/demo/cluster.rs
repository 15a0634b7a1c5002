//! The cluster the demo runs in one process: per node the real daemon (`serve`'s own
//! [`Prepared`] path: detection, the plugins, the kernel-log and detection loops, the feed and
//! the publisher) on a temporary copy of a recorded host, registered with the kubelet emulator
//! over real unix sockets; one in-memory API server (accel-kube's [`MemoryApi`]) they publish
//! to; and the worker's admission webhook (accel-webhook's router, answering AdmissionReviews
//! in process) with the queue's pool resolved by the worker's own lookup
//! (`accel_kube::resolve::pool`) from what the nodes published.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::admission::patch;
use accel_core::ledger::{GrantKey, Ledger};
use accel_core::pool::{FEATURE_LABEL_PREFIX, Pool};
use accel_core::resources::KeyGrammar;
use accel_host::{ChannelKernelLog, KernelLogEntry, KmsgRecord};
use accel_kube::publish::memory::MemoryApi;
use accel_kube::publish::{NodeFacts, PodRef};
use accel_kube::resolve::{self, Objects};
use accel_plugin::api::deviceplugin as dp;
use accel_plugin::testing::Kubelet;
use accel_plugin::{DevicePlugins, PluginMetrics};
use accel_webhook::pool::PoolSource;
use anyhow::Context as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::cmd::serve::{self, Begun, Cluster, Prepared};
use crate::daemon::metrics::DaemonMetrics;
use crate::settings::Settings;

/// The namespace the nodes' NodeFeatures are written in.
pub const SYSTEM_NAMESPACE: &str = "gpustack-system";
/// The Kueue LocalQueue (in every namespace), ClusterQueue and ResourceFlavor the demo's
/// cluster holds for its main node's accelerator group; the scripted Pods carry
/// `kueue.x-k8s.io/queue-name: demo`. Each node also has its own, [`node_queue`].
pub const QUEUE: &str = "demo";

/// The queue (LocalQueue, ClusterQueue and ResourceFlavor of one name) whose pool is `node`'s
/// accelerator group: `demo-<node>`. A mixed cluster's Pods use their node's, so the webhook
/// folds each against its own manufacturer's pool.
pub fn node_queue(node: &str) -> String {
    format!("{QUEUE}-{node}")
}

/// How long a step waits for something the daemon does on its own (a token's health, a
/// reclaim, a publish) before it says it did not happen.
pub const SETTLE: Duration = Duration::from_secs(10);

/// Copies a recorded host to `to` (symbolic links kept as links: the PCI tree is made of
/// them), so nothing the daemon writes (the MIG state, the staged library) reaches the source.
pub fn copy_host(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let entries =
        std::fs::read_dir(from).with_context(|| format!("reading the host {}", from.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading the host {}", from.display()))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry
            .file_type()
            .with_context(|| format!("reading {}", source.display()))?;
        if kind.is_symlink() {
            let link = std::fs::read_link(&source)
                .with_context(|| format!("reading the link {}", source.display()))?;
            std::os::unix::fs::symlink(&link, &target)
                .with_context(|| format!("copying the link {}", source.display()))?;
        } else if kind.is_dir() {
            copy_host(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target)
                .with_context(|| format!("copying {}", source.display()))?;
        }
        // Sockets, fifos and device nodes are not part of a recording: left out.
    }
    Ok(())
}

/// The manufacturer whose daemon a demo node runs on `recorded`: the one whose PCI vendor id
/// (as configured) is alone on the recording's bus, found without asking any tool; else the
/// first (in the table's order, NVIDIA first) whose accelerators a detection pass shows,
/// detected as `serve` detects (gated by the vendor ids); an error naming the host when it
/// shows none.
pub fn manufacturer_of(
    flag: &str,
    recorded: &Path,
    settings: &Settings,
) -> anyhow::Result<Manufacturer> {
    let mut node = crate::node::Node::open_with(recorded, settings.tool_places())
        .with_context(|| format!("{flag} {}", recorded.display()))?;
    node.table = settings.manufacturers.clone();
    node.pci_gate = true;
    let classes = accel_host::pci::PciClassPrefixes::default();
    let on_bus = accel_host::pci::scan_pci(node.host.as_ref(), &classes)
        .is_ok_and(|scan| !scan.functions.is_empty());
    if on_bus {
        let present: Vec<Manufacturer> = Manufacturer::ALL
            .into_iter()
            .filter(|m| {
                let ids = &node.table.get(*m).pci_vendor_ids;
                accel_backend::detect::pci_gate_closed(node.host.as_ref(), &classes, ids).is_none()
            })
            .collect();
        if let [only] = present.as_slice() {
            return Ok(*only);
        }
    }
    let deadlines = accel_backend::Deadlines {
        per_query: Duration::from_secs(30),
        snapshot: Duration::from_secs(60),
    };
    let (inventory, _) = node
        .collect(None, &classes, deadlines)
        .with_context(|| format!("{flag} {}", recorded.display()))?;
    inventory
        .manufacturers
        .iter()
        .find(|s| !s.accelerators.is_empty())
        .map(|s| s.name)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{flag} {}: no accelerator of any manufacturer detected on this recorded host",
                recorded.display()
            )
        })
}

/// One node: the daemon as `serve` runs it, on its own emulated kubelet.
pub struct Node {
    pub name: String,
    /// The manufacturer whose daemon runs here ([`manufacturer_of`] its recorded host).
    pub manufacturer: Manufacturer,
    /// The temporary copy of the recorded host the daemon reads.
    pub host: PathBuf,
    /// The flag and recorded host it was copied from, for messages.
    source: String,
    pub kubelet: Kubelet,
    args: serve::Args,
    settings: Settings,
    api: Arc<MemoryApi>,
    running: Option<Running>,
    sequence: u64,
}

/// What runs while the daemon is up.
struct Running {
    prepared: Prepared,
    begun: Begun,
    plugins: DevicePlugins,
    log: Sender<KernelLogEntry>,
}

impl Node {
    /// Copies `recorded` under `work`, opens it as `serve --host-root` would for the
    /// manufacturer whose accelerators it shows, stages a stand-in preload library where the
    /// slicing gate looks for it (so the sliced family is offered, as on a node whose init
    /// container staged the slicing library), and starts the daemon.
    pub async fn start(
        name: &str,
        flag: &str,
        recorded: &Path,
        work: &Path,
        settings: &Settings,
        api: Arc<MemoryApi>,
    ) -> anyhow::Result<Node> {
        match accel_host::HostRoot::classify(recorded)
            .with_context(|| format!("{flag} {}", recorded.display()))?
        {
            accel_host::HostRoot::Recorded { .. } => {}
            accel_host::HostRoot::Live { .. } => anyhow::bail!(
                "{flag} {}: not a recorded host (no {}); make one with `device-manager record DIR`",
                recorded.display(),
                accel_host::recording::MARK_FILE
            ),
        }
        let manufacturer = manufacturer_of(flag, recorded, settings)?;
        let host = work.join(name).join("host");
        copy_host(recorded, &host)?;
        ensure_boot_id(&host)?;
        // Short: a plugin's socket path must fit a unix socket address (108 bytes).
        let kubelet_dir = work.join(name).join("k");
        let kubelet = Kubelet::try_start(&kubelet_dir, accel_plugin::pods::MemoryPods::new())
            .await
            .map_err(anyhow::Error::msg)?;
        api.put_node(
            name,
            NodeFacts {
                uid: format!("{name}-uid"),
                labels: BTreeMap::from([
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                    ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                    ("kubernetes.io/hostname".to_string(), name.to_string()),
                ]),
                ..NodeFacts::default()
            },
        );
        let args = serve::Args {
            node_name: name.to_string(),
            host_root: host.clone(),
            kubelet_dir,
            kube_socket: None,
            data_dir: Some(work.join(name).join("data")),
            library_dir: Some(settings.library_dir()),
            kmsg_path: None,
            pci_class_prefixes: None,
            inventory_interval: crate::daemon::INVENTORY_INTERVAL.as_secs(),
            manufacturer,
            no_fast_failed: false,
            no_shared: false,
            no_sliced: false,
            no_partitioned: false,
            no_pci_check: false,
            namespace: Some(SYSTEM_NAMESPACE.to_string()),
            metrics_listen: None,
            monitor_period: Duration::from_secs(15),
            // serve's default: the demo's partition is reclaimed through its record, and the
            // recorded hosts carry no hand-carved instance to wait for.
            partition_orphan_debounce: Duration::from_secs(300),
            dra: false,
            cdi_dir: work.join(name).join("cdi"),
            dra_extended_resource: false,
        };
        let mut node = Node {
            name: name.to_string(),
            manufacturer,
            host,
            source: format!("{flag} {}", recorded.display()),
            kubelet,
            args,
            settings: settings.clone(),
            api,
            running: None,
            sequence: 0,
        };
        node.up(true).await?;
        Ok(node)
    }

    /// Starts the daemon: `serve`'s path with the emulated kubelet's Pods, the in-memory API
    /// and a kernel log the demo writes to.
    async fn up(&mut self, stage: bool) -> anyhow::Result<()> {
        let prepared = tokio::task::block_in_place(|| {
            Prepared::open(&self.args, &self.settings, DaemonMetrics::default())
        })?;
        let section = prepared
            .daemon
            .published()
            .borrow()
            .as_ref()
            .and_then(|p| p.inventory.manufacturer(self.manufacturer).cloned());
        let Some(section) = section else {
            anyhow::bail!(
                "{}: no {} accelerator detected on this recorded host",
                self.source,
                super::brand(self.manufacturer)
            );
        };
        if stage {
            let offer = prepared.slices(&section);
            if let (false, Some(library)) = (offer.offered, offer.library.as_deref()) {
                let staged = self.host.join("root").join(library.trim_start_matches('/'));
                if let Some(parent) = staged.parent() {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("staging {}", staged.display()))?;
                }
                std::fs::write(&staged, b"")
                    .with_context(|| format!("staging {}", staged.display()))?;
            }
        }
        let pods: Arc<dyn accel_plugin::pods::PodSource> = Arc::new(self.kubelet.pods().clone());
        let (log, kernel_log) = ChannelKernelLog::new();
        let begun = prepared.begin(
            &self.args,
            pods.clone(),
            Some(Cluster {
                api: self.api.clone(),
                namespace: SYSTEM_NAMESPACE.to_string(),
            }),
            Some(Box::new(kernel_log)),
            Default::default(),
        );
        let plugins = tokio::time::timeout(
            SETTLE,
            prepared.start_plugins(&self.args, pods, PluginMetrics::default()),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{}: the device plugins did not start", self.name))??;
        begun.serving(&plugins);
        let resources = plugins.resources();
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        if !self.kubelet.until_listed(&names, SETTLE).await {
            anyhow::bail!(
                "{}: the plugins for {resources:?} did not register with the kubelet",
                self.name
            );
        }
        self.running = Some(Running {
            prepared,
            begun,
            plugins,
            log,
        });
        Ok(())
    }

    /// Stops the daemon (plugins, loops, publisher), as a SIGTERM does.
    async fn down(&mut self) {
        if let Some(running) = self.running.take() {
            running.plugins.stop().await;
            running.begun.stop().await;
        }
    }

    /// The daemon restarts on the same data directory and kubelet.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.down().await;
        self.up(false).await
    }

    pub async fn stop(mut self) {
        self.down().await;
    }

    fn running(&self) -> anyhow::Result<&Running> {
        self.running
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{}: the daemon is not running", self.name))
    }

    /// The ledger as the plugins hold it now.
    pub fn ledger(&self) -> anyhow::Result<Ledger> {
        Ok(self.running()?.plugins.ledger())
    }

    /// The resources the node's plugins serve.
    pub fn resources(&self) -> Vec<String> {
        self.kubelet.resources()
    }

    /// Waits until no grant waits for the kubelet to name its container (exclusive and shared
    /// grants are answered first and attributed a few milliseconds later).
    pub async fn attributed(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let waiting = self
                .ledger()?
                .grants()
                .keys()
                .any(GrantKey::is_unattributed);
            if !waiting {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!(
                    "{}: a grant was never attributed to its container",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `check` holds for the ledger.
    pub async fn until_ledger(
        &self,
        what: &str,
        check: impl Fn(&Ledger) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            if check(&self.ledger()?) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("{}: {what} did not happen within {SETTLE:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The kernel writes a line to the daemon's kernel log (`/dev/kmsg` on a node).
    pub fn kernel_line(&mut self, message: &str) -> anyhow::Result<()> {
        self.sequence += 1;
        let record = KmsgRecord {
            priority: 3,
            sequence: self.sequence,
            timestamp_us: self.sequence * 1000,
            flag: '-',
            message: message.to_string(),
        };
        self.running()?
            .log
            .send(KernelLogEntry::Record(record))
            .map_err(|_| anyhow::anyhow!("{}: the kernel-log loop has stopped", self.name))
    }

    /// The health the kubelet sees for a whole-GPU token.
    pub fn token_health(&self, resource: &str, id: &str) -> Option<String> {
        self.kubelet
            .devices(resource)
            .into_iter()
            .find(|d| d.id == id)
            .map(|d| d.health)
    }

    /// Waits until `check` holds for a resource's tokens as the kubelet sees them.
    pub async fn until_tokens(
        &self,
        resource: &str,
        check: impl Fn(&[dp::Device]) -> bool,
    ) -> bool {
        self.kubelet.until_devices(resource, check, SETTLE).await
    }

    /// Waits until the publisher has written everything the node has to say.
    pub async fn published(&mut self) -> anyhow::Result<()> {
        let name = self.name.clone();
        let running = self
            .running
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("{name}: the daemon is not running"))?;
        // The feed settles a burst before computing it.
        tokio::time::sleep(crate::publish::FEED_SETTLE * 2).await;
        let Some(handle) = running.begun.publisher.as_mut() else {
            return Ok(());
        };
        tokio::time::timeout(SETTLE, handle.caught_up())
            .await
            .map_err(|_| anyhow::anyhow!("{name}: the publisher did not catch up"))
    }

    /// The accelerators as the daemon last detected them.
    pub fn accelerators(&self) -> Vec<accel_core::inventory::Accelerator> {
        self.running
            .as_ref()
            .and_then(|r| {
                r.prepared
                    .daemon
                    .published()
                    .borrow()
                    .as_ref()
                    .and_then(|p| p.inventory.manufacturer(self.manufacturer).cloned())
            })
            .map(|s| s.accelerators)
            .unwrap_or_default()
    }
}

/// The kubelet's `/dev/kmsg` record needs a boot id to keep faults across a restart in the
/// same boot: a recording without one gets a fixed one.
fn ensure_boot_id(host: &Path) -> anyhow::Result<()> {
    let path = host.join("root").join(accel_nvidia::faults::BOOT_ID_PATH);
    if path.exists() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", path.display()))?;
    }
    std::fs::write(&path, "6f0c2a8e-3b1d-4f5e-9a7c-2d4e6f8a0b1c\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The cluster objects the worker's pool lookup reads, answered from the in-memory API: in
/// every namespace the LocalQueue `demo`, its ClusterQueue and ResourceFlavor naming the
/// accelerator group of the first node, and one `demo-<node>` of each for every node naming
/// that node's group (from the published NodeFeature labels, as NFD would put them on the
/// Node); and the nodes' published `Devices` objects.
pub struct DemoPools {
    pub api: Arc<MemoryApi>,
    pub nodes: Vec<String>,
}

impl DemoPools {
    fn node_labels(&self, node: &str) -> BTreeMap<String, String> {
        self.api
            .node_feature_object(SYSTEM_NAMESPACE, &format!("{node}-gpustack-device-manager"))
            .map(|f| f.spec.labels)
            .unwrap_or_default()
    }

    /// The node whose group the queue (and its ClusterQueue and flavor) named `name` pools.
    fn node_of(&self, name: &str) -> Option<&String> {
        if name == QUEUE {
            return self.nodes.first();
        }
        self.nodes.iter().find(|n| node_queue(n) == name)
    }
}

impl Objects for DemoPools {
    fn local_queue(&self, _namespace: &str, name: &str) -> Option<Value> {
        self.node_of(name).map(|_| json!({"clusterQueue": name}))
    }

    fn cluster_queue(&self, name: &str) -> Option<Value> {
        self.node_of(name)
            .map(|_| json!({"resourceGroups": [{"flavors": [{"name": name}]}]}))
    }

    fn resource_flavor(&self, name: &str) -> Option<Value> {
        let node = self.node_of(name)?;
        let labels: serde_json::Map<String, Value> = self
            .node_labels(node)
            .into_iter()
            .filter(|(k, v)| resolve::group_of_label(k, v).is_some())
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        Some(json!({"nodeLabels": labels}))
    }

    fn devices_of_group(&self, group: &str) -> Vec<Value> {
        let label = format!("{FEATURE_LABEL_PREFIX}{group}");
        self.nodes
            .iter()
            .filter_map(|n| self.api.devices_object(n))
            .filter(|d| {
                d.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(&label))
            })
            .filter_map(|d| serde_json::to_value(&d.spec).ok())
            .collect()
    }

    fn node_counts(&self, group: &str) -> Vec<String> {
        let label = Pool::count_label(group);
        self.nodes
            .iter()
            .filter_map(|n| self.node_labels(n).get(&label).cloned())
            .collect()
    }
}

impl PoolSource for DemoPools {
    fn pool(&self, namespace: &str, queue: &str) -> Pool {
        resolve::pool(self, namespace, queue)
    }
}

/// What the webhooks answered for one Pod, mutate then validate, as the API server calls them.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub allowed: bool,
    pub message: Option<String>,
    /// The mutating webhook's JSON Patch.
    pub patch: Vec<Value>,
    /// The Pod as created (after the patch).
    pub pod: Value,
}

/// The worker's admission webhooks, answering in process through their real HTTP routes.
pub struct Webhook {
    router: axum::Router,
}

impl Webhook {
    pub fn new(pools: Arc<dyn PoolSource>, grammar: KeyGrammar) -> Webhook {
        Webhook {
            router: accel_webhook::server::router(
                pools,
                grammar,
                Arc::new(accel_webhook::metrics::Metrics::default()),
                &accel_webhook::server::ServerConfig::default(),
            ),
        }
    }

    /// Sends one AdmissionReview for `pod` to `path`; the review's response.
    async fn review(&self, path: &str, pod: &Value, uid: &str) -> anyhow::Result<Value> {
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let review = json!({
            "apiVersion": accel_webhook::review::API_VERSION,
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": namespace,
                "object": pod,
            }
        });
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(serde_json::to_vec(&review)?))
            .context("building the AdmissionReview request")?;
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .context("the webhook did not answer")?;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .context("reading the webhook's answer")?;
        if !status.is_success() {
            anyhow::bail!(
                "the webhook answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        let answer: Value =
            serde_json::from_slice(&body).context("the webhook's answer is not JSON")?;
        answer
            .get("response")
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the webhook's answer has no response"))
    }

    /// Mutates, then validates the mutated Pod (the API server's order).
    pub async fn admit(&self, pod: &Value, uid: &str) -> anyhow::Result<Verdict> {
        let mutated = self.review("/mutate-pods", pod, uid).await?;
        if mutated.get("allowed") != Some(&Value::Bool(true)) {
            return Ok(denied(&mutated, pod));
        }
        let patch: Vec<Value> = match mutated.get("patch").and_then(Value::as_str) {
            Some(encoded) => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .context("the webhook's patch is not base64")?;
                serde_json::from_slice(&bytes).context("the webhook's patch is not JSON")?
            }
            None => Vec::new(),
        };
        let created = patch::apply(pod, &patch)
            .ok_or_else(|| anyhow::anyhow!("the webhook's patch does not apply to the Pod"))?;
        let validated = self.review("/validate-pods", &created, uid).await?;
        if validated.get("allowed") != Some(&Value::Bool(true)) {
            return Ok(Verdict {
                patch,
                ..denied(&validated, &created)
            });
        }
        Ok(Verdict {
            allowed: true,
            message: None,
            patch,
            pod: created,
        })
    }
}

fn denied(response: &Value, pod: &Value) -> Verdict {
    Verdict {
        allowed: false,
        message: response
            .pointer("/status/message")
            .and_then(Value::as_str)
            .map(str::to_string),
        patch: Vec::new(),
        pod: pod.clone(),
    }
}

/// Registers a Pod with the in-memory API (so its `accelerator.allocated` annotation can land).
pub fn put_pod(api: &MemoryApi, namespace: &str, name: &str, uid: &str) {
    api.put_pod(&PodRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
    });
}
