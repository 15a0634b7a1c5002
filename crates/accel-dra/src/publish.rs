//! Publishing a node's devices: one `resource.k8s.io/v1` pool per node and manufacturer,
//! written through the API server as one ResourceSlice (`<node>-<driver>`) or, where the API's
//! bounds need more (partitionable cards: their counter sets in slices of their own), that one
//! and `<node>-<driver>-1`, `-2`, …. Each slice is created with the Node as its owner (so it
//! goes when the Node goes); when anything in the pool changes every slice is written at the
//! bumped pool generation and a slice the pool no longer needs is deleted; when nothing changed
//! nothing is written.
//!
//! This module writes what [`crate::slices`] computes and decides nothing about which
//! accelerators are devices. It takes a measured section, never a failed pass: a detection that
//! could not measure is not a manufacturer with no accelerators, so the caller keeps the slice
//! as it is by not calling [`SlicePublisher::publish`].

use std::borrow::Cow;

use accel_core::inventory::ManufacturerInventory;
use accel_core::labels::GroupNaming;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use serde::{Deserialize, Serialize};

use crate::registration::DriverName;
use crate::slices::{self, ResourceSliceSpec, SliceError};

/// The API group of the DRA objects (`resource.k8s.io/v1`, Kubernetes 1.34+).
pub const RESOURCE_GROUP: &str = "resource.k8s.io";
/// The version of the DRA objects read and written.
pub const RESOURCE_VERSION: &str = "v1";

/// A ResourceSlice as this project writes and reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSlice {
    /// `resource.k8s.io/v1`, sent with every write as the API server expects.
    #[serde(default = "slice_api_version")]
    pub api_version: String,
    #[serde(default = "slice_kind")]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ResourceSliceSpec,
}

fn slice_api_version() -> String {
    format!("{RESOURCE_GROUP}/{RESOURCE_VERSION}")
}

fn slice_kind() -> String {
    "ResourceSlice".into()
}

impl kube::Resource for ResourceSlice {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ResourceSlice".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        RESOURCE_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        RESOURCE_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "resourceslices".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The slice did not exist and was created at this generation.
    Created { generation: i64 },
    /// The devices changed; the slice was replaced at this (bumped) generation.
    Updated { generation: i64 },
    /// The slice already held these devices; nothing was written.
    Unchanged { generation: i64 },
}

/// Why a slice was not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The section cannot be a slice (the reason names what and where).
    #[error(transparent)]
    Slice(#[from] SliceError),
    /// The slice's name, `<node>-<driver>`, is longer than an object name may be.
    #[error(
        "ResourceSlice name {name:?} is longer than 253 characters (node name and driver together)"
    )]
    Name { name: String },
    /// The current slice could not be read.
    #[error("cannot read ResourceSlice {name}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The Node that will own the slice could not be read.
    #[error("cannot read Node {node}, the owner of its ResourceSlices")]
    Node {
        node: String,
        #[source]
        source: kube::Error,
    },
    /// The Node the API server answered has no uid to own the slice by.
    #[error("Node {node} has no uid; its ResourceSlice cannot name it as owner")]
    NodeUid { node: String },
    /// The slice could not be created or replaced.
    #[error("cannot write ResourceSlice {name}")]
    Write {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Publishes one node's slices.
#[derive(Clone)]
pub struct SlicePublisher {
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    node: String,
    naming: GroupNaming,
    sharing: slices::Sharing,
}

impl std::fmt::Debug for SlicePublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlicePublisher")
            .field("node", &self.node)
            .field("naming", &self.naming)
            .finish()
    }
}

/// The slice of `driver` on `node`: one name per node and driver, so the publisher finds its
/// own slice with one read instead of a list.
pub fn slice_name(node: &str, driver: &DriverName) -> String {
    format!("{node}-{driver}")
}

/// The `k`th slice of the pool: the first is [`slice_name`], the others `<node>-<driver>-<k>`.
pub fn pool_slice_name(node: &str, driver: &DriverName, k: usize) -> String {
    match k {
        0 => slice_name(node, driver),
        k => format!("{node}-{driver}-{k}"),
    }
}

/// The longest object name (a DNS subdomain).
const OBJECT_NAME_MAX: usize = 253;

impl SlicePublisher {
    pub fn new(client: kube::Client, node: &str, naming: GroupNaming) -> SlicePublisher {
        SlicePublisher {
            slices: Api::all(client.clone()),
            nodes: Api::all(client),
            node: node.to_string(),
            naming,
            sharing: slices::Sharing::Whole,
        }
    }

    /// Publishes the devices shared as `sharing` says (whole devices unless told).
    pub fn with_sharing(mut self, sharing: slices::Sharing) -> SlicePublisher {
        self.sharing = sharing;
        self
    }

