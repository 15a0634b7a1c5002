//! `device-manager demo`: the whole system in one process, on recorded hosts, without a GPU or
//! a cluster. Per node the real daemon (`cmd::serve::Prepared`: detection, the device plugins,
//! the ledger and its journal, the XID scanner, the publisher) runs on a temporary copy of a
//! recorded host against the kubelet emulator (`accel_plugin::testing::Kubelet`, real unix
//! sockets, the real v1beta1 protocol), for the manufacturer whose accelerators the host shows
//! (`cluster::manufacturer_of`); they publish to one in-memory API server; the worker's
//! admission webhook answers every Pod first (`cluster::Webhook`). Then the scripted NVIDIA
//! scenario (`script::run`), one Pod on each node (`script::one_pod_each`: the mixed cluster of
//! [`MIXED_HOSTS`], or a main node of another manufacturer), or the user's Pods (`--pods`,
//! `podfile`) are submitted, each step's outcome collected into a [`report::Report`].

pub mod cluster;
pub mod podfile;
pub mod render;
pub mod report;
pub mod script;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use accel_core::ledger::GrantKey;
use accel_kube::publish::memory::MemoryApi;
use anyhow::Context as _;
use k8s_openapi::api::core::v1 as core;
use serde_json::Value;

use crate::settings::Settings;
use cluster::{DemoPools, Node, Webhook};
use report::{GrantView, LedgerView, PodOutcome, Report, Step};

/// The recorded hosts the demo runs on by default, under `testdata/hosts/`.
pub const DEFAULT_HOST: &str = "hgx-h100-8gpu";
pub const DEFAULT_MIG_HOST: &str = "hgx-h100-8gpu-mig";
/// The names of the demo's nodes.
pub const MAIN_NODE: &str = "node-a";
pub const MIG_NODE: &str = "node-b";
/// `--cluster mixed`: one node per manufacturer family that matters, each on a recorded host
/// under `testdata/hosts/` — NVIDIA (runtime hook and CDI), AMD (device nodes from the kernel's
/// view), Ascend (its own runtime and physical ids), Cambricon (device nodes and its visible-
/// devices variable).
pub const MIXED_HOSTS: [(&str, &str); 4] = [
    ("node-nvidia", "hgx-h100-8gpu"),
    ("node-amd", "amd-8x-mi300x"),
    ("node-ascend", "ascend-8x-910b2"),
    ("node-cambricon", "cambricon-8x-mlu370-cnmon-v5"),
];

/// A manufacturer as its products name it, for a step's title.
pub fn brand(manufacturer: accel_core::Manufacturer) -> &'static str {
    use accel_core::Manufacturer as M;
    match manufacturer {
        M::Nvidia => "NVIDIA",
        M::Amd => "AMD",
        M::Ascend => "Huawei Ascend",
        M::Cambricon => "Cambricon",
        M::Hygon => "Hygon",
        M::Iluvatar => "Iluvatar CoreX",
        M::Metax => "MetaX",
        M::Mthreads => "Moore Threads",
        M::Thead => "T-Head",
    }
}

/// One node to start.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    /// The flag that named its recorded host (`--host-root`), for messages.
    pub flag: String,
    pub host: PathBuf,
    /// Started only when the first node runs this manufacturer (the default MIG node serves
    /// the NVIDIA script's partition step, and nothing beside another manufacturer's node).
    pub only_beside: Option<accel_core::Manufacturer>,
}

impl NodeSpec {
    pub fn new(name: &str, flag: &str, host: PathBuf) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            flag: flag.to_string(),
            host,
            only_beside: None,
        }
    }
}

/// What is submitted when no `--pods` are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The scripted NVIDIA scenario (`script::run`) when the first node is NVIDIA's, else one
    /// Pod on each node.
    Script,
    /// One Pod on each node, asking for one of its accelerators (`script::one_pod_each`).
    OnePodEach,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The nodes, the first being the main one (the webhook's pool is its accelerator group).
    pub nodes: Vec<NodeSpec>,
    pub pods: Option<Vec<Value>>,
    pub scenario: Scenario,
}

impl Options {
    /// The default cluster: the main node on `host_root` and, when given, the MIG node on
    /// `mig_host_root` (`default_mig`: the default one, started only beside an NVIDIA main
    /// node).
    pub fn nvidia(host_root: PathBuf, mig_host_root: Option<PathBuf>, default_mig: bool) -> Self {
        let mut nodes = vec![NodeSpec::new(MAIN_NODE, "--host-root", host_root)];
        if let Some(mig) = mig_host_root {
            let mut spec = NodeSpec::new(MIG_NODE, "--mig-host-root", mig);
            if default_mig {
                spec.only_beside = Some(accel_core::Manufacturer::Nvidia);
            }
            nodes.push(spec);
        }
        Options {
            nodes,
            pods: None,
            scenario: Scenario::Script,
        }
    }

