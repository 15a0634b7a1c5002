//! The document `preflight` prints: one YAML document on stdout whether the run passed or not.

use serde::Serialize;

use accel_backend::preflight::{Depth, State};

/// The whole document.
#[derive(Debug, Clone, Serialize)]
pub struct Document {
    /// One group per manufacturer asked about.
    pub accelerators: Vec<Group>,
    pub network: Network,
    pub topology: Topology,
}

/// One manufacturer's answers.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub manufacturer: String,
    /// When the group was read (RFC 3339).
    pub timestamp: String,
    pub detection: Detection,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Row>,
    /// Container steps printed rather than run (`--dry-run`, no runtime, `ctr`, no host
    /// process table), in the order they would run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Question 1: are the devices detected.
#[derive(Debug, Clone, Serialize)]
pub struct Detection {
    pub state: &'static str,
    pub depth: &'static str,
    /// How many accelerators the detect pass found.
    pub accelerators: usize,
    /// How many the host's own vendor CLI lists, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub reason: String,
}

impl Detection {
    pub fn new(state: State, depth: Depth, accelerators: usize, reason: String) -> Detection {
        Detection {
            state: state.as_str(),
            depth: depth.as_str(),
            accelerators,
            host: None,
            command: None,
            reason,
        }
    }
}

/// One capability of one accelerator.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub accelerator: String,
    pub capability: String,
    pub state: &'static str,
    pub depth: &'static str,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

impl Row {
    pub fn new(
        accelerator: &str,
        capability: &str,
        state: State,
        depth: Depth,
        reason: impl Into<String>,
    ) -> Row {
        Row {
            accelerator: accelerator.to_string(),
            capability: capability.to_string(),
            state: state.as_str(),
            depth: depth.as_str(),
            reason: reason.into(),
            detail: None,
            command: None,
            evidence: None,
        }
    }

    pub fn unavailable(&self) -> bool {
        self.state == State::Unavailable.as_str()
    }
}

/// The RDMA section (spec/rdma.md §9): one row per RDMA interface or VF, from a fresh read.
#[derive(Debug, Clone, Serialize)]
pub struct Network {
    pub timestamp: String,
    pub checks: Vec<NetworkRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One RDMA link: `interface` is `<interface>/<vf pciBusId, else vf name>` for a VF.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRow {
    pub interface: String,
    pub rdma_device: String,
    /// `ok`, `unverified` or `failed`: the link verdict.
    pub state: &'static str,
    /// Always `declared`: the kernel's word, no traffic sent.
    pub depth: &'static str,
    pub reason: String,
}

/// The kubelet's TopologyManager policy.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    pub timestamp: String,
    /// The policy a source named, or `unknown`.
    pub policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Document {
    /// Whether any accelerator answer is `unavailable` (the run's exit is then non-zero).
    pub fn failed(&self) -> bool {
        self.accelerators.iter().any(|g| {
            g.detection.state == State::Unavailable.as_str()
                || g.checks.iter().any(Row::unavailable)
        })
    }
}
