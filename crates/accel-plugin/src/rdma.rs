//! The node's RDMA device plugin (spec/rdma.md §8): `device.gpustack.ai/rdma` (one token per
//! endpoint), `.rdma.shared` (64 per endpoint) and `.rdma.partitioned` (one per VF, only where
//! VFs exist), built from `Devices.spec.interfaces` as the daemon last published it.
//!
//! - Endpoints: an SR-IOV PF with VFs serves only its VFs (partitioned); any other interface
//!   serves itself (exclusive and shared). An endpoint with no RDMA device name is never offered.
//!   **Decision** (spec §8.1's [INFER]): a VF without a netdev (its `name` is `""` in the
//!   record) is named in its tokens by its PCI address, the identity the spec keys a VF by
//!   where it has no name (first-seen, preflight rows): `eth2:0000:03:00.2:0000`, which
//!   [`parse_token`] reads back (the endpoint is what lies between the first and the last
//!   colon). The described system put the empty name there, an id its own parser refuses
//!   (`group/device cannot be empty`), so such a VF was advertised and never allocatable. A VF
//!   with neither a name nor an address is not offered.
//! - A token carries its endpoint's NUMA node (a VF's own, else its PF's); a `failed` link makes
//!   the endpoint's tokens Unhealthy, never withdrawn.
//! - Allocate (first container request): the endpoint's `/dev/infiniband/uverbs<N>` each, and
//!   `/dev/infiniband/rdma_cm` once when the host has it; `NCCL_IB_HCA` the RDMA device names.
//!   Nothing is recorded: no ledger, no annotation.
//! - GetPreferredAllocation (**decision**: the described system offers none; the issue asks for
//!   the endpoint nearest the Pod's accelerators): the container being admitted is identified as
//!   the accelerator plugin does (pod-resources first, then the Pods' pending containers), its
//!   accelerators' PCI places are asked of [`RdmaConfig::near`], and the endpoints are offered
//!   nearest first (PIX, PXB, NODE, SYS, unknown), then by NUMA node shared, then by id. With no
//!   accelerator known yet (the kubelet may allocate the RDMA key first) the order is the ids'.
//! - **One plugin per node** (decision, spec §12): every manufacturer's daemon would register
//!   the same keys on the same socket names. The daemon that holds the lock file
//!   `<kubelet-dir>/device-plugins/gpustack-rdma.lock` (flock) serves them; the others look again
//!   every poll and take over when the holder's process ends (the kernel drops its lock) or when
//!   the kubelet, restarting, empties the directory (the holder sees its lock file gone and
//!   stops; the first to lock a new file serves).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use accel_core::interfaces::{DeviceInterface, LinkState, PciPlace, bus_distance};
use accel_core::ledger::GrantKey;
use accel_core::resources::{KeyGrammar, RdmaKey, ResourceKey};
use accel_host::Host;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::Status;

use crate::api::deviceplugin as dp;
use crate::api::deviceplugin::device_plugin_server::DevicePlugin;
use crate::api::deviceplugin::registration_client::RegistrationClient;
use crate::api::podresources::ListPodResourcesRequest;
use crate::api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::pods::PodSource;
use crate::socket;

/// Shared tokens per endpoint (`RDMAEndpointPoolSize`).
pub const SHARED_TOKENS: u32 = 64;
/// The lock file whose holder serves the node's RDMA keys.
pub const LOCK_FILE: &str = "gpustack-rdma.lock";
/// The environment variable naming the granted RDMA devices.
pub const NCCL_IB_HCA: &str = "NCCL_IB_HCA";

/// The three RDMA families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RdmaMode {
    Exclusive,
    Shared,
    Partitioned,
}

impl RdmaMode {
    pub fn key(self) -> RdmaKey {
        match self {
            RdmaMode::Exclusive => RdmaKey::Exclusive,
            RdmaMode::Shared => RdmaKey::Shared,
            RdmaMode::Partitioned => RdmaKey::Partitioned,
        }
    }

    /// The resource name (`device.gpustack.ai/rdma`, …).
    pub fn resource(self) -> String {
        KeyGrammar::default().render(&ResourceKey::Rdma(self.key()))
    }

    /// The socket's base name under `device-plugins/`.
    pub fn socket_name(self) -> &'static str {
        match self {
            RdmaMode::Exclusive => "rdma.exclusive.sock",
            RdmaMode::Shared => "rdma.shared.sock",
            RdmaMode::Partitioned => "rdma.partitioned.sock",
        }
    }

    fn family(self) -> &'static str {
        match self {
            RdmaMode::Exclusive => "exclusive",
            RdmaMode::Shared => "shared",
            RdmaMode::Partitioned => "partitioned",
        }
    }
}

