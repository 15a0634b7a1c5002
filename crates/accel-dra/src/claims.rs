//! The [`ClaimResolver`] that reads a claim's allocation from the API server: the
//! `resource.k8s.io/v1` ResourceClaim the kubelet names (namespace, name, and the uid it must
//! still have), its `status.allocation.devices.results` of this driver, each result's device
//! name mapped back to the accelerator index (or the partition placement) it was published for
//! ([`crate::slices`]), and the
//! Pod it is reserved for (`status.reservedFor`). The grant itself is a [`ClaimLedger`]'s: the
//! daemon's is the device plugin's one ledger, which charges and journals the claim and answers
//! the manufacturer's responder's injection for it.
//!
//! This module decides no allocation (the scheduler's is read, never changed) and writes
//! nothing to the API server. [`live_claims`] lists which claims are still
//! prepared-worthy here, so a claim gone while no unprepare reached us is reclaimed.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::RwLock;

use accel_backend::respond::Injection;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use serde::{Deserialize, Serialize};

use crate::plugin::{AllocatedDevice, ClaimRef, ClaimResolver, ResolveError, ResolvedClaim};
use crate::publish::{RESOURCE_GROUP, RESOURCE_VERSION};
use crate::registration::DriverName;
use crate::slices::{self, DeviceRef, PartitionRef};

/// A ResourceClaim, the fields this module reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceClaim {
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClaimStatus>,
}

/// `status` of a ResourceClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// The consumers the claim is reserved for (Pods, for a kubelet's claim).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<ConsumerReference>,
}

/// `status.reservedFor[]`: who uses the claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    pub resource: String,
    pub name: String,
    pub uid: String,
}

/// The Pod a claim is reserved for, as the claim names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// `status.allocation`: what the scheduler allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceAllocation>,
}

/// `status.allocation.devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAllocation {
    #[serde(default)]
    pub results: Vec<DeviceResult>,
}

/// One allocated device: which request it serves and which driver, pool and device it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceResult {
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// Which share of a device that may be allocated several times this is.
    #[serde(default, rename = "shareID", skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What this share consumes of the device's capacities, by qualified name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed_capacity: BTreeMap<String, String>,
}

/// What a claim's share of a device consumes: a logical slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedShare {
    pub share_id: Option<String>,
    /// Bytes of the device's memory.
    pub memory_bytes: Option<u64>,
    /// Percent of the device's compute; `None` where the claim consumed none (no cap).
    pub cores_percentage: Option<u32>,
}

impl kube::Resource for ResourceClaim {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ResourceClaim".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        RESOURCE_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        RESOURCE_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "resourceclaims".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Where a resolved claim is granted: charged to its accelerators, made durable, and answered
/// with what its containers are given (the manufacturer's responder, asked as for one grant of
/// these accelerators).
pub trait ClaimLedger: Send + Sync + 'static {
    /// Grants `devices` (the allocation's device names) on `indexes` (ascending, without
    /// repeats) to `claim`, reserved for `pod`; a retried prepare is answered again without a
    /// second charge. The error is the refusal's one line.
    /// `share` is the slice a claim consumes of its one device; `None`: whole devices.
    /// `partition` is the one partition placement the claim holds (made at this placement by
    /// the grant); `None`: no partition.
    fn grant(
        &self,
        claim: &ClaimRef,
        pod: &ReservedPod,
        devices: &[String],
        indexes: &[u32],
        share: Option<&ConsumedShare>,
        partition: Option<&PartitionRef>,
    ) -> impl Future<Output = Result<Injection, String>> + Send;

    /// Releases the claim's grant (a partition's instance destroyed first); whether it held
    /// one.
    fn release(&self, claim_uid: &str) -> impl Future<Output = bool> + Send;
}

/// Resolves claims of one driver on one node from the API server.
pub struct ApiClaimResolver<I> {
    client: kube::Client,
    driver: DriverName,
    node: String,
    /// The devices this node publishes now, by name.
    published: RwLock<BTreeMap<String, DeviceRef>>,
    ledger: I,
}

