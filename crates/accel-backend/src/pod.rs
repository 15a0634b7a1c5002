//! The Pod facts a grant is answered for (the plugin's view of a Pod on this node): plain data
//! the plugin reads from the API server and hands to a backend's responder. No I/O here.

use std::collections::BTreeMap;

/// A Pod's lifecycle phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    /// Succeeded or Failed: the kubelet has taken back its cards.
    pub fn finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// One container of a Pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Container {
    pub name: String,
    /// Extended-resource limits by resource name, as quantities (`"1"`, `"25"`).
    pub limits: BTreeMap<String, String>,
    /// The container's own `env:` entries (never-overwrite reads these).
    pub env: BTreeMap<String, String>,
}

impl Container {
    /// The whole-number quantity of `resource` the container asks for (`1000m` is 1).
    pub fn count(&self, resource: &str) -> Option<u64> {
        self.limits
            .get(resource)
            .and_then(|q| accel_core::quantity::parse_count(q).ok())
    }
}

/// A Pod on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Creation time, whole seconds since the epoch (all the API keeps).
    pub created: i64,
    pub phase: Phase,
    pub runtime_class: Option<String>,
    pub containers: Vec<Container>,
    /// The raw value of the Pod's `device.gpustack.ai/accelerator.allocated` annotation (its
    /// grants as the cluster last recorded them), the ledger's fallback when the journal is
    /// lost; read, never trusted blindly (`accel_core::ledger::annotation::parse`).
    pub allocated: Option<String>,
}

impl Pod {
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.containers.iter().find(|c| c.name == name)
    }
}