/// One RDMA endpoint served: an interface, or one VF of a PF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaEndpoint {
    /// The interface (the PF for a VF).
    pub interface: String,
    /// The endpoint's name: the interface's, or the VF's netdev, else the VF's PCI address.
    pub endpoint: String,
    pub rdma_device: String,
    /// The NUMA nodes of its tokens (a VF's own, else its PF's); empty: no topology.
    pub numa: Vec<i64>,
    pub healthy: bool,
    pub place: PciPlace,
}

/// A CPU/NUMA range list (`0`, `0-1,3`) as node ids; anything unreadable is none.
fn numa_nodes(text: &str) -> Vec<i64> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        match (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
            (Ok(a), Ok(b)) if a >= 0 && a <= b && b - a < 4096 => out.extend(a..=b),
            _ => return Vec::new(),
        }
    }
    out.into_iter().collect()
}

/// The endpoints `mode` serves from `interfaces` (spec §8.1).
pub fn endpoints(mode: RdmaMode, interfaces: &[DeviceInterface]) -> Vec<RdmaEndpoint> {
    let mut out = Vec::new();
    for i in interfaces {
        let partitioned = i.sriov && !i.virtual_functions.is_empty();
        if partitioned != (mode == RdmaMode::Partitioned) {
            continue;
        }
        let healthy = |link: &Option<accel_core::interfaces::DeviceInterfaceLink>| {
            link.as_ref().is_none_or(|l| l.state != LinkState::Failed)
        };
        let place = |bus: &str, numa: &str| PciPlace {
            pci_bus_id: bus.to_string(),
            pci_root_id: i.pci_root_id.clone(),
            pci_switches: i.pci_switches.clone(),
            numa: numa.to_string(),
        };
        if partitioned {
            for vf in &i.virtual_functions {
                // A VF with no netdev is named by its PCI address (see the module).
                let name = if vf.name.is_empty() {
                    &vf.pci_bus_id
                } else {
                    &vf.name
                };
                if vf.rdma_device.is_empty() || name.is_empty() {
                    continue;
                }
                let numa = if vf.numa_affinity.is_empty() {
                    &i.numa_affinity
                } else {
                    &vf.numa_affinity
                };
                out.push(RdmaEndpoint {
                    interface: i.name.clone(),
                    endpoint: name.clone(),
                    rdma_device: vf.rdma_device.clone(),
                    numa: numa_nodes(numa),
                    healthy: healthy(&vf.link),
                    place: place(&vf.pci_bus_id, numa),
                });
            }
        } else if !i.rdma_device.is_empty() {
            out.push(RdmaEndpoint {
                interface: i.name.clone(),
                endpoint: i.name.clone(),
                rdma_device: i.rdma_device.clone(),
                numa: numa_nodes(&i.numa_affinity),
                healthy: healthy(&i.link),
                place: place(&i.pci_bus_id, &i.numa_affinity),
            });
        }
    }
    out
}

/// The token ids of one endpoint: `<interface>:<endpoint>:<4-digit index>`.
pub fn token_ids(mode: RdmaMode, endpoint: &RdmaEndpoint) -> Vec<String> {
    let count = if mode == RdmaMode::Shared {
        SHARED_TOKENS
    } else {
        1
    };
    (0..count)
        .map(|n| format!("{}:{}:{n:04}", endpoint.interface, endpoint.endpoint))
        .collect()
}

/// A token id's interface and endpoint.
pub fn parse_token(id: &str) -> Result<(&str, &str), String> {
    let (interface, rest) = id
        .split_once(':')
        .ok_or_else(|| format!("invalid device id {id:?}: not <interface>:<endpoint>:<index>"))?;
    let (endpoint, index) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("invalid device id {id:?}: not <interface>:<endpoint>:<index>"))?;
    if interface.is_empty() || endpoint.is_empty() {
        return Err(format!(
            "invalid device id {id:?}: group/device cannot be empty: {id:?}"
        ));
    }
    if index.len() != 4 || !index.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid device id {id:?}: the index is no 4-digit number"
        ));
    }
    Ok((interface, endpoint))
}