impl<I> std::fmt::Debug for ApiClaimResolver<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClaimResolver")
            .field("driver", &self.driver)
            .field("node", &self.node)
            .finish()
    }
}

impl<I: ClaimLedger> ApiClaimResolver<I> {
    /// A resolver for the claims of `driver` (one manufacturer's) on `node`, which knows no
    /// device until [`ApiClaimResolver::set_published_section`] is told the node's published
    /// section.
    pub fn new(
        client: kube::Client,
        driver: DriverName,
        node: &str,
        ledger: I,
    ) -> ApiClaimResolver<I> {
        ApiClaimResolver {
            client,
            driver,
            node: node.to_string(),
            published: RwLock::new(BTreeMap::new()),
            ledger,
        }
    }

    /// The devices of the published section, whole and partitions, by the one publication
    /// rule ([`slices::published_devices`]), without building the slices again.
    pub fn set_published_section(&self, section: &accel_core::inventory::ManufacturerInventory) {
        self.replace_published(slices::published_devices(section));
    }

    fn replace_published(&self, devices: BTreeMap<String, DeviceRef>) {
        // A poisoned lock still holds a whole map (it is only ever replaced).
        *self.published.write().unwrap_or_else(|e| e.into_inner()) = devices;
    }

    /// The claim's results of this driver as accelerator indexes (and the partition placement
    /// of a partition claim), or why there are none.
    fn our_devices(
        &self,
        claim: &ClaimRef,
        results: &[DeviceResult],
    ) -> Result<OurDevices, ResolveError> {
        let ours: Vec<&DeviceResult> = results
            .iter()
            .filter(|r| r.driver == self.driver.as_str())
            .collect();
        if ours.is_empty() {
            if results.is_empty() {
                return Err(ResolveError::NotAllocated {
                    namespace: claim.namespace.clone(),
                    name: claim.name.clone(),
                    uid: claim.uid.clone(),
                });
            }
            let drivers: BTreeSet<&str> = results.iter().map(|r| r.driver.as_str()).collect();
            return Err(ResolveError::OtherDriver {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                driver: self.driver.to_string(),
                drivers: drivers.into_iter().collect::<Vec<_>>().join(", "),
            });
        }
        // Read under the lock, not copied: a MIG node publishes a device per placement.
        let published = self.published.read().unwrap_or_else(|e| e.into_inner());
        let mut indexes = BTreeSet::new();
        let mut devices = Vec::new();
        let mut partition = None;
        let count = ours.len();
        for result in ours {
            let found = published
                .get(&result.device)
                .filter(|_| result.pool == self.node)
                .ok_or_else(|| ResolveError::UnknownDevice {
                    namespace: claim.namespace.clone(),
                    name: claim.name.clone(),
                    node: self.node.clone(),
                    pool: result.pool.clone(),
                    device: result.device.clone(),
                })?;
            if let DeviceRef::Partition(p) = found {
                if count > 1 {
                    return Err(ResolveError::PartitionNotAlone {
                        namespace: claim.namespace.clone(),
                        name: claim.name.clone(),
                        device: result.device.clone(),
                    });
                }
                partition = Some(p.clone());
            }
            indexes.insert(found.index());
            devices.push(AllocatedDevice {
                request_names: vec![result.request.clone()],
                pool_name: result.pool.clone(),
                device_name: result.device.clone(),
            });
        }
        Ok(OurDevices {
            devices,
            indexes: indexes.into_iter().collect(),
            partition,
        })
    }
}

/// A claim's results of this driver, read.
struct OurDevices {
    devices: Vec<AllocatedDevice>,
    /// The accelerators, ascending.
    indexes: Vec<u32>,
    /// The partition placement of a partition claim.
    partition: Option<PartitionRef>,
}

