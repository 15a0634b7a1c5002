//! The manufacturer seam: the narrow traits a manufacturer's backend implements, and the plain
//! data they exchange with the manufacturer-neutral core.
//!
//! Each concern is its own trait, so a manufacturer implements only what it has:
//! - [`detect::Detector`] — one detection pass over the host: the inventory section, whose
//!   facts (products, VRAM, runtime version, MIG mode, health) are all the labels, the ledger's
//!   seats and the `Devices` spec are built from;
//! - [`respond::Responder`] — what a grant injects into its container, per family: environment,
//!   device nodes, mounts, annotations, CDI device names ([`respond::Injection`]);
//! - [`slicing::SlicingLibrary`] — the preload library's layout on the host and the gate
//!   "slices only where the library for the node's runtime generation is staged";
//! - [`partition::Partitioner`] — hardware partitions (the MIG work's seam), optional;
//! - [`health::FaultClassifier`] — which kernel-log lines are the manufacturer's faults and
//!   whose fault each is (hardware or the workload's); the fault record they feed
//!   ([`faults`], `faults.json`, the boot rule) is the same for every manufacturer;
//! - [`preflight::Preflight`] — what `device-manager preflight` needs to know of the manufacturer
//!   (its host CLI, driver-read row, probe image and reader), optional.
//!
//! The ledger, the token pools, container identification, the journal, publishing and the
//! webhook never see a manufacturer's name through these traits: they take the facts
//! (a resource base, the families offered, an [`respond::Injection`]). [`Backend`] is one
//! manufacturer's row of implementations; the binary keeps the registry of rows. This crate
//! holds no manufacturer's knowledge and reads nothing of the host itself; the one file it
//! keeps is the daemon's fault record ([`faults`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod chores;
pub mod detect;
pub mod faults;
pub mod health;
pub mod partition;
pub mod pod;
pub mod preflight;
pub mod respond;
pub mod slicing;

use std::sync::Arc;

use accel_core::Manufacturer;

pub use detect::{Deadlines, DetectRequest, Detector, StateError};
pub use partition::{
    Geometry, Instance, PartitionError, PartitionErrorKind, PartitionGpu, Partitioner,
    ProfileGeometry,
};
pub use pod::{Container, Phase, Pod};
pub use respond::{
    Answer, Channel, DeviceNode, EngineFacts, EngineSource, Injection, InjectionStrategy, Mount,
    PrepareError, Responder, ResponderError, ResponderSetup,
};
pub use slicing::{SliceOffer, SlicingLibrary};

/// Builds a manufacturer's responder once the node's facts are known (the first detection).
pub type ResponderFactory = fn(ResponderSetup) -> Arc<dyn Responder>;

/// One manufacturer's backend: the traits it implements. A new manufacturer is a crate
/// providing one of these and a row in the binary's registry (`device-manager/src/backends.rs`).
#[derive(Clone)]
pub struct Backend {
    pub manufacturer: Manufacturer,
    pub detector: Arc<dyn Detector>,
    /// `None`: the manufacturer has no logical slicing here.
    pub slicing: Option<Arc<dyn SlicingLibrary>>,
    /// `None`: no hardware partitions (no `.partitioned` pool is offered).
    pub partitioner: Option<Arc<dyn Partitioner>>,
    pub responder: ResponderFactory,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("manufacturer", &self.manufacturer)
            .field("slicing", &self.slicing.is_some())
            .field("partitioner", &self.partitioner.is_some())
            .finish_non_exhaustive()
    }
}
