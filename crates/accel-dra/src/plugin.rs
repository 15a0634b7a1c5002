//! The `DRAPlugin` service (DRA kubelet plugin API v1): prepare resolves each claim to its
//! devices and what the container is given for them ([`ClaimResolver`]), writes the claim's CDI
//! spec and answers its CDI device ids; unprepare removes the spec. A claim that fails is
//! answered with its own error, never with a gRPC failure, which would make the kubelet discard
//! the answers of every other claim in the call.
//!
//! This module decides no allocation: which accelerators a claim holds is the resolver's answer
//! (the scheduler's allocation, read from the API server by [`crate::claims`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use accel_backend::respond::Injection;
use tonic::{Request, Response, Status};

use crate::api::dra;
use crate::cdi::{CdiError, CdiSpecs};

/// A ResourceClaim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One device of a claim's allocation, as the allocation result names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The claim's requests the device serves; empty: all of them.
    pub request_names: Vec<String>,
    pub pool_name: String,
    pub device_name: String,
}

/// What a claim resolves to on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedClaim {
    /// The claim's devices of this driver.
    pub devices: Vec<AllocatedDevice>,
    /// What the claim's containers are given, for all its devices together: the responder's
    /// answer for the same accelerators as one device-plugin grant (a visibility variable
    /// names every accelerator at once, so the answer is per claim, not per device).
    pub injection: Injection,
}

/// Why a claim could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The claim holds no device of this driver on this node (not allocated, allocated
    /// elsewhere, or already gone).
    #[error("claim {namespace}/{name} ({uid}) has no device of this driver on this node")]
    NotAllocated {
        namespace: String,
        name: String,
        uid: String,
    },
    /// The ResourceClaim could not be read from the API server.
    #[error("cannot read ResourceClaim {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        /// Boxed: the client's error is large and this enum travels in every claim's answer.
        #[source]
        source: Box<kube::Error>,
    },
    /// The ResourceClaim of that name is another claim than the kubelet's (deleted and made
    /// again since the kubelet read it).
    #[error(
        "ResourceClaim {namespace}/{name} has uid {found}, not the {expected} the kubelet asked to prepare"
    )]
    UidMismatch {
        namespace: String,
        name: String,
        expected: String,
        found: String,
    },
    /// The claim's devices were allocated by other drivers only.
    #[error("claim {namespace}/{name} is allocated to {drivers}, none of it to {driver}")]
    OtherDriver {
        namespace: String,
        name: String,
        driver: String,
        drivers: String,
    },
    /// The claim holds a device of this driver that this node does not publish.
    #[error(
        "claim {namespace}/{name} holds device {pool}/{device} of this driver, which node {node} does not publish"
    )]
    UnknownDevice {
        namespace: String,
        name: String,
        node: String,
        pool: String,
        device: String,
    },
    /// A claim consumes capacity of several devices; a slice is one device's.
    #[error(
        "claim {namespace}/{name} consumes capacity of several devices; a slice claim asks one device"
    )]
    SeveralShares { namespace: String, name: String },
    /// A consumed capacity that is no whole quantity.
    #[error("claim {namespace}/{name}: consumed capacity {key}={value:?} {reason}")]
    Consumed {
        namespace: String,
        name: String,
        key: String,
        value: String,
        reason: String,
    },
    /// A claim holds a partition and something else of this driver; a partition is granted
    /// alone.
    #[error(
        "claim {namespace}/{name} holds partition {device} and other devices of this driver; a claim asks one partition alone"
    )]
    PartitionNotAlone {
        namespace: String,
        name: String,
        device: String,
    },
    /// The claim is reserved for no Pod yet (the kubelet prepares only reserved claims).
    #[error("claim {namespace}/{name} is reserved for no Pod")]
    NotReserved { namespace: String, name: String },
    /// The ledger or the manufacturer's responder refused the claim's accelerators (the
    /// refusal names the claim and why).
    #[error("{0}")]
    Granted(String),
}

