//! What the demo shows, as data: one [`Step`] per scripted step (or per Pod of `--pods`), each
//! with the webhook's verdict and folded request, the grant the container got, and the node's
//! ledger; then the `Devices` objects the nodes published. `-o json` prints it as is; the
//! table form is [`super::render`].

use std::collections::BTreeMap;

use accel_core::ledger::Ledger;
use accel_plugin::api::deviceplugin as dp;
use serde::Serialize;
use serde_json::Value;

/// The whole run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Node name → the recorded host it runs on.
    pub hosts: BTreeMap<String, String>,
    /// Node name → the manufacturer its daemon serves.
    pub manufacturers: BTreeMap<String, String>,
    pub steps: Vec<Step>,
    /// Node name → its `Devices` object as the in-memory API server holds it.
    pub devices: BTreeMap<String, Value>,
}

/// One step of the scenario.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub number: usize,
    /// A short stable name (`exclusive`, `shared`, …; `pod` for `--pods`).
    pub name: String,
    pub title: String,
    pub pods: Vec<PodOutcome>,
    /// What else happened, in words.
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xid: Option<XidOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Reclaim>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    /// The ledger of the node the step touched, after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerView>,
}

/// One Pod submitted: the webhook's answer, where it ran, what each container got.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodOutcome {
    pub pod: String,
    pub namespace: String,
    pub uid: String,
    pub allowed: bool,
    /// The webhook's message when it denied the Pod, exactly.
    pub message: Option<String>,
    /// The mutating webhook's JSON Patch.
    pub patch: Vec<Value>,
    /// Each container's limits as created (after the webhook folded them).
    pub request: BTreeMap<String, BTreeMap<String, String>>,
    /// The node the Pod was admitted on (none when denied or no node serves it).
    pub node: Option<String>,
    pub grants: Vec<GrantView>,
    /// Why the kubelet could not admit it (an Allocate refusal, no node serving it).
    pub error: Option<String>,
}

/// A GPU by index and UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuRef {
    pub index: u32,
    pub uuid: Option<String>,
}

/// What one container got for one resource.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    pub container: String,
    pub resource: String,
    /// `exclusive`, `shared`, `sliced`, `partitioned`, or `visibility` for the SSH sidecar.
    pub family: String,
    pub gpus: Vec<GpuRef>,
    /// Units charged on each GPU (the ledger's), when the ledger holds the grant.
    pub units: Option<u64>,
    pub cores_percentage: Option<u32>,
    /// A partition's profile and placement.
    pub partition: Option<Value>,
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<MountView>,
    pub devices: Vec<DeviceView>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MountView {
    pub host_path: String,
    pub container_path: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceView {
    pub host_path: String,
    pub container_path: String,
    pub permissions: String,
}

impl GrantView {
    /// The kubelet's answer for one container and resource, with what the ledger recorded.
    pub fn new(
        container: &str,
        resource: &str,
        answer: &dp::ContainerAllocateResponse,
        ledger: &Ledger,
        grant: Option<&accel_core::ledger::Grant>,
    ) -> GrantView {
        let grant = grant.filter(|g| g.resource == resource);
        let gpu = |index: u32| GpuRef {
            index,
            uuid: ledger.seat(index).and_then(|s| s.uuid.clone()),
        };
        let gpus = match grant {
            Some(g) => g.accelerators.iter().map(|i| gpu(*i)).collect(),
            // The sidecar holds nothing in the ledger: the GPUs it sees are its owner's.
            None => visible(answer)
                .iter()
                .filter_map(|uuid| {
                    ledger
                        .seats()
                        .find(|s| s.uuid.as_deref() == Some(uuid.as_str()))
                        .map(|s| gpu(s.index))
                })
                .collect(),
        };
        GrantView {
            container: container.to_string(),
            resource: resource.to_string(),
            family: match grant {
                Some(g) => g.family.to_string(),
                None => "visibility".to_string(),
            },
            gpus,
            units: grant.map(|g| g.units),
            cores_percentage: grant.and_then(|g| g.cores_percentage),
            partition: grant
                .and_then(|g| g.partition.as_ref())
                .and_then(|p| serde_json::to_value(p).ok()),
            env: answer
                .envs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            mounts: answer
                .mounts
                .iter()
                .map(|m| MountView {
                    host_path: m.host_path.clone(),
                    container_path: m.container_path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            devices: answer
                .devices
                .iter()
                .map(|d| DeviceView {
                    host_path: d.host_path.clone(),
                    container_path: d.container_path.clone(),
                    permissions: d.permissions.clone(),
                })
                .collect(),
            annotations: answer
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cdi_devices: answer.cdi_devices.iter().map(|c| c.name.clone()).collect(),
        }
    }
}

/// The accelerators an answer makes visible (`NVIDIA_VISIBLE_DEVICES`, else the CDI names).
fn visible(answer: &dp::ContainerAllocateResponse) -> Vec<String> {
    if let Some(list) = answer.envs.get("NVIDIA_VISIBLE_DEVICES") {
        return list.split(',').map(str::to_string).collect();
    }
    answer
        .annotations
        .values()
        .flat_map(|v| v.split(','))
        .filter_map(|name| name.split_once('=').map(|(_, id)| id.to_string()))
        .collect()
}

/// A hardware XID written to the node's kernel log, and what the daemon made of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct XidOutcome {
    pub gpu: GpuRef,
    /// The kernel-log line, as the driver writes it.
    pub line: String,
    /// The GPU's whole-GPU token health as the kubelet sees it afterwards.
    pub health: String,
    /// Whole-GPU tokens still Healthy.
    pub healthy_tokens: usize,
}

/// A partition's Pod deleted and its instance given back.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reclaim {
    pub pod: String,
    /// The MIG device the Pod held.
    pub mig_uuid: Option<String>,
    /// The grant left the ledger (its instance was destroyed first).
    pub released: bool,
    /// Healthy partition tokens before the Pod, while it ran, and after the reclaim.
    pub tokens_before: usize,
    pub tokens_while_held: usize,
    pub tokens_after: usize,
}

/// The daemon restarted on the same data directory.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    pub node: String,
    /// The ledger's grants and occupancy before and after.
    pub before: Value,
    pub after: Value,
    pub equal: bool,
    /// GPUs out of service after the restart (this boot's faults are kept).
    pub unhealthy_after: Vec<String>,
}

