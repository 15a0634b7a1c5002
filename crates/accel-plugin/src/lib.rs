//! The kubelet device plugin: token pools per family, the Allocate pipeline (identify the
//! container, ask the ledger, answer with the manufacturer's injection), ListAndWatch with
//! health, and the node-local ledger journal.
//!
//! The kubelet's two APIs (device plugin v1beta1, pod-resources v1) are spoken over unix sockets
//! with tonic; their generated code is committed under `src/gen/`. The accounting itself is
//! `accel_core::ledger`; this crate must not re-implement a rule of it.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod budget;
pub mod identify;
pub mod journal;
pub mod metrics;
pub mod ownership;
pub mod pods;
pub mod pools;
pub mod rdma;
pub mod service;
pub mod settings;
pub mod socket;
#[cfg(feature = "testing")]
pub mod testing;

pub use metrics::PluginMetrics;
pub use service::{Config, DevicePlugins, Offer, Partitions, PluginHandle, StartError};