    /// `--cluster mixed`: a node per entry of [`MIXED_HOSTS`] found by [`default_host`].
    pub fn mixed() -> anyhow::Result<Self> {
        let nodes = MIXED_HOSTS
            .iter()
            .map(|(name, host)| {
                default_host(host)
                    .map(|dir| NodeSpec::new(name, "--cluster mixed", dir))
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "--cluster mixed: the recorded host testdata/hosts/{host} is not here: run the demo from the repository"
                        )
                    })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Options {
            nodes,
            pods: None,
            scenario: Scenario::OnePodEach,
        })
    }
}

/// A recorded host of the repository's `testdata/hosts/`: from the working directory (where
/// `cargo run` runs), else beside the sources this binary was built from.
pub fn default_host(name: &str) -> Option<PathBuf> {
    let candidates = [
        PathBuf::from("testdata/hosts").join(name),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/hosts")
            .join(name),
    ];
    candidates.into_iter().find(|p| p.is_dir())
}

/// The running demo cluster.
pub struct Demo {
    pub api: Arc<MemoryApi>,
    pub nodes: Vec<Node>,
    webhook: Webhook,
    /// Pod UID → `namespace/name`, for the ledger tables.
    names: BTreeMap<String, String>,
    submitted: u64,
    _work: tempfile::TempDir,
}

impl Demo {
    /// Starts the nodes and the webhook, and waits until the nodes have published (the
    /// webhook's pool is read from their `Devices` objects).
    pub async fn start(options: &Options, settings: &Settings) -> anyhow::Result<Demo> {
        let work = tempfile::Builder::new()
            .prefix("dm-demo-")
            .tempdir()
            .context("creating the demo's temporary directory")?;
        let api = Arc::new(MemoryApi::new());
        let mut nodes: Vec<Node> = Vec::new();
        for spec in &options.nodes {
            let beside = nodes.first().map(|n| n.manufacturer);
            if spec.only_beside.is_some() && beside != spec.only_beside {
                continue;
            }
            nodes.push(
                Node::start(
                    &spec.name,
                    &spec.flag,
                    &spec.host,
                    work.path(),
                    settings,
                    api.clone(),
                )
                .await?,
            );
        }
        for node in &mut nodes {
            node.published().await?;
        }
        let pools = DemoPools {
            api: api.clone(),
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        };
        Ok(Demo {
            api,
            nodes,
            webhook: Webhook::new(Arc::new(pools), settings.grammar()),
            names: BTreeMap::new(),
            submitted: 0,
            _work: work,
        })
    }

    /// The recorded host each node runs on.
    pub fn hosts(&self, options: &Options) -> BTreeMap<String, String> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let spec = options.nodes.iter().find(|s| s.name == n.name)?;
                Some((n.name.clone(), spec.host.display().to_string()))
            })
            .collect()
    }

    /// The manufacturer each node's daemon serves.
    pub fn manufacturers(&self) -> BTreeMap<String, String> {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), n.manufacturer.to_string()))
            .collect()
    }

    /// The main node: the first started.
    pub fn main_node(&self) -> &str {
        self.nodes.first().map_or(MAIN_NODE, |n| n.name.as_str())
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn node_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.name == name)
    }

    /// A node's ledger as a table.
    pub fn ledger_view(&self, node: &str) -> Option<LedgerView> {
        let node = self.node(node)?;
        let ledger = node.ledger().ok()?;
        Some(LedgerView::new(&node.name, &ledger, &self.names))
    }

    /// Submits a Pod as a user would: the webhooks (mutate, validate), then the first node
    /// whose kubelet serves every device-plugin resource the Pod asks for (the scheduler's
    /// part, reduced to that), whose kubelet admits it (GetPreferredAllocation, Allocate per
    /// container). Failures of the Pod (denied, refused) are in the outcome; `Err` is the demo
    /// itself failing.
    pub async fn submit(&mut self, mut pod: Value) -> anyhow::Result<PodOutcome> {
        self.submitted += 1;
        let uid = format!("00000000-0000-4000-8000-{:012}", self.submitted);
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_string();
        let metadata = pod
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| anyhow::anyhow!("the Pod {name} has no metadata"))?;
        metadata
            .entry("namespace")
            .or_insert_with(|| Value::String(podfile::DEFAULT_NAMESPACE.to_string()));
        metadata.insert("uid".into(), Value::String(uid.clone()));
        // Created a second apart, in submission order (the plugin matches same-second Pods by
        // age; the API server stamps to the second).
        let created = UNIX_EPOCH + Duration::from_secs(1_767_225_600 + self.submitted);
        metadata.insert(
            "creationTimestamp".into(),
            Value::String(crate::publish::rfc3339(created)),
        );
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(podfile::DEFAULT_NAMESPACE)
            .to_string();
        self.names
            .insert(uid.clone(), format!("{namespace}/{name}"));
        let verdict = self.webhook.admit(&pod, &uid).await?;
        let mut outcome = PodOutcome {
            pod: name.clone(),
            namespace: namespace.clone(),
            uid: uid.clone(),
            allowed: verdict.allowed,
            message: verdict.message.clone(),
            patch: verdict.patch.clone(),
            request: limits(&verdict.pod),
            ..PodOutcome::default()
        };
        if !verdict.allowed {
            return Ok(outcome);
        }
        let api_pod: core::Pod = serde_json::from_value(verdict.pod.clone())
            .with_context(|| format!("the Pod {name} as created is not a Pod"))?;
        let Some(plugin_pod) = accel_kube::pods::convert(&api_pod) else {
            anyhow::bail!("the Pod {name} lacks a name, namespace or UID");
        };
        let wanted: Vec<String> = requested(&verdict.pod)
            .into_iter()
            .filter(|r| self.nodes.iter().any(|n| n.resources().contains(r)))
            .collect();
        let Some(node) = self.nodes.iter().find(|n| {
            let served = n.resources();
            wanted.iter().all(|r| served.contains(r))
        }) else {
            outcome.error = Some(format!(
                "no node serves every resource the Pod asks for ({})",
                wanted.join(", ")
            ));
            return Ok(outcome);
        };
        outcome.node = Some(node.name.clone());
        cluster::put_pod(&self.api, &namespace, &name, &uid);
        node.kubelet.create(plugin_pod);
        match node.kubelet.admit(&uid).await {
            Ok(admission) => {
                node.attributed().await?;
                let ledger = node.ledger()?;
                for (container, answers) in &admission {
                    let grant = ledger.grant(&GrantKey::new(uid.as_str(), container.as_str()));
                    for (resource, answer) in answers {
                        outcome
                            .grants
                            .push(GrantView::new(container, resource, answer, &ledger, grant));
                    }
                }
            }
            Err(status) => {
                outcome.error = Some(format!("Allocate refused: {}", status.message()));
            }
        }
        Ok(outcome)
    }

    /// The kubelet deletes a Pod (and the API server forgets it).
    pub fn delete(&self, node: &str, namespace: &str, name: &str, uid: &str) {
        if let Some(node) = self.node(node) {
            node.kubelet.delete(uid);
        }
        self.api.delete_pod(namespace, name);
    }

    /// Waits until every node has published, then the `Devices` objects as the API holds them.
    pub async fn devices(&mut self) -> anyhow::Result<BTreeMap<String, Value>> {
        let mut out = BTreeMap::new();
        for node in &mut self.nodes {
            node.published().await?;
            if let Some(devices) = self.api.devices_object(&node.name) {
                out.insert(node.name.clone(), serde_json::to_value(&devices)?);
            }
        }
        Ok(out)
    }

    pub async fn stop(self) {
        for node in self.nodes {
            node.stop().await;
        }
    }
}