/// The slice a claim consumes: its one result of `driver` that consumed capacity, read; `None`
/// when no result of ours consumed any (whole devices).
fn consumed_share(
    claim: &ClaimRef,
    driver: &str,
    results: &[DeviceResult],
) -> Result<Option<ConsumedShare>, ResolveError> {
    let ours: Vec<&DeviceResult> = results.iter().filter(|r| r.driver == driver).collect();
    if ours.iter().all(|r| r.consumed_capacity.is_empty()) {
        return Ok(None);
    }
    let [result] = ours.as_slice() else {
        return Err(ResolveError::SeveralShares {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
        });
    };
    let read = |name: &str| -> Result<Option<u64>, ResolveError> {
        let key = format!("{}/{name}", slices::ATTRIBUTE_DOMAIN);
        let Some(value) = result.consumed_capacity.get(&key) else {
            return Ok(None);
        };
        accel_core::quantity::parse_count(value)
            .map(Some)
            .map_err(|e| ResolveError::Consumed {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                key: key.clone(),
                value: value.clone(),
                reason: e.to_string(),
            })
    };
    let memory_bytes = read("memory")?;
    let cores_percentage = read(slices::CORES_PERCENTAGE)?
        .filter(|c| *c > 0)
        .map(|c| u32::try_from(c.min(100)).unwrap_or(100));
    Ok(Some(ConsumedShare {
        share_id: result.share_id.clone(),
        memory_bytes,
        cores_percentage,
    }))
}

/// Whether a claim's status holds a result of `driver` in pool `node`.
fn allocated_here(status: &ClaimStatus, driver: &str, node: &str) -> bool {
    status
        .allocation
        .as_ref()
        .and_then(|a| a.devices.as_ref())
        .is_some_and(|d| {
            d.results
                .iter()
                .any(|r| r.driver == driver && r.pool == node)
        })
}

impl<I: ClaimLedger> ApiClaimResolver<I> {
    /// The ledger the claims are granted in.
    pub fn ledger(&self) -> &I {
        &self.ledger
    }
}

/// The UIDs of the claims that may be prepared on `node` now: each allocated a device of
/// `driver` there and reserved for some consumer. A claim the ledger holds that is not among
/// them (deleted with its Pod, or no longer reserved) is to be reclaimed.
pub async fn live_claims(
    client: &kube::Client,
    driver: &DriverName,
    node: &str,
) -> Result<BTreeSet<String>, kube::Error> {
    let claims: Api<ResourceClaim> = Api::all(client.clone());
    let list = claims.list(&kube::api::ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                !s.reserved_for.is_empty() && allocated_here(s, driver.as_str(), node)
            })
        })
        .filter_map(|c| c.metadata.uid)
        .collect())
}

impl<I: ClaimLedger> ClaimResolver for ApiClaimResolver<I> {
    async fn resolve(&self, claim: &ClaimRef) -> Result<ResolvedClaim, ResolveError> {
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = claims
            .get(&claim.name)
            .await
            .map_err(|source| ResolveError::Read {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                source: Box::new(source),
            })?;
        let found = object.metadata.uid.unwrap_or_default();
        if found != claim.uid {
            return Err(ResolveError::UidMismatch {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                expected: claim.uid.clone(),
                found,
            });
        }
        let status = object.status.unwrap_or_default();
        let results = status
            .allocation
            .and_then(|a| a.devices)
            .map(|d| d.results)
            .unwrap_or_default();
        let OurDevices {
            devices,
            indexes,
            partition,
        } = self.our_devices(claim, &results)?;
        let pod = status
            .reserved_for
            .iter()
            .find(|r| r.api_group.is_empty() && r.resource == "pods")
            .map(|r| ReservedPod {
                namespace: claim.namespace.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
            })
            .ok_or_else(|| ResolveError::NotReserved {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
            })?;
        let share = consumed_share(claim, self.driver.as_str(), &results)?;
        let names: Vec<String> = devices.iter().map(|d| d.device_name.clone()).collect();
        let injection = self
            .ledger
            .grant(
                claim,
                &pod,
                &names,
                &indexes,
                share.as_ref(),
                partition.as_ref(),
            )
            .await
            .map_err(ResolveError::Granted)?;
        Ok(ResolvedClaim { devices, injection })
    }

    async fn release(&self, claim: &ClaimRef) {
        self.ledger.release(&claim.uid).await;
    }
}
