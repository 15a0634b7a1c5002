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
//!   [`mig_cli`] drives it for the tools that speak the `nvidia-smi mig` dialect (nvidia-smi,
//!   T-Head's ppu-smi);
//! - [`health::FaultClassifier`] — which kernel-log lines are the manufacturer's faults and
//!   whose fault each is (hardware or the workload's); the fault record they feed
//!   ([`faults`], `faults.json`, the boot rule) is the same for every manufacturer;
//! - [`preflight::Preflight`] — what `device-manager preflight` needs to know of the manufacturer
//!   (its host CLI, driver-read row, probe image and reader), optional;
//! - [`doctor::Doctor`] — `device-manager doctor`'s checks, in the one [`doctor::Check`] shape;
//! - [`usage::UsageSampler`] — live usage in the one [`usage::UsageSample`] shape (`monitor`,
//!   the `device_manager_gpu_*` gauges), optional;
//! - [`reset::Reset`] — the admin socket's reset: a [`reset::Resetter`], or why not;
//! - [`record::RecordPlan`] — what `device-manager record` captures for it;
//! - [`vendor_runtime`] — what the manufacturers whose container runtime does the injecting
//!   share (one visible-devices variable, the RuntimeClass doctor check).
//!
//! The ledger, the token pools, container identification, the journal, publishing and the
//! webhook never see a manufacturer's name through these traits: they take the facts
//! (a resource base, the families offered, an [`respond::Injection`]). [`Backend`] is one
//! manufacturer's row of implementations; the binary keeps the registry of rows. This crate
//! holds no manufacturer's knowledge and reads nothing of the host itself; what it writes is
//! the daemon's fault record ([`faults`]) and the per-Pod files a responder's chores make
//! ([`chores`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod chores;
pub mod detect;
pub mod doctor;
pub mod faults;
pub mod health;
pub mod mig_cli;
pub mod partition;
pub mod pod;
pub mod preflight;
pub mod record;
pub mod reset;
pub mod respond;
pub mod slicing;
pub mod text;
pub mod usage;
pub mod vendor_runtime;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_core::Manufacturer;
use accel_host::{Commands, Host, HostWrites};

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
pub use usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler};

/// Builds a manufacturer's responder once the node's facts are known (the first detection).
pub type ResponderFactory = fn(ResponderSetup) -> Arc<dyn Responder>;

/// Builds the source of the container engine's facts a responder's `auto` reads (the host,
/// and the engine's configuration directory on it), re-read when its files change.
pub type EngineFactory = fn(Arc<dyn Host>, &Path) -> Arc<dyn EngineSource>;

/// Wraps a recorded host's replayed commands (the recording folder given), where the
/// manufacturer keeps state a replay must answer from (NVIDIA: `mig-state.json`).
pub type ReplayWrapper = fn(&Path, Box<dyn Commands>) -> Box<dyn Commands>;

/// Wraps a recorded host's control-file writes (the recording folder given), where the
/// manufacturer's driver objects are made by writing sysfs (MetaX: `sgpu/create` makes a
/// subdevice a later read lists).
pub type WritesWrapper = fn(&Path, Arc<dyn HostWrites>) -> Arc<dyn HostWrites>;

/// Builds a manufacturer's fault classifier from its settings' values.
pub type FaultsBuilder =
    fn(&BTreeMap<String, String>) -> Result<Arc<dyn health::FaultClassifier>, String>;

/// A manufacturer's kernel-log fault knowledge and the settings that shape it.
#[derive(Clone, Copy)]
pub struct FaultKnowledge {
    /// The settings (environment variables) the classifier reads, e.g.
    /// `GPUSTACK_NVIDIA_XID_APPLICATION`.
    pub settings: &'static [&'static str],
    /// Builds the classifier from those settings' values (an absent one keeps its default);
    /// a bad value is one line starting with the variable's name.
    pub build: FaultsBuilder,
}

impl FaultKnowledge {
    /// The classifier under `vars` (only this knowledge's settings are read).
    pub fn classifier(
        &self,
        vars: &BTreeMap<String, String>,
    ) -> Result<Arc<dyn health::FaultClassifier>, String> {
        (self.build)(vars)
    }
}