/// The device list of `mode` over `interfaces`.
pub fn device_list(mode: RdmaMode, interfaces: &[DeviceInterface]) -> Vec<dp::Device> {
    endpoints(mode, interfaces)
        .iter()
        .flat_map(|e| {
            token_ids(mode, e).into_iter().map(move |id| dp::Device {
                id,
                health: if e.healthy { "Healthy" } else { "Unhealthy" }.to_string(),
                topology: (!e.numa.is_empty()).then(|| dp::TopologyInfo {
                    nodes: e.numa.iter().map(|&id| dp::NumaNode { id }).collect(),
                }),
            })
        })
        .collect()
}

/// What Allocate answers for `ids` of `mode` (spec §8.2), `host` being the host's files (sysfs
/// for the verbs lookup, `dev/infiniband/` for the nodes).
pub fn allocate(
    mode: RdmaMode,
    interfaces: &[DeviceInterface],
    host: &dyn Host,
    ids: &[String],
) -> Result<dp::ContainerAllocateResponse, Status> {
    let mut ids: Vec<&String> = ids.iter().collect();
    ids.sort();
    let served = endpoints(mode, interfaces);
    let mut granted: Vec<&RdmaEndpoint> = Vec::new();
    for id in ids {
        let (interface, endpoint) = parse_token(id).map_err(Status::invalid_argument)?;
        let Some(found) = served
            .iter()
            .find(|e| e.interface == interface && e.endpoint == endpoint)
        else {
            return Err(Status::invalid_argument(format!(
                "device id {id:?} names no RDMA endpoint of the {} family",
                mode.family()
            )));
        };
        if !granted.iter().any(|g| g == &found) {
            granted.push(found);
        }
    }
    if granted.is_empty() {
        return Err(Status::invalid_argument(
            "the request grants no RDMA device",
        ));
    }
    let mut devices = Vec::new();
    for e in &granted {
        let node = accel_net::verbs_device(host, &e.rdma_device).map_err(|err| {
            Status::failed_precondition(format!(
                "resolve the verbs character device of endpoint {}: {err}",
                e.endpoint
            ))
        })?;
        if !host.exists(&node) {
            return Err(Status::failed_precondition(format!(
                "endpoint {} has no verbs device node {node:?}",
                e.endpoint
            )));
        }
        devices.push(dp::DeviceSpec {
            container_path: node.clone(),
            host_path: node,
            permissions: "rw".to_string(),
        });
    }
    if host.exists(accel_net::verbs::RDMA_CM) {
        devices.push(dp::DeviceSpec {
            container_path: accel_net::verbs::RDMA_CM.to_string(),
            host_path: accel_net::verbs::RDMA_CM.to_string(),
            permissions: "rw".to_string(),
        });
    }
    let names: Vec<&str> = granted.iter().map(|e| e.rdma_device.as_str()).collect();
    Ok(dp::ContainerAllocateResponse {
        envs: [(NCCL_IB_HCA.to_string(), names.join(","))].into(),
        devices,
        ..Default::default()
    })
}

/// The preferred tokens: `must` first, then the available ones whose endpoints are nearest
/// `accelerators` (smallest bus distance, then a NUMA node shared, then by id), `size` in all.
pub fn prefer(
    mode: RdmaMode,
    interfaces: &[DeviceInterface],
    accelerators: &[PciPlace],
    available: &[String],
    must: &[String],
    size: usize,
) -> Vec<String> {
    let served = endpoints(mode, interfaces);
    let rank = |id: &String| {
        let endpoint = parse_token(id)
            .ok()
            .and_then(|(i, e)| served.iter().find(|s| s.interface == i && s.endpoint == e));
        let distance = endpoint
            .and_then(|e| accelerators.iter().map(|a| bus_distance(a, &e.place)).min())
            .map_or(u32::MAX, |d| d as u32);
        let numa = endpoint.is_some_and(|e| {
            accelerators
                .iter()
                .any(|a| !a.numa.is_empty() && a.numa == e.place.numa)
        });
        (distance, !numa, id.clone())
    };
    let mut out: Vec<String> = must.to_vec();
    let mut rest: Vec<&String> = available.iter().filter(|id| !must.contains(id)).collect();
    rest.sort_by_key(|id| rank(id));
    for id in rest {
        if out.len() >= size {
            break;
        }
        out.push(id.clone());
    }
    out.truncate(size.max(must.len()));
    out
}

/// The PCI places of the accelerators a container holds (the daemon answers from its ledger and
/// inventory).
pub type Near = Arc<dyn Fn(&GrantKey) -> Vec<PciPlace> + Send + Sync>;

