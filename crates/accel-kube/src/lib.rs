//! The kube-rs edges of device-manager, each thin and behind a trait with an in-memory twin.
//!
//! The webhook's pool lookup follows a queue to its pool through Kueue's objects (LocalQueue →
//! ClusterQueue → ResourceFlavors' accelerator group labels), the nodes' `<group>.count` labels
//! and the pool's `Devices` specs, all from watch caches so a review never waits on the API
//! server (DESIGN.md, "The webhook's pool"): the resolution is a pure function over the cached
//! objects ([`resolve`]); the caches ([`cache`]) are thin reflectors, the RuntimeClass names
//! among them (the mutating webhook attaches a manufacturer's class only when it exists). [`pods`] watches this
//! node's Pods for the device plugin (accel-plugin's `PodSource`). [`crd`] holds the `Devices`
//! and `NodeFeature` types (the CRD YAML is generated from them); [`publish`] is the node
//! daemon's publisher of the NodeFeature, `Devices`, the Pods' allocation annotations and the
//! Node's capacity keys. [`worker`] holds the worker's cluster-level controllers (the managed
//! mark, the CPU node key, Devices clean-up, [`nfr`]'s NodeFeatureRule), run on the replica
//! [`lease`] elects. [`cleanup`] removes what the daemons and the worker created, on uninstall.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cache;
pub mod cleanup;
pub mod crd;
pub mod lease;
pub mod nfr;
pub mod pods;
pub mod publish;
pub mod resolve;
pub mod worker;

pub use cache::PoolCache;
pub use pods::NodePods;
pub use publish::{
    ClusterApi, Desired, Publisher, PublisherConfig, PublisherHandle, pod_annotations,
};
