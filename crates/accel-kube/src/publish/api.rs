//! Every API call the node daemon makes, behind one trait ([`ClusterApi`]), with the plain data
//! those calls carry. The kube-rs implementation is [`super::kube::KubeApi`]; the in-memory one
//! for tests is [`super::memory::MemoryApi`].
//!
//! This module owns the seam and its error; it decides nothing about when to call (that is the
//! [`super::Publisher`]'s).

use std::collections::BTreeMap;
use std::future::Future;

use accel_core::devices::DevicesStatus;

use crate::crd::{Devices, NodeFeature};

/// Why an API call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object does not exist (HTTP 404).
    #[error("{0} not found")]
    NotFound(String),
    /// A precondition failed: the object is not the one named (a UID mismatch), or changed
    /// under us (HTTP 409).
    #[error("conflict on {what}: {message}")]
    Conflict { what: String, message: String },
    /// The API server refused the object as invalid (HTTP 422); retrying will not help.
    #[error("{what} refused as invalid: {message}")]
    Invalid { what: String, message: String },
    /// Anything else: the API server is unreachable, overloaded or answered an error; retried.
    #[error("{what}: {message}")]
    Unavailable { what: String, message: String },
}

/// A Pod as the daemon names it: where it is and which incarnation (a Pod recreated under the
/// same name has a new UID and is another Pod).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({})", self.namespace, self.name, self.uid)
    }
}

/// What the daemon reads of its Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `status.capacity`, as quantity text.
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable`, as quantity text.
    pub allocatable: BTreeMap<String, String>,
}

/// A Kubernetes Event about this Node (core v1, in the `default` namespace as the kubelet
/// writes its own Node events), so `kubectl describe node` shows it. Created once: its name is
/// fixed by what it reports, so a second create (a daemon restart in the same boot) meets
/// "already exists" and counts as done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    /// `metadata.name`: unique per fault and boot.
    pub name: String,
    /// `Warning` or `Normal`.
    pub type_: String,
    /// CamelCase, machine-readable (`Xid79`).
    pub reason: String,
    pub message: String,
    /// When it happened (RFC 3339).
    pub time: String,
}

/// The namespace the Node's Events are written in (where the kubelet writes its own).
pub const NODE_EVENT_NAMESPACE: &str = "default";

/// A change to the Node's `status.capacity` and `status.allocatable`, applied to both: a key
/// mapped to `Some` is set, one mapped to `None` removed; keys not named are left alone.
pub type CapacityPatch = BTreeMap<String, Option<String>>;

/// The calls the node daemon makes to the API server. Each is one request (or, for the kube-rs
/// implementation, one request per call), so a test can assert them one by one.
pub trait ClusterApi: Send + Sync + 'static {
    /// The Node named `name`.
    fn node(&self, name: &str) -> impl Future<Output = Result<NodeFacts, ApiError>> + Send;

    /// Merge-patches the Node's status capacity and allocatable.
    fn patch_node_capacity(
        &self,
        name: &str,
        patch: &CapacityPatch,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The NodeFeature `namespace/name`, if it exists.
    fn node_feature(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<NodeFeature>, ApiError>> + Send;

    /// Creates a NodeFeature (its metadata names the namespace).
    fn create_node_feature(
        &self,
        object: &NodeFeature,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Replaces a NodeFeature (its metadata carries the resourceVersion read).
    fn replace_node_feature(
        &self,
        object: &NodeFeature,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The Devices object `name`, if it exists.
    fn devices(&self, name: &str)
    -> impl Future<Output = Result<Option<Devices>, ApiError>> + Send;

    /// Creates a Devices object (its spec; the status is written through the subresource).
    fn create_devices(&self, object: &Devices)
    -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Merge-patches a Devices object: its labels (`None` removes one), owner references and
    /// spec.
    fn patch_devices(
        &self,
        object: &Devices,
        label_removals: &[String],
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Merge-patches the status subresource of Devices `name`.
    fn patch_devices_status(
        &self,
        name: &str,
        status: &DevicesStatus,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Creates an Event about the Node `node` (UID `node_uid`). An Event of that name that
    /// already exists answers [`ApiError::Conflict`].
    fn create_node_event(
        &self,
        node: &str,
        node_uid: &str,
        event: &NodeEvent,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Merge-patches one annotation of a Pod, guarded by its UID: `None` removes it. A Pod that
    /// is gone answers [`ApiError::NotFound`], one whose UID differs [`ApiError::Conflict`] (or
    /// [`ApiError::Invalid`], as some API servers reject the changed UID).
    fn annotate_pod(
        &self,
        pod: &PodRef,
        key: &str,
        value: Option<&str>,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}

impl ApiError {
    /// Whether the error says the Pod addressed is gone for good (deleted, or replaced by another
    /// of the same name), so a retry can never land.
    pub fn pod_gone(&self) -> bool {
        matches!(
            self,
            ApiError::NotFound(_) | ApiError::Conflict { .. } | ApiError::Invalid { .. }
        )
    }
}