    /// Makes `driver`'s pool on this node hold `section`'s devices.
    pub async fn publish(
        &self,
        driver: &DriverName,
        section: &ManufacturerInventory,
    ) -> Result<Published, PublishError> {
        let mut specs =
            slices::pool_specs(driver, &self.node, section, self.naming, 1, self.sharing)?;
        let first = slice_name(&self.node, driver);
        let longest = pool_slice_name(&self.node, driver, specs.len().saturating_sub(1));
        if longest.len() > OBJECT_NAME_MAX {
            return Err(PublishError::Name { name: longest });
        }
        let Some(head) = self.read(&first).await? else {
            // A pool not published yet: its slices are created at generation 1 (a stray later
            // slice of an earlier pool is replaced, not refused).
            let owner = self.owner().await?;
            for (k, spec) in specs.into_iter().enumerate() {
                let name = pool_slice_name(&self.node, driver, k);
                let stray = match k {
                    0 => None,
                    _ => self.read(&name).await?,
                };
                match stray {
                    None => self.create(name, spec, &owner).await?,
                    Some(mut stray) => {
                        stray.spec = spec;
                        self.replace(&name, &stray).await?;
                    }
                }
            }
            return Ok(Published::Created { generation: 1 });
        };
        let generation = head.spec.pool.generation;
        let had = usize::try_from(head.spec.pool.resource_slice_count)
            .unwrap_or(1)
            .max(1);
        let mut current = vec![Some(head)];
        for k in 1..had.max(specs.len()) {
            current.push(self.read(&pool_slice_name(&self.node, driver, k)).await?);
        }
        for spec in &mut specs {
            spec.pool.generation = generation;
        }
        let same = current.len() == specs.len()
            && current
                .iter()
                .zip(&specs)
                .all(|(c, s)| c.as_ref().is_some_and(|c| c.spec == *s));
        if same {
            return Ok(Published::Unchanged { generation });
        }
        let generation = generation.saturating_add(1);
        let mut owner = None;
        let wanted = specs.len();
        for (k, mut spec) in specs.into_iter().enumerate() {
            spec.pool.generation = generation;
            let name = pool_slice_name(&self.node, driver, k);
            match current.get_mut(k).and_then(Option::take) {
                // The read's resourceVersion travels with the replacement: a slice changed in
                // between is refused (409) rather than overwritten, and the next pass
                // publishes again.
                Some(mut slice) => {
                    slice.spec = spec;
                    self.replace(&name, &slice).await?;
                }
                None => {
                    if owner.is_none() {
                        owner = Some(self.owner().await?);
                    }
                    if let Some(owner) = &owner {
                        self.create(name, spec, owner).await?;
                    }
                }
            }
        }
        for (k, stray) in current.iter().enumerate().skip(wanted) {
            if stray.is_some() {
                let name = pool_slice_name(&self.node, driver, k);
                self.slices
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map_err(|source| PublishError::Write { name, source })?;
            }
        }
        Ok(Published::Updated { generation })
    }

    async fn read(&self, name: &str) -> Result<Option<ResourceSlice>, PublishError> {
        self.slices
            .get_opt(name)
            .await
            .map_err(|source| PublishError::Read {
                name: name.to_string(),
                source,
            })
    }

    async fn replace(&self, name: &str, slice: &ResourceSlice) -> Result<(), PublishError> {
        self.slices
            .replace(name, &PostParams::default(), slice)
            .await
            .map(|_| ())
            .map_err(|source| PublishError::Write {
                name: name.to_string(),
                source,
            })
    }

    /// The Node as the owner of its slices.
    async fn owner(&self) -> Result<OwnerReference, PublishError> {
        let node = self
            .nodes
            .get(&self.node)
            .await
            .map_err(|source| PublishError::Node {
                node: self.node.clone(),
                source,
            })?;
        let Some(uid) = node.metadata.uid else {
            return Err(PublishError::NodeUid {
                node: self.node.clone(),
            });
        };
        Ok(OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node.clone(),
            uid,
            ..OwnerReference::default()
        })
    }

    async fn create(
        &self,
        name: String,
        spec: ResourceSliceSpec,
        owner: &OwnerReference,
    ) -> Result<(), PublishError> {
        let slice = ResourceSlice {
            api_version: slice_api_version(),
            kind: slice_kind(),
            metadata: ObjectMeta {
                name: Some(name.clone()),
                owner_references: Some(vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            spec,
        };
        self.slices
            .create(&PostParams::default(), &slice)
            .await
            .map_err(|source| PublishError::Write { name, source })?;
        Ok(())
    }
}