/// A node's ledger as a table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerView {
    pub node: String,
    pub rows: Vec<LedgerRow>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRow {
    pub index: u32,
    pub uuid: Option<String>,
    pub healthy: bool,
    /// `free`, or the family holding it.
    pub mode: String,
    pub used_units: u64,
    pub remaining_units: u64,
    pub shares: u32,
    pub slices: u32,
    pub slice_capacity: u32,
    /// `namespace/pod:container` of each grant charging it.
    pub holders: Vec<String>,
}

impl LedgerView {
    /// The ledger's rows, holders named by `names` (Pod UID → `namespace/name`).
    pub fn new(node: &str, ledger: &Ledger, names: &BTreeMap<String, String>) -> LedgerView {
        let rows = ledger
            .seats()
            .map(|seat| {
                let occupancy = ledger
                    .occupancy(seat.index)
                    .copied()
                    .unwrap_or(accel_core::ledger::Occupancy::FREE);
                let holders = ledger
                    .grants()
                    .iter()
                    .filter(|(_, g)| g.accelerators.contains(&seat.index))
                    .map(|(key, _)| {
                        let pod = names
                            .get(&key.pod_uid)
                            .cloned()
                            .unwrap_or_else(|| key.pod_uid.clone());
                        format!("{pod}:{}", key.container)
                    })
                    .collect();
                LedgerRow {
                    index: seat.index,
                    uuid: seat.uuid.clone(),
                    healthy: seat.healthy,
                    mode: occupancy.mode.to_string(),
                    used_units: occupancy.used_units,
                    remaining_units: occupancy.remaining_units(),
                    shares: occupancy.shares,
                    slices: occupancy.slices,
                    slice_capacity: seat.slice_capacity,
                    holders,
                }
            })
            .collect();
        LedgerView {
            node: node.to_string(),
            rows,
        }
    }
}

/// The ledger's grants and occupancy as JSON, for comparing before and after a restart.
pub fn ledger_state(ledger: &Ledger) -> Value {
    let grants: Vec<Value> = ledger
        .grants()
        .iter()
        .map(|(key, grant)| serde_json::json!({"key": key, "grant": grant}))
        .collect();
    serde_json::json!({"grants": grants, "occupancy": ledger.occupancies()})
}