/// Resolves a claim to the project's accelerators and the injection for them. The kubelet-side
/// service only asks; the answer (the claim's allocation from the API server, the ledger, the
/// responder) is the implementation's.
pub trait ClaimResolver: Send + Sync + 'static {
    /// The claim's devices and injection, or why there are none.
    fn resolve(
        &self,
        claim: &ClaimRef,
    ) -> impl Future<Output = Result<ResolvedClaim, ResolveError>> + Send;

    /// Gives back what resolving the claim took (its grant in the ledger), once its CDI spec
    /// is gone; called for every unprepare and for a prepare whose spec could not be written.
    /// Nothing by default.
    fn release(&self, claim: &ClaimRef) -> impl Future<Output = ()> + Send {
        let _ = claim;
        async {}
    }
}

/// Why one claim was not prepared or unprepared: the text of its per-claim error.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Cdi(#[from] CdiError),
}

/// The `DRAPlugin` service over a resolver and one manufacturer's CDI specs.
#[derive(Debug)]
pub struct DraService<R> {
    resolver: Arc<R>,
    specs: CdiSpecs,
}

impl<R: ClaimResolver> DraService<R> {
    pub fn new(resolver: Arc<R>, specs: CdiSpecs) -> DraService<R> {
        DraService { resolver, specs }
    }

    async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<dra::Device>, ClaimError> {
        // A uid that cannot name the spec is refused before anything is resolved.
        self.specs.spec_path(&claim.uid)?;
        let resolved = self.resolver.resolve(claim).await?;
        let ids = match self.specs.write(&claim.uid, &resolved.injection) {
            Ok(ids) => ids,
            Err(e) => {
                // Nothing the container could use was written: what was taken goes back.
                self.resolver.release(claim).await;
                return Err(e.into());
            }
        };
        Ok(resolved
            .devices
            .into_iter()
            .map(|d| dra::Device {
                request_names: d.request_names,
                pool_name: d.pool_name,
                device_name: d.device_name,
                cdi_device_ids: ids.clone(),
            })
            .collect())
    }
}

fn claim_ref(claim: dra::Claim) -> ClaimRef {
    ClaimRef {
        namespace: claim.namespace,
        name: claim.name,
        uid: claim.uid,
    }
}

/// The per-claim error text: the error and each of its causes on one line, the one place a
/// claim's failure becomes the kubelet's words (and the daemon's log's).
pub fn error_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[tonic::async_trait]
impl<R: ClaimResolver> dra::dra_plugin_server::DraPlugin for DraService<R> {
    async fn node_prepare_resources(
        &self,
        request: Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<dra::NodePrepareResourcesResponse>, Status> {
        let mut claims = BTreeMap::new();
        for claim in request.into_inner().claims.into_iter().map(claim_ref) {
            let answer = match self.prepare(&claim).await {
                Ok(devices) => {
                    tracing::info!(claim = %claim.uid, namespace = %claim.namespace, name = %claim.name, devices = devices.len(), "prepared claim");
                    dra::NodePrepareResourceResponse {
                        devices,
                        error: String::new(),
                    }
                }
                Err(e) => {
                    let error = error_text(&e);
                    tracing::warn!(claim = %claim.uid, namespace = %claim.namespace, name = %claim.name, %error, "claim not prepared");
                    dra::NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            claims.insert(claim.uid, answer);
        }
        Ok(Response::new(dra::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<dra::NodeUnprepareResourcesResponse>, Status> {
        let mut claims = BTreeMap::new();
        for claim in request.into_inner().claims.into_iter().map(claim_ref) {
            let removed = self.specs.remove(&claim.uid);
            if removed.is_ok() {
                // The spec is gone, so no container can be given the devices any more.
                self.resolver.release(&claim).await;
            }
            let error = match removed {
                Ok(()) => {
                    tracing::info!(claim = %claim.uid, namespace = %claim.namespace, name = %claim.name, "unprepared claim");
                    String::new()
                }
                Err(e) => {
                    let error = error_text(&e);
                    tracing::warn!(claim = %claim.uid, %error, "claim not unprepared");
                    error
                }
            };
            claims.insert(claim.uid, dra::NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(dra::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}