/// Each container's limits (init containers first, as the kubelet admits them).
fn limits(pod: &Value) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for section in ["initContainers", "containers"] {
        let containers = pod
            .pointer(&format!("/spec/{section}"))
            .and_then(Value::as_array);
        for container in containers.into_iter().flatten() {
            let name = container
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let limits = container
                .pointer("/resources/limits")
                .and_then(Value::as_object)
                .map(|l| {
                    l.iter()
                        .map(|(k, v)| {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            (k.clone(), text)
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.insert(name, limits);
        }
    }
    out
}

/// Every resource key any container asks for.
fn requested(pod: &Value) -> Vec<String> {
    let mut keys: Vec<String> = limits(pod)
        .into_values()
        .flat_map(BTreeMap::into_keys)
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Runs the demo: the script (or one Pod on each node), or the given Pods one step each; then
/// the `Devices` objects.
pub async fn run(options: &Options, settings: &Settings) -> anyhow::Result<Report> {
    let mut demo = Demo::start(options, settings).await?;
    let nvidia_main = demo
        .nodes
        .first()
        .is_some_and(|n| n.manufacturer == accel_core::Manufacturer::Nvidia);
    let steps = match (&options.pods, options.scenario) {
        (Some(pods), _) => {
            let mut steps = Vec::new();
            for (i, pod) in pods.iter().enumerate() {
                steps.push(user_step(&mut demo, i + 1, pod.clone()).await?);
            }
            Ok(steps)
        }
        (None, Scenario::Script) if nvidia_main => script::run(&mut demo).await,
        (None, _) => script::one_pod_each(&mut demo, &settings.grammar()).await,
    };
    let devices = match &steps {
        Ok(_) => demo.devices().await,
        Err(_) => Ok(BTreeMap::new()),
    };
    let hosts = demo.hosts(options);
    let manufacturers = demo.manufacturers();
    demo.stop().await;
    Ok(Report {
        hosts,
        manufacturers,
        steps: steps?,
        devices: devices?,
    })
}

/// One of the user's Pods as a step.
async fn user_step(demo: &mut Demo, number: usize, pod: Value) -> anyhow::Result<Step> {
    let outcome = demo.submit(pod).await?;
    let node = outcome
        .node
        .clone()
        .unwrap_or_else(|| demo.main_node().to_string());
    Ok(Step {
        number,
        name: "pod".into(),
        title: format!("your Pod {}/{}", outcome.namespace, outcome.pod),
        ledger: demo.ledger_view(&node),
        pods: vec![outcome],
        ..Step::default()
    })
}
