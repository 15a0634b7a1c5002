//! The kube-rs edges of device-manager. For now: the webhook's pool lookup, following a queue to
//! its pool through Kueue's objects (LocalQueue → ClusterQueue → ResourceFlavors' accelerator
//! group labels), the nodes' `<group>.count` labels and the pool's `Devices` specs, all from watch
//! caches so a review never waits on the API server (DESIGN.md, "The webhook's pool").
//!
//! The resolution is a pure function over the cached objects ([`resolve`]); the caches
//! ([`cache`]) are thin reflectors. The cluster-integration issue adds the Devices CRD wrapper,
//! the NodeFeature publisher and the ledger mirror here. [`pods`] watches this node's Pods for the
//! device plugin (accel-plugin's `PodSource`). [`crd`] holds the `Devices` and `NodeFeature`
//! types (the CRD YAML is generated from them); [`publish`] is the node daemon's publisher of
//! the NodeFeature, `Devices`, the Pods' allocation annotations and the Node's capacity keys.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cache;
pub mod crd;
pub mod pods;
pub mod publish;
pub mod resolve;

pub use cache::PoolCache;
pub use pods::NodePods;
pub use publish::{
    ClusterApi, Desired, Publisher, PublisherConfig, PublisherHandle, pod_annotations,
};