/// Where a manufacturer's own tools live on a host: its driver's packages install them there
/// (and link them against libraries there), so the daemon looks for them under the host root —
/// the host's own search path first ([`accel_host::HOST_SEARCH_PATH`]), then these install
/// directories — and runs them inside it ([`accel_host::HostTools`]).
/// `GPUSTACK_<MANUFACTURER>_TOOLS_PATH` replaces the whole search path; each manufacturer's
/// docs page lists its places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostToolDirs {
    /// The manufacturer's tools by name (`npu-smi`): every program its record plan runs.
    pub programs: &'static [&'static str],
    /// Where its packages install them, searched after the host's own search path.
    pub install_dirs: &'static [&'static str],
    /// Where their libraries are, handed to them in `LD_LIBRARY_PATH` where they exist.
    pub library_dirs: &'static [&'static str],
}

impl HostToolDirs {
    /// The places the runner searches by default.
    pub fn places(&self) -> accel_host::ToolPlaces {
        accel_host::ToolPlaces::vendor(self.programs, self.install_dirs, self.library_dirs)
    }
}

/// Where a manufacturer's daemon keeps its node-local state under the daemons' root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateDirRule {
    /// The root itself (NVIDIA: every NVIDIA node has kept its journal there since the first
    /// release, so an upgrade moves nothing).
    Root,
    /// `<root>/<manufacturer>`, so two manufacturers' daemons on one node never share one.
    Named,
}

impl StateDirRule {
    /// The state directory of `manufacturer` under `root`.
    pub fn dir(self, root: &Path, manufacturer: Manufacturer) -> PathBuf {
        match self {
            StateDirRule::Root => root.to_path_buf(),
            StateDirRule::Named => root.join(manufacturer.name()),
        }
    }
}

/// One manufacturer's backend: every concern it has, each optional where the manufacturer
/// lacks it. A new manufacturer is a crate providing one of these and a row in the binary's
/// registry (`device-manager/src/backends.rs`); nothing else in the binary, the plugin, the
/// publisher or the webhook names it. Its constants (PCI vendor ids, resource base, runtime
/// class, partition kind, slice count) are its row of accel-core's manufacturers table.
#[derive(Clone)]
pub struct Backend {
    pub manufacturer: Manufacturer,
    pub detector: Arc<dyn Detector>,
    /// `None`: the manufacturer has no logical slicing here.
    pub slicing: Option<Arc<dyn SlicingLibrary>>,
    /// `None`: no hardware partitions (no `.partitioned` pool is offered).
    pub partitioner: Option<Arc<dyn Partitioner>>,
    pub responder: ResponderFactory,
    /// The container engine's facts its responder reads; `None`: it reads none (they are
    /// the defaults: nothing known).
    pub engine: Option<EngineFactory>,
    /// The default of `GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY` where the
    /// manufacturer reads it; `None`: the setting has no effect (the responder injects its
    /// own way).
    pub injection: Option<InjectionStrategy>,
    /// Its kernel-log faults; `None`: its health rests on detection alone.
    pub faults: Option<FaultKnowledge>,
    /// The admin socket's reset.
    pub reset: reset::Reset,
    /// `device-manager doctor`'s checks; `None`: doctor refuses the manufacturer.
    pub doctor: Option<Arc<dyn doctor::Doctor>>,
    /// `device-manager preflight`'s knowledge; `None`: preflight has none.
    pub preflight: Option<Arc<dyn preflight::Preflight>>,
    /// Live usage; `None`: `monitor` and the usage gauges have nothing for it.
    pub sampler: Option<Arc<dyn UsageSampler>>,
    /// What `device-manager record` captures.
    pub record: record::RecordPlan,
    /// Where its tools are on a host, and their libraries.
    pub tools: HostToolDirs,
    /// Where its daemon's state lives under the daemons' root.
    pub state_dir: StateDirRule,
    /// How a recorded host's replay keeps its state, where it has any.
    pub replay: Option<ReplayWrapper>,
    /// How a recorded host answers its control-file writes, where it makes any.
    pub replay_writes: Option<WritesWrapper>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("manufacturer", &self.manufacturer)
            .field("slicing", &self.slicing.is_some())
            .field("partitioner", &self.partitioner.is_some())
            .field("injection", &self.injection)
            .field("faults", &self.faults.map(|f| f.settings))
            .field("reset", &self.reset)
            .field("doctor", &self.doctor.is_some())
            .field("preflight", &self.preflight.is_some())
            .field("sampler", &self.sampler.is_some())
            .field("record", &self.record)
            .field("tools", &self.tools)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}