/// What the RDMA plugin serves and where.
#[derive(Clone)]
pub struct RdmaConfig {
    /// `<kubelet-dir>`.
    pub kubelet_dir: PathBuf,
    /// The host's files: sysfs for the verbs lookup, `dev/infiniband/` for the nodes.
    pub host: Arc<dyn Host>,
    /// The interfaces as last published (`None` before the first successful read).
    pub interfaces: watch::Receiver<Option<Arc<Vec<DeviceInterface>>>>,
    /// Serve `.rdma.shared` (not with `--no-shared`).
    pub shared: bool,
    /// Serve `.rdma.partitioned` (not with `--no-partitioned`).
    pub partitioned: bool,
    /// This node's Pods (to name the container a hint is for).
    pub pods: Arc<dyn PodSource>,
    /// The accelerators a container holds.
    pub near: Near,
    /// How often the servers look for a kubelet restart and the lock.
    pub poll_interval: Duration,
}

impl RdmaConfig {
    fn plugin_dir(&self) -> PathBuf {
        self.kubelet_dir.join("device-plugins")
    }

    /// The families served: exclusive always, shared and partitioned unless turned off.
    pub fn modes(&self) -> Vec<RdmaMode> {
        let mut modes = vec![RdmaMode::Exclusive];
        if self.shared {
            modes.push(RdmaMode::Shared);
        }
        if self.partitioned {
            modes.push(RdmaMode::Partitioned);
        }
        modes
    }
}

/// The running RDMA plugin: the lock keeper and, while it holds the lock, one server per mode.
pub struct RdmaPlugin {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    serving: watch::Receiver<bool>,
}

impl RdmaPlugin {
    /// Starts the lock keeper on the running runtime.
    pub fn start(config: RdmaConfig) -> RdmaPlugin {
        let (stop, stop_rx) = watch::channel(false);
        let (serving_tx, serving) = watch::channel(false);
        let task = tokio::spawn(keep_lock(config, stop_rx, serving_tx));
        RdmaPlugin {
            stop,
            task,
            serving,
        }
    }

    /// Whether this process holds the node's RDMA lock (and so serves the keys).
    pub fn serving(&self) -> bool {
        *self.serving.borrow()
    }

    /// Waits until this process serves, or `timeout` passes; whether it serves.
    pub async fn until_serving(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.serving.wait_for(|s| *s))
            .await
            .is_ok()
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Opens and locks the lock file; `None` when another process holds it.
fn try_lock(path: &Path) -> Option<(File, (u64, u64))> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    match file.try_lock() {
        Ok(()) => {
            use std::os::unix::fs::MetadataExt;
            let meta = file.metadata().ok()?;
            Some((file, (meta.dev(), meta.ino())))
        }
        Err(_) => None,
    }
}

async fn keep_lock(
    config: RdmaConfig,
    mut stop: watch::Receiver<bool>,
    serving: watch::Sender<bool>,
) {
    let dir = config.plugin_dir();
    let lock_path = dir.join(LOCK_FILE);
    let mut waiting_said = false;
    loop {
        if *stop.borrow() {
            return;
        }
        let _ = std::fs::create_dir_all(&dir);
        let Some((file, held)) = try_lock(&lock_path) else {
            if !waiting_said {
                tracing::info!(
                    "the node's RDMA keys are served by another daemon (it holds {}); taking over when it goes",
                    lock_path.display()
                );
                waiting_said = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        waiting_said = false;
        tracing::info!("serving the node's RDMA keys ({})", lock_path.display());
        let (servers_stop, servers_rx) = watch::channel(false);
        let servers: Vec<JoinHandle<()>> = config
            .modes()
            .into_iter()
            .map(|mode| tokio::spawn(serve(config.clone(), mode, servers_rx.clone())))
            .collect();
        serving.send_replace(true);
        let stopped = loop {
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = stop.changed() => break true,
            }
            if identity(&lock_path) != Some(held) {
                tracing::info!(
                    "{} was removed (a kubelet restart): locking again",
                    lock_path.display()
                );
                break false;
            }
        };
        serving.send_replace(false);
        let _ = servers_stop.send(true);
        for server in servers {
            let _ = server.await;
        }
        drop(file);
        if stopped {
            return;
        }
    }
}

/// One mode's gRPC service.
#[derive(Clone)]
struct RdmaService {
    config: RdmaConfig,
    mode: RdmaMode,
    stop: watch::Receiver<bool>,
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

fn options() -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

impl RdmaService {
    fn interfaces(&self) -> Arc<Vec<DeviceInterface>> {
        self.config.interfaces.borrow().clone().unwrap_or_default()
    }

    /// The accelerators of the container this hint is for, when it can be named.
    async fn admitting_accelerators(&self, size: usize) -> Vec<PciPlace> {
        let socket = self.config.kubelet_dir.join("pod-resources/kubelet.sock");
        let kubelet = match socket::connect(socket).await {
            Ok(channel) => {
                let mut client = PodResourcesListerClient::new(channel);
                match tokio::time::timeout(
                    Duration::from_millis(500),
                    client.list(ListPodResourcesRequest {}),
                )
                .await
                {
                    Ok(Ok(answer)) => Some(answer.into_inner()),
                    _ => None,
                }
            }
            Err(_) => None,
        };
        let pods = self.config.pods.pods();
        match crate::identify::identify(
            pods.as_deref(),
            kubelet.as_ref(),
            &|_: &GrantKey| false,
            &self.mode.resource(),
            size,
            &|_: &str, _: &str| true,
        ) {
            Ok((key, _)) => (self.config.near)(&key),
            Err(_) => Vec::new(),
        }
    }
}

#[tonic::async_trait]
impl DevicePlugin for RdmaService {
    async fn get_device_plugin_options(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<dp::DevicePluginOptions>, Status> {
        Ok(tonic::Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<DeviceStream>, Status> {
        let mut interfaces = self.config.interfaces.clone();
        let mut stop = self.stop.clone();
        let mode = self.mode;
        let stream = async_stream::stream! {
            let mut last = None;
            loop {
                let now = interfaces.borrow_and_update().clone().unwrap_or_default();
                let devices = device_list(mode, &now);
                if last.as_ref() != Some(&devices) {
                    last = Some(devices.clone());
                    yield Ok(dp::ListAndWatchResponse { devices });
                }
                tokio::select! {
                    changed = interfaces.changed() => if changed.is_err() { break },
                    _ = stop.changed() => break,
                }
            }
        };
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: tonic::Request<dp::PreferredAllocationRequest>,
    ) -> Result<tonic::Response<dp::PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            let size = usize::try_from(r.allocation_size).unwrap_or(0);
            let near = self.admitting_accelerators(size).await;
            container_responses.push(dp::ContainerPreferredAllocationResponse {
                device_i_ds: prefer(
                    self.mode,
                    &self.interfaces(),
                    &near,
                    &r.available_device_i_ds,
                    &r.must_include_device_i_ds,
                    size,
                ),
            });
        }
        Ok(tonic::Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: tonic::Request<dp::AllocateRequest>,
    ) -> Result<tonic::Response<dp::AllocateResponse>, Status> {
        let request = request.into_inner();
        let Some(first) = request.container_requests.first() else {
            return Err(Status::invalid_argument(
                "the allocate request carries no container requests",
            ));
        };
        let answer = allocate(
            self.mode,
            &self.interfaces(),
            self.config.host.as_ref(),
            &first.devices_ids,
        );
        match answer {
            Ok(response) => Ok(tonic::Response::new(dp::AllocateResponse {
                container_responses: vec![response],
            })),
            Err(status) => {
                tracing::warn!(
                    "{}: allocate refused: {}",
                    self.mode.resource(),
                    status.message()
                );
                Err(status)
            }
        }
    }

    async fn pre_start_container(
        &self,
        _: tonic::Request<dp::PreStartContainerRequest>,
    ) -> Result<tonic::Response<dp::PreStartContainerResponse>, Status> {
        Ok(tonic::Response::new(dp::PreStartContainerResponse {}))
    }
}

async fn register(kubelet_socket: &Path, mode: RdmaMode) -> Result<(), String> {
    let channel = socket::connect(kubelet_socket.to_path_buf())
        .await
        .map_err(|e| format!("cannot reach {}: {e}", kubelet_socket.display()))?;
    RegistrationClient::new(channel)
        .register(dp::RegisterRequest {
            version: crate::service::API_VERSION.to_string(),
            endpoint: mode.socket_name().to_string(),
            resource_name: mode.resource(),
            options: Some(options()),
        })
        .await
        .map_err(|s| format!("the kubelet refused: {}", s.message()))?;
    Ok(())
}

/// Serves one mode: bind, register, and start over when the kubelet restarts, until `stop`.
async fn serve(config: RdmaConfig, mode: RdmaMode, mut stop: watch::Receiver<bool>) {
    let dir = config.plugin_dir();
    let socket_path = dir.join(mode.socket_name());
    let kubelet_socket = dir.join("kubelet.sock");
    let interval = config.poll_interval;
    let resource = mode.resource();
    loop {
        if *stop.borrow() {
            return;
        }
        let _ = std::fs::remove_file(&socket_path);
        let listener = match tokio::net::UnixListener::bind(&socket_path) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "{resource}: cannot listen on {}: {e}",
                    socket_path.display()
                );
                tokio::select! { _ = tokio::time::sleep(interval) => continue, _ = stop.changed() => return }
            }
        };
        let (server_stop_tx, server_stop) = watch::channel(false);
        let service = RdmaService {
            config: config.clone(),
            mode,
            stop: server_stop.clone(),
        };
        let server = socket::serve_plugin(listener, service, server_stop.clone());
        let mut registered = None;
        let restart = loop {
            let now = identity(&kubelet_socket);
            if registered.is_none() && now.is_some() {
                match register(&kubelet_socket, mode).await {
                    Ok(()) => {
                        tracing::info!("{resource}: registered with the kubelet");
                        registered = now;
                    }
                    Err(e) => tracing::warn!("{resource}: registration failed: {e}"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => break false,
            }
            let now = identity(&kubelet_socket);
            if !socket_path.exists() || (registered.is_some() && now.is_some() && now != registered)
            {
                tracing::info!("{resource}: the kubelet restarted; registering again");
                break true;
            }
        };
        let _ = server_stop_tx.send(true);
        let _ = server.await;
        if !restart {
            let _ = std::fs::remove_file(&socket_path);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_lists_and_token_ids() {
        assert_eq!(numa_nodes("0"), vec![0]);
        assert_eq!(numa_nodes("0-1,3"), vec![0, 1, 3]);
        assert_eq!(numa_nodes(""), Vec::<i64>::new());
        assert_eq!(numa_nodes("x"), Vec::<i64>::new());
        assert_eq!(numa_nodes("3-1"), Vec::<i64>::new());
        assert_eq!(parse_token("eth0:eth0:0063").unwrap(), ("eth0", "eth0"));
        assert!(
            parse_token("eth2::0000")
                .unwrap_err()
                .contains("group/device cannot be empty")
        );
        assert!(parse_token("eth0").is_err());
        assert!(parse_token("eth0:eth0:63").is_err());
    }

    /// Spec §8.1's [INFER]: a VF without a netdev is never advertised with an empty token part
    /// Allocate then refuses; it is named by its PCI address, and its tokens resolve back to it.
    #[test]
    fn a_vf_without_a_netdev_is_named_by_its_pci_address() {
        use accel_core::interfaces::DeviceInterfaceVirtualFunction;
        let vf = |name: &str, bus: &str, rdma: &str| DeviceInterfaceVirtualFunction {
            name: name.into(),
            pci_bus_id: bus.into(),
            rdma: !rdma.is_empty(),
            rdma_device: rdma.into(),
            ..DeviceInterfaceVirtualFunction::default()
        };
        let interfaces = [DeviceInterface {
            name: "eth2".into(),
            bus: "pci".into(),
            pci_bus_id: "0000:03:00.0".into(),
            sriov: true,
            virtual_functions: vec![
                vf("eth2v0", "0000:03:00.1", "mlx5_2"),
                vf("", "0000:03:00.2", "mlx5_3"),
                // Neither a name nor an address, or no RDMA device: not offered.
                vf("", "", "mlx5_4"),
                vf("", "0000:03:00.3", ""),
            ],
            ..DeviceInterface::default()
        }];
        let list = device_list(RdmaMode::Partitioned, &interfaces);
        let ids: Vec<&str> = list.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["eth2:eth2v0:0000", "eth2:0000:03:00.2:0000"]);
        let served = endpoints(RdmaMode::Partitioned, &interfaces);
        for id in ids {
            let (interface, endpoint) = parse_token(id).unwrap();
            let found = served
                .iter()
                .find(|e| e.interface == interface && e.endpoint == endpoint)
                .unwrap_or_else(|| panic!("{id} names no endpoint"));
            assert!(!found.rdma_device.is_empty());
        }
        assert_eq!(served[1].rdma_device, "mlx5_3");
    }
}
